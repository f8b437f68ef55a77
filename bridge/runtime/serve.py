"""Composition root: wire config, adapters, service, gRPC server, the reconcile loop and the pod
watcher, and run them until a signal."""

from __future__ import annotations

import functools
import logging
import os
import signal
import threading
import time
from dataclasses import dataclass
from types import FrameType

from bridge import __version__
from bridge.adapters.kubernetes import PodGateway
from bridge.adapters.slurm.cli import SlurmCli, read_slurm_user
from bridge.api import LeaderForwarder, TlsServerFiles, build_server
from bridge.api.peer_gate import resolve_uids, user_name
from bridge.domain.disruption_budget import render_disruption_budgets
from bridge.domain.gang_mode import GANG_OFF, GangMode, gang_mode
from bridge.errors import BridgeError, ConfigError
from bridge.metrics import BridgeMetrics, MetricsServer
from bridge.rpc.tls import TlsFiles
from bridge.runtime.config_reload import ConfigReloader
from bridge.runtime.fencing import FencedPods, FencedSlurm
from bridge.runtime.leadership import Leadership
from bridge.runtime.pod_cache import PodCache
from bridge.runtime.pod_watcher import PodEventRate, PodWatcher
from bridge.runtime.reconciler import Reconciler
from bridge.service.use_cases import BridgeService
from bridge.settings import BridgeConfig

log = logging.getLogger(__name__)


@dataclass
class Bridge:
    """A running bridge: stop() shuts it down gracefully."""

    service: BridgeService
    pods: PodGateway
    reconciler: Reconciler
    watcher: PodWatcher
    server: object
    metrics_server: MetricsServer | None = None
    #: Reloads the configuration file (SIGHUP, or the file changed); None without a file.
    reloader: ConfigReloader | None = None
    #: Leader election (``kubernetes.leader_election``); None when off.
    leadership: Leadership | None = None

    def stop(self, grace_s: float = 5.0) -> None:
        self.server.stop(grace_s)  # type: ignore[attr-defined]
        if self.metrics_server is not None:
            self.metrics_server.stop()
        self.watcher.stop()
        self.reconciler.stop()
        # Before the gateway closes: accepted resumes still being created need it (and the
        # Lease: it is released only after them, so the next leader starts from their result).
        self.service.close(grace_s)
        if self.leadership is not None:
            self.leadership.stop(release=True)
        self.pods.close()


def allowed_caller_uids(config: BridgeConfig) -> frozenset[int]:
    """Who may call over the Unix socket: root, this process's user, Slurm's SlurmUser (whose
    slurmctld runs the hooks) and ``bridge.allowed_callers``."""
    uids = {0, os.geteuid()}
    try:
        slurm_user = read_slurm_user(config.slurm.conf)
    except BridgeError as e:
        log.warning("%s: add SlurmUser to bridge.allowed_callers or its hooks are refused", e)
    else:
        try:
            uids |= resolve_uids([slurm_user])
        except KeyError as e:
            log.warning("SlurmUser %s is not a user on this host: %s", slurm_user, e)
    try:
        uids |= resolve_uids(config.bridge.allowed_callers)
    except KeyError as e:
        raise ConfigError(f"bridge.allowed_callers: {e.args[0]}") from None
    log.info(
        "callers allowed on the socket: %s",
        ", ".join(f"{uid}({user_name(uid)})" for uid in sorted(uids)),
    )
    return frozenset(uids)


def log_slurm_version(slurm: SlurmCli, bin_dir: str) -> None:
    """Log the Slurm release once at start, so that every log of a run says which series'
    behaviour to expect. Not fatal when unknown: slurm.conf may appear later, and the first
    listing probes again."""
    try:
        log.info("Slurm %s at %s", slurm.version(), bin_dir)
    except BridgeError as e:
        log.warning("Slurm version unknown (probed again on first use): %s", e)


