"""Pod creation for resumes the hooks do not wait for: a few worker threads and the nodes in flight.

ResumeNodes without ``wait`` answers as soon as the hostlist is validated; creating a thousand
pods takes seconds, far beyond the hook's deadline. The service hands the creation to a
:class:`ResumeDispatcher`, which runs it on its own threads, remembers which nodes are being
created (so the reconciler does not create them a second time meanwhile), and on shutdown waits
a bounded time for what is queued. Whatever is still queued then is dropped on purpose: the nodes
stay POWERING_UP in Slurm, and the next bridge's reconciler creates their pods.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

from bridge.domain.hostlist import compress
from bridge.errors import BridgeError, BridgeStopping

log = logging.getLogger(__name__)

#: Workers: one batch per resume call, each batch already parallel inside the pod gateway; a few
#: let a second call start while a big first one runs, without multiplying the apiserver load.
DEFAULT_WORKERS = 4
#: How long a job waits for its caller's answer to be sent before it starts anyway.
MAX_HOLD_S = 1.0


class ResumeDispatcher:
    """Runs ``create(nodes)`` jobs in the background and knows which nodes are in flight."""

    def __init__(self, workers: int = DEFAULT_WORKERS) -> None:
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="resume")
        # One condition for the whole state: submit, finish and close must see it consistently.
        self._changed = threading.Condition()
        self._in_flight: set[str] = set()
        self._pending = 0  # jobs submitted and not finished (queued or running)
        self._closed = False

    def submit(
        self,
        nodes: Sequence[str],
        create: Callable[[list[str]], object],
        request_id: str,
        *,
        hold: threading.Event | None = None,
    ) -> list[str]:
        """Queue ``create`` for those of ``nodes`` not already in flight; returns those nodes.

        A node already being created is not queued again: its running create does the work, and
        a repeat would only double the apiserver calls. With ``hold`` the job starts once it is
        set (the caller's answer is out; at most :data:`MAX_HOLD_S` later): 64 create threads
        and the answer's thousand results otherwise share one GIL, and the hook waits for the
        answer. Raises :class:`BridgeStopping` once :meth:`close` was called.
        """
        with self._changed:
            if self._closed:
                raise BridgeStopping("the bridge is stopping and takes no new resumes: retry")
            fresh = [n for n in nodes if n not in self._in_flight]
            if not fresh:
                return fresh
            self._in_flight.update(fresh)
            self._pending += 1
            # Submitted under the lock: close() cannot shut the pool between the check and here.
            self._pool.submit(self._run, fresh, create, request_id, hold)
        return fresh

    def in_flight(self) -> frozenset[str]:
        """The nodes whose create was queued or runs now."""
        with self._changed:
            return frozenset(self._in_flight)

    def busy(self) -> bool:
        """Whether some create job is queued or running."""
        with self._changed:
            return self._pending > 0

    def wait_idle(self, timeout_s: float) -> bool:
        """Wait until every queued create ended (or ``timeout_s`` passed); ``True`` if they did."""
        with self._changed:
            return self._changed.wait_for(lambda: self._pending == 0, timeout_s)

    def close(self, timeout_s: float) -> None:
        """Take no new jobs, let the queued ones finish for up to ``timeout_s``, drop the rest."""
        with self._changed:
            self._closed = True
        if not self.wait_idle(timeout_s):
            left = self.in_flight()
            log.warning(
                "stopping with %d node(s) not created yet, left POWERING_UP for the reconciler: %s",
                len(left),
                compress(left),
            )
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _run(
        self,
        nodes: list[str],
        create: Callable[[list[str]], object],
        rid: str,
        hold: threading.Event | None,
    ) -> None:
        try:
            if hold is not None and not hold.wait(MAX_HOLD_S):
                log.debug(
                    "request %s: answer not sent after %.1f s; creating anyway", rid, MAX_HOLD_S
                )
            create(nodes)
        except BridgeError:
            # The create path logs each node's failure itself; this is a whole-batch failure.
            log.exception("request %s: creating pods for %s failed", rid, compress(nodes))
        except Exception:  # a bug must not kill the worker: later resumes still need it
            log.exception("request %s: creating pods for %s crashed (bug)", rid, compress(nodes))
        finally:
            with self._changed:
                self._in_flight.difference_update(nodes)
                self._pending -= 1
                self._changed.notify_all()
