"""Leader election on a Lease, run: a thread that reads the Lease every retry period, renews it
while this bridge holds it, takes it over when its holder stops renewing, and fences.

Fencing: this bridge counts as leading only until ``deadline_s`` after the start of its last
successful write of the Lease, by a clock that keeps running while the process is stopped or
its VM frozen (CLOCK_BOOTTIME). ``deadline_s`` is shorter than the Lease's duration, and another
bridge takes over only after seeing the record unchanged for the whole duration by its own
clock, so this one has stopped writing before the other starts. Every write of the bridge (pods,
events, Slurm) asks :meth:`Leadership.check` first (bridge.runtime.fencing); a write already on
the wire when the deadline passes is not recalled, which is why the deadline leaves a third of
the duration spare.

Not the official client's ``kubernetes.leaderelection``, which falls short here: it runs once
(a leader that loses the Lease never stands again), judges expiry by the wall clock, keeps the
leader's work running until its renew deadline with nothing to ask before each write, and its
``LeaseLock`` talks through the client's global configuration instead of the bridge's
credentials (which reload a rotated token).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Protocol

from bridge.domain.leadership import LeaderState, LeaseRecord, Step, claim, next_step, released
from bridge.errors import BackendError, Conflict, NotLeader

log = logging.getLogger(__name__)


class LeasePort(Protocol):
    """``bridge.adapters.kubernetes.lease.LeaseGateway``."""

    name: str

    def read(self) -> LeaseRecord | None: ...

    def create(self, record: LeaseRecord) -> LeaseRecord: ...

    def replace(self, record: LeaseRecord) -> LeaseRecord: ...


def boot_clock() -> float:
    """Seconds on a clock that also runs while this process is stopped or its host suspended."""
    return time.clock_gettime(time.CLOCK_BOOTTIME)


class Leadership:
    """Runs the election; :meth:`leading` and :meth:`check` fence the bridge's writes."""

    def __init__(
        self,
        leases: LeasePort,
        identity: str,
        *,
        duration_s: int,
        retry_s: float,
        on_started: Callable[[], object] = lambda: None,
        on_stopped: Callable[[], object] = lambda: None,
        observer: Callable[[LeaderState], object] = lambda _state: None,
        clock: Callable[[], float] = boot_clock,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        address: str = "",
    ) -> None:
        self.leases = leases
        self.identity = identity
        #: Published on the Lease while this bridge leads: where followers forward the hooks.
        self.address = address
        self.duration_s = duration_s
        self.retry_s = retry_s
        #: Stop writing this long after a renewal started: two thirds of the Lease's duration.
        self.deadline_s = duration_s * 2 / 3
        self.on_started = on_started
        self.on_stopped = on_stopped
        #: Hears the election's view after every step (the metrics).
        self.observer = observer
        self._clock = clock
        self._now = now
        self._lock = threading.Lock()
        self._valid_until = 0.0
        self._record: LeaseRecord | None = None
        self._seen: tuple[str, datetime | None, str] | None = None
        self._seen_at = 0.0
        #: Whether on_started ran last (so on_stopped runs once per term).
        self._term = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="leader-election", daemon=True)

    # -- the fence -------------------------------------------------------------------------

    def leading(self) -> bool:
        with self._lock:
            return self._leading_locked()

    def _leading_locked(self) -> bool:
        return (
            self._record is not None
            and self._record.holder == self.identity
            and self._clock() < self._valid_until
        )

    def check(self, what: str) -> None:
        """Raise :class:`NotLeader` unless this bridge leads now (its Lease fresh)."""
        if not self.leading():
            leader = self.state().leader or "no bridge"
            raise NotLeader(
                f"{what}: this bridge ({self.identity}) does not lead; {leader} holds "
                f"lease {self.leases.name}"
            )

    def state(self) -> LeaderState:
        with self._lock:
            record = self._record
            return LeaderState(
                enabled=True,
                identity=self.identity,
                lease=self.leases.name,
                leader=record.holder if record is not None else "",
                leading=self._leading_locked(),
                since=record.acquired if record is not None else None,
                transitions=record.transitions if record is not None else 0,
                leader_address=record.address if record is not None else "",
            )

    # -- the loop --------------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def stop(self, release: bool = True) -> None:
        """End the loop; a leader releases the Lease, so another bridge takes over at once."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=self.retry_s + 10)
        with self._lock:
            # Held by us as last written, even past our own deadline (a stall, a slow renewal
            # on a loaded host): the release replaces at that record's resourceVersion, so it
            # fails harmlessly if another bridge took the Lease meanwhile, and otherwise spares
            # the others the rest of the Lease.
            record = self._record
            mine = record is not None and record.holder == self.identity
            self._valid_until = 0.0
        if release and mine and record is not None:
            try:
                self.leases.replace(released(record))
                log.info("lease %s released", self.leases.name)
            except BackendError as e:
                log.warning("lease %s not released (it expires instead): %s", self.leases.name, e)
        self._end_term()

    def run_once(self) -> None:
        """One read, decision and write; the loop's body (tests call it with a fake clock)."""
        started = self._clock()
        try:
            record = self.leases.read()
        except BackendError as e:
            log.warning("lease %s not read (%s): %s", self.leases.name, type(e).__name__, e)
            self._after_step()
            return
        seen = record.seen_as if record is not None else None
        if seen != self._seen:
            self._seen, self._seen_at = seen, started
        step = next_step(record, self.identity, started - self._seen_at)
        if step is Step.FOLLOW:
            with self._lock:
                self._record = record
            self._after_step()
            return
        wanted = claim(
            step, record, self.identity, self._now(), self.duration_s, address=self.address
        )
        try:
            saved = (
                self.leases.create(wanted) if step is Step.CREATE else self.leases.replace(wanted)
            )
        except Conflict:
            # Another bridge wrote first: read again next period.
            log.info("lease %s: another bridge wrote it first (%s)", self.leases.name, step.value)
            self._after_step()
            return
        except BackendError as e:
            log.warning("lease %s not written (%s): %s", self.leases.name, step.value, e)
            self._after_step()
            return
        with self._lock:
            self._record = saved
            self._valid_until = started + self.deadline_s
            self._seen, self._seen_at = saved.seen_as, started
        if step is not Step.RENEW or not self._term:
            log.info(
                "lease %s: %s by %s (failovers so far: %d)",
                self.leases.name,
                "taken" if step is Step.TAKE_OVER else "held",
                self.identity,
                saved.transitions,
            )
        self._after_step()

    def _after_step(self) -> None:
        self._after_step_terms()
        self.observer(self.state())

    def _after_step_terms(self) -> None:
        leading = self.leading()
        if leading and not self._term:
            self._term = True
            try:
                self.on_started()
            except Exception:
                log.exception("starting to lead failed; giving the lease up")
                with self._lock:
                    self._valid_until = 0.0
                self._end_term()
        elif not leading:
            self._end_term()

    def _end_term(self) -> None:
        if self._term:
            self._term = False
            with self._lock:
                leader = self._record.holder if self._record is not None else ""
            log.warning(
                "lease %s: this bridge (%s) no longer leads (leader: %s); it writes nothing",
                self.leases.name,
                self.identity,
                leader or "none",
            )
            try:
                self.on_stopped()
            except Exception:
                log.exception("stopping to lead failed")

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.run_once()
            except Exception:
                log.exception("leader election step crashed (next period retries)")
            # Wake early enough to renew before the deadline even after a slow write.
            self._stop.wait(self.retry_s)
            if not self.leading():
                self._end_term()