def ensure_disruption_budgets(config: BridgeConfig, pods: PodGateway) -> None:
    """Create or patch the PodDisruptionBudget of every pool that asks for one. Not fatal: without
    it ``kubectl drain`` evicts busy pods (their nodes fail fast and Slurm requeues the jobs)."""
    for manifest in render_disruption_budgets(config.pools, config.pod_settings()):
        name = manifest["metadata"]["name"]
        try:
            created = pods.ensure_disruption_budget(manifest)
        except BridgeError as e:
            log.warning(
                "poddisruptionbudget %s not ensured (kubectl drain may evict busy pods; the Role "
                "needs create, patch on policy/poddisruptionbudgets): %s",
                name,
                e,
            )
            continue
        log.info(
            "poddisruptionbudget %s %s: minAvailable %d",
            name,
            "created" if created else "updated",
            manifest["spec"]["minAvailable"],
        )


def discover_gang_mode(config: BridgeConfig, pods: PodGateway) -> GangMode:
    """Gang scheduling on or off (``kubernetes.gang_scheduling`` and the PodGroup API the
    API server serves), logged once: the mode holds until the bridge restarts."""
    setting = config.kubernetes.gang_scheduling
    served, unknown = None, ""
    if setting != GANG_OFF:
        try:
            served = pods.pod_group_api()
        except BridgeError as e:
            unknown = str(e)
    mode = gang_mode(setting, served, unknown=unknown)
    if unknown:
        log.warning("gang scheduling: %s", mode.describe())
    else:
        log.info("gang scheduling: %s", mode.describe())
    return mode


def _always() -> bool:
    return True


def elect(config: BridgeConfig, pods: PodGateway, metrics: BridgeMetrics) -> Leadership:
    """Leader election on the configured Lease (its ``on_started`` is :func:`take_lead`, set
    once the reconciler exists)."""
    k8s = config.kubernetes
    return Leadership(
        pods.lease(k8s.lease(config.cluster_name)),
        k8s.identity(),
        duration_s=k8s.lease_duration_s,
        retry_s=k8s.lease_retry_s,
        observer=metrics.leadership,
        address=config.bridge.forward_address(),
    )


def take_lead(
    config: BridgeConfig, pods: PodGateway, cache: PodCache, reconciler: Reconciler
) -> None:
    """On taking the lead the bridge re-reads everything before it acts: a fresh list of its pods
    replaces the watch's cache (a leader resumed after a pause must not act on the view it had
    before), the pools' disruption budgets are ensured, and a pass is poked (passes read Slurm
    afresh). The list adopts, as a restart's does: the previous leader created the pods since
    this bridge's own first list, and they are the cluster's (a pod left out would be a node
    with no pod under its job)."""
    pods.provenance.adopt_again()
    listed, version = pods.list_pods()
    cache.replace(listed, version)
    ensure_disruption_budgets(config, pods)
    reconciler.poke()


