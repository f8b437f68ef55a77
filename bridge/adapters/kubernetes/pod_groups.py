"""The PodGroup API (``scheduling.k8s.io``, gang scheduling): which version the API server
serves, and the bridge's groups: create, list, lower a gang's ``minCount``, delete.

Requests go out as JSON bytes on the client's pool (:mod:`.json_bytes`): the official client has
no model of an API this young, and needs none. Which version to use is the domain's choice
(:func:`~bridge.domain.gang_mode.choose_pod_group_api`); this module only asks the discovery
endpoints.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

import orjson

from bridge.adapters.call_counters import CallCounters
from bridge.adapters.kubernetes.calls import call, is_not_found
from bridge.adapters.kubernetes.json_bytes import MERGE_PATCH, send_json
from bridge.domain.gang_mode import (
    POD_GROUP_API_GROUP,
    POD_GROUP_RESOURCE,
    POD_GROUP_VERSIONS,
    choose_pod_group_api,
)
from bridge.domain.pod_groups import PodGroupView, pod_group_view
from bridge.errors import BackendError, Conflict

#: Groups per page of a list (there are as many as multi-node jobs resuming: few).
LIST_PAGE_SIZE = 500
_DELETE_OPTIONS = b'{"apiVersion":"v1","kind":"DeleteOptions"}'


def discover_pod_group_api(
    api_client: Any, timeout_s: float, counters: CallCounters | None = None
) -> str | None:
    """``scheduling.k8s.io/<version>`` of the PodGroup API the server serves (the preferred
    version listing ``podgroups``), or None when it serves none: the group is absent, or none
    of its versions has the resource (its v1 serves PriorityClasses everywhere)."""
    group = _get_json(api_client, f"/apis/{POD_GROUP_API_GROUP}", timeout_s, counters)
    if group is None:
        return None
    served = {str(v.get("version") or "") for v in group.get("versions") or []}
    resources: dict[str, list[str]] = {}
    for version in POD_GROUP_VERSIONS:
        if version not in served:
            continue
        listed = _get_json(
            api_client, f"/apis/{POD_GROUP_API_GROUP}/{version}", timeout_s, counters
        )
        resources[version] = [str(r.get("name")) for r in (listed or {}).get("resources") or []]
        if POD_GROUP_RESOURCE in resources[version]:
            break  # the preferred version that has them: the others need not be asked
    return choose_pod_group_api(resources)


def _get_json(
    api_client: Any, path: str, timeout_s: float, counters: CallCounters | None
) -> dict[str, Any] | None:
    """The JSON at ``path``; None on 404."""
    try:
        data = call(
            f"discover {path}",
            lambda: send_json(api_client, "GET", path, b"", timeout_s),
            counters,
        )
    except BackendError as e:
        if is_not_found(e):
            return None
        raise
    doc: dict[str, Any] = orjson.loads(data)
    return doc


@dataclass(frozen=True)
class PodGroupApi:
    """The PodGroups of one namespace at one version of the API (``scheduling.k8s.io/v1beta1``),
    through the client's pool and credentials."""

    api_client: Any
    api_version: str
    namespace: str
    timeout_s: float
    counters: CallCounters | None = None

    @property
    def _collection(self) -> str:
        namespace = quote(self.namespace, safe="")
        return f"/apis/{self.api_version}/namespaces/{namespace}/{POD_GROUP_RESOURCE}"

    def _send(self, what: str, method: str, path: str, body: bytes, **kwargs: Any) -> bytes:
        return call(
            what,
            functools.partial(
                send_json, self.api_client, method, path, body, self.timeout_s, **kwargs
            ),
            self.counters,
        )

    def create(self, manifest: Mapping[str, Any]) -> bool:
        """Create the PodGroup (its manifest says the version); False when one of that name
        exists already (a retried resume call: the name comes from its request id)."""
        name = str(manifest["metadata"]["name"])
        try:
            self._send(f"create podgroup {name}", "POST", self._collection, orjson.dumps(manifest))
        except Conflict:
            return False
        return True

    def list(self, selector: str) -> list[PodGroupView]:
        """The PodGroups that carry the labels of ``selector``, page by page."""
        groups: list[PodGroupView] = []
        token = ""
        while True:
            query = {"labelSelector": selector, "limit": str(LIST_PAGE_SIZE)}
            if token:
                query["continue"] = token
            data = self._send(
                "list podgroups", "GET", f"{self._collection}?{urlencode(query)}", b""
            )
            body = orjson.loads(data)
            groups.extend(pod_group_view(item) for item in body.get("items") or [])
            token = str((body.get("metadata") or {}).get("continue") or "")
            if not token:
                return groups

    def set_min_count(self, name: str, min_count: int) -> None:
        """Set the gang's ``minCount``: a merge patch of that one field."""
        patch = {"spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}}}
        self._send(
            f"set minCount of podgroup {name}",
            "PATCH",
            f"{self._collection}/{quote(name, safe='')}",
            json.dumps(patch, separators=(",", ":")).encode(),
            content_type=MERGE_PATCH,
        )

    def delete(self, name: str) -> bool:
        """Delete the PodGroup; False when it was gone already."""
        path = f"{self._collection}/{quote(name, safe='')}"
        try:
            self._send(f"delete podgroup {name}", "DELETE", path, _DELETE_OPTIONS)
        except BackendError as e:
            if is_not_found(e):
                return False
            raise
        return True
