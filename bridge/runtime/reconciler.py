"""The reconcile loop: a pass every interval, and soon after a poke (a pod event, an RPC).

During a burst (serve.py's ``bursting``: a resume's creates or a suspend's deletes in flight,
or pod events at ``pod_watcher.BURST_EVENTS_PER_S``), passes come at most every
``busy_gap_s``: a 1,000-pod burst brings some 3,000 pod events, each a poke, and a pass every
0.3 s meanwhile read Slurm (a process), walked every pod and planned nothing for the nodes in
flight, on the cores the calls and the API server need (issue 33). A pass that the burst
delays is at most ``busy_gap_s`` late.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from bridge.errors import BridgeError
from bridge.runtime.pod_cache import NotSynced
from bridge.service.use_cases import BridgeService

log = logging.getLogger(__name__)


class Reconciler:
    """Runs ``reconcile_once`` every interval, and soon after a poke (pod event, RPC)."""

    def __init__(
        self,
        service: BridgeService,
        interval_s: float,
        min_gap_s: float = 0.3,
        *,
        before_pass: Callable[[], object] | None = None,
        may_run: Callable[[], bool] = lambda: True,
        busy: Callable[[], bool] = lambda: False,
        busy_gap_s: float = 2.0,
    ) -> None:
        self.service = service
        self.interval_s = interval_s
        self.min_gap_s = min_gap_s
        #: True during a burst (creates or deletes in flight, a burst of pod events): then
        #: passes are spaced by ``busy_gap_s`` instead of ``min_gap_s``.
        self.busy = busy
        self.busy_gap_s = busy_gap_s
        #: Runs on this thread before every pass (the config reload), never during one.
        self.before_pass = before_pass
        #: False while another bridge leads: a follower plans nothing (its writes would be
        #: refused anyway, and its view may be stale).
        self.may_run = may_run
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="reconcile", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def poke(self) -> None:
        self._wake.set()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.interval_s)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                if self.before_pass is not None:
                    self.before_pass()
                if not self.may_run():
                    continue
                actions = self.service.reconcile_once()
                if actions:
                    log.info("reconcile: %d action(s)", len(actions))
            except NotSynced as e:
                # Deciding on an empty view would recreate or fail every node: wait for the list.
                log.info("reconcile pass skipped: %s", e)
            except BridgeError as e:
                log.warning("reconcile pass failed (next pass retries): %s", e)
            except Exception:
                log.exception("reconcile pass crashed (next pass retries)")
            # Pod events arrive in bursts; coalesce them, the more while creates are in flight.
            self._stop.wait(self.busy_gap_s if self.busy() else self.min_gap_s)
