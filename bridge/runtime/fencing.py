"""The bridge's writes, fenced by leader election: wrappers of the Slurm and Kubernetes ports
that ask the leadership before every write and pass reads through.

Only the leader writes (pods, their labels and conditions, events, Slurm node states,
addresses, comments and job comments); a follower, or a leader past its renew deadline (stopped,
frozen, cut off from the API server), raises :class:`~bridge.errors.NotLeader` instead, which
the service handles as a transient failure and the RPC layer answers UNAVAILABLE."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from bridge.domain.job_failure import SlurmJob
from bridge.domain.nodes import SlurmNode
from bridge.domain.pod_groups import PodGroupView
from bridge.domain.pods import PodView
from bridge.domain.reconcile import SetPodSlurmState
from bridge.domain.verdict import ScaleUpEvent
from bridge.errors import BackendError, InvalidInput, NotLeader
from bridge.service.ports import PodPort, SlurmPort

Fence = Callable[[str], None]


class FencedSlurm:
    """A :class:`SlurmPort` whose writes need the lease."""

    def __init__(self, slurm: SlurmPort, fence: Fence) -> None:
        self._slurm = slurm
        self._fence = fence

    def list_nodes(self, names: Sequence[str] | None = None) -> list[SlurmNode]:
        return self._slurm.list_nodes(names)

    def jobs_on_nodes(self, names: Sequence[str]) -> list[SlurmJob]:
        return self._slurm.jobs_on_nodes(names)

    def update_nodes(self, names: Sequence[str], *, state: str, reason: str | None = None) -> None:
        self._fence(f"scontrol update {state}")
        self._slurm.update_nodes(names, state=state, reason=reason)

    def set_node_addresses(self, addresses: Mapping[str, str]) -> None:
        self._fence("scontrol update NodeAddr")
        self._slurm.set_node_addresses(addresses)

    def set_node_comment(self, names: Sequence[str], comment: str) -> None:
        self._fence("scontrol update Comment")
        self._slurm.set_node_comment(names, comment)

    def set_jobs_admin_comment(self, job_ids: Sequence[int], comment: str) -> None:
        self._fence("scontrol update AdminComment")
        self._slurm.set_jobs_admin_comment(job_ids, comment)


class FencedPods:
    """A :class:`PodPort` whose writes need the lease."""

    def __init__(self, pods: PodPort, fence: Fence) -> None:
        self._pods = pods
        self._fence = fence

    def list_pods(self) -> tuple[list[PodView], str]:
        return self._pods.list_pods()

    def read_pod(self, name: str) -> PodView | None:
        return self._pods.read_pod(name)

    def pod_exists(self, name: str) -> bool:
        return self._pods.pod_exists(name)

    def list_scale_up_events(self) -> list[ScaleUpEvent]:
        return self._pods.list_scale_up_events()

    def _refused(
        self, what: str, names: Sequence[str]
    ) -> Mapping[str, bool | BackendError | InvalidInput] | None:
        """Each name's NotLeader, as the gateway answers per pod; None when leading."""
        try:
            self._fence(what)
        except NotLeader as e:
            return dict.fromkeys(names, e)
        return None

    def create_pods(
        self, manifests: Iterable[Mapping[str, Any]]
    ) -> Mapping[str, bool | BackendError | InvalidInput]:
        try:
            self._fence("create pods")
        except NotLeader as e:
            return dict.fromkeys((str(m["metadata"]["name"]) for m in manifests), e)
        # Passed on unread: a resume's pods are rendered as the creates go.
        return self._pods.create_pods(manifests)

    def delete_pods(
        self,
        names: Sequence[str],
        *,
        uids: Mapping[str, str] | None = None,
        grace_period_s: int | None = None,
    ) -> Mapping[str, bool | BackendError | InvalidInput]:
        refused = self._refused("delete pods", names)
        if refused is not None:
            return refused
        return self._pods.delete_pods(names, uids=uids, grace_period_s=grace_period_s)

    def set_slurm_states(
        self, changes: Sequence[SetPodSlurmState]
    ) -> Mapping[str, bool | BackendError | InvalidInput]:
        refused = self._refused("label pods", [change.node for change in changes])
        return self._pods.set_slurm_states(changes) if refused is None else refused

    def list_pod_groups(self) -> list[PodGroupView]:
        return self._pods.list_pod_groups()

    def create_pod_groups(
        self, manifests: Sequence[Mapping[str, Any]]
    ) -> Mapping[str, bool | BackendError | InvalidInput]:
        names = [str(m["metadata"]["name"]) for m in manifests]
        refused = self._refused("create podgroups", names)
        return self._pods.create_pod_groups(manifests) if refused is None else refused

    def set_pod_group_min_count(self, name: str, min_count: int) -> None:
        self._fence(f"set minCount of podgroup {name}")
        self._pods.set_pod_group_min_count(name, min_count)

    def delete_pod_group(self, name: str) -> bool:
        self._fence(f"delete podgroup {name}")
        return self._pods.delete_pod_group(name)

    def record_event(self, pod: str, reason: str, message: str, *, warning: bool = False) -> None:
        # Best effort, as the gateway's own: a follower's event is dropped, not raised.
        try:
            self._fence("record event")
        except NotLeader:
            return
        self._pods.record_event(pod, reason, message, warning=warning)
