"""Node pools: which Slurm nodes exist, what Slurm should believe about them, and how to run them.

A pool is a Slurm hostlist (``gpu-[0-63]``) plus the node shape Slurm is told (CPUs, RealMemory,
Features, Gres, partition) plus the pod template the bridge fills in for each node. The pod name is
the Slurm node name, so every node name must also be a valid pod name and hostname.

Validation errors are :class:`PoolError` (a :class:`~bridge.errors.ConfigError`) carrying the path
of the field that is wrong, so the config loader can point at the file line that holds it.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from functools import cached_property
from types import MappingProxyType
from typing import Any

from bridge.domain.circuit import BreakerPolicy
from bridge.domain.field_path import FieldPath, dotted
from bridge.domain.hostlist import expand
from bridge.domain.verdict import Patience
from bridge.errors import ConfigError, HostlistError

# Kubernetes' DNS-1123 label: pod hostnames (spec.hostname) must be one, so node names must too.
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS_LABEL_MAX = 63
# Slurm splits Features/Gres lists on commas and node lines on blanks; '=' would end a value.
_SLURM_WORD = re.compile(r"[A-Za-z0-9_.:+\-]+")
# Slurm's Weight is a uint32 with the top values reserved (INFINITE and friends).
_MAX_WEIGHT = 0xFFFFFFF0
#: A pool's patience (schedule, image pull) is at most a year: beyond that it is a typo, and
#: timedelta and the reconcile arithmetic would overflow long before a float does.
MAX_PATIENCE_S = 365 * 24 * 3600.0
# slurm.conf treats these names specially (NodeName=DEFAULT, PartitionName=DEFAULT, ...).
_RESERVED_SLURM_NAMES = frozenset({"default", "all", "localhost"})
#: The PartitionName options a pool may pass through (slurm.conf's spelling). Not Nodes, State,
#: Default (--default-partition) nor the power-save timing: the render writes those.
PARTITION_OPTIONS = (
    "AllocNodes", "AllowAccounts", "AllowGroups", "AllowQos", "CpuBind", "DefCpuPerGPU",
    "DefMemPerCPU", "DefMemPerGPU", "DefMemPerNode", "DefaultTime", "DenyAccounts", "DenyQos",
    "DisableRootJobs", "ExclusiveUser", "GraceTime", "Hidden", "LLN", "MaxCPUsPerNode",
    "MaxMemPerCPU", "MaxMemPerNode", "MaxNodes", "MaxTime", "MinNodes", "OverSubscribe",
    "PreemptMode", "PriorityJobFactor", "PriorityTier", "QOS", "ReqResv", "RootOnly",
    "SelectTypeParameters", "TRESBillingWeights",
)  # fmt: skip
_PARTITION_OPTION_KEYS = {key.lower(): key for key in PARTITION_OPTIONS}
# A partition option's value: one slurm.conf word (lists with ',', TRESBillingWeights' '=').
_SLURM_VALUE = re.compile(r"[A-Za-z0-9_.:+\-,=*@/%]+")
#: Which Kubernetes extended resource a Gres asks of the pod, unless the pool says otherwise.
DEFAULT_GRES_RESOURCES = (("gpu", "nvidia.com/gpu"),)
# An extended resource's name: a domain-qualified Kubernetes name.
_EXTENDED_RESOURCE = re.compile(
    r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?"
)
_TOPOLOGY = ("sockets", "cores_per_socket", "threads_per_core")


class PoolError(ConfigError):
    """A pool is invalid; ``path`` leads to the pool field at fault (``("features", 0)``).

    ``pool_index`` is set when the error is about the pool's place in a :class:`PoolSet`
    (duplicate names, a node owned twice); the config loader uses both to find the line.
    """

    def __init__(
        self, pool: str, path: FieldPath, message: str, pool_index: int | None = None
    ) -> None:
        super().__init__(f"pool {pool!r}: {dotted(path)}: {message}")
        self.pool = pool
        self.path = path
        self.reason = message
        self.pool_index = pool_index

    @property
    def field(self) -> str:
        """The path as text, as the message shows it (``features[0]``)."""
        return dotted(self.path)


def dns_label_problem(value: str) -> str | None:
    """Why ``value`` is not a DNS-1123 label (Kubernetes' rule for hostnames), or ``None``."""
    if not value:
        return "must not be empty"
    if len(value) > _DNS_LABEL_MAX:
        return f"{value!r} is {len(value)} characters, more than {_DNS_LABEL_MAX}"
    if not _DNS_LABEL.fullmatch(value):
        return (
            f"{value!r} is not a DNS-1123 label "
            "(lower-case letters, digits and '-', starting and ending with a letter or digit)"
        )
    return None


@dataclass(frozen=True)
class NodePool:
    """One pool of Slurm nodes backed by pods built from one template.

    ``nodes`` is the hostlist as written; ``node_names`` its expansion (use :meth:`create` to get
    it computed). ``pod_template`` is the user's pod fragment (``metadata`` and ``spec``), kept
    read-only; renderers must deep-copy it before changing anything.
    """

    name: str
    nodes: str
    node_names: tuple[str, ...]
    cpus: int
    real_memory_mb: int
    partition: str
    image: str = ""
    features: tuple[str, ...] = ()
    gres: tuple[str, ...] = ()
    # A dict is unhashable: leave it out of the hash (equality still compares it).
    pod_template: Mapping[str, Any] = field(default_factory=dict, hash=False)
    weight: int | None = None
    #: Unschedulable this long fails the node (an autoscaler needs minutes to add a node).
    schedule_timeout_s: float = 300.0
    #: A retrying image pull this long after scheduling fails the node.
    image_pull_timeout_s: float = 120.0
    #: This pool's circuit breaker; None: the bridge's default (``bridge.circuit_breaker``).
    circuit_breaker: BreakerPolicy | None = None
    #: Whether the bridge keeps a PodDisruptionBudget for the pool's pods (see
    #: ``disruption_budget``): ``kubectl drain`` then waits for the Slurm node's jobs.
    disruption_budget: bool = False
    #: The node's topology on its NodeName line (Sockets, CoresPerSocket, ThreadsPerCore: all
    #: three or none, their product the CPUs; TmpDisk in MB); None: not written (Slurm's
    #: default: one core per CPU, one socket each, which task/affinity then binds by).
    sockets: int | None = None
    cores_per_socket: int | None = None
    threads_per_core: int | None = None
    tmp_disk_mb: int | None = None
    #: Options of the pool's PartitionName line (keys of :data:`PARTITION_OPTIONS`), in order;
    #: pools that share a partition give the same.
    partition_options: tuple[tuple[str, str], ...] = ()
    #: Gres name -> the extended resource its count is requested as on the pod (see
    #: :meth:`gres_requests`).
    gres_resources: tuple[tuple[str, str], ...] = DEFAULT_GRES_RESOURCES

    def __post_init__(self) -> None:
        # Deep copy: a caller changing its dict later must not change the pool.
        template = copy.deepcopy(dict(self.pod_template))
        object.__setattr__(self, "pod_template", MappingProxyType(template))
        self._validate()
        # Seconds are floats whichever way they were written (300 or 300.0).
        for field_name in ("schedule_timeout_s", "image_pull_timeout_s"):
            object.__setattr__(self, field_name, float(getattr(self, field_name)))

    @classmethod
    def create(
        cls,
        *,
        name: str,
        nodes: str,
        cpus: int,
        real_memory_mb: int,
        partition: str | None = None,
        image: str = "",
        features: Iterable[str] = (),
        gres: Iterable[str] = (),
        pod_template: Mapping[str, Any] | None = None,
        weight: int | None = None,
        schedule_timeout_s: float = 300.0,
        image_pull_timeout_s: float = 120.0,
        circuit_breaker: BreakerPolicy | None = None,
        disruption_budget: bool = False,
        sockets: int | None = None,
        cores_per_socket: int | None = None,
        threads_per_core: int | None = None,
        tmp_disk_mb: int | None = None,
        partition_options: Mapping[str, Any] | None = None,
        gres_resources: Mapping[str, str] | None = None,
    ) -> NodePool:
        """Build a pool from its hostlist; the partition defaults to the pool's name."""
        try:
            names = tuple(expand(nodes))
        except HostlistError as e:
            raise PoolError(name, ("nodes",), str(e)) from e
        return cls(
            name=name,
            nodes=nodes.strip(),
            node_names=names,
            cpus=cpus,
            real_memory_mb=real_memory_mb,
            partition=name if partition is None else partition,
            image=image,
            features=tuple(features),
            gres=tuple(gres),
            pod_template=pod_template or {},
            weight=weight,
            schedule_timeout_s=schedule_timeout_s,
            image_pull_timeout_s=image_pull_timeout_s,
            circuit_breaker=circuit_breaker,
            disruption_budget=disruption_budget,
            sockets=sockets,
            cores_per_socket=cores_per_socket,
            threads_per_core=threads_per_core,
            tmp_disk_mb=tmp_disk_mb,
            partition_options=_partition_options(name, partition_options or {}),
            gres_resources=(
                DEFAULT_GRES_RESOURCES
                if gres_resources is None
                else tuple((str(k), str(v)) for k, v in gres_resources.items())
            ),
        )

    def _fail(self, path: str | FieldPath, message: str) -> PoolError:
        return PoolError(self.name, (path,) if isinstance(path, str) else path, message)

    def _validate(self) -> None:
        problem = dns_label_problem(self.name)
        if problem:
            # The name is a label value on every pod: keep it to the strictest common rule.
            raise self._fail("name", problem)
        self._validate_nodes()
        self._validate_shape()
        if any(c.isspace() for c in self.image):
            raise self._fail("image", f"{self.image!r} contains blanks")
        self._validate_topology()
        for gres, resource in self.gres_resources:
            if not _SLURM_WORD.fullmatch(gres) or ":" in gres:
                raise self._fail(("gres_resources",), f"{gres!r} is not a Gres name")
            if not _EXTENDED_RESOURCE.fullmatch(resource):
                raise self._fail(
                    ("gres_resources", gres),
                    f"{resource!r} is not an extended resource name (domain/name, e.g. "
                    "nvidia.com/gpu)",
                )

    def _validate_topology(self) -> None:
        for field_name in (*_TOPOLOGY, "tmp_disk_mb"):
            value = getattr(self, field_name)
            minimum = 0 if field_name == "tmp_disk_mb" else 1
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value < minimum
            ):
                raise self._fail(field_name, f"must be an integer of at least {minimum}")
        given = [name for name in _TOPOLOGY if getattr(self, name) is not None]
        if given and len(given) < len(_TOPOLOGY):
            missing = [name for name in _TOPOLOGY if name not in given]
            raise self._fail(missing[0], f"required with {', '.join(given)} (all three or none)")
        if given:
            sockets, cores, threads = (getattr(self, name) for name in _TOPOLOGY)
            if sockets * cores * threads != self.cpus:
                raise self._fail(
                    "cpus",
                    f"{self.cpus} is not sockets x cores_per_socket x threads_per_core "
                    f"({sockets} x {cores} x {threads} = {sockets * cores * threads})",
                )

    def gres_requests(self) -> dict[str, str]:
        """The extended resources the pod asks for its Gres: each Gres whose name
        ``gres_resources`` maps, its counts summed (``gpu:a100:2`` and ``gpu:1``: 3; no count:
        1). Requested and limited alike (Kubernetes requires it of extended resources)."""
        mapped = dict(self.gres_resources)
        counts: dict[str, int] = {}
        for word in self.gres:
            name, *rest = word.split(":")
            resource = mapped.get(name)
            if resource is not None:
                count = int(rest[-1]) if rest and rest[-1].isdigit() else 1
                counts[resource] = counts.get(resource, 0) + count
        return {resource: str(count) for resource, count in counts.items()}

    def _validate_nodes(self) -> None:
        if not self.node_names:
            raise self._fail("nodes", f"{self.nodes!r} names no nodes")
        seen: set[str] = set()
        for node in self.node_names:
            problem = dns_label_problem(node)
            if problem:
                raise self._fail("nodes", f"node {node!r} cannot be a pod name: {problem}")
            if node in _RESERVED_SLURM_NAMES:
                raise self._fail("nodes", f"node {node!r} is a name slurm.conf reserves")
            if node in seen:
                raise self._fail("nodes", f"node {node!r} is listed twice")
            seen.add(node)

    def _validate_shape(self) -> None:
        for field_name in ("cpus", "real_memory_mb"):
            value = getattr(self, field_name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise self._fail(field_name, f"must be a positive integer, got {value!r}")
        if not self.partition or not _SLURM_WORD.fullmatch(self.partition):
            raise self._fail(
                "partition",
                f"{self.partition!r} is not a Slurm partition name (no blanks, ',' or '=')",
            )
        if self.partition.lower() in _RESERVED_SLURM_NAMES:
            raise self._fail("partition", f"{self.partition!r} is a name slurm.conf reserves")
        for field_name in ("features", "gres"):
            for index, word in enumerate(getattr(self, field_name)):
                if not isinstance(word, str) or not _SLURM_WORD.fullmatch(word):
                    raise self._fail(
                        (field_name, index),
                        f"{word!r} is not a single Slurm word (no blanks, ',' or '=')",
                    )
        if self.weight is not None and (
            isinstance(self.weight, bool)
            or not isinstance(self.weight, int)
            or not 0 <= self.weight <= _MAX_WEIGHT
        ):
            raise self._fail(
                "weight", f"must be an integer from 0 to {_MAX_WEIGHT}, got {self.weight!r}"
            )
        for field_name in ("schedule_timeout_s", "image_pull_timeout_s"):
            value = getattr(self, field_name)
            # NaN fails every comparison; a huge int is compared as an int (float() overflows).
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not 0 < value <= MAX_PATIENCE_S
            ):
                raise self._fail(
                    field_name,
                    f"must be a positive number up to {MAX_PATIENCE_S:g} (seconds), got {value!r}",
                )

    @property
    def patience(self) -> Patience:
        """How long this pool's pods may be held up before their node is failed."""
        return Patience(
            schedule_timeout=timedelta(seconds=self.schedule_timeout_s),
            image_pull_timeout=timedelta(seconds=self.image_pull_timeout_s),
        )

    @cached_property
    def node_set(self) -> frozenset[str]:
        """The pool's nodes as a set, for fast membership tests."""
        return frozenset(self.node_names)

    def __contains__(self, node: object) -> bool:
        return node in self.node_set


