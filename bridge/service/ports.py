"""The service's ports: what it needs from Slurm and from Kubernetes, as protocols.

The adapters (``bridge.adapters.slurm.cli.SlurmCli``, ``bridge.adapters.kubernetes.PodGateway``)
and the unit tests' fakes meet them structurally; nothing here imports an adapter.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

from bridge.domain.job_failure import SlurmJob
from bridge.domain.nodes import SlurmNode
from bridge.domain.pod_groups import PodGroupView
from bridge.domain.pods import PodView
from bridge.domain.reconcile import SetPodSlurmState
from bridge.domain.verdict import ScaleUpEvent
from bridge.errors import BackendError, InvalidInput


class PodLister(Protocol):
    """Where the service reads the bridge's pods: the gateway's list, or the watch-fed cache."""

    def list_pods(self) -> tuple[list[PodView], str]: ...


class CordonLister(Protocol):
    """Which Kubernetes nodes are cordoned (``PodGateway.list_cordoned_nodes``)."""

    def list_cordoned_nodes(self) -> frozenset[str]: ...


class SlurmPort(Protocol):
    """What the service needs from Slurm (``bridge.adapters.slurm.cli.SlurmCli``)."""

    def list_nodes(self, names: Sequence[str] | None = None) -> list[SlurmNode]:
        """Every node Slurm knows; with ``names``, those of them it knows (others left out)."""

    def update_nodes(
        self, names: Sequence[str], *, state: str, reason: str | None = None
    ) -> None: ...

    def set_node_addresses(self, addresses: Mapping[str, str]) -> None: ...

    def set_node_comment(self, names: Sequence[str], comment: str) -> None: ...

    def jobs_on_nodes(self, names: Sequence[str]) -> list[SlurmJob]: ...

    def set_jobs_admin_comment(self, job_ids: Sequence[int], comment: str) -> None: ...


class PodPort(Protocol):
    """What the service needs from Kubernetes (``bridge.adapters.kubernetes.PodGateway``)."""

    def list_pods(self) -> tuple[list[PodView], str]: ...

    def create_pods(
        self, manifests: Iterable[Mapping[str, Any]]
    ) -> Mapping[str, bool | BackendError | InvalidInput]:
        """Create each pod as ``manifests`` yields it (a resume's are rendered meanwhile)."""
        ...

    def delete_pods(
        self,
        names: Sequence[str],
        *,
        uids: Mapping[str, str] | None = None,
        grace_period_s: int | None = None,
    ) -> Mapping[str, bool | BackendError | InvalidInput]: ...

    def read_pod(self, name: str) -> PodView | None: ...

    def pod_exists(self, name: str) -> bool: ...

    def set_slurm_states(
        self, changes: Sequence[SetPodSlurmState]
    ) -> Mapping[str, bool | BackendError | InvalidInput]: ...

    def list_scale_up_events(self) -> list[ScaleUpEvent]: ...

    def record_event(
        self, pod: str, reason: str, message: str, *, warning: bool = False
    ) -> None: ...

    # PodGroups: only called with gang scheduling on (the API server serves them).

    def create_pod_groups(
        self, manifests: Sequence[Mapping[str, Any]]
    ) -> Mapping[str, bool | BackendError | InvalidInput]:
        """Group name → created (False: it exists already), or the error."""

    def list_pod_groups(self) -> list[PodGroupView]: ...

    def set_pod_group_min_count(self, name: str, min_count: int) -> None: ...

    def delete_pod_group(self, name: str) -> bool:
        """False when it was gone already."""
