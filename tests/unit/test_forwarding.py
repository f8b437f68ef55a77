"""A follower forwards the hooks' calls to the leader (issue 32 item 2): two real gRPC servers,
the follower on a Unix socket (where its hooks call it) and the leader on TCP with mutual TLS,
the follower calling with its own certificate."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest

from bridge.api import BridgeServer, LeaderForwarder, TlsServerFiles, build_server
from bridge.api.forwarding import FORWARDED_BY
from bridge.domain.leadership import LeaderState
from bridge.domain.results import ErrorClass, NodeResult, Outcome
from bridge.errors import CallerNotAllowed, InvalidInput, NotLeader
from bridge.rpc._proto.slurm_k8s_bridge.v1 import bridge_pb2 as pb
from bridge.rpc._proto.slurm_k8s_bridge.v1 import bridge_pb2_grpc as pb_grpc
from bridge.rpc.client import BridgeClient, TlsFiles
from bridge.rpc.wire import ERROR_METADATA_KEY
from tests.unit.test_api import FakeUseCases


@dataclass
class Seat:
    """Leader election as the servicer sees it, set by the test."""

    leading: bool
    leader_address: str = ""

    def check(self, what: str) -> None:
        if not self.leading:
            raise NotLeader(f"{what}: this bridge does not lead")

    def state(self) -> LeaderState:
        return LeaderState(
            True,
            "a-host" if self.leading else "b-host",
            "lease-x",
            "a-host",
            self.leading,
            leader_address=self.leader_address,
        )


@dataclass
class Pair:
    leader_fake: FakeUseCases
    follower_fake: FakeUseCases
    leader: BridgeServer
    follower_socket: Path
    follower_seat: Seat
    pki: Path

    def stub(self) -> Any:
        channel = grpc.insecure_channel(f"unix:{self.follower_socket}")
        return pb_grpc.BridgeStub(channel)  # type: ignore[no-untyped-call]


def _tls_server(pki: Path) -> TlsServerFiles:
    return TlsServerFiles(str(pki / "server.pem"), str(pki / "server.key"), str(pki / "ca.pem"))


@contextmanager
def started_pair(pki: Path, tmp_path: Path, leader_admits: frozenset[str]) -> Iterator[Pair]:
    """The leader (a-host) on 127.0.0.1 with mutual TLS, admitting client certificates named
    ``leader_admits``; the follower (b-host) forwarding with its certificate (DNS SAN
    localhost)."""
    leader_fake, follower_fake = FakeUseCases(), FakeUseCases()
    leader = build_server(
        leader_fake,
        unix_socket=None,
        tcp_listen="127.0.0.1:0",
        tls=_tls_server(pki),
        allowed_client_names=leader_admits,
        leader=Seat(leading=True, leader_address="unused"),
    )
    leader.start()
    seat = Seat(leading=False, leader_address=f"127.0.0.1:{leader.tcp_port}")
    forwarder = LeaderForwarder(
        TlsFiles(str(pki / "server.pem"), str(pki / "server.key"), str(pki / "ca.pem")), "b-host"
    )
    follower_socket = tmp_path / "f.sock"
    follower = build_server(
        follower_fake,
        unix_socket=str(follower_socket),
        max_workers=4,
        leader=seat,
        forwarder=forwarder,
    )
    follower.start()
    try:
        yield Pair(leader_fake, follower_fake, leader, follower_socket, seat, pki)
    finally:
        follower.stop(None)
        leader.stop(None)
        forwarder.close()


@pytest.fixture
def pair(pki: Path, tmp_path: Path) -> Iterator[Pair]:
    """A leader that admits the follower's certificate."""
    with started_pair(pki, tmp_path, frozenset({"localhost"})) as started:
        yield started


def _calls(stub: Any) -> dict[str, Callable[[], Any]]:
    return {
        "ResumeNodes": lambda: stub.ResumeNodes(
            pb.ResumeNodesRequest(hostlist="c1", resume_file="{}", request_id="resume-1-a"),
            timeout=5,
        ),
        "SuspendNodes": lambda: stub.SuspendNodes(
            pb.SuspendNodesRequest(hostlist="c1", request_id="suspend-1-a"), timeout=5
        ),
        "ResumeFailed": lambda: stub.ResumeFailed(
            pb.ResumeFailedRequest(hostlist="c1", request_id="fail-1-a"), timeout=5
        ),
        "NodeEvent": lambda: stub.NodeEvent(
            pb.NodeEventRequest(
                kind=pb.NODE_EVENT_KIND_DOWN, hostlist="c1", reason="x", request_id="ev-1-a"
            ),
            timeout=5,
        ),
    }


