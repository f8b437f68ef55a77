"""A pool's PodDisruptionBudget (``disruption_budget: true``): ``kubectl drain`` may not evict a
registered slurmd pod of the pool, so it waits while the bridge drains the Slurm node (see
``reconcile``'s cordon case); once the node's jobs end Slurm powers it down, the bridge *deletes*
the pod (a delete is no eviction) and the drain completes.

The pods are bare pods, without a controller: for those the disruption controller computes only
an integer ``minAvailable`` (``maxUnavailable`` and percentages need a controller's scale). With
``minAvailable`` = the pool's size no pod can be evicted: ``IfHealthyBudget`` lets a pod that is
not Ready go only while the budget is healthy, which it never is. Not ``AlwaysAllow``: a job can
start on a node (job_ready starts it the second slurmd registers) before the reconciler has set
the pod's ``registered`` condition, i.e. while the pod is still not Ready; seen live, a drain
evicted such a pod and its job was requeued. A pod that never becomes Ready fails fast and the
bridge deletes it anyway.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .pod_rendering import PodSettings
from .pods import LABEL_CLUSTER, LABEL_MANAGED_BY, LABEL_POOL, MANAGED_BY
from .pools import NodePool


def disruption_budget_name(pool: NodePool, settings: PodSettings) -> str:
    """``<cluster>-<pool>``: unique per bridge and pool in a shared namespace."""
    return f"{settings.cluster_name}-{pool.name}"


def render_disruption_budget(pool: NodePool, settings: PodSettings) -> dict[str, Any]:
    """The PodDisruptionBudget manifest that covers every pod of ``pool``."""
    labels = {
        LABEL_MANAGED_BY: MANAGED_BY,
        LABEL_CLUSTER: settings.cluster_name,
        LABEL_POOL: pool.name,
    }
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {
            "name": disruption_budget_name(pool, settings),
            "namespace": settings.namespace,
            "labels": dict(labels),
        },
        "spec": {
            "minAvailable": len(pool.node_names),
            "selector": {"matchLabels": dict(labels)},
            "unhealthyPodEvictionPolicy": "IfHealthyBudget",
        },
    }


def render_disruption_budgets(
    pools: Iterable[NodePool], settings: PodSettings
) -> list[dict[str, Any]]:
    """The budgets of the pools that ask for one (``disruption_budget: true``)."""
    return [render_disruption_budget(p, settings) for p in pools if p.disruption_budget]
