"""BridgeMetrics and what feeds it: the RPC interceptor on a real gRPC server, the resume latency
timers, a reconcile pass's gauges, the adapters' error and retry counters, and the endpoint."""

from __future__ import annotations

import contextlib
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from kubernetes.client.exceptions import ApiException

from bridge.adapters.kubernetes import PodEvent, WatchExpired
from bridge.adapters.kubernetes.calls import call
from bridge.adapters.slurm.cli import SlurmCli
from bridge.api import build_server
from bridge.config import parse_config
from bridge.domain.nodes import SlurmNode
from bridge.domain.pods import PodFailure, PodView
from bridge.domain.reason import Reason
from bridge.domain.reconcile import MarkDown
from bridge.domain.results import NodeResult, NodeStatus, Outcome
from bridge.errors import (
    BackendError,
    BridgeError,
    ConfigError,
    InvalidInput,
    TransientBackendError,
)
from bridge.metrics import POWER_STATES, STAGES, BridgeMetrics
from bridge.rpc._proto.slurm_k8s_bridge.v1 import bridge_pb2 as pb
from bridge.rpc._proto.slurm_k8s_bridge.v1 import bridge_pb2_grpc as pb_grpc
from bridge.runtime.pod_watcher import PodWatcher
from tests.unit.fakes import MINIMAL_CONFIG
from tests.unit.harness import Harness

NOW = datetime(2026, 12, 3, 12, 0, 0, tzinfo=UTC)
P = "slurm_k8s_bridge_"


def sample(metrics: BridgeMetrics, name: str, **labels: str) -> float:
    """A sample's value, 0 when the series does not exist."""
    return metrics.registry.get_sample_value(P + name, labels) or 0.0


# --- rpc_calls_total through a real gRPC server ------------------------------------------------


class ScriptedUseCases:
    """Use cases that answer ``results`` (or raise ``error``) whatever they are asked."""

    def __init__(self, results: list[NodeResult], error: BridgeError | None) -> None:
        self.results = results
        self.error = error

    def _answer(self) -> list[NodeResult]:
        if self.error is not None:
            raise self.error
        return self.results

    def resume(self, hostlist: str, resume_file: str, request_id: str) -> list[NodeResult]:
        return self._answer()

    def accept_resume(
        self,
        hostlist: str,
        resume_file: str,
        request_id: str,
        *,
        answered: threading.Event | None = None,
    ) -> list[NodeResult]:
        return self._answer()

    def suspend(self, hostlist: str, request_id: str) -> list[NodeResult]:
        return self._answer()

    def resume_failed(self, hostlist: str, request_id: str) -> list[NodeResult]:
        return self._answer()

    def node_event(
        self, kind: str, hostlist: str, reason: str, request_id: str
    ) -> list[NodeResult]:
        return self._answer()

    def list_nodes(self, hostlist: str, stuck_after: timedelta | None = None) -> list[NodeStatus]:
        self._answer()
        return []


def _stub(channel: grpc.Channel) -> pb_grpc.BridgeStub:
    return pb_grpc.BridgeStub(channel)  # type: ignore[no-untyped-call]  # generated


Rpc = Callable[[pb_grpc.BridgeStub], object]
RESUME: Rpc = lambda s: s.ResumeNodes(pb.ResumeNodesRequest(hostlist="c1", wait=True), timeout=5)  # noqa: E731
SUSPEND: Rpc = lambda s: s.SuspendNodes(pb.SuspendNodesRequest(hostlist="c1"), timeout=5)  # noqa: E731
LIST: Rpc = lambda s: s.ListNodes(pb.ListNodesRequest(), timeout=5)  # noqa: E731
OK, FAILED, REJECTED, ACCEPTED = Outcome.OK, Outcome.FAILED, Outcome.REJECTED, Outcome.ACCEPTED


