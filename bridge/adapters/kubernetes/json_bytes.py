"""Send a body that is already JSON bytes, through the client's connection pool and credentials.

The generated methods (``create_namespaced_pod``) validate a dict into a ``V1Pod`` model, turn it
back into a dict, serialise it, and (unless told not to) parse the 201 answer into another model:
about 1.4 ms of GIL-bound client CPU per pod, which capped creates well below the API server's
pace. ``ApiClient.call_api`` cannot take bytes either (its REST layer ``json.dumps`` every JSON
body), so only the URL and the auth headers come from the client here; the request goes out on
its urllib3 pool as it is.
"""

from __future__ import annotations

from typing import Any

import urllib3
from kubernetes.client.exceptions import ApiException

JSON_HEADERS = {"Accept": "application/json", "Content-Type": "application/json"}
#: Content types of the two patches the bridge sends (labels; a pod's status conditions, which
#: a strategic merge merges by ``type`` instead of replacing the list).
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"


def send_json(
    api_client: Any,
    method: str,
    path: str,
    body: bytes,
    timeout_s: float,
    *,
    content_type: str = "application/json",
) -> bytes:
    """``method`` (POST, DELETE, PATCH) ``body`` to ``path`` (``/api/v1/namespaces/x/pods``);
    the answer's bytes.

    Raises what the client's own calls raise: :class:`ApiException` for a status outside 2xx
    (with the response headers, so ``Retry-After`` is seen) and urllib3 or OS errors for the
    connection.
    """
    method, url, headers, _, _ = api_client.param_serialize(
        method=method,
        resource_path=path,
        header_params={**JSON_HEADERS, "Content-Type": content_type},
        auth_settings=["BearerToken"],
    )
    response = api_client.rest_client.pool_manager.request(
        method,
        url,
        body=body,
        headers=headers,
        timeout=urllib3.Timeout(total=timeout_s),
        preload_content=False,
        # urllib3 would otherwise retry a 429/503 itself, sleeping its Retry-After up to three
        # times inside one attempt and past every budget: retries are calls.py's, and only there.
        retries=False,
    )
    try:
        data: bytes = response.read()
    finally:
        response.release_conn()
    if not 200 <= response.status <= 299:
        error = ApiException(
            status=response.status,
            reason=response.reason,
            body=data.decode("utf-8", errors="replace"),
        )
        error.headers = response.headers
        raise error
    return data
