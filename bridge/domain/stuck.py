"""Is a node stuck? Slurm's and Kubernetes' views of it disagree for longer than they should.

A purely computational module, the judgement behind ``slurm-k8s-bridge status``'s exit status:
the caller brings the status rows (what the bridge's ListNodes answers), the clock and, when it
watches, when it first saw each node as it is now. The states are the reconciler's
(:class:`~bridge.domain.nodes.SlurmNode`'s predicates, read back from the sinfo-style state) and
Kubernetes' pod phases; a case the reconciler repairs within a pass is only stuck once it lasted
``after``.

==========================================  ===========================================  ========
Slurm (node)                                 pod                                          clock
==========================================  ===========================================  ========
DOWN or DRAIN with a ``k8s:`` reason         any                                          at once
  but DRAIN and power down queued (``!``):   any                                          never
  our ``power_down_asap`` (a rollout), busy
  the same, idle (Slurm powers it down)      any                                          seen
DOWN with Slurm's ``ResumeTimeout reached``  any                                          at once
any                                          Failed, Succeeded or Unknown (not deleted)   at once
not known to Slurm                           any but Terminating                          pod age
powering up                                  none                                         seen
powering up or up                            Pending, or Running while still powering up  pod age
powering up or up                            Terminating                                  seen
up (not powering down, not queued ``!``)     none                                         seen
powered down or powering down                any but Terminating                          seen
powered down or powering down                Terminating                                  seen
==========================================  ===========================================  ========

"pod age" is the pod's creation time; "seen" is when the caller first saw the node in this very
state and phase (:func:`track`): the bridge reports no clock for these, and Slurm none for
POWERING_UP. Without one (a single ``status``), such a case is not judged: Slurm's ResumeTimeout
turns a powering-up node that never gets a pod into a DOWN, which is.

An admin's DOWN or DRAIN (a reason without the prefix) is not stuck: it is what the admin wants.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from .nodes import SlurmNode
from .reason import slurm_said_last
from .results import NodeStatus

#: Kubernetes' pod phases, and the bridge's ``Terminating`` for a pod being deleted.
POD_PHASES = ("Pending", "Running", "Succeeded", "Failed", "Unknown", "Terminating")
TERMINATING = "Terminating"
#: Phases a slurmd pod never comes back from (``Unknown``: its kubelet stopped reporting).
_DEAD_PHASES = frozenset({"Failed", "Succeeded", "Unknown"})
#: slurmctld's reason when a node did not register within ResumeTimeout; it stays DOWN until
#: someone resumes it (the reconciler only clears reasons of its own).
RESUME_TIMEOUT_REASON = "ResumeTimeout reached"

DEFAULT_AFTER = timedelta(seconds=300)


@dataclass(frozen=True)
class Stuck:
    """A node whose two views disagree; ``why`` is one short line for an admin."""

    node: str
    pool: str
    why: str


@dataclass(frozen=True)
class Sighting:
    """A node as the caller saw it, and since when it has looked like this."""

    slurm_state: str
    pod_phase: str
    since: datetime


def track(
    previous: Mapping[str, Sighting], rows: Iterable[NodeStatus], now: datetime
) -> dict[str, Sighting]:
    """The sightings after seeing ``rows`` at ``now``: a node whose state or phase changed (or
    that is new) starts its clock again; nodes no longer listed are forgotten."""
    seen: dict[str, Sighting] = {}
    for row in rows:
        before = previous.get(row.node)
        if (
            before is not None
            and before.slurm_state == row.slurm_state
            and before.pod_phase == row.pod_phase
        ):
            seen[row.node] = before
        else:
            seen[row.node] = Sighting(row.slurm_state, row.pod_phase, now)
    return seen


def _seconds(delta: timedelta) -> str:
    return f"{max(0, int(delta.total_seconds()))}s"


def _powering_down_on_purpose(row: NodeStatus, node: SlurmNode) -> bool:
    """Our ``power_down_asap`` (a template rollout): drained with our reason to be powered down
    once its jobs end; planned work, not a failure."""
    return bool(row.slurm_state) and (
        node.is_drained and node.power_down_queued and node.has_our_reason and not node.is_down
    )


def _why_at_once(row: NodeStatus, node: SlurmNode) -> str | None:
    """What makes a node stuck whatever its age: a failure someone has to look at."""
    # Our drain with a power down queued (a cordoned host, a rollout) waits for the node's
    # jobs on purpose: no failure, Slurm powers the node down when they end.
    ours = row.slurm_state and (node.is_down or node.is_drained) and node.has_our_reason
    if ours and not _powering_down_on_purpose(row, node):
        return row.reason
    if (
        row.slurm_state
        and node.is_down
        and slurm_said_last(row.reason).startswith(RESUME_TIMEOUT_REASON)
    ):
        return f"Slurm gave up on the resume ({row.reason}); it stays DOWN until resumed"
    if row.pod_phase in _DEAD_PHASES:
        return f"pod {row.pod_phase}"
    return None


def _why(row: NodeStatus, now: datetime, after: timedelta, seen: datetime | None) -> str | None:
    """Why ``row`` is stuck, or ``None``."""
    node = row.slurm_view
    at_once = _why_at_once(row, node)
    if at_once is not None:
        return at_once

    def lasted(since: datetime | None, what: str) -> str | None:
        if since is None or now - since < after:
            return None
        return f"{what} for {_seconds(now - since)} (> {_seconds(after)})"

    if _powering_down_on_purpose(row, node):
        # Busy: its jobs may run for days. Idle: Slurm's next power-save pass takes it down.
        return None if node.is_busy else lasted(seen, "drained to power down, still up")
    phase = row.pod_phase
    pod_age = row.since if phase and phase != TERMINATING else None
    if not row.slurm_state:
        return lasted(pod_age, f"pod {phase} but Slurm does not know the node") if phase else None
    if node.is_powered_down or node.is_powering_down:
        state = "powered down" if node.is_powered_down else "powering down"
        if phase == TERMINATING:
            return lasted(seen, f"pod still terminating, Slurm {state}")
        return lasted(seen, f"pod {phase} while Slurm {state}") if phase else None
    if node.is_down or node.is_drained:
        return None  # an admin's: theirs to undo
    if phase == TERMINATING:
        return lasted(seen, "pod terminating while Slurm wants the node up")
    if not phase:
        if node.is_powering_up:
            return lasted(seen, "Slurm powering up, no pod")
        if node.power_down_imminent:
            return None  # idle, about to power down: no slurmd needed
        return lasted(seen, "Slurm thinks it is up, no pod")
    if phase == "Pending":
        return lasted(pod_age, "pod Pending")
    if node.is_powering_up:
        return lasted(pod_age, f"pod {phase} but slurmd not registered (Slurm powering up)")
    return None


def find_stuck(
    rows: Iterable[NodeStatus],
    now: datetime,
    after: timedelta = DEFAULT_AFTER,
    seen: Mapping[str, Sighting] | None = None,
) -> list[Stuck]:
    """The stuck nodes among ``rows``, in their order.

    ``seen`` (from :func:`track`) times the cases that carry no clock of their own; without it
    those are not judged.
    """
    sightings = seen or {}
    stuck = []
    for row in rows:
        sighting = sightings.get(row.node)
        since = (
            sighting.since
            if sighting is not None
            and (sighting.slurm_state, sighting.pod_phase) == (row.slurm_state, row.pod_phase)
            else None
        )
        why = _why(row, now, after, since)
        if why is not None:
            stuck.append(Stuck(row.node, row.pool, why))
    return stuck
