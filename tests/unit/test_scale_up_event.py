"""A cluster autoscaler's Events, read for the verdict: only those its component wrote count
(issue 31 item 5: an Event of the same reason from anyone else failed a node on its word)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from bridge.adapters.kubernetes.scale_up import scale_up_event
from bridge.domain.verdict import ScaleUpEvent

AT = "2026-12-05T12:00:00Z"


def event(**fields: Any) -> dict[str, Any]:
    """A core/v1 Event on pod uid ``u1`` as cluster-autoscaler writes it, with ``fields`` over."""
    return {
        "involvedObject": {"kind": "Pod", "uid": "u1"},
        "reason": "NotTriggerScaleUp",
        "message": "pod didn't trigger scale-up",
        "source": {"component": "cluster-autoscaler"},
        "lastTimestamp": AT,
    } | fields


SEEN = ScaleUpEvent(
    "u1", "NotTriggerScaleUp", "pod didn't trigger scale-up", datetime(2026, 12, 5, 12, tzinfo=UTC)
)


@pytest.mark.parametrize(
    ("item", "expected"),
    [
        (event(), SEEN),
        # events.k8s.io's field, as a newer recorder writes it.
        (event(source={}, reportingComponent="cluster-autoscaler"), SEEN),
        (event(source={"component": "kubectl"}), None),
        (event(source={"component": "default-scheduler"}), None),
        (event(source=None), None),
        (event(reason="Scheduled"), None),
        (event(involvedObject={"kind": "Pod"}), None),
    ],
    ids=[
        "cluster-autoscaler",
        "reporting-component",
        "forged-by-a-user",
        "another-component",
        "no-source",
        "another-reason",
        "no-uid",
    ],
)
def test_scale_up_events_count_only_from_the_autoscaler(
    item: dict[str, Any], expected: ScaleUpEvent | None
) -> None:
    assert scale_up_event(item) == expected
