"""Slurm's view of a node, reduced to what the bridge decides on.

Slurm 22.05 reports a base state string plus ``state_flags``; 24.11 reports one list mixing both.
Parsers in ``bridge.adapters.slurm.parse`` normalise both into :class:`SlurmNode`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from .reason import REASON_PREFIX, Reason, our_reason

__all__ = ["REASON_PREFIX", "SlurmNode", "our_reason"]


_SHORT_STATES = {
    "ALLOCATED": "alloc",
    "COMPLETING": "comp",
    "MIXED": "mix",
    "FUTURE": "futr",
    "UNKNOWN": "unk",
}
_LONG_STATES = {short: long for long, short in _SHORT_STATES.items()}
#: sinfo's one-character power and health suffixes, as the flags they stand for.
SUFFIX_FLAGS = {
    "~": "POWERED_DOWN",
    "#": "POWERING_UP",
    "%": "POWERING_DOWN",
    "!": "POWER_DOWN",
    "*": "NOT_RESPONDING",
}


@dataclass(frozen=True)
class SlurmNode:
    """One node as slurmctld sees it.

    ``state`` is the upper-case base state (IDLE, ALLOCATED, MIXED, DOWN, ...); ``flags`` holds the
    upper-case flags (CLOUD, POWERED_DOWN, POWERING_UP, POWERING_DOWN, POWER_DOWN, DRAIN,
    NOT_RESPONDING, COMPLETING, ...).
    """

    name: str
    state: str
    flags: frozenset[str] = field(default_factory=frozenset)
    reason: str = ""
    address: str = ""
    #: When Slurm recorded ``reason`` (``reason_changed_at``); None when unknown or no reason.
    reason_since: datetime | None = None
    #: The node's free-text Comment; the bridge writes ``k8s: waiting: ...`` there while a pod
    #: is held up (a Reason would need a DOWN or DRAIN state), ``k8s: pod ...`` while it runs.
    comment: str = ""

    @property
    def is_cloud(self) -> bool:
        """A ``State=CLOUD`` node: the only kind the bridge ever changes in Slurm."""
        return "CLOUD" in self.flags

    @property
    def is_powered_down(self) -> bool:
        return "POWERED_DOWN" in self.flags

    @property
    def is_powering_up(self) -> bool:
        return "POWERING_UP" in self.flags

    @property
    def is_powering_down(self) -> bool:
        # Not POWER_DOWN: that is a power down *queued* behind a running job (sinfo ``alloc!``);
        # the job still needs its slurmd, so the pod must stay.
        return "POWERING_DOWN" in self.flags

    @property
    def power_down_queued(self) -> bool:
        """POWER_DOWN: Slurm will power the node down (at once if idle, after its job if busy)."""
        return "POWER_DOWN" in self.flags

    @property
    def is_down(self) -> bool:
        return self.state == "DOWN"

    @property
    def power_down_imminent(self) -> bool:
        """POWER_DOWN queued and no job holds the node: Slurm's power-save thread suspends it at
        its next cycle (a busy node waits for its job; sinfo ``alloc!``)."""
        return self.power_down_queued and not self.is_busy

    @property
    def is_busy(self) -> bool:
        """A job runs (or is finishing) on the node: deleting its pod would kill it."""
        return self.state in ("ALLOCATED", "MIXED", "COMPLETING") or "COMPLETING" in self.flags

    @property
    def is_drained(self) -> bool:
        return "DRAIN" in self.flags

    @property
    def wants_pod(self) -> bool:
        """Slurm expects a slurmd to be running (or starting) for this node."""
        return not (self.is_powered_down or self.is_powering_down or self.is_down)

    @property
    def has_our_reason(self) -> bool:
        """The reason is the bridge's, as it wrote it (not one Slurm appended to since)."""
        return Reason.parse(self.reason) is not None

    @property
    def bridge_reason(self) -> Reason | None:
        """The node's reason when the bridge wrote it (parsed from Slurm's text)."""
        return Reason.parse(self.reason)

    @property
    def display_state(self) -> str:
        """Compact state like sinfo's: ``idle~``, ``alloc#``, ``down~`` ..."""
        # sinfo's abbreviations (node_state_string_compact in Slurm's slurm_protocol_defs.c).
        short = _SHORT_STATES.get(self.state, self.state.lower())
        if self.is_drained:
            # Slurm says "drng" only while jobs still run on the node; DOWN+DRAIN is "drain".
            short = "drng" if self.is_busy else "drain"
        suffix = ""
        if self.is_powered_down:
            suffix = "~"
        elif self.is_powering_up:
            suffix = "#"
        elif self.is_powering_down:
            suffix = "%"
        elif "POWER_DOWN" in self.flags:
            suffix = "!"
        elif "NOT_RESPONDING" in self.flags:
            suffix = "*"
        return short + suffix

    @classmethod
    def from_display_state(cls, name: str, display: str, reason: str = "") -> SlurmNode:
        """The node a :attr:`display_state` stands for, as far as the compact form tells.

        What ``status`` reads off the wire, so that it judges nodes with the same predicates as
        the reconciler. Lossy where sinfo's form is: ``drain`` reads as IDLE+DRAIN (DOWN+DRAIN
        prints the same), ``drng`` as ALLOCATED+DRAIN, and only the suffix's flag is set.
        """
        suffix = display[-1:] if display[-1:] in SUFFIX_FLAGS else ""
        short = display[: len(display) - len(suffix)]
        flags = {SUFFIX_FLAGS[suffix]} if suffix else set()
        if short in ("drain", "drng"):
            flags.add("DRAIN")
            state = "ALLOCATED" if short == "drng" else "IDLE"
        else:
            state = _LONG_STATES.get(short, short.upper())
        return cls(name, state, frozenset(flags), reason)
