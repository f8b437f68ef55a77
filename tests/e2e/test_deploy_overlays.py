"""The kustomize deployment on the proving ground: every overlay builds; the external overlay's
ServiceAccount can do exactly the bridge's pod work and nothing else; the in-cluster overlay runs
slurmctld + bridge as a StatefulSet whose slurmd pods run a real two-node job and go away, and
only its bridge container holds the ServiceAccount's token."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml
from proving_ground import bridge_image

from tests import slurm_state
from tests.conftest import ROOT, ProvingGround

pytestmark = pytest.mark.e2e

KUSTOMIZE_DIR = ROOT / "deploy" / "kustomize"
MUNGE_KEY = KUSTOMIZE_DIR / "base" / "munge.key"
EXTERNAL_NS = "skb-e2e-external"
INCLUSTER_NS = "slurm-incluster"
INCLUSTER_SHARED = Path("/var/lib/slurm-k8s-bridge/incluster")
#: The admission guard (base/admission-policy.yaml): cluster-scoped, the same in every overlay.
POLICY = "slurm-k8s-bridge-pods"
POLICY_KINDS = ("validatingadmissionpolicybinding", "validatingadmissionpolicy")
CLUSTER_SCOPED = {"Namespace", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
#: What the base adds to every overlay: the admission guard (its allow-lists are annotations of
#: the Namespace).
ADMISSION_KINDS = {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
TOKEN_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"  # noqa: S105 (a path)


@pytest.fixture(scope="module")
def munge_key() -> Iterator[Path]:
    """The user provides base/munge.key; a checkout without one gets a throwaway key."""
    created = not MUNGE_KEY.exists()
    if created:
        MUNGE_KEY.write_bytes(secrets.token_bytes(1024))
        MUNGE_KEY.chmod(0o600)
    yield MUNGE_KEY
    if created:
        MUNGE_KEY.unlink()


def kustomize(proving_ground: ProvingGround, path: Path) -> str:
    result = subprocess.run(
        [str(proving_ground.layout.kustomize_bin), "build", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def wait_for(what: str, probe: Callable[[], bool], timeout_s: float, interval_s: float = 2) -> None:
    deadline = time.monotonic() + timeout_s
    while not probe():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}")
        time.sleep(interval_s)


def delete_namespace(proving_ground: ProvingGround, namespace: str) -> None:
    proving_ground.kubectl(
        "delete",
        "namespace",
        namespace,
        "--ignore-not-found",
        "--wait=true",
        "--timeout=180s",
        timeout=200,
    )


def policy_objects(proving_ground: ProvingGround) -> set[str]:
    """The admission guard's cluster-scoped objects that exist now (kind/name)."""
    found = set()
    for kind in POLICY_KINDS:
        if proving_ground.kubectl("get", kind, POLICY, "--ignore-not-found", "-o", "name").strip():
            found.add(f"{kind}/{POLICY}")
    return found


@contextmanager
def admission_policy_cleanup(proving_ground: ProvingGround) -> Iterator[None]:
    """Applying any overlay creates the admission guard's cluster-scoped policy and binding
    (shared by every bridge namespace); afterwards delete those that did not exist before."""
    before = policy_objects(proving_ground)
    try:
        yield
    finally:
        for name in sorted(policy_objects(proving_ground) - before):
            proving_ground.kubectl("delete", name, "--ignore-not-found")