@pytest.mark.parametrize(
    ("rpc", "results", "error", "expected"),
    [
        (RESUME, [OK, OK], None, {("ResumeNodes", "OK"): 2}),
        (
            RESUME,
            [ACCEPTED, REJECTED],
            None,
            {("ResumeNodes", "ACCEPTED"): 1, ("ResumeNodes", "REJECTED"): 1},
        ),
        (
            SUSPEND,
            [OK, FAILED, FAILED],
            None,
            {("SuspendNodes", "OK"): 1, ("SuspendNodes", "FAILED"): 2},
        ),
        (SUSPEND, [], InvalidInput("bad"), {("SuspendNodes", "INVALID_ARGUMENT"): 1}),
        (RESUME, [], TransientBackendError("busy"), {("ResumeNodes", "UNAVAILABLE"): 1}),
        (RESUME, [], BackendError("no"), {("ResumeNodes", "FAILED_PRECONDITION"): 1}),
        (LIST, [], None, {("ListNodes", "OK"): 1}),
    ],
    ids=["ok", "accepted-rejected", "per-node", "invalid", "unavailable", "precondition", "list"],
)
def test_the_interceptor_counts_each_node_outcome_or_the_status_code(
    tmp_path: Path,
    rpc: Rpc,
    results: list[Outcome],
    error: BridgeError | None,
    expected: dict[tuple[str, str], int],
) -> None:
    metrics = BridgeMetrics()
    use_cases = ScriptedUseCases([NodeResult(f"c{i}", o) for i, o in enumerate(results)], error)
    sock = tmp_path / "b.sock"
    server = build_server(use_cases, unix_socket=str(sock), max_workers=2, metrics=metrics)
    server.start()
    try:
        with grpc.insecure_channel(f"unix:{sock}") as channel:
            # The error's code is what the metric must show.
            with contextlib.suppress(grpc.RpcError):
                rpc(_stub(channel))
            # Health checks are the probes' business, not calls of the bridge.
            health = health_pb2_grpc.HealthStub(channel)
            health.Check(health_pb2.HealthCheckRequest(service=""), timeout=5)
    finally:
        server.stop(None)
    counted = {
        (s.labels["rpc"], s.labels["outcome"]): s.value
        for m in metrics.registry.collect()
        if m.name == P + "rpc_calls"
        for s in m.samples
        if s.name.endswith("_total")
    }
    assert counted == expected


# --- resume latency: once per stage per node -------------------------------------------------

Step = tuple[str, str, float]


@pytest.mark.parametrize(
    ("steps", "expected", "pending"),
    [
        (
            [
                ("resume_called", "a", 10),
                ("pod_running", "a", 13),
                ("node_registered", "a", 15),
                ("job_started", "a", 16),
            ],
            {"pod_running": (1, 3), "node_registered": (1, 5), "job_started": (1, 6)},
            0,
        ),
        (  # the watch and every pass report the same fact again: the first one counts
            [
                ("resume_called", "a", 0),
                ("pod_running", "a", 2),
                ("pod_running", "a", 9),
                ("node_registered", "a", 4),
                ("node_registered", "a", 8),
            ],
            {"pod_running": (1, 2), "node_registered": (1, 4)},
            1,
        ),
        (  # a hook's retry is the same resume: its start stays the first call's
            [("resume_called", "a", 0), ("resume_called", "a", 5), ("pod_running", "a", 7)],
            {"pod_running": (1, 7)},
            1,
        ),
        (  # no resume seen (a bridge restarted mid-cycle): nothing to time
            [("pod_running", "a", 2), ("job_started", "a", 3)],
            {},
            0,
        ),
        (  # suspended before its pod ran: forgotten, a late event observes nothing
            [("resume_called", "a", 0), ("forget", "a", 0), ("pod_running", "a", 3)],
            {},
            0,
        ),
        (  # two nodes are timed apart
            [
                ("resume_called", "a", 0),
                ("resume_called", "b", 1),
                ("pod_running", "b", 4),
                ("pod_running", "a", 6),
            ],
            {"pod_running": (2, 9)},
            2,
        ),
        (  # a completed cycle is dropped, so the next resume starts a new one
            [
                ("resume_called", "a", 0),
                ("pod_running", "a", 1),
                ("node_registered", "a", 2),
                ("job_started", "a", 3),
                ("resume_called", "a", 100),
                ("pod_running", "a", 101),
            ],
            {"pod_running": (2, 2), "node_registered": (1, 2), "job_started": (1, 3)},
            1,
        ),
    ],
    ids=[
        "full-cycle",
        "once-per-stage",
        "retry-keeps-start",
        "unknown-node",
        "forgotten",
        "two-nodes",
        "next-cycle",
    ],
)
def test_resume_latency_observes_each_stage_once_per_node_and_resume(
    steps: list[Step], expected: dict[str, tuple[int, float]], pending: int
) -> None:
    metrics = BridgeMetrics()
    for method, node, t in steps:
        if method == "forget":
            metrics.forget(node)
        else:
            getattr(metrics, method)(node, t)
    observed = {
        stage: (
            sample(metrics, "resume_latency_seconds_count", stage=stage),
            sample(metrics, "resume_latency_seconds_sum", stage=stage),
        )
        for stage in STAGES
    }
    assert {k: v for k, v in observed.items() if v[0]} == expected
    assert metrics.pending() == pending


