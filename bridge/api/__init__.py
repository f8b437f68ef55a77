"""The gRPC edge: :mod:`.servicer` maps RPCs onto the use cases, :mod:`.metrics_interceptor`
counts them, :mod:`.server` serves it.

The names below are what the composition root (``bridge.runtime.serve``), the benchmarks and
the tests use.
"""

from bridge.api.forwarding import LeaderForwarder
from bridge.api.server import MAX_MESSAGE_BYTES, BridgeServer, TlsServerFiles, build_server
from bridge.api.servicer import SERVICE_NAME, BridgeServicer, BridgeUseCases, status_code_for

__all__ = [
    "MAX_MESSAGE_BYTES",
    "SERVICE_NAME",
    "BridgeServer",
    "BridgeServicer",
    "BridgeUseCases",
    "LeaderForwarder",
    "TlsServerFiles",
    "build_server",
    "status_code_for",
]
