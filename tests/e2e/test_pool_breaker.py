"""The per-pool circuit breaker on the proving ground: the `broken` pool (an image the node does
not have) pauses after two fail-fasts, its nodes then go DOWN with PoolPaused and get no pod, the
`cpu` pool keeps running jobs, and `slurm-k8s-bridge pool resume broken` ends the pause."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.cluster import (
    bridge_cli,
    job_finished,
    job_state,
    node,
    pods,
    restart_bridge,
    submit,
    wait_down,
    wait_for,
)
from tests.conftest import ProvingGround, Use

pytestmark = pytest.mark.e2e

#: Two fail-fasts of `broken` within 10 minutes pause it for 15 (longer than this test).
BREAKER = "    circuit_breaker: {failures: 2, window_s: 600, pause_s: 900}\n"


def breaker(pool: str) -> dict[str, Any]:
    """``pool status POOL --json``'s entry for ``pool``."""
    done = bridge_cli("pool", "status", pool, "--json")
    assert done.returncode == 0, done.stderr
    [entry] = json.loads(done.stdout)["pools"]
    return dict(entry)


def _broken_job(pg: ProvingGround, name: str) -> int:
    return submit(
        pg,
        "-p",
        "broken",
        "-N1",
        "-w",
        name,
        "--output=/dev/null",
        "--chdir=/tmp",
        "--wrap",
        "true",
    )


def _open(entry: dict[str, Any]) -> dict[str, Any] | None:
    return entry if entry["state"] == "open" else None


def _idle_powered_down(pg: ProvingGround, name: str) -> bool | None:
    state = node(pg, name)["State"]
    return ("POWERED_DOWN" in state and not state.startswith("DOWN")) or None


def test_a_failing_pool_pauses_the_other_keeps_serving_and_pool_resume_ends_it(
    proving_ground: ProvingGround, use: Use, bridge_tmp: Path
) -> None:
    pg = proving_ground
    use("broken-[0-1]")
    use("cpu-6")
    config = (pg.layout.root / "dev/bridge.yaml").read_text()
    anchor = "    partition: broken\n"
    assert anchor in config
    with_breaker = bridge_tmp / "bridge.yaml"
    with_breaker.write_text(config.replace(anchor, anchor + BREAKER, 1))
    restart_bridge(pg, with_breaker)
    try:
        assert breaker("broken")["state"] == "closed"
        assert breaker("cpu")["state"] == "off"  # only `broken` has a breaker here
        # Two fail-fasts (ErrImageNeverPull on both nodes): the pool pauses.
        jobs = [_broken_job(pg, "broken-0"), _broken_job(pg, "broken-1")]
        for name in ("broken-0", "broken-1"):
            down = wait_down(pg, name, 90)
            assert down["Reason"].startswith("k8s: ErrImageNeverPull:"), down["Reason"]
        paused = wait_for("broken paused", lambda: _open(breaker("broken")), 30)
        assert paused["last_reason"].startswith("k8s: ErrImageNeverPull:"), paused
        status = bridge_cli("status")
        assert f"pool broken paused until {paused['paused_until']}" in status.stdout, status
        # Both nodes return to idle~ after the hold; the requeued job's next resume creates no
        # pod: the node goes DOWN at once with PoolPaused.
        wait_for(
            "broken-[0-1] back to idle~",
            lambda: _idle_powered_down(pg, "broken-0") and _idle_powered_down(pg, "broken-1"),
            90,
            every=1,
        )
        wait_for("job requeued", lambda: job_state(pg, jobs[0]) == "PENDING" or None, 30)
        created = set(pods(pg))
        pg.slurm("scontrol", "update", f"jobid={jobs[0]}", "StartTime=now")
        down = wait_down(pg, "broken-0", 90)
        expected = f"k8s: PoolPaused: pool broken paused until {paused['paused_until']}: "
        assert down["Reason"].startswith(expected + "ErrImageNeverPull:"), down["Reason"]
        assert "broken-0" not in set(pods(pg)) - created  # no pod was created for it
        # The other pool keeps serving.
        job = submit(
            pg, "-p", "cpu", "-N1", "-w", "cpu-6", "--output=/dev/null", "--chdir=/tmp",
            "--wrap", "hostname",
        )  # fmt: skip
        assert wait_for("cpu job", lambda: job_finished(pg, job), 180, every=2) == "COMPLETED"
        # By hand: the pause ends at once.
        done = bridge_cli("pool", "resume", "broken")
        assert done.returncode == 0, done.stderr
        assert done.stdout == "pool broken resumed: breaker closed\n"
        assert breaker("broken")["state"] == "closed"
        unknown = bridge_cli("pool", "resume", "nope")
        assert unknown.returncode == 1
        assert "'nope' is not a configured pool" in unknown.stderr
        for job_id in jobs:
            pg.slurm("scancel", str(job_id), check=False)
    finally:
        restart_bridge(pg)