def _partition_options(pool: str, given: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """``given`` with each key in slurm.conf's spelling; refuses a key the pool may not set
    and a value that is not one slurm.conf word."""
    options: list[tuple[str, str]] = []
    for key, value in given.items():
        canonical = _PARTITION_OPTION_KEYS.get(str(key).lower())
        if canonical is None:
            raise PoolError(
                pool,
                ("partition_options", str(key)),
                "not a partition option a pool may set (one of: "
                + ", ".join(PARTITION_OPTIONS)
                + "; the render writes Nodes, State, Default and the power-save timing)",
            )
        text = ("YES" if value else "NO") if isinstance(value, bool) else str(value)
        if isinstance(value, Mapping | list) or not _SLURM_VALUE.fullmatch(text):
            raise PoolError(
                pool,
                ("partition_options", str(key)),
                f"{value!r} is not one slurm.conf word (no blanks, quotes or '#')",
            )
        options.append((canonical, text))
    return tuple(options)


@dataclass(frozen=True)
class PoolSet:
    """All configured pools; no node belongs to two of them, pool names are unique."""

    pools: tuple[NodePool, ...] = ()
    _owner: Mapping[str, NodePool] = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "pools", tuple(self.pools))
        owner: dict[str, NodePool] = {}
        names: dict[str, int] = {}
        for index, pool in enumerate(self.pools):
            if pool.name in names:
                raise PoolError(
                    pool.name,
                    ("name",),
                    f"pools[{names[pool.name]}] already uses this name",
                    pool_index=index,
                )
            names[pool.name] = index
            for node in pool.node_names:
                other = owner.get(node)
                if other is not None:
                    raise PoolError(
                        pool.name,
                        ("nodes",),
                        f"node {node!r} is also in pool {other.name!r}; a node belongs to one pool",
                        pool_index=index,
                    )
                owner[node] = pool
        first_in: dict[str, NodePool] = {}
        for index, pool in enumerate(self.pools):
            first = first_in.setdefault(pool.partition, pool)
            if first.partition_options != pool.partition_options:
                raise PoolError(
                    pool.name,
                    ("partition_options",),
                    f"pool {first.name!r} shares partition {pool.partition!r} with other "
                    "partition_options; pools of one partition give the same",
                    pool_index=index,
                )
        object.__setattr__(self, "_owner", MappingProxyType(owner))

    def pool_for(self, node: str) -> NodePool | None:
        """The pool that owns ``node``, or ``None`` when no pool does."""
        return self._owner.get(node)

    def owns(self, node: str) -> bool:
        """Whether some pool owns ``node``."""
        return node in self._owner

    def all_nodes(self) -> tuple[str, ...]:
        """Every node of every pool, in configuration order."""
        return tuple(node for pool in self.pools for node in pool.node_names)

    def by_name(self, name: str) -> NodePool | None:
        """The pool called ``name``, or ``None``."""
        return next((pool for pool in self.pools if pool.name == name), None)

    def partitions(self) -> dict[str, tuple[NodePool, ...]]:
        """Partition name → the pools in it, both in configuration order."""
        result: dict[str, list[NodePool]] = {}
        for pool in self.pools:
            result.setdefault(pool.partition, []).append(pool)
        return {name: tuple(pools) for name, pools in result.items()}

    def group(self, nodes: Iterable[str]) -> tuple[dict[str, list[str]], list[str]]:
        """Split ``nodes`` into ``{pool name: nodes}`` and the nodes no pool owns (order kept)."""
        grouped: dict[str, list[str]] = {}
        unknown: list[str] = []
        for node in nodes:
            pool = self._owner.get(node)
            if pool is None:
                unknown.append(node)
            else:
                grouped.setdefault(pool.name, []).append(node)
        return grouped, unknown

    def __iter__(self) -> Iterator[NodePool]:
        return iter(self.pools)

    def __len__(self) -> int:
        return len(self.pools)
