"""The bridge's settings as the rest of the program sees them: frozen values and their defaults.

Reading them from a file and the environment is :mod:`bridge.config`'s job; this module stays
standard library only, because slurmctld's hooks import it (for the socket path) on every call.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bridge.domain.circuit import BreakerPolicy
    from bridge.domain.pod_rendering import PodSettings
    from bridge.domain.pools import NodePool, PoolSet

#: Where the bridge listens next to slurmctld, and where hooks and the CLI call it.
DEFAULT_SOCKET_PATH = "/run/slurm-k8s-bridge/bridge.sock"
#: :data:`DEFAULT_SOCKET_PATH` as a gRPC target.
DEFAULT_TARGET = "unix:" + DEFAULT_SOCKET_PATH
#: The configuration file read when neither --config nor $SKB_CONFIG names one.
DEFAULT_CONFIG_PATH = "/etc/slurm-k8s-bridge/bridge.yaml"


#: The pip entry points' hooks.env (``$SKB_HOOKS_ENV`` names another): slurmctld passes the
#: hooks no SKB_* variables.
HOOKS_ENV_PATH = "/etc/slurm-k8s-bridge/hooks.env"


def hooks_env_path(resume_program: Path, environ: Mapping[str, str]) -> Path:
    """The hooks.env the hook ``resume_program`` reads: a pip entry point's
    (``$SKB_HOOKS_ENV``, else :data:`HOOKS_ENV_PATH`), else hook.sh's: beside the hook as
    slurm.conf names it, else beside the real file (symlinks resolved)."""
    if resume_program.name.startswith("slurm-k8s-bridge-"):
        return Path(environ.get("SKB_HOOKS_ENV") or HOOKS_ENV_PATH)
    beside = resume_program.parent / "hooks.env"
    if beside.exists():
        return beside
    return resume_program.resolve().parent / "hooks.env"


def hooks_env_values(text: str, keys: Collection[str]) -> dict[str, str]:
    """The ``keys`` a hooks.env sets, as hook.sh reads it: whole ``KEY=value`` lines (split at
    ``\\n`` only), the last one winning, one pair of matching quotes stripped, nothing else
    trimmed, no code run. The hooks read it on every call, ``doctor`` to check them."""
    found: dict[str, str] = {}
    for line in text.split("\n"):
        key, sep, value = line.partition("=")
        if sep and key in keys:
            if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
                value = value[1:-1]
            found[key] = value
    return found


@dataclass(frozen=True)
class KubernetesSettings:
    """Where the pods go and which credentials create them."""

    namespace: str = "slurm"
    kubeconfig: str | None = None  # None: in-cluster service account
    context: str | None = None  # None: the kubeconfig's current context
    #: Headless Service (deploy/kustomize/base) whose domain names every pod; "" for none.
    node_service: str = "slurm-nodes"
    cluster_domain: str = "cluster.local"
    #: Two bridges (beside a primary and a backup slurmctld) elect one on a Lease; off for one.
    leader_election: bool = False
    #: The Lease's name; "": ``slurm-k8s-bridge-<cluster_name>``.
    lease_name: str = ""
    #: This bridge's name in the Lease; "": the host's name. Stable across restarts, so a
    #: restarted leader takes its Lease back at once; different for each bridge.
    leader_identity: str = ""
    #: How long a Lease holds without renewal; the leader stops writing after two thirds of it.
    lease_duration_s: int = 15
    #: How often each bridge reads (and the leader renews) the Lease.
    lease_retry_s: float = 2.0
    #: ``auto``: a multi-node job's pods go in one PodGroup (bound together or none) when the
    #: API server serves the PodGroup API; ``off``: placed one by one (bridge.domain.gangs).
    gang_scheduling: str = "auto"

    def lease(self, cluster_name: str) -> str:
        return self.lease_name or f"slurm-k8s-bridge-{cluster_name}"

    def identity(self) -> str:
        return self.leader_identity or os.uname().nodename


@dataclass(frozen=True)
class SlurmSettings:
    """How the bridge runs the Slurm CLI and what slurmd in a pod needs to reach slurmctld."""

    conf_server: str = ""  # host[:port][,host[:port]] for `slurmd --conf-server`; required
    bin_dir: str = "/usr/bin"
    conf: str | None = None  # SLURM_CONF for the CLI; None: Slurm's default
    command_timeout_s: float = 10.0
    munge_key_secret: str = "slurm-munge-key"  # noqa: S105 (the Secret's name)
    #: How slurmd in a pod authenticates: "munge" (munge_key_secret) or "slurm" (auth/slurm,
    #: Slurm 23.11+: slurm_key_secret, and no munge Secret is needed).
    auth: str = "munge"
    slurm_key_secret: str = "slurm-key"  # noqa: S105 (the Secret's name; it holds slurm.key)


@dataclass(frozen=True)
class BridgeSettings:
    """The bridge process: where it listens and how it paces its work."""

    socket: str = DEFAULT_SOCKET_PATH
    socket_mode: int = 0o660
    socket_group: str | None = None
    tcp_listen: str | None = None  # host:port; needs mutual TLS unless on loopback
    tls_cert: str | None = None
    tls_key: str | None = None
    tls_client_ca: str | None = None
    #: ``host:port`` where the other bridges of a leader election reach this one's TCP listener
    #: to forward the hooks' calls while it leads; "" (the default): ``tcp_listen`` when it
    #: names a host, else none.
    advertise_address: str = ""
    reconcile_interval_s: float = 5.0
    pod_age_guard_s: float = 30.0
    failed_node_hold_s: float = 30.0
    #: A pod still terminating this long past its grace period is force-deleted (its kubelet
    #: is gone; nobody else will confirm the delete, and the node's next pod needs the name).
    terminating_margin_s: float = 15.0
    #: Pod creates (and deletes) in flight; 64 keeps pace with one API server (issue 11).
    create_concurrency: int = 64
    log_format: str = "text"
    #: host:port of the Prometheus endpoint (``/metrics``); "" (the default) serves none.
    metrics_address: str = ""
    #: Who may call over the Unix socket, as user names or uids (checked with SO_PEERCRED).
    #: root, the bridge's own user and Slurm's SlurmUser are always allowed.
    allowed_callers: tuple[str, ...] = ()
    #: Over TCP: client certificate CNs/SANs allowed to call; empty allows any certificate
    #: signed by ``tls_client_ca``.
    tls_client_names: tuple[str, ...] = ()
    #: The circuit breaker of every pool that sets none: ``failures`` fail-fasts within
    #: ``window_s`` stop that pool's pods for ``pause_s``. None (the default): off.
    circuit_breaker: BreakerPolicy | None = None

    def forward_address(self) -> str:
        """Where a follower forwards the hooks' calls while this bridge leads ("" none)."""
        if self.advertise_address:
            return self.advertise_address
        if self.tcp_listen is None:
            return ""
        host = self.tcp_listen.rsplit(":", 1)[0].strip("[]")
        return "" if host in ("", "0.0.0.0", "::") else self.tcp_listen  # noqa: S104 (a check)


