"""What crosses the gRPC wire: proto <-> domain conversion, both directions, for both ends.

One table per enum, written domain -> proto; the reverse is derived from it, so the server and
the client cannot disagree on a value. Values outside a table (a newer peer, an unset enum) are
decided here too: an unknown outcome reads as an internal failure, an unknown event kind as none.
"""

from __future__ import annotations

from datetime import UTC

from bridge.domain.circuit import BreakerPolicy, BreakerState, PoolBreakerStatus
from bridge.domain.gang_mode import GangMode
from bridge.domain.leadership import LeaderState
from bridge.domain.nodes import SlurmNode
from bridge.domain.results import ErrorClass, NodeResult, NodeStatus, Outcome
from bridge.rpc._proto.slurm_k8s_bridge.v1 import bridge_pb2 as pb

#: Event kinds NodeEvent accepts (strigger's node events), as the use cases spell them.
NODE_EVENT_KIND_TO_PB: dict[str, pb.NodeEventKind] = {
    "down": pb.NODE_EVENT_KIND_DOWN,
    "drain": pb.NODE_EVENT_KIND_DRAIN,
    "fail": pb.NODE_EVENT_KIND_FAIL,
    "up": pb.NODE_EVENT_KIND_UP,
    "idle": pb.NODE_EVENT_KIND_IDLE,
}
NODE_EVENT_KINDS = tuple(NODE_EVENT_KIND_TO_PB)
OUTCOME_TO_PB: dict[Outcome, pb.Outcome] = {
    Outcome.OK: pb.OUTCOME_OK,
    Outcome.REJECTED: pb.OUTCOME_REJECTED,
    Outcome.FAILED: pb.OUTCOME_FAILED,
    Outcome.ACCEPTED: pb.OUTCOME_ACCEPTED,
}
ERROR_CLASS_TO_PB: dict[ErrorClass, pb.ErrorClass] = {
    ErrorClass.NONE: pb.ERROR_CLASS_NONE,
    ErrorClass.INVALID: pb.ERROR_CLASS_INVALID,
    ErrorClass.UNKNOWN_NODE: pb.ERROR_CLASS_UNKNOWN_NODE,
    ErrorClass.NO_CAPACITY: pb.ERROR_CLASS_NO_CAPACITY,
    ErrorClass.TRANSIENT: pb.ERROR_CLASS_TRANSIENT,
    ErrorClass.INTERNAL: pb.ERROR_CLASS_INTERNAL,
}
BREAKER_STATE_TO_PB: dict[BreakerState, pb.BreakerState] = {
    BreakerState.OFF: pb.BREAKER_STATE_OFF,
    BreakerState.CLOSED: pb.BREAKER_STATE_CLOSED,
    BreakerState.OPEN: pb.BREAKER_STATE_OPEN,
    BreakerState.HALF_OPEN: pb.BREAKER_STATE_HALF_OPEN,
}
#: Trailing metadata key the server sets on whole-call errors it raised on purpose, so an
#: UNAVAILABLE from a bridge backend is told apart from "could not reach the bridge at all".
ERROR_METADATA_KEY = "skb-error"

_NODE_EVENT_KIND_FROM_PB = {v: k for k, v in NODE_EVENT_KIND_TO_PB.items()}
_OUTCOME_FROM_PB = {v: k for k, v in OUTCOME_TO_PB.items()}
_ERROR_CLASS_FROM_PB = {v: k for k, v in ERROR_CLASS_TO_PB.items()}
_BREAKER_STATE_FROM_PB = {v: k for k, v in BREAKER_STATE_TO_PB.items()}


def node_event_kind_from_pb(kind: pb.NodeEventKind) -> str | None:
    """The use cases' name of a proto event kind; ``None`` for UNSPECIFIED or one we do not know."""
    return _NODE_EVENT_KIND_FROM_PB.get(kind)


def result_to_pb(r: NodeResult) -> pb.NodeResult:
    """Proto result of one domain result."""
    return pb.NodeResult(
        node=r.node,
        outcome=OUTCOME_TO_PB[r.outcome],
        error_class=ERROR_CLASS_TO_PB[r.error_class],
        message=r.message,
    )


def result_from_pb(r: pb.NodeResult) -> NodeResult:
    """Domain result of one proto result; an unknown outcome counts as an internal failure."""
    outcome = _OUTCOME_FROM_PB.get(r.outcome)
    error_class = _ERROR_CLASS_FROM_PB.get(r.error_class, ErrorClass.INTERNAL)
    if outcome is None:
        outcome, error_class = Outcome.FAILED, ErrorClass.INTERNAL
    return NodeResult(node=r.node, outcome=outcome, error_class=error_class, message=r.message)


