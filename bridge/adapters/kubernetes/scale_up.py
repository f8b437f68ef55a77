"""A cluster autoscaler's Events about our pods, read into what the verdict decides on."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from bridge.domain.verdict import SCALE_UP_REASONS, ScaleUpEvent

#: The components whose scale-up Events count. An Event with these reasons from anyone else (a
#: pod's own controller, a user with `create events`) could fail a node on its word alone.
#: Kubernetes records the writer's claim here, not its identity: RBAC on Events in the
#: bridge's namespace is what keeps a forger out (docs/security.md).
AUTOSCALER_COMPONENTS = frozenset({"cluster-autoscaler"})


def scale_up_event(item: Mapping[str, Any]) -> ScaleUpEvent | None:
    """An autoscaler Event (API JSON) as the verdict reads it; ``None`` if it is not one, or
    not written by a component of :data:`AUTOSCALER_COMPONENTS` (core/v1's
    ``source.component``, or events.k8s.io's ``reportingComponent``)."""
    source = (item.get("source") or {}).get("component") or item.get("reportingComponent")
    if source not in AUTOSCALER_COMPONENTS:
        return None
    involved = item.get("involvedObject") or {}
    reason = item.get("reason")
    uid = involved.get("uid")
    at = item.get("lastTimestamp") or item.get("eventTime") or item.get("firstTimestamp")
    at = at or (item.get("metadata") or {}).get("creationTimestamp")
    if reason not in SCALE_UP_REASONS or not isinstance(uid, str) or not isinstance(at, str):
        return None
    moment = datetime.fromisoformat(at.replace("Z", "+00:00"))
    return ScaleUpEvent(uid, reason, str(item.get("message") or ""), moment)
