"""``RpcMetricsInterceptor``: counts the bridge's RPCs by method and outcome, around the servicer.

An interceptor, not code in the servicer: the servicer stays a translation layer, and a call the
servicer ends with ``context.abort`` is counted by the status code it ended with.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import grpc

from bridge.api.servicer import SERVICE_NAME
from bridge.metrics import BridgeMetrics
from bridge.rpc._proto.slurm_k8s_bridge.v1 import bridge_pb2 as pb

_OUTCOME_PREFIX = "OUTCOME_"


def outcomes(response: object) -> Counter[str]:
    """The per-node outcomes of a response (``OK``, ``ACCEPTED``, ``FAILED``, ``REJECTED``);
    one ``OK`` for a response without results (ListNodes)."""
    results = getattr(response, "results", None)
    if not results:
        return Counter({"OK": 1})
    return Counter(pb.Outcome.Name(r.outcome).removeprefix(_OUTCOME_PREFIX) for r in results)


class RpcMetricsInterceptor(grpc.ServerInterceptor):  # type: ignore[type-arg]
    """Feeds ``rpc_calls_total`` from every unary call of the Bridge service (not health)."""

    def __init__(self, metrics: BridgeMetrics) -> None:
        self._metrics = metrics

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler | None],  # type: ignore[type-arg]
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:  # type: ignore[type-arg]
        handler = continuation(handler_call_details)
        service, _, rpc = str(handler_call_details.method).lstrip("/").partition("/")
        if handler is None or service != SERVICE_NAME or handler.unary_unary is None:
            return handler
        inner = handler.unary_unary
        metrics = self._metrics

        def counted(request: Any, context: grpc.ServicerContext) -> Any:
            try:
                response = inner(request, context)
            except Exception:
                # context.abort raises after setting the code; anything else is grpc's UNKNOWN.
                code = context.code() if hasattr(context, "code") else None
                metrics.rpc_call(rpc, code.name if code is not None else "UNKNOWN")
                raise
            for outcome, count in outcomes(response).items():
                metrics.rpc_call(rpc, outcome, count)
            return response

        return grpc.unary_unary_rpc_method_handler(
            counted,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )
