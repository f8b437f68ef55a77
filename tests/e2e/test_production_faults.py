"""What a production cluster does to the elastic cycle, caused for real with real slurmd pods:
slurmctld restarting while nodes power up, capacity that appears late (as an autoscaler adds
it), an autoscaler that says no, and a slow scontrol. A hung kube-apiserver or slurmctld, on kwok
nodes, is tests/integration/test_frozen_backend.py."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from proving_ground import slurm
from proving_ground.layout import REAL_NODE

from tests.cluster import (
    SHARED,
    emit_autoscaler_event,
    job_finished,
    job_restarts,
    job_state,
    pod_condition,
    pods,
    restart_bridge,
    restart_slurmctld,
    slurm_node,
    step_output,
    submit,
    wait_down,
    wait_for,
    wait_pod_ips,
)
from tests.conftest import ProvingGround, Use

pytestmark = pytest.mark.e2e
AUTOSCALED = "slurm-k8s-bridge.io/autoscaled"


def _srun_hostname(
    pg: ProvingGround, partition: str, hostlist: str, count: int
) -> tuple[int, Path]:
    out = SHARED / f"e2e-faults-{partition}-%j.out"
    job = submit(
        pg,
        "-p",
        partition,
        f"-N{count}",
        "-w",
        hostlist,
        f"--output={out}",
        "--chdir=/tmp",
        "--wrap",
        "srun hostname",
    )
    return job, Path(str(out).replace("%j", str(job)))


@pytest.mark.parametrize(
    ("partition", "hostlist", "names"),
    [
        ("big", "big-[0-1]", ["big-0", "big-1"]),
        ("cpu", "cpu-[4-5]", ["cpu-4", "cpu-5"]),
        ("big", "big-[2-3]", ["big-2", "big-3"]),
    ],
    ids=["round-1", "round-2", "round-3"],
)
def test_slurmctld_restart_while_nodes_power_up_the_job_completes(
    proving_ground: ProvingGround, use: Use, partition: str, hostlist: str, names: list[str]
) -> None:
    pg = proving_ground
    use(hostlist)
    started = time.monotonic()
    job, out = _srun_hostname(pg, partition, hostlist, 2)

    # Restart while the job still waits for its nodes (CONFIGURING): the pods exist, slurmd is
    # starting or registering. Slurm 22.05 does not save the job's node address list, so the
    # job starts without one and srun in the pods resolves node names.
    wait_for("both pods created", lambda: all(n in pods(pg) for n in names) or None, 60, every=0.1)
    before = job_state(pg, job)
    restart_at = time.monotonic() - started
    assert before == "CONFIGURING", f"job {job} is {before}: the restart would come too late"
    away = restart_slurmctld(pg)
    state = wait_for(f"job {job} to finish", lambda: job_finished(pg, job), 240, every=1)
    done_at = time.monotonic() - started
    assert state == "COMPLETED", f"job {job} ended {state}; output: {out.read_text()!r}"
    assert step_output(out.read_text()) == names, out.read_text()
    ips = wait_pod_ips(pg, names)
    for name in names:
        assert slurm_node(pg, name).address == ips[name], name
    print(
        f"{hostlist}: slurmctld restarted at +{restart_at:.1f}s (away {away:.1f}s); "
        f"job COMPLETED at +{done_at:.1f}s"
    )


@pytest.fixture
def autoscaled_label(proving_ground: ProvingGround) -> Iterator[str]:
    """Removes the stand-in autoscaler's label from the real node after the test."""
    yield AUTOSCALED
    proving_ground.kubectl("label", "node", REAL_NODE, f"{AUTOSCALED}-", check=False)


def test_capacity_that_appears_late_runs_the_job_without_requeue(
    proving_ground: ProvingGround, use: Use, autoscaled_label: str
) -> None:
    pg = proving_ground
    use("auto-0")
    started = time.monotonic()
    job, out = _srun_hostname(pg, "auto", "auto-0", 1)
    wait_for(
        "auto-0 Unschedulable",
        lambda: (
            pod_condition(pg, "auto-0", "PodScheduled").get("reason") == "Unschedulable" or None
        ),
        60,
    )
    emit_autoscaler_event(
        pg, "auto-0", "TriggeredScaleUp", "pod triggered scale-up: [{auto 0->1 (max: 4)}]"
    )
    comment = wait_for(
        "the node's Comment to say why it waits",
        lambda: (c := slurm_node(pg, "auto-0").comment).endswith("TriggeredScaleUp") and c,
        30,
    )
    assert comment.startswith("k8s: waiting: Unschedulable since "), comment
    # The autoscaler's node arrives ~20 s after the pod became pending.
    time.sleep(max(0.0, 20 - (time.monotonic() - started)))
    pg.kubectl("label", "node", REAL_NODE, f"{autoscaled_label}=yes", "--overwrite")
    capacity_at = time.monotonic() - started
    state = wait_for(f"job {job} to finish", lambda: job_finished(pg, job), 240, every=1)
    done_at = time.monotonic() - started
    assert state == "COMPLETED", f"job {job} ended {state}"
    assert out.read_text().split() == ["auto-0"]
    assert job_restarts(pg, job) == 0, "the job was requeued: the node was failed meanwhile"
    # Once the pod runs the Comment names it instead (issue 13): no waiting message left.
    comment = slurm_node(pg, "auto-0").comment
    assert not comment.startswith("k8s: waiting:"), f"waiting Comment not cleared: {comment}"
    print(
        f"auto-0: capacity at +{capacity_at:.1f}s, job COMPLETED at +{done_at:.1f}s, "
        "no requeue (schedule_timeout 120 s)"
    )