def status_to_pb(s: NodeStatus) -> pb.NodeStatus:
    """Proto status row of one domain status (``since`` left unset when unknown)."""
    msg = pb.NodeStatus(
        node=s.node,
        pool=s.pool,
        slurm_state=s.slurm_state,
        pod_phase=s.pod_phase,
        pod_ip=s.pod_ip,
        reason=s.reason,
        template_hash=s.template_hash,
        pool_template_hash=s.pool_template_hash,
    )
    if s.since is not None:
        msg.since.FromDatetime(s.since)
    if s.stuck is not None:
        msg.stuck = s.stuck
    if s.slurm_node is not None:
        msg.base_state = s.slurm_node.state
        msg.state_flags.extend(sorted(s.slurm_node.flags))
        if s.slurm_node.reason_since is not None:
            msg.reason_since.FromDatetime(s.slurm_node.reason_since)
    return msg


def status_from_pb(n: pb.NodeStatus) -> NodeStatus:
    """Domain status of one proto status row."""
    slurm_node = None
    if n.base_state:
        slurm_node = SlurmNode(
            n.node,
            n.base_state,
            frozenset(n.state_flags),
            n.reason,
            reason_since=n.reason_since.ToDatetime(tzinfo=UTC)
            if n.HasField("reason_since")
            else None,
        )
    return NodeStatus(
        node=n.node,
        pool=n.pool,
        slurm_state=n.slurm_state,
        pod_phase=n.pod_phase,
        pod_ip=n.pod_ip,
        reason=n.reason,
        since=n.since.ToDatetime(tzinfo=UTC) if n.HasField("since") else None,
        template_hash=n.template_hash,
        pool_template_hash=n.pool_template_hash,
        slurm_node=slurm_node,
        stuck=n.stuck if n.HasField("stuck") else None,
    )


def breaker_to_pb(b: PoolBreakerStatus) -> pb.PoolBreaker:
    """Proto breaker of one pool's breaker status (``paused_until`` left unset when None)."""
    msg = pb.PoolBreaker(
        pool=b.pool,
        state=BREAKER_STATE_TO_PB[b.state],
        failures=b.policy.failures,
        window_s=b.policy.window_s,
        pause_s=b.policy.pause_s,
        recent_failures=b.recent_failures,
        last_reason=b.last_reason,
    )
    if b.paused_until is not None:
        msg.paused_until.FromDatetime(b.paused_until)
    return msg


def breaker_from_pb(b: pb.PoolBreaker) -> PoolBreakerStatus:
    """Domain breaker status of one proto breaker; an unknown state reads as closed."""
    return PoolBreakerStatus(
        pool=b.pool,
        state=_BREAKER_STATE_FROM_PB.get(b.state, BreakerState.CLOSED),
        policy=BreakerPolicy(b.failures, b.window_s, b.pause_s),
        recent_failures=b.recent_failures,
        paused_until=b.paused_until.ToDatetime(tzinfo=UTC) if b.HasField("paused_until") else None,
        last_reason=b.last_reason,
    )


def leadership_to_pb(state: LeaderState) -> pb.Leadership:
    """Proto of a bridge's view of the election (``since`` left unset when unknown)."""
    msg = pb.Leadership(
        enabled=state.enabled,
        identity=state.identity,
        lease=state.lease,
        leader=state.leader,
        leading=state.leading,
        transitions=state.transitions,
    )
    if state.since is not None:
        msg.since.FromDatetime(state.since)
    return msg


def gang_mode_to_pb(mode: GangMode) -> pb.GangScheduling:
    """Proto of a bridge's gang scheduling mode."""
    return pb.GangScheduling(
        on=mode.on, api_version=mode.api_version, why_off="" if mode.on else mode.why_off
    )


def gang_mode_from_pb(msg: pb.GangScheduling) -> GangMode:
    """The mode a bridge sent (on only with an API version to go with it)."""
    if msg.on and msg.api_version:
        return GangMode(api_version=msg.api_version)
    return GangMode(why_off=msg.why_off or "the bridge does not say why")


def leadership_from_pb(msg: pb.Leadership) -> LeaderState:
    return LeaderState(
        enabled=msg.enabled,
        identity=msg.identity,
        lease=msg.lease,
        leader=msg.leader,
        leading=msg.leading,
        since=msg.since.ToDatetime(tzinfo=UTC) if msg.HasField("since") else None,
        transitions=msg.transitions,
    )