def test_the_pending_timers_are_bounded_dropping_the_oldest() -> None:
    metrics = BridgeMetrics(max_pending=2)
    for t, node in enumerate(["a", "b", "c"]):
        metrics.resume_called(node, t)
    assert metrics.pending() == 2
    metrics.pod_running("a", 10)  # dropped: not observed
    metrics.pod_running("c", 10)
    assert sample(metrics, "resume_latency_seconds_count", stage="pod_running") == 1


# --- a reconcile pass: gauges and the Slurm-side stages ---------------------------------------


def cloud(name: str, state: str, *flags: str) -> SlurmNode:
    return SlurmNode(name, state, frozenset({"CLOUD", *flags}))


def pod(node: str, phase: str, pool: str = "cpu", *, deleting: bool = False) -> PodView:
    return PodView(node, node, pool, phase, "", NOW, deleting, None)


@pytest.mark.parametrize(
    ("node", "registered", "job"),
    [
        (cloud("a", "IDLE", "POWERING_UP"), False, False),
        (cloud("a", "ALLOCATED", "POWERING_UP"), False, False),
        (cloud("a", "IDLE"), True, False),
        (cloud("a", "MIXED"), True, True),
        (cloud("a", "ALLOCATED"), True, True),
        (cloud("a", "DOWN", "POWERING_UP"), False, False),
        (cloud("a", "IDLE", "POWERED_DOWN"), False, False),
        (cloud("a", "IDLE", "POWERING_DOWN"), False, False),
        (cloud("a", "IDLE", "NOT_RESPONDING"), False, False),
    ],
    ids=[
        "powering-up",
        "alloc-powering-up",
        "idle",
        "mixed",
        "allocated",
        "down",
        "powered-down",
        "powering-down",
        "not-responding",
    ],
)
def test_a_pass_ends_the_registered_and_job_stages_from_slurm_states(
    node: SlurmNode, registered: bool, job: bool
) -> None:
    metrics = BridgeMetrics()
    metrics.resume_called("a", 0)
    metrics.observe_state([node], [], 4)
    assert sample(metrics, "resume_latency_seconds_count", stage="node_registered") == registered
    assert sample(metrics, "resume_latency_seconds_count", stage="job_started") == job


def test_a_pass_sets_the_pod_and_node_gauges_and_zeroes_series_that_emptied() -> None:
    metrics = BridgeMetrics()
    nodes = [
        cloud("a", "IDLE", "POWERED_DOWN"),
        cloud("b", "IDLE", "POWERED_DOWN"),
        cloud("c", "ALLOCATED", "POWERING_UP"),
        cloud("d", "MIXED"),
        cloud("e", "IDLE", "POWERING_DOWN"),
    ]
    pods = [
        pod("c", "Pending"),
        pod("d", "Running"),
        pod("e", "Running", deleting=True),
        pod("g", "Running", "gpu"),
        pod("h", "Weird", "gpu"),
    ]
    metrics.observe_state(nodes, pods, 0)
    assert {s: sample(metrics, "nodes", power_state=s) for s in POWER_STATES} == {
        "powered_down": 2,
        "powering_up": 1,
        "powered_up": 1,
        "powering_down": 1,
    }
    assert sample(metrics, "pods", pool="cpu", phase="Pending") == 1
    assert sample(metrics, "pods", pool="cpu", phase="Terminating") == 1
    assert sample(metrics, "pods", pool="gpu", phase="Unknown") == 1  # phases stay bounded
    metrics.observe_state(nodes, [pod("d", "Running")], 1)
    assert sample(metrics, "pods", pool="cpu", phase="Pending") == 0
    assert sample(metrics, "pods", pool="cpu", phase="Running") == 1
    assert sample(metrics, "pods", pool="gpu", phase="Running") == 0


@pytest.mark.parametrize(
    ("reason", "kind"),
    [
        ("k8s: ImagePullBackOff: back-off pulling image x", "ImagePullBackOff"),
        ("k8s: Unschedulable: 0/3 nodes are available", "Unschedulable"),
        ("k8s: Forbidden", "Forbidden"),
        ("k8s: pod cpu-3 was evicted by node x", "other"),
        ("k8s: ", "other"),
    ],
)
def test_fail_fast_labels_are_reason_kinds_never_free_text(reason: str, kind: str) -> None:
    parsed = Reason.parse(reason)
    assert parsed is not None
    assert parsed.label == kind
    metrics = BridgeMetrics()
    metrics.fail_fast(parsed, 3)
    counted = [
        (s.labels["reason"], s.value)
        for m in metrics.registry.collect()
        if m.name == P + "fail_fast"
        for s in m.samples
        if s.name.endswith("_total")
    ]
    assert counted == [(kind, 3)]


