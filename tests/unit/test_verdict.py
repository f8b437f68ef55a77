"""The fail-fast rule as a table: which evidence fails a node, and what only starts a clock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from bridge.domain.pods import PodFailure, PodHoldup, PodView
from bridge.domain.verdict import (
    Fail,
    Patience,
    ScaleUpEvent,
    Verdict,
    Wait,
    judge_pod,
    judge_refusal,
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
    ("error", "verdict"),
    [
        (NoCapacity("exceeded quota: cpu"), Fail("NoCapacity", "exceeded quota: cpu")),
        (Forbidden("forbidden: psa"), Fail("Forbidden", "forbidden: psa")),
        (Conflict("pod exists, not ours"), Fail("Conflict", "pod exists, not ours")),
        (InvalidInput("rejected: bad spec"), Fail("InvalidInput", "rejected: bad spec")),
        (TransientBackendError("HTTP 503"), None),
        (BackendError("HTTP 418"), None),
    ],
    ids=["quota", "admission", "foreign-pod", "invalid", "transient", "unexpected"],
)
def test_judge_refusal(error: BridgeError, verdict: Fail | None) -> None:
    assert judge_refusal(error) == verdict


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