#: The file's sections, in the order they are read and written.
SECTIONS: Mapping[str, type[Any]] = {
    "kubernetes": KubernetesSettings,
    "slurm": SlurmSettings,
    "bridge": BridgeSettings,
}


@dataclass(frozen=True)
class BridgeConfig:
    """Everything the bridge is configured with; ``source`` is where it was read from."""

    pools: PoolSet
    cluster_name: str = "slurm"
    kubernetes: KubernetesSettings = field(default_factory=KubernetesSettings)
    slurm: SlurmSettings = field(default_factory=SlurmSettings)
    bridge: BridgeSettings = field(default_factory=BridgeSettings)
    source: str = field(default="", compare=False)

    def pod_settings(self) -> PodSettings:
        """What :func:`~bridge.domain.pod_rendering.render_pod` needs from this configuration."""
        # Imported here: the hooks import this module and need none of the domain.
        from bridge.domain.pod_rendering import PodSettings  # noqa: PLC0415

        return PodSettings(
            namespace=self.kubernetes.namespace,
            cluster_name=self.cluster_name,
            conf_server=self.slurm.conf_server,
            munge_key_secret=self.slurm.munge_key_secret,
            auth=self.slurm.auth,
            slurm_key_secret=self.slurm.slurm_key_secret,
            node_service=self.kubernetes.node_service,
            cluster_domain=self.kubernetes.cluster_domain,
        )

    def to_dict(self) -> dict[str, Any]:
        """The configuration as the YAML file would hold it (loads back to an equal config)."""
        result: dict[str, Any] = {"cluster_name": self.cluster_name}
        for name in SECTIONS:
            section = getattr(self, name)
            result[name] = {f.name: getattr(section, f.name) for f in fields(section)}
        result["bridge"]["socket_mode"] = f"0{self.bridge.socket_mode:o}"
        breaker = self.bridge.circuit_breaker
        result["bridge"]["circuit_breaker"] = breaker.as_dict() if breaker else None
        result["pools"] = [_pool_to_dict(pool) for pool in self.pools]
        return result


def _pool_to_dict(pool: NodePool) -> dict[str, Any]:
    return {
        "name": pool.name,
        "nodes": pool.nodes,
        "cpus": pool.cpus,
        "real_memory_mb": pool.real_memory_mb,
        "partition": pool.partition,
        "image": pool.image,
        "features": list(pool.features),
        "gres": list(pool.gres),
        "weight": pool.weight,
        "schedule_timeout_s": pool.schedule_timeout_s,
        "image_pull_timeout_s": pool.image_pull_timeout_s,
        "pod_template": _plain(pool.pod_template),
        "circuit_breaker": pool.circuit_breaker.as_dict() if pool.circuit_breaker else None,
        "disruption_budget": pool.disruption_budget,
        "sockets": pool.sockets,
        "cores_per_socket": pool.cores_per_socket,
        "threads_per_core": pool.threads_per_core,
        "tmp_disk_mb": pool.tmp_disk_mb,
        "partition_options": dict(pool.partition_options),
        "gres_resources": dict(pool.gres_resources),
    }


def _plain(value: Any) -> Any:
    # The pool keeps its template behind a read-only proxy that yaml cannot dump.
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value
