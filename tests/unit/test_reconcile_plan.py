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
from bridge.domain.pod_groups import GangUnschedulable, PodGroupView
from bridge.domain.pods import MANAGED_BY, PodFailure, PodHoldup, PodView
from bridge.domain.pools import NodePool, PoolSet
from bridge.domain.reason import Reason
from bridge.domain.reconcile import (
    Action,
    CreatePod,
    DeletePod,
    DeletePodGroup,
    ForceDeletePod,
    Guards,
    MarkDown,
    PowerDown,
    PowerDownAsap,
    ResumeNode,
    SetAddress,
    SetComment,
    SetPodSlurmState,
    plan,
)
from bridge.domain.verdict import ScaleUpEvent
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
NEVER_PULL = PodFailure("ErrImageNeverPull", 'image "localhost/nope" is not present')
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
    address: str = "",
    comment: str = "",
) -> SlurmNode:
    """A CLOUD node; ``since_s`` is how long ago Slurm recorded the reason.

    ``address`` "" means Slurm did not say (the plan then leaves NodeAddr alone).
    """
    since = None if since_s is None else NOW - timedelta(seconds=since_s)
    return SlurmNode(
        name, state, frozenset({"CLOUD", *flags}), reason, address, since, comment=comment
    )


def pod(
    name: str,
    *,
    age_s: float = 60,
    phase: str = "Running",
    failure: PodFailure | None = None,
    deleting: bool = False,
    pool: str = "cpu",
    uid: str = "",
    holdup: PodHoldup | None = None,
    overdue_s: float | None = None,
    ip: str | None = None,
    host: str = "",
    deletion_grace_s: int | None = None,
    seen_s: float | None = None,
    pod_group: str | None = None,
) -> PodView:
    """A pod of ours created ``age_s`` seconds before ``NOW``; ``overdue_s``: how long ago its
    deletion grace period ended; ``seen_s``: how long ago the bridge first saw it."""
    deadline = None if overdue_s is None else NOW - timedelta(seconds=overdue_s)
    return PodView(
        name=name,
        node=name,
        pool=pool,
        phase=phase,
        ip=ip if ip is not None else ("10.0.0.1" if phase == "Running" else ""),
        created_at=NOW - timedelta(seconds=age_s),
        deleting=deleting,
        failure=failure,
        uid=uid,
        holdup=holdup,
        deletion_deadline=deadline,
        deletion_grace_s=deletion_grace_s,
        host=host,
        first_seen=None if seen_s is None else NOW - timedelta(seconds=seen_s),
        pod_group=pod_group,
    )


def unschedulable(waited_s: float) -> PodHoldup:
    return PodHoldup("Unschedulable", NO_FIT, NOW - timedelta(seconds=waited_s))


def pulling(waited_s: float) -> PodHoldup:
    return PodHoldup("ErrImagePull", "registry timeout", NOW - timedelta(seconds=waited_s))


def said(reason: str, ago_s: float, uid: str = "u-1", message: str = "") -> ScaleUpEvent:
    return ScaleUpEvent(uid, reason, message, NOW - timedelta(seconds=ago_s))


GANG = "skb-job-12-cpu-3f2a1c"


def pod_group(
    name: str = GANG,
    *,
    age_s: float = 60,
    unschedulable_s: float | None = None,
    min_count: int | None = None,
) -> PodGroupView:
    """A PodGroup of ours made ``age_s`` ago; ``unschedulable_s``: how long ago the scheduler
    said it cannot place the gang (None: it did not); ``min_count``: its gang's size."""
    word = (
        None
        if unschedulable_s is None
        else GangUnschedulable(NO_FIT, NOW - timedelta(seconds=unschedulable_s))
    )
    return PodGroupView(
        name,
        NOW - timedelta(seconds=age_s),
        unschedulable=word,
        managed_by=MANAGED_BY,
        min_count=min_count,
    )


NO_FIT = "0/3 nodes are available: 3 Insufficient cpu."
NO_GROUP = "pod didn't trigger scale-up: 2 max node group size reached"
NEVER_FITS = "pod didn't trigger scale-up: 2 Insufficient cpu"
WAITING_40S = "k8s: waiting: Unschedulable since 2026-12-02T11:59:20Z"
GANG_UNPLACEABLE = f"pod group skb-job-12-cpu-3f2a1c cannot be placed whole: {NO_FIT}"


