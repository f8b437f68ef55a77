"""Job-atomic provisioning: a multi-node job's pods in one Kubernetes PodGroup, bound together or
not at all (gang scheduling).

Without it the scheduler places a job's pods one by one: on a full cluster some bind and hold
their CPUs while the rest wait, and the job runs on none of them (the job-aware failure then
releases the lot, later). A PodGroup with ``spec.schedulingPolicy.gang.minCount: N`` makes the
scheduler bind all N pods that name it (``spec.schedulingGroup.podGroupName``) or none; a gang
it cannot place holds nothing and says so on the group (``PodGroupInitiallyScheduled`` False,
reason ``Unschedulable``), which the verdict fails at once (``bridge.domain.verdict``).

Which nodes form a gang comes from the resume file (``bridge.domain.resume_file``), so only a
resume call makes gangs: for each job, in Slurm's order, the nodes of it that the call resumes,
per pool. A node belongs to one group (the field is immutable): the first job's gang claims it.
A (job, pool) with fewer than :data:`MIN_GANG_SIZE` nodes gets no group (a gang of one gates
nothing), and neither do nodes resumed for no job (``scontrol power up``) nor the pods the
reconciler creates (it has no resume file: those are placed one by one, as before).

A group's name is unique per resume call (a requeued job is resumed again, with the same job
id, while its old group may still exist): ``skb-job-<id>-<pool>-<suffix>``, the suffix a hash
of the call's request id, so a retried call (same request id) finds its group made already.
Groups have no owner; the reconcile plan deletes those no pod names any more
(:func:`stale_pod_groups`), so a bridge restart leaks none.

Whether it is on (the setting, and the API the API server serves) is
:mod:`bridge.domain.gang_mode`'s. A purely computational module, like the rest of the domain:
the PodGroups arrive as plain values.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from bridge.domain.hostlist import compress
from bridge.domain.pod_groups import ANNOTATION_JOB_ID, PodGroupView
from bridge.domain.pod_rendering import PodSettings
from bridge.domain.pods import LABEL_CLUSTER, LABEL_MANAGED_BY, LABEL_POOL, MANAGED_BY, PodView
from bridge.domain.resume_file import ResumeJob

#: The Slurm nodes of the gang, as a hostlist (the pods name the group, not the other way round).
ANNOTATION_NODES = "slurm-k8s-bridge.io/nodes"
NAME_PREFIX = "skb-"
#: Hex digits of the request id's hash in a group's name: enough to tell one job's resumes apart.
SUFFIX_LENGTH = 6
#: The smallest gang worth a group: one pod is placed alone anyway.
MIN_GANG_SIZE = 2
#: How old a group no pod names must be before it is deleted: the resume that made it creates
#: its pods right after it, and the watch shows them a moment later.
STALE_POD_GROUP_AGE = timedelta(seconds=60)


@dataclass(frozen=True)
class Gang:
    """The nodes of one job in one pool that a resume call creates: bound together or none."""

    name: str
    pool: str
    job_id: int
    nodes: tuple[str, ...]


def gang_suffix(request_id: str) -> str:
    """The part of a group's name that tells one resume call from another."""
    return hashlib.sha256(request_id.encode()).hexdigest()[:SUFFIX_LENGTH]


def gang_name(job_id: int, pool: str, suffix: str) -> str:
    """A DNS subdomain (a pool's name is a DNS label; at most 89 characters in all)."""
    return f"{NAME_PREFIX}job-{job_id}-{pool}-{suffix}"


