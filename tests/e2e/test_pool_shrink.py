"""A reload that takes a busy node out of every pool (issue 29 item 1): the `cpu` pool's hostlist
shrinks by its last node while a job runs there; the bridge reloads on SIGHUP. Before, the pod
was deleted at once as an orphan (no pool owns it) and the job died with it. Now the node is
drained through Slurm with `k8s: PoolRemoved`, the job completes on its pod, and the pod goes
once Slurm powered the node down."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from tests.cluster import (
    bridge_pid,
    job_finished,
    job_state,
    node,
    pods,
    restart_bridge,
    submit,
    wait_for,
)
from tests.conftest import ProvingGround, Use

pytestmark = pytest.mark.e2e

NODE = "cpu-15"
POOL_LINE = "    nodes: cpu-[0-15]\n"
SHRUNK_LINE = "    nodes: cpu-[0-14]\n"


def _pod(pg: ProvingGround) -> dict[str, Any] | None:
    return pods(pg).get(NODE)


def test_a_reload_that_drops_a_busy_node_from_its_pool_lets_its_job_finish(
    proving_ground: ProvingGround, use: Use, bridge_tmp: Path
) -> None:
    pg = proving_ground
    use(NODE)
    original = (pg.layout.root / "dev/bridge.yaml").read_text()
    assert original.count(POOL_LINE) == 1, "pool cpu's hostlist moved"
    config = bridge_tmp / "bridge.yaml"
    config.write_text(original)
    restart_bridge(pg, config)
    try:
        job = submit(
            pg, "-p", "cpu", "-N1", "-w", NODE, "--output=/dev/null", "--chdir=/tmp",
            "--wrap", "sleep 45",
        )  # fmt: skip
        wait_for(f"job {job} running", lambda: job_state(pg, job) == "RUNNING" or None, 180)
        uid = wait_for("its pod", lambda: _pod(pg), 30)["metadata"]["uid"]

        # A hostlist typo away from the node: the reload takes it out of every pool.
        config.write_text(original.replace(POOL_LINE, SHRUNK_LINE))
        pid = bridge_pid(pg)
        assert pid is not None
        os.kill(pid, signal.SIGHUP)

        def drained() -> dict[str, str] | None:
            fields = node(pg, NODE)
            return fields if fields.get("Reason", "").startswith("k8s: PoolRemoved") else None

        fields = wait_for("the node drained through Slurm", drained, 30, every=1)
        assert "DRAIN" in fields["State"], fields
        # The pod stays, not deleting, for as long as the job runs; the job completes.
        deadline = time.monotonic() + 120
        while (final := job_finished(pg, job)) is None:
            assert time.monotonic() < deadline, f"job {job} still {job_state(pg, job)}"
            pod = _pod(pg)
            assert pod is not None and pod["metadata"]["uid"] == uid, (
                f"the pod of busy {NODE} went while job {job} ran: {pod and pod['metadata']}"
            )
            assert not pod["metadata"].get("deletionTimestamp"), pod["metadata"]
            time.sleep(1)
        assert final == "COMPLETED", f"job {job}: {final}"

        # Slurm powers the node down after the job; then the pod goes, and Slurm holds no
        # DOWN of ours for it.
        wait_for("the pod to go", lambda: _pod(pg) is None or None, 120, every=1)
        assert not node(pg, NODE)["State"].startswith("DOWN"), node(pg, NODE)
    finally:
        config.write_text(original)
        restart_bridge(pg)
