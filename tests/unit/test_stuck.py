"""Stuck nodes: the two views of a node disagree for too long (``bridge.domain.stuck``), as a
table of Slurm state x pod phase x clocks."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import pytest

from bridge.domain.nodes import SlurmNode
from bridge.domain.results import NodeStatus
from bridge.domain.stuck import Sighting, Stuck, find_stuck, track

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
AFTER = timedelta(seconds=300)


def row(slurm: str, pod: str = "", age: int | None = None, reason: str = "") -> NodeStatus:
    """A status row; ``age`` is the pod's age in seconds."""
    since = None if age is None else NOW - timedelta(seconds=age)
    return NodeStatus("cpu-0", "cpu", slurm, pod, "10.1.0.5" if pod else "", reason, since)


CORDONED = "k8s: Cordoned: kubernetes node kn-1 is cordoned; powered down when its jobs end"

CASES = [
    # id, row, seconds since first seen like this (None: not watching), why (None: not stuck)
    ("resting", row("idle~"), None, None),
    ("busy", row("alloc", "Running", 3600), 3600, None),
    ("mixed", row("mix", "Running", 3600), None, None),
    ("completing", row("comp", "Running", 3600), None, None),
    ("idle-up", row("idle", "Running", 3600), None, None),
    ("not-responding-not-ours", row("idle*", "Running", 3600), None, None),
    # Slurm powers the node up; the pod should follow within a reconcile pass.
    ("powering-up-no-pod-unwatched", row("alloc#"), None, None),
    ("powering-up-no-pod-young", row("alloc#"), 10, None),
    ("powering-up-no-pod", row("alloc#"), 400, "Slurm powering up, no pod for 400s (> 300s)"),
    ("pending-young", row("idle#", "Pending", 100), None, None),
    ("pending", row("idle#", "Pending", 400), None, "pod Pending for 400s (> 300s)"),
    ("pending-exactly-after", row("idle#", "Pending", 300), None, "pod Pending for 300s (> 300s)"),
    ("pending-on-up-node", row("alloc", "Pending", 400), None, "pod Pending for 400s (> 300s)"),
    ("running-slurmd-young", row("alloc#", "Running", 100), None, None),
    (
        "running-slurmd-never-registered",
        row("alloc#", "Running", 400),
        None,
        "pod Running but slurmd not registered (Slurm powering up) for 400s (> 300s)",
    ),
    (
        "previous-pod-terminating",
        row("alloc#", "Terminating"),
        400,
        "pod terminating while Slurm wants the node up for 400s (> 300s)",
    ),
    ("previous-pod-terminating-young", row("alloc#", "Terminating"), 10, None),
    # Pods that will never run slurmd again: at once.
    ("failed", row("idle", "Failed", 5), None, "pod Failed"),
    ("unknown-phase", row("alloc", "Unknown", 5), None, "pod Unknown"),
    ("succeeded", row("alloc", "Succeeded", 5), None, "pod Succeeded"),
    ("failed-on-powered-down", row("idle~", "Failed", 5), None, "pod Failed"),
    # Slurm is done with the node, the pod lingers.
    ("powered-down-pod-unwatched", row("idle~", "Running", 4000), None, None),
    ("powered-down-pod-young", row("idle~", "Running", 4000), 10, None),
    (
        "powered-down-pod",
        row("idle~", "Running", 4000),
        400,
        "pod Running while Slurm powered down for 400s (> 300s)",
    ),
    (
        "powering-down-pod",
        row("idle%", "Pending", 4000),
        400,
        "pod Pending while Slurm powering down for 400s (> 300s)",
    ),
    ("powering-down-terminating-normal", row("idle%", "Terminating"), 20, None),
    (
        "terminating-forever",
        row("idle~", "Terminating"),
        400,
        "pod still terminating, Slurm powered down for 400s (> 300s)",
    ),
    # Slurm thinks slurmd runs, but there is no pod.
    ("up-no-pod", row("idle"), 400, "Slurm thinks it is up, no pod for 400s (> 300s)"),
    ("up-no-pod-young", row("alloc"), 10, None),
    ("power-down-queued-idle-no-pod", row("idle!"), 400, None),
    # Busy: the power down waits for a job that lost its slurmd with the pod.
    (
        "power-down-queued-busy-no-pod",
        row("alloc!"),
        400,
        "Slurm thinks it is up, no pod for 400s (> 300s)",
    ),
    # Failures the bridge (or Slurm's ResumeTimeout) declared: at once.
    (
        "down-ours-powering-up",
        row("down#", reason="k8s: NoCapacity: quota"),
        None,
        "k8s: NoCapacity: quota",
    ),
    (
        "down-ours-powered-down",
        row("down~", reason="k8s: ImagePullBackOff: x"),
        None,
        "k8s: ImagePullBackOff: x",
    ),
    ("drain-ours", row("drain", "Running", 60, "k8s: Evicted: y"), None, "k8s: Evicted: y"),
    # Our drain with a power down queued (a cordoned Kubernetes node) waits for the job.
    ("draining-ours-power-down-queued", row("drng!", "Running", 4000, CORDONED), 4000, None),
    ("drained-ours-power-down-queued", row("drain!", "Running", 60, CORDONED), None, None),
    # Our power_down_asap (a template rollout) is planned work: busy, it waits for its jobs;
    # idle, Slurm powers it down on its next pass, or it is stuck once that lasted.
    ("rollout-busy", row("drng!", "Running", 4000, "k8s: Rollout: pool cpu"), 4000, None),
    ("rollout-idle-young", row("drain!", "Running", 4000, "k8s: Rollout: pool cpu"), 10, None),
    (
        "rollout-idle-too-long",
        row("drain!", "Running", 4000, "k8s: Rollout: pool cpu"),
        400,
        "drained to power down, still up for 400s (> 300s)",
    ),
    ("rollout-idle-not-watching", row("drain!", "Running", 4000, "k8s: Rollout: x"), None, None),
    (
        "resume-timeout",
        row("down~", reason="ResumeTimeout reached"),
        None,
        "Slurm gave up on the resume (ResumeTimeout reached); it stays DOWN until resumed",
    ),
    (
        "resume-timeout-appended-to-our-old-reason",
        row("down~", reason="k8s: Rollout: x : ResumeTimeout reached"),
        None,
        "Slurm gave up on the resume (k8s: Rollout: x : ResumeTimeout reached); it stays DOWN "
        "until resumed",
    ),
    # An admin's DOWN or DRAIN is intended, and our stale reason on a resumed node is history
    # (24.11 keeps the reason after state=resume).
    ("down-admin", row("down~", reason="maintenance"), 4000, None),
    ("down-admin-with-pod", row("down", "Running", 4000, "bad DIMM"), 4000, None),
    ("drain-admin", row("drain~", reason="maintenance: disk check"), 4000, None),
    ("draining-admin", row("drng", "Running", 4000, "reboot after job"), 4000, None),
    ("resumed-with-old-reason", row("idle~", reason="k8s: Unschedulable: z"), 4000, None),
    ("timeout-reason-not-down", row("idle~", reason="ResumeTimeout reached"), 4000, None),
    # Slurm does not know the node (a pool covers a name slurm.conf lacks).
    (
        "orphan-pod",
        row("", "Running", 400),
        None,
        "pod Running but Slurm does not know the node for 400s (> 300s)",
    ),
    ("orphan-pod-young", row("", "Running", 10), None, None),
    ("orphan-pod-terminating", row("", "Terminating"), 4000, None),
    ("unknown-no-pod", row(""), 4000, None),
]


