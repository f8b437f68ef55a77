"""A circuit breaker per pool over fail-fasts: a pool that keeps failing stops getting pods.

Every fail-fast (the bridge setting a node DOWN because its pod cannot run, or because Kubernetes
refused the pod for good) is recorded against the node's pool. ``failures`` of them within
``window_s`` open the pool's breaker for ``pause_s``: while open, a resume of one of the pool's
nodes creates no pod, the node goes DOWN at once with ``k8s: PoolPaused: ...`` and Slurm puts
the job elsewhere (another pool of the partition) or requeues it. Other pools are not affected.

=========  ================================================  ==================================
state      what a create does                                left by
=========  ================================================  ==================================
closed     goes ahead; fail-fasts are counted in the window  ``failures`` in ``window_s``: open
open       none: the node is set DOWN with PoolPaused        ``pause_s`` passed: half-open;
                                                             ``pool resume``: closed
half-open  goes ahead; the first fail-fast reopens at once   ``window_s`` without one: closed
=========  ================================================  ==================================

Pure: every transition takes ``now``; :class:`CircuitBreakers` keeps the states of all pools
and is not thread-safe (its caller holds a lock).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from enum import StrEnum

from .reason import POOL_PAUSED, REASON_PREFIX, Reason


@dataclass(frozen=True)
class BreakerPolicy:
    """When a pool's breaker opens and for how long; ``failures`` 0 turns it off."""

    #: Fail-fasts within ``window_s`` that open the breaker; 0: never open.
    failures: int = 0
    #: The sliding window the fail-fasts are counted in (seconds).
    window_s: float = 300.0
    #: How long an open breaker stays open before it lets creates through again (seconds).
    pause_s: float = 600.0

    @property
    def enabled(self) -> bool:
        """Whether this policy ever opens the breaker."""
        return self.failures > 0

    def as_dict(self) -> dict[str, float | int]:
        """The policy as the configuration file spells it."""
        return {"failures": self.failures, "window_s": self.window_s, "pause_s": self.pause_s}


class BreakerState(StrEnum):
    """Where a pool's breaker is (see the module's table)."""

    OFF = "off"
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half-open"


@dataclass(frozen=True)
class PoolCircuit:
    """One pool's breaker: recent fail-fasts, or the pause it is in, and why."""

    #: When the fail-fasts still inside the window happened (closed state only), oldest first.
    failures: tuple[datetime, ...] = ()
    #: Creates are refused until then; None: never opened (or resumed by hand).
    paused_until: datetime | None = None
    #: After the pause, until then one fail-fast reopens the breaker at once.
    half_open_until: datetime | None = None
    #: The last fail-fast's reason (``k8s: <Kind>: ...``), shown in PoolPaused reasons.
    last_reason: str = ""
    #: Whether the pause was announced and its end not yet (so the end is logged once).
    announced: bool = False

    def state(self, now: datetime) -> BreakerState:
        """The state at ``now`` (time alone moves open to half-open to closed)."""
        if self.paused_until is not None and now < self.paused_until:
            return BreakerState.OPEN
        if self.half_open_until is not None and now < self.half_open_until:
            return BreakerState.HALF_OPEN
        return BreakerState.CLOSED

    def recent(self, policy: BreakerPolicy, now: datetime) -> tuple[datetime, ...]:
        """The fail-fasts inside the window that ends at ``now``."""
        window = timedelta(seconds=policy.window_s)
        return tuple(t for t in self.failures if now - t < window)

    def record(self, policy: BreakerPolicy, now: datetime, reason: str) -> PoolCircuit:
        """This circuit after a fail-fast at ``now``: counted, and opened when it is one too many.

        Opened when the window now holds ``policy.failures`` fail-fasts, or when half-open; a
        fail-fast while open (a pod created before the pause failing now) does not extend it.
        """
        if not policy.enabled:
            return replace(self, last_reason=reason)
        state = self.state(now)
        if state is BreakerState.OPEN:
            return replace(self, last_reason=reason)
        failures = (*self.recent(policy, now), now)
        if state is BreakerState.HALF_OPEN or len(failures) >= policy.failures:
            until = now + timedelta(seconds=policy.pause_s)
            return PoolCircuit(
                paused_until=until,
                half_open_until=until + timedelta(seconds=policy.window_s),
                last_reason=reason,
            )
        return replace(self, failures=failures, last_reason=reason)


