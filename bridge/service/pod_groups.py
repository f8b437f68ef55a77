"""Gang scheduling's PodGroups (``bridge.domain.gangs``): made before a resume call's pods,
shrunk when some of a gang's pods were not made, read and collected for the reconcile pass.

Every failure here costs atomicity, never a node: a group the API server refuses leaves its
job's pods to be placed one by one (the job-aware failure, as without gang scheduling), and a
pass that cannot read the groups judges the pods on their own clocks.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from bridge.domain.gang_mode import GangMode
from bridge.domain.gangs import (
    Gang,
    gang_suffix,
    job_gangs,
    render_pod_group,
    short_gangs,
)
from bridge.domain.hostlist import compress
from bridge.domain.pod_groups import PodGroupView
from bridge.domain.pod_rendering import PodSettings
from bridge.domain.reconcile import DeletePodGroup
from bridge.domain.resume_file import ResumeJob
from bridge.errors import BridgeError
from bridge.service.ports import PodPort

log = logging.getLogger(__name__)


class PodGroups:
    """The bridge's PodGroups through ``pods``, when ``mode`` is on (a no-op otherwise)."""

    def __init__(self, pods: PodPort, mode: GangMode) -> None:
        self.pods = pods
        #: Fixed at start, from ``kubernetes.gang_scheduling`` and what the API server serves.
        self.mode = mode

    def create(
        self,
        groups: Mapping[str, list[str]],
        jobs: Sequence[ResumeJob],
        request_id: str,
        settings: PodSettings,
    ) -> list[Gang]:
        """The gangs of one resume call's nodes (``groups``: pool → nodes; ``jobs``: its resume
        file's, see :func:`job_gangs`) whose PodGroup exists now: made here, or by an earlier
        try of the same call. No node waits for a group that is not there."""
        if not self.mode.on or not jobs:
            return []
        pool_of_node = {node: pool for pool, nodes in groups.items() for node in nodes}
        gangs = job_gangs(jobs, pool_of_node, gang_suffix(request_id))
        if not gangs:
            return []
        manifests = [render_pod_group(g, self.mode.api_version, settings) for g in gangs]
        outcome = self.pods.create_pod_groups(manifests)
        made: list[Gang] = []
        for gang in gangs:
            result = outcome.get(gang.name)
            if isinstance(result, bool):
                made.append(gang)
                log.info(
                    "request %s: pod group %s %s: job %d, %s (minCount %d)",
                    request_id,
                    gang.name,
                    "created" if result else "exists already",
                    gang.job_id,
                    compress(gang.nodes),
                    len(gang.nodes),
                )
                continue
            log.warning(
                "request %s: pod group %s not created, job %d's pods %s are placed one by one: %s",
                request_id,
                gang.name,
                gang.job_id,
                compress(gang.nodes),
                result if result is not None else "no answer",
            )
        return made

    def shrink_short(
        self, gangs: Sequence[Gang], outcome: Mapping[str, object], request_id: str
    ) -> None:
        """Lower the ``minCount`` of each gang whose pods were not all created with its group
        (``outcome``: node → the create's result) to the pods that were: the scheduler holds a
        gang's pods until ``minCount`` of them exist, so the missing (a create that failed, a
        pod there already) would hold the others until Slurm's ResumeTimeout. The missing are
        the reconciler's to create, on their own. None made: the group is left to be
        collected once stale."""
        for gang, made in short_gangs(gangs, outcome):
            missing = compress(n for n in gang.nodes if outcome.get(n) is not True)
            if made == 0:
                log.warning(
                    "request %s: pod group %s: none of its pods was created (%s)",
                    request_id,
                    gang.name,
                    missing,
                )
                continue
            try:
                self.pods.set_pod_group_min_count(gang.name, made)
            except BridgeError as e:
                log.warning(
                    "request %s: pod group %s: %d of %d pods created (not %s), minCount not "
                    "lowered: %s; they wait for the rest until Slurm's ResumeTimeout",
                    request_id,
                    gang.name,
                    made,
                    len(gang.nodes),
                    missing,
                    e,
                )
                continue
            log.warning(
                "request %s: pod group %s: %d of %d pods created (not %s): minCount lowered to %d",
                request_id,
                gang.name,
                made,
                len(gang.nodes),
                missing,
                made,
            )

    def read(self) -> list[PodGroupView]:
        """The bridge's PodGroups; none when gang scheduling is off or they cannot be read
        (then the pass judges gang pods on their own clocks and deletes no group)."""
        if not self.mode.on:
            return []
        try:
            return self.pods.list_pod_groups()
        except BridgeError as e:
            log.warning("reconcile: pod groups not read: %s", e)
            return []

    def delete(self, actions: Sequence[DeletePodGroup]) -> None:
        """Delete the groups the plan found stale; a failure waits for the next pass."""
        for action in actions:
            try:
                deleted = self.pods.delete_pod_group(action.name)
            except BridgeError as e:
                log.warning("reconcile: pod group %s not deleted (next pass): %s", action.name, e)
                continue
            log.info(
                "reconcile: pod group %s %s: %s",
                action.name,
                "deleted" if deleted else "already gone",
                action.why,
            )