@pytest.mark.parametrize(
    ("status", "seen_for", "why"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_stuck(status: NodeStatus, seen_for: int | None, why: str | None) -> None:
    seen = {}
    if seen_for is not None:
        since = NOW - timedelta(seconds=seen_for)
        seen = {status.node: Sighting(status.slurm_state, status.pod_phase, since)}
    stuck = find_stuck([status], NOW, AFTER, seen)
    assert stuck == ([] if why is None else [Stuck("cpu-0", "cpu", why)])


def test_a_sighting_of_another_state_does_not_time_this_one() -> None:
    # Seen powering up with a pod long ago, now without: the clock of the old state is not its.
    old = {"cpu-0": Sighting("alloc#", "Pending", NOW - timedelta(hours=1))}
    assert find_stuck([row("alloc#")], NOW, AFTER, old) == []


def test_the_threshold_is_the_callers() -> None:
    status = row("idle#", "Pending", 100)
    assert find_stuck([status], NOW, timedelta(seconds=60)) == [
        Stuck("cpu-0", "cpu", "pod Pending for 100s (> 60s)")
    ]
    assert find_stuck([status], NOW, timedelta(seconds=101)) == []


def test_stuck_nodes_keep_the_rows_order() -> None:
    rows = [
        NodeStatus("b-1", "b", "idle", "Failed", "", "", None),
        NodeStatus("a-1", "a", "idle~", "", "", "", None),
        NodeStatus("a-0", "a", "down~", "", "", "k8s: PodMissing: gone", None),
    ]
    assert [s.node for s in find_stuck(rows, NOW)] == ["b-1", "a-0"]


def test_track_keeps_the_clock_while_a_node_looks_the_same() -> None:
    t0, t1, t2 = NOW, NOW + timedelta(seconds=2), NOW + timedelta(seconds=4)
    a = NodeStatus("a", "p", "alloc#", "", "", "", None)
    b = NodeStatus("b", "p", "idle~", "", "", "", None)
    seen = track({}, [a, b], t0)
    assert seen == {"a": Sighting("alloc#", "", t0), "b": Sighting("idle~", "", t0)}
    seen = track(seen, [a, b], t1)
    assert seen["a"].since == t0  # unchanged: the clock runs on
    a_pod = NodeStatus("a", "p", "alloc#", "Pending", "", "", t1)
    seen = track(seen, [a_pod], t2)
    assert seen == {"a": Sighting("alloc#", "Pending", t2)}  # changed: restarted; b forgotten


def test_a_rollout_drain_of_a_powering_up_node_is_judged_from_the_whole_node() -> None:
    """``drng#`` hides the queued power down; the whole node (what the bridge now sends) shows
    the drain is the bridge's planned rollout, not a failure to look at."""
    reason = "k8s: Rollout: template changed"
    node = SlurmNode(
        "cpu-0", "ALLOCATED", frozenset({"CLOUD", "DRAIN", "POWER_DOWN", "POWERING_UP"}), reason
    )
    compact = NodeStatus("cpu-0", "cpu", node.display_state, "Running", "", reason, NOW)
    whole = dataclasses.replace(compact, slurm_node=node)
    assert compact.slurm_state == "drng#"
    assert find_stuck([compact], NOW, AFTER) == [Stuck("cpu-0", "cpu", reason)]
    assert find_stuck([whole], NOW, AFTER) == []