#: What the leader's use cases record for each forwarded call (the caller's request id kept).
LEADER_RECORDS = {
    "ResumeNodes": ("accept_resume", ("c1", "{}", "resume-1-a")),
    "SuspendNodes": ("suspend", ("c1", "suspend-1-a")),
    "ResumeFailed": ("resume_failed", ("c1", "fail-1-a")),
    "NodeEvent": ("node_event", ("c1", "down", "x", "ev-1-a")),
}


@pytest.mark.parametrize("rpc", sorted(LEADER_RECORDS))
def test_a_follower_forwards_each_mutating_call_to_the_leader(pair: Pair, rpc: str) -> None:
    answer = _calls(pair.stub())[rpc]()
    assert pair.leader_fake.calls == [LEADER_RECORDS[rpc]]
    assert pair.follower_fake.calls == []
    assert [r.node for r in answer.results] == ["c1"]


def test_the_leader_s_answer_comes_back_as_it_gave_it(pair: Pair) -> None:
    """Per-node results and whole-call errors alike: the hook cannot tell it was forwarded."""
    pair.leader_fake.results = [
        NodeResult("c1", Outcome.REJECTED, ErrorClass.UNKNOWN_NODE, "no pool")
    ]
    with BridgeClient(f"unix:{pair.follower_socket}", timeout_s=5.0) as c:
        assert c.suspend_nodes("c1") == pair.leader_fake.results
        pair.leader_fake.error = InvalidInput("hostlist: bad")
        with pytest.raises(InvalidInput, match="hostlist: bad"):
            c.suspend_nodes("c1")


@pytest.mark.parametrize(
    ("case", "change", "message"),
    [
        # The Lease names no address (the leader has no TCP listener, or it was released).
        ("no address", lambda p: setattr(p.follower_seat, "leader_address", ""), "no address"),
        # The leader's listener is gone (it died; its Lease not yet taken over).
        ("leader gone", lambda p: p.leader.stop(None), "a-host at 127.0.0.1:"),
    ],
)
def test_no_reachable_leader_is_unavailable_from_the_bridge(
    pair: Pair, case: str, change: Callable[[Pair], object], message: str
) -> None:
    """UNAVAILABLE with the bridge's marker (NotLeader): the hook retries within its budget."""
    change(pair)
    with pytest.raises(grpc.RpcError) as info:
        _calls(pair.stub())["SuspendNodes"]()
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE, case
    assert message in (info.value.details() or ""), info.value.details()
    marker = dict(info.value.trailing_metadata() or ())
    assert marker.get(ERROR_METADATA_KEY) == "NotLeader", marker
    assert pair.follower_fake.calls == []


def test_a_forwarded_call_is_never_forwarded_again(pair: Pair) -> None:
    """The Lease moved while the call was on its way: the receiver that does not lead answers
    UNAVAILABLE (no loop between two followers)."""
    with pytest.raises(grpc.RpcError) as info:
        pair.stub().SuspendNodes(
            pb.SuspendNodesRequest(hostlist="c1"), timeout=5, metadata=((FORWARDED_BY, "c-host"),)
        )
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "does not lead" in (info.value.details() or "")
    assert pair.leader_fake.calls == []


def test_the_leader_pins_the_follower_s_certificate(pki: Path, tmp_path: Path) -> None:
    """A follower whose certificate names are not in the leader's tls_client_names is refused
    there, and the refusal reaches the hook."""
    with (
        started_pair(pki, tmp_path, frozenset({"slurmctld"})) as refused,
        BridgeClient(f"unix:{refused.follower_socket}", timeout_s=5.0) as c,
        pytest.raises(CallerNotAllowed, match="tls_client_names"),
    ):
        c.suspend_nodes("c1")
    assert refused.leader_fake.calls == []


def test_the_leader_handles_its_own_calls(pair: Pair) -> None:
    pair.follower_seat.leading = True
    assert pair.stub().SuspendNodes(pb.SuspendNodesRequest(hostlist="c1"), timeout=5).results
    assert [name for name, _ in pair.follower_fake.calls] == ["suspend"]
    assert pair.leader_fake.calls == []


def test_forwarding_keeps_the_caller_s_deadline(pair: Pair) -> None:
    """The leader gets what is left of the hook's deadline, not a fresh one: a leader that hangs
    ends the hook's call when the hook said, and no later."""
    hang = socket.socket()
    hang.bind(("127.0.0.1", 0))
    hang.listen()
    try:
        pair.follower_seat.leader_address = f"127.0.0.1:{hang.getsockname()[1]}"
        with pytest.raises(grpc.RpcError) as info:
            pair.stub().SuspendNodes(pb.SuspendNodesRequest(hostlist="c1"), timeout=1.0)
        assert info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    finally:
        hang.close()
