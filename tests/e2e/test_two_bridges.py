"""Two bridges on one namespace with different identities leave each other's pods alone (issue
30 item 6).

A bridge's identity is its ``cluster_name``: its pods carry it as a label, it lists and watches
only pods of that label, and since provenance (bridge/adapters/kubernetes/provenance.py) a pod is
its own only if it created it or found it at its first list. Before, the example configuration's
default ``cluster_name: slurm`` was shared: two bridges on one namespace each listed the other's
pods, found nodes no pool of theirs owns, and deleted them as orphans, under running jobs.

Here the ground's bridge (A, cluster ``provingground``) runs a job on a cpu node, and a second
real bridge (B, cluster ``twin``, the same install and user) owns the stray node that A refuses:
Slurm resumes it for a job, A answers UNKNOWN_NODE, and B's reconciler creates its pod. Both
reconcile for several passes, B restarts once (its first list adopts), and both pods keep their
UIDs and both jobs keep running. With one ``cluster_name`` for both, this fails at B's restart: B
adopts A's pod and, no pool of its own owning that node, drains it (``k8s: PoolRemoved``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cluster import (
    bridge_pid,
    job_state,
    pods,
    reset_nodes,
    state_flags,
    submit_as_job_user,
    wait_for,
)
from tests.conftest import ProvingGround, Use

pytestmark = pytest.mark.e2e

#: A's node for this test (few other tests use it) and the stray node B owns (no pool of A's).
A_NODE, B_NODE = "cpu-10", "stray-0"
A_CLUSTER, B_CLUSTER = "provingground", "twin"
CLUSTER_LABEL = "slurm-k8s-bridge.io/cluster"
#: Short passes for B; A's are dev/bridge.yaml's 5 s.
B_INTERVAL_S = 2
#: Watched before and after B's restart: at least two of A's passes and several of B's.
WATCH_S = 11
#: Slurm state words that mean a bridge took the node away (fail, drain, power down).
TAKEN = frozenset({"DOWN", "DRAIN", "FAIL", "POWER_DOWN", "POWERING_DOWN", "POWERED_DOWN"})


def twin_config(pg: ProvingGround, socket: Path) -> dict[str, Any]:
    """B's configuration: A's Slurm and Kubernetes settings, its own identity, socket and one
    pool of the stray node with the cpu pool's pod (a real slurmd on the real kubelet)."""
    ground = yaml.safe_load((pg.layout.root / "dev" / "bridge.yaml").read_text())
    (cpu,) = [p for p in ground["pools"] if p["name"] == "cpu"]
    return {
        "cluster_name": B_CLUSTER,
        "kubernetes": ground["kubernetes"],
        "slurm": ground["slurm"],
        "bridge": {
            "socket": str(socket),
            "reconcile_interval_s": B_INTERVAL_S,
            "pod_age_guard_s": 10,
            "log_format": "text",
            "metrics_address": "",  # A serves on the ground's port
        },
        "pools": [
            {
                "name": "stray",
                # stray-1 only: tests/e2e/test_proving_ground.py runs a hand-made slurmd there.
                "nodes": B_NODE,
                "cpus": 1,
                "real_memory_mb": 256,
                "partition": "stray",
                "image": cpu["image"],
                "schedule_timeout_s": cpu["schedule_timeout_s"],
                "pod_template": cpu["pod_template"],
            }
        ],
    }


