"""The kustomize deployment on the proving ground: every overlay builds, holds no key and no
cluster-scoped object (the Namespace and the admission guard are the administrator's part, so
`kubectl delete -k` leaves the Namespace); the external overlay's ServiceAccount can do exactly the
bridge's pod work and nothing else; the in-cluster overlay runs slurmctld + bridge as a
StatefulSet (release-tagged images, state on a volume claim, slurmctld found by DNS) whose slurmd
pods run a real two-node job with what Slurm is told and go away, and only its bridge container
holds the ServiceAccount's token."""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import subprocess
import time
import tomllib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from proving_ground import bridge_daemon, bridge_image, images

from tests import slurm_state
from tests.cluster import kubectl_outcome
from tests.conftest import ROOT, ProvingGround

pytestmark = pytest.mark.e2e

KUSTOMIZE_DIR = ROOT / "deploy" / "kustomize"
EXTERNAL_NS = "skb-e2e-external"
KEPT_NS = "skb-e2e-kept"
INCLUSTER_NS = "slurm-incluster"
INCLUSTER_SHARED = Path("/var/lib/slurm-k8s-bridge/incluster")
#: The ground has no dynamic provisioner: slurmctld's state claim binds to a hostPath
#: PersistentVolume the test makes (claimRef: that claim alone).
INCLUSTER_STATE = Path("/var/lib/slurm-k8s-bridge/incluster-state")
STATE_CLAIM = "state-slurmctld-0"
STATE_VOLUME = "skb-e2e-slurmctld-state"
#: The admission guard (namespace/admission-policy.yaml): cluster-scoped, one for every bridge.
POLICY = "slurm-k8s-bridge-pods"
POLICY_KINDS = ("validatingadmissionpolicybinding", "validatingadmissionpolicy")
#: The administrator's part next to each overlay: the Namespace and the admission guard (its
#: allow-lists are annotations of the Namespace).
ADMISSION_KINDS = {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
#: Each overlay and the kustomization of its Namespace.
NAMESPACE_OF = {
    "base": "namespace",
    "overlays/external": "namespace",
    "overlays/in-cluster": "overlays/in-cluster/namespace",
}
TOKEN_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"  # noqa: S105 (a path)
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


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


def build(proving_ground: ProvingGround, kustomization: str) -> list[dict[str, Any]]:
    return [
        d for d in yaml.safe_load_all(kustomize(proving_ground, KUSTOMIZE_DIR / kustomization)) if d
    ]


def apply_namespace(
    proving_ground: ProvingGround, kustomization: str, namespace: str, scratch: Path
) -> None:
    """The administrator's part of ``kustomization`` moved to ``namespace`` (as a site would)."""
    scratch.mkdir(parents=True, exist_ok=True)
    (scratch / "kustomization.yaml").write_text(
        f"namespace: {namespace}\nresources:\n  - "
        f"{os.path.relpath(KUSTOMIZE_DIR / kustomization, scratch)}\n"
    )
    proving_ground.kubectl("apply", "-f", "-", input_text=kustomize(proving_ground, scratch))


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
    """Applying any Namespace kustomization creates the admission guard's policy and binding
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
            {"ServiceAccount", "Role", "RoleBinding", "ConfigMap", "Service"},
        ),
        (
            "overlays/external",
            "slurm",
            {"ServiceAccount", "Role", "RoleBinding", "Service"},
        ),
        (
            "overlays/in-cluster",
            INCLUSTER_NS,
            {
                "ServiceAccount",
                "Role",
                "RoleBinding",
                "ConfigMap",
                "Service",
                "StatefulSet",
                "PodDisruptionBudget",
                "NetworkPolicy",
            },
        ),
    ],
)
def test_overlay_builds(
    proving_ground: ProvingGround, overlay: str, namespace: str, kinds: set[str]
) -> None:
    """Namespaced objects only, all in the overlay's namespace: no Namespace, no guard, no
    Secret (the site's, by name)."""
    docs = build(proving_ground, overlay)
    assert {d["kind"] for d in docs} == kinds
    for doc in docs:
        assert doc["metadata"].get("namespace") == namespace, doc["metadata"]
    binding = next(d for d in docs if d["kind"] == "RoleBinding")
    assert binding["subjects"][0]["namespace"] == namespace


@pytest.mark.parametrize(
    ("kustomization", "namespace"),
    [("namespace", "slurm"), ("overlays/in-cluster/namespace", INCLUSTER_NS)],
)
def test_namespace_builds(
    proving_ground: ProvingGround, kustomization: str, namespace: str
) -> None:
    """The administrator's part: the Namespace with Pod Security labels (privileged enforced:
    slurmd is privileged; audited against baseline) and the guard's allow-lists, the guard, and
    the cluster-scoped read of nodes (which are cordoned) bound to this namespace's bridge."""
    docs = build(proving_ground, kustomization)
    assert {d["kind"] for d in docs} == {
        "Namespace",
        "ClusterRole",
        "ClusterRoleBinding",
        *ADMISSION_KINDS,
    }
    reader = next(d for d in docs if d["kind"] == "ClusterRole")
    assert reader["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["list"]}]
    binding = next(d for d in docs if d["kind"] == "ClusterRoleBinding")
    assert binding["roleRef"]["name"] == reader["metadata"]["name"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "slurm-k8s-bridge", "namespace": namespace}
    ]
    ns = next(d for d in docs if d["kind"] == "Namespace")
    assert ns["metadata"]["name"] == namespace
    labels = ns["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "privileged"
    assert labels["pod-security.kubernetes.io/audit"] == "baseline"


@pytest.mark.parametrize(
    "kustomization",
    [
        "base",
        "overlays/external",
        "overlays/in-cluster",
        "namespace",
        "overlays/in-cluster/namespace",
    ],
)
def test_no_build_holds_key_material(proving_ground: ProvingGround, kustomization: str) -> None:
    """No Secret at all, and no ConfigMap carries a key: the munge key stays the site's."""
    docs = build(proving_ground, kustomization)
    assert [d["metadata"]["name"] for d in docs if d["kind"] == "Secret"] == []
    for doc in docs:
        assert "binaryData" not in doc, doc["metadata"]
        for name in (doc.get("data") or {}) if doc["kind"] == "ConfigMap" else ():
            assert "key" not in name, (doc["metadata"]["name"], name)


@pytest.mark.parametrize("overlay", ["base", "overlays/external", "overlays/in-cluster"])
def test_no_fixed_cluster_ip(proving_ground: ProvingGround, overlay: str) -> None:
    """Services are found by name; only headless ones say clusterIP (None)."""
    for doc in build(proving_ground, overlay):
        if doc["kind"] == "Service":
            assert doc["spec"].get("clusterIP", "None") == "None", doc["metadata"]["name"]


def test_in_cluster_images_carry_the_release_tag(proving_ground: ProvingGround) -> None:
    """The bridge's image at the package version, the pool's slurmd at <series>-<version> (what
    the proving ground tags its builds with), the allow-list naming exactly that; no :dev, no
    imagePullPolicy Never."""
    docs = build(proving_ground, "overlays/in-cluster")
    statefulset = next(d for d in docs if d["kind"] == "StatefulSet")
    pod = statefulset["spec"]["template"]["spec"]
    containers = pod["initContainers"] + pod["containers"]
    assert {c["image"] for c in containers} == {f"{bridge_image.BRIDGE_IMAGE}:{VERSION}"}
    assert all("imagePullPolicy" not in c for c in containers)
    config = yaml.safe_load(
        next(d for d in docs if d["metadata"]["name"].startswith("slurm-k8s-bridge-config"))[
            "data"
        ]["bridge.yaml"]
    )
    slurmd = {pool["image"] for pool in config["pools"]}
    assert all(re.fullmatch(r"[^:]+:\d+\.\d+-" + re.escape(VERSION), i) for i in slurmd), slurmd
    ns = next(
        d
        for d in build(proving_ground, NAMESPACE_OF["overlays/in-cluster"])
        if d["kind"] == "Namespace"
    )
    allowed = ns["metadata"]["annotations"]["slurm-k8s-bridge.io/allowed-images"]
    assert set(allowed.split(",")) == slurmd


def test_in_cluster_state_is_on_a_volume_claim(proving_ground: ProvingGround) -> None:
    docs = build(proving_ground, "overlays/in-cluster")
    statefulset = next(d for d in docs if d["kind"] == "StatefulSet")
    claims = {c["metadata"]["name"] for c in statefulset["spec"]["volumeClaimTemplates"]}
    volumes = {v["name"] for v in statefulset["spec"]["template"]["spec"]["volumes"]}
    assert "state" in claims
    assert "state" not in volumes
    slurmctld = next(
        c for c in statefulset["spec"]["template"]["spec"]["containers"] if c["name"] == "slurmctld"
    )
    mount = next(m for m in slurmctld["volumeMounts"] if m["name"] == "state")
    head = (KUSTOMIZE_DIR / "overlays" / "in-cluster" / "slurm.conf.head").read_text()
    assert f"StateSaveLocation={mount['mountPath']}\n" in head


def test_delete_leaves_the_namespace(proving_ground: ProvingGround, tmp_path: Path) -> None:
    """Applied with `kubectl apply -k` into a Namespace the test made, `kubectl delete -k`
    removes the bridge's objects and leaves the Namespace (and the guard) alone."""
    wrapper = tmp_path / "wrapper"
    wrapper.mkdir()
    (wrapper / "kustomization.yaml").write_text(
        f"namespace: {KEPT_NS}\nresources:\n  - "
        f"{os.path.relpath(KUSTOMIZE_DIR / 'overlays' / 'external', wrapper)}\n"
    )
    guard = policy_objects(proving_ground)
    proving_ground.kubectl("create", "namespace", KEPT_NS)
    try:
        proving_ground.kubectl("apply", "-k", str(wrapper))
        assert (
            proving_ground.kubectl(
                "-n", KEPT_NS, "get", "serviceaccount", "slurm-k8s-bridge", "-o", "name"
            ).strip()
            == "serviceaccount/slurm-k8s-bridge"
        )
        proving_ground.kubectl("delete", "-k", str(wrapper), "--wait=true", timeout=120)
        phase = proving_ground.kubectl(
            "get", "namespace", KEPT_NS, "-o", "jsonpath={.status.phase}"
        )
        assert phase == "Active"
        left = proving_ground.kubectl(
            "-n", KEPT_NS, "get", "serviceaccount,role,rolebinding,service",
            "-l", "app.kubernetes.io/part-of=slurm-k8s-bridge", "-o", "name",
        )  # fmt: skip
        assert left.strip() == ""
        assert policy_objects(proving_ground) == guard
    finally:
        delete_namespace(proving_ground, KEPT_NS)


@pytest.fixture(scope="module")
def external(
    proving_ground: ProvingGround, tmp_path_factory: pytest.TempPathFactory
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
        apply_namespace(proving_ground, "namespace", EXTERNAL_NS, tmp_path / "namespace")
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
def in_cluster(
    proving_ground: ProvingGround, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ProvingGround]:
    """The in-cluster overlay applied as a site would (its Namespace, a munge Secret by name, a
    volume for slurmctld's state claim, then the overlay), with the bridge image of this
    checkout and the slurmd build of its series in containerd under their release tags; its
    StatefulSet rolled out."""
    pg = proving_ground
    scratch = tmp_path_factory.mktemp("in-cluster")
    ctr = ["ctr", "--address", str(pg.layout.containerd_socket)]
    bridge_image.import_bridge_image(pg.layout, ctr)
    # The overlay's slurmctld is the bridge image's series; its pods' slurmd is that series'
    # release tag, present whatever series the ground itself runs.
    images.import_series_image(pg.layout, ctr, bridge_image.SLURM_SERIES)
    manifests = kustomize(pg, KUSTOMIZE_DIR / "overlays" / "in-cluster")
    with admission_policy_cleanup(pg):
        try:
            pg.kubectl(
                "apply", "-f", "-",
                input_text=kustomize(pg, KUSTOMIZE_DIR / NAMESPACE_OF["overlays/in-cluster"]),
            )  # fmt: skip
            # Any key: the overlay's own munged and its slurmd pods share it.
            key = scratch / "munge.key"
            key.write_bytes(secrets.token_bytes(1024))
            bridge_daemon.create_munge_secret(pg.layout, INCLUSTER_NS, key)
            pg.kubectl("apply", "-f", "-", input_text=json.dumps(state_volume()))
            pg.kubectl("apply", "-f", "-", input_text=manifests)
            pg.kubectl(
                "-n", INCLUSTER_NS, "rollout", "status", "statefulset/slurmctld",
                "--timeout=240s", timeout=260,
            )  # fmt: skip
            yield pg
        finally:
            delete_namespace(pg, INCLUSTER_NS)
            pg.kubectl("delete", "persistentvolume", STATE_VOLUME, "--ignore-not-found")
            shutil.rmtree(INCLUSTER_SHARED, ignore_errors=True)
            shutil.rmtree(INCLUSTER_STATE, ignore_errors=True)


def state_volume() -> dict[str, Any]:
    """A hostPath PersistentVolume reserved for slurmctld's state claim (no class: the claim
    names none and the ground has no default class)."""
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": STATE_VOLUME},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Retain",
            "claimRef": {"namespace": INCLUSTER_NS, "name": STATE_CLAIM},
            "hostPath": {"path": str(INCLUSTER_STATE), "type": "DirectoryOrCreate"},
        },
    }


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
    return kubectl_outcome(
        pg, "-n", INCLUSTER_NS, "exec", "slurmctld-0", "-c", container, "--", *argv
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
    # Each pod is granted what slurmctld schedules onto its node (Guaranteed: limits too).
    for pod in pods:
        node = ctld("scontrol", "show", "node", "-o", pod)
        told = re.search(r"CPUTot=(\d+) .*RealMemory=(\d+) ", node)
        assert told, node
        spec = json.loads(pg.kubectl("-n", INCLUSTER_NS, "get", "pod", pod, "-o", "json"))["spec"]
        slurmd = next(c for c in spec["containers"] if c["name"] == "slurmd")
        shape = {"cpu": told[1], "memory": f"{told[2]}Mi"}
        assert slurmd["resources"] == {"requests": shape, "limits": shape}, node

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


@pytest.mark.slow
def test_in_cluster_state_survives_a_new_pod(in_cluster: ProvingGround) -> None:
    """slurmctld's state is on its volume claim: a held job outlives the pod."""
    pg = in_cluster
    claim = pg.kubectl(
        "-n", INCLUSTER_NS, "get", "pvc", STATE_CLAIM,
        "-o", "jsonpath={.status.phase} {.spec.volumeName}",
    )  # fmt: skip
    assert claim == f"Bound {STATE_VOLUME}"

    def ctld(*argv: str, check: bool = True) -> str:
        return pg.kubectl(
            "-n", INCLUSTER_NS, "exec", "slurmctld-0", "-c", "slurmctld", "--", *argv, check=check
        )

    job = ctld("sbatch", "--parsable", "--hold", "-p", "ic", "--wrap", "true").strip()
    before = pg.kubectl(
        "-n", INCLUSTER_NS, "get", "pod", "slurmctld-0", "-o", "jsonpath={.metadata.uid}"
    )
    pg.kubectl("-n", INCLUSTER_NS, "delete", "pod", "slurmctld-0", "--wait=true", timeout=120)

    def new_pod_ready() -> bool:
        raw = pg.kubectl(
            "-n", INCLUSTER_NS, "get", "pod", "slurmctld-0", "--ignore-not-found", "-o", "json"
        )
        if not raw.strip():
            return False
        pod = json.loads(raw)
        ready = any(
            c["type"] == "Ready" and c["status"] == "True"
            for c in pod.get("status", {}).get("conditions", [])
        )
        return pod["metadata"]["uid"] != before and ready

    wait_for("a new slurmctld-0, ready", new_pod_ready, timeout_s=180)
    shown = ctld("scontrol", "show", "job", "-o", job)
    assert f"JobId={job} " in shown, shown
    assert "JobState=PENDING" in shown, shown
    ctld("scancel", job)
