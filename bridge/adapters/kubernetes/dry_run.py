"""A server-side dry run of a pod create (``POST .../pods?dryRun=All``), for ``doctor``.

The API server takes the request as it would a create: authorization (``create pods``, the same
verb), defaulting, validation, the admission chain (ValidatingAdmissionPolicies such as the
namespace's image allow-list, Pod Security, ResourceQuota, webhooks that declare no side
effects) and, last, the check that no object of that name exists; only the write to etcd is
skipped. Its refusals become ``bridge.errors`` as a real create's do (``calls.translate``):
a quota as :class:`~bridge.errors.NoCapacity`, admission and RBAC as
:class:`~bridge.errors.Forbidden`, an invalid pod as :class:`~bridge.errors.InvalidInput`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final
from urllib.parse import quote

from bridge.adapters.kubernetes.gateway import PodGateway
from bridge.adapters.kubernetes.json_bytes import send_json
from bridge.errors import Conflict

#: Every stage of the request runs; nothing is stored.
DRY_RUN: Final = "dryRun=All"


def dry_run_create_pod(pods: PodGateway, manifest: Mapping[str, Any]) -> bool:
    """Ask the API server whether it would create ``manifest`` in the gateway's namespace:
    True when it would, False when a pod of that name exists (the storage's 409, which comes
    after admission and quota let the pod through).

    Raises the :mod:`bridge.errors` of the refusal; transient failures are retried like every
    call of the adapter.
    """
    name = str(manifest["metadata"]["name"])
    body = json.dumps(manifest, separators=(",", ":")).encode()
    path = f"/api/v1/namespaces/{quote(pods.namespace, safe='')}/pods?{DRY_RUN}"
    # Through the gateway's own call path: the same credentials (a 401 names the token's file),
    # connection pool, request timeout, retries and counters as its creates. It has no public
    # accessor for them; this module is part of the same adapter.
    api_client = pods._api.api_client
    timeout_s = pods._timeout
    try:
        pods._call(
            f"dry-run create pod {name}",
            lambda: send_json(api_client, "POST", path, body, timeout_s),
        )
    except Conflict:
        return False
    return True