# --- the service feeds it -----------------------------------------------------------------------


def test_the_service_times_resumes_forgets_suspends_and_counts_its_passes() -> None:
    metrics = BridgeMetrics()
    nodes = [cloud(f"cpu-{i}", "IDLE", "POWERED_DOWN") for i in range(4)]
    h = Harness(nodes, now=NOW, metrics=metrics)
    slurm, service = h.slurm, h.service
    service.resume("cpu-[0-1]", "", "r1")
    assert metrics.pending() == 2
    service.suspend("cpu-1", "r2")
    assert metrics.pending() == 1
    slurm.nodes["cpu-0"] = cloud("cpu-0", "ALLOCATED")
    service.reconcile_once()
    assert sample(metrics, "resume_latency_seconds_count", stage="job_started") == 1
    assert sample(metrics, "reconcile_pass_seconds_count") == 1
    assert sample(metrics, "nodes", power_state="powered_down") == 3
    assert sample(metrics, "pods", pool="cpu", phase="Pending") == 1
    # A DOWN needs a node Slurm wants up, and a failing pod read live.
    slurm.nodes["cpu-2"] = cloud("cpu-2", "ALLOCATED", "POWERING_UP")
    h.pods.add("cpu-2", phase="Pending", failure=PodFailure("ErrImagePull", "no such image"))
    service.execute([MarkDown("cpu-2", Reason("ErrImagePull", "no such image"))])
    assert sample(metrics, "fail_fast_total", reason="ErrImagePull") == 1


# --- the adapters' errors and retries ---------------------------------------------------------


def test_a_kubernetes_call_counts_its_retries_and_the_error_it_ends_with() -> None:
    metrics = BridgeMetrics()
    answers: Iterator[Exception | None] = iter([ApiException(status=503), None])

    def flaky() -> str:
        error = next(answers)
        if error is not None:
            raise error
        return "ok"

    assert call("read pod x", flaky, metrics) == "ok"
    assert sample(metrics, "backend_retries_total", backend="kubernetes") == 1

    def gone() -> str:
        raise ApiException(status=404)

    with pytest.raises(BackendError):
        call("read pod x", gone, metrics)
    assert sample(metrics, "backend_errors_total", backend="kubernetes", kind="NotFound") == 1


def test_a_slurm_command_counts_its_retries_and_the_error_it_ends_with(tmp_path: Path) -> None:
    scontrol = tmp_path / "scontrol"
    scontrol.write_text("#!/bin/sh\necho 'Unable to contact slurm controller' >&2\nexit 1\n")
    scontrol.chmod(0o755)
    metrics = BridgeMetrics()
    slurm = SlurmCli(str(tmp_path), attempts=3, retry_wait_s=0, counters=metrics)
    with pytest.raises(TransientBackendError):
        slurm.update_nodes(["a"], state="resume")
    assert sample(metrics, "backend_retries_total", backend="slurm") == 2
    kind = "TransientBackendError"
    assert sample(metrics, "backend_errors_total", backend="slurm", kind=kind) == 1


# --- the endpoint and its configuration -------------------------------------------------------


def test_the_endpoint_on_port_0_lists_every_metric() -> None:
    metrics = BridgeMetrics()
    # Every labelled series exists once something was counted; the scrape must show them all.
    metrics.rpc_call("ResumeNodes", "OK")
    metrics.observe_state([cloud("a", "IDLE")], [pod("a", "Running")], 0)
    metrics.fail_fast(Reason("Unschedulable", "x"), 1)
    metrics.reconcile_pass(0.01, [MarkDown("a", Reason("x", ""))])
    metrics.backend_error("slurm", "BackendError")
    metrics.backend_retry("kubernetes")
    metrics.pod_state_patched("label")
    server = metrics.serve("127.0.0.1:0")
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=5) as r:
            body = r.read().decode()
    finally:
        server.stop()
    scraped = {
        line.split("{")[0].split(" ")[0] for line in body.splitlines() if not line.startswith("#")
    }
    suffix = {"counter": "_total", "histogram": "_bucket", "gauge": ""}
    wanted = {m.name + suffix[m.type] for m in metrics.registry.collect()}
    assert wanted <= scraped
    assert len(wanted) == len(metrics.names()) == 13
    assert 'slurm_k8s_bridge_fail_fast_total{reason="Unschedulable"} 1.0' in body


