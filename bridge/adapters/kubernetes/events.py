"""``EventRecorder``: Kubernetes Events sent from background threads, never on a request's path.

One Event per pod took 6-12 ms each, one after another, inside the resume RPC: at a thousand
pods that alone outlived the hook's deadline. Events are only a record for ``kubectl describe``,
so they wait in a bounded queue for a few sender threads; when the queue is full an Event is
dropped and counted, and the RPC goes on.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)

#: Events waiting to be sent; a full resume of this many pods queues without dropping.
EVENT_QUEUE_CAPACITY = 2000
#: Threads sending queued Events, each one request at a time.
EVENT_SENDERS = 4
#: A drop is logged at the first and then every this many, not once per Event.
DROP_LOG_EVERY = 100


@dataclass(frozen=True)
class QueuedEvent:
    """One Event, serialised; ``label`` names it in logs (``SlurmResume for cpu-0``)."""

    label: str
    body: bytes


class EventRecorder:
    """Queues Events for ``send`` (one API call each, which handles its own errors)."""

    def __init__(
        self,
        send: Callable[[QueuedEvent], None],
        *,
        capacity: int = EVENT_QUEUE_CAPACITY,
        senders: int = EVENT_SENDERS,
    ) -> None:
        self._send = send
        self.capacity = capacity
        self._queue: queue.Queue[QueuedEvent | None] = queue.Queue(maxsize=capacity)
        self._lock = threading.Lock()
        #: Events dropped because the queue was full, since start.
        self.dropped = 0
        self._senders = senders
        self._threads: list[threading.Thread] = []

    def record(self, event: QueuedEvent) -> bool:
        """Queue ``event`` without waiting; False (and counted) when the queue is full."""
        if not self._threads:
            self._start()
        try:
            self._queue.put_nowait(event)
        except queue.Full:
            with self._lock:
                self.dropped += 1
                dropped = self.dropped
            if dropped == 1 or dropped % DROP_LOG_EVERY == 0:
                log.warning(
                    "event queue full (%d): %s dropped, %d Event(s) dropped so far",
                    self.capacity,
                    event.label,
                    dropped,
                )
            return False
        return True

    def _start(self) -> None:
        # On first use, not in __init__: a gateway that never records (doctor, tests) runs none.
        with self._lock:
            if self._threads:
                return
            self._threads = [
                threading.Thread(target=self._run, name=f"k8s-events-{n}", daemon=True)
                for n in range(self._senders)
            ]
            for thread in self._threads:
                thread.start()

    def flush(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for every queued Event to be sent; True if they were."""
        deadline = time.monotonic() + timeout_s
        with self._queue.all_tasks_done:
            while self._queue.unfinished_tasks:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not self._queue.all_tasks_done.wait(remaining):
                    return not self._queue.unfinished_tasks
        return True

    def close(self) -> None:
        """Stop the senders once they finish their current Event; what is queued is dropped."""
        while True:
            try:
                self._queue.get_nowait()
                self._queue.task_done()
            except queue.Empty:
                break
        for _ in self._threads:
            try:
                self._queue.put_nowait(None)
            except queue.Full:  # a caller queued more meanwhile: senders end on their own
                break

    def _run(self) -> None:
        while True:
            event = self._queue.get()
            try:
                if event is None:
                    return
                self._send(event)
            except Exception:
                # A bug in sending must not kill the sender and let the queue fill for good.
                log.exception("event %s: sending crashed", event.label if event else "-")
            finally:
                self._queue.task_done()
