"""What the service answers per node: the RPC layer maps these onto the proto one to one."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime

from bridge.domain.nodes import SlurmNode


class Outcome(enum.Enum):
    """What happened to one node of a request."""

    OK = "ok"  # done, or already so (idempotent repeat)
    REJECTED = "rejected"  # not attempted: the input was wrong for this node
    FAILED = "failed"  # attempted and failed; see the error class
    # ResumeNodes without wait: the pod is being created; Slurm hears the result, not the caller
    ACCEPTED = "accepted"


class ErrorClass(enum.Enum):
    """Why a node was rejected or failed; callers decide on retry from this alone."""

    NONE = "none"
    INVALID = "invalid"  # malformed input (bad hostlist, bad resume file)
    UNKNOWN_NODE = "unknown_node"  # no pool owns the node
    NO_CAPACITY = "no_capacity"  # Kubernetes cannot place the pod
    TRANSIENT = "transient"  # try again later (API unavailable, timeouts)
    INTERNAL = "internal"  # a bug or an unexpected answer; see the message


@dataclass(frozen=True)
class NodeResult:
    """The result of a request for one node."""

    node: str
    outcome: Outcome
    error_class: ErrorClass = ErrorClass.NONE
    message: str = ""


@dataclass(frozen=True)
class NodeStatus:
    """One row of ``status``: Slurm's and Kubernetes' views of a node side by side."""

    node: str
    pool: str
    slurm_state: str  # sinfo-style, e.g. ``idle~`` or ``alloc#``; empty if Slurm does not know it
    pod_phase: str  # empty when there is no pod
    pod_ip: str
    reason: str  # Slurm's reason for the node (ours or an admin's)
    since: datetime | None  # pod creation time, when there is a pod
    #: The pod's template hash ("" without a pod, or a pod of an older bridge) and the one its
    #: pool renders now: a pod whose known hash differs is being rolled.
    template_hash: str = ""
    pool_template_hash: str = ""
    #: Slurm's node as the bridge read it (base state, flags, reason and its time); None when
    #: Slurm does not know the node, or from a bridge older than these fields on the wire.
    slurm_node: SlurmNode | None = None
    #: Why the bridge judges the node stuck ("": it is not); None when no bridge judged it (an
    #: answer of a bridge older than the judgement on the server).
    stuck: str | None = None

    @property
    def slurm_view(self) -> SlurmNode:
        """Slurm's node: :attr:`slurm_node`, else what the compact ``slurm_state`` tells (an
        older bridge's answer; the compact form loses the reason's time and some flags)."""
        if self.slurm_node is not None:
            return self.slurm_node
        return SlurmNode.from_display_state(self.node, self.slurm_state, self.reason)

    @property
    def on_older_template(self) -> bool:
        """Whether the pod is known to run an older template of its pool (being rolled)."""
        return bool(self.template_hash and self.pool_template_hash) and (
            self.template_hash != self.pool_template_hash
        )
