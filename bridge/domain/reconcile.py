"""The reconcile plan: from Slurm's view and Kubernetes' view to the actions that make them agree.

A purely computational function: ``plan(slurm_nodes, pods, pools, now, guards)`` returns actions;
executing them is the service's job. Slurm is the authority on which nodes should run; the pods
are the actuator. Every decision carries a ``why`` that is logged verbatim.

The cases (node = Slurm's view, pod = ours):

=========================================  ======================================================
node powered down or powering down, pod    delete the pod once older than the age guard
node powering up, no pod                   create it (a Resume we missed, e.g. bridge was down)
node powering up or up, pod failed         DOWN with ``k8s: <Reason>: <message>``, delete pod
                                           (fail fast: Slurm requeues the job at once)
node up, no pod                            DOWN with ``k8s: PodMissing``, power down
node DOWN (our reason), not powered down   delete the pod if any, power down
node powered down + DOWN with our reason   resume it to ``idle~`` after the hold time
pod whose node no pool owns or Slurm lacks delete it once older than the age guard
=========================================  ======================================================
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from .nodes import REASON_PREFIX, SlurmNode, our_reason
from .pods import TERMINATING, PodView
from .pools import PoolSet


@dataclass(frozen=True)
class Guards:
    """Time guards that keep the reconciler from racing the direct RPC paths."""

    pod_age_guard: timedelta = timedelta(seconds=30)
    failed_node_hold: timedelta = timedelta(seconds=30)


@dataclass(frozen=True)
class CreatePod:
    node: str
    pool: str
    why: str


@dataclass(frozen=True)
class DeletePod:
    node: str
    why: str


@dataclass(frozen=True)
class MarkDown:
    """Set the node DOWN with a reason of ours (Slurm requeues its jobs)."""

    node: str
    reason: str


@dataclass(frozen=True)
class PowerDown:
    """Force a power down so the node returns to ``idle~`` instead of waiting for a timeout."""

    node: str
    why: str


@dataclass(frozen=True)
class ResumeNode:
    """Clear our DOWN on a powered-down node: it becomes ``idle~`` and schedulable again."""

    node: str
    why: str


Action = CreatePod | DeletePod | MarkDown | PowerDown | ResumeNode


def _older_than(moment: datetime | None, now: datetime, age: timedelta) -> bool:
    return moment is None or now - moment >= age


def _fail(node: SlurmNode, pod: PodView | None, kind: str, message: str) -> list[Action]:
    actions: list[Action] = []
    reason = our_reason(kind, message)
    if not (node.is_down and node.reason.startswith(reason)):
        actions.append(MarkDown(node.name, reason))
    if pod is not None and not pod.deleting:
        actions.append(DeletePod(node.name, f"{kind}: {message}"))
    # No power down yet: power_down_force clears DOWN and the reason, so the node is held DOWN
    # (visible in sinfo -R, a pause before Slurm retries it) and powered down after the hold.
    return actions


def _plan_powering_down(
    node: SlurmNode, pod: PodView | None, now: datetime, guards: Guards
) -> list[Action]:
    """A node Slurm powered (or is powering) down: its pod goes; a failed node is held DOWN."""
    pod_settled = pod is not None and _older_than(pod.created_at, now, guards.pod_age_guard)
    actions: list[Action] = []
    if pod is not None and not pod.deleting and pod_settled:
        state = "powered down" if node.is_powered_down else "powering down"
        actions.append(DeletePod(node.name, f"Slurm node is {state}"))
    held = not _older_than(node.reason_since, now, guards.failed_node_hold)
    if node.is_powered_down and node.is_down and node.has_our_reason and pod is None and not held:
        actions.append(ResumeNode(node.name, f"held DOWN for {guards.failed_node_hold}"))
    return actions


def plan_node(
    node: SlurmNode, pod: PodView | None, pool: str, now: datetime, guards: Guards
) -> list[Action]:
    """The actions for one node that a pool owns and Slurm knows."""
    if node.is_powered_down or node.is_powering_down:
        return _plan_powering_down(node, pod, now, guards)
    if node.is_down:
        if not node.has_our_reason:
            return []  # an admin's DOWN: not ours to touch
        actions: list[Action] = []
        if pod is not None and not pod.deleting:
            actions.append(DeletePod(node.name, f"Down: {node.reason.removeprefix(REASON_PREFIX)}"))
        elif pod is None and _older_than(node.reason_since, now, guards.failed_node_hold):
            # Held long enough: without a power down the node would sit in down#/down until
            # ResumeTimeout, or for good when it was up; powered down it returns to idle~.
            actions.append(PowerDown(node.name, f"held DOWN for {guards.failed_node_hold}"))
        return actions
    if node.is_powering_up and pod is not None and pod.deleting and pod.failure == TERMINATING:
        return []  # the previous cycle's pod is still terminating: create once it is gone
    if pod is not None and pod.failure is not None:
        return _fail(node, pod, pod.failure.reason, pod.failure.message)
    if node.is_powering_up:
        if pod is None:
            return [CreatePod(node.name, pool, "Slurm node is powering up and has no pod")]
        return []
    if pod is None:
        if node.power_down_queued:
            # E.g. right after our own power_down_force: Slurm is about to power it down, and
            # no job needs a slurmd there; calling it PodMissing would overwrite the real reason.
            return []
        return _fail(
            node, None, "PodMissing", f"no pod for node {node.name}; Slurm thinks it is up"
        )
    return []


def plan(
    slurm_nodes: Iterable[SlurmNode],
    pods: Iterable[PodView],
    pools: PoolSet,
    now: datetime,
    guards: Guards,
) -> list[Action]:
    """Everything to do so that Slurm's and Kubernetes' views agree, in a stable order."""
    nodes: Mapping[str, SlurmNode] = {n.name: n for n in slurm_nodes}
    by_node: Mapping[str, PodView] = {p.node: p for p in pods}
    actions: list[Action] = []
    for name in sorted(set(nodes) | set(by_node)):
        node, pod = nodes.get(name), by_node.get(name)
        pool = pools.pool_for(name)
        if node is None or pool is None:
            if (
                pod is not None
                and not pod.deleting
                and _older_than(pod.created_at, now, guards.pod_age_guard)
            ):
                owner = "no pool owns it" if pool is None else "Slurm does not know it"
                actions.append(DeletePod(name, f"orphan pod: {owner}"))
            continue
        actions.extend(plan_node(node, pod, pool.name, now, guards))
    return actions
