"""The status rows: Slurm's view of a node and its pod side by side, a pure function of both."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from bridge.domain.nodes import SlurmNode
from bridge.domain.pods import PodView
from bridge.domain.pools import PoolSet
from bridge.domain.results import NodeStatus


def node_statuses(
    wanted: Iterable[str],
    slurm_nodes: Iterable[SlurmNode],
    pods: Iterable[PodView],
    pools: PoolSet,
    template_hashes: Mapping[str, str],
) -> list[NodeStatus]:
    """One row per name of ``wanted`` that Slurm lists, has a pod or a pool owns, in natural
    order (cpu-2 before cpu-10). ``template_hashes``: each pool's template hash now."""
    by_pod = {p.node: p for p in pods}
    nodes = {n.name: n for n in slurm_nodes}
    rows = []
    for name in sorted(wanted, key=_natural):
        node, pod = nodes.get(name), by_pod.get(name)
        if node is None and pod is None and not pools.owns(name):
            continue
        pool = pools.pool_for(name)
        rows.append(
            NodeStatus(
                node=name,
                pool=pool.name if pool else "",
                slurm_state=node.display_state if node else "",
                pod_phase=("Terminating" if pod.deleting else pod.phase) if pod else "",
                pod_ip=pod.ip if pod else "",
                reason=node.reason if node else "",
                since=pod.created_at if pod else None,
                template_hash=pod.template_hash if pod else "",
                pool_template_hash=template_hashes.get(pool.name, "") if pool else "",
                slurm_node=node,
            )
        )
    return rows


def _natural(name: str) -> tuple[str, int, str]:
    head = name.rstrip("0123456789")
    digits = name[len(head) :]
    return (head, int(digits) if digits else -1, name)
