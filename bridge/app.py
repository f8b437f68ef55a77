"""Composition root: wire config, adapters, service, gRPC server and the reconcile loop."""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import FrameType
from typing import Protocol

from bridge.adapters.kubernetes import PodEvent, PodGateway, WatchExpired
from bridge.adapters.slurm_cli import SlurmCli, read_slurm_user
from bridge.api import TlsServerFiles, build_server
from bridge.config_reload import ConfigReloader
from bridge.domain.disruption_budget import render_disruption_budgets
from bridge.domain.pods import PodView
from bridge.errors import BridgeError, ConfigError
from bridge.metrics import BridgeMetrics, MetricsServer
from bridge.peer_gate import resolve_uids, user_name
from bridge.pod_cache import NotSynced, PodCache
from bridge.service import BridgeService
from bridge.settings import BridgeConfig

log = logging.getLogger(__name__)


class JsonFormatter(logging.Formatter):
    """One JSON object per line, for log shippers."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S%z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry)


def configure_logging(log_format: str, level: int = logging.INFO) -> None:
    handler = logging.StreamHandler()
    if log_format == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)


class Reconciler:
    """Runs ``reconcile_once`` every interval, and soon after a poke (pod event, RPC)."""

    def __init__(
        self,
        service: BridgeService,
        interval_s: float,
        min_gap_s: float = 0.3,
        *,
        before_pass: Callable[[], object] | None = None,
    ) -> None:
        self.service = service
        self.interval_s = interval_s
        self.min_gap_s = min_gap_s
        #: Runs on this thread before every pass (the config reload), never during one.
        self.before_pass = before_pass
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="reconcile", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def poke(self) -> None:
        self._wake.set()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.interval_s)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                if self.before_pass is not None:
                    self.before_pass()
                actions = self.service.reconcile_once()
                if actions:
                    log.info("reconcile: %d action(s)", len(actions))
            except NotSynced as e:
                # Deciding on an empty view would recreate or fail every node: wait for the list.
                log.info("reconcile pass skipped: %s", e)
            except BridgeError as e:
                log.warning("reconcile pass failed (next pass retries): %s", e)
            except Exception:
                log.exception("reconcile pass crashed (next pass retries)")
            # Pod events arrive in bursts; coalesce them.
            self._stop.wait(self.min_gap_s)


class PodSource(Protocol):
    """What the watcher needs from Kubernetes (``PodGateway``)."""

    def list_pods(self) -> tuple[list[PodView], str]: ...

    def watch(
        self,
        resource_version: str,
        timeout_s: int = 60,
        *,
        on_bookmark: Callable[[str], None] | None = None,
    ) -> Iterator[PodEvent]: ...


class Pokeable(Protocol):
    """What the watcher needs from the reconciler: a nudge to run a pass soon."""

    def poke(self) -> None: ...


class PodWatcher:
    """Keeps ``cache`` current (an informer): lists our pods once, then watches them, applies
    every change to the cache and pokes the reconciler.

    A watch the server ends at its timeout resumes from the last resourceVersion seen (an
    event's or a bookmark's): no list. Every failure leads to the same recovery: list again
    (the list replaces the cache at once), poke the reconciler (the list may hold changes the
    watch missed) and watch from the list's resourceVersion. That is 410 Gone, an ERROR event,
    a dropped connection, a malformed event, or a bug in the client. Repeated failures back off
    exponentially, ``backoff_s`` doubling up to ``max_backoff_s``; a first 410 relists at once.
    Only :meth:`stop` ends the loop.
    """

    def __init__(
        self,
        pods: PodSource,
        reconciler: Pokeable,
        *,
        cache: PodCache | None = None,
        metrics: BridgeMetrics | None = None,
        watch_timeout_s: int = 30,
        backoff_s: float = 0.5,
        max_backoff_s: float = 10.0,
    ) -> None:
        self.pods = pods
        self.reconciler = reconciler
        self.cache = cache or PodCache()
        #: Hears of pods turning Running (the resume latency) and of failed watches.
        self.metrics = metrics
        self.watch_timeout_s = watch_timeout_s
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pod-watch", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, wait_s: float = 0.0) -> bool:
        """Ask the loop to end and wait up to ``wait_s`` for it; True once it has ended.

        A watch blocks until its next event or its timeout, so by default this does not wait.
        """
        self._stop.set()
        if wait_s > 0 and self._thread.is_alive():
            self._thread.join(timeout=wait_s)
        return not self._thread.is_alive()

    def _backoff(self, failures: int) -> float:
        return float(min(self.backoff_s * 2 ** (failures - 1), self.max_backoff_s))

    def _count_error(self, error: BridgeError) -> None:
        # The watch's stream fails outside the adapter's call(): count it where it ends.
        if self.metrics is not None:
            self.metrics.backend_error("kubernetes", type(error).__name__)

    def _run(self) -> None:
        failures = 0  # in a row, without an event or a clean end in between
        listed_ok = False  # whether the cache holds a list the current watch continues
        while not self._stop.is_set():
            version = ""
            try:
                if not listed_ok:
                    listed, version = self.pods.list_pods()
                    self.cache.replace(listed, version)
                    listed_ok = True
                    if failures:
                        log.info(
                            "pod watch recovered: listed %d pod(s), "
                            "watching from resourceVersion %s",
                            len(listed),
                            version,
                        )
                    self.reconciler.poke()
                version = self.cache.version
                events = self.pods.watch(
                    version, timeout_s=self.watch_timeout_s, on_bookmark=self.cache.bookmark
                )
                for event in events:
                    failures = 0
                    log.debug("pod %s %s phase=%s", event.pod.name, event.kind, event.pod.phase)
                    self.cache.apply(event.kind, event.pod, event.resource_version)
                    if self.metrics is not None and event.pod.phase == "Running":
                        self.metrics.pod_running(event.pod.node, time.monotonic())
                    self.reconciler.poke()
                    if self._stop.is_set():
                        return
                # The server ended the watch at its timeout: resume from the last version seen.
                failures = 0
                continue
            except WatchExpired as e:
                self._count_error(e)
                failures += 1
                delay = 0.0 if failures == 1 else self._backoff(failures - 1)
                log.info(
                    "pod watch expired at resourceVersion %s, listing again in %.2fs: %s",
                    version or "-",
                    delay,
                    e,
                )
            except BridgeError as e:
                self._count_error(e)
                failures += 1
                delay = self._backoff(failures)
                log.warning(
                    "pod watch failed (%s), listing again in %.2fs: %s",
                    type(e).__name__,
                    delay,
                    e,
                )
            except Exception:
                # A bug (ours or the client's) must not leave the bridge polling only.
                failures += 1
                delay = self._backoff(failures)
                log.exception("pod watch crashed, listing again in %.2fs", delay)
            listed_ok = False
            self._stop.wait(delay)


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

    def stop(self, grace_s: float = 5.0) -> None:
        self.server.stop(grace_s)  # type: ignore[attr-defined]
        if self.metrics_server is not None:
            self.metrics_server.stop()
        self.watcher.stop()
        self.reconciler.stop()
        # Before the gateway closes: accepted resumes still being created need it.
        self.service.close(grace_s)
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
                "needs get, create, patch on policy/poddisruptionbudgets): %s",
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


def start(config: BridgeConfig) -> Bridge:
    """Connect the adapters, start the gRPC server, the metrics endpoint (when
    ``bridge.metrics_address`` is set), the watch and the reconcile loop."""
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
    service = BridgeService(config, slurm, pods, pod_views=cache, metrics=metrics, cordons=pods)
    reloader = ConfigReloader(service, config.source) if config.source else None
    reconciler = Reconciler(
        service,
        config.bridge.reconcile_interval_s,
        before_pass=reloader.reload_if_due if reloader is not None else None,
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
    )
    server.start()
    watcher = PodWatcher(pods, reconciler, cache=cache, metrics=metrics)
    ensure_disruption_budgets(config, pods)  # before the first pass, which may drain nodes
    reconciler.start()
    watcher.start()
    reconciler.poke()  # converge at once after a (re)start
    log.info(
        "bridge serving on %s%s; namespace %s; pools %s",
        config.bridge.socket,
        f" and {config.bridge.tcp_listen}" if config.bridge.tcp_listen else "",
        config.kubernetes.namespace,
        ", ".join(f"{p.name}={p.nodes}" for p in config.pools),
    )
    return Bridge(service, pods, reconciler, watcher, server, metrics_server, reloader)


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
