"""Kubernetes' view of a PodGroup (gang scheduling, ``bridge.domain.gangs``), reduced to what
the bridge decides on: whose it is, how old, and whether the scheduler said it cannot place the
gang whole.

``pod_group_view`` reads a PodGroup manifest as plain JSON (what the API server sends), as
``bridge.domain.pods`` reads a pod.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from bridge.domain.pods import (
    LABEL_CLUSTER,
    LABEL_MANAGED_BY,
    LABEL_POOL,
    MANAGED_BY,
    UNSCHEDULABLE,
    parse_time,
)

#: The job a group was made for, for ``kubectl get podgroups`` and the logs.
ANNOTATION_JOB_ID = "slurm-k8s-bridge.io/job-id"
#: The condition the scheduler sets on a PodGroup after its first try to place it.
CONDITION_INITIALLY_SCHEDULED = "PodGroupInitiallyScheduled"


@dataclass(frozen=True)
class GangUnschedulable:
    """The scheduler's word that a gang cannot be placed whole, and since when."""

    message: str
    since: datetime


@dataclass(frozen=True)
class PodGroupView:
    """One PodGroup, reduced to what the bridge decides on."""

    name: str
    created_at: datetime
    #: ``PodGroupInitiallyScheduled`` False with reason ``Unschedulable``; None otherwise (not
    #: tried yet, placed, or a ``SchedulerError``, which may pass: the pods' own clocks decide).
    unschedulable: GangUnschedulable | None = None
    #: Its labels, as the bridge puts them on the groups it makes.
    managed_by: str = ""
    cluster: str = ""
    pool: str = ""
    #: Its :data:`ANNOTATION_JOB_ID` ("" when none).
    job_id: str = ""
    #: ``spec.schedulingPolicy.gang.minCount``; None when it has none.
    min_count: int | None = None

    @property
    def is_ours(self) -> bool:
        return self.managed_by == MANAGED_BY


def pod_group_view(manifest: Mapping[str, Any]) -> PodGroupView:
    """Build a :class:`PodGroupView` from a PodGroup manifest (API JSON, camelCase keys)."""
    metadata = manifest.get("metadata") or {}
    labels = metadata.get("labels") or {}
    annotations = metadata.get("annotations") or {}
    created_at = parse_time(metadata["creationTimestamp"])
    gang = ((manifest.get("spec") or {}).get("schedulingPolicy") or {}).get("gang") or {}
    min_count = gang.get("minCount")
    return PodGroupView(
        name=str(metadata["name"]),
        created_at=created_at,
        unschedulable=_unschedulable(manifest.get("status") or {}, created_at),
        managed_by=str(labels.get(LABEL_MANAGED_BY) or ""),
        cluster=str(labels.get(LABEL_CLUSTER) or ""),
        pool=str(labels.get(LABEL_POOL) or ""),
        job_id=str(annotations.get(ANNOTATION_JOB_ID) or ""),
        min_count=_count(min_count),
    )


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _unschedulable(status: Mapping[str, Any], created_at: datetime) -> GangUnschedulable | None:
    for condition in status.get("conditions") or []:
        if not isinstance(condition, Mapping):
            continue
        if condition.get("type") != CONDITION_INITIALLY_SCHEDULED:
            continue
        if condition.get("status") != "False" or condition.get("reason") != UNSCHEDULABLE:
            return None
        since = condition.get("lastTransitionTime")
        return GangUnschedulable(
            str(condition.get("message") or "the scheduler cannot place the gang whole"),
            parse_time(since) if isinstance(since, str) else created_at,
        )
    return None
