"""What a fail-fast means for the jobs on the failed nodes. Pure: no Slurm, no Kubernetes.

When the bridge sets a node DOWN because its pod cannot run, Slurm requeues the node's jobs. A
multi-node job's *other* nodes were powered up for that job only; unless released they stay
POWERING_UP (holding Kubernetes capacity, maybe a Pending pod) until ResumeTimeout. This module
decides which of them to release (``power_down_force``) and which jobs get the Kubernetes reason
in their AdminComment; the service reads, calls and logs.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from bridge.domain.hostlist import expand
from bridge.domain.nodes import REASON_PREFIX, SlurmNode

#: Job state words (base state or flag, as 22.05 prints one and 24.11+ list them) of a job that
#: holds its nodes: started, starting, stopped in place or finishing.
_HOLDING_STATES = frozenset(
    {"RUNNING", "CONFIGURING", "POWER_UP_NODE", "SUSPENDED", "COMPLETING", "STAGE_OUT"}
)


@dataclass(frozen=True)
class SlurmJob:
    """One job as ``squeue --json`` shows it, reduced to what a fail-fast decides on."""

    job_id: int
    #: Upper-case state words: 22.05's one string (``{"CONFIGURING"}``), or 24.11+'s list, base
    #: state first (``{"RUNNING", "CONFIGURING", "POWER_UP_NODE"}``).
    states: frozenset[str]
    #: The job's nodes as a Slurm hostlist (``cpu-[0-1]``); "" while it has none.
    nodes: str = ""
    admin_comment: str = ""

    @property
    def holds_nodes(self) -> bool:
        """Whether the job has its nodes now (a pending or finished job has none)."""
        return bool(self.nodes) and not self.states.isdisjoint(_HOLDING_STATES)

    @property
    def node_names(self) -> list[str]:
        return expand(self.nodes) if self.nodes else []

    @property
    def admin_comment_is_ours(self) -> bool:
        """Empty or written by the bridge: an admin's AdminComment is never overwritten."""
        return not self.admin_comment or self.admin_comment.startswith(REASON_PREFIX)


@dataclass(frozen=True)
class FailedJob:
    """A job that holds a failed node: its nodes that failed, those to release, and whether
    its AdminComment gets the reason."""

    job_id: int
    failed: tuple[str, ...]
    release: tuple[str, ...]
    set_comment: bool


def plan_job_failure(
    failed: Collection[str],
    jobs: Sequence[SlurmJob],
    nodes: Sequence[SlurmNode],
    owns: Callable[[str], bool],
) -> list[FailedJob]:
    """One :class:`FailedJob` per job (in ``jobs`` order) that holds a node of ``failed``.

    A job's other node is released when the bridge owns it (``owns``, and CLOUD in ``nodes``),
    it is POWERING_UP in ``nodes`` (no slurmd yet: nothing runs there) and no live job other
    than the failing ones holds it. ``jobs`` may list unrelated jobs (22.05's ``squeue --json``
    ignores ``--nodelist``); they only count as other jobs holding nodes.
    """
    failed_set = set(failed)
    by_name = {node.name: node for node in nodes}
    live = [job for job in jobs if job.holds_nodes]
    failing = [job for job in live if not failed_set.isdisjoint(job.node_names)]
    failing_ids = {job.job_id for job in failing}
    held_elsewhere = {
        name for job in live if job.job_id not in failing_ids for name in job.node_names
    }

    def releasable(name: str) -> bool:
        node = by_name.get(name)
        return (
            name not in failed_set
            and name not in held_elsewhere
            and owns(name)
            and node is not None
            and node.is_cloud
            and node.is_powering_up
        )

    return [
        FailedJob(
            job_id=job.job_id,
            failed=tuple(n for n in job.node_names if n in failed_set),
            release=tuple(n for n in job.node_names if releasable(n)),
            set_comment=job.admin_comment_is_ours,
        )
        for job in failing
    ]


def nodes_to_release(failed_jobs: Sequence[FailedJob]) -> list[str]:
    """Every node any of ``failed_jobs`` releases, once each, in order."""
    return list(dict.fromkeys(n for job in failed_jobs for n in job.release))


def still_releasable(
    candidates: Sequence[str], jobs_now: Sequence[SlurmJob], failing_ids: Collection[int]
) -> list[str]:
    """Those of ``candidates`` (chosen by :func:`plan_job_failure` before the DOWN) that no live
    job but the failed ones holds now. The DOWN requeued the failed jobs, and Slurm may have
    given a node still powering up to another job in between: releasing that node would
    requeue the other job too (issue 29 item 7)."""
    held = {
        name
        for job in jobs_now
        if job.holds_nodes and job.job_id not in failing_ids
        for name in job.node_names
    }
    return [name for name in candidates if name not in held]
