"""A small synchronous client for the bridge's gRPC API, used by the hooks and the CLI.

It hides the generated code: methods take plain strings and return the domain's
:class:`NodeResult` / :class:`NodeStatus`. Whole-call failures come back as the bridge's own
errors (see :func:`_error_from_rpc`). Only UNAVAILABLE is retried, a few times and quickly, inside
one overall deadline, because a Slurm hook has well under a second to spare; every RPC is
idempotent, so a retry after a lost answer is harmless.

Keep the imports light: the hooks pay for every module at start-up.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from types import TracebackType
from typing import TypeVar

import grpc

from bridge.domain.circuit import PoolBreakerStatus
from bridge.domain.gang_mode import GangMode
from bridge.domain.leadership import LeaderState
from bridge.domain.results import NodeResult, NodeStatus
from bridge.errors import (
    BridgeError,
    CallerNotAllowed,
    InvalidInput,
    NotLeader,
    TransientBackendError,
)
from bridge.rpc._proto.slurm_k8s_bridge.v1 import bridge_pb2 as pb
from bridge.rpc._proto.slurm_k8s_bridge.v1 import bridge_pb2_grpc as pb_grpc
from bridge.rpc.tls import TlsFiles, read_tls_files
from bridge.rpc.wire import (
    ERROR_METADATA_KEY,
    NODE_EVENT_KIND_TO_PB,
    NODE_EVENT_KINDS,
    breaker_from_pb,
    gang_mode_from_pb,
    leadership_from_pb,
    result_from_pb,
    status_from_pb,
)
from bridge.settings import DEFAULT_TARGET

# TlsFiles and NODE_EVENT_KINDS are part of the client's interface (hooks and tests use them).
__all__ = [
    "DEFAULT_TARGET",
    "NODE_EVENT_KINDS",
    "BridgeClient",
    "BridgeNoAnswer",
    "BridgeUnreachable",
    "TlsFiles",
]

_T = TypeVar("_T")

_BACKOFF_S = (0.05, 0.1, 0.2, 0.4)
# Without these, a channel that failed to connect waits ~1 s before it tries again, so quick
# retries would fail at once without ever reconnecting.
_CHANNEL_OPTIONS = (
    ("grpc.initial_reconnect_backoff_ms", 50),
    ("grpc.min_reconnect_backoff_ms", 50),
    ("grpc.max_reconnect_backoff_ms", 250),
)


class BridgeUnreachable(TransientBackendError):
    """The bridge itself could not be reached within the deadline (no socket, refused, hung).

    The message is short enough for a Slurm reason; ``details`` keeps grpc's full text.
    """

    def __init__(self, message: str, details: str = "") -> None:
        super().__init__(message)
        self.details = details


class BridgeNoAnswer(BridgeUnreachable):
    """The call was sent but no answer came back (the bridge died or hung mid-call).

    Unlike a refused connection, the bridge may have acted on it: a resume must then not be
    failed by the caller, because the bridge's reconciler finishes it from POWERING_UP.
    """


class BridgeClient:
    """Calls the bridge; one channel per client, safe to reuse for several calls."""

    def __init__(
        self,
        target: str = DEFAULT_TARGET,
        tls: TlsFiles | None = None,
        timeout_s: float = 2.0,
        *,
        attempts: int = 3,
    ) -> None:
        """Open a channel to ``target`` (``unix:/path`` or ``host:port``; mTLS when ``tls``).

        ``timeout_s`` bounds each method call in total, retries included.
        """
        self.target = target
        self.timeout_s = timeout_s
        self.attempts = max(1, attempts)
        if tls is None:
            self._channel = grpc.insecure_channel(target, options=_CHANNEL_OPTIONS)
        else:
            cert, key, ca = read_tls_files(tls)
            creds = grpc.ssl_channel_credentials(
                root_certificates=ca, private_key=key, certificate_chain=cert
            )
            self._channel = grpc.secure_channel(target, creds, options=_CHANNEL_OPTIONS)
        # The generated grpc module has no type hints; the stub's methods return typed messages.
        self._stub = pb_grpc.BridgeStub(self._channel)  # type: ignore[no-untyped-call]

    def close(self) -> None:
        """Close the channel."""
        self._channel.close()

    def __enter__(self) -> BridgeClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def resume_nodes(
        self, hostlist: str, resume_file: str = "", request_id: str = "", *, wait: bool = False
    ) -> list[NodeResult]:
        """ResumeNodes: pods for ``hostlist``; ``resume_file`` is $SLURM_RESUME_FILE's text.

        Without ``wait`` the bridge answers before creating the pods (ACCEPTED per usable node);
        with it, after every create ended (OK or FAILED per node).
        """
        req = pb.ResumeNodesRequest(
            hostlist=hostlist, resume_file=resume_file, request_id=request_id, wait=wait
        )
        resp = self._call(lambda t: self._stub.ResumeNodes(req, timeout=t))
        return [result_from_pb(r) for r in resp.results]

    def suspend_nodes(self, hostlist: str, request_id: str = "") -> list[NodeResult]:
        """SuspendNodes: delete the pods of ``hostlist``."""
        req = pb.SuspendNodesRequest(hostlist=hostlist, request_id=request_id)
        resp = self._call(lambda t: self._stub.SuspendNodes(req, timeout=t))
        return [result_from_pb(r) for r in resp.results]

    def resume_failed(self, hostlist: str, request_id: str = "") -> list[NodeResult]:
        """ResumeFailed: Slurm gave up resuming ``hostlist``."""
        req = pb.ResumeFailedRequest(hostlist=hostlist, request_id=request_id)
        resp = self._call(lambda t: self._stub.ResumeFailed(req, timeout=t))
        return [result_from_pb(r) for r in resp.results]

    def node_event(
        self, kind: str, hostlist: str, reason: str = "", request_id: str = ""
    ) -> list[NodeResult]:
        """NodeEvent: forward a strigger node event; ``kind`` is one of :data:`NODE_EVENT_KINDS`."""
        if kind not in NODE_EVENT_KINDS:
            raise InvalidInput(f"node event kind {kind!r} is not one of {NODE_EVENT_KINDS}")
        req = pb.NodeEventRequest(
            kind=NODE_EVENT_KIND_TO_PB[kind],
            hostlist=hostlist,
            reason=reason,
            request_id=request_id,
        )
        resp = self._call(lambda t: self._stub.NodeEvent(req, timeout=t))
        return [result_from_pb(r) for r in resp.results]

    def list_nodes(self, hostlist: str = "", stuck_after_s: int = 0) -> list[NodeStatus]:
        """ListNodes: Slurm and pod state side by side, and whether the bridge judges each node
        stuck after ``stuck_after_s`` (0: its default); empty ``hostlist`` means every node."""
        req = pb.ListNodesRequest(hostlist=hostlist, stuck_after_s=stuck_after_s)
        resp = self._call(lambda t: self._stub.ListNodes(req, timeout=t))
        return [status_from_pb(n) for n in resp.nodes]

    def list_pools(self) -> list[PoolBreakerStatus]:
        """ListPools: every pool's circuit breaker, in configuration order."""
        return self.pools_and_leadership()[0]

    def pools_and_leadership(self) -> tuple[list[PoolBreakerStatus], LeaderState]:
        """ListPools: the pools' breakers, and who leads as the bridge sees it (election off
        for a bridge that does not say)."""
        pools, leadership, _ = self.pools_report()
        return pools, leadership

    def pools_report(self) -> tuple[list[PoolBreakerStatus], LeaderState, GangMode | None]:
        """ListPools whole: the pools' breakers, who leads, and the bridge's gang scheduling
        (None from a bridge older than it)."""
        req = pb.ListPoolsRequest()
        resp = self._call(lambda t: self._stub.ListPools(req, timeout=t))
        leadership = (
            leadership_from_pb(resp.leadership)
            if resp.HasField("leadership")
            else LeaderState(enabled=False)
        )
        gang = gang_mode_from_pb(resp.gang_scheduling) if resp.HasField("gang_scheduling") else None
        return [breaker_from_pb(p) for p in resp.pools], leadership, gang

    def resume_pool(self, pool: str, request_id: str = "") -> tuple[PoolBreakerStatus, bool]:
        """ResumePool: close ``pool``'s circuit breaker; its state after, and whether it was
        paused. An unknown pool raises :class:`InvalidInput`."""
        req = pb.ResumePoolRequest(pool=pool, request_id=request_id)
        resp = self._call(lambda t: self._stub.ResumePool(req, timeout=t))
        return breaker_from_pb(resp.pool), resp.was_paused

    def _call(self, rpc: Callable[[float], _T]) -> _T:
        """Run ``rpc(timeout)``, retrying UNAVAILABLE within the overall deadline."""
        deadline = time.monotonic() + self.timeout_s
        attempt = 0
        delivered = False  # whether any attempt may have reached the bridge
        while True:
            attempt += 1
            remaining = deadline - time.monotonic()
            try:
                return rpc(max(remaining, 0.001))
            except grpc.RpcError as e:
                error = _error_from_rpc(e, self.target, attempt)
                delivered = (
                    delivered
                    or not isinstance(error, BridgeUnreachable)
                    or isinstance(error, BridgeNoAnswer)
                )
                pause = _BACKOFF_S[min(attempt, len(_BACKOFF_S)) - 1]
                retry = (
                    e.code() == grpc.StatusCode.UNAVAILABLE
                    and attempt < self.attempts
                    and deadline - time.monotonic() > pause
                )
                if not retry:
                    # A bridge that died mid-call refuses the retries: still "no answer".
                    if delivered and type(error) is BridgeUnreachable:
                        raise BridgeNoAnswer(str(error), error.details) from e
                    raise error from e
                time.sleep(pause)


