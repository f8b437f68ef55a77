"""ResumeNodes without wait: BridgeService.accept_resume answers before the pods exist.

The creates run on the service's "resume" threads; a fake PodPort whose create waits on an
Event shows the answer comes first. Slurm still hears every result (DOWN for a refusal for
good), the reconciler leaves nodes in flight alone, and close() drains the queue.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, cast

import grpc
import pytest

from bridge.api import build_server
from bridge.domain.reconcile import CreatePod
from bridge.domain.results import ErrorClass, NodeResult, Outcome
from bridge.errors import (
    BackendError,
    BridgeError,
    BridgeStopping,
    Forbidden,
    InvalidInput,
    TransientBackendError,
)
from bridge.rpc._proto.slurm_k8s_bridge.v1 import bridge_pb2 as pb
from bridge.rpc._proto.slurm_k8s_bridge.v1 import bridge_pb2_grpc as pb_grpc
from bridge.runtime import serve
from bridge.service.use_cases import BridgeService
from tests.unit.fakes import FakePods, Update
from tests.unit.harness import Harness
from tests.unit.test_service import NOW, config, powering_up

WAIT_S = 10.0  # generous: only a broken test waits this long


class GatedPods(FakePods):
    """Creates made on a "resume" thread wait for ``gate``; other threads' go straight on."""

    def __init__(self) -> None:
        super().__init__(now=NOW)
        self.gate = threading.Event()
        self.entered = threading.Event()
        #: Raised (once) by the next background create, after the gate opened.
        self.crash: Exception | None = None
        self.threads: list[str] = []

    def create_pods(
        self, manifests: Iterable[Mapping[str, Any]]
    ) -> dict[str, bool | BackendError | InvalidInput]:
        name = threading.current_thread().name
        self.threads.append(name)
        if name.startswith("resume"):
            self.entered.set()
            assert self.gate.wait(WAIT_S), "the test never opened the gate"
            if self.crash is not None:
                error, self.crash = self.crash, None
                raise error
        return super().create_pods(manifests)


class World(Harness):
    """The service with a gated pod fake; closed (drained) at the end of every test."""

    pods: GatedPods

    def __init__(self, *nodes: Any) -> None:
        super().__init__(nodes, now=NOW, config=config(), pods=GatedPods())

    def drain(self) -> None:
        assert self.service.resumes.wait_idle(WAIT_S), "background creates never ended"


@pytest.fixture
def world() -> Iterator[World]:
    w = World(*powering_up("cpu-0", "cpu-1", "cpu-2", "gpu-1"))
    yield w
    w.pods.gate.set()
    w.service.close(WAIT_S)


def test_answers_accepted_and_rejected_in_hostlist_order_before_any_pod(world: World) -> None:
    results = world.service.accept_resume("other-1,cpu-[0-1],gpu-1", "", "r1")
    assert results == [
        NodeResult(
            "other-1",
            Outcome.REJECTED,
            ErrorClass.UNKNOWN_NODE,
            "node other-1 is in no pool of the bridge (bridge.yaml); Slurm left alone",
        ),
        NodeResult("cpu-0", Outcome.ACCEPTED),
        NodeResult("cpu-1", Outcome.ACCEPTED),
        NodeResult("gpu-1", Outcome.ACCEPTED),
    ]
    # The answer came while the create is held at the gate: nothing exists yet.
    assert world.pods.entered.wait(WAIT_S)
    assert world.pods.pods == {}
    assert world.service.resumes.in_flight() == {"cpu-0", "cpu-1", "gpu-1"}
    world.pods.gate.set()
    world.drain()
    assert sorted(world.pods.pods) == ["cpu-0", "cpu-1", "gpu-1"]
    assert world.service.resumes.in_flight() == frozenset()
    assert all(t.startswith("resume") for t in world.pods.threads)
    # The creates' own bookkeeping as in the waiting path: one event per created pod.
    assert [e[:2] for e in world.pods.events] == [
        ("cpu-0", "SlurmResume"),
        ("cpu-1", "SlurmResume"),
        ("gpu-1", "SlurmResume"),
    ]


def test_a_bad_hostlist_is_refused_at_once(world: World) -> None:
    with pytest.raises(InvalidInput):
        world.service.accept_resume("cpu-[3-1]", "", "r1")
    assert world.service.resumes.in_flight() == frozenset()


