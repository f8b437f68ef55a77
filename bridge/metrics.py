"""``BridgeMetrics``: the bridge's Prometheus metrics, in a registry of its own, and their endpoint.

Every metric is named ``slurm_k8s_bridge_*`` and every label value is bounded (RPC names,
outcomes, status codes, pools, pod phases, power states, reason kinds, action kinds, error
classes): node names never become labels, so ten thousand nodes are still a few dozen series.

Who feeds what:

* the gRPC interceptor (``bridge.api.metrics_interceptor``): ``rpc_calls_total``;
* the service: resume arrival, suspend, fail-fasts, each reconcile pass (its duration, actions,
  the pod and node gauges, and the Slurm states that end the resume latency's later stages);
* the pod watcher (``bridge.runtime.pod_watcher``): a pod seen Running;
* the adapters, through :class:`~bridge.adapters.call_counters.CallCounters`: backend errors and
  retries (a rejected Kubernetes token is ``backend_errors{kind="Unauthorized"}``, zero from the
  start), and the patches that show Slurm's state on the pods (label, ``registered`` condition).

The registry is the instance's, not prometheus_client's global one, so tests (and two bridges in
one process) never collide on a metric name.
"""

from __future__ import annotations

import logging
import socket
import socketserver
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, make_wsgi_app

from bridge.domain.leadership import LeaderState
from bridge.domain.nodes import SlurmNode
from bridge.domain.pods import PodView
from bridge.domain.reason import Reason
from bridge.errors import ConfigError

log = logging.getLogger(__name__)

PREFIX = "slurm_k8s_bridge_"

#: The resume latency's stages, in the order a node goes through them.
STAGES = ("pod_running", "node_registered", "job_started")
#: Slurm power states of a CLOUD node, as the ``nodes`` gauge labels them.
POWER_STATES = ("powered_down", "powering_up", "powered_up", "powering_down")
#: Pod phases the API server reports, and ours for a pod being deleted.
POD_PHASES = ("Pending", "Running", "Succeeded", "Failed", "Unknown", "Terminating")
#: Slurm base states in which slurmd has registered (and, the last two, runs a job).
_REGISTERED_STATES = frozenset({"IDLE", "ALLOCATED", "MIXED"})
_JOB_STATES = frozenset({"ALLOCATED", "MIXED"})
#: Nodes whose resume is being timed; beyond this the oldest are dropped (a node Slurm never
#: suspends must not grow the map forever).
MAX_PENDING = 100_000

#: From the hook's call to a first job: seconds to minutes (image pulls, node autoscaling).
_LATENCY_BUCKETS = (0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1200)
#: The parts of a pod that show its node's Slurm state, each written by a patch of its own.
POD_STATE_PARTS = ("label", "condition")
#: A pass is milliseconds at a few nodes and about a second at 10,000 (issue 11's bench).
_PASS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


def power_state(node: SlurmNode) -> str:
    """The power state of a CLOUD node, one of :data:`POWER_STATES`."""
    if node.is_powered_down:
        return "powered_down"
    if node.is_powering_up:
        return "powering_up"
    if node.is_powering_down:
        return "powering_down"
    return "powered_up"


@dataclass
class _Pending:
    """One node's resume being timed: when the call arrived and which stages were observed."""

    start: float
    seen: set[str] = field(default_factory=set)