def test_an_autoscaler_that_says_no_fails_the_node_fast(
    proving_ground: ProvingGround, use: Use
) -> None:
    pg = proving_ground
    use("huge-1")
    started = time.monotonic()
    job = submit(pg, "-p", "huge", "-N1", "-w", "huge-1", "--wrap", "true")
    wait_for(
        "huge-1 Unschedulable",
        lambda: (
            pod_condition(pg, "huge-1", "PodScheduled").get("reason") == "Unschedulable" or None
        ),
        60,
    )
    pending_at = time.monotonic() - started
    said = "pod didn't trigger scale-up: 1 Insufficient cpu"
    emit_autoscaler_event(pg, "huge-1", "NotTriggerScaleUp", said)
    emitted = time.monotonic()
    down = wait_down(pg, "huge-1", 30)
    verdict_s = time.monotonic() - emitted
    assert down["Reason"].startswith(f"k8s: NotTriggerScaleUp: {said}"), down["Reason"]
    wait_for("job requeued", lambda: job_state(pg, job) == "PENDING" or None, 30)
    print(
        f"huge-1: Unschedulable at +{pending_at:.1f}s; NotTriggerScaleUp -> DOWN in "
        f"{verdict_s:.1f}s (schedule_timeout 30 s, ResumeTimeout 180 s)"
    )
    assert verdict_s < 20, "fail fast on the autoscaler's word, not at schedule_timeout"


def _slow_slurm_bin(directory: Path, real: Path, delay_s: float) -> Path:
    """Wrappers around the ground's clients (``real``: the host's or the series' root) that
    sleep first and note each call in ``calls``."""
    directory.mkdir(parents=True, exist_ok=True)
    # The bridge runs as its own user: the wrappers it runs must be able to append here.
    (directory / "calls").touch()
    (directory / "calls").chmod(0o666)
    for command in ("scontrol", "sinfo", "squeue"):
        wrapper = directory / command
        wrapper.write_text(
            f"#!/bin/sh\necho {command} >> {directory / 'calls'}\nsleep {delay_s}\n"
            f'exec {real / command} "$@"\n'
        )
        wrapper.chmod(0o755)
    return directory


def test_a_slow_scontrol_never_costs_a_registering_node_its_pod(
    proving_ground: ProvingGround, use: Use, bridge_tmp: Path
) -> None:
    pg = proving_ground
    use("cpu-8")
    real = slurm.ground_programs(pg.layout).bin_dir
    slow = _slow_slurm_bin(bridge_tmp / "slow-bin", real, 3)
    log = pg.layout.logs / "bridge.log"
    log_start = log.stat().st_size if log.exists() else 0
    # The ground sets SKB_SLURM_BIN_DIR, which wins over any file: override it.
    restart_bridge(pg, env_overrides={"SKB_SLURM_BIN_DIR": str(slow)})
    try:
        started = time.monotonic()
        job, out = _srun_hostname(pg, "cpu", "cpu-8", 1)
        reasons: set[str] = set()

        def finished() -> str | None:
            reason = slurm_node(pg, "cpu-8").reason
            if reason:
                reasons.add(reason)
            return job_finished(pg, job)

        state = wait_for(f"job {job} to finish", finished, 240, every=1)
        elapsed = time.monotonic() - started
        with log.open() as f:
            f.seek(log_start)
            bridge_log = f.read()
    finally:
        restart_bridge(pg)
    assert state == "COMPLETED", f"job {job} ended {state}; reasons seen: {reasons}"
    assert out.read_text().split() == ["cpu-8"]
    assert not any("PodMissing" in r for r in reasons), reasons
    assert "PodMissing" not in bridge_log
    assert job_restarts(pg, job) == 0
    calls = (slow / "calls").read_text().split()
    assert calls, "the bridge never called the slow clients"
    print(f"{len(calls)} Slurm calls by the bridge, each 3 s slower")
    print(f"cpu-8 with every Slurm command 3 s slower: job COMPLETED in {elapsed:.1f}s")
