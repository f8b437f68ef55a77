"""Each pool's circuit breaker over fail-fasts, and the one lock around them.

RPCs, resume threads and the reconcile loop all record and consult the breakers; the decisions
themselves (when a pool pauses, when the pause ends) are :mod:`bridge.domain.circuit`'s. This
class only keeps them behind a lock, reads the clock, and logs each change once.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime

from bridge.domain.circuit import (
    BreakerChange,
    BreakerPolicy,
    CircuitBreakers,
    PoolBreakerStatus,
)
from bridge.domain.pools import PoolSet
from bridge.domain.reason import Reason
from bridge.settings import BridgeConfig

log = logging.getLogger(__name__)


def breaker_policies(config: BridgeConfig) -> dict[str, BreakerPolicy]:
    """Pool name → its breaker's policy: its own, else the bridge's, else the default (off)."""
    default = config.bridge.circuit_breaker or BreakerPolicy()
    return {pool.name: pool.circuit_breaker or default for pool in config.pools}


class PoolBreakers:
    """The pools' :class:`CircuitBreakers`, guarded by one lock, with ``clock`` as now."""

    def __init__(self, config: BridgeConfig, clock: Callable[[], datetime]) -> None:
        self.clock = clock
        self.breakers = CircuitBreakers(breaker_policies(config))
        self._lock = threading.Lock()

    def reconfigure(self, config: BridgeConfig) -> None:
        """Take over a reloaded configuration's policies; what the pools still configured
        counted is kept."""
        with self._lock:
            self.breakers = self.breakers.reconfigured(breaker_policies(config))

    def record_fail_fasts(self, pools: PoolSet, nodes: Sequence[str], reason: Reason) -> None:
        """Count a fail-fast per node of ``nodes`` (set DOWN with ``reason``) against its pool."""
        if not reason.is_fail_fast:
            return
        groups, _ = pools.group(nodes)
        with self._lock:
            now = self.clock()
            for pool, members in groups.items():
                for _ in members:
                    change = self.breakers.record_fail_fast(pool, reason.text, now)
                    if change is not None:
                        _log_change(change)

    def expire_pauses(self, now: datetime) -> None:
        """Log the pauses that ended by ``now`` (each once)."""
        with self._lock:
            self._expire_pauses(now)

    def paused_pools(self, pools: Iterable[str]) -> dict[str, Reason]:
        """Pool name → the PoolPaused reason, for those of ``pools`` whose breaker is open."""
        with self._lock:
            now = self.clock()
            self._expire_pauses(now)
            reasons = {pool: self.breakers.paused(pool, now) for pool in pools}
        return {pool: reason for pool, reason in reasons.items() if reason is not None}

    def status(self) -> list[PoolBreakerStatus]:
        """Every pool's circuit breaker (``pool list``)."""
        with self._lock:
            now = self.clock()
            self._expire_pauses(now)
            return self.breakers.status(now)

    def resume(self, pool: str, request_id: str) -> tuple[PoolBreakerStatus, bool]:
        """Close ``pool``'s breaker by hand (``pool resume``); its state afterwards, and whether
        it was paused. ``pool`` is one the breakers have (the caller checked)."""
        with self._lock:
            now = self.clock()
            change = self.breakers.resume(pool, now)
            if change is not None:
                _log_change(change)
            else:
                log.info("request %s: pool %s was not paused", request_id, pool)
            return self.breakers.status(now, [pool])[0], change is not None

    def _expire_pauses(self, now: datetime) -> None:
        """:meth:`expire_pauses` for a caller that holds the lock."""
        for change in self.breakers.expire(now):
            _log_change(change)


def _log_change(change: BreakerChange) -> None:
    if change.paused:
        log.warning(
            "pool %s paused until %s (no new pods): %s",
            change.pool,
            change.until.isoformat() if change.until else "?",
            change.why,
        )
    else:
        log.warning("pool %s resumed: %s", change.pool, change.why)