def job_gangs(
    jobs: Iterable[ResumeJob], pool_of_node: Mapping[str, str], suffix: str
) -> list[Gang]:
    """The gangs of one resume call: for each job of the resume file, in Slurm's order, its
    nodes that the call resumes (``pool_of_node``: node → pool, for those nodes only), per pool.

    A node an earlier job's gang claimed is not claimed again (a pod joins one group); a job
    listed twice is one job; a (job, pool) left with fewer than :data:`MIN_GANG_SIZE` nodes gets
    no gang. ``suffix``: :func:`gang_suffix` of the call's request id.
    """
    nodes_of_job: dict[int, dict[str, None]] = {}
    for job in jobs:
        nodes_of_job.setdefault(job.job_id, {}).update(dict.fromkeys(job.nodes))
    claimed: set[str] = set()
    gangs: list[Gang] = []
    for job_id, nodes in nodes_of_job.items():
        by_pool: dict[str, list[str]] = {}
        for node in nodes:
            pool = pool_of_node.get(node)
            if pool is not None and node not in claimed:
                by_pool.setdefault(pool, []).append(node)
        for pool, members in by_pool.items():
            if len(members) < MIN_GANG_SIZE:
                continue
            claimed.update(members)
            gangs.append(Gang(gang_name(job_id, pool, suffix), pool, job_id, tuple(members)))
    return gangs


def gang_members(gangs: Iterable[Gang]) -> dict[str, str]:
    """Node → the name of its gang's group (what ``render_pods`` takes as ``pod_groups``)."""
    return {node: gang.name for gang in gangs for node in gang.nodes}


def render_pod_group(gang: Gang, api_version: str, settings: PodSettings) -> dict[str, Any]:
    """The PodGroup manifest of ``gang``, labelled as the bridge's pods are (so it is listed,
    and collected, by the same selector)."""
    return {
        "apiVersion": api_version,
        "kind": "PodGroup",
        "metadata": {
            "name": gang.name,
            "namespace": settings.namespace,
            "labels": {
                LABEL_MANAGED_BY: MANAGED_BY,
                LABEL_CLUSTER: settings.cluster_name,
                LABEL_POOL: gang.pool,
            },
            "annotations": {
                ANNOTATION_JOB_ID: str(gang.job_id),
                ANNOTATION_NODES: compress(gang.nodes),
            },
        },
        "spec": {"schedulingPolicy": {"gang": {"minCount": len(gang.nodes)}}},
    }


def stale_pod_groups(
    groups: Iterable[PodGroupView],
    pods: Iterable[PodView],
    now: datetime,
    min_age: timedelta = STALE_POD_GROUP_AGE,
) -> list[str]:
    """The names of the bridge's PodGroups that no pod names any more and that are at least
    ``min_age`` old, sorted: their gang ran and ended, failed, or never got its pods (a bridge
    stopped in between). A pod still terminating keeps its group."""
    named = {p.pod_group for p in pods if p.pod_group}
    return sorted(
        g.name
        for g in groups
        if g.is_ours and g.name not in named and now - g.created_at >= min_age
    )


def groups_in_view(
    groups: Iterable[PodGroupView], pods: Iterable[PodView]
) -> dict[str, PodGroupView]:
    """The groups whose word may decide for their pods, by name: those the pod view holds
    every member of (``minCount`` pods naming the group; a group without one, always).

    The pods come from a watch's cache and the groups from a list read after it, so the
    scheduler's word that a gang of three cannot be placed may arrive while the cache holds
    one of its pods (the watch reads in batches during a burst). Judged then, that node alone
    would go DOWN and its job's other nodes would be released without the reason (seen in CI:
    gang-0 DOWN, gang-[1-2] back to idle~). A watch event later the view holds the gang whole
    and the next pass fails it as one; until then each pod's own hold-up decides."""
    named: dict[str, int] = {}
    for pod in pods:
        if pod.pod_group:
            named[pod.pod_group] = named.get(pod.pod_group, 0) + 1
    return {g.name: g for g in groups if g.min_count is None or named.get(g.name, 0) >= g.min_count}


def short_gangs(gangs: Sequence[Gang], created: Mapping[str, object]) -> list[tuple[Gang, int]]:
    """The gangs of a call whose pods were not all created now (``created``: node → the
    create's outcome, True for a pod made with its group), with how many were: the scheduler
    holds a gang's pods until ``minCount`` of them exist, so a member that failed, or whose
    pod was there already (without the group), would hold the others until Slurm gives up."""
    return [
        (gang, made)
        for gang in gangs
        if (made := sum(1 for node in gang.nodes if created.get(node) is True)) < len(gang.nodes)
    ]