@dataclass(frozen=True)
class BreakerChange:
    """A pool paused or resumed: what the caller logs (one line each)."""

    pool: str
    paused: bool
    #: When the pause ends (paused only).
    until: datetime | None
    #: The last fail-fast's reason (paused), or how it resumed (resumed).
    why: str


@dataclass(frozen=True)
class PoolBreakerStatus:
    """One pool's breaker as ``pool list`` shows it."""

    pool: str
    state: BreakerState
    policy: BreakerPolicy
    #: Fail-fasts inside the window now (0 while open).
    recent_failures: int
    #: When the pause ends (open), or ended (half-open); None otherwise.
    paused_until: datetime | None
    last_reason: str


def pause_reason(pool: str, until: datetime, last_reason: str) -> Reason:
    """``k8s: PoolPaused: pool <name> paused until <UTC>: <last reason>``, bounded in length."""
    when = until.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    last = last_reason.removeprefix(REASON_PREFIX) or "repeated fail-fasts"
    return Reason(POOL_PAUSED, f"pool {pool} paused until {when}: {last}")


class CircuitBreakers:
    """The breakers of every pool; unknown pool names raise :class:`KeyError`."""

    def __init__(self, policies: Mapping[str, BreakerPolicy]) -> None:
        self._policies = dict(policies)
        self._circuits = {pool: PoolCircuit() for pool in self._policies}

    def reconfigured(self, policies: Mapping[str, BreakerPolicy]) -> CircuitBreakers:
        """Breakers for ``policies`` (a reloaded configuration's pools) that keep what each pool
        still configured has counted: a reload neither pauses nor resumes a pool."""
        breakers = CircuitBreakers(policies)
        for pool in breakers._policies:
            if pool in self._circuits:
                breakers._circuits[pool] = self._circuits[pool]
        return breakers

    def pools(self) -> tuple[str, ...]:
        """The pools' names, in configuration order."""
        return tuple(self._policies)

    def record_fail_fast(self, pool: str, reason: str, now: datetime) -> BreakerChange | None:
        """Count a fail-fast of ``pool``; the change when it paused the pool."""
        before = self._circuits[pool]
        after = before.record(self._policies[pool], now, reason)
        opened = after.paused_until is not None and after.paused_until != before.paused_until
        if opened:
            after = replace(after, announced=True)
        self._circuits[pool] = after
        if opened:
            return BreakerChange(pool, paused=True, until=after.paused_until, why=reason)
        return None

    def paused(self, pool: str, now: datetime) -> Reason | None:
        """The PoolPaused reason for ``pool``'s nodes while its breaker is open, else None."""
        circuit = self._circuits[pool]
        if circuit.paused_until is None or circuit.state(now) is not BreakerState.OPEN:
            return None
        return pause_reason(pool, circuit.paused_until, circuit.last_reason)

    def expire(self, now: datetime) -> list[BreakerChange]:
        """The pools whose pause ended by ``now`` since the last call (each reported once)."""
        changes = []
        for pool, circuit in self._circuits.items():
            if circuit.announced and circuit.state(now) is not BreakerState.OPEN:
                self._circuits[pool] = replace(circuit, announced=False)
                changes.append(BreakerChange(pool, paused=False, until=None, why="pause ended"))
        return changes

    def resume(self, pool: str, now: datetime) -> BreakerChange | None:
        """Close ``pool``'s breaker by hand (fail-fasts forgotten); the change if it was paused."""
        circuit = self._circuits[pool]
        self._circuits[pool] = PoolCircuit(last_reason=circuit.last_reason)
        if circuit.state(now) is BreakerState.OPEN:
            return BreakerChange(pool, paused=False, until=None, why="resumed by hand")
        return None

    def status(self, now: datetime, pools: Iterable[str] | None = None) -> list[PoolBreakerStatus]:
        """Each pool's breaker at ``now`` (``pools``, or all in configuration order)."""
        rows = []
        for pool in self._policies if pools is None else pools:
            policy, circuit = self._policies[pool], self._circuits[pool]
            state = circuit.state(now) if policy.enabled else BreakerState.OFF
            rows.append(
                PoolBreakerStatus(
                    pool=pool,
                    state=state,
                    policy=policy,
                    recent_failures=len(circuit.recent(policy, now)),
                    paused_until=(
                        circuit.paused_until
                        if state in (BreakerState.OPEN, BreakerState.HALF_OPEN)
                        else None
                    ),
                    last_reason=circuit.last_reason,
                )
            )
        return rows
