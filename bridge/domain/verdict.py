"""Fail fast on evidence: has Kubernetes said no to a node's pod, or may waiting still help?

One rule for both paths that can fail a node: the resume call (the API server refused the create)
and the reconcile pass (the pod's state, and what a cluster autoscaler said about it). A purely
computational module: the caller brings the facts and the clock.

=======================================  ==================================================
evidence                                 verdict
=======================================  ==================================================
create refused: quota, forbidden,        fail (Kubernetes will refuse the same pod again)
admission, invalid, a foreign pod
create failed: timeout, 5xx, 429         no verdict: the reconciler retries the create
pod failed, evicted, slurmd exited,      fail
permanent image error, CrashLoopBackOff
Unschedulable + autoscaler said          fail (``NotTriggerScaleUp``: no node group fits)
NotTriggerScaleUp (its newest word)
Unschedulable for schedule_timeout       fail
Unschedulable, younger                   wait (an autoscaler adds a node; a terminating
                                         predecessor frees its CPUs)
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

from .pods import UNSCHEDULABLE, PodView

#: cluster-autoscaler's Event reasons about a pending pod.
NOT_TRIGGER_SCALE_UP = "NotTriggerScaleUp"
TRIGGERED_SCALE_UP = "TriggeredScaleUp"
SCALE_UP_REASONS = frozenset({NOT_TRIGGER_SCALE_UP, TRIGGERED_SCALE_UP})


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


def judge_refusal(error: BridgeError) -> Fail | None:
    """A create the API server refused: fail the node, or ``None`` when a retry may work."""
    if isinstance(error, NoCapacity | Forbidden | Conflict | InvalidInput):
        return Fail(type(error).__name__, str(error))
    return None


def _seconds(delta: timedelta) -> str:
    return f"{max(0, int(delta.total_seconds()))}s"


def judge_pod(
    pod: PodView, patience: Patience, events: Iterable[ScaleUpEvent], now: datetime
) -> Verdict:
    """The verdict on one pod of a node Slurm wants up; ``None`` when nothing holds it up.

    ``events`` may hold anyone's; only this pod's (by UID) and those at or after its hold-up
    started count, so an earlier pod of the same name never decides for this one.
    """
    if pod.failure is not None:
        return Fail(pod.failure.reason, pod.failure.message)
    holdup = pod.holdup
    if holdup is None:
        return None
    waited = now - holdup.since
    if holdup.reason == UNSCHEDULABLE:
        said = sorted(
            (e for e in events if e.pod_uid == pod.uid and e.pod_uid and e.at >= holdup.since),
            key=lambda e: e.at,
        )
        newest = said[-1] if said else None
        if newest is not None and newest.reason == NOT_TRIGGER_SCALE_UP:
            return Fail(NOT_TRIGGER_SCALE_UP, newest.message or holdup.message)
        if waited >= patience.schedule_timeout:
            return Fail(
                UNSCHEDULABLE,
                f"{holdup.message} (waited {_seconds(waited)}, schedule_timeout "
                f"{_seconds(patience.schedule_timeout)})",
            )
        autoscaler = f", {TRIGGERED_SCALE_UP}" if newest is not None else ""
        return Wait(f"{UNSCHEDULABLE} since {_clock(holdup.since)}{autoscaler}")
    if waited >= patience.image_pull_timeout:
        return Fail(
            holdup.reason,
            f"{holdup.message} (failing for {_seconds(waited)}, image_pull_timeout "
            f"{_seconds(patience.image_pull_timeout)})",
        )
    return Wait(f"{holdup.reason} since {_clock(holdup.since)}")


def _clock(moment: datetime) -> str:
    # A fixed moment, not an age: the Comment then changes once per hold-up, not every pass.
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")
