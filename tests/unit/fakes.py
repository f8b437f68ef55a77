"""In-memory fakes of the service's two ports (``SlurmPort``, ``PodPort``, its PodGroups too).

They keep just enough state for a reconcile pass to see the effect of the previous one, and a
shared ``journal`` so tests can check the order of calls across both sides. State changes follow
what real slurmctld did in the recordings under ``tests/data/slurm`` (see ``record.py``):

- ``down``: base state DOWN with the reason (power flags kept: ``down#``, ``down~``);
- ``power_down_force``: the node ends ``idle~`` (IDLE + POWERED_DOWN) with its reason kept;
  slurmctld clears DOWN on the way (``down#`` → ``idle~`` in both 22.05 and 24.11);
- ``resume``: a DOWN node becomes IDLE with no reason (``down~`` → ``idle~``).

``MINIMAL_CONFIG`` is the configuration file the config, CLI and service tests start from.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from bridge.domain.job_failure import SlurmJob
from bridge.domain.nodes import SlurmNode
from bridge.domain.pod_groups import PodGroupView, pod_group_view
from bridge.domain.pods import PodFailure, PodView, pod_view
from bridge.domain.reconcile import SetPodSlurmState
from bridge.domain.verdict import ScaleUpEvent
from bridge.errors import BackendError, InvalidInput

#: The smallest valid bridge.yaml (one CPU pool, defaults elsewhere); tests append or replace lines.
MINIMAL_CONFIG = """\
cluster_name: lab
slurm:
  conf_server: 10.213.0.1:6817
pools:
  - name: cpu
    nodes: cpu-[0-3]
    cpus: 2
    real_memory_mb: 1024
    image: localhost/slurmd:dev
"""

_POWER_FLAGS = frozenset({"POWERING_UP", "POWERING_DOWN", "POWER_DOWN", "NOT_RESPONDING"})


@dataclass(frozen=True)
class Update:
    """One ``update_nodes`` call as the service made it."""

    nodes: tuple[str, ...]
    state: str
    reason: str | None = None


class FakeSlurm:
    """Slurm's node table; ``update_nodes`` records the call and applies simple transitions."""

    def __init__(
        self,
        nodes: Iterable[SlurmNode] = (),
        *,
        now: datetime,
        journal: list[str] | None = None,
    ) -> None:
        self.nodes: dict[str, SlurmNode] = {n.name: n for n in nodes}
        self.now = now
        self.updates: list[Update] = []
        self.journal = journal if journal is not None else []
        #: Raised (once) by the next ``update_nodes`` call, after it was recorded.
        self.fail_next: BackendError | InvalidInput | None = None
        #: Raised by every ``update_nodes`` call to this state, after it was recorded.
        self.state_errors: dict[str, BackendError | InvalidInput] = {}
        #: The jobs ``jobs_on_nodes`` answers from: those that touch one of the names.
        self.jobs: dict[int, SlurmJob] = {}
        #: Raised by ``jobs_on_nodes`` / ``set_jobs_admin_comment`` (every call) when set.
        self.jobs_error: BackendError | None = None
        self.comment_error: BackendError | None = None
        self.jobs_reads: list[tuple[str, ...]] = []
        #: How many times the node table was read, whole or by name.
        self.node_reads = 0
        #: How many times every node was listed (1.5 s and 25 MB at a 10,000-node site).
        self.full_reads = 0
        #: The names of each filtered ``list_nodes(names)`` call.
        self.filtered_reads: list[tuple[str, ...]] = []

    def list_nodes(self, names: Sequence[str] | None = None) -> list[SlurmNode]:
        self.node_reads += 1
        if names is not None:
            self.filtered_reads.append(tuple(names))
            # As scontrol does: each name once, a name Slurm does not know left out.
            return [self.nodes[n] for n in dict.fromkeys(names) if n in self.nodes]
        self.full_reads += 1
        return list(self.nodes.values())

    def update_nodes(self, names: Sequence[str], *, state: str, reason: str | None = None) -> None:
        self.updates.append(Update(tuple(names), state, reason))
        self.journal.append(f"slurm {state} {','.join(names)}")
        if self.fail_next is not None:
            error, self.fail_next = self.fail_next, None
            raise error
        if state in self.state_errors:
            raise self.state_errors[state]
        for name in names:
            node = self.nodes.get(name)
            if node is not None:  # Slurm may know nodes no pool owns; those we do not model
                self.nodes[name] = self._apply(node, state, reason)

    def set_node_addresses(self, addresses: Mapping[str, str]) -> None:
        self.journal.append("slurm nodeaddr " + ",".join(f"{n}={a}" for n, a in addresses.items()))
        for name, address in addresses.items():
            if name in self.nodes:
                self.nodes[name] = dataclasses.replace(self.nodes[name], address=address)

    def set_node_comment(self, names: Sequence[str], comment: str) -> None:
        self.journal.append(f"slurm comment {','.join(names)} {comment!r}")
        for name in names:
            if name in self.nodes:
                self.nodes[name] = dataclasses.replace(self.nodes[name], comment=comment)

    def jobs_on_nodes(self, names: Sequence[str]) -> list[SlurmJob]:
        # A read, like list_nodes: in ``jobs_reads``, not in the journal of changes and re-checks.
        self.jobs_reads.append(tuple(names))
        if self.jobs_error is not None:
            raise self.jobs_error
        wanted = set(names)
        return [job for job in self.jobs.values() if not wanted.isdisjoint(job.node_names)]

    def set_jobs_admin_comment(self, job_ids: Sequence[int], comment: str) -> None:
        self.journal.append(f"slurm admincomment {','.join(map(str, job_ids))} {comment!r}")
        if self.comment_error is not None:
            raise self.comment_error
        for job_id in job_ids:
            self.jobs[job_id] = dataclasses.replace(self.jobs[job_id], admin_comment=comment)

    def _apply(self, node: SlurmNode, state: str, reason: str | None) -> SlurmNode:
        if state == "down":
            return dataclasses.replace(
                node, state="DOWN", reason=reason or "", reason_since=self.now
            )
        if state == "power_down_force":
            flags = (node.flags - _POWER_FLAGS) | {"POWERED_DOWN"}
            return dataclasses.replace(node, state="IDLE", flags=flags)
        if state == "power_down_asap":
            # Slurm drains it with the reason and powers it down once its jobs end.
            flags = node.flags | {"DRAIN", "POWER_DOWN"}
            return dataclasses.replace(
                node, flags=flags, reason=reason or "", reason_since=self.now
            )
        if state == "resume" and node.is_down:
            return dataclasses.replace(node, state="IDLE", reason="", reason_since=None)
        return node


