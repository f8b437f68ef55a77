"""The fail-fast rule as a table: which evidence fails a node, and what only starts a clock;
the gang rows too (a PodGroup the scheduler cannot place fails its pods at once)."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import pytest

from bridge.domain.pod_groups import GangUnschedulable, PodGroupView
from bridge.domain.pods import PodFailure, PodHoldup, PodView
from bridge.domain.verdict import (
    Fail,
    Patience,
    ScaleUpEvent,
    Verdict,
    Wait,
    judge_pod,
    judge_refusal,
    says_capacity,
)
from bridge.errors import (
    BackendError,
    BridgeError,
    Conflict,
    Forbidden,
    InvalidInput,
    NoCapacity,
    TransientBackendError,
)

NOW = datetime(2026, 12, 2, 12, 0, 0, tzinfo=UTC)
PATIENCE = Patience(
    schedule_timeout=timedelta(seconds=300), image_pull_timeout=timedelta(seconds=60)
)


def ago(seconds: float) -> datetime:
    return NOW - timedelta(seconds=seconds)


def pending(holdup: PodHoldup | None = None, failure: PodFailure | None = None) -> PodView:
    return PodView(
        name="cpu-0",
        node="cpu-0",
        pool="cpu",
        phase="Pending",
        ip="",
        created_at=ago(600),
        deleting=False,
        failure=failure,
        uid="u-1",
        holdup=holdup,
    )


@pytest.mark.parametrize(
    ("error", "since_s", "verdict"),
    [
        (NoCapacity("exceeded quota: cpu"), 0, Wait("NoCapacity since 2026-12-02T12:00:00Z")),
        (NoCapacity("exceeded quota: cpu"), 299, Wait("NoCapacity since 2026-12-02T11:55:01Z")),
        (
            NoCapacity("exceeded quota: cpu"),
            300,
            Fail("NoCapacity", "exceeded quota: cpu (waited 300s, schedule_timeout 300s)"),
        ),
        (Forbidden("forbidden: psa"), 0, Fail("Forbidden", "forbidden: psa")),
        (Conflict("pod exists, not ours"), 0, Fail("Conflict", "pod exists, not ours")),
        (InvalidInput("rejected: bad spec"), 0, Fail("InvalidInput", "rejected: bad spec")),
        (TransientBackendError("HTTP 503"), 0, None),
        (BackendError("HTTP 418"), 0, None),
    ],
    ids=[
        "quota-first",
        "quota-1s-before-timeout",
        "quota-at-timeout",
        "admission",
        "foreign-pod",
        "invalid",
        "transient",
        "unexpected",
    ],
)
def test_judge_refusal(error: BridgeError, since_s: float, verdict: Verdict) -> None:
    assert judge_refusal(error, since=ago(since_s), patience=PATIENCE, now=NOW) == verdict


@pytest.mark.parametrize(
    ("message", "capacity"),
    [
        ("pod didn't trigger scale-up: 2 max node group size reached", True),
        (
            "pod didn't trigger scale-up: 1 in backoff after failed scale-up, 1 Insufficient cpu",
            True,
        ),
        ("pod didn't trigger scale-up: max cluster cpu, memory limit reached", True),
        ("pod didn't trigger scale-up: 3 Insufficient cpu", False),
        ("pod didn't trigger scale-up: 1 node(s) didn't match Pod's node affinity/selector", False),
        ("", False),
    ],
    ids=["max-size", "backoff", "cluster-limits", "never-fits", "affinity", "empty"],
)
def test_says_capacity(message: str, capacity: bool) -> None:
    assert says_capacity(message) is capacity


UNSCHEDULABLE_60 = PodHoldup("Unschedulable", "no fit", ago(60))
SINCE_60 = "2026-12-02T11:59:00Z"


@pytest.mark.parametrize(
    ("pod", "events", "verdict"),
    [
        pytest.param(pending(), [], None, id="nothing-holds-it-up"),
        pytest.param(
            pending(failure=PodFailure("ErrImageNeverPull", "not present")),
            [],
            Fail("ErrImageNeverPull", "not present"),
            id="hard-failure",
        ),
        pytest.param(
            pending(UNSCHEDULABLE_60),
            [],
            Wait(f"Unschedulable since {SINCE_60}"),
            id="unschedulable-young",
        ),
        pytest.param(
            pending(PodHoldup("Unschedulable", "no fit", ago(299))),
            [],
            Wait("Unschedulable since 2026-12-02T11:55:01Z"),
            id="unschedulable-1s-before-timeout",
        ),
        pytest.param(
            pending(PodHoldup("Unschedulable", "no fit", ago(300))),
            [],
            Fail("Unschedulable", "no fit (waited 300s, schedule_timeout 300s)"),
            id="unschedulable-at-timeout",
        ),
        pytest.param(
            pending(UNSCHEDULABLE_60),
            [ScaleUpEvent("u-1", "TriggeredScaleUp", "group a 1->2", ago(30))],
            Wait(f"Unschedulable since {SINCE_60}, TriggeredScaleUp"),
            id="autoscaler-adds-a-node",
        ),
        pytest.param(
            pending(UNSCHEDULABLE_60),
            [ScaleUpEvent("u-1", "NotTriggerScaleUp", "max size reached", ago(10))],
            Fail("NotTriggerScaleUp", "max size reached"),
            id="autoscaler-cannot-help",
        ),
        pytest.param(
            pending(UNSCHEDULABLE_60),
            [
                ScaleUpEvent("u-1", "NotTriggerScaleUp", "max size reached", ago(40)),
                ScaleUpEvent("u-1", "TriggeredScaleUp", "group b 0->1", ago(20)),
            ],
            Wait(f"Unschedulable since {SINCE_60}, TriggeredScaleUp"),
            id="newest-word-counts",
        ),
        pytest.param(
            pending(UNSCHEDULABLE_60),
            [ScaleUpEvent("u-0", "NotTriggerScaleUp", "about the old pod", ago(10))],
            Wait(f"Unschedulable since {SINCE_60}"),
            id="another-pods-event",
        ),
        pytest.param(
            pending(UNSCHEDULABLE_60),
            [ScaleUpEvent("u-1", "NotTriggerScaleUp", "before this hold-up", ago(90))],
            Wait(f"Unschedulable since {SINCE_60}"),
            id="event-older-than-the-holdup",
        ),
        pytest.param(
            pending(PodHoldup("ErrImagePull", "timeout", ago(30))),
            [],
            Wait("ErrImagePull since 2026-12-02T11:59:30Z"),
            id="pull-failing-young",
        ),
        pytest.param(
            pending(PodHoldup("ImagePullBackOff", "back-off", ago(60))),
            [],
            Fail("ImagePullBackOff", "back-off (failing for 60s, image_pull_timeout 60s)"),
            id="pull-failing-past-timeout",
        ),
    ],
)
def test_judge_pod(pod: PodView, events: list[ScaleUpEvent], verdict: Verdict) -> None:
    assert judge_pod(pod, PATIENCE, events, NOW) == verdict


GROUP = "skb-job-12-cpu-3f2a1c"
NO_ROOM = "0/3 nodes are available: 3 Insufficient cpu."
UNPLACEABLE = Fail("Unschedulable", f"pod group {GROUP} cannot be placed whole: {NO_ROOM}")


def gang_pod(holdup: PodHoldup | None, *, host: str = "") -> PodView:
    return dataclasses.replace(pending(holdup), host=host, pod_group=GROUP)


def group(unschedulable_s: float | None) -> PodGroupView:
    """The pod's group; ``unschedulable_s``: how long ago the scheduler said it cannot place
    the gang (None: it did not)."""
    word = None if unschedulable_s is None else GangUnschedulable(NO_ROOM, ago(unschedulable_s))
    return PodGroupView(GROUP, ago(600), unschedulable=word, managed_by="slurm-k8s-bridge")


@pytest.mark.parametrize(
    ("pod", "group_view", "events", "verdict"),
    [
        pytest.param(
            gang_pod(UNSCHEDULABLE_60),
            group(60),
            [],
            UNPLACEABLE,
            id="gang-unschedulable-fails-at-once",
        ),
        pytest.param(
            gang_pod(None),
            group(5),
            [],
            UNPLACEABLE,
            id="the-groups-word-before-the-pods-condition",
        ),
        pytest.param(
            gang_pod(UNSCHEDULABLE_60),
            group(60),
            [ScaleUpEvent("u-1", "TriggeredScaleUp", "group a 1->3", ago(30))],
            Wait(f"Unschedulable since {SINCE_60}, TriggeredScaleUp"),
            id="autoscaler-adds-nodes-waits",
        ),
        pytest.param(
            gang_pod(PodHoldup("Unschedulable", "no fit", ago(300))),
            group(300),
            [ScaleUpEvent("u-1", "TriggeredScaleUp", "group a 1->3", ago(250))],
            Fail("Unschedulable", "no fit (waited 300s, schedule_timeout 300s)"),
            id="autoscaler-adds-nodes-until-schedule-timeout",
        ),
        pytest.param(
            gang_pod(UNSCHEDULABLE_60),
            group(60),
            [ScaleUpEvent("u-1", "NotTriggerScaleUp", "2 max node group size reached", ago(30))],
            Wait(f"Unschedulable since {SINCE_60}, NotTriggerScaleUp"),
            id="autoscaler-full-for-now-waits",
        ),
        pytest.param(
            gang_pod(UNSCHEDULABLE_60),
            group(60),
            [ScaleUpEvent("u-1", "NotTriggerScaleUp", "3 Insufficient cpu", ago(30))],
            UNPLACEABLE,
            id="autoscaler-cannot-help-fails-at-once",
        ),
        pytest.param(
            gang_pod(UNSCHEDULABLE_60),
            group(60),
            [
                ScaleUpEvent("u-1", "TriggeredScaleUp", "group a 1->3", ago(40)),
                ScaleUpEvent("u-1", "NotTriggerScaleUp", "3 Insufficient cpu", ago(20)),
            ],
            UNPLACEABLE,
            id="the-autoscalers-newest-word-counts",
        ),
        pytest.param(
            gang_pod(UNSCHEDULABLE_60),
            group(60),
            [ScaleUpEvent("u-0", "TriggeredScaleUp", "for the old pod", ago(30))],
            UNPLACEABLE,
            id="another-pods-scale-up-does-not-count",
        ),
        pytest.param(
            gang_pod(UNSCHEDULABLE_60),
            group(None),
            [],
            Wait(f"Unschedulable since {SINCE_60}"),
            id="group-not-judged-yet-waits-as-one-pod",
        ),
        pytest.param(
            gang_pod(None, host="kn-1"),
            group(60),
            [],
            None,
            id="bound-pod-ignores-a-stale-word",
        ),
        pytest.param(
            gang_pod(PodHoldup("ErrImagePull", "timeout", ago(30)), host="kn-1"),
            group(60),
            [],
            Wait("ErrImagePull since 2026-12-02T11:59:30Z"),
            id="placed-pod-pulling-its-image",
        ),
        pytest.param(
            gang_pod(UNSCHEDULABLE_60),
            None,
            [],
            Wait(f"Unschedulable since {SINCE_60}"),
            id="group-unread-waits-as-one-pod",
        ),
    ],
)
def test_judge_gang_pod(
    pod: PodView, group_view: PodGroupView | None, events: list[ScaleUpEvent], verdict: Verdict
) -> None:
    assert judge_pod(pod, PATIENCE, events, NOW, group_view) == verdict
