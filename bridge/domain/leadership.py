"""Leader election on a Kubernetes Lease, the decisions alone: what the record read says this
bridge should do next, and the record it then writes.

Two bridges beside a primary and a backup slurmctld share one Lease. The holder renews it every
retry period; another takes it over once it has seen the same record, unchanged, for the Lease's
whole duration (by its own clock: wall clocks of two hosts are never compared), or at once when
the holder released it. The runtime (bridge.runtime.leadership) reads, decides, writes, and
fences: it stops writing anything before the others may take over.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace
from datetime import datetime


@dataclass(frozen=True)
class LeaseRecord:
    """A ``coordination.k8s.io/v1`` Lease's spec, and the resourceVersion it was read at."""

    holder: str  # "" when released
    duration_s: int
    acquired: datetime | None
    renewed: datetime | None
    transitions: int
    version: str = ""
    #: Where the holder takes forwarded calls (``host:port`` of its mutual-TLS listener); ""
    #: when it takes none or the Lease is released.
    address: str = ""

    @property
    def seen_as(self) -> tuple[str, datetime | None, str]:
        """What changes when the holder renews (or anyone writes): a follower's clock runs
        from the last time this changed."""
        return (self.holder, self.renewed, self.version)


class Step(enum.Enum):
    """What this bridge does after reading the Lease."""

    CREATE = "create"  # no Lease yet
    RENEW = "renew"  # ours
    TAKE_OVER = "take over"  # released, or its holder stopped renewing
    FOLLOW = "follow"  # another bridge holds it


def next_step(record: LeaseRecord | None, me: str, unchanged_for_s: float) -> Step:
    """``unchanged_for_s``: how long this bridge has seen ``record`` as it is now."""
    if record is None:
        return Step.CREATE
    if record.holder == me:
        return Step.RENEW
    if not record.holder or unchanged_for_s >= record.duration_s:
        return Step.TAKE_OVER
    return Step.FOLLOW


def claim(
    step: Step,
    record: LeaseRecord | None,
    me: str,
    now: datetime,
    duration_s: int,
    *,
    address: str = "",
) -> LeaseRecord:
    """The record to write for ``step`` (not FOLLOW); a replace carries ``record``'s version, so
    that of two bridges taking over at once only one succeeds. ``address``: where this bridge
    takes the calls its followers forward."""
    if step is Step.FOLLOW:
        raise ValueError("a follower writes nothing")
    if step is Step.CREATE or record is None:
        return LeaseRecord(me, duration_s, now, now, 0, address=address)
    if step is Step.RENEW:
        return replace(record, duration_s=duration_s, renewed=now, address=address)
    return replace(
        record,
        holder=me,
        duration_s=duration_s,
        acquired=now,
        renewed=now,
        transitions=record.transitions + 1,
        address=address,
    )


def released(record: LeaseRecord) -> LeaseRecord:
    """The record a leader writes when it stops: no holder, so the other takes over at once."""
    return replace(record, holder="", address="")


@dataclass(frozen=True)
class LeaderState:
    """Who leads, as this bridge last saw it: for ``status`` and the metrics."""

    enabled: bool
    identity: str = ""
    lease: str = ""
    leader: str = ""  # "" unknown or released
    leading: bool = False
    since: datetime | None = None  # the leader's acquireTime
    transitions: int = 0  # the Lease's leaseTransitions: failovers so far
    leader_address: str = ""  # where the leader takes forwarded calls; "" none
