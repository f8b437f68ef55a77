"""What a Kubernetes drain involves beyond our pods: which nodes are cordoned, and the pools'
PodDisruptionBudgets that keep ``kubectl drain`` from evicting a busy slurmd pod."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from bridge.adapters.call_counters import CallCounters
from bridge.adapters.kubernetes.calls import call
from bridge.adapters.kubernetes.json_bytes import MERGE_PATCH, send_json
from bridge.errors import Conflict

log = logging.getLogger(__name__)

#: Only the cordoned nodes come back, so a cluster of thousands of nodes costs a few bytes.
CORDONED_NODES_PATH = "/api/v1/nodes?fieldSelector=" + quote("spec.unschedulable=true", safe="")


def list_cordoned_nodes(
    api_client: Any, timeout_s: float, counters: CallCounters | None = None
) -> frozenset[str]:
    """The names of the Kubernetes nodes marked unschedulable (``kubectl cordon``, or a drain).

    Raises :class:`~bridge.errors.Forbidden` when the credentials may not list nodes (a
    cluster-scoped right)."""
    data = call(
        "list cordoned nodes",
        lambda: send_json(api_client, "GET", CORDONED_NODES_PATH, b"", timeout_s),
        counters,
    )
    items = json.loads(data).get("items") or []
    return frozenset(str((item.get("metadata") or {}).get("name") or "") for item in items) - {""}


def ensure_disruption_budget(
    api_client: Any,
    manifest: Mapping[str, Any],
    timeout_s: float,
    counters: CallCounters | None = None,
) -> bool:
    """Create the PodDisruptionBudget, or patch the one of that name to the manifest's labels and
    spec; True when it was created."""
    metadata = manifest["metadata"]
    name, namespace = str(metadata["name"]), str(metadata["namespace"])
    collection = f"/apis/policy/v1/namespaces/{quote(namespace, safe='')}/poddisruptionbudgets"
    body = json.dumps(manifest, separators=(",", ":")).encode()
    try:
        call(
            f"create poddisruptionbudget {name}",
            lambda: send_json(api_client, "POST", collection, body, timeout_s),
            counters,
        )
    except Conflict:
        patch = {"metadata": {"labels": metadata.get("labels") or {}}, "spec": manifest["spec"]}
        patch_body = json.dumps(patch, separators=(",", ":")).encode()
        call(
            f"patch poddisruptionbudget {name}",
            lambda: send_json(
                api_client,
                "PATCH",
                f"{collection}/{quote(name, safe='')}",
                patch_body,
                timeout_s,
                content_type=MERGE_PATCH,
            ),
            counters,
        )
        return False
    return True