class FakePods:
    """The bridge's pods by node name; errors can be injected per node for create and delete."""

    def __init__(self, *, now: datetime, journal: list[str] | None = None) -> None:
        self.pods: dict[str, PodView] = {}
        self.manifests: dict[str, Mapping[str, Any]] = {}
        self.now = now
        self.journal = journal if journal is not None else []
        self.create_errors: dict[str, BackendError | InvalidInput] = {}
        self.delete_errors: dict[str, BackendError | InvalidInput] = {}
        self.events: list[tuple[str, str, str, bool]] = []
        #: What ``list_scale_up_events`` answers (a cluster autoscaler's Events).
        self.scale_up_events: list[ScaleUpEvent] = []
        #: Every delete's (name, uid, grace period) as asked for.
        self.delete_options: list[tuple[str, str, int | None]] = []
        #: Every create and delete asked for, in order, whatever its outcome.
        self.create_calls: list[str] = []
        self.delete_calls: list[str] = []
        #: Every patch the gateway would send: (pod, "label" | "status").
        self.patches: list[tuple[str, str]] = []
        #: Raised by ``read_pod`` when set (the API server unreachable for a live read).
        self.read_error: BackendError | None = None
        #: The PodGroups by name, as ``list_pod_groups`` answers them (tests set conditions
        #: with ``dataclasses.replace``), and the manifests created.
        self.groups: dict[str, PodGroupView] = {}
        self.group_manifests: dict[str, Mapping[str, Any]] = {}
        #: Per group name: the error its create answers.
        self.group_errors: dict[str, BackendError | InvalidInput] = {}
        #: Raised by ``list_pod_groups`` / ``set_pod_group_min_count`` / ``delete_pod_group``.
        self.list_groups_error: BackendError | None = None
        self.min_count_error: BackendError | None = None
        self.delete_group_error: BackendError | None = None
        #: How many times the PodGroups were listed.
        self.group_lists = 0

    def add(
        self,
        node: str,
        *,
        pool: str = "cpu",
        phase: str = "Running",
        created_at: datetime | None = None,
        failure: PodFailure | None = None,
        deleting: bool = False,
        ip: str = "10.0.0.1",
        pod_group: str | None = None,
    ) -> PodView:
        """Put a pod in place directly (what a previous bridge run left behind)."""
        pod = PodView(
            name=node,
            node=node,
            pool=pool,
            phase=phase,
            ip=ip,
            created_at=created_at or self.now,
            deleting=deleting,
            failure=failure,
            pod_group=pod_group,
        )
        self.pods[node] = pod
        return pod

    def list_pods(self) -> tuple[list[PodView], str]:
        return list(self.pods.values()), "1"

    def create_pods(
        self, manifests: Iterable[Mapping[str, Any]]
    ) -> dict[str, bool | BackendError | InvalidInput]:
        results: dict[str, bool | BackendError | InvalidInput] = {}
        for manifest in manifests:
            name = str(manifest["metadata"]["name"])
            self.create_calls.append(name)
            self.journal.append(f"create {name}")
            if name in self.create_errors:
                results[name] = self.create_errors[name]
            elif name in self.pods:
                results[name] = False
            else:
                stored = {
                    **manifest,
                    "metadata": {
                        **manifest["metadata"],
                        "creationTimestamp": self.now.isoformat(),
                    },
                    "status": {"phase": "Pending"},
                }
                self.manifests[name] = stored
                self.pods[name] = pod_view(stored)
                results[name] = True
        return results

    def record_event(self, pod: str, reason: str, message: str, *, warning: bool = False) -> None:
        self.events.append((pod, reason, message, warning))

    def delete_pods(
        self,
        names: Sequence[str],
        *,
        uids: Mapping[str, str] | None = None,
        grace_period_s: int | None = None,
    ) -> dict[str, bool | BackendError | InvalidInput]:
        results: dict[str, bool | BackendError | InvalidInput] = {}
        for name in names:
            uid = (uids or {}).get(name, "")
            self.delete_calls.append(name)
            self.delete_options.append((name, uid, grace_period_s))
            self.journal.append(f"delete {name}")
            current = self.pods.get(name)
            if name in self.delete_errors:
                results[name] = self.delete_errors[name]
            elif current is not None and uid and current.uid != uid:
                results[name] = False  # the precondition protects a successor
            else:
                results[name] = self.pods.pop(name, None) is not None
        return results

    def read_pod(self, name: str) -> PodView | None:
        self.journal.append(f"read {name}")
        if self.read_error is not None:
            raise self.read_error
        return self.pods.get(name)

    def pod_exists(self, name: str) -> bool:
        self.journal.append(f"read {name}")
        return name in self.pods

    def set_slurm_states(
        self, changes: Sequence[SetPodSlurmState]
    ) -> dict[str, bool | BackendError | InvalidInput]:
        """Patch as ``PodGateway.set_slurm_state`` does: the label and the condition, each
        only if it changed; the stored pod then shows them (as the watch would)."""
        results: dict[str, bool | BackendError | InvalidInput] = {}
        for change in changes:
            pod = self.pods.get(change.node)
            if pod is None:
                results[change.node] = False
                continue
            if change.label_changes:
                self.patches.append((change.node, "label"))
            if change.condition_changes:
                self.patches.append((change.node, "status"))
            self.pods[change.node] = dataclasses.replace(
                pod, slurm_state=change.state, registered=change.registered
            )
            results[change.node] = True
        return results

    def list_scale_up_events(self) -> list[ScaleUpEvent]:
        return list(self.scale_up_events)

    def create_pod_groups(
        self, manifests: Sequence[Mapping[str, Any]]
    ) -> dict[str, bool | BackendError | InvalidInput]:
        results: dict[str, bool | BackendError | InvalidInput] = {}
        for manifest in manifests:
            name = str(manifest["metadata"]["name"])
            self.journal.append(f"create podgroup {name}")
            if name in self.group_errors:
                results[name] = self.group_errors[name]
            elif name in self.groups:
                results[name] = False
            else:
                self.group_manifests[name] = manifest
                stored = {
                    **manifest,
                    "metadata": {**manifest["metadata"], "creationTimestamp": self.now.isoformat()},
                }
                self.groups[name] = pod_group_view(stored)
                results[name] = True
        return results

    def list_pod_groups(self) -> list[PodGroupView]:
        self.group_lists += 1
        if self.list_groups_error is not None:
            raise self.list_groups_error
        return list(self.groups.values())

    def set_pod_group_min_count(self, name: str, min_count: int) -> None:
        self.journal.append(f"podgroup {name} minCount {min_count}")
        if self.min_count_error is not None:
            raise self.min_count_error
        self.groups[name] = dataclasses.replace(self.groups[name], min_count=min_count)

    def delete_pod_group(self, name: str) -> bool:
        self.journal.append(f"delete podgroup {name}")
        if self.delete_group_error is not None:
            raise self.delete_group_error
        return self.groups.pop(name, None) is not None
