"""The leader election's Lease (``coordination.k8s.io/v1``) in the bridge's namespace: read,
create, and replace at the resourceVersion read (optimistic concurrency: of two bridges writing
the same version, the API server takes one and answers 409 Conflict to the other).

One attempt per call: the elector's loop is the retry, and a renewal that waits out a backoff
would only pass its deadline."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from kubernetes.client.exceptions import ApiException

from bridge.adapters.kubernetes.calls import TRANSPORT_ERRORS, translate
from bridge.adapters.kubernetes.json_bytes import send_json
from bridge.domain.leadership import LeaseRecord

_GROUP_PATH = "/apis/coordination.k8s.io/v1"
#: The holder's address for forwarded calls: the Lease's spec has no field for it.
ADDRESS_ANNOTATION = "slurm-k8s-bridge.io/leader-address"


class LeaseGateway:
    """One named Lease."""

    def __init__(self, api_client: Any, namespace: str, name: str, timeout_s: float) -> None:
        self._api_client = api_client
        self.namespace = namespace
        self.name = name
        self._timeout_s = timeout_s
        self._collection = f"{_GROUP_PATH}/namespaces/{quote(namespace, safe='')}/leases"

    def read(self) -> LeaseRecord | None:
        """The Lease, or None when there is none."""
        try:
            return _record(self._send("GET", f"{self._collection}/{quote(self.name, safe='')}"))
        except ApiException as e:
            if e.status == 404:
                return None
            raise translate(e, f"read lease {self.name}") from e
        except TRANSPORT_ERRORS as e:
            raise translate(e, f"read lease {self.name}") from e

    def create(self, record: LeaseRecord) -> LeaseRecord:
        return self._write("POST", self._collection, record, f"create lease {self.name}")

    def replace(self, record: LeaseRecord) -> LeaseRecord:
        """Write ``record`` over the Lease at ``record.version``; Conflict when it changed."""
        path = f"{self._collection}/{quote(self.name, safe='')}"
        return self._write("PUT", path, record, f"update lease {self.name}")

    def _write(self, method: str, path: str, record: LeaseRecord, what: str) -> LeaseRecord:
        body = json.dumps(_manifest(self.name, record), separators=(",", ":")).encode()
        try:
            return _record(self._send(method, path, body))
        except TRANSPORT_ERRORS as e:
            raise translate(e, what) from e

    def _send(self, method: str, path: str, body: bytes = b"") -> dict[str, Any]:
        answer = send_json(self._api_client, method, path, body, self._timeout_s)
        loaded: dict[str, Any] = json.loads(answer)
        return loaded


def _manifest(name: str, record: LeaseRecord) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name}
    if record.version:
        metadata["resourceVersion"] = record.version
    # A replace writes the whole object: without an address the annotation goes.
    if record.address:
        metadata["annotations"] = {ADDRESS_ANNOTATION: record.address}
    spec: dict[str, Any] = {
        "leaseDurationSeconds": record.duration_s,
        "leaseTransitions": record.transitions,
    }
    # Released: no holder (the API server drops an empty string's field anyway).
    if record.holder:
        spec["holderIdentity"] = record.holder
    for key, moment in (("acquireTime", record.acquired), ("renewTime", record.renewed)):
        if moment is not None:
            spec[key] = _micro_time(moment)
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": metadata,
        "spec": spec,
    }


def _micro_time(moment: datetime) -> str:
    """Kubernetes' MicroTime: RFC 3339 in UTC with microseconds."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse_time(text: object) -> datetime | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def _record(lease: dict[str, Any]) -> LeaseRecord:
    spec = lease.get("spec") or {}
    metadata = lease.get("metadata") or {}
    duration = spec.get("leaseDurationSeconds")
    transitions = spec.get("leaseTransitions")
    return LeaseRecord(
        holder=str(spec.get("holderIdentity") or ""),
        duration_s=duration if isinstance(duration, int) and duration > 0 else 1,
        acquired=_parse_time(spec.get("acquireTime")),
        renewed=_parse_time(spec.get("renewTime")),
        transitions=transitions if isinstance(transitions, int) else 0,
        version=str(metadata.get("resourceVersion") or ""),
        address=str((metadata.get("annotations") or {}).get(ADDRESS_ANNOTATION) or ""),
    )
