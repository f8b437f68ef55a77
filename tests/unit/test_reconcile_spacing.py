"""How often the reconcile loop runs a pass under a stream of pokes: every ``min_gap_s`` when
no create is in flight, every ``busy_gap_s`` while a resume's creates are (issue 33: a
1,000-pod burst pokes some 3,000 times, and each pass read Slurm and walked every pod on the
cores the creates need). Timing tests with generous bounds: the behaviour is about time."""

from __future__ import annotations

import threading
import time
from typing import Any, cast

import pytest

from bridge.runtime.reconciler import Reconciler
from bridge.service.resume_dispatcher import ResumeDispatcher
from bridge.service.use_cases import BridgeService


class CountingService:
    """Only what the loop calls: ``reconcile_once``, counted."""

    def __init__(self) -> None:
        self.passes = 0

    def reconcile_once(self) -> list[Any]:
        self.passes += 1
        return []


def passes_under_pokes(busy: bool, poking_s: float = 1.0) -> int:
    service = CountingService()
    reconciler = Reconciler(
        cast(BridgeService, service),
        interval_s=60,
        min_gap_s=0.02,
        busy=lambda: busy,
        busy_gap_s=0.6,
    )
    reconciler.start()
    try:
        end = time.monotonic() + poking_s
        while time.monotonic() < end:
            reconciler.poke()
            time.sleep(0.005)
    finally:
        reconciler.stop()
    return service.passes


@pytest.mark.parametrize(
    ("busy", "at_least", "at_most"),
    [
        # 1 s of pokes, a 0.02 s gap: dozens of passes (at least 10 even on a loaded host).
        (False, 10, 1000),
        # The same pokes with creates in flight: the first at once, then one per 0.6 s.
        (True, 1, 3),
    ],
)
def test_pokes_make_passes_spaced_by_the_gap_of_the_moment(
    busy: bool, at_least: int, at_most: int
) -> None:
    passes = passes_under_pokes(busy)
    assert at_least <= passes <= at_most, passes


def test_the_dispatcher_is_busy_from_submit_until_its_creates_ended() -> None:
    dispatcher = ResumeDispatcher()
    release = threading.Event()
    started = threading.Event()

    def create(_nodes: list[str]) -> None:
        started.set()
        release.wait(10)

    try:
        assert not dispatcher.busy()
        dispatcher.submit(["cpu-0"], create, "r1")
        assert dispatcher.busy()
        assert started.wait(10)
        assert dispatcher.busy()
        release.set()
        assert dispatcher.wait_idle(10)
        assert not dispatcher.busy()
    finally:
        release.set()
        dispatcher.close(10)
