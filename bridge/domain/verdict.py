"""Fail fast on evidence: has Kubernetes said no to a node's pod, or may waiting still help?

One rule for both paths that can fail a node: the resume call (the API server refused the create)
and the reconcile pass (the pod's state, and what a cluster autoscaler said about it). A purely
computational module: the caller brings the facts and the clock.

=======================================  ==================================================
evidence                                 verdict
=======================================  ==================================================
create refused: forbidden, admission,    fail (Kubernetes will refuse the same pod again)
invalid, a foreign pod
create refused: quota full               wait (a quota frees up as pods end): the reconciler
                                         retries the create each pass; after
                                         schedule_timeout fail, as ``NoCapacity``
create failed: timeout, 5xx, 429         no verdict: the reconciler retries the create
pod failed, evicted, slurmd exited,      fail
permanent image error, CrashLoopBackOff
Unschedulable + autoscaler said          fail (``NotTriggerScaleUp``: no node group fits)
NotTriggerScaleUp (its newest word)
Unschedulable + autoscaler said it is    wait (a group at its maximum size, the cluster at
at capacity (NotTriggerScaleUp: max      its limits, a group backing off: not now, not
node group size reached, backoff, ...)   never); after schedule_timeout fail, as ``NoCapacity``
Unschedulable for schedule_timeout       fail
Unschedulable, younger                   wait (an autoscaler adds a node; a terminating
                                         predecessor frees its CPUs)
not bound, its PodGroup (the job's       fail at once (``Unschedulable``, naming the group): a
gang) says Unschedulable                 gang the scheduler cannot place holds no capacity,
                                         so there is nothing to wait for; Slurm requeues the
                                         job now
... and an autoscaler adds capacity      wait as for one pod, up to schedule_timeout
(TriggeredScaleUp, or NotTriggerScaleUp
at capacity, its newest word)
its PodGroup says SchedulerError         as for one pod (an internal error may pass)
image pull failing for                   fail
image_pull_timeout
image pull failing, younger              wait (a registry hiccup retries by itself)
=======================================  ==================================================
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from bridge.errors import BridgeError, Conflict, Forbidden, InvalidInput, NoCapacity

from .pod_groups import PodGroupView
from .pods import UNSCHEDULABLE, PodHoldup, PodView

#: cluster-autoscaler's Event reasons about a pending pod.
NOT_TRIGGER_SCALE_UP = "NotTriggerScaleUp"
TRIGGERED_SCALE_UP = "TriggeredScaleUp"
SCALE_UP_REASONS = frozenset({NOT_TRIGGER_SCALE_UP, TRIGGERED_SCALE_UP})
#: The reason kind of a node failed because Kubernetes stayed full for its pool's patience: a
#: capacity wait that ran out, never a fault of the pool (its breaker does not count it).
NO_CAPACITY = "NoCapacity"
#: What cluster-autoscaler's NotTriggerScaleUp says when a node group could take the pod but
#: not now: at its maximum size, the cluster at its resource or node limits, or a group backing
#: off after a failed scale-up. Any of them in the message makes it a wait, not a verdict.
CAPACITY_WORDS = (
    "max node group size reached",
    "max cluster",  # "max cluster cpu, memory limit reached"
    "max total nodes",
    "in backoff after failed scale-up",
)


def says_capacity(message: str) -> bool:
    """Whether an autoscaler's NotTriggerScaleUp means "full for now" (see CAPACITY_WORDS)."""
    lowered = message.lower()
    return any(words in lowered for words in CAPACITY_WORDS)


@dataclass(frozen=True)
class Patience:
    """How long a pool's pods may be held up before the node is failed (per pool)."""

    #: Unschedulable this long → fail. Sized for a cluster autoscaler adding a node.
    schedule_timeout: timedelta = timedelta(seconds=300)
    #: A retrying image pull this long after scheduling → fail.
    image_pull_timeout: timedelta = timedelta(seconds=120)


@dataclass(frozen=True)
class ScaleUpEvent:
    """What a cluster autoscaler said about one pod (an Event on it)."""

    pod_uid: str
    reason: str  # NOT_TRIGGER_SCALE_UP or TRIGGERED_SCALE_UP
    message: str
    at: datetime


@dataclass(frozen=True)
class Fail:
    """Kubernetes has said no: set the node DOWN with ``k8s: <reason>: <message>``."""

    reason: str
    message: str


@dataclass(frozen=True)
class Wait:
    """The pod is held up but may still run; ``why`` is shown in the node's Comment."""

    why: str


Verdict = Fail | Wait | None


