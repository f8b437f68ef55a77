"""The pod watcher (an informer): lists the bridge's pods once, then watches them into the cache.

During a burst (the bridge's creates or deletes in flight, or pod events arriving at
:data:`BURST_EVENTS_PER_S`), the watch reads in batches. A 1,000-pod burst brings some 3,000
events, about one a millisecond, and reading them one by one woke the watch thread for each: a
wait on the socket, a read, the GIL taken from 64 create threads, and a parse with cold caches,
some three times the CPU of the same events read back to back (issue 33). So once the watch has
caught up (its last read waited on the socket), it pauses ``busy_batch_s`` and then reads what
arrived meanwhile in one go. A pod's news is at most that late during a burst; outside one,
every event is read as it comes.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Protocol

from bridge.adapters.kubernetes import PodEvent, WatchExpired
from bridge.domain.pods import PodView
from bridge.errors import BridgeError
from bridge.metrics import BridgeMetrics
from bridge.runtime.pod_cache import PodCache

log = logging.getLogger(__name__)

#: A read that took longer than this waited on the socket: the watch had caught up. A read of
#: an event already received takes microseconds.
CAUGHT_UP_READ_S = 0.0002
#: The least time the watch reads between two pauses, so that a read slowed by something else
#: (the GIL, a busy core) can never hold it to one event a pause.
MIN_READING_S = 0.005


#: Pod events a second from which the watch's own stream counts as a burst: the pods of a
#: suspend end for seconds after its deletes returned (kwok or the kubelets finish them), and a
#: drain or another client's mass change is a burst no call of ours announces. Everyday
#: traffic (a job's few pods, their status changes) stays far below.
BURST_EVENTS_PER_S = 200


class PodEventRate:
    """How many pod events the watch delivered in the last second: a count per one-second
    window, the window before kept for reads early in the next. Written by the watch thread
    only; a read from another thread may be one event behind, which no threshold minds."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._start = -2.0e9  # the current window's start: none yet
        self._count = 0  # events in the current window
        self._before = 0  # events in the window before, if it ended less than 1 s ago

    def note(self) -> None:
        now = self.clock()
        if now - self._start >= 1.0:
            self._before = self._count if now - self._start < 2.0 else 0
            self._start, self._count = now, 0
        self._count += 1

    def per_second(self) -> int:
        """The events of the last full window, or of the current one if more already."""
        age = self.clock() - self._start
        if age >= 2.0:
            return 0
        if age >= 1.0:
            return self._count
        return max(self._before, self._count)

    def bursting(self) -> bool:
        return self.per_second() >= BURST_EVENTS_PER_S


def batch_pause(*, read_s: float, reading_s: float, busy: bool, busy_batch_s: float) -> float:
    """How long the watch pauses after an event, given how long its read took (``read_s``)
    and how long it has read since its last pause (``reading_s``): ``busy_batch_s`` once it
    has caught up during a burst (``busy``), else nothing."""
    caught_up = read_s > CAUGHT_UP_READ_S and reading_s >= MIN_READING_S
    return busy_batch_s if busy and caught_up else 0.0


class PodSource(Protocol):
    """What the watcher needs from Kubernetes (``PodGateway``)."""

    def list_pods(self) -> tuple[list[PodView], str]: ...

    def watch(
        self,
        resource_version: str,
        timeout_s: int = 60,
        *,
        on_bookmark: Callable[[str], None] | None = None,
    ) -> Iterator[PodEvent]: ...


class Pokeable(Protocol):
    """What the watcher needs from the reconciler: a nudge to run a pass soon."""

    def poke(self) -> None: ...


