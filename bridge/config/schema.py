"""The configuration file's shape as pydantic models: which keys exist and how each is read.

Unknown keys are errors (``extra="forbid"``): a typo that passed silently would leave a default
in force that nobody asked for. Defaults come from :mod:`bridge.settings`; rules about pools
belong to :mod:`bridge.domain.pools`, which this file only feeds.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Self

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    StrictBool,
    model_validator,
)

from bridge.config import field_rules as rules
from bridge.config.field_rules import FieldProblem
from bridge.config.yaml_lines import show
from bridge.domain.circuit import BreakerPolicy
from bridge.domain.pod_templates import (
    auth_template_problems,
    key_template_problems,
    template_image,
    template_problems,
)
from bridge.domain.pods import SLURMD_CONTAINER
from bridge.domain.pools import NodePool, PoolError, PoolSet, dns_label_problem
from bridge.settings import BridgeSettings, KubernetesSettings, SlurmSettings

_FILE = ConfigDict(extra="forbid", frozen=True)


def _section(value: Any) -> Any:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise FieldProblem(f"must be a mapping, got {show(value)}")
    return value


class KubernetesSection(BaseModel):
    """``kubernetes:`` — see :class:`~bridge.settings.KubernetesSettings`."""

    model_config = _FILE

    namespace: Annotated[str, rules.string(dns_label_problem)] = KubernetesSettings.namespace
    kubeconfig: Annotated[str | None, rules.string(rules.non_empty, optional=True)] = None
    context: Annotated[str | None, rules.string(rules.non_empty, optional=True)] = None
    node_service: Annotated[str, rules.string(rules.optional_dns_label)] = (
        KubernetesSettings.node_service
    )
    cluster_domain: Annotated[str, rules.string(rules.subdomain)] = (
        KubernetesSettings.cluster_domain
    )
    leader_election: Annotated[bool, rules.flag()] = KubernetesSettings.leader_election
    lease_name: Annotated[str, rules.string(rules.optional_subdomain)] = (
        KubernetesSettings.lease_name
    )
    leader_identity: Annotated[str, rules.string()] = KubernetesSettings.leader_identity
    lease_duration_s: Annotated[int, rules.count(3600)] = KubernetesSettings.lease_duration_s
    lease_retry_s: Annotated[float, rules.seconds(positive=True)] = KubernetesSettings.lease_retry_s
    gang_scheduling: Annotated[str, rules.gang_setting()] = KubernetesSettings.gang_scheduling

    @model_validator(mode="after")
    def _lease_is_renewed_in_time(self) -> Self:
        # The leader stops writing at two thirds of the duration: it must try to renew several
        # times before that.
        if self.lease_retry_s * 3 > self.lease_duration_s * 2 / 3:
            raise FieldProblem(
                f"must be at most {self.lease_duration_s * 2 / 9:.3g}s with lease_duration_s "
                f"{self.lease_duration_s}: the leader stops writing after two thirds of the "
                "duration and must have tried to renew three times by then",
                ("lease_retry_s",),
            )
        return self


class SlurmSection(BaseModel):
    """``slurm:`` — see :class:`~bridge.settings.SlurmSettings`."""

    model_config = _FILE

    bin_dir: Annotated[str, rules.string(rules.abs_path)] = SlurmSettings.bin_dir
    conf: Annotated[str | None, rules.string(rules.abs_path, optional=True)] = None
    command_timeout_s: Annotated[float, rules.seconds(positive=True)] = (
        SlurmSettings.command_timeout_s
    )
    conf_server: Annotated[str, rules.string(rules.conf_server)] = SlurmSettings.conf_server
    munge_key_secret: Annotated[str, rules.string(rules.subdomain)] = SlurmSettings.munge_key_secret
    auth: Annotated[str, rules.string(rules.slurm_auth)] = SlurmSettings.auth
    slurm_key_secret: Annotated[str, rules.string(rules.subdomain)] = SlurmSettings.slurm_key_secret

    @model_validator(mode="after")
    def _conf_server_is_set(self) -> Self:
        if not self.conf_server:
            raise FieldProblem(
                "required: the host:port slurmd fetches its configuration from "
                "(e.g. 10.213.0.1:6817)",
                ("conf_server",),
            )
        return self


class BreakerSection(BaseModel):
    """``circuit_breaker:`` (in ``bridge:``, or a pool's) — see
    :class:`~bridge.domain.circuit.BreakerPolicy`."""

    model_config = _FILE

    failures: Annotated[int, rules.failure_count()] = BreakerPolicy.failures
    window_s: Annotated[float, rules.seconds(positive=True)] = BreakerPolicy.window_s
    pause_s: Annotated[float, rules.seconds(positive=True)] = BreakerPolicy.pause_s

    @property
    def policy(self) -> BreakerPolicy:
        """The policy this section describes."""
        return BreakerPolicy(self.failures, self.window_s, self.pause_s)


def _breaker(value: Any) -> Any:
    # Written out empty (``circuit_breaker:``) it is None: as if absent (the default, off).
    if value is not None and not isinstance(value, Mapping):
        raise FieldProblem(f"must be a mapping, got {show(value)}")
    return value


class BridgeSection(BaseModel):
    """``bridge:`` — see :class:`~bridge.settings.BridgeSettings`."""

    model_config = _FILE

    socket: Annotated[str, rules.string(rules.abs_path)] = BridgeSettings.socket
    socket_mode: Annotated[int, rules.octal_mode()] = BridgeSettings.socket_mode
    socket_group: Annotated[str | None, rules.string(rules.non_empty, optional=True)] = None
    tcp_listen: Annotated[str | None, rules.string(rules.tcp_listen, optional=True)] = None
    tls_cert: Annotated[str | None, rules.string(rules.abs_path, optional=True)] = None
    tls_key: Annotated[str | None, rules.string(rules.abs_path, optional=True)] = None
    tls_client_ca: Annotated[str | None, rules.string(rules.abs_path, optional=True)] = None
    advertise_address: Annotated[str, rules.string(rules.advertise_address)] = (
        BridgeSettings.advertise_address
    )
    reconcile_interval_s: Annotated[float, rules.seconds(positive=True)] = (
        BridgeSettings.reconcile_interval_s
    )
    pod_age_guard_s: Annotated[float, rules.seconds(positive=False)] = (
        BridgeSettings.pod_age_guard_s
    )
    failed_node_hold_s: Annotated[float, rules.seconds(positive=False)] = (
        BridgeSettings.failed_node_hold_s
    )
    terminating_margin_s: Annotated[float, rules.seconds(positive=False)] = (
        BridgeSettings.terminating_margin_s
    )
    create_concurrency: Annotated[int, rules.count(rules.MAX_CONCURRENCY)] = (
        BridgeSettings.create_concurrency
    )
    log_format: Annotated[str, rules.string(rules.log_format)] = BridgeSettings.log_format
    metrics_address: Annotated[str, rules.string(rules.metrics_address)] = (
        BridgeSettings.metrics_address
    )
    allowed_callers: Annotated[tuple[str, ...], rules.names(rules.caller_names)] = ()
    tls_client_names: Annotated[tuple[str, ...], rules.names()] = ()
    # Not from the environment (a mapping): the file's ``bridge.circuit_breaker``.
    circuit_breaker: Annotated[BreakerSection | None, BeforeValidator(_breaker)] = None

    @model_validator(mode="after")
    def _listeners_are_safe(self) -> Self:
        tls = {
            "tls_cert": self.tls_cert,
            "tls_key": self.tls_key,
            "tls_client_ca": self.tls_client_ca,
        }
        given = [name for name, value in tls.items() if value is not None]
        if given and len(given) != len(tls):
            missing = [name for name in tls if name not in given]
            raise FieldProblem(
                "mutual TLS needs tls_cert, tls_key and tls_client_ca together; "
                f"missing {', '.join(missing)}",
                (given[0],),
            )
        if given and self.tcp_listen is None:
            raise FieldProblem("TLS applies only to tcp_listen, which is not set", (given[0],))
        if given and not self.tls_client_names:
            # A site CA signs many hosts' certificates: each of them could call the bridge.
            raise FieldProblem(
                "mutual TLS needs the client certificates' names (their DNS or URI "
                'subjectAltNames, e.g. [slurmctld.example.org]); ["*"] accepts any '
                "certificate tls_client_ca signed",
                ("tls_client_names",)
                if "tls_client_names" in self.model_fields_set
                else (given[0],),
            )
        if self.advertise_address and not given:
            # Forwarded calls go to the TCP listener, which serves only mutual TLS.
            raise FieldProblem(
                "other bridges forward to this address over mutual TLS: set tcp_listen, "
                "tls_cert, tls_key and tls_client_ca",
                ("advertise_address",),
            )
        if self.tcp_listen is not None and not given and not rules.is_loopback(self.tcp_listen):
            # Anyone who reaches the port could create and delete pods: require client certificates.
            raise FieldProblem(
                "a non-loopback TCP listener needs tls_cert, tls_key and tls_client_ca "
                "(mutual TLS)",
                ("tcp_listen",),
            )
        return self


def _word_list(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        # Slurm writes Features=a,b; accept the same spelling.
        return tuple(word.strip() for word in value.split(",") if word.strip())
    if not isinstance(value, list):
        raise FieldProblem(f"must be a list of strings, got {show(value)}")
    for index, word in enumerate(value):
        if not isinstance(word, str):
            raise FieldProblem(f"must be a string, got {show(word)}", (index,))
    return tuple(value)


def _integer(value: Any) -> Any:
    # The range is the pool's rule (NodePool); the file only has to hold an integer.
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
        raise FieldProblem(f"must be an integer, got {show(value)}")
    return value


def _template(value: Any) -> Any:
    if not value:
        return {}
    if not isinstance(value, Mapping):
        raise FieldProblem(f"must be a mapping, got {show(value)}")
    return value


def _scalar_map(value: Any) -> Any:
    """A mapping of names to scalars (partition_options, gres_resources); empty: none."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise FieldProblem(f"must be a mapping, got {show(value)}")
    for key, item in value.items():
        if isinstance(item, Mapping | list) or item is None:
            raise FieldProblem(f"must be a single value, got {show(item)}", (str(key),))
    return value


_POOL_REQUIRED = ("name", "nodes", "cpus", "real_memory_mb")


class PoolEntry(BaseModel):
    """One item of ``pools:``; validating it builds the :class:`~bridge.domain.pools.NodePool`."""

    model_config = _FILE

    name: Annotated[str, rules.string()]
    nodes: Annotated[str, rules.string()]
    cpus: Annotated[int, rules.count()]
    real_memory_mb: Annotated[int, rules.count()]
    partition: Annotated[str | None, rules.string()] = None  # None: the pool's name
    image: Annotated[str, rules.string()] = ""
    features: Annotated[tuple[str, ...], BeforeValidator(_word_list)] = ()
    gres: Annotated[tuple[str, ...], BeforeValidator(_word_list)] = ()
    weight: Annotated[int | None, BeforeValidator(_integer)] = None
    # Any: a pool's patience is NodePool's rule (type and range); the file only carries it.
    schedule_timeout_s: Any = NodePool.schedule_timeout_s
    image_pull_timeout_s: Any = NodePool.image_pull_timeout_s
    # Any: the template is checked by the domain (template_problems), not by pydantic.
    pod_template: Annotated[Any, BeforeValidator(_template)] = Field(default_factory=dict)
    #: None: the bridge's ``circuit_breaker``.
    circuit_breaker: Annotated[BreakerSection | None, BeforeValidator(_breaker)] = None
    #: A PodDisruptionBudget for the pool's pods (``true``/``false`` only, no "yes").
    disruption_budget: StrictBool = False
    sockets: Annotated[int | None, BeforeValidator(_integer)] = None
    cores_per_socket: Annotated[int | None, BeforeValidator(_integer)] = None
    threads_per_core: Annotated[int | None, BeforeValidator(_integer)] = None
    tmp_disk_mb: Annotated[int | None, BeforeValidator(_integer)] = None
    partition_options: Annotated[Any, BeforeValidator(_scalar_map)] = None
    #: None: the default mapping (gpu -> nvidia.com/gpu); {}: no Gres is requested on the pod.
    gres_resources: Annotated[Any, BeforeValidator(_scalar_map)] = None
    _pool: NodePool | None = PrivateAttr(default=None)

    @model_validator(mode="before")
    @classmethod
    def _is_a_pool(cls, value: Any) -> Any:
        if value is not None and not isinstance(value, Mapping):
            raise FieldProblem(f"must be a mapping, got {show(value)}")
        if not value:
            raise FieldProblem("a pool needs at least " + ", ".join(_POOL_REQUIRED))
        return value

    @model_validator(mode="after")
    def _build_pool(self) -> Self:
        problems = template_problems(self.pod_template)
        if problems:
            where, message = problems[0]
            raise FieldProblem(message, ("pod_template", *where))
        if not self.image and not template_image(self.pod_template):
            raise FieldProblem(
                f"required (or set the image of the {SLURMD_CONTAINER!r} container "
                "in pod_template)",
                ("image",),
            )
        try:
            self._pool = NodePool.create(
                name=self.name,
                nodes=self.nodes,
                cpus=self.cpus,
                real_memory_mb=self.real_memory_mb,
                partition=self.partition,
                image=self.image,
                features=self.features,
                gres=self.gres,
                pod_template=self.pod_template,
                weight=self.weight,
                schedule_timeout_s=self.schedule_timeout_s,
                image_pull_timeout_s=self.image_pull_timeout_s,
                circuit_breaker=self.circuit_breaker.policy if self.circuit_breaker else None,
                disruption_budget=self.disruption_budget,
                sockets=self.sockets,
                cores_per_socket=self.cores_per_socket,
                threads_per_core=self.threads_per_core,
                tmp_disk_mb=self.tmp_disk_mb,
                partition_options=self.partition_options,
                gres_resources=self.gres_resources,
            )
        except PoolError as e:
            raise FieldProblem(e.reason, e.path) from None
        return self

    @property
    def pool(self) -> NodePool:
        """The pool this entry describes (built when the entry was validated)."""
        assert self._pool is not None  # noqa: S101 (set by _build_pool, which always runs)
        return self._pool


def _pool_list(value: Any) -> Any:
    if value is None or value == []:
        raise FieldProblem("at least one pool is required")
    if not isinstance(value, list):
        raise FieldProblem(f"must be a list of pools, got {show(value)}")
    return value


class ConfigFile(BaseModel):
    """The whole file; :meth:`pool_set` holds the pools once they are known to fit together."""

    model_config = _FILE

    #: Required: it labels every pod, and two bridges sharing one in a namespace took each
    #: other's pods for their own (a default shared by every site invited exactly that).
    cluster_name: Annotated[str, rules.string(dns_label_problem)]
    kubernetes: Annotated[KubernetesSection, BeforeValidator(_section)]
    slurm: Annotated[SlurmSection, BeforeValidator(_section)]
    bridge: Annotated[BridgeSection, BeforeValidator(_section)]
    pools: Annotated[tuple[PoolEntry, ...], BeforeValidator(_pool_list)]
    _pool_set: PoolSet | None = PrivateAttr(default=None)

    @model_validator(mode="before")
    @classmethod
    def _every_section(cls, value: Any) -> Any:
        # An absent section is read as an empty one, so its own checks (conf_server) still run.
        if isinstance(value, Mapping):
            # After unknown keys (a misspelt cluster_name is told so, not "required").
            if "cluster_name" not in value and set(value) <= set(cls.model_fields):
                raise FieldProblem(
                    "required: the name this bridge's pods are labelled with, one per bridge in "
                    "a namespace (Slurm's ClusterName is a good one). Up to 0.1.0 it defaulted "
                    "to 'slurm': a bridge whose pods run set `cluster_name: slurm` to keep them",
                    ("cluster_name",),
                )
            return {"kubernetes": None, "slurm": None, "bridge": None, "pools": None, **value}
        return value

    @model_validator(mode="after")
    def _pools_fit_together(self) -> Self:
        try:
            self._pool_set = PoolSet(tuple(entry.pool for entry in self.pools))
        except PoolError as e:
            index = e.pool_index if e.pool_index is not None else 0
            raise FieldProblem(e.reason, ("pools", index, *e.path)) from None
        return self

    @model_validator(mode="after")
    def _pools_leave_the_key_to_the_bridge(self) -> Self:
        # Here, not in PoolEntry: which Secrets hold a key, and which key the bridge mounts,
        # are the slurm section's.
        key_secrets = (self.slurm.munge_key_secret, self.slurm.slurm_key_secret)
        for index, entry in enumerate(self.pools):
            problems = [
                *auth_template_problems(entry.pod_template, self.slurm.auth),
                *key_template_problems(entry.pod_template, key_secrets),
            ]
            if problems:
                where, message = problems[0]
                raise FieldProblem(message, ("pools", index, "pod_template", *where))
        return self

    @property
    def pool_set(self) -> PoolSet:
        """The configured pools."""
        assert self._pool_set is not None  # noqa: S101 (set by _pools_fit_together)
        return self._pool_set


#: The model of each section, by key (the order the file lists them in).
SECTION_MODELS: Mapping[str, type[BaseModel]] = {
    "kubernetes": KubernetesSection,
    "slurm": SlurmSection,
    "bridge": BridgeSection,
}
