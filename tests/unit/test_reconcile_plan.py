"""The reconcile plan as a table: every row of reconcile.py's case table plus the edge cases.

Each case gives Slurm's nodes and our pods at ``NOW`` and the exact action list. The second test
applies those actions with the in-memory fakes and plans again: the plan must then be quiet (or
take the one follow-up step the case names), so repeated passes never repeat work.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from bridge.domain.nodes import SlurmNode
from bridge.domain.pods import PodFailure, PodView
from bridge.domain.pools import NodePool, PoolSet
from bridge.domain.reconcile import (
    Action,
    CreatePod,
    DeletePod,
    Guards,
    MarkDown,
    PowerDown,
    ResumeNode,
    plan,
)
from tests.unit.fakes import FakePods, FakeSlurm

NOW = datetime(2026, 12, 2, 12, 0, 0, tzinfo=UTC)
GUARDS = Guards(pod_age_guard=timedelta(seconds=30), failed_node_hold=timedelta(seconds=30))
POOLS = PoolSet(
    (
        NodePool.create(
            name="cpu", nodes="cpu-[0-3]", cpus=2, real_memory_mb=1024, image="localhost/s:1"
        ),
    )
)

UNSCHEDULABLE = PodFailure("Unschedulable", "0/3 nodes are available: 3 Insufficient cpu.")
IMAGE = PodFailure("ErrImagePull", "pull access denied for localhost/nope")
EVICTED = PodFailure("Evicted", "The node was low on resource: memory.")
DISRUPTED = PodFailure("EvictionByEvictionAPI", "Eviction API: evicting")
FAILED = PodFailure("Failed", "pod phase is Failed")
DELETED = PodFailure("Deleted", "the pod is being deleted")


def node(
    name: str,
    state: str = "IDLE",
    *flags: str,
    reason: str = "",
    since_s: float | None = None,
) -> SlurmNode:
    """A CLOUD node; ``since_s`` is how long ago Slurm recorded the reason."""
    since = None if since_s is None else NOW - timedelta(seconds=since_s)
    return SlurmNode(name, state, frozenset({"CLOUD", *flags}), reason, "", since)


def pod(
    name: str,
    *,
    age_s: float = 60,
    phase: str = "Running",
    failure: PodFailure | None = None,
    deleting: bool = False,
    pool: str = "cpu",
) -> PodView:
    """A pod of ours created ``age_s`` seconds before ``NOW``."""
    return PodView(
        name=name,
        node=name,
        pool=pool,
        phase=phase,
        ip="10.0.0.1" if phase == "Running" else "",
        created_at=NOW - timedelta(seconds=age_s),
        deleting=deleting,
        failure=failure,
    )


@dataclass(frozen=True)
class Case:
    id: str
    nodes: list[SlurmNode]
    pods: list[PodView]
    actions: list[Action]
    #: What the next pass does once ``actions`` took effect (usually nothing).
    then: list[Action] = field(default_factory=list)
    marks: tuple[Any, ...] = ()


def held(name: str, reason: str) -> list[Action]:
    """The pass after a fail-fast: the node is held DOWN, nothing to do until the hold ends."""
    del name, reason
    return []


def fail_fast(name: str, failure: PodFailure, *, delete: bool = True) -> list[Action]:
    actions: list[Action] = [MarkDown(name, f"k8s: {failure.reason}: {failure.message}")]
    if delete:
        actions.append(DeletePod(name, f"{failure.reason}: {failure.message}"))
    return actions


OURS = "k8s: ErrImagePull: pull access denied"
ADMIN = "maintenance: disk check"

CASES = [
    # -- node powered down or powering down, pod: delete once older than the age guard ----------
    Case(
        "powered-down+old-pod:delete",
        [node("cpu-0", "IDLE", "POWERED_DOWN")],
        [pod("cpu-0")],
        [DeletePod("cpu-0", "Slurm node is powered down")],
    ),
    Case(
        "powering-down+old-pod:delete",
        [node("cpu-0", "IDLE", "POWERING_DOWN")],
        [pod("cpu-0")],
        [DeletePod("cpu-0", "Slurm node is powering down")],
    ),
    Case(
        "powered-down+young-pod:age-guard-holds",
        [node("cpu-0", "IDLE", "POWERED_DOWN")],
        [pod("cpu-0", age_s=29)],
        [],
    ),
    Case(
        "powered-down+pod-exactly-at-age-guard:delete",
        [node("cpu-0", "IDLE", "POWERED_DOWN")],
        [pod("cpu-0", age_s=30)],
        [DeletePod("cpu-0", "Slurm node is powered down")],
    ),
    Case(
        "powered-down+pod-deleting:no-second-delete",
        [node("cpu-0", "IDLE", "POWERED_DOWN")],
        [pod("cpu-0", deleting=True, failure=DELETED)],
        [],
    ),
    Case(
        "powered-down+failed-pod:delete-only",
        [node("cpu-0", "IDLE", "POWERED_DOWN")],
        [pod("cpu-0", phase="Failed", failure=FAILED)],
        [DeletePod("cpu-0", "Slurm node is powered down")],
    ),
    Case("powered-down+no-pod:nothing", [node("cpu-0", "IDLE", "POWERED_DOWN")], [], []),
    Case(
        "queued-power-down(alloc!)+pod:keep-it-for-the-job",
        [node("cpu-0", "ALLOCATED", "POWER_DOWN")],
        [pod("cpu-0")],
        [],
    ),
    # -- node powering up, no pod: create ------------------------------------------------------
    Case(
        "powering-up+no-pod:create",
        [node("cpu-0", "ALLOCATED", "POWERING_UP")],
        [],
        [CreatePod("cpu-0", "cpu", "Slurm node is powering up and has no pod")],
    ),
    Case(
        "powering-up+pending-pod:wait",
        [node("cpu-0", "ALLOCATED", "POWERING_UP")],
        [pod("cpu-0", phase="Pending", age_s=5)],
        [],
    ),
    Case(
        "powering-up+running-pod:wait-for-registration",
        [node("cpu-0", "ALLOCATED", "POWERING_UP")],
        [pod("cpu-0")],
        [],
    ),
    # -- node powering up or up, pod failed: DOWN with reason, delete pod, power down -----------
    Case(
        "powering-up+unschedulable:fail-fast",
        [node("cpu-0", "ALLOCATED", "POWERING_UP")],
        [pod("cpu-0", phase="Pending", age_s=2, failure=UNSCHEDULABLE)],
        fail_fast("cpu-0", UNSCHEDULABLE),
        then=held("cpu-0", f"k8s: {UNSCHEDULABLE.reason}: {UNSCHEDULABLE.message}"),
    ),
    Case(
        "powering-up+image-pull:fail-fast",
        [node("cpu-0", "ALLOCATED", "POWERING_UP")],
        [pod("cpu-0", phase="Pending", failure=IMAGE)],
        fail_fast("cpu-0", IMAGE),
        then=held("cpu-0", f"k8s: {IMAGE.reason}: {IMAGE.message}"),
    ),
    Case(
        "up+evicted(Failed phase):fail-fast",
        [node("cpu-0", "ALLOCATED")],
        [pod("cpu-0", phase="Failed", failure=EVICTED)],
        fail_fast("cpu-0", EVICTED),
        then=held("cpu-0", f"k8s: {EVICTED.reason}: {EVICTED.message}"),
    ),
    Case(
        "up+disruption-target:fail-fast",
        [node("cpu-0", "MIXED")],
        [pod("cpu-0", failure=DISRUPTED)],
        fail_fast("cpu-0", DISRUPTED),
        then=held("cpu-0", f"k8s: {DISRUPTED.reason}: {DISRUPTED.message}"),
    ),
    Case(
        "up+failed-phase:fail-fast",
        [node("cpu-0", "IDLE")],
        [pod("cpu-0", phase="Failed", failure=FAILED)],
        fail_fast("cpu-0", FAILED),
        then=held("cpu-0", f"k8s: {FAILED.reason}: {FAILED.message}"),
    ),
    Case(
        "up+pod-deleted-by-someone:down-and-power-down-no-second-delete",
        [node("cpu-0", "ALLOCATED")],
        [pod("cpu-0", deleting=True, failure=DELETED)],
        fail_fast("cpu-0", DELETED, delete=False),
    ),
    Case("up+running-pod:nothing", [node("cpu-0", "ALLOCATED")], [pod("cpu-0")], []),
    Case(
        "up-not-responding+running-pod:slurm-handles-it",
        [node("cpu-0", "IDLE", "NOT_RESPONDING")],
        [pod("cpu-0")],
        [],
    ),
    Case(
        "drained-by-admin+running-pod:nothing",
        [node("cpu-0", "IDLE", "DRAIN", reason=ADMIN)],
        [pod("cpu-0")],
        [],
    ),
    # -- node up, no pod: DOWN with PodMissing, power down -------------------------------------
    Case(
        "idle+power-down-queued+no-pod:leave-it",
        [node("cpu-0", "IDLE", "POWER_DOWN", reason=OURS, since_s=1)],
        [],
        [],
    ),
    Case(
        "up+no-pod:pod-missing",
        [node("cpu-0", "IDLE")],
        [],
        [MarkDown("cpu-0", "k8s: PodMissing: no pod for node cpu-0; Slurm thinks it is up")],
        then=held("cpu-0", "k8s: PodMissing: no pod for node cpu-0; Slurm thinks it is up"),
    ),
    # -- node DOWN ------------------------------------------------------------------------------
    Case(
        "down-admin-reason+pod:untouched",
        [node("cpu-0", "DOWN", reason=ADMIN)],
        [pod("cpu-0")],
        [],
    ),
    Case("down-admin-reason+no-pod:untouched", [node("cpu-0", "DOWN", reason=ADMIN)], [], []),
    Case(
        "down#-admin-reason+no-pod:no-create",
        [node("cpu-0", "DOWN", "POWERING_UP", "NOT_RESPONDING", reason="test down")],
        [],
        [],
    ),
    Case(
        "down-our-reason+pod:delete-then-hold",
        [node("cpu-0", "DOWN", reason=OURS, since_s=5)],
        [pod("cpu-0")],
        [DeletePod("cpu-0", "Down: ErrImagePull: pull access denied")],
        then=held("cpu-0", OURS),
    ),
    Case(
        "down-our-reason+pod-deleting:wait",
        [node("cpu-0", "DOWN", reason=OURS, since_s=5)],
        [pod("cpu-0", deleting=True, failure=DELETED)],
        [],
    ),
    Case(
        # resume's NoCapacity path leaves down#: held first, no re-create.
        "down#-our-reason+no-pod:held-no-re-create",
        [node("cpu-0", "DOWN", "POWERING_UP", reason="k8s: NoCapacity: quota", since_s=1)],
        [],
        [],
        then=held("cpu-0", "k8s: NoCapacity: quota"),
    ),
    Case(
        # ... and once the hold is over, powered down instead of waiting for ResumeTimeout.
        "down#-our-reason+no-pod-hold-over:power-down",
        [node("cpu-0", "DOWN", "POWERING_UP", reason="k8s: NoCapacity: quota", since_s=31)],
        [],
        [PowerDown("cpu-0", "held DOWN for 0:00:30")],
    ),
    Case(
        "down-our-reason-up+no-pod-hold-over:power-down",
        [node("cpu-0", "DOWN", reason=OURS, since_s=60)],
        [],
        [PowerDown("cpu-0", "held DOWN for 0:00:30")],
    ),
    # -- node powered down + DOWN with our reason: resume after the hold -----------------------
    Case(
        "down~-our-reason-hold-expired:resume",
        [node("cpu-0", "DOWN", "POWERED_DOWN", reason=OURS, since_s=30)],
        [],
        [ResumeNode("cpu-0", "held DOWN for 0:00:30")],
    ),
    Case(
        "down~-our-reason-held:nothing-yet",
        [node("cpu-0", "DOWN", "POWERED_DOWN", reason=OURS, since_s=29)],
        [],
        [],
    ),
    Case(
        "down~-our-reason-time-unknown:resume",
        [node("cpu-0", "DOWN", "POWERED_DOWN", reason=OURS)],
        [],
        [ResumeNode("cpu-0", "held DOWN for 0:00:30")],
    ),
    Case(
        "down~-our-reason+old-pod:delete-first-resume-next-pass",
        [node("cpu-0", "DOWN", "POWERED_DOWN", reason=OURS, since_s=60)],
        [pod("cpu-0")],
        [DeletePod("cpu-0", "Slurm node is powered down")],
        then=[ResumeNode("cpu-0", "held DOWN for 0:00:30")],
    ),
    Case(
        "down~-admin-reason:untouched",
        [node("cpu-0", "DOWN", "POWERED_DOWN", reason=ADMIN, since_s=600)],
        [],
        [],
    ),
    # -- orphans ----------------------------------------------------------------------------
    Case(
        "orphan-no-pool:delete",
        [],
        [pod("gpu-0", pool="gpu")],
        [DeletePod("gpu-0", "orphan pod: no pool owns it")],
    ),
    Case(
        "orphan-no-pool-but-slurm-knows:delete",
        [node("gpu-0", "ALLOCATED")],
        [pod("gpu-0", pool="gpu")],
        [DeletePod("gpu-0", "orphan pod: no pool owns it")],
    ),
    Case(
        "orphan-slurm-unknown:delete",
        [],
        [pod("cpu-3")],
        [DeletePod("cpu-3", "orphan pod: Slurm does not know it")],
    ),
    Case("orphan-young:age-guard-holds", [], [pod("cpu-3", age_s=1)], []),
    Case(
        "orphan-deleting:no-second-delete",
        [],
        [pod("cpu-3", deleting=True, failure=DELETED)],
        [],
    ),
    Case("unknown-node-no-pod:ignored", [node("gpu-0", "IDLE")], [], []),
    # -- several nodes: one stable, name-sorted list --------------------------------------------
    Case(
        "several-nodes:sorted-by-name",
        [
            node("cpu-2", "ALLOCATED", "POWERING_UP"),
            node("cpu-0", "IDLE", "POWERED_DOWN"),
            node("cpu-1", "IDLE"),
        ],
        [pod("cpu-0"), pod("cpu-1"), pod("zz-9", pool="zz")],
        [
            DeletePod("cpu-0", "Slurm node is powered down"),
            CreatePod("cpu-2", "cpu", "Slurm node is powering up and has no pod"),
            DeletePod("zz-9", "orphan pod: no pool owns it"),
        ],
    ),
    # -- known gaps (strict xfail: they flip to failures once fixed) -----------------------------
    Case(
        # Slurm resumed the node while its previous pod still terminates (grace period): the
        # resume RPC got 409 from our own terminating pod and counted it as "exists already".
        # The previous cycle's pod is still terminating: wait, then create.
        "powering-up+old-pod-terminating:wait-then-create",
        [node("cpu-0", "ALLOCATED", "POWERING_UP")],
        [pod("cpu-0", deleting=True, failure=DELETED)],
        [],
    ),
]


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id, marks=c.marks) for c in CASES])
def test_plan(case: Case) -> None:
    assert plan(case.nodes, case.pods, POOLS, NOW, GUARDS) == case.actions


def apply(actions: list[Action], slurm: FakeSlurm, pods: FakePods) -> None:
    """Carry the actions out on the fakes, in the order the service does (Slurm first)."""
    for a in actions:
        if isinstance(a, MarkDown):
            slurm.update_nodes([a.node], state="down", reason=a.reason)
    for a in actions:
        if isinstance(a, DeletePod):
            pods.delete_pods([a.node])
    for a in actions:
        if isinstance(a, PowerDown):
            slurm.update_nodes([a.node], state="power_down_force")
        elif isinstance(a, ResumeNode):
            slurm.update_nodes([a.node], state="resume")
        elif isinstance(a, CreatePod):
            pods.add(a.node, pool=a.pool, phase="Pending")


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id) for c in CASES if not c.marks])
def test_plan_after_its_actions_is_quiet(case: Case) -> None:
    slurm = FakeSlurm(case.nodes, now=NOW)
    pods = FakePods(now=NOW)
    pods.pods = {p.node: p for p in case.pods}
    apply(plan(case.nodes, case.pods, POOLS, NOW, GUARDS), slurm, pods)
    second = plan(slurm.list_nodes(), pods.list_pods()[0], POOLS, NOW, GUARDS)
    assert second == case.then
    apply(second, slurm, pods)
    assert plan(slurm.list_nodes(), pods.list_pods()[0], POOLS, NOW, GUARDS) == []


def test_plan_is_pure() -> None:
    nodes = [node("cpu-0", "IDLE"), node("cpu-1", "ALLOCATED", "POWERING_UP")]
    pods = [pod("cpu-0", failure=IMAGE)]
    first = plan(nodes, pods, POOLS, NOW, GUARDS)
    assert plan(iter(nodes), iter(pods), POOLS, NOW, GUARDS) == first
    assert nodes == [node("cpu-0", "IDLE"), node("cpu-1", "ALLOCATED", "POWERING_UP")]


def test_reasons_are_short_single_lines() -> None:
    long = PodFailure("ErrImagePull", "line one\nline two " + "x" * 400)
    (mark, *_) = plan([node("cpu-0", "IDLE")], [pod("cpu-0", failure=long)], POOLS, NOW, GUARDS)
    assert isinstance(mark, MarkDown)
    assert "\n" not in mark.reason
    assert len(mark.reason) == 200
    assert mark.reason.startswith("k8s: ErrImagePull: line one line two x")
    assert mark.reason.endswith("...")