@dataclass(frozen=True)
class Case:
    id: str
    nodes: list[SlurmNode]
    pods: list[PodView]
    actions: list[Action]
    #: What the next pass does once ``actions`` took effect (usually nothing).
    then: list[Action] = field(default_factory=list)
    marks: tuple[Any, ...] = ()
    #: What a cluster autoscaler said (Events on pods).
    events: list[ScaleUpEvent] = field(default_factory=list)
    #: The Kubernetes nodes that are cordoned.
    cordoned: frozenset[str] = frozenset()
    #: The bridge's PodGroups (gang scheduling).
    groups: list[PodGroupView] = field(default_factory=list)


def held(name: str, reason: str) -> list[Action]:
    """The pass after a fail-fast: the node is held DOWN, nothing to do until the hold ends."""
    del name, reason
    return []


def fail_fast(
    name: str, failure: PodFailure, *, delete: bool = True, uid: str = ""
) -> list[Action]:
    actions: list[Action] = [MarkDown(name, Reason(failure.reason, failure.message))]
    if delete:
        actions.append(DeletePod(name, f"{failure.reason}: {failure.message}", uid))
    return actions


OURS = "k8s: ErrImagePull: pull access denied"
CORDONED_KN_1 = "k8s: Cordoned: kubernetes node kn-1 is cordoned; powered down when its jobs end"
ON_KN_1 = "k8s: pod cpu-0 on kn-1 ip 10.0.0.1"
ADMIN = "maintenance: disk check"
UNPOOLED = (
    "k8s: PoolRemoved: no pool owns it since a configuration change; powered down when its jobs end"
)
KN_1_CORDONED = frozenset({"kn-1"})
#: What the plan does with cpu-0 whose pod runs on cordoned kn-1.
POWER_DOWN_CORDONED = PowerDownAsap("cpu-0", CORDONED_KN_1)
#: cpu-0's NodeAddr follows its pod's IP, and goes back to its name when the pod is gone.
TO_POD_IP = SetAddress("cpu-0", "10.213.0.7", "pod cpu-0 has IP 10.213.0.7")
BACK_TO_NAME = SetAddress("cpu-0", "cpu-0", "no pod: 10.213.0.7 is no longer its IP")

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
    # -- held up: Kubernetes may still run the pod; fail only on evidence ---------------------
    Case(
        "powering-up+unschedulable-40s:wait-and-say-so",
        [node("cpu-0", "ALLOCATED", "POWERING_UP")],
        [pod("cpu-0", phase="Pending", uid="u-1", holdup=unschedulable(40))],
        [SetComment("cpu-0", WAITING_40S)],
    ),
    Case(
        "powering-up+unschedulable+comment-already-says-so:quiet",
        [node("cpu-0", "ALLOCATED", "POWERING_UP", comment=WAITING_40S)],
        [pod("cpu-0", phase="Pending", uid="u-1", holdup=unschedulable(40))],
        [],
    ),
    Case(
        "powering-up+unschedulable+autoscaler-triggered:wait",
        [node("cpu-0", "ALLOCATED", "POWERING_UP")],
        [pod("cpu-0", phase="Pending", uid="u-1", holdup=unschedulable(40))],
        [SetComment("cpu-0", WAITING_40S + ", TriggeredScaleUp")],
        events=[said("NotTriggerScaleUp", 30), said("TriggeredScaleUp", 10)],
    ),
    Case(
        "powering-up+unschedulable-300s:fail-at-schedule-timeout",
        [node("cpu-0", "ALLOCATED", "POWERING_UP")],
        [pod("cpu-0", phase="Pending", uid="u-1", holdup=unschedulable(300))],
        fail_fast(
            "cpu-0",
            PodFailure("Unschedulable", f"{NO_FIT} (waited 300s, schedule_timeout 300s)"),
            uid="u-1",
        ),
    ),
    Case(
        "powering-up+unschedulable+autoscaler-says-never:fail-fast",
        [node("cpu-0", "ALLOCATED", "POWERING_UP")],
        [pod("cpu-0", phase="Pending", uid="u-1", holdup=unschedulable(5))],
        fail_fast("cpu-0", PodFailure("NotTriggerScaleUp", NEVER_FITS), uid="u-1"),
        events=[said("TriggeredScaleUp", 4), said("NotTriggerScaleUp", 1, message=NEVER_FITS)],
    ),
    # At its maximum size the group cannot help now, but can later: a wait (issue 29 item 4).
    Case(
        "powering-up+unschedulable+autoscaler-says-full:wait",
        [node("cpu-0", "ALLOCATED", "POWERING_UP")],
        [pod("cpu-0", phase="Pending", uid="u-1", holdup=unschedulable(5))],
        [
            SetComment(
                "cpu-0", "k8s: waiting: Unschedulable since 2026-12-02T11:59:55Z, NotTriggerScaleUp"
            )
        ],
        events=[said("TriggeredScaleUp", 4), said("NotTriggerScaleUp", 1, message=NO_GROUP)],
    ),
    Case(
        "powering-up+unschedulable+autoscaler-says-full-300s:fail-uncounted",
        [node("cpu-0", "ALLOCATED", "POWERING_UP")],
        [pod("cpu-0", phase="Pending", uid="u-1", holdup=unschedulable(300))],
        fail_fast(
            "cpu-0",
            PodFailure("NoCapacity", f"{NO_GROUP} (waited 300s, schedule_timeout 300s)"),
            uid="u-1",
        ),
        events=[said("NotTriggerScaleUp", 1, message=NO_GROUP)],
    ),
    Case(
        "admin-comment+unschedulable:kept",
        [node("cpu-0", "ALLOCATED", "POWERING_UP", comment=ADMIN)],
        [pod("cpu-0", phase="Pending", uid="u-1", holdup=unschedulable(40))],
        [],
    ),
    Case(
        "powering-up+no-pod+waiting-for-quota:comment-kept",
        [node("cpu-0", "ALLOCATED", "POWERING_UP", comment="k8s: waiting: NoCapacity since x")],
        [],
        [CreatePod("cpu-0", "cpu", "Slurm node is powering up and has no pod")],
        then=[SetComment("cpu-0", "")],  # the pod exists: the wait is over
    ),
    Case(
        "powering-up+unschedulable+no-from-another-pod:wait",
        [node("cpu-0", "ALLOCATED", "POWERING_UP")],
        [pod("cpu-0", phase="Pending", uid="u-1", holdup=unschedulable(40))],
        [SetComment("cpu-0", WAITING_40S)],
        events=[said("NotTriggerScaleUp", 1, uid="u-old", message=NO_GROUP)],
    ),
    Case(
        "powering-up+unschedulable+no-from-before-this-holdup:wait",
        [node("cpu-0", "ALLOCATED", "POWERING_UP")],
        [pod("cpu-0", phase="Pending", uid="u-1", holdup=unschedulable(40))],
        [SetComment("cpu-0", WAITING_40S)],
        events=[said("NotTriggerScaleUp", 60, message=NO_GROUP)],
    ),
    # -- a gang (its job's PodGroup) the scheduler cannot place --------------------------------
    Case(
        "powering-up+gang-unschedulable:fail-at-once",
        [node("cpu-0", "ALLOCATED", "POWERING_UP"), node("cpu-1", "ALLOCATED", "POWERING_UP")],
        [
            pod("cpu-0", phase="Pending", uid="u-0", holdup=unschedulable(5), pod_group=GANG),
            pod("cpu-1", phase="Pending", uid="u-1", holdup=unschedulable(5), pod_group=GANG),
        ],
        [
            *fail_fast("cpu-0", PodFailure("Unschedulable", GANG_UNPLACEABLE), uid="u-0"),
            *fail_fast("cpu-1", PodFailure("Unschedulable", GANG_UNPLACEABLE), uid="u-1"),
        ],
        # Its pods gone, the group is collected.
        then=[DeletePodGroup(GANG, "no pod names it any more")],
        groups=[pod_group(unschedulable_s=5, min_count=2)],
    ),
    Case(
        # The pods come from the watch's cache, the group from a list read after it: the
        # scheduler's word can arrive before the cache holds the whole gang (seen in CI:
        # gang-0 failed alone, gang-[1-2] released without the reason). Judged by its own
        # hold-up until a watch event later the view holds the gang.
        "powering-up+gang-unschedulable+view-without-the-whole-gang:wait-as-one-pod",
        [node("cpu-0", "ALLOCATED", "POWERING_UP")],
        [pod("cpu-0", phase="Pending", uid="u-1", holdup=unschedulable(40), pod_group=GANG)],
        [SetComment("cpu-0", WAITING_40S)],
        groups=[pod_group(unschedulable_s=5, min_count=2)],
    ),
    Case(
        "powering-up+gang-unschedulable+autoscaler-triggered:wait",
        [node("cpu-0", "ALLOCATED", "POWERING_UP")],
        [pod("cpu-0", phase="Pending", uid="u-1", holdup=unschedulable(40), pod_group=GANG)],
        [SetComment("cpu-0", WAITING_40S + ", TriggeredScaleUp")],
        events=[said("TriggeredScaleUp", 10)],
        groups=[pod_group(unschedulable_s=40)],
    ),
    Case(
        "powering-up+gang-unschedulable+autoscaler-triggered-300s:fail-at-schedule-timeout",
        [node("cpu-0", "ALLOCATED", "POWERING_UP")],
        [pod("cpu-0", phase="Pending", uid="u-1", holdup=unschedulable(300), pod_group=GANG)],
        fail_fast(
            "cpu-0",
            PodFailure("Unschedulable", f"{NO_FIT} (waited 300s, schedule_timeout 300s)"),
            uid="u-1",
        ),
        then=[DeletePodGroup(GANG, "no pod names it any more")],
        events=[said("TriggeredScaleUp", 250)],
        groups=[pod_group(age_s=400, unschedulable_s=300)],
    ),
    Case(
        "powering-up+gang-not-judged-yet:wait-as-one-pod",
        [node("cpu-0", "ALLOCATED", "POWERING_UP")],
        [pod("cpu-0", phase="Pending", uid="u-1", holdup=unschedulable(40), pod_group=GANG)],
        [SetComment("cpu-0", WAITING_40S)],
        groups=[pod_group()],
    ),
    Case(
        "powering-up+gang-unschedulable-but-another-group:wait-as-one-pod",
        [node("cpu-0", "ALLOCATED", "POWERING_UP")],
        [pod("cpu-0", phase="Pending", uid="u-1", holdup=unschedulable(40), pod_group=GANG)],
        [SetComment("cpu-0", WAITING_40S)],
        groups=[pod_group("skb-job-13-cpu-3f2a1c", age_s=40, unschedulable_s=40)],
    ),
    # -- PodGroups no pod names any more: collected (they have no owner) ---------------------
    Case(
        "stale-pod-group:delete",
        [node("cpu-0", "IDLE", "POWERED_DOWN")],
        [],
        [DeletePodGroup(GANG, "no pod names it any more")],
        groups=[pod_group(age_s=60)],
    ),
    Case(
        "young-pod-group-without-pods:kept-for-its-pods-on-their-way",
        [node("cpu-0", "ALLOCATED", "POWERING_UP")],
        [],
        [CreatePod("cpu-0", "cpu", "Slurm node is powering up and has no pod")],
        groups=[pod_group(age_s=59)],
    ),
    Case(
        "pod-group-its-pods-name:kept",
        [node("cpu-0", "ALLOCATED")],
        [pod("cpu-0", pod_group=GANG)],
        [],
        groups=[pod_group(age_s=600)],
    ),
    Case(
        "powering-up+image-pull-failing-30s:wait",
        [node("cpu-0", "ALLOCATED", "POWERING_UP")],
        [pod("cpu-0", phase="Pending", holdup=pulling(30))],
        [SetComment("cpu-0", "k8s: waiting: ErrImagePull since 2026-12-02T11:59:30Z")],
    ),
    Case(
        "powering-up+image-pull-failing-120s:fail",
        [node("cpu-0", "ALLOCATED", "POWERING_UP")],
        [pod("cpu-0", phase="Pending", holdup=pulling(120))],
        fail_fast(
            "cpu-0",
            PodFailure(
                "ErrImagePull", "registry timeout (failing for 120s, image_pull_timeout 120s)"
            ),
        ),
    ),
    Case(
        "powering-up+permanent-image-error:fail-fast",
        [node("cpu-0", "ALLOCATED", "POWERING_UP")],
        [pod("cpu-0", phase="Pending", failure=NEVER_PULL)],
        fail_fast("cpu-0", NEVER_PULL),
        then=held("cpu-0", f"k8s: {NEVER_PULL.reason}: {NEVER_PULL.message}"),
    ),
    Case(
        "up+stale-waiting-comment:cleared",
        [node("cpu-0", "ALLOCATED", comment=WAITING_40S)],
        [pod("cpu-0")],
        [SetComment("cpu-0", "")],
    ),
    Case(
        "up+admin-comment:kept",
        [node("cpu-0", "ALLOCATED", comment="rack 4")],
        [pod("cpu-0")],
        [],
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
    # -- Slurm drain: the pod stays until Slurm powers the node down ------------------------------
    Case(
        "admin-drain+busy:keep-the-pod",
        [node("cpu-0", "ALLOCATED", "DRAIN", reason=ADMIN)],
        [pod("cpu-0")],
        [],
    ),
    Case(
        "admin-drain+idle:nothing(slurm-powers-down-after-SuspendTime)",
        [node("cpu-0", "IDLE", "DRAIN", reason=ADMIN)],
        [pod("cpu-0")],
        [],
    ),
    # -- a pod failure on an admin's drain: DOWN, but their reason and drain stay (issue 29 #10)
    Case(
        "admin-drain+busy+pod-evicted:down-keeping-the-admin-reason",
        [node("cpu-0", "ALLOCATED", "DRAIN", reason=ADMIN)],
        [pod("cpu-0", deleting=True, failure=DISRUPTED)],
        [MarkDown("cpu-0", Reason(DISRUPTED.reason, DISRUPTED.message), admin_reason=ADMIN)],
    ),
    Case(
        "admin-drain+idle+pod-failed:down-keeping-the-admin-reason",
        [node("cpu-0", "IDLE", "DRAIN", reason=ADMIN)],
        [pod("cpu-0", phase="Failed", failure=FAILED)],
        [
            MarkDown("cpu-0", Reason(FAILED.reason, FAILED.message), admin_reason=ADMIN),
            DeletePod("cpu-0", f"{FAILED.reason}: {FAILED.message}"),
        ],
    ),
    Case(
        "admin-fail+pod-missing:down-keeping-the-admin-reason",
        [node("cpu-0", "IDLE", "FAIL", reason=ADMIN)],
        [],
        [
            MarkDown(
                "cpu-0",
                Reason("PodMissing", "no pod for node cpu-0; Slurm thinks it is up"),
                unless_pod_exists=True,
                admin_reason=ADMIN,
            )
        ],
    ),
    Case(
        "down+admin-drain+no-pod-long-after:never-powered-down-nor-resumed",
        [node("cpu-0", "DOWN", "DRAIN", reason=ADMIN, since_s=600)],
        [],
        [],
    ),
    # -- Kubernetes cordon/drain: Slurm drains the node first -----------------------------------
    Case(
        "cordoned-host+busy:power-down-asap",
        [node("cpu-0", "ALLOCATED", comment=ON_KN_1)],
        [pod("cpu-0", host="kn-1")],
        [POWER_DOWN_CORDONED],
        cordoned=KN_1_CORDONED,
    ),
    Case(
        "cordoned-host+idle:power-down-asap",
        [node("cpu-0", "IDLE", comment=ON_KN_1)],
        [pod("cpu-0", host="kn-1")],
        [POWER_DOWN_CORDONED],
        cordoned=KN_1_CORDONED,
    ),
    Case(
        "cordoned-host+already-queued-with-our-reason:nothing",
        [node("cpu-0", "ALLOCATED", "DRAIN", "POWER_DOWN", reason=CORDONED_KN_1, comment=ON_KN_1)],
        [pod("cpu-0", host="kn-1")],
        [],
        cordoned=KN_1_CORDONED,
    ),
    Case(
        "cordoned-host+admin-drain:not-over-it",
        [node("cpu-0", "ALLOCATED", "DRAIN", reason=ADMIN, comment=ON_KN_1)],
        [pod("cpu-0", host="kn-1")],
        [],
        cordoned=KN_1_CORDONED,
    ),
    Case(
        "other-host-cordoned:nothing",
        [node("cpu-0", "ALLOCATED", comment=ON_KN_1)],
        [pod("cpu-0", host="kn-1")],
        [],
        cordoned=frozenset({"kn-2"}),
    ),
    Case(
        "cordoned-host+pod-deleting:fail-not-drain",
        [node("cpu-0", "ALLOCATED")],
        [pod("cpu-0", host="kn-1", deleting=True, failure=DELETED)],
        fail_fast("cpu-0", DELETED, delete=False),
        cordoned=KN_1_CORDONED,
    ),
    Case(
        "cordoned-host+powering-down:delete-not-drain",
        [node("cpu-0", "IDLE", "POWERING_DOWN", reason=CORDONED_KN_1)],
        [pod("cpu-0", host="kn-1")],
        [DeletePod("cpu-0", "Slurm node is powering down")],
        cordoned=KN_1_CORDONED,
    ),
    # -- node up, no pod: DOWN with PodMissing, power down -------------------------------------
    Case(
        "idle+power-down-queued+no-pod:leave-it",
        [node("cpu-0", "IDLE", "POWER_DOWN", reason=OURS, since_s=1)],
        [],
        [],
    ),
    Case(
        # A job runs there (a rollout or a cordon queued the power down for after it): the
        # vanished pod took slurmd and the job with it; requeue now, not at SlurmdTimeout.
        "busy+power-down-queued+no-pod:pod-missing",
        [node("cpu-0", "ALLOCATED", "DRAIN", "POWER_DOWN", reason=CORDONED_KN_1)],
        [],
        [
            MarkDown(
                "cpu-0",
                Reason("PodMissing", "no pod for node cpu-0; Slurm thinks it is up"),
                unless_pod_exists=True,
            )
        ],
        then=held("cpu-0", "k8s: PodMissing: no pod for node cpu-0; Slurm thinks it is up"),
    ),
    Case(
        "up+no-pod:pod-missing",
        [node("cpu-0", "IDLE")],
        [],
        [
            MarkDown(
                "cpu-0",
                Reason("PodMissing", "no pod for node cpu-0; Slurm thinks it is up"),
                unless_pod_exists=True,
            )
        ],
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
    # Issue 29 item 9: Slurm appended its own DOWN to a reason of ours left from an earlier
    # cycle. Before, the bridge took it for its own: the pod deleted, the node powered down.
    Case(
        "down-slurm-appended-to-our-old-reason+pod:untouched",
        [node("cpu-0", "DOWN", "NOT_RESPONDING", reason=f"{OURS} : Not responding", since_s=600)],
        [pod("cpu-0")],
        [],
    ),
    Case(
        "down-slurm-appended-to-our-old-reason+no-pod:not-powered-down",
        [node("cpu-0", "DOWN", reason=f"{OURS} : Not responding", since_s=600)],
        [],
        [],
    ),
    Case(
        "down~-resume-timeout-appended+no-pod:not-resumed",
        [
            node(
                "cpu-0",
                "DOWN",
                "POWERED_DOWN",
                reason=f"{OURS} : ResumeTimeout reached",
                since_s=600,
            )
        ],
        [],
        [],
    ),
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
    # -- a node a reload took out of every pool: its jobs first (issue 29 item 1) ----------------
    Case(
        "unpooled-busy:drained-through-slurm-not-deleted",
        [node("gpu-0", "ALLOCATED")],
        [pod("gpu-0", pool="gpu")],
        [PowerDownAsap("gpu-0", UNPOOLED)],
    ),
    Case(
        "unpooled-idle:drained-through-slurm-not-deleted",
        [node("gpu-0", "IDLE")],
        [pod("gpu-0", pool="gpu")],
        [PowerDownAsap("gpu-0", UNPOOLED)],
    ),
    Case(
        "unpooled-asked-already:nothing",
        [node("gpu-0", "ALLOCATED", "DRAIN", "POWER_DOWN", reason="k8s: PoolRemoved: x")],
        [pod("gpu-0", pool="gpu")],
        [],
    ),
    Case(
        "unpooled-admin-drain:theirs",
        [node("gpu-0", "IDLE", "DRAIN", reason=ADMIN)],
        [pod("gpu-0", pool="gpu")],
        [],
    ),
    Case(
        "unpooled-powering-up:waits-for-its-job",
        [node("gpu-0", "ALLOCATED", "POWERING_UP")],
        [pod("gpu-0", pool="gpu")],
        [],
    ),
    Case(
        "unpooled-powering-down:pod-goes",
        [node("gpu-0", "IDLE", "POWERING_DOWN")],
        [pod("gpu-0", pool="gpu")],
        [DeletePod("gpu-0", "orphan pod: no pool owns it")],
    ),
    Case(
        "unpooled-powered-down:pod-goes",
        [node("gpu-0", "IDLE", "POWERED_DOWN")],
        [pod("gpu-0", pool="gpu")],
        [DeletePod("gpu-0", "orphan pod: no pool owns it")],
    ),
    Case(
        "unpooled-powered-down-young-pod:age-guard-holds",
        [node("gpu-0", "IDLE", "POWERED_DOWN")],
        [pod("gpu-0", pool="gpu", age_s=1)],
        [],
    ),
    Case(
        "orphan-slurm-unknown:delete",
        [],
        [pod("cpu-3")],
        [DeletePod("cpu-3", "orphan pod: Slurm does not know it")],
    ),
    Case("orphan-young:age-guard-holds", [], [pod("cpu-3", age_s=1)], []),
    # The bridge's clock 40 s ahead of the API server's: the pod looks 41 s old, but the bridge
    # first saw it 1 s ago (issue 29 item 13).
    Case(
        "orphan-young+bridge-clock-ahead:age-guard-holds",
        [],
        [pod("cpu-3", age_s=41, seen_s=1)],
        [],
    ),
    Case(
        "powered-down+young-pod+bridge-clock-ahead:age-guard-holds",
        [node("cpu-0", "IDLE", "POWERED_DOWN")],
        [pod("cpu-0", age_s=41, seen_s=1)],
        [],
    ),
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
    # -- a terminating predecessor: wait, never inherit its failure, force it when stuck ------
    Case(
        "powering-up+old-pod-terminating:wait-then-create",
        [node("cpu-0", "ALLOCATED", "POWERING_UP")],
        [pod("cpu-0", deleting=True, failure=DELETED, overdue_s=-20)],
        [],
    ),
    Case(
        "powering-up+evicted-predecessor-terminating:wait-not-fail",
        [node("cpu-0", "ALLOCATED", "POWERING_UP")],
        [pod("cpu-0", phase="Failed", deleting=True, failure=EVICTED, overdue_s=-20)],
        [],
    ),
    Case(
        "powering-up+predecessor-stuck-past-grace:force-delete-then-create",
        [node("cpu-0", "ALLOCATED", "POWERING_UP")],
        [pod("cpu-0", deleting=True, failure=DELETED, uid="u-old", overdue_s=15)],
        [
            ForceDeletePod(
                "cpu-0",
                "u-old",
                "still terminating 15s past its grace period (node ? does not confirm: "
                "kubelet gone?)",
            )
        ],
        then=[CreatePod("cpu-0", "cpu", "Slurm node is powering up and has no pod")],
    ),
    Case(
        "powering-up+predecessor-within-margin:wait",
        [node("cpu-0", "ALLOCATED", "POWERING_UP")],
        [pod("cpu-0", deleting=True, failure=DELETED, uid="u-old", overdue_s=14)],
        [],
    ),
    Case(
        "orphan-stuck-terminating:force-delete",
        [],
        [pod("cpu-3", deleting=True, failure=DELETED, uid="u-9", overdue_s=60)],
        [
            ForceDeletePod(
                "cpu-3",
                "u-9",
                "still terminating 60s past its grace period (node ? does not confirm: "
                "kubelet gone?)",
            )
        ],
    ),
    Case(
        # A finalizer holds it after a force delete: a second one would change nothing but add
        # a Warning Event every pass.
        "orphan-held-by-a-finalizer-after-force-delete:leave-it",
        [],
        [pod("cpu-3", deleting=True, failure=DELETED, uid="u-9", overdue_s=60, deletion_grace_s=0)],
        [],
    ),
    Case(
        "down-our-reason+job-completing+pod:keep-the-pod-until-slurm-is-done",
        [node("cpu-0", "DOWN", "COMPLETING", reason=OURS, since_s=5)],
        [pod("cpu-0")],
        [],
    ),
    Case(
        "powered-down+old-pod:delete-carries-its-uid",
        [node("cpu-0", "IDLE", "POWERED_DOWN")],
        [pod("cpu-0", uid="u-7")],
        [DeletePod("cpu-0", "Slurm node is powered down", "u-7")],
    ),
    # -- addresses: Slurm's NodeAddr follows the pod IP, and goes back to the name -------------
    Case(
        "up+nodeaddr-is-the-name:set-pod-ip",
        [node("cpu-0", "ALLOCATED", address="cpu-0")],
        [pod("cpu-0", ip="10.213.0.7")],
        [TO_POD_IP],
    ),
    Case(
        "powering-up+pod-ip-known:set-it-before-registration",
        [node("cpu-0", "ALLOCATED", "POWERING_UP", address="cpu-0")],
        [pod("cpu-0", ip="10.213.0.7")],
        [TO_POD_IP],
    ),
    Case(
        "up+nodeaddr-is-an-old-ip:set-pod-ip",
        [node("cpu-0", "IDLE", address="10.213.0.3")],
        [pod("cpu-0", ip="10.213.0.7")],
        [TO_POD_IP],
    ),
    Case(
        "up+nodeaddr-right:nothing",
        [node("cpu-0", "IDLE", address="10.213.0.7")],
        [pod("cpu-0", ip="10.213.0.7")],
        [],
    ),
    Case(
        "powered-down+no-pod+old-ip:back-to-the-name",
        [node("cpu-0", "IDLE", "POWERED_DOWN", address="10.213.0.7")],
        [],
        [BACK_TO_NAME],
    ),
    Case(
        "powered-down+pod-still-there+old-ip:pod-first",
        [node("cpu-0", "IDLE", "POWERED_DOWN", address="10.213.0.7")],
        [pod("cpu-0", ip="10.213.0.7", uid="u-1")],
        [DeletePod("cpu-0", "Slurm node is powered down", "u-1")],
        then=[BACK_TO_NAME],
    ),
    Case(
        "powering-up+pending-pod-without-ip:leave-the-name",
        [node("cpu-0", "ALLOCATED", "POWERING_UP", address="cpu-0")],
        [pod("cpu-0", phase="Pending", age_s=2)],
        [],
    ),
]


def core(actions: list[Action]) -> list[Action]:
    """The plan without the pod-state patches (test_pod_slurm_state.py has their own table):
    every pod here shows no Slurm state yet, so each would get one."""
    return [a for a in actions if not isinstance(a, SetPodSlurmState)]


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id, marks=c.marks) for c in CASES])
def test_plan(case: Case) -> None:
    found = plan(
        case.nodes,
        case.pods,
        POOLS,
        NOW,
        GUARDS,
        events=case.events,
        cordoned=case.cordoned,
        pod_groups=case.groups,
    )
    assert core(found) == case.actions