class TwinBridge:
    """Bridge B: the ground's bridge process (A) copied from /proc, so the same install, argv,
    ``SKB_*`` settings, user and groups, with B's configuration and socket. Not through the
    ground's unit runner: that empties A's runtime directory (/run/slurm-k8s-bridge), and A's
    socket with it."""

    def __init__(self, pg: ProvingGround, directory: Path) -> None:
        self.config = directory / "twin.yaml"
        self.log = directory / "twin.log"
        socket = directory / "twin.sock"
        self.config.write_text(json.dumps(twin_config(pg, socket), indent=1))  # JSON is YAML
        a_pid = bridge_pid(pg)
        assert a_pid is not None, "the ground's bridge is not running"
        proc = Path("/proc", str(a_pid))
        argv = proc.joinpath("cmdline").read_bytes().decode().split("\0")[:-1]
        self.argv = [*argv[: argv.index("-c") + 1], str(self.config)]
        env = proc.joinpath("environ").read_bytes().decode().split("\0")[:-1]
        # SKB_* settings win over the file: B's socket there too (A's is in use, B would stop).
        self.env = {**dict(e.split("=", 1) for e in env), "SKB_BRIDGE_SOCKET": str(socket)}
        self.env.pop("RUNTIME_DIRECTORY", None)  # A's, not B's
        ids = dict(line.split(":", 1) for line in proc.joinpath("status").read_text().splitlines())
        self.uid, self.gid = int(ids["Uid"].split()[0]), int(ids["Gid"].split()[0])
        self.groups = [int(g) for g in ids["Groups"].split()]
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        offset = self.log.stat().st_size if self.log.exists() else 0
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                self.argv, env=self.env, cwd="/", stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT, user=self.uid, group=self.gid, extra_groups=self.groups,
                umask=0o027, start_new_session=True,
            )  # fmt: skip

        def serving() -> bool:
            assert self.process is not None and self.process.poll() is None, self.text()
            return b"bridge serving on" in self.log.read_bytes()[offset:]

        wait_for("bridge B to serve", lambda: serving() or None, 30)

    def stop(self) -> None:
        """SIGTERM by PID (the bridge's graceful stop), SIGKILL if it takes over 15 s."""
        if self.process is None or self.process.poll() is not None:
            return
        os.kill(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(15)
        except subprocess.TimeoutExpired:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait(5)

    def text(self) -> str:
        return self.log.read_text() if self.log.exists() else ""


@pytest.fixture
def twin(proving_ground: ProvingGround, bridge_tmp: Path) -> Iterator[TwinBridge]:
    bridge = TwinBridge(proving_ground, bridge_tmp)
    yield bridge
    bridge.stop()


def uid_of(pg: ProvingGround, name: str) -> str:
    return str((pods(pg).get(name) or {}).get("metadata", {}).get("uid", ""))


def running(pg: ProvingGround, job: int, name: str) -> Callable[[], str | None]:
    """A probe: the pod's UID once the job runs on its node (its slurmd registered)."""
    return lambda: uid_of(pg, name) if job_state(pg, job) == "RUNNING" else None


def assert_untouched(pg: ProvingGround, jobs: dict[str, int], uids: dict[str, str]) -> None:
    flags = state_flags(pg, ",".join(jobs))
    for name, job in jobs.items():
        assert uid_of(pg, name) == uids[name], f"pod {name} replaced or gone: {pods(pg).keys()}"
        assert not flags[name] & TAKEN, f"{name}: {sorted(flags[name])}"
        assert job_state(pg, job) == "RUNNING", f"job {job} on {name}: {job_state(pg, job)}"


def test_two_bridges_leave_each_other_s_pods_alone(
    proving_ground: ProvingGround, use: Use, twin: TwinBridge
) -> None:
    pg = proving_ground
    use(A_NODE)
    use(B_NODE)
    a_log = pg.layout.logs / "bridge.log"
    a_offset = a_log.stat().st_size
    twin.start()
    try:
        jobs = {
            name: submit_as_job_user(
                pg, "-p", partition, "-w", name, "--output=/dev/null", "--wrap", "sleep 300"
            )
            for name, partition in ((A_NODE, "cpu"), (B_NODE, "stray"))
        }
        # B_NODE: slurmctld's resume hook reaches A (UNKNOWN_NODE, nothing done); B's reconciler
        # finds the node powering up without a pod and creates it.
        uids = {
            name: wait_for(f"job {job} on {name}", running(pg, job, name), 90, every=1)
            for name, job in jobs.items()
        }
        time.sleep(WATCH_S)
        assert_untouched(pg, jobs, uids)
        twin.stop()  # a restart: B's first list adopts what carries its cluster label
        twin.start()
        time.sleep(WATCH_S)
        assert_untouched(pg, jobs, uids)

        a_sees = pods(pg, f"{CLUSTER_LABEL}={A_CLUSTER}")
        b_sees = pods(pg, f"{CLUSTER_LABEL}={B_CLUSTER}")
        assert A_NODE in a_sees and B_NODE not in a_sees, sorted(a_sees)
        assert set(b_sees) == {B_NODE}, sorted(b_sees)
        a_lines = a_log.read_bytes()[a_offset:].decode(errors="replace").splitlines()
        deletes = [line for line in a_lines if B_NODE in line and "delet" in line.lower()]
        assert not deletes, deletes
        # B has no business with A's node at all: not a delete, a drain, a NodeAddr, a comment.
        named = [line for line in twin.text().splitlines() if A_NODE in line]
        assert not named, named
    finally:
        # B removes its own pod once Slurm powers its node down (A refuses that suspend).
        reset_nodes(pg, B_NODE)
        try:
            wait_for(f"B to delete pod {B_NODE}", lambda: B_NODE not in pods(pg) or None, 40, 1)
        finally:
            twin.stop()
            pg.kubectl(
                "-n", "slurm", "delete", "pod", B_NODE, "--ignore-not-found", "--grace-period=0",
                "--force", "--wait=false",
            )  # fmt: skip
