"""All-or-nothing capacity for multi-node jobs (issue 34), on the ground's Kubernetes 1.37 with
gang scheduling on (the GenericWorkload gate, the scheduling.k8s.io PodGroup API).

Pool ``gang`` asks 800m CPU per pod on the real node (2 CPUs): two pods fit, three never do.

- A 3-node job there is one gang: no pod binds, the three nodes go DOWN with Kubernetes' reason
  and the job is requeued, in seconds.
- The same job with gang scheduling off (``kubernetes.gang_scheduling: "off"``), for comparison:
  two pods bind, start slurmd and hold their CPUs until the third one's schedule_timeout fails
  it, the job is requeued, and SuspendTime powers the two idle nodes down.
- A 2-node job: both pods bind in the group's one scheduling cycle and the job completes.

Jobs are submitted by the ground's job user, as a site's users do.
"""

from __future__ import annotations

import json
import re
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.cluster import (
    NAMESPACE,
    job_finished,
    job_state,
    node,
    pods,
    restart_bridge,
    submit_as_job_user,
    wait_for,
)
from tests.conftest import ProvingGround, Use

pytestmark = pytest.mark.e2e

NODES = ("gang-0", "gang-1", "gang-2")
#: The comparison's schedule_timeout_s for pool gang (the ground's pools say 120 s; a site's
#: default is 300 s): how long the bound pods hold their CPUs is this plus the release.
COMPARISON_TIMEOUT_S = 15


def _bound(manifest: dict[str, Any]) -> bool:
    return bool((manifest.get("spec") or {}).get("nodeName"))


def _group_of(manifest: dict[str, Any]) -> str:
    return str(((manifest.get("spec") or {}).get("schedulingGroup") or {}).get("podGroupName", ""))


def _pod_groups(pg: ProvingGround) -> dict[str, dict[str, Any]]:
    out = pg.kubectl("-n", NAMESPACE, "get", "podgroups.scheduling.k8s.io", "-o", "json")
    return {g["metadata"]["name"]: g for g in json.loads(out)["items"]}


def _condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if condition.get("type") == kind:
            return dict(condition)
    return {}


#: The DOWN reason of a gang's nodes names its PodGroup.
GANG_REASON = re.compile(r"pod group (\S+) cannot be placed whole")


def _scheduler_said(
    pg: ProvingGround, names: tuple[str, ...], since: datetime
) -> dict[str, set[str]]:
    """The default scheduler's Event reasons about pods ``names`` from ``since`` on (reason →
    pods): ``Scheduled`` is a binding, ``FailedScheduling`` a try that placed nothing."""
    out = pg.kubectl("-n", NAMESPACE, "get", "events", "-o", "json")
    said: dict[str, set[str]] = {}
    for event in json.loads(out)["items"]:
        involved = event.get("involvedObject") or {}
        stamp = event.get("lastTimestamp") or event.get("eventTime") or ""
        if involved.get("kind") != "Pod" or involved.get("name") not in names or not stamp:
            continue
        if datetime.fromisoformat(stamp.replace("Z", "+00:00")) < since:
            continue
        if (event.get("reportingComponent") or event.get("source", {}).get("component")) in (
            "default-scheduler",
        ):
            said.setdefault(str(event.get("reason")), set()).add(str(involved["name"]))
    return said


def _down_reasons(pg: ProvingGround, names: tuple[str, ...]) -> dict[str, str] | None:
    fields = {n: node(pg, n) for n in names}
    if all(f.get("State", "").startswith("DOWN") for f in fields.values()):
        return {n: f.get("Reason", "") for n, f in fields.items()}
    return None


def _requeued(pg: ProvingGround, job: int) -> bool | None:
    return job_state(pg, job) in ("PENDING", "REQUEUED", "CONFIGURING") or None


def _settle(pg: ProvingGround, job: int) -> None:
    if job:
        pg.slurm("scancel", str(job), check=False)


def _three_node_job(pg: ProvingGround) -> int:
    return submit_as_job_user(
        pg, "-p", "gang", "-N3", "-w", "gang-[0-2]", "--requeue", "--output=/dev/null",
        "--wrap", "srun hostname",
    )  # fmt: skip


def test_a_job_kubernetes_cannot_place_whole_binds_no_pod_and_is_requeued_in_seconds(
    proving_ground: ProvingGround, use: Use
) -> None:
    pg = proving_ground
    use("gang-[0-2]")
    assert "podgroups" in pg.kubectl("api-resources", "--api-group=scheduling.k8s.io")
    job = 0
    try:
        since = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=1)
        job = _three_node_job(pg)
        submitted = time.monotonic()
        seen_bound: set[str] = set()

        def all_down() -> dict[str, str] | None:
            # The pods may come and go between two looks (seen: under a second): the
            # scheduler's Events below are the record of what bound.
            ours = pods(pg)
            seen_bound.update(n for n in NODES if n in ours and _bound(ours[n]))
            return _down_reasons(pg, NODES)

        reasons = wait_for("gang-[0-2] DOWN", all_down, 90, every=0.5)
        down_after = time.monotonic() - submitted
        wait_for(f"job {job} requeued", lambda: _requeued(pg, job), 30, every=0.5)
        requeued_after = time.monotonic() - submitted
        groups = {m.group(1) for r in reasons.values() if (m := GANG_REASON.search(r))}
        assert len(groups) == 1, f"the three nodes failed as one gang: {reasons}"
        for name, reason in reasons.items():
            assert reason.startswith("k8s: Unschedulable: pod group "), (name, reason)
        said = _scheduler_said(pg, NODES, since)
        assert seen_bound == set() and not said.get("Scheduled"), (seen_bound, said)
        assert said.get("FailedScheduling"), f"the scheduler tried the gang: {said}"
        print(
            f"gang: sbatch -N3 -> no pod bound (scheduler: {sorted(said)}); gang-[0-2] DOWN in "
            f"{down_after:.1f}s, job requeued in {requeued_after:.1f}s; reason: {reasons['gang-0']}"
        )
        assert requeued_after < 60, "generous bound: a gang's verdict takes seconds"
    finally:
        _settle(pg, job)