@pytest.mark.parametrize(
    ("overlay", "namespace", "kinds"),
    [
        (
            "base",
            "slurm",
            # Service: slurm-nodes, the headless Service that gives every pod a DNS name.
            {
                "Namespace",
                "ServiceAccount",
                "Role",
                "RoleBinding",
                "ConfigMap",
                "Secret",
                "Service",
                *ADMISSION_KINDS,
            },
        ),
        (
            "overlays/external",
            "slurm",
            {"Namespace", "ServiceAccount", "Role", "RoleBinding", "Secret", "Service"}
            | ADMISSION_KINDS,
        ),
        (
            "overlays/in-cluster",
            INCLUSTER_NS,
            {
                "Namespace",
                "ServiceAccount",
                "Role",
                "RoleBinding",
                "ConfigMap",
                "Secret",
                "Service",
                "StatefulSet",
                *ADMISSION_KINDS,
            },
        ),
    ],
)
def test_overlay_builds(
    proving_ground: ProvingGround, munge_key: Path, overlay: str, namespace: str, kinds: set[str]
) -> None:
    docs = [d for d in yaml.safe_load_all(kustomize(proving_ground, KUSTOMIZE_DIR / overlay)) if d]
    assert {d["kind"] for d in docs} == kinds
    for doc in docs:
        if doc["kind"] in CLUSTER_SCOPED - {"Namespace"}:
            continue
        where = (
            doc["metadata"]["name"]
            if doc["kind"] == "Namespace"
            else doc["metadata"].get("namespace")
        )
        assert where == namespace, doc["metadata"]
    binding = next(d for d in docs if d["kind"] == "RoleBinding")
    assert binding["subjects"][0]["namespace"] == namespace
    secret = next(d for d in docs if d["kind"] == "Secret")
    # The bridge names the Secret in every pod: its name must not carry a hash suffix.
    assert secret["metadata"]["name"] == "slurm-munge-key"


@pytest.fixture(scope="module")
def external(
    proving_ground: ProvingGround, munge_key: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Path]:
    """The external overlay applied in a namespace of the test's own (the way a user moves it),
    and a kubeconfig for its ServiceAccount made by make-kubeconfig.sh."""
    tmp_path = tmp_path_factory.mktemp("external")
    wrapper = tmp_path / "wrapper"
    wrapper.mkdir()
    (wrapper / "kustomization.yaml").write_text(
        f"namespace: {EXTERNAL_NS}\nresources:\n  - "
        f"{os.path.relpath(KUSTOMIZE_DIR / 'overlays' / 'external', wrapper)}\n"
    )
    with admission_policy_cleanup(proving_ground):
        yield from _external(proving_ground, tmp_path, wrapper)


