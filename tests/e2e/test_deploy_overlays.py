"""The in-cluster overlay on the proving ground: slurmctld + bridge as a StatefulSet
(release-tagged images of the ground's default series, state on a volume claim, slurmctld found
by DNS, every daemon but munged as SlurmUser ``slurm``) whose slurmd pods run a real two-node job
on the real kubelet with what Slurm is told and go away; slurmctld's state outlives its pod; only
its bridge container holds the ServiceAccount's token; ``kubectl drain`` may evict slurmctld.

What the overlays build is tests/integration/test_kustomize_build.py; the external overlay's
ServiceAccount and `kubectl delete -k`, tests/integration/test_external_overlay.py."""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from proving_ground import bridge_daemon, bridge_image, images

from bridge.domain.pod_rendering import MUNGE_MOUNT_DIR, MUNGE_SECRET_KEY, SLURMD_CAPABILITIES
from tests import slurm_state
from tests.cluster import kubectl_outcome
from tests.conftest import ProvingGround
from tests.integration.manifests import (
    INCLUSTER_NS,
    KUSTOMIZE_DIR,
    NAMESPACE_OF,
    admission_policy_cleanup,
    delete_namespace,
    kustomize,
    wait_for,
)

pytestmark = pytest.mark.e2e

#: Where the pool's pods hold the munge key (the bridge mounts it there).
KEY = f"{MUNGE_MOUNT_DIR}/{MUNGE_SECRET_KEY}"
INCLUSTER_SHARED = Path("/var/lib/slurm-k8s-bridge/incluster")
#: The ground has no dynamic provisioner: slurmctld's state claim binds to a hostPath
#: PersistentVolume the test makes (claimRef: that claim alone).
INCLUSTER_STATE = Path("/var/lib/slurm-k8s-bridge/incluster-state")
STATE_CLAIM = "state-slurmctld-0"
STATE_VOLUME = "skb-e2e-slurmctld-state"
TOKEN_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"  # noqa: S105 (a path)


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
            # hostPath volumes keep their owner (fsGroup does not reach them): SlurmUser's, as
            # deploy/README.md tells a site; jobs (submitted as slurm here) write the shared one.
            for directory in (INCLUSTER_STATE, INCLUSTER_SHARED):
                directory.mkdir(parents=True, exist_ok=True)
                os.chown(directory, bridge_image.SLURM_UID, bridge_image.SLURM_UID)
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
    listed_pods = exec_in(
        pg, "bridge", f"/{bridge_image.VENV_IN_IMAGE}/bin/python", "-c", _LIST_PODS
    )
    assert listed_pods.returncode == 0, listed_pods.stderr


#: The bridge container lists its namespace's pods with the in-cluster credentials.
_LIST_PODS = """
from kubernetes import client, config
config.load_incluster_config()
client.CoreV1Api().list_namespaced_pod(open(
    "/var/run/secrets/kubernetes.io/serviceaccount/namespace").read(), limit=1)
"""


@pytest.mark.slow
def test_in_cluster_runs_as_slurm_user(in_cluster: ProvingGround) -> None:
    """slurmctld of the ground's default series runs as SlurmUser ``slurm``, and so does the
    bridge (whose node updates slurmctld accepts only from SlurmUser or root); no daemon of the
    pod is root, munged included."""
    pg = in_cluster
    config = exec_in(pg, "slurmctld", "scontrol", "show", "config")
    assert config.returncode == 0, config.stderr
    assert re.search(rf"^SlurmUser += slurm\({bridge_image.SLURM_UID}\)$", config.stdout, re.M), (
        config.stdout
    )
    version = re.search(r"^SLURM_VERSION += (\d+\.\d+)\.", config.stdout, re.M)
    assert version and version[1] == bridge_image.SLURM_SERIES, config.stdout
    daemons = {"slurmctld": "slurmctld", "bridge": "slurm-k8s-bridg", "munged": "munged"}
    for container, command in daemons.items():
        # Each container's PID 1 is its daemon (the entrypoint execs it; a name is 15 bytes).
        status = exec_in(pg, container, "cat", "/proc/1/status")
        assert status.returncode == 0, (container, status.stderr)
        fields = dict(line.split(":\t", 1) for line in status.stdout.splitlines() if ":\t" in line)
        assert fields["Name"] == command, (container, fields["Name"])
        real_uid = int(fields["Uid"].split()[0])
        assert real_uid != 0, (container, fields["Uid"])
        if container != "munged":
            assert real_uid == bridge_image.SLURM_UID, (container, fields["Uid"])