def test_without_gang_scheduling_the_same_job_holds_two_nodes_until_the_third_times_out(
    proving_ground: ProvingGround, use: Use, bridge_tmp: Path
) -> None:
    pg = proving_ground
    use("gang-[0-2]")
    config = (pg.layout.root / "dev/bridge.yaml").read_text()
    namespace_line = "  namespace: slurm\n"
    pool_lines = (
        "    partition: gang\n    image: localhost/slurm-k8s-bridge/slurmd:dev\n"
        "    schedule_timeout_s: 120\n"
    )
    assert namespace_line in config and pool_lines in config
    off = bridge_tmp / "bridge.yaml"
    off.write_text(
        config.replace(namespace_line, namespace_line + '  gang_scheduling: "off"\n', 1).replace(
            pool_lines, pool_lines.replace("120", str(COMPARISON_TIMEOUT_S)), 1
        )
    )
    restart_bridge(pg, off)
    job = 0
    try:
        job = _three_node_job(pg)
        submitted = time.monotonic()
        first_bound: float | None = None
        released: float | None = None
        requeued: float | None = None
        third_down: dict[str, str] = {}

        def watched() -> bool | None:
            nonlocal first_bound, released, requeued
            ours = pods(pg)
            live = {n: m for n, m in ours.items() if not m["metadata"].get("deletionTimestamp")}
            bound = [n for n in NODES if n in live and _bound(live[n])]
            assert all(_group_of(ours[n]) == "" for n in NODES if n in ours)
            if bound and first_bound is None:
                first_bound = time.monotonic()
            if first_bound is not None and not bound and released is None:
                released = time.monotonic()
            # The one the scheduler could not place (any of the three; seen: gang-0 and
            # gang-2). Seen DOWN once is enough: failed_node_hold_s (20 s) returns it to idle~.
            for name in NODES:
                third_down.update(_down_reasons(pg, (name,)) or {})
            if requeued is None and third_down and _requeued(pg, job):
                requeued = time.monotonic()
            return (released is not None and requeued is not None) or None

        # The third pod's schedule_timeout, then the bound two until SuspendTime (20 s) after
        # the job left them.
        wait_for("the bound pods released", watched, COMPARISON_TIMEOUT_S + 120, every=0.5)
        assert first_bound is not None and released is not None and requeued is not None
        held = released - first_bound
        print(
            f"no gang: sbatch -N3 -> 2 pods bound {first_bound - submitted:.1f}s after sbatch "
            f"and held their CPUs for {held:.1f}s (schedule_timeout {COMPARISON_TIMEOUT_S}s, "
            f"then SuspendTime); job requeued {requeued - submitted:.1f}s after sbatch; "
            f"DOWN: {third_down}"
        )
        assert held >= COMPARISON_TIMEOUT_S - 10, "the bound pods waited for the third one"
    finally:
        _settle(pg, job)
        restart_bridge(pg)


def test_a_job_that_fits_binds_both_pods_in_one_cycle_and_completes(
    proving_ground: ProvingGround, use: Use
) -> None:
    pg = proving_ground
    use("gang-[0-2]")
    since = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=1)
    job = submit_as_job_user(
        pg, "-p", "gang", "-N2", "-w", "gang-[0-1]", "--output=/dev/null",
        "--wrap", "srun hostname",
    )  # fmt: skip
    try:
        submitted = time.monotonic()
        state = wait_for(f"job {job}", lambda: job_finished(pg, job), 180, every=1)
        assert state == "COMPLETED", state
        ran_after = time.monotonic() - submitted
        ours = pods(pg)
        group_names = {_group_of(ours[n]) for n in ("gang-0", "gang-1") if n in ours}
        (group,) = group_names
        assert group, "both pods of the job were one gang"
        scheduled = _condition(_pod_groups(pg)[group], "PodGroupInitiallyScheduled")
        assert scheduled.get("status") == "True", scheduled
        bound_at = {
            n: _condition(ours[n], "PodScheduled").get("lastTransitionTime")
            for n in ("gang-0", "gang-1")
        }
        print(
            f"gang: sbatch -N2 -> COMPLETED in {ran_after:.1f}s; {group}: {scheduled}; {bound_at}"
        )
        assert len(set(bound_at.values())) == 1, f"bound in one cycle (same second): {bound_at}"
        # The Events the gang test reads for "no pod bound" do show a binding.
        said = _scheduler_said(pg, ("gang-0", "gang-1"), since)
        assert said.get("Scheduled") == {"gang-0", "gang-1"}, said
    finally:
        _settle(pg, job)
