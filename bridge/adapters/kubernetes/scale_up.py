"""A cluster autoscaler's Events about our pods, read into what the verdict decides on."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from bridge.domain.verdict import SCALE_UP_REASONS, ScaleUpEvent


def scale_up_event(item: Mapping[str, Any]) -> ScaleUpEvent | None:
    """An autoscaler Event (API JSON) as the verdict reads it; ``None`` if it is not one."""
    involved = item.get("involvedObject") or {}
    reason = item.get("reason")
    uid = involved.get("uid")
    at = item.get("lastTimestamp") or item.get("eventTime") or item.get("firstTimestamp")
    at = at or (item.get("metadata") or {}).get("creationTimestamp")
    if reason not in SCALE_UP_REASONS or not isinstance(uid, str) or not isinstance(at, str):
        return None
    moment = datetime.fromisoformat(at.replace("Z", "+00:00"))
    return ScaleUpEvent(uid, reason, str(item.get("message") or ""), moment)
