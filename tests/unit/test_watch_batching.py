"""During a burst the pod watch reads in batches (issue 33): once caught up it pauses, then
reads what arrived meanwhile; outside a burst it reads every event as it comes. A burst is the
bridge's own calls in flight or the watch's events arriving at a burst's rate."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime

import pytest

from bridge.adapters.kubernetes import PodEvent
from bridge.domain.pods import PodView
from bridge.runtime.pod_watcher import (
    BURST_EVENTS_PER_S,
    CAUGHT_UP_READ_S,
    MIN_READING_S,
    PodEventRate,
    PodWatcher,
    batch_pause,
)

BATCH_S = 0.25


@pytest.mark.parametrize(
    ("read_s", "reading_s", "busy", "pause"),
    [
        pytest.param(0.001, 0.010, True, BATCH_S, id="caught-up-in-a-burst"),
        pytest.param(0.00005, 0.010, True, 0.0, id="event-already-received"),
        pytest.param(0.001, MIN_READING_S / 2, True, 0.0, id="just-after-a-pause"),
        pytest.param(0.001, 0.010, False, 0.0, id="no-burst"),
        pytest.param(CAUGHT_UP_READ_S, 0.010, True, 0.0, id="at-the-threshold"),
    ],
)
def test_batch_pause(read_s: float, reading_s: float, busy: bool, pause: float) -> None:
    assert batch_pause(read_s=read_s, reading_s=reading_s, busy=busy, busy_batch_s=BATCH_S) == pause


def view(name: str) -> PodView:
    return PodView(
        name=name,
        node=name,
        pool="cpu",
        phase="Pending",
        ip="",
        created_at=datetime(2026, 12, 6, tzinfo=UTC),
        deleting=False,
        failure=None,
    )


class SlowEvents:
    """A watch whose events each arrive ``gap_s`` after they are asked for (a caught-up
    socket), recording when each was asked for and handed over."""

    def __init__(self, count: int, gap_s: float) -> None:
        self.count = count
        self.gap_s = gap_s
        self.asked: list[float] = []
        self.handed: list[float] = []
        self.done = threading.Event()

    def list_pods(self) -> tuple[list[PodView], str]:
        return [], "1"

    def watch(
        self,
        resource_version: str,
        timeout_s: int = 60,
        *,
        on_bookmark: Callable[[str], None] | None = None,
    ) -> Iterator[PodEvent]:
        for i in range(self.count):
            self.asked.append(time.monotonic())
            time.sleep(self.gap_s)
            self.handed.append(time.monotonic())
            yield PodEvent("ADDED", view(f"cpu-{i}"), str(2 + i))
        self.done.set()
        threading.Event().wait(30)  # a quiet watch until the test stops the watcher


class Nothing:
    def poke(self) -> None:
        pass


@pytest.mark.parametrize(
    ("busy", "least_s", "most_s"),
    [
        pytest.param(True, BATCH_S * 0.9, BATCH_S * 4, id="burst-pauses-after-each"),
        pytest.param(False, 0.0, BATCH_S * 0.4, id="no-burst-no-pause"),
    ],
)
def test_the_watch_pauses_between_caught_up_reads_only_in_a_burst(
    busy: bool, least_s: float, most_s: float
) -> None:
    source = SlowEvents(count=4, gap_s=0.01)
    watcher = PodWatcher(source, Nothing(), busy=lambda: busy, busy_batch_s=BATCH_S)
    watcher.start()
    try:
        assert source.done.wait(10), "the watcher stalled"
    finally:
        watcher.stop()
    gaps = [
        asked - handed for handed, asked in zip(source.handed[:-1], source.asked[1:], strict=True)
    ]
    assert len(gaps) == 3
    assert all(least_s <= gap <= most_s for gap in gaps), gaps
    pods, version = watcher.cache.list_pods()
    assert sorted(p.name for p in pods) == ["cpu-0", "cpu-1", "cpu-2", "cpu-3"]
    assert version == "5"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(
    ("arrivals", "read_at", "per_second"),
    [
        pytest.param([], 100.0, 0, id="nothing-yet"),
        pytest.param([(100.0, 300)], 100.5, 300, id="within-the-first-second"),
        pytest.param([(100.0, 300)], 101.5, 300, id="the-window-just-ended"),
        pytest.param([(100.0, 300)], 102.5, 0, id="quiet-for-a-second"),
        # 300 in the first window, 5 so far in the next: the full window is the rate.
        pytest.param([(100.0, 300), (101.2, 5)], 101.3, 300, id="early-in-the-next"),
        # The window before ended long ago: it does not count.
        pytest.param([(100.0, 300), (105.0, 5)], 105.1, 5, id="old-window-forgotten"),
    ],
)
def test_pod_event_rate(arrivals: list[tuple[float, int]], read_at: float, per_second: int) -> None:
    clock = Clock()
    rate = PodEventRate(clock)
    for at, count in arrivals:
        clock.now = at
        for _ in range(count):
            rate.note()
    clock.now = read_at
    assert rate.per_second() == per_second
    assert rate.bursting() is (per_second >= BURST_EVENTS_PER_S)
