"""The reasons the bridge writes on Slurm nodes, as a value: made where a decision is taken,
written as Slurm's text (``k8s: <Kind>: <message>``) only when it goes to Slurm, and read back
from Slurm's text in one place (:meth:`Reason.parse`). The fail-fast rule (which kinds count
against a pool) and the metrics' kind label read ``kind``; nothing splits the text again."""

from __future__ import annotations

import re
from dataclasses import dataclass

#: Every reason the bridge writes starts with this, so it only ever touches reasons it wrote.
REASON_PREFIX = "k8s: "
#: How Slurm (23.02+) appends its own reason to a node's existing one when it sets the node
#: DOWN itself (``set_node_reason``: "Not responding", "ResumeTimeout reached" ...). A reason
#: of ours left on a node from an earlier cycle thus becomes ``k8s: ... : Not responding``: that
#: DOWN is Slurm's, not ours, and the bridge must not resume the node or delete its pod for it.
#: The bridge's own texts never contain it (:attr:`Reason.text`).
SLURM_APPENDED = " : "
#: Slurm stores reasons verbatim, but sinfo -R is read on a terminal: keep them short.
MAX_TEXT = 200

#: The reason kind of a node set DOWN because its pool is paused (never itself a fail-fast).
POOL_PAUSED = "PoolPaused"
#: Kinds that say nothing against the pool: the breaker's own, a pod gone missing, and
#: Kubernetes moving a pod away (a drain, a preemption, a taint, node pressure, a delete).
NOT_COUNTED = frozenset(
    {
        POOL_PAUSED,
        "NoCapacity",  # Kubernetes stayed full for the pool's patience: not the pool's fault
        "PodMissing",
        "Deleted",
        "DisruptionTarget",
        "EvictionByEvictionAPI",
        "PreemptionByScheduler",
        "DeletionByTaintManager",
        "TerminationByKubelet",
        "Evicted",
    }
)
#: A kind fit for a metric label: Kubernetes' reasons are CamelCase words.
_LABEL_KIND = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,47}")


@dataclass(frozen=True)
class Reason:
    """A reason of the bridge's: ``kind`` (Kubernetes' word, or ours: PodMissing, PoolPaused...)
    and ``message`` (what Kubernetes said, or what we saw)."""

    kind: str
    message: str

    @property
    def text(self) -> str:
        """Slurm's form: ``k8s: <Kind>: <message>`` on one line of at most :data:`MAX_TEXT`."""
        text = f"{REASON_PREFIX}{self.kind}: {self.message}".replace("\n", " ").strip()
        # Never Slurm's separator: an appended reason must stay recognisable (parse).
        text = text.replace(SLURM_APPENDED, " - ")
        return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 3] + "..."

    def __str__(self) -> str:
        return self.text

    @classmethod
    def parse(cls, text: str) -> Reason | None:
        """The reason in Slurm's ``text``; None when the text is not one of ours: an admin's, or
        one of ours that Slurm appended its own to (:data:`SLURM_APPENDED`), which makes the
        node's state Slurm's."""
        if not text.startswith(REASON_PREFIX) or SLURM_APPENDED in text:
            return None
        kind, _, message = text.removeprefix(REASON_PREFIX).partition(":")
        return cls(kind.strip(), message.strip())

    @property
    def is_fail_fast(self) -> bool:
        """Whether a DOWN with this reason counts against the node's pool: a pod that cannot
        run (or that Kubernetes refused for good), not one of :data:`NOT_COUNTED`: draining a
        Kubernetes node that hosts five pods of a healthy pool must not pause it."""
        return self.kind not in NOT_COUNTED

    @property
    def label(self) -> str:
        """``kind`` as a metric label: ``other`` when it is not a word (bounded cardinality)."""
        return self.kind if _LABEL_KIND.fullmatch(self.kind) else "other"


def slurm_said_last(text: str) -> str:
    """What Slurm appended last to a node's reason (``ResumeTimeout reached`` of ``k8s: ... :
    ResumeTimeout reached``), or the whole text when nothing was appended."""
    return text.rsplit(SLURM_APPENDED, 1)[-1]


def our_reason(kind: str, message: str) -> str:
    """Slurm's text of ``Reason(kind, message)``, for writes that take a string (a node's
    power-down reason, its comment)."""
    return Reason(kind, message).text