@pytest.mark.parametrize(
    ("error", "down"),
    [
        (Forbidden("psa"), [Update(("cpu-1",), "down", "k8s: Forbidden: psa")]),
        # Worth retrying: left POWERING_UP for the reconciler, no DOWN.
        (TransientBackendError("HTTP 503"), []),
    ],
    ids=["refused-for-good", "transient"],
)
def test_a_refusal_in_the_background_still_reaches_slurm(
    world: World, error: BackendError, down: list[Update], caplog: pytest.LogCaptureFixture
) -> None:
    world.pods.gate.set()
    world.pods.create_errors["cpu-1"] = error
    with caplog.at_level(logging.INFO, logger="bridge.service.use_cases"):
        results = world.service.accept_resume("cpu-[0-2]", "", "r9")
        world.drain()
    assert [r.outcome for r in results] == [Outcome.ACCEPTED] * 3
    assert world.slurm.updates == down
    assert sorted(world.pods.pods) == ["cpu-0", "cpu-2"]
    assert f"request r9: create pod cpu-1 failed: {error}" in caplog.text


@pytest.mark.parametrize(
    ("crash", "logged"),
    [
        (RuntimeError("boom"), "request r1: creating pods for cpu-0 crashed (bug)"),
        (BridgeError("render failed"), "request r1: creating pods for cpu-0 failed"),
    ],
    ids=["bug", "bridge-error"],
)
def test_an_exception_in_the_background_is_logged_and_the_next_call_works(
    world: World, crash: Exception, logged: str, caplog: pytest.LogCaptureFixture
) -> None:
    world.pods.crash = crash
    world.pods.gate.set()
    with caplog.at_level(logging.ERROR, logger="bridge.service.resume_dispatcher"):
        world.service.accept_resume("cpu-0", "", "r1")
        world.drain()
    [record] = [r for r in caplog.records if logged in r.getMessage()]
    assert record.exc_info is not None and record.exc_info[1] is crash
    assert world.service.resumes.in_flight() == frozenset()
    # The worker survived: the next resume is created.
    assert world.service.accept_resume("cpu-[0-1]", "", "r2") == [
        NodeResult("cpu-0", Outcome.ACCEPTED),
        NodeResult("cpu-1", Outcome.ACCEPTED),
    ]
    world.drain()
    assert sorted(world.pods.pods) == ["cpu-0", "cpu-1"]


def test_a_node_already_in_flight_is_not_queued_again(world: World) -> None:
    world.service.accept_resume("cpu-0", "", "r1")
    assert world.pods.entered.wait(WAIT_S)
    world.service.accept_resume("cpu-[0-1]", "", "r2")
    world.pods.gate.set()
    world.drain()
    assert sorted(world.pods.create_calls) == ["cpu-0", "cpu-1"]