def apply(actions: list[Action], slurm: FakeSlurm, pods: FakePods) -> None:
    """Carry the actions out on the fakes, in the order the service does (Slurm first)."""
    for a in actions:
        if isinstance(a, MarkDown):
            slurm.update_nodes([a.node], state="down", reason=a.admin_reason or a.reason.text)
    for a in actions:
        if isinstance(a, DeletePod | ForceDeletePod):
            pods.delete_pods([a.node], uids={a.node: a.uid} if a.uid else None)
        elif isinstance(a, SetAddress):
            slurm.set_node_addresses({a.node: a.address})
        elif isinstance(a, SetComment):
            slurm.set_node_comment([a.node], a.text)
        elif isinstance(a, SetPodSlurmState):
            pods.set_slurm_states([a])
    for a in actions:
        if isinstance(a, PowerDown):
            slurm.update_nodes([a.node], state="power_down_force")
        elif isinstance(a, PowerDownAsap):
            slurm.update_nodes([a.node], state="power_down_asap", reason=a.reason)
        elif isinstance(a, ResumeNode):
            slurm.update_nodes([a.node], state="resume")
        elif isinstance(a, CreatePod):
            pods.add(a.node, pool=a.pool, phase="Pending")
    # After the creates, as the service does.
    gone = {a.name for a in actions if isinstance(a, DeletePodGroup)}
    pods.groups = {name: g for name, g in pods.groups.items() if name not in gone}


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id) for c in CASES if not c.marks])
def test_plan_after_its_actions_is_quiet(case: Case) -> None:
    slurm = FakeSlurm(case.nodes, now=NOW)
    pods = FakePods(now=NOW)
    pods.pods = {p.node: p for p in case.pods}
    pods.groups = {g.name: g for g in case.groups}

    def again() -> list[Action]:
        return plan(
            slurm.list_nodes(),
            pods.list_pods()[0],
            POOLS,
            NOW,
            GUARDS,
            events=case.events,
            cordoned=case.cordoned,
            pod_groups=pods.list_pod_groups(),
        )

    apply(again(), slurm, pods)
    second = again()
    assert core(second) == case.then
    apply(second, slurm, pods)
    # A pod created by ``then`` shows its Slurm state one pass later; after that, quiet.
    third = again()
    assert core(third) == []
    apply(third, slurm, pods)
    assert again() == []


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
    assert "\n" not in mark.reason.text
    assert len(mark.reason.text) == 200
    assert mark.reason.text.startswith("k8s: ErrImagePull: line one line two x")
    assert mark.reason.text.endswith("...")
