"""How often the reconcile loop runs a pass under a stream of pokes: every ``min_gap_s`` when
no burst of pod calls is under way, every ``busy_gap_s`` while a resume's creates or a
suspend's deletes are (issue 33: a 1,000-pod burst pokes some 3,000 times, and each pass read
Slurm and walked every pod on the cores the calls need). Timing tests with generous bounds:
the behaviour is about time."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, cast

import pytest

from bridge.errors import BackendError, InvalidInput
from bridge.runtime.reconciler import Reconciler
from bridge.service.resume_dispatcher import ResumeDispatcher
from bridge.service.use_cases import BridgeService
from tests.unit.fakes import FakePods
from tests.unit.harness import Harness

NOW = datetime(2026, 12, 6, 21, 0, tzinfo=UTC)


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


class WatchedDeletes(FakePods):
    """Pods whose deletes record whether the service called itself busy while they ran."""

    def __init__(self) -> None:
        super().__init__(now=NOW, journal=[])
        self.busy_during: list[bool] = []
        self.service: BridgeService | None = None

    def delete_pods(
        self,
        names: Sequence[str],
        *,
        uids: Mapping[str, str] | None = None,
        grace_period_s: int | None = None,
    ) -> dict[str, bool | BackendError | InvalidInput]:
        assert self.service is not None
        self.busy_during.append(self.service.busy())
        return super().delete_pods(names, uids=uids, grace_period_s=grace_period_s)


@pytest.mark.parametrize("call", ["suspend", "resume_failed"])
def test_the_service_is_busy_while_a_slurm_call_s_deletes_run(call: str) -> None:
    pods = WatchedDeletes()
    service = Harness(now=NOW, pods=pods).service
    pods.service = service

    assert not service.busy()
    getattr(service, call)("cpu-[0-1]", "r1")
    assert pods.busy_during == [True]  # its one delete_pods call
    assert not service.busy()
