"""The per-pool circuit breaker's state machine, with an injected clock, as tables."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from bridge.domain.circuit import (
    BreakerPolicy,
    BreakerState,
    CircuitBreakers,
    pause_reason,
)

T0 = datetime(2026, 12, 3, 12, 0, 0, tzinfo=UTC)
POLICY = BreakerPolicy(failures=3, window_s=60, pause_s=300)
REASON = "k8s: ImagePullBackOff: image nope:1 not found"


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


# Steps: ("fail", t) records a fail-fast, ("resume", t) resumes by hand; then the state at `then`.
@pytest.mark.parametrize(
    ("steps", "then", "state", "recent"),
    [
        pytest.param([], 0, BreakerState.CLOSED, 0, id="nothing yet"),
        pytest.param([("fail", 0), ("fail", 10)], 20, BreakerState.CLOSED, 2, id="below threshold"),
        pytest.param(
            [("fail", 0), ("fail", 10), ("fail", 20)], 20, BreakerState.OPEN, 0, id="threshold"
        ),
        pytest.param(
            [("fail", 0), ("fail", 10), ("fail", 61)],
            61,
            BreakerState.CLOSED,
            2,
            id="window slides: the first fail-fast fell out",
        ),
        pytest.param(
            [("fail", 0), ("fail", 30), ("fail", 59)], 59, BreakerState.OPEN, 0, id="just inside"
        ),
        pytest.param(
            [("fail", 0), ("fail", 1), ("fail", 2)],
            301,
            BreakerState.OPEN,
            0,
            id="still paused just before pause_s ends",
        ),
        pytest.param(
            [("fail", 0), ("fail", 1), ("fail", 2)],
            302,
            BreakerState.HALF_OPEN,
            0,
            id="pause over: half-open",
        ),
        pytest.param(
            [("fail", 0), ("fail", 1), ("fail", 2)],
            302 + 60,
            BreakerState.CLOSED,
            0,
            id="a window without fail-fasts after the pause: closed",
        ),
        pytest.param(
            [("fail", 0), ("fail", 1), ("fail", 2), ("fail", 310)],
            310,
            BreakerState.OPEN,
            0,
            id="half-open: one fail-fast reopens at once",
        ),
        pytest.param(
            [("fail", 0), ("fail", 1), ("fail", 2), ("fail", 310)],
            310 + 299,
            BreakerState.OPEN,
            0,
            id="reopened for a whole pause",
        ),
        pytest.param(
            [("fail", 0), ("fail", 1), ("fail", 2), ("fail", 100)],
            303,
            BreakerState.HALF_OPEN,
            0,
            id="a fail-fast while open does not extend the pause",
        ),
        pytest.param(
            [("fail", 0), ("fail", 1), ("fail", 2), ("resume", 5)],
            6,
            BreakerState.CLOSED,
            0,
            id="resumed by hand: closed",
        ),
        pytest.param(
            [("fail", 0), ("fail", 1), ("fail", 2), ("resume", 5), ("fail", 6), ("fail", 7)],
            7,
            BreakerState.CLOSED,
            2,
            id="resumed by hand: counts from zero",
        ),
    ],
)
def test_state_machine(
    steps: list[tuple[str, float]], then: float, state: BreakerState, recent: int
) -> None:
    breakers = CircuitBreakers({"gpu": POLICY})
    for step, t in steps:
        if step == "fail":
            breakers.record_fail_fast("gpu", REASON, at(t))
        else:
            breakers.resume("gpu", at(t))
    [row] = breakers.status(at(then))
    assert (row.state, row.recent_failures) == (state, recent)
    assert (breakers.paused("gpu", at(then)) is not None) == (state is BreakerState.OPEN)


@pytest.mark.parametrize(
    ("failures", "state"),
    [(0, BreakerState.OFF), (1, BreakerState.OPEN), (100, BreakerState.CLOSED)],
)
def test_threshold_and_off(failures: int, state: BreakerState) -> None:
    breakers = CircuitBreakers({"gpu": BreakerPolicy(failures=failures)})
    for t in range(5):
        breakers.record_fail_fast("gpu", REASON, at(t))
    assert breakers.status(at(5))[0].state == state


def test_changes_are_reported_once() -> None:
    breakers = CircuitBreakers({"gpu": POLICY, "cpu": POLICY})
    assert breakers.record_fail_fast("gpu", REASON, at(0)) is None
    assert breakers.record_fail_fast("gpu", REASON, at(1)) is None
    paused = breakers.record_fail_fast("gpu", REASON, at(2))
    assert paused is not None
    assert (paused.pool, paused.paused, paused.until) == ("gpu", True, at(302))
    assert breakers.record_fail_fast("gpu", REASON, at(3)) is None  # already open
    assert breakers.expire(at(301)) == []
    [resumed] = breakers.expire(at(302))
    assert (resumed.pool, resumed.paused) == ("gpu", False)
    assert breakers.expire(at(303)) == []
    assert breakers.status(at(303), ["cpu"])[0].state is BreakerState.CLOSED


@pytest.mark.parametrize(
    ("t", "changed"), [pytest.param(5, True, id="open"), pytest.param(400, False, id="expired")]
)
def test_resume_by_hand_reports_only_an_open_breaker(t: float, changed: bool) -> None:
    breakers = CircuitBreakers({"gpu": BreakerPolicy(failures=1, pause_s=300)})
    breakers.record_fail_fast("gpu", REASON, at(0))
    assert (breakers.resume("gpu", at(t)) is not None) is changed
    assert breakers.paused("gpu", at(t)) is None


def test_unknown_pool_is_a_key_error() -> None:
    with pytest.raises(KeyError):
        CircuitBreakers({"gpu": POLICY}).record_fail_fast("tpu", REASON, T0)


@pytest.mark.parametrize(
    ("last", "expected"),
    [
        (
            REASON,
            "k8s: PoolPaused: pool gpu paused until 2026-12-03T12:10:00Z: "
            "ImagePullBackOff: image nope:1 not found",
        ),
        ("", "k8s: PoolPaused: pool gpu paused until 2026-12-03T12:10:00Z: repeated fail-fasts"),
    ],
)
def test_pause_reason(last: str, expected: str) -> None:
    assert pause_reason("gpu", at(600), last).text == expected


def test_pause_reason_is_bounded() -> None:
    reason = pause_reason("gpu", at(600), "k8s: Unschedulable: " + "x" * 500).text
    assert len(reason) == 200
    assert reason.startswith("k8s: PoolPaused: pool gpu paused until 2026-12-03T12:10:00Z: ")
