"""A follower's way to the leader (issue 32 item 2): the hooks run on whichever slurmctld is
primary and call the bridge on that host, which may be the follower. It forwards each mutating
call, unchanged (the caller's request id included), to the leader's mutual-TLS listener, whose
address the leader publishes on the Lease, and answers with the leader's answer.

Why forwarding, not leadership following the primary slurmctld (``SlurmctldPrimaryOnProg``):
slurmctld's failover and the Lease's are separate events, and making one follow the other
leaves a window in which the primary's bridge does not lead yet (or the old leader still
renews); while forwarding, any bridge serves the hooks as soon as some bridge leads, and
nothing but the Lease decides who that is. The hooks stay on their local Unix socket and hold
no TLS material.

A forwarded call carries :data:`FORWARDED_BY`; a bridge that gets one and does not lead (the
Lease moved meanwhile) answers UNAVAILABLE instead of forwarding again, and the hook retries
within its budget. The leader checks the follower's client certificate against its
``bridge.tls_client_names`` like any TCP caller's.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import grpc

from bridge.rpc._proto.slurm_k8s_bridge.v1 import bridge_pb2_grpc as pb_grpc
from bridge.rpc.tls import TlsFiles, read_tls_files

#: gRPC metadata a forwarded call carries: the forwarding bridge's leader identity.
FORWARDED_BY = "skb-forwarded-by"


class LeaderForwarder:
    """Calls the leader with this bridge's own certificate; one channel per leader address."""

    def __init__(self, tls: TlsFiles, identity: str) -> None:
        cert, key, ca = read_tls_files(tls)
        # The bridges' certificates are signed by the CA each trusts for its clients.
        self._credentials = grpc.ssl_channel_credentials(
            root_certificates=ca, private_key=key, certificate_chain=cert
        )
        self.identity = identity
        self._lock = threading.Lock()
        self._channels: dict[str, tuple[grpc.Channel, Any]] = {}

    def call(self, address: str, rpc: str, request: Any, timeout_s: float) -> Any:
        """``rpc`` (a Bridge method's name) on the leader at ``address``; raises grpc.RpcError
        as the leader (or the connection to it) ended the call."""
        method: Callable[..., Any] = getattr(self._stub(address), rpc)
        return method(request, timeout=timeout_s, metadata=((FORWARDED_BY, self.identity),))

    def _stub(self, address: str) -> Any:
        with self._lock:
            if address not in self._channels:
                # One leader at a time: a channel to an earlier leader's address is closed.
                for channel, _stub in self._channels.values():
                    channel.close()
                channel = grpc.secure_channel(address, self._credentials)
                # The generated grpc module has no type hints.
                stub = pb_grpc.BridgeStub(channel)  # type: ignore[no-untyped-call]
                self._channels = {address: (channel, stub)}
            return self._channels[address][1]

    def close(self) -> None:
        with self._lock:
            for channel, _stub in self._channels.values():
                channel.close()
            self._channels = {}


def was_forwarded(context: grpc.ServicerContext) -> str | None:
    """The forwarding bridge's identity when this call came from a follower, else None."""
    for key, value in context.invocation_metadata() or ():
        if key == FORWARDED_BY:
            return value if isinstance(value, str) else value.decode("utf-8", "replace")
    return None
