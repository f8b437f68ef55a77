"""``translate``: the Kubernetes client's errors become the bridge's own, by HTTP status."""

from __future__ import annotations

import json

import pytest
import urllib3
from kubernetes.client.exceptions import ApiException

from bridge.adapters.kubernetes.calls import WatchExpired, translate
from bridge.errors import (
    BackendError,
    Conflict,
    Forbidden,
    InvalidInput,
    NoCapacity,
    TransientBackendError,
)


def api_error(status: int | None, message: str | None, reason: str = "Reason") -> ApiException:
    body = None if message is None else json.dumps({"kind": "Status", "message": message})
    return ApiException(status=status, reason=reason, body=body)


QUOTA = (
    'pods "cpu-0" is forbidden: exceeded quota: compute, requested: cpu=2, used: cpu=8, '
    "limited: cpu=8"
)


@pytest.mark.parametrize(
    ("error", "kind", "message"),
    [
        (
            api_error(403, 'pods is forbidden: User "bridge" cannot create resource "pods"'),
            Forbidden,
            'create pod cpu-0: forbidden: pods is forbidden: User "bridge" cannot create '
            'resource "pods"',
        ),
        pytest.param(
            api_error(403, QUOTA),
            NoCapacity,
            f"create pod cpu-0: {QUOTA}",
            # ResourceQuota admission answers 403 Forbidden, so the 403 branch wins today and
            # the node is failed as Forbidden / INTERNAL instead of NoCapacity / NO_CAPACITY.
            id="403-exceeded-quota",
        ),
        (
            api_error(404, 'pods "cpu-0" not found'),
            BackendError,
            'create pod cpu-0: HTTP 404: pods "cpu-0" not found',
        ),
        (
            api_error(409, 'pods "cpu-0" already exists'),
            Conflict,
            'create pod cpu-0: pods "cpu-0" already exists',
        ),
        (
            api_error(410, "too old resource version: 5 (90)"),
            WatchExpired,
            "create pod cpu-0: too old resource version: 5 (90)",
        ),
        (
            api_error(422, 'Pod "cpu-0" is invalid: spec.containers: Required value'),
            InvalidInput,
            'create pod cpu-0: rejected by the API server: Pod "cpu-0" is invalid: '
            "spec.containers: Required value",
        ),
        (
            api_error(400, "bad request"),
            InvalidInput,
            "create pod cpu-0: rejected by the API server: bad request",
        ),
        (
            api_error(429, "too many requests"),
            TransientBackendError,
            "create pod cpu-0: HTTP 429: too many requests",
        ),
        (
            api_error(500, "etcdserver: request timed out"),
            TransientBackendError,
            "create pod cpu-0: HTTP 500: etcdserver: request timed out",
        ),
        (
            api_error(503, None, reason="Service Unavailable"),
            TransientBackendError,
            "create pod cpu-0: HTTP 503: Service Unavailable",
        ),
        (
            ApiException(status=502, reason="Bad Gateway", body="<html>proxy</html>"),
            TransientBackendError,
            "create pod cpu-0: HTTP 502: Bad Gateway",
        ),
        (
            ApiException(reason="no status"),
            TransientBackendError,
            "create pod cpu-0: HTTP 0: no status",
        ),
        (
            urllib3.exceptions.MaxRetryError(None, "/api/v1", reason=ConnectionRefusedError(111)),  # type: ignore[arg-type]
            TransientBackendError,
            "create pod cpu-0: MaxRetryError: ",
        ),
        (
            urllib3.exceptions.ProtocolError("Connection aborted."),
            TransientBackendError,
            "create pod cpu-0: ProtocolError: Connection aborted.",
        ),
        (
            ConnectionRefusedError(111, "Connection refused"),
            TransientBackendError,
            "create pod cpu-0: ConnectionRefusedError: [Errno 111] Connection refused",
        ),
        (
            TimeoutError("timed out"),
            TransientBackendError,
            "create pod cpu-0: TimeoutError: timed out",
        ),
    ],
    ids=lambda v: (
        (str(v.status) if isinstance(v, ApiException) else type(v).__name__)
        if isinstance(v, Exception)
        else None
    ),
)
def testtranslate(error: Exception, kind: type[Exception], message: str) -> None:
    translated = translate(error, "create pod cpu-0")
    assert type(translated) is kind
    assert str(translated).startswith(message)


@pytest.mark.parametrize("status", [403, 409, 410, 422, 429, 500])
def test_translated_errors_stay_in_our_hierarchy(status: int) -> None:
    translated = translate(api_error(status, "m"), "x")
    assert isinstance(translated, BackendError | InvalidInput)
    # Only the transient class is retried by the adapter.
    assert isinstance(translated, TransientBackendError) is (status in (429, 500))