def _external(proving_ground: ProvingGround, tmp_path: Path, wrapper: Path) -> Iterator[Path]:
    try:
        proving_ground.kubectl("apply", "-f", "-", input_text=kustomize(proving_ground, wrapper))
        kubeconfig = tmp_path / "bridge.kubeconfig"
        script = KUSTOMIZE_DIR / "overlays" / "external" / "make-kubeconfig.sh"
        env = {
            **proving_ground.env,
            "PATH": f"{proving_ground.layout.kubernetes_bin}:{os.environ.get('PATH', '')}",
        }
        result = subprocess.run(
            [str(script), "-n", EXTERNAL_NS, "-d", "1h", str(kubeconfig)],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert result.returncode == 0, result.stderr
        yield kubeconfig
    finally:
        delete_namespace(proving_ground, EXTERNAL_NS)


def as_bridge(
    proving_ground: ProvingGround, kubeconfig: Path, *argv: str, input_text: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            str(proving_ground.layout.kubernetes_bin / "kubectl"),
            f"--kubeconfig={kubeconfig}",
            *argv,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        input=input_text,
        check=False,
    )


SIM_POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    # The bridge's labels: the admission guard admits nothing else from its ServiceAccount.
    "metadata": {
        "name": "rbac-probe",
        "labels": {
            "app.kubernetes.io/managed-by": "slurm-k8s-bridge",
            "slurm-k8s-bridge.io/cluster": "probe",
            "slurm-k8s-bridge.io/pool": "probe",
            "slurm-k8s-bridge.io/node": "rbac-probe",
        },
    },
    "spec": {
        # A kwok node: nothing real runs, the API calls are what is tested.
        "nodeSelector": {"type": "kwok"},
        "tolerations": [
            {"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}
        ],
        "containers": [{"name": "c", "image": "localhost/slurm-k8s-bridge/slurmd:dev"}],
    },
}


@pytest.mark.parametrize(
    ("verb", "resource", "namespace", "allowed"),
    [
        ("create", "pods", EXTERNAL_NS, True),
        ("watch", "pods", EXTERNAL_NS, True),
        ("delete", "pods", EXTERNAL_NS, True),
        ("create", "events", EXTERNAL_NS, True),
        # cluster-autoscaler's NotTriggerScaleUp on a pod fails its node fast
        ("list", "events", EXTERNAL_NS, True),
        ("get", "secrets", EXTERNAL_NS, False),
        ("update", "pods", EXTERNAL_NS, False),
        ("list", "pods", "kube-system", False),
        ("list", "pods", "slurm", False),
        ("list", "nodes", None, False),
    ],
)
def test_external_service_account_can_i(
    proving_ground: ProvingGround,
    external: Path,
    *,
    verb: str,
    resource: str,
    namespace: str | None,
    allowed: bool,
) -> None:
    where = ["-n", namespace] if namespace else []
    answer = as_bridge(proving_ground, external, "auth", "can-i", verb, resource, *where)
    assert answer.stdout.strip() == ("yes" if allowed else "no"), answer.stderr


def test_external_service_account_real_requests(
    proving_ground: ProvingGround, external: Path
) -> None:
    ns = ["-n", EXTERNAL_NS]
    created = as_bridge(
        proving_ground, external, *ns, "create", "-f", "-", input_text=json.dumps(SIM_POD)
    )
    assert created.returncode == 0, created.stderr
    watched = as_bridge(
        proving_ground,
        external,
        *ns,
        "get",
        "pods",
        "--watch",
        "-o",
        "name",
        "--request-timeout=3s",
    )
    assert "pod/rbac-probe" in watched.stdout, watched.stderr
    deleted = as_bridge(
        proving_ground, external, *ns, "delete", "pod", "rbac-probe", "--grace-period=0", "--force"
    )
    assert deleted.returncode == 0, deleted.stderr
    for argv in (
        (*ns, "get", "secrets"),
        ("-n", "slurm", "get", "pods"),
        ("get", "nodes"),
    ):
        denied = as_bridge(proving_ground, external, *argv)
        assert denied.returncode != 0
        assert "Forbidden" in denied.stderr, (argv, denied.stderr)


@pytest.fixture(scope="module")
def in_cluster(proving_ground: ProvingGround, munge_key: Path) -> Iterator[ProvingGround]:
    """The in-cluster overlay applied (with the bridge image of this checkout in containerd),
    its StatefulSet rolled out."""
    pg = proving_ground
    bridge_image.import_bridge_image(
        pg.layout, ["ctr", "--address", str(pg.layout.containerd_socket)]
    )
    manifests = kustomize(pg, KUSTOMIZE_DIR / "overlays" / "in-cluster")
    with admission_policy_cleanup(pg):
        pg.kubectl("apply", "-f", "-", input_text=manifests)
        try:
            pg.kubectl(
                "-n", INCLUSTER_NS, "rollout", "status", "statefulset/slurmctld",
                "--timeout=240s", timeout=260,
            )  # fmt: skip
            yield pg
        finally:
            delete_namespace(pg, INCLUSTER_NS)
            shutil.rmtree(INCLUSTER_SHARED, ignore_errors=True)


def slurm_pods(proving_ground: ProvingGround) -> dict[str, str]:
    """Pod name → hostname of the in-cluster bridge's slurmd pods."""
    raw = proving_ground.kubectl(
        "-n",
        INCLUSTER_NS,
        "get",
        "pods",
        "-l",
        "slurm-k8s-bridge.io/cluster=incluster",
        "-o",
        "json",
    )
    return {
        p["metadata"]["name"]: p["spec"].get("hostname", p["metadata"]["name"])
        for p in json.loads(raw)["items"]
    }


def exec_in(pg: ProvingGround, container: str, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            str(pg.layout.kubernetes_bin / "kubectl"),
            f"--kubeconfig={pg.layout.kubeconfig}",
            *("-n", INCLUSTER_NS, "exec", "slurmctld-0", "-c", container, "--", *argv),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.slow
def test_in_cluster_only_the_bridge_holds_the_token(in_cluster: ProvingGround) -> None:
    """The ServiceAccount's token is mounted into the bridge container alone: slurmctld (which
    runs the site's hooks, prologs and whatever Slurm executes) and munged cannot read it."""
    pg = in_cluster
    spec = json.loads(pg.kubectl("-n", INCLUSTER_NS, "get", "pod", "slurmctld-0", "-o", "json"))[
        "spec"
    ]
    assert spec["automountServiceAccountToken"] is False
    bridge_token = exec_in(pg, "bridge", "cat", f"{TOKEN_DIR}/token")
    assert bridge_token.returncode == 0, bridge_token.stderr
    assert bridge_token.stdout.count(".") == 2, "a JWT"
    namespace = exec_in(pg, "bridge", "cat", f"{TOKEN_DIR}/namespace")
    assert namespace.stdout == INCLUSTER_NS
    assert exec_in(pg, "bridge", "test", "-s", f"{TOKEN_DIR}/ca.crt").returncode == 0
    for container in ("slurmctld", "munged"):
        listed = exec_in(pg, container, "ls", TOKEN_DIR)
        assert listed.returncode != 0, (container, listed.stdout)
        assert "No such file or directory" in listed.stderr, (container, listed.stderr)
        # Nor anywhere else in the container: no file holds the token, no mount is a token's.
        found = exec_in(
            pg, container, "grep", "-rlsF", "-D", "skip", bridge_token.stdout[-64:], "/etc",
            "/run", "/var/spool", "/root", "/tmp", "/shared",
        )  # fmt: skip
        assert found.stdout == "", (container, found.stdout)
        mounts = exec_in(pg, container, "cat", "/proc/self/mountinfo")
        assert "serviceaccount" not in mounts.stdout, (container, mounts.stdout)
    # The bridge works with it: it has been answering slurmctld (rolled out = scontrol ping UP
    # through the hooks' socket) and may list its pods.
    listed_pods = exec_in(pg, "bridge", "python3", "-c", _LIST_PODS)
    assert listed_pods.returncode == 0, listed_pods.stderr


#: The bridge container lists its namespace's pods with the in-cluster credentials.
_LIST_PODS = """
from kubernetes import client, config
config.load_incluster_config()
client.CoreV1Api().list_namespaced_pod(open(
    "/var/run/secrets/kubernetes.io/serviceaccount/namespace").read(), limit=1)
"""


@pytest.mark.slow
def test_in_cluster_runs_a_two_node_job(in_cluster: ProvingGround) -> None:
    pg = in_cluster

    def ctld(*argv: str, check: bool = True) -> str:
        return pg.kubectl(
            "-n", INCLUSTER_NS, "exec", "slurmctld-0", "-c", "slurmctld", "--", *argv, check=check
        )

    wait_for(
        "slurmctld answering through its Service",
        lambda: "UP" in ctld("scontrol", "ping", check=False),
        timeout_s=60,
    )
    job = ctld(
        "sbatch",
        "--parsable",
        "-N2",
        "-p",
        "ic",
        "--chdir=/shared",
        "--output=/shared/job-%j.out",
        "--wrap",
        "srun hostname",
    ).strip()
    wait_for("two slurmd pods", lambda: len(slurm_pods(pg)) == 2, timeout_s=60)
    pods = slurm_pods(pg)

    def job_state() -> str:
        return slurm_state.job_state(lambda *argv: ctld(*argv, check=False), int(job))

    wait_for(
        f"job {job} to finish",
        lambda: job_state() not in {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING"},
        timeout_s=180,
    )
    assert job_state() == "COMPLETED", ctld("scontrol", "show", "job", job)
    output = ctld("cat", f"/shared/job-{job}.out")
    assert sorted(output.split()) == sorted(pods.values())
    # slurmd registered through the Service, yet slurmctld knows each node by its pod's own IP
    # (cloud_reg_addrs; pod-to-Service traffic is not masqueraded).
    for pod in pods:
        pod_ip = pg.kubectl(
            "-n", INCLUSTER_NS, "get", "pod", pod, "-o", "jsonpath={.status.podIP}"
        ).strip()
        node = ctld("scontrol", "show", "node", "-o", pod)
        assert f"NodeAddr={pod_ip} " in node, node
    wait_for("slurmd pods to go after SuspendTime", lambda: not slurm_pods(pg), timeout_s=120)
    ctld("rm", "-f", f"/shared/job-{job}.out")