def _text(value: str | bytes) -> str:
    """A metadata value: grpcio gives text for a key without the ``-bin`` suffix."""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _error_from_rpc(e: grpc.RpcError, target: str, attempts: int) -> BridgeError:
    """Translate a failed call into the bridge's error hierarchy."""
    code = e.code()
    details = e.details() or code.name
    markers = [_text(m.value) for m in e.trailing_metadata() or () if m.key == ERROR_METADATA_KEY]
    from_bridge = bool(markers)
    if code == grpc.StatusCode.INVALID_ARGUMENT:
        return InvalidInput(details)
    if code == grpc.StatusCode.PERMISSION_DENIED:
        return CallerNotAllowed(details)
    if code == grpc.StatusCode.UNAVAILABLE and NotLeader.__name__ in markers:
        return NotLeader(details)
    if code == grpc.StatusCode.UNAVAILABLE and from_bridge:
        return TransientBackendError(details)
    if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
        # grpc's text repeats the address and nests errors; the last one is the useful bit
        # ("No such file or directory", "Connection refused", "Deadline Exceeded").
        cause = details.rsplit("error: ", 1)[-1]
        message = f"{target}: {cause} ({attempts} attempts)"
        if code == grpc.StatusCode.UNAVAILABLE and "failed to connect" in details:
            return BridgeUnreachable(message, details)
        # Connected, sent, and then the bridge died or hung: it may have acted on the call.
        return BridgeNoAnswer(message, details)
    return BridgeError(f"{code.name}: {details}")