class PodWatcher:
    """Keeps ``cache`` current (an informer): lists our pods once, then watches them, applies
    every change to the cache and pokes the reconciler.

    A watch the server ends at its timeout resumes from the last resourceVersion seen (an
    event's or a bookmark's): no list. Every failure leads to the same recovery: list again
    (the list replaces the cache at once), poke the reconciler (the list may hold changes the
    watch missed) and watch from the list's resourceVersion. That is 410 Gone, an ERROR event,
    a dropped connection, a malformed event, or a bug in the client. Repeated failures back off
    exponentially, ``backoff_s`` doubling up to ``max_backoff_s``; a first 410 relists at once.
    Only :meth:`stop` ends the loop.
    """

    def __init__(
        self,
        pods: PodSource,
        reconciler: Pokeable,
        *,
        cache: PodCache | None = None,
        metrics: BridgeMetrics | None = None,
        watch_timeout_s: int = 30,
        backoff_s: float = 0.5,
        max_backoff_s: float = 10.0,
        busy: Callable[[], bool] = lambda: False,
        busy_batch_s: float = 0.05,
        rate: PodEventRate | None = None,
    ) -> None:
        self.pods = pods
        self.reconciler = reconciler
        self.cache = cache or PodCache()
        #: Hears of pods turning Running (the resume latency) and of failed watches.
        self.metrics = metrics
        self.watch_timeout_s = watch_timeout_s
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        #: Whether a burst is under way (see the module's docstring): the watch then reads in
        #: batches.
        self.busy = busy
        self.busy_batch_s = busy_batch_s
        #: Counts the events delivered (a burst by itself, see :data:`BURST_EVENTS_PER_S`).
        self.rate = rate or PodEventRate()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pod-watch", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, wait_s: float = 0.0) -> bool:
        """Ask the loop to end and wait up to ``wait_s`` for it; True once it has ended.

        A watch blocks until its next event or its timeout, so by default this does not wait.
        """
        self._stop.set()
        if wait_s > 0 and self._thread.is_alive():
            self._thread.join(timeout=wait_s)
        return not self._thread.is_alive()

    def _backoff(self, failures: int) -> float:
        return float(min(self.backoff_s * 2 ** (failures - 1), self.max_backoff_s))

    def _count_error(self, error: BridgeError) -> None:
        # The watch's stream fails outside the adapter's call(): count it where it ends.
        if self.metrics is not None:
            self.metrics.backend_error("kubernetes", type(error).__name__)

    def _paced(self, events: Iterable[PodEvent]) -> Iterator[PodEvent]:
        """``events``, with a pause after one whenever ``batch_pause`` calls for it."""
        stream = iter(events)
        reading_since = time.monotonic()
        while True:
            asked = time.monotonic()
            event = next(stream, None)
            if event is None:
                return
            read = time.monotonic()
            self.rate.note()
            yield event
            pause = batch_pause(
                read_s=read - asked,
                reading_s=read - reading_since,
                busy=self.busy(),
                busy_batch_s=self.busy_batch_s,
            )
            if pause and not self._stop.wait(pause):
                reading_since = time.monotonic()

    def _run(self) -> None:
        failures = 0  # in a row, without an event or a clean end in between
        listed_ok = False  # whether the cache holds a list the current watch continues
        while not self._stop.is_set():
            version = ""
            try:
                if not listed_ok:
                    listed, version = self.pods.list_pods()
                    self.cache.replace(listed, version)
                    listed_ok = True
                    if failures:
                        log.info(
                            "pod watch recovered: listed %d pod(s), "
                            "watching from resourceVersion %s",
                            len(listed),
                            version,
                        )
                    self.reconciler.poke()
                version = self.cache.version
                events = self.pods.watch(
                    version, timeout_s=self.watch_timeout_s, on_bookmark=self.cache.bookmark
                )
                for event in self._paced(events):
                    failures = 0
                    log.debug("pod %s %s phase=%s", event.pod.name, event.kind, event.pod.phase)
                    self.cache.apply(event.kind, event.pod, event.resource_version)
                    if self.metrics is not None and event.pod.phase == "Running":
                        self.metrics.pod_running(event.pod.node, time.monotonic())
                    self.reconciler.poke()
                    if self._stop.is_set():
                        return
                # The server ended the watch at its timeout: resume from the last version seen.
                failures = 0
                continue
            except WatchExpired as e:
                self._count_error(e)
                failures += 1
                delay = 0.0 if failures == 1 else self._backoff(failures - 1)
                log.info(
                    "pod watch expired at resourceVersion %s, listing again in %.2fs: %s",
                    version or "-",
                    delay,
                    e,
                )
            except BridgeError as e:
                self._count_error(e)
                failures += 1
                delay = self._backoff(failures)
                log.warning(
                    "pod watch failed (%s), listing again in %.2fs: %s",
                    type(e).__name__,
                    delay,
                    e,
                )
            except Exception:
                # A bug (ours or the client's) must not leave the bridge polling only.
                failures += 1
                delay = self._backoff(failures)
                log.exception("pod watch crashed, listing again in %.2fs", delay)
            listed_ok = False
            self._stop.wait(delay)