def judge_refusal(
    error: BridgeError, *, since: datetime, patience: Patience, now: datetime
) -> Verdict:
    """A create the API server refused: fail the node, wait (a full quota, refused first at
    ``since``), or ``None`` when a plain retry may work."""
    if isinstance(error, NoCapacity):
        waited = now - since
        if waited >= patience.schedule_timeout:
            return Fail(
                NO_CAPACITY,
                f"{error} (waited {_seconds(waited)}, schedule_timeout "
                f"{_seconds(patience.schedule_timeout)})",
            )
        return Wait(f"{NO_CAPACITY} since {_clock(since)}")
    if isinstance(error, Forbidden | Conflict | InvalidInput):
        return Fail(type(error).__name__, str(error))
    return None


def _seconds(delta: timedelta) -> str:
    return f"{max(0, int(delta.total_seconds()))}s"


def judge_pod(
    pod: PodView,
    patience: Patience,
    events: Iterable[ScaleUpEvent],
    now: datetime,
    group: PodGroupView | None = None,
) -> Verdict:
    """The verdict on one pod of a node Slurm wants up; ``None`` when nothing holds it up.

    ``events`` may hold anyone's; only this pod's (by UID) and those at or after its hold-up
    started count, so an earlier pod of the same name never decides for this one. ``group``:
    the PodGroup the pod was created in (``pod.pod_group``), when there is one.
    """
    if pod.failure is not None:
        return Fail(pod.failure.reason, pod.failure.message)
    holdup = pod.holdup
    if group is not None and group.unschedulable is not None and _waits_for_its_gang(pod):
        gang = group.unschedulable
        # The scheduler may not have marked the pod yet: the group's word starts the clock.
        holdup = holdup or PodHoldup(UNSCHEDULABLE, gang.message, gang.since)
        if not _adding_capacity(_newest_word(pod, events, holdup.since)):
            return Fail(
                UNSCHEDULABLE, f"pod group {group.name} cannot be placed whole: {gang.message}"
            )
    if holdup is None:
        return None
    waited = now - holdup.since
    if holdup.reason == UNSCHEDULABLE:
        newest = _newest_word(pod, events, holdup.since)
        full = (
            newest is not None
            and newest.reason == NOT_TRIGGER_SCALE_UP
            and says_capacity(newest.message)
        )
        if newest is not None and newest.reason == NOT_TRIGGER_SCALE_UP and not full:
            return Fail(NOT_TRIGGER_SCALE_UP, newest.message or holdup.message)
        if waited >= patience.schedule_timeout:
            return Fail(
                NO_CAPACITY if full else UNSCHEDULABLE,
                f"{newest.message if full and newest else holdup.message} (waited "
                f"{_seconds(waited)}, schedule_timeout {_seconds(patience.schedule_timeout)})",
            )
        autoscaler = f", {newest.reason}" if newest is not None else ""
        return Wait(f"{UNSCHEDULABLE} since {_clock(holdup.since)}{autoscaler}")
    if waited >= patience.image_pull_timeout:
        return Fail(
            holdup.reason,
            f"{holdup.message} (failing for {_seconds(waited)}, image_pull_timeout "
            f"{_seconds(patience.image_pull_timeout)})",
        )
    return Wait(f"{holdup.reason} since {_clock(holdup.since)}")


def _waits_for_its_gang(pod: PodView) -> bool:
    """Whether the pod is still unplaced: a bound pod's gang was placed, and an Unschedulable
    left on its group is no longer about it; a pod held up by its image was placed too."""
    return not pod.host and (pod.holdup is None or pod.holdup.reason == UNSCHEDULABLE)


def _newest_word(
    pod: PodView, events: Iterable[ScaleUpEvent], since: datetime
) -> ScaleUpEvent | None:
    """What an autoscaler said last about this very pod (by UID) since its hold-up began."""
    said = sorted(
        (e for e in events if e.pod_uid == pod.uid and e.pod_uid and e.at >= since),
        key=lambda e: e.at,
    )
    return said[-1] if said else None


def _adding_capacity(newest: ScaleUpEvent | None) -> bool:
    """Whether an autoscaler's newest word says room for the pod is on its way or only full
    for now (a group at its maximum, in backoff): worth the pool's schedule_timeout."""
    if newest is None:
        return False
    if newest.reason == TRIGGERED_SCALE_UP:
        return True
    return newest.reason == NOT_TRIGGER_SCALE_UP and says_capacity(newest.message)


def _clock(moment: datetime) -> str:
    # A fixed moment, not an age: the Comment then changes once per hold-up, not every pass.
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")