class BridgeMetrics:
    """The bridge's metrics and the per-node resume timers behind the latency histogram.

    Times are ``time.monotonic()`` seconds, passed in by the caller: the latency is measured
    across threads (gRPC, watch, reconcile) that must share one clock.
    """

    def __init__(self, *, max_pending: int = MAX_PENDING) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.rpc_calls = Counter(
            PREFIX + "rpc_calls",
            "RPC calls by method and outcome: per node from the response's results, or the gRPC "
            "status code of a call that failed as a whole",
            ["rpc", "outcome"],
            registry=r,
        )
        self.resume_latency = Histogram(
            PREFIX + "resume_latency_seconds",
            "Seconds from a node's resume call to its pod Running, its slurmd registered, and "
            "its first job started",
            ["stage"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.pods = Gauge(
            PREFIX + "pods", "The bridge's pods by pool and phase", ["pool", "phase"], registry=r
        )
        self.nodes = Gauge(
            PREFIX + "nodes",
            "The pools' CLOUD nodes by Slurm power state",
            ["power_state"],
            registry=r,
        )
        self.fail_fasts = Counter(
            PREFIX + "fail_fast",
            "Nodes the bridge set DOWN with a k8s: reason, by the reason's kind",
            ["reason"],
            registry=r,
        )
        self.reconcile_pass_seconds = Histogram(
            PREFIX + "reconcile_pass_seconds",
            "Duration of one reconcile pass (observe, plan, execute)",
            buckets=_PASS_BUCKETS,
            registry=r,
        )
        self.reconcile_actions = Counter(
            PREFIX + "reconcile_actions",
            "Actions the reconcile passes planned and carried out, by kind",
            ["action"],
            registry=r,
        )
        self.backend_errors = Counter(
            PREFIX + "backend_errors",
            "Kubernetes and Slurm calls that failed (after their retries), by error class",
            ["backend", "kind"],
            registry=r,
        )
        self.backend_retries = Counter(
            PREFIX + "backend_retries",
            "Kubernetes and Slurm call attempts repeated after a transient error",
            ["backend"],
            registry=r,
        )
        self.pod_state_patches = Counter(
            PREFIX + "pod_state_patches",
            "Patches the API server accepted that show a node's Slurm state on its pod, by the "
            "part written: the state label, or the registered condition (pods/status)",
            ["part"],
            registry=r,
        )
        self.leader = Gauge(
            PREFIX + "leader",
            "1 while this bridge leads (holds the Lease, renewed in time; always 1 without "
            "leader election); 0 while it follows and writes nothing",
            registry=r,
        )
        self.leader_since = Gauge(
            PREFIX + "leader_since_seconds",
            "When the current leader took the Lease (its acquireTime), Unix seconds",
            registry=r,
        )
        self.lease_transitions = Gauge(
            PREFIX + "lease_transitions",
            "Failovers so far: the Lease's leaseTransitions, as this bridge last read it",
            registry=r,
        )
        for stage in STAGES:  # every stage is a series from the start, zero until observed
            self.resume_latency.labels(stage)
        for part in POD_STATE_PARTS:  # "none yet" reads 0, not absent
            self.pod_state_patches.labels(part)
        # A rejected token (401) is the one error kind worth an alert from the first scrape:
        # `increase(...{kind="Unauthorized"}[5m]) > 0` needs the series before the first 401.
        self.backend_errors.labels("kubernetes", "Unauthorized")
        self._max_pending = max_pending
        self._pending: dict[str, _Pending] = {}
        self._lock = threading.Lock()
        self._pod_series: set[tuple[str, str]] = set()

    # -- RPCs ------------------------------------------------------------------------------------

    def rpc_call(self, rpc: str, outcome: str, count: int = 1) -> None:
        """``count`` results of ``outcome`` (or one failed call) of the RPC ``rpc``."""
        self.rpc_calls.labels(rpc, outcome).inc(count)

    # -- resume latency --------------------------------------------------------------------------

    def resume_called(self, node: str, t: float) -> None:
        """A resume of ``node`` arrived at ``t``; a second one before suspend keeps the first
        time (the hook's retry, or the reconciler creating the pod again, is the same resume)."""
        with self._lock:
            if node in self._pending:
                return
            if len(self._pending) >= self._max_pending:
                del self._pending[next(iter(self._pending))]
            self._pending[node] = _Pending(t)

    def pod_running(self, node: str, t: float) -> None:
        """The pod of ``node`` was seen Running at ``t``."""
        self._stage(node, "pod_running", t)

    def node_registered(self, node: str, t: float) -> None:
        """Slurm listed ``node`` as registered (idle, allocated or mixed) at ``t``."""
        self._stage(node, "node_registered", t)

    def job_started(self, node: str, t: float) -> None:
        """Slurm listed ``node`` running a job at ``t``."""
        self._stage(node, "job_started", t)

    def forget(self, node: str) -> None:
        """``node`` was suspended (or its resume failed): stop timing it."""
        with self._lock:
            self._pending.pop(node, None)

    def pending(self) -> int:
        """How many nodes' resumes are being timed."""
        with self._lock:
            return len(self._pending)

    def _stage(self, node: str, stage: str, t: float) -> None:
        with self._lock:
            pending = self._pending.get(node)
            if pending is None or stage in pending.seen:
                return
            pending.seen.add(stage)
            if len(pending.seen) == len(STAGES):
                del self._pending[node]
        self.resume_latency.labels(stage).observe(max(t - pending.start, 0.0))

    # -- reconcile -------------------------------------------------------------------------------

    def leadership(self, state: LeaderState) -> None:
        """Set the leader gauges from the election's latest view."""
        self.leader.set(1 if state.leading else 0)
        self.leader_since.set(state.since.timestamp() if state.since is not None else 0)
        self.lease_transitions.set(state.transitions)

    def reconcile_pass(self, seconds: float, actions: Iterable[object]) -> None:
        """One pass took ``seconds`` and carried out ``actions`` (counted by their type)."""
        self.reconcile_pass_seconds.observe(seconds)
        for action in actions:
            self.reconcile_actions.labels(type(action).__name__).inc()

    def observe_state(self, nodes: Sequence[SlurmNode], pods: Sequence[PodView], t: float) -> None:
        """What a pass observed at ``t``: the gauges, and the nodes whose slurmd registered or
        whose job started since their resume."""
        states = dict.fromkeys(POWER_STATES, 0)
        for node in nodes:
            state = power_state(node)
            states[state] += 1
            # Until slurmd registers, Slurm shows POWERING_UP (or NOT_RESPONDING once it gave up).
            if (
                state != "powered_up"
                or node.state not in _REGISTERED_STATES
                or "NOT_RESPONDING" in node.flags
            ):
                continue
            # A job implies a registration: a pass that first sees the node busy ends both.
            self.node_registered(node.name, t)
            if node.state in _JOB_STATES:
                self.job_started(node.name, t)
        for name, count in states.items():
            self.nodes.labels(name).set(count)
        counts: dict[tuple[str, str], int] = {}
        for pod in pods:
            phase = "Terminating" if pod.deleting else pod.phase
            key = (pod.pool, phase if phase in POD_PHASES else "Unknown")
            counts[key] = counts.get(key, 0) + 1
        # A series that had pods and has none now reads 0, not its last value.
        for key in self._pod_series - counts.keys():
            self.pods.labels(*key).set(0)
        for key, count in counts.items():
            self.pods.labels(*key).set(count)
        self._pod_series |= counts.keys()

    def fail_fast(self, reason: Reason, nodes: int) -> None:
        """``nodes`` nodes were set DOWN with ``reason``."""
        if nodes:
            self.fail_fasts.labels(reason.label).inc(nodes)

    # -- backends (bridge.adapters.call_counters.CallCounters) -----------------------------------

    def backend_error(self, backend: str, kind: str) -> None:
        """A call to ``backend`` (kubernetes, slurm) failed with an error of class ``kind``."""
        self.backend_errors.labels(backend, kind).inc()

    def backend_retry(self, backend: str) -> None:
        """A call to ``backend`` is tried again after a transient error."""
        self.backend_retries.labels(backend).inc()

    def pod_state_patched(self, part: str) -> None:
        """A patch of ``part`` (label, condition) of a pod's Slurm state was accepted."""
        self.pod_state_patches.labels(part).inc()

    # -- the endpoint ----------------------------------------------------------------------------

    def names(self) -> list[str]:
        """Every metric family's name (a counter's without the ``_total`` its samples carry)."""
        return sorted({m.name for m in self.registry.collect()})

    def serve(self, address: str) -> MetricsServer:
        """Serve ``/metrics`` on ``address`` (``host:port``, port 0 picks one) in a thread.

        A bad or busy address raises :class:`ConfigError` naming ``bridge.metrics_address``.
        """
        host, sep, port = address.rpartition(":")
        host = host.strip("[]")
        if not sep or not host or not port.isdigit() or int(port) > 65535:
            raise ConfigError(f"bridge.metrics_address: must be host:port, got {address!r}")
        try:
            family = socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM)[0][0]
            server_class = type("_Server", (BoundedWSGIServer,), {"address_family": family})
            server: WSGIServer = make_server(
                host, int(port), make_wsgi_app(self.registry), server_class, _QuietHandler
            )
        except OSError as e:
            raise ConfigError(f"bridge.metrics_address: cannot listen on {address}: {e}") from e
        thread = threading.Thread(target=server.serve_forever, name="metrics", daemon=True)
        thread.start()
        bound = MetricsServer(server, thread)
        log.info("metrics on http://%s/metrics", bound.address)
        return bound


#: Scrapes served at once; a connection past them is closed at once (prometheus_client's own
#: server starts a thread for each, so idle connections grew threads without bound).
METRICS_CONNECTIONS = 8
#: A connection that sends no complete request within this long is closed.
METRICS_IDLE_S = 5.0


class BoundedWSGIServer(socketserver.ThreadingMixIn, WSGIServer):
    """A thread per scrape, at most :data:`METRICS_CONNECTIONS` of them."""

    daemon_threads = True
    request_queue_size = 128  # socketserver's 5 leaves a burst of connects retrying SYNs

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._slots = threading.BoundedSemaphore(METRICS_CONNECTIONS)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()


class _QuietHandler(WSGIRequestHandler):
    """Logs no request, and drops a connection idle for :data:`METRICS_IDLE_S`."""

    timeout = METRICS_IDLE_S

    def log_message(self, format: str, *args: Any) -> None:
        """Nothing: a scrape every few seconds is not news."""


@dataclass(frozen=True)
class MetricsServer:
    """The running ``/metrics`` endpoint."""

    server: WSGIServer
    thread: threading.Thread

    @property
    def port(self) -> int:
        """The bound port (the real one when asked for port 0)."""
        return int(self.server.server_address[1])

    @property
    def address(self) -> str:
        host = str(self.server.server_address[0])
        return f"[{host}]:{self.port}" if ":" in host else f"{host}:{self.port}"

    def stop(self) -> None:
        """Stop serving and close the socket."""
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)
