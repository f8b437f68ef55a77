"""Failed nodes set DOWN in Slurm, and for a fail-fast the jobs on them looked after too.

A node set DOWN requeues its jobs at once. For a fail-fast (the pod cannot run) the jobs also
get the reason in their AdminComment, and their other nodes still powering up are released, so
they do not hold capacity until ResumeTimeout. What to do per job is
:func:`bridge.domain.job_failure.plan_job_failure`'s decision; this module carries it out.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping, Sequence

from bridge.domain.hostlist import compress
from bridge.domain.job_failure import (
    FailedJob,
    SlurmJob,
    nodes_to_release,
    plan_job_failure,
    still_releasable,
)
from bridge.domain.nodes import SlurmNode
from bridge.domain.pools import PoolSet
from bridge.domain.reason import Reason
from bridge.errors import BridgeError
from bridge.metrics import BridgeMetrics
from bridge.service.ports import SlurmPort

log = logging.getLogger(__name__)


class JobAwareFailure:
    """Sets nodes DOWN through ``slurm`` (counted in ``metrics``), minding their jobs."""

    def __init__(self, slurm: SlurmPort, metrics: BridgeMetrics) -> None:
        self.slurm = slurm
        self.metrics = metrics

    def cloud_nodes(
        self, nodes: Sequence[str], snapshot: Sequence[SlurmNode] | None = None
    ) -> list[str]:
        """Those of ``nodes`` Slurm lists as CLOUD in ``snapshot``, or, when there is none, as
        read now (those nodes only)."""
        if not nodes:
            return []
        try:
            listed = self.slurm.list_nodes(nodes) if snapshot is None else snapshot
            cloud = {n.name for n in listed if n.is_cloud}
        except BridgeError as e:
            # Unsure what they are: leave Slurm alone; the reconciler tries again next pass.
            log.warning("not setting %s DOWN: cannot read Slurm: %s", compress(nodes), e)
            return []
        others = [n for n in nodes if n not in cloud]
        if others:
            log.warning("not setting %s DOWN: Slurm does not list it as CLOUD", compress(others))
        return [n for n in nodes if n in cloud]

    def mark_down(self, nodes: Sequence[str], reason: Reason, admin_reason: str = "") -> bool:
        """Set ``nodes`` DOWN with ``reason``; whether Slurm took it. ``admin_reason``: the
        reason an admin's DRAIN or FAIL gave the nodes, written back in place of ours (Slurm
        wants a reason with every DOWN), so that theirs is neither replaced nor lifted."""
        if not nodes:
            return False
        try:
            self.slurm.update_nodes(nodes, state="down", reason=admin_reason or reason.text)
            if admin_reason:
                log.warning(
                    "set DOWN %s: %s (kept the admin's reason %r)",
                    compress(nodes),
                    reason,
                    admin_reason,
                )
            else:
                log.warning("set DOWN %s: %s", compress(nodes), reason)
            self.metrics.fail_fast(reason, len(nodes))
        except BridgeError as e:
            log.error("could not set DOWN %s (%s): %s", compress(nodes), reason, e)
            return False
        return True

    def mark_down_groups(
        self,
        pools: PoolSet,
        groups: Mapping[tuple[Reason, str], Sequence[str]],
        snapshot: Sequence[SlurmNode] | None,
    ) -> list[tuple[Reason, list[str]]]:
        """Set each group DOWN, one Slurm write per (reason, admin's reason) key, minding the
        jobs of fail-fasts (:meth:`mark_down_failing_jobs`): with several fail-fast reasons,
        their jobs are read once for all of them, not once a reason. ``snapshot``: as for
        :meth:`mark_down_failing_jobs`. Returns the groups whose DOWN Slurm took."""
        every_down = [n for nodes in groups.values() for n in nodes]
        fail_fasts = [nodes for (reason, _), nodes in groups.items() if reason.is_fail_fast]
        jobs = None
        if len(fail_fasts) > 1 and snapshot is not None:
            jobs = self.jobs_for(pools, [n for nodes in fail_fasts for n in nodes], snapshot)
        taken: list[tuple[Reason, list[str]]] = []
        for (reason, admin_reason), nodes in groups.items():
            if self.mark_down_failing_jobs(
                pools, nodes, reason, every_down, snapshot, admin_reason=admin_reason, jobs=jobs
            ):
                taken.append((reason, list(nodes)))
        return taken

    def mark_down_failing_jobs(
        self,
        pools: PoolSet,
        nodes: Sequence[str],
        reason: Reason,
        failing: Collection[str] = (),
        snapshot: Sequence[SlurmNode] | None = None,
        *,
        admin_reason: str = "",
        jobs: Sequence[SlurmJob] | None = None,
    ) -> bool:
        """:meth:`mark_down`, and for a fail-fast the jobs on ``nodes`` too: the reason in
        their AdminComment first, then (once Slurm took the DOWN and requeued them) their other
        nodes still powering up released, so they do not hold capacity until ResumeTimeout.
        ``pools``: whose nodes may be released. ``failing``: nodes the same pass sets DOWN for
        another reason (never released). ``snapshot``: Slurm's nodes as the caller read them
        (a reconcile pass's; it must hold the pools' nodes), else the pools' nodes are read.
        ``admin_reason``: see :meth:`mark_down` (the jobs' AdminComment still gets ours).
        ``jobs``: the jobs on ``nodes`` and the nodes powering up, read once for every reason
        of a pass (:meth:`jobs_for`); else read here."""
        if not nodes or not reason.is_fail_fast:
            return self.mark_down(nodes, reason, admin_reason)
        failed_jobs = self._failing_jobs(pools, nodes, reason, snapshot, jobs)
        commented = self._set_admin_comments(failed_jobs, reason.text)
        if not self.mark_down(nodes, reason, admin_reason):
            return False
        candidates = [n for n in nodes_to_release(failed_jobs) if n not in failing]
        released = self._release(
            self._still_releasable(candidates, {job.job_id for job in failed_jobs}), reason
        )
        for job in failed_jobs:
            log.warning(
                "job %s: node(s) %s failed (%s); released %s; AdminComment %s",
                job.job_id,
                compress(job.failed),
                reason,
                compress(n for n in job.release if n in released) or "-",
                "set" if job.job_id in commented else "not set",
            )
        return True

    def jobs_for(
        self, pools: PoolSet, nodes: Sequence[str], snapshot: Sequence[SlurmNode]
    ) -> list[SlurmJob] | None:
        """The jobs holding ``nodes`` or a node powering up that a job could release, in one
        read (a pass failing nodes for several reasons reads them once); None when Slurm cannot
        say (each reason then tries on its own)."""
        try:
            return self.slurm.jobs_on_nodes(_with_starting(pools, nodes, snapshot))
        except BridgeError as e:
            log.warning("jobs on %s not read: %s", compress(nodes), e)
            return None

    def _failing_jobs(
        self,
        pools: PoolSet,
        nodes: Sequence[str],
        reason: Reason,
        snapshot: Sequence[SlurmNode] | None,
        jobs: Sequence[SlurmJob] | None = None,
    ) -> list[FailedJob]:
        """The jobs on ``nodes`` and what to do about them; none when Slurm cannot say (the
        DOWN still goes ahead: it alone requeues the jobs)."""
        try:
            if snapshot is None:
                # The only nodes a failed job's plan looks at: those a pool owns.
                snapshot = self.slurm.list_nodes(pools.all_nodes())
            if jobs is None:
                jobs = self.slurm.jobs_on_nodes(_with_starting(pools, nodes, snapshot))
            # Inside the try: a job's hostlist Slurm printed may still be one we cannot expand.
            return plan_job_failure(nodes, jobs, snapshot, pools.owns)
        except BridgeError as e:
            log.warning(
                "jobs on %s not read (%s); setting DOWN without them: %s",
                compress(nodes),
                reason,
                e,
            )
            return []

    def _set_admin_comments(self, failed_jobs: Sequence[FailedJob], reason: str) -> set[int]:
        """Put ``reason`` in each job's AdminComment where it is ours to write, in one Slurm
        write for all of them; the jobs set."""
        ours = []
        for job in failed_jobs:
            if job.set_comment:
                ours.append(job.job_id)
            else:
                log.info("job %s: AdminComment is an admin's; not replaced", job.job_id)
        if not ours:
            return set()
        try:
            self.slurm.set_jobs_admin_comment(ours, reason)
        except BridgeError as e:
            # Slurm went on past a job it refused (the error names it): the others may have
            # their comment after all, but none is counted as set.
            log.warning("job %s: AdminComment not set: %s", ",".join(map(str, ours)), e)
            return set()
        return set(ours)

    def _still_releasable(self, candidates: Sequence[str], failing_ids: set[int]) -> list[str]:
        """The candidates no other job took since they were chosen, read again after the DOWN
        (see :func:`still_releasable`); none when Slurm cannot say (ResumeTimeout still ends
        their power up)."""
        if not candidates:
            return []
        try:
            jobs_now = self.slurm.jobs_on_nodes(candidates)
            kept = still_releasable(candidates, jobs_now, failing_ids)
        except BridgeError as e:
            log.warning("not releasing %s: jobs not read again: %s", compress(candidates), e)
            return []
        taken = [n for n in candidates if n not in kept]
        if taken:
            log.info("not releasing %s: another job holds them now", compress(taken))
        return kept

    def _release(self, nodes: Sequence[str], reason: Reason) -> set[str]:
        """``power_down_force`` the nodes of failed jobs that never registered: Slurm clears
        POWERING_UP and suspends them at once, and the suspend deletes their pods."""
        if not nodes:
            return set()
        try:
            self.slurm.update_nodes(nodes, state="power_down_force")
        except BridgeError as e:
            log.warning("not released %s (%s): %s", compress(nodes), reason, e)
            return set()
        return set(nodes)


def _with_starting(
    pools: PoolSet, nodes: Sequence[str], snapshot: Sequence[SlurmNode]
) -> list[str]:
    """``nodes`` and the pools' nodes powering up: the nodes a failed job could release are
    read too, so that a node another job holds is never released."""
    starting = [n.name for n in snapshot if n.is_cloud and n.is_powering_up and pools.owns(n.name)]
    return list(dict.fromkeys([*nodes, *starting]))
