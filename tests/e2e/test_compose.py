"""docker-compose.yml under podman-compose: slurmctld and the bridge in two containers sharing the
bridge's socket (slurmctld's port 6827 published on the host), the bridge driving the proving
ground's Kubernetes through a kubeconfig mounted into its container alone; slurmd pods on the
real node register with slurmctld and run a job; `down` leaves nothing behind."""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from proving_ground import bridge_daemon, bridge_image, images
from proving_ground.layout import APISERVER_PORT, HOST_IP

from tests import slurm_state
from tests.conftest import ROOT, ProvingGround
from tests.integration.manifests import KUSTOMIZE_DIR, apply_namespace, policy_objects, wait_for

pytestmark = pytest.mark.e2e

NAMESPACE = "slurm-compose"
MUNGE_KEY = ROOT / "deploy" / "compose" / "munge.key"
KUBECONFIG = ROOT / "deploy" / "compose" / "kubeconfig"
SHARED = Path("/var/lib/slurm-k8s-bridge/compose")
PROJECT = "slurm-k8s-bridge"
CONTAINER = f"{PROJECT}_slurmctld_1"
BRIDGE_CONTAINER = f"{PROJECT}_bridge_1"
#: Debian bookworm's podman-compose (1.0.3) unless SKB_PODMAN_COMPOSE names another.
PODMAN_COMPOSE = os.environ.get("SKB_PODMAN_COMPOSE", "podman-compose")
#: The API server as the container reaches it (its 127.0.0.1 is its own).
APISERVER = f"https://{HOST_IP}:{APISERVER_PORT}"


def run(
    argv: list[str], *, timeout: float = 120, check: bool = True
) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        argv, capture_output=True, text=True, timeout=timeout, cwd=ROOT, check=False
    )
    if check and result.returncode != 0:
        raise AssertionError(f"{argv} exited {result.returncode}: {result.stderr[-3000:]}")
    return result