def test_reconcile_skips_creates_in_flight_and_issues_them_once_they_left(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    world.pods.create_errors["cpu-0"] = TransientBackendError("HTTP 503")
    world.service.accept_resume("cpu-0", "", "r1")
    assert world.pods.entered.wait(WAIT_S)
    with caplog.at_level(logging.DEBUG, logger="bridge.service.use_cases"):
        actions = world.service.reconcile_once()
    # Planned (the node is powering up with no pod), but not executed: the resume creates it.
    assert CreatePod("cpu-0", "cpu", "Slurm node is powering up and has no pod") in actions
    assert "cpu-0" not in world.pods.create_calls
    assert "reconcile: not creating cpu-0: a resume is creating it" in caplog.text
    world.pods.gate.set()
    world.drain()
    assert world.pods.create_calls.count("cpu-0") == 1  # the background one, refused (503)
    # Out of the set, still powering up with no pod: the next pass creates it.
    del world.pods.create_errors["cpu-0"]
    world.service.reconcile_once()
    assert world.pods.create_calls.count("cpu-0") == 2
    assert "cpu-0" in world.pods.pods


def test_close_waits_for_the_queue_then_refuses_new_resumes(world: World) -> None:
    world.service.accept_resume("cpu-[0-1]", "", "r1")
    assert world.pods.entered.wait(WAIT_S)
    threading.Timer(0.2, world.pods.gate.set).start()
    world.service.close(WAIT_S)
    assert sorted(world.pods.pods) == ["cpu-0", "cpu-1"]  # close() waited for them
    with pytest.raises(BridgeStopping):
        world.service.accept_resume("cpu-2", "", "r2")
    # The waiting path does not queue anything, so it still works for an in-flight RPC.
    assert world.service.resume("cpu-2", "", "r3") == [NodeResult("cpu-2", Outcome.OK)]


def test_close_gives_up_after_its_timeout_and_leaves_the_nodes_powering_up(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    world.service.accept_resume("cpu-0", "", "r1")
    assert world.pods.entered.wait(WAIT_S)
    world.service.accept_resume("cpu-1", "", "r2")  # may be queued behind or run beside it
    with caplog.at_level(logging.WARNING, logger="bridge.service.resume_dispatcher"):
        world.service.close(0.1)
    assert "left POWERING_UP for the reconciler" in caplog.text
    assert world.slurm.updates == []


def test_a_stopping_bridge_answers_unavailable(world: World, tmp_path: Path) -> None:
    sock = tmp_path / "b.sock"
    server = build_server(world.service, unix_socket=str(sock), socket_mode=0o600, max_workers=2)
    server.start()
    try:
        world.service.close(WAIT_S)
        with grpc.insecure_channel(f"unix:{sock}") as ch, pytest.raises(grpc.RpcError) as info:
            stub = pb_grpc.BridgeStub(ch)  # type: ignore[no-untyped-call]  # generated
            stub.ResumeNodes(pb.ResumeNodesRequest(hostlist="cpu-0", request_id="r-s"), timeout=5)
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE
        assert "stopping" in (info.value.details() or "")
        # wait=true does not need the dispatcher: it still creates and answers.
        with grpc.insecure_channel(f"unix:{sock}") as ch:
            stub = pb_grpc.BridgeStub(ch)  # type: ignore[no-untyped-call]  # generated
            resp = stub.ResumeNodes(
                pb.ResumeNodesRequest(hostlist="cpu-0", request_id="r-w", wait=True), timeout=5
            )
        assert [r.outcome for r in resp.results] == [pb.OUTCOME_OK]
    finally:
        server.stop(None)


def test_the_servicer_picks_the_path_by_wait(world: World, tmp_path: Path) -> None:
    """The real service behind a real server: wait=false answers ACCEPTED while the create is
    held; wait=true answers OK after creating."""
    sock = tmp_path / "b.sock"
    server = build_server(world.service, unix_socket=str(sock), socket_mode=0o600, max_workers=2)
    server.start()
    try:
        with grpc.insecure_channel(f"unix:{sock}") as ch:
            stub = pb_grpc.BridgeStub(ch)  # type: ignore[no-untyped-call]  # generated
            fast = stub.ResumeNodes(pb.ResumeNodesRequest(hostlist="cpu-0"), timeout=5)
            assert [r.outcome for r in fast.results] == [pb.OUTCOME_ACCEPTED]
            assert "cpu-0" not in world.pods.pods  # held at the gate
            slow = stub.ResumeNodes(pb.ResumeNodesRequest(hostlist="cpu-1", wait=True), timeout=5)
            assert [r.outcome for r in slow.results] == [pb.OUTCOME_OK]
            assert "cpu-1" in world.pods.pods
    finally:
        server.stop(None)


def test_bridge_stop_drains_the_resumes_before_the_gateway_closes() -> None:
    journal: list[str] = []

    class Part:
        def __init__(self, name: str) -> None:
            self.name = name

        def __getattr__(self, method: str) -> Any:
            return lambda *args, **kwargs: journal.append(f"{self.name}.{method}{args}")

    bridge = serve.Bridge(
        service=cast(BridgeService, Part("service")),
        pods=cast(serve.PodGateway, Part("pods")),
        reconciler=cast(serve.Reconciler, Part("reconciler")),
        watcher=cast(serve.PodWatcher, Part("watcher")),
        server=Part("server"),
    )
    bridge.stop(grace_s=3.0)
    assert journal.index("service.close(3.0,)") < journal.index("pods.close()")
    assert journal.index("reconciler.stop()") < journal.index("service.close(3.0,)")


def test_a_held_create_starts_when_the_answer_is_out_or_after_the_hold_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from bridge.service import resume_dispatcher  # noqa: PLC0415

    monkeypatch.setattr(resume_dispatcher, "MAX_HOLD_S", 0.5)
    dispatcher = resume_dispatcher.ResumeDispatcher(workers=2)
    started: dict[str, threading.Event] = {"a": threading.Event(), "b": threading.Event()}
    answered = threading.Event()
    dispatcher.submit(["a-0"], lambda _: started["a"].set(), "r1", hold=answered)
    assert not started["a"].wait(0.2), "started before the answer was out"
    answered.set()
    assert started["a"].wait(2)
    never = threading.Event()
    dispatcher.submit(["b-0"], lambda _: started["b"].set(), "r2", hold=never)
    assert started["b"].wait(3), "a lost answer callback must not hold the create for ever"
    dispatcher.close(5)