def start(config: BridgeConfig) -> Bridge:
    """Connect the adapters, start the gRPC server, the metrics endpoint (when
    ``bridge.metrics_address`` is set), the watch and the reconcile loop."""
    log.info("slurm-k8s-bridge %s starting", __version__)
    metrics = BridgeMetrics()
    pods = PodGateway.connect(
        kubeconfig=config.kubernetes.kubeconfig,
        context=config.kubernetes.context,
        namespace=config.kubernetes.namespace,
        cluster_name=config.cluster_name,
        concurrency=config.bridge.create_concurrency,
        counters=metrics,
    )
    slurm = SlurmCli(
        bin_dir=config.slurm.bin_dir,
        timeout_s=config.slurm.command_timeout_s,
        conf=config.slurm.conf,
        counters=metrics,
    )
    log_slurm_version(slurm, config.slurm.bin_dir)
    # Reconcile and status read the watch's cache; the watcher below fills it.
    cache = PodCache()
    leadership = elect(config, pods, metrics) if config.kubernetes.leader_election else None
    leading = leadership.leading if leadership is not None else _always
    service = BridgeService(
        config,
        FencedSlurm(slurm, leadership.check) if leadership is not None else slurm,
        FencedPods(pods, leadership.check) if leadership is not None else pods,
        pod_views=cache,
        metrics=metrics,
        cordons=pods,
        gang=discover_gang_mode(config, pods),
    )
    reloader = (
        ConfigReloader(
            service,
            config.source,
            on_pools_changed=lambda new: (
                ensure_disruption_budgets(new, pods) if leading() else None
            ),
        )
        if config.source
        else None
    )
    # A burst: our own creates or deletes in flight, or the pods' events arriving at a burst's
    # rate (a suspend's pods ending after its deletes returned, a drain). Passes are spaced and
    # the watch reads in batches meanwhile.
    pod_events = PodEventRate()

    def bursting() -> bool:
        return service.busy() or pod_events.bursting()

    reconciler = Reconciler(
        service,
        config.bridge.reconcile_interval_s,
        before_pass=reloader.reload_if_due if reloader is not None else None,
        may_run=leading,
        busy=bursting,
    )
    tls = None
    if config.bridge.tls_cert and config.bridge.tls_key and config.bridge.tls_client_ca:
        tls = TlsServerFiles(
            config.bridge.tls_cert, config.bridge.tls_key, config.bridge.tls_client_ca
        )
    # Before the gRPC server binds its socket: a bad or busy address stops the bridge before it
    # serves anything, and leaves no socket behind.
    metrics_server = (
        metrics.serve(config.bridge.metrics_address) if config.bridge.metrics_address else None
    )
    # A follower forwards the hooks' calls to the leader with its own certificate (issue 32).
    forwarder = (
        LeaderForwarder(TlsFiles(*tls), config.kubernetes.identity())
        if leadership is not None and tls is not None
        else None
    )
    server = build_server(
        service,
        allowed_uids=allowed_caller_uids(config),
        allowed_client_names=frozenset(config.bridge.tls_client_names),
        unix_socket=config.bridge.socket or None,
        socket_mode=config.bridge.socket_mode,
        socket_group=config.bridge.socket_group,
        tcp_listen=config.bridge.tcp_listen,
        tls=tls,
        metrics=metrics,
        leader=leadership,
        forwarder=forwarder,
    )
    server.start()
    watcher = PodWatcher(
        pods, reconciler, cache=cache, metrics=metrics, busy=bursting, rate=pod_events
    )
    if leadership is None:
        metrics.leader.set(1)
        ensure_disruption_budgets(config, pods)  # before the first pass, which may drain nodes
    reconciler.start()
    watcher.start()
    if leadership is not None:
        # The budgets and the first pass follow when it leads.
        leadership.on_started = functools.partial(take_lead, config, pods, cache, reconciler)
        leadership.start()
    reconciler.poke()  # converge at once after a (re)start
    log.info(
        "bridge serving on %s%s; namespace %s; pools %s",
        config.bridge.socket,
        f" and {config.bridge.tcp_listen}" if config.bridge.tcp_listen else "",
        config.kubernetes.namespace,
        ", ".join(f"{p.name}={p.nodes}" for p in config.pools),
    )
    return Bridge(service, pods, reconciler, watcher, server, metrics_server, reloader, leadership)


def serve(config: BridgeConfig) -> int:
    """Run until SIGTERM/SIGINT, then shut down gracefully."""
    bridge = start(config)
    stopping = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        log.info("signal %d: shutting down", signum)
        stopping.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    reloader = bridge.reloader
    if reloader is not None:

        def on_hangup(_signum: int, _frame: FrameType | None) -> None:
            # The reconcile thread reloads before its next pass: no lock in a signal handler.
            log.info("SIGHUP: reloading %s", reloader.path)
            reloader.request()
            bridge.reconciler.poke()

        signal.signal(signal.SIGHUP, on_hangup)
    while not stopping.is_set():
        stopping.wait(1.0)
    started = time.monotonic()
    bridge.stop()
    log.info("stopped in %.1fs", time.monotonic() - started)
    return 0