@pytest.fixture
def compose(proving_ground: ProvingGround, tmp_path: Path) -> Iterator[ProvingGround]:
    """Image in podman, the cluster side (Namespace, munge Secret and external overlay in
    slurm-compose), the kubeconfig, then `podman-compose up`; undone in reverse order."""
    if shutil.which(PODMAN_COMPOSE) is None:
        pytest.skip(f"{PODMAN_COMPOSE} is not installed")
    key_created = not MUNGE_KEY.exists()
    if key_created:
        MUNGE_KEY.write_bytes(secrets.token_bytes(1024))
        MUNGE_KEY.chmod(0o600)
    # The same docker-archive the proving ground imports into containerd (built if missing).
    bridge_image.load_into_podman(proving_ground.layout)
    # The pool's slurmd is the bridge image's series (bridge.yaml), not necessarily the ground's.
    ctr = ["ctr", "--address", str(proving_ground.layout.containerd_socket)]
    slurmd = images.import_series_image(proving_ground.layout, ctr, bridge_image.SLURM_SERIES)
    assert slurmd in (ROOT / "deploy" / "compose" / "bridge.yaml").read_text(), slurmd
    wrapper = tmp_path / "wrapper"
    wrapper.mkdir()
    (wrapper / "kustomization.yaml").write_text(
        f"namespace: {NAMESPACE}\nresources:\n  - "
        f"{os.path.relpath(KUSTOMIZE_DIR / 'overlays' / 'external', wrapper)}\n"
    )
    built = run([str(proving_ground.layout.kustomize_bin), "build", str(wrapper)]).stdout
    # The admission guard's cluster-scoped objects: deleted afterwards unless they were there.
    policy_before = policy_objects(proving_ground)
    apply_namespace(proving_ground, "../compose/namespace", NAMESPACE, tmp_path / "namespace")
    bridge_daemon.create_munge_secret(proving_ground.layout, NAMESPACE, MUNGE_KEY)
    proving_ground.kubectl("apply", "-f", "-", input_text=built)
    script = KUSTOMIZE_DIR / "overlays" / "external" / "make-kubeconfig.sh"
    made = subprocess.run(
        [str(script), "-n", NAMESPACE, "-d", "2h", "-S", APISERVER, str(KUBECONFIG)],
        env={**proving_ground.env, "PATH": f"{proving_ground.layout.kubernetes_bin}:/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert made.returncode == 0, made.stderr
    try:
        run([PODMAN_COMPOSE, "-p", PROJECT, "up", "-d"], timeout=300)
        yield proving_ground
    finally:
        for container in (BRIDGE_CONTAINER, CONTAINER):
            logs = run(["podman", "logs", container], check=False)
            print(f"--- {container}", logs.stdout[-5000:], logs.stderr[-5000:])
        run([PODMAN_COMPOSE, "-p", PROJECT, "down", "-v"], check=False, timeout=300)
        # podman-compose 1.0.3 leaves the project's network behind.
        run(["podman", "network", "rm", f"{PROJECT}_default"], check=False)
        proving_ground.kubectl(
            "delete", "namespace", NAMESPACE, "--ignore-not-found", "--wait=true",
            "--timeout=180s", timeout=200,
        )  # fmt: skip
        for name in sorted(policy_objects(proving_ground) - policy_before):
            proving_ground.kubectl("delete", name, "--ignore-not-found")
        KUBECONFIG.unlink(missing_ok=True)
        shutil.rmtree(SHARED, ignore_errors=True)
        if key_created:
            MUNGE_KEY.unlink()


def in_container(*argv: str, check: bool = True, container: str = CONTAINER) -> str:
    return run(["podman", "exec", container, *argv], check=check).stdout


def exits_0(container: str, *argv: str) -> bool:
    return run(["podman", "exec", container, *argv], check=False).returncode == 0


def compose_pods(proving_ground: ProvingGround) -> dict[str, dict[str, str]]:
    """Pod name → hostname and pod IP of the compose bridge's slurmd pods."""
    raw = proving_ground.kubectl(
        "-n", NAMESPACE, "get", "pods", "-l", "slurm-k8s-bridge.io/cluster=compose", "-o", "json"
    )
    return {
        p["metadata"]["name"]: {
            "hostname": p["spec"].get("hostname", p["metadata"]["name"]),
            "ip": p["status"].get("podIP", ""),
        }
        for p in json.loads(raw)["items"]
    }


@pytest.mark.slow
def test_compose_only_the_bridge_holds_credentials(compose: ProvingGround) -> None:
    """The kubeconfig (a ServiceAccount token) is in the bridge's container alone; slurmctld's,
    which runs the hooks and whatever Slurm executes, has neither it nor any token. The munge
    key is slurmctld's alone; the bridge authenticates through the shared munge socket."""
    wait_for(
        "compose slurmctld (through the bridge's container too)",
        lambda: "UP" in in_container("scontrol", "ping", check=False, container=BRIDGE_CONTAINER),
        timeout_s=90,
    )
    kubeconfig = "/etc/slurm-k8s-bridge/kubeconfig"
    token = yaml.safe_load(KUBECONFIG.read_text())["users"][0]["user"]["token"]
    assert exits_0(BRIDGE_CONTAINER, "test", "-s", kubeconfig)
    assert exits_0(CONTAINER, "test", "!", "-e", kubeconfig)
    assert exits_0(CONTAINER, "test", "!", "-e", "/var/run/secrets/kubernetes.io/serviceaccount")
    found = in_container(
        "grep", "-rlsF", "-D", "skip", token[-64:], "/etc", "/run", "/var/spool", "/root",
        "/tmp", "/shared", check=False,
    )  # fmt: skip
    assert found == "", found
    environ = in_container("cat", "/proc/1/environ").split("\0")
    assert not [e for e in environ if e.startswith(("KUBECONFIG=", "SKB_KUBERNETES_"))]
    mounts = json.loads(run(["podman", "inspect", CONTAINER]).stdout)[0]["Mounts"]
    assert not [m for m in mounts if "kubeconfig" in m["Source"] + m["Destination"]], mounts
    # No copy of the deployment's munge key either (Debian's munge package leaves a key of its
    # own in the image at /etc/munge/munge.key, which no munged of the bridge's container uses).
    assert exits_0(BRIDGE_CONTAINER, "test", "!", "-e", "/etc/munge-secret/munge.key")
    key_sum = hashlib.sha256(MUNGE_KEY.read_bytes()).hexdigest()
    sums = in_container(
        "sh", "-c", "sha256sum /etc/munge/munge.key 2>/dev/null || true", container=BRIDGE_CONTAINER
    )
    assert key_sum not in sums
    assert exits_0(CONTAINER, "test", "-s", "/etc/munge/munge.key")
    # The hooks reach the bridge through the shared volume.
    assert exits_0(CONTAINER, "test", "-S", "/run/slurm-k8s-bridge/bridge.sock")


@pytest.mark.slow
def test_compose_runs_a_job(compose: ProvingGround) -> None:
    wait_for(
        "compose slurmctld",
        lambda: "UP" in in_container("scontrol", "ping", check=False),
        timeout_s=90,
    )
    job = in_container(
        "sbatch", "--parsable", "-N2", "-p", "cmp", "--chdir=/shared",
        "--output=/shared/job-%j.out", "--wrap", "srun hostname",
    ).strip()  # fmt: skip
    wait_for("two slurmd pods", lambda: len(compose_pods(compose)) == 2, timeout_s=60)

    def job_state() -> str:
        return slurm_state.job_state(lambda *argv: in_container(*argv, check=False), int(job))

    wait_for(
        f"job {job} to finish",
        lambda: job_state() not in {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING"},
        timeout_s=180,
    )
    assert job_state() == "COMPLETED", in_container("scontrol", "show", "job", job)
    pods = compose_pods(compose)
    output = (SHARED / f"job-{job}.out").read_text()
    assert sorted(output.split()) == sorted(pod["hostname"] for pod in pods.values())
    # Registered through the published port, known to slurmctld by the pod's own IP.
    for name, pod in pods.items():
        assert f"NodeAddr={pod['ip']} " in in_container("scontrol", "show", "node", "-o", name)
    wait_for("slurmd pods to go after SuspendTime", lambda: not compose_pods(compose),
             timeout_s=120)  # fmt: skip


def test_compose_left_nothing_behind(proving_ground: ProvingGround) -> None:
    """Runs after the test above (file order): no container, volume, network, namespace,
    kubeconfig or output of the compose deployment."""
    if shutil.which("podman") is None:
        pytest.skip("podman is not installed")
    containers = run(["podman", "ps", "-a", "--format", "{{.Names}}"]).stdout.split()
    volumes = run(["podman", "volume", "ls", "--format", "{{.Name}}"]).stdout.split()
    networks = run(["podman", "network", "ls", "--format", "{{.Name}}"]).stdout.split()
    assert not [c for c in containers if c.startswith(PROJECT)]
    assert not [v for v in volumes if v.startswith(PROJECT)]
    assert not [n for n in networks if n.startswith(PROJECT)]
    assert not SHARED.exists()
    assert not KUBECONFIG.exists()
    namespaces = proving_ground.kubectl("get", "namespaces", "-o", "name").split()
    assert f"namespace/{NAMESPACE}" not in namespaces
