"""The gRPC servicer: translates proto requests into use-case calls and domain results back.

Nothing here decides anything. The servicer checks the transport contract (required fields,
enum values), calls the :class:`BridgeUseCases` object it was given, maps per-node results onto
the proto one to one (through :mod:`bridge.rpc.wire`), maps the bridge's errors onto gRPC status
codes, and logs one line per request.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any, NoReturn, Protocol

import grpc

from bridge.api.forwarding import LeaderForwarder, was_forwarded
from bridge.api.log_fields import printable
from bridge.domain.circuit import PoolBreakerStatus
from bridge.domain.gang_mode import GangMode
from bridge.domain.leadership import LeaderState
from bridge.domain.results import NodeResult, NodeStatus, Outcome
from bridge.errors import (
    BackendError,
    BridgeError,
    BridgeStopping,
    CallerNotAllowed,
    ConfigError,
    InvalidInput,
    NotLeader,
    TransientBackendError,
)
from bridge.rpc._proto.slurm_k8s_bridge.v1 import bridge_pb2 as pb
from bridge.rpc._proto.slurm_k8s_bridge.v1 import bridge_pb2_grpc as pb_grpc
from bridge.rpc.wire import (
    ERROR_METADATA_KEY,
    breaker_to_pb,
    gang_mode_to_pb,
    leadership_to_pb,
    node_event_kind_from_pb,
    result_to_pb,
    status_to_pb,
)

log = logging.getLogger(__name__)

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["Bridge"].full_name


class BridgeUseCases(Protocol):
    """What the servicer needs from the service layer; one method per RPC."""

    def resume(self, hostlist: str, resume_file: str, request_id: str) -> list[NodeResult]:
        """Back every node of ``hostlist`` with a pod; answer when every create ended."""
        ...

    def accept_resume(
        self,
        hostlist: str,
        resume_file: str,
        request_id: str,
        *,
        answered: threading.Event | None = None,
    ) -> list[NodeResult]:
        """Validate ``hostlist`` and answer at once (ACCEPTED per usable node); the pods are
        created in the background, from when ``answered`` is set."""
        ...

    def suspend(self, hostlist: str, request_id: str) -> list[NodeResult]:
        """Remove the pods of ``hostlist``."""
        ...

    def resume_failed(self, hostlist: str, request_id: str) -> list[NodeResult]:
        """Clean up after Slurm gave up resuming ``hostlist``."""
        ...

    def node_event(
        self, kind: str, hostlist: str, reason: str, request_id: str
    ) -> list[NodeResult]:
        """React to a strigger node event (``kind``: down, drain, fail, up, idle)."""
        ...

    def list_nodes(self, hostlist: str, stuck_after: timedelta | None = None) -> list[NodeStatus]:
        """Slurm and Kubernetes state of ``hostlist`` (every pool's nodes when empty), each
        judged stuck or not after ``stuck_after`` (None: the default)."""
        ...

    def pool_status(self) -> list[PoolBreakerStatus]:
        """Every pool's circuit breaker, in configuration order."""
        ...

    def resume_pool(self, pool: str, request_id: str) -> tuple[PoolBreakerStatus, bool]:
        """Close ``pool``'s circuit breaker; its state after, and whether it was paused."""
        ...

    def gang_scheduling(self) -> GangMode:
        """Whether a multi-node job's pods go in one PodGroup (ListPools says it)."""
        ...


def status_code_for(exc: BaseException) -> grpc.StatusCode:
    """The gRPC status a whole-call failure maps to (see the proto header)."""
    if isinstance(exc, InvalidInput):
        return grpc.StatusCode.INVALID_ARGUMENT
    if isinstance(exc, CallerNotAllowed):
        return grpc.StatusCode.PERMISSION_DENIED
    if isinstance(exc, TransientBackendError | BridgeStopping):
        return grpc.StatusCode.UNAVAILABLE
    if isinstance(exc, ConfigError | BackendError):
        return grpc.StatusCode.FAILED_PRECONDITION
    return grpc.StatusCode.INTERNAL


def _new_request_id() -> str:
    return "srv-" + os.urandom(6).hex()


#: A caller's request id: what the hooks send (``resume-4242-a1b2c3``) and room to spare. It is
#: logged and written to Slurm and Kubernetes, so nothing else is taken.
REQUEST_ID = re.compile(r"[A-Za-z0-9._:@+-]{1,64}")
#: Characters of a caller's hostlist (and of an error that quotes it) in one log line.
HOSTLIST_LOG_LIMIT = 200
MESSAGE_LOG_LIMIT = 500


def _request_id(given: str) -> tuple[str, InvalidInput | None]:
    """The call's request id: the caller's, or a new one (with the error to answer when the
    caller's is not one)."""
    if not given:
        return _new_request_id(), None
    if REQUEST_ID.fullmatch(given):
        return given, None
    return _new_request_id(), InvalidInput(
        f"request_id: must be 1 to 64 of A-Za-z0-9._:@+-, got {printable(given, 40)!r}"
    )


#: A forwarded call's deadline when the caller gave none (the hooks always give one).
FORWARD_TIMEOUT_S = 30.0

#: ``bridge.tls_client_names: ["*"]``: any client certificate the client CA signed.
ANY_CLIENT = "*"
#: The peer properties gRPC fills from a client certificate's DNS and URI subjectAltNames.
_PINNED_SAN_KINDS = ("peer_dns", "peer_uri")


class Leader(Protocol):
    """Leader election as the RPCs see it (``bridge.runtime.leadership.Leadership``)."""

    def check(self, what: str) -> None:
        """Raise NotLeader unless this bridge leads."""
        ...

    def state(self) -> LeaderState: ...


class NoElection:
    """Leader election off: this bridge always acts."""

    def check(self, what: str) -> None:
        return None

    def state(self) -> LeaderState:
        return LeaderState(enabled=False)


class BridgeServicer(pb_grpc.BridgeServicer):
    """Implements ``slurm_k8s_bridge.v1.Bridge`` on top of a :class:`BridgeUseCases`."""

    def __init__(
        self,
        use_cases: BridgeUseCases,
        *,
        allowed_client_names: frozenset[str] = frozenset(),
        leader: Leader | None = None,
        forwarder: LeaderForwarder | None = None,
    ) -> None:
        self._use_cases = use_cases
        #: A follower acts on no mutating call: it forwards it to the leader (``forwarder``),
        #: or answers UNAVAILABLE naming the leader, and the hook retries.
        self._leader = leader or NoElection()
        self._forwarder = forwarder
        #: Over TCP: a DNS or URI subjectAltName of the client certificate must be one of these
        #: (``*``: any certificate the client CA signed; the config requires the list with TLS).
        #: Unix socket callers are checked by the peer gate.
        self._allowed_client_names = allowed_client_names

    def _check_caller(self, context: grpc.ServicerContext) -> None:
        if not self._allowed_client_names or ANY_CLIENT in self._allowed_client_names:
            return
        # grpc-stubs types the values as bytes; grpcio gives lists of bytes.
        auth: dict[str, list[bytes]] = dict(context.auth_context())  # type: ignore[arg-type]
        if auth.get("transport_security_type") != [b"ssl"]:
            return  # the Unix socket: the peer gate decided already
        # DNS and URI SANs only: not the CN (RFC 6125 left it behind, and a CA may put anything
        # there), nor email or IP SANs, which a CA signs for other purposes.
        names = {
            v.decode("utf-8", "replace") for key in _PINNED_SAN_KINDS for v in auth.get(key, ())
        }
        if not names & self._allowed_client_names:
            raise CallerNotAllowed(
                f"client certificate (DNS/URI SANs {sorted(names)}) is not in "
                "bridge.tls_client_names"
            )

    def ResumeNodes(  # noqa: N802 (gRPC method name)
        self, request: pb.ResumeNodesRequest, context: grpc.ServicerContext
    ) -> pb.ResumeNodesResponse:
        """See the proto."""
        forwarded = self._forwarded("ResumeNodes", request, context)
        if forwarded is not None:
            return forwarded  # type: ignore[no-any-return]
        if request.wait:

            def resume(rid: str) -> list[NodeResult]:
                return self._use_cases.resume(request.hostlist, request.resume_file, rid)

        else:
            # The hooks do not wait: creating a thousand pods outlasts their deadline (see the
            # proto). The creates start once the answer is out, not beside its serialisation.
            answered = threading.Event()
            if not context.add_callback(answered.set):  # the call already ended
                answered.set()

            def resume(rid: str) -> list[NodeResult]:
                return self._use_cases.accept_resume(
                    request.hostlist, request.resume_file, rid, answered=answered
                )

        results, rid = self._mutate(
            "ResumeNodes", request.hostlist, request.request_id, context, resume
        )
        return pb.ResumeNodesResponse(results=results, request_id=rid)

    def SuspendNodes(  # noqa: N802
        self, request: pb.SuspendNodesRequest, context: grpc.ServicerContext
    ) -> pb.SuspendNodesResponse:
        """See the proto."""
        forwarded = self._forwarded("SuspendNodes", request, context)
        if forwarded is not None:
            return forwarded  # type: ignore[no-any-return]
        results, rid = self._mutate(
            "SuspendNodes",
            request.hostlist,
            request.request_id,
            context,
            lambda rid: self._use_cases.suspend(request.hostlist, rid),
        )
        return pb.SuspendNodesResponse(results=results, request_id=rid)

    def ResumeFailed(  # noqa: N802
        self, request: pb.ResumeFailedRequest, context: grpc.ServicerContext
    ) -> pb.ResumeFailedResponse:
        """See the proto."""
        forwarded = self._forwarded("ResumeFailed", request, context)
        if forwarded is not None:
            return forwarded  # type: ignore[no-any-return]
        results, rid = self._mutate(
            "ResumeFailed",
            request.hostlist,
            request.request_id,
            context,
            lambda rid: self._use_cases.resume_failed(request.hostlist, rid),
        )
        return pb.ResumeFailedResponse(results=results, request_id=rid)

    def NodeEvent(  # noqa: N802
        self, request: pb.NodeEventRequest, context: grpc.ServicerContext
    ) -> pb.NodeEventResponse:
        """See the proto."""
        forwarded = self._forwarded("NodeEvent", request, context)
        if forwarded is not None:
            return forwarded  # type: ignore[no-any-return]

        def call(rid: str) -> list[NodeResult]:
            kind = node_event_kind_from_pb(request.kind)
            if kind is None:
                raise InvalidInput(f"kind: {request.kind} is not a known node event kind")
            return self._use_cases.node_event(kind, request.hostlist, request.reason, rid)

        results, rid = self._mutate(
            "NodeEvent", request.hostlist, request.request_id, context, call
        )
        return pb.NodeEventResponse(results=results, request_id=rid)

    def ListNodes(  # noqa: N802
        self, request: pb.ListNodesRequest, context: grpc.ServicerContext
    ) -> pb.ListNodesResponse:
        """See the proto."""
        rid = _new_request_id()
        start = time.monotonic()
        try:
            self._check_caller(context)
            after = timedelta(seconds=request.stuck_after_s) if request.stuck_after_s else None
            nodes = self._use_cases.list_nodes(request.hostlist, after)
        except Exception as e:  # every failure must become a status, not a stack trace
            self._abort(
                context, rpc="ListNodes", rid=rid, hostlist=request.hostlist, exc=e, start=start
            )
        log.info(
            "ListNodes request_id=%s hostlist=%s nodes=%d elapsed_ms=%.1f",
            rid,
            printable(request.hostlist, HOSTLIST_LOG_LIMIT) or "-",
            len(nodes),
            (time.monotonic() - start) * 1000,
        )
        return pb.ListNodesResponse(nodes=[status_to_pb(n) for n in nodes])

    def ListPools(  # noqa: N802
        self, request: pb.ListPoolsRequest, context: grpc.ServicerContext
    ) -> pb.ListPoolsResponse:
        """See the proto."""
        rid = _new_request_id()
        start = time.monotonic()
        try:
            self._check_caller(context)
            pools = self._use_cases.pool_status()
            gang = self._use_cases.gang_scheduling()
        except Exception as e:  # every failure must become a status, not a stack trace
            self._abort(context, rpc="ListPools", rid=rid, hostlist="", exc=e, start=start)
        log.info(
            "ListPools request_id=%s pools=%d open=%d elapsed_ms=%.1f",
            rid,
            len(pools),
            sum(p.state == "open" for p in pools),
            (time.monotonic() - start) * 1000,
        )
        return pb.ListPoolsResponse(
            pools=[breaker_to_pb(p) for p in pools],
            leadership=leadership_to_pb(self._leader.state()),
            gang_scheduling=gang_mode_to_pb(gang),
        )

    def ResumePool(  # noqa: N802
        self, request: pb.ResumePoolRequest, context: grpc.ServicerContext
    ) -> pb.ResumePoolResponse:
        """See the proto."""
        forwarded = self._forwarded("ResumePool", request, context)
        if forwarded is not None:
            return forwarded  # type: ignore[no-any-return]
        rid, bad_id = _request_id(request.request_id)
        start = time.monotonic()
        try:
            self._check_caller(context)
            if bad_id is not None:
                raise bad_id
            self._leader.check("ResumePool")
            if not request.pool.strip():
                raise InvalidInput("pool: required, got an empty string")
            pool, was_paused = self._use_cases.resume_pool(request.pool, rid)
        except Exception as e:  # every failure must become a status, not a stack trace
            self._abort(context, rpc="ResumePool", rid=rid, hostlist="", exc=e, start=start)
        log.info(
            "ResumePool request_id=%s pool=%s was_paused=%s state=%s elapsed_ms=%.1f",
            rid,
            pool.pool,
            was_paused,
            pool.state.value,
            (time.monotonic() - start) * 1000,
        )
        return pb.ResumePoolResponse(
            pool=breaker_to_pb(pool), was_paused=was_paused, request_id=rid
        )

    def _forwarded(self, rpc: str, request: Any, context: grpc.ServicerContext) -> Any | None:
        """The leader's answer, when this bridge follows and forwards the call; None when it
        handles the call itself (it leads, forwarding is off, or a follower forwarded it)."""
        if self._forwarder is None or was_forwarded(context) is not None:
            return None
        state = self._leader.state()
        if state.leading:
            return None
        rid = request.request_id if REQUEST_ID.fullmatch(request.request_id) else "-"
        hostlist = getattr(request, "hostlist", "")
        start = time.monotonic()
        try:
            self._check_caller(context)
            if not state.leader_address:
                raise NotLeader(
                    f"{rpc}: this bridge ({state.identity}) does not lead, and "
                    f"{state.leader or 'no bridge'} holds lease {state.lease} with no address "
                    "to forward to"
                )
            remaining = context.time_remaining()
            answer = self._forwarder.call(
                state.leader_address,
                rpc,
                request,
                FORWARD_TIMEOUT_S if remaining is None else max(remaining, 0.001),
            )
        except grpc.RpcError as e:
            self._relay(context, rpc=rpc, rid=rid, hostlist=hostlist, state=state, error=e)
        except Exception as e:  # every failure must become a status, not a stack trace
            self._abort(context, rpc=rpc, rid=rid, hostlist=hostlist, exc=e, start=start)
        log.info(
            "%s request_id=%s hostlist=%s forwarded_to=%s address=%s elapsed_ms=%.1f",
            rpc,
            rid,
            printable(hostlist, HOSTLIST_LOG_LIMIT) or "-",
            state.leader,
            state.leader_address,
            (time.monotonic() - start) * 1000,
        )
        return answer

    @staticmethod
    def _relay(
        context: grpc.ServicerContext,
        *,
        rpc: str,
        rid: str,
        hostlist: str,
        state: LeaderState,
        error: grpc.RpcError,
    ) -> NoReturn:
        """End a forwarded call as the leader ended it; a leader that could not be reached is
        UNAVAILABLE from this bridge (the hook retries, and may reach the next leader)."""
        code, details = error.code(), error.details() or ""
        trailing: tuple[tuple[str, str | bytes], ...] = tuple(
            (m.key, m.value) for m in error.trailing_metadata() or ()
        )
        from_leader = any(key == ERROR_METADATA_KEY for key, _value in trailing)
        if code == grpc.StatusCode.UNAVAILABLE and not from_leader:
            details = (
                f"{rpc}: the leader {state.leader} at {state.leader_address} is unreachable: "
                f"{details}"
            )
            trailing = ((ERROR_METADATA_KEY, NotLeader.__name__),)
        log.warning(
            "%s request_id=%s hostlist=%s forwarded_to=%s address=%s status=%s message=%s",
            rpc,
            rid,
            printable(hostlist, HOSTLIST_LOG_LIMIT) or "-",
            state.leader,
            state.leader_address,
            code.name,
            printable(details, MESSAGE_LOG_LIMIT),
        )
        context.set_trailing_metadata(trailing)
        context.abort(code, details)

    def _mutate(
        self,
        rpc: str,
        hostlist: str,
        request_id: str,
        context: grpc.ServicerContext,
        call: Callable[[str], list[NodeResult]],
    ) -> tuple[list[pb.NodeResult], str]:
        """Run one mutating use case: validate, call, log one line, map results or abort."""
        rid, bad_id = _request_id(request_id)
        start = time.monotonic()
        try:
            self._check_caller(context)
            if bad_id is not None:
                raise bad_id
            self._leader.check(rpc)
            if not hostlist.strip():
                raise InvalidInput("hostlist: required, got an empty string")
            results = call(rid)
        except Exception as e:  # every failure must become a status, not a stack trace
            self._abort(context, rpc=rpc, rid=rid, hostlist=hostlist, exc=e, start=start)
        counts = {o: 0 for o in Outcome}
        for r in results:
            counts[r.outcome] += 1
        log.info(
            "%s request_id=%s hostlist=%s nodes=%d ok=%d accepted=%d rejected=%d failed=%d "
            "elapsed_ms=%.1f",
            rpc,
            rid,
            printable(hostlist, HOSTLIST_LOG_LIMIT),
            len(results),
            counts[Outcome.OK],
            counts[Outcome.ACCEPTED],
            counts[Outcome.REJECTED],
            counts[Outcome.FAILED],
            (time.monotonic() - start) * 1000,
        )
        return [result_to_pb(r) for r in results], rid

    @staticmethod
    def _abort(
        context: grpc.ServicerContext,
        *,
        rpc: str,
        rid: str,
        hostlist: str,
        exc: Exception,
        start: float,
    ) -> NoReturn:
        """Log the failure and end the call with the mapped status (and our metadata marker)."""
        code = status_code_for(exc)
        elapsed_ms = (time.monotonic() - start) * 1000
        if isinstance(exc, BridgeError):
            message = str(exc)
            log.warning(
                "%s request_id=%s hostlist=%s status=%s error=%s message=%s elapsed_ms=%.1f",
                rpc,
                rid,
                printable(hostlist, HOSTLIST_LOG_LIMIT) or "-",
                code.name,
                type(exc).__name__,
                printable(message, MESSAGE_LOG_LIMIT),
                elapsed_ms,
            )
            context.set_trailing_metadata(((ERROR_METADATA_KEY, type(exc).__name__),))
        else:
            message = f"internal error: {type(exc).__name__}: {exc}"
            log.exception(
                "%s request_id=%s hostlist=%s status=%s bug=%s elapsed_ms=%.1f",
                rpc,
                rid,
                printable(hostlist, HOSTLIST_LOG_LIMIT) or "-",
                code.name,
                type(exc).__name__,
                elapsed_ms,
            )
        context.abort(code, f"{message} (request_id={rid})")