@pytest.mark.parametrize("address", ["9464", "127.0.0.1:", "127.0.0.1:99999", ":9464"])
def test_a_bad_metrics_address_is_a_config_error_naming_the_field(address: str) -> None:
    with pytest.raises(ConfigError, match=r"bridge\.metrics_address"):
        BridgeMetrics().serve(address)
    with pytest.raises(ConfigError, match=r"bridge\.metrics_address"):
        parse_config(MINIMAL_CONFIG + f"bridge:\n  metrics_address: '{address}'\n", "bridge.yaml")


def test_a_busy_metrics_port_is_a_config_error_naming_the_field() -> None:
    first = BridgeMetrics().serve("127.0.0.1:0")
    try:
        with pytest.raises(ConfigError, match=r"bridge.metrics_address: cannot listen"):
            BridgeMetrics().serve(f"127.0.0.1:{first.port}")
    finally:
        first.stop()


@pytest.mark.parametrize(("value", "expected"), [("", ""), ("127.0.0.1:9464", "127.0.0.1:9464")])
def test_metrics_address_is_off_by_default_and_read_from_the_file(
    value: str, expected: str
) -> None:
    assert parse_config(MINIMAL_CONFIG, "bridge.yaml").bridge.metrics_address == ""
    text = MINIMAL_CONFIG + f"bridge:\n  metrics_address: '{value}'\n"
    assert parse_config(text, "bridge.yaml").bridge.metrics_address == expected


# --- the pod watcher feeds pod_running and counts failed watches -------------------------------


class ScriptedWatch:
    """A pod source whose watches play ``script`` (an event or an error each), then block."""

    def __init__(self, script: list[PodEvent | BridgeError]) -> None:
        self.script = list(script)
        self.drained = threading.Event()
        self.release = threading.Event()

    def list_pods(self) -> tuple[list[PodView], str]:
        return [], "1"

    def watch(
        self,
        resource_version: str,
        timeout_s: int = 60,
        *,
        on_bookmark: Callable[[str], None] | None = None,
    ) -> Iterator[PodEvent]:
        while self.script:
            step = self.script.pop(0)
            if isinstance(step, BridgeError):
                raise step
            yield step
        self.drained.set()
        self.release.wait(5)


class NoReconciler:
    def poke(self) -> None:
        pass


def test_the_watcher_times_pods_turning_running_and_counts_failed_watches() -> None:
    metrics = BridgeMetrics()
    metrics.resume_called("a", time.monotonic())
    metrics.resume_called("b", time.monotonic())
    source = ScriptedWatch(
        [
            PodEvent("ADDED", pod("a", "Pending"), "2"),
            WatchExpired("too old"),
            PodEvent("MODIFIED", pod("a", "Running"), "3"),
            PodEvent("MODIFIED", pod("b", "Failed"), "4"),
        ]
    )
    watcher = PodWatcher(source, NoReconciler(), metrics=metrics, backoff_s=0.01)
    watcher.start()
    try:
        assert source.drained.wait(5)
    finally:
        watcher.stop()
        source.release.set()
        assert watcher.stop(wait_s=5)
    assert sample(metrics, "resume_latency_seconds_count", stage="pod_running") == 1
    assert metrics.pending() == 2
    kind = "WatchExpired"
    assert sample(metrics, "backend_errors_total", backend="kubernetes", kind=kind) == 1


def test_idle_connections_cannot_grow_the_endpoint_s_threads() -> None:
    """Issue 31 item 5: prometheus_client's server started a thread per connection, so idle
    connections (from any pod that reaches the port) grew threads without bound. Now at most
    METRICS_CONNECTIONS are served at once, the rest closed, and an idle one dropped after
    METRICS_IDLE_S; scrapes are answered again once the idle ones are gone."""
    import socket  # noqa: PLC0415
    import threading  # noqa: PLC0415
    import time  # noqa: PLC0415
    import urllib.request  # noqa: PLC0415

    from bridge.metrics import METRICS_CONNECTIONS, METRICS_IDLE_S  # noqa: PLC0415

    server = BridgeMetrics().serve("127.0.0.1:0")
    idle = []
    try:
        before = threading.active_count()
        for _ in range(200):
            idle.append(socket.create_connection(("127.0.0.1", server.port), timeout=5))
        time.sleep(0.5)
        assert threading.active_count() - before <= METRICS_CONNECTIONS
        time.sleep(METRICS_IDLE_S + 1)
        url = f"http://127.0.0.1:{server.port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as answer:
            assert b"slurm_k8s_bridge" in answer.read()
    finally:
        for sock in idle:
            sock.close()
        server.stop()