@pytest.mark.slow
def test_in_cluster_drain_may_evict_slurmctld(in_cluster: ProvingGround) -> None:
    """No budget refuses slurmctld's eviction (``maxUnavailable: 0`` made every ``kubectl
    drain`` of its host wait forever); the pool's budget is the bridge's, at the pool's size.
    A server-side dry run: the API server checks budgets, nothing is evicted."""
    pg = in_cluster
    node = pg.kubectl(
        "-n", INCLUSTER_NS, "get", "pod", "slurmctld-0", "-o", "jsonpath={.spec.nodeName}"
    ).strip()
    drained = kubectl_outcome(
        pg, "drain", node, "--dry-run=server", "--pod-selector=app.kubernetes.io/name=slurmctld",
        "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=30s",
    )  # fmt: skip
    assert drained.returncode == 0, drained.stderr
    assert "evicting pod slurm-incluster/slurmctld-0" in drained.stdout + drained.stderr, (
        drained.stdout,
        drained.stderr,
    )
    budgets = json.loads(pg.kubectl("-n", INCLUSTER_NS, "get", "pdb", "-o", "json"))["items"]
    assert [(b["metadata"]["name"], b["spec"].get("minAvailable")) for b in budgets] == [
        ("incluster-ic", 8)
    ]
    cordoned = pg.kubectl("get", "node", node, "-o", "jsonpath={.spec.unschedulable}")
    assert cordoned.strip() != "true", "a dry run cordons nothing"


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
        # Each step: its node, its uid, and what reading the node's key said.
        f"srun sh -c 'echo \"$(hostname)|$(id -u)|$(cat {KEY} 2>&1 >/dev/null)\"'",
    ).strip()
    wait_for("two slurmd pods", lambda: len(slurm_pods(pg)) == 2, timeout_s=60)
    pods = slurm_pods(pg)
    # Each pod is granted what slurmctld schedules onto its node (Guaranteed: limits too), and
    # runs unprivileged with the capabilities slurmd needs (the bridge's default).
    for pod in pods:
        node = ctld("scontrol", "show", "node", "-o", pod)
        told = re.search(r"CPUTot=(\d+) .*RealMemory=(\d+) ", node)
        assert told, node
        spec = json.loads(pg.kubectl("-n", INCLUSTER_NS, "get", "pod", pod, "-o", "json"))["spec"]
        slurmd = next(c for c in spec["containers"] if c["name"] == "slurmd")
        shape = {"cpu": told[1], "memory": f"{told[2]}Mi"}
        assert slurmd["resources"] == {"requests": shape, "limits": shape}, node
        assert slurmd["securityContext"] == {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"], "add": list(SLURMD_CAPABILITIES)},
        }, pod

    def job_state() -> str:
        return slurm_state.job_state(lambda *argv: ctld(*argv, check=False), int(job))

    wait_for(
        f"job {job} to finish",
        lambda: job_state() not in {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING"},
        timeout_s=180,
    )
    assert job_state() == "COMPLETED", ctld("scontrol", "show", "job", job)
    output = ctld("cat", f"/shared/job-{job}.out")
    steps = [line.split("|") for line in output.splitlines()]
    assert sorted(host for host, _, _ in steps) == sorted(pods.values()), output
    # The job runs as slurmctld's container user (SlurmUser), not root, and cannot read the key
    # its own pod mounts.
    for host, uid, read in steps:
        assert uid != "0", output
        assert read == f"cat: {KEY}: Permission denied", (host, read)
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
