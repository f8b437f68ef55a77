"""Send a body that is already JSON bytes, through the client's connection pool and credentials.

The generated methods (``create_namespaced_pod``) validate a dict into a ``V1Pod`` model, turn it
back into a dict, serialise it, and (unless told not to) parse the 201 answer into another model:
about 1.4 ms of GIL-bound client CPU per pod, which capped creates well below the API server's
pace. ``ApiClient.call_api`` cannot take bytes either (its REST layer ``json.dumps`` every JSON
body), so only the URL and the auth headers come from the client here; the request goes out on
its urllib3 pool as it is.

The route to that pool is looked up once per client (:func:`_route`), not per request: the
client's ``param_serialize`` and the ``PoolManager``'s URL parse and pool lookup were a quarter
of a create thread's CPU in a 1,000-pod resume (py-spy, issue 33). Only the token is asked for
each request (the credentials re-read a rotated one).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import urllib3
from kubernetes.client.exceptions import ApiException
from urllib3.connectionpool import HTTPConnectionPool

JSON_HEADERS = {"Accept": "application/json", "Content-Type": "application/json"}
#: Content types of the two patches the bridge sends (labels; a pod's status conditions, which
#: a strategic merge merges by ``type`` instead of replacing the list).
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"


@dataclass(frozen=True)
class _Route:
    """Where one client's requests go: the connection pool its ``PoolManager`` keeps for the
    API server, the server URL's path (a proxy in front may serve the API under one), and the
    headers every request carries (the client's own, its User-Agent among them)."""

    pool: HTTPConnectionPool
    prefix: str
    headers: Mapping[str, str]


_routes: weakref.WeakKeyDictionary[Any, _Route] = weakref.WeakKeyDictionary()
_routes_lock = threading.Lock()


def _route(api_client: Any) -> _Route | None:
    """The client's route, made at its first request; None behind an HTTP(S) or SOCKS proxy
    (a ``ProxyManager`` sends absolute URLs: those requests take the client's own way)."""
    route = _routes.get(api_client)
    # A pool the manager closed (it keeps ten hosts; the bridge talks to one) is looked up again.
    if route is not None and route.pool.pool is not None:
        return route
    manager = api_client.rest_client.pool_manager
    if type(manager) is not urllib3.PoolManager:
        return None
    host = api_client.configuration.host
    route = _Route(
        pool=manager.connection_from_url(host),
        prefix=urlsplit(host).path.rstrip("/"),
        headers={**api_client.default_headers, **JSON_HEADERS},
    )
    with _routes_lock:
        _routes[api_client] = route
    return route


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
    route = _route(api_client)
    if route is None:
        return _send_through_client(
            api_client, method, path, body, timeout_s, content_type=content_type
        )
    headers = {**route.headers, "Content-Type": content_type}
    # Asks the credentials' hook (a rotated token is re-read) as param_serialize would.
    bearer = api_client.configuration.auth_settings().get("BearerToken")
    if bearer and bearer.get("value"):
        headers[bearer["key"]] = bearer["value"]
    response = route.pool.urlopen(
        method,
        route.prefix + path,
        body=body,
        headers=headers,
        timeout=urllib3.Timeout(total=timeout_s),
        preload_content=False,
        # urllib3 would otherwise retry a 429/503 itself, sleeping its Retry-After up to three
        # times inside one attempt and past every budget: retries are calls.py's, and only there.
        retries=False,
        redirect=False,
    )
    return _answer(response)


def _send_through_client(
    api_client: Any, method: str, path: str, body: bytes, timeout_s: float, *, content_type: str
) -> bytes:
    """:func:`send_json` the client's own way: its URL and headers, its ``PoolManager``."""
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
        retries=False,  # as in send_json
    )
    return _answer(response)


def _answer(response: Any) -> bytes:
    """The response's bytes, its connection back in the pool; :class:`ApiException` for a
    status outside 2xx."""
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
