"""The servicer and client end to end: a real gRPC server on a Unix socket (and TCP + mTLS)."""

from __future__ import annotations

import grp
import logging
import os
import socket
import stat
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from bridge.api import SERVICE_NAME, BridgeServer, TlsServerFiles, build_server
from bridge.domain.circuit import PoolBreakerStatus
from bridge.domain.gang_mode import GANG_MODE_OFF, GangMode
from bridge.domain.leadership import LeaderState
from bridge.domain.results import ErrorClass, NodeResult, NodeStatus, Outcome
from bridge.errors import (
    BackendError,
    BridgeError,
    BridgeStopping,
    CallerNotAllowed,
    ConfigError,
    Conflict,
    Forbidden,
    HostlistError,
    InvalidInput,
    NoCapacity,
    NotLeader,
    TransientBackendError,
)
from bridge.rpc._proto.slurm_k8s_bridge.v1 import bridge_pb2 as pb
from bridge.rpc._proto.slurm_k8s_bridge.v1 import bridge_pb2_grpc as pb_grpc
from bridge.rpc.client import NODE_EVENT_KINDS, BridgeClient, BridgeUnreachable, TlsFiles


@dataclass
class FakeUseCases:
    """In-memory use cases: records every call; answers OK per comma-separated node (ACCEPTED
    for a resume that does not wait)."""

    calls: list[tuple[str, tuple[str, ...]]] = field(default_factory=list)
    error: Exception | None = None
    results: list[NodeResult] | None = None
    statuses: list[NodeStatus] = field(default_factory=list)
    #: accept_resume's ``answered`` Event and whether it was set while the use case ran.
    answered: threading.Event | None = None
    answered_during_call: bool | None = None
    #: What ListPools says of gang scheduling.
    gang: GangMode = GANG_MODE_OFF

    def _answer(
        self, name: str, hostlist: str, *args: str, outcome: Outcome = Outcome.OK
    ) -> list[NodeResult]:
        self.calls.append((name, (hostlist, *args)))
        if self.error is not None:
            raise self.error
        if self.results is not None:
            return self.results
        return [NodeResult(node, outcome) for node in hostlist.split(",")]

    def resume(self, hostlist: str, resume_file: str, request_id: str) -> list[NodeResult]:
        return self._answer("resume", hostlist, resume_file, request_id)

    def accept_resume(
        self,
        hostlist: str,
        resume_file: str,
        request_id: str,
        *,
        answered: threading.Event | None = None,
    ) -> list[NodeResult]:
        self.answered = answered
        self.answered_during_call = answered.is_set() if answered is not None else None
        return self._answer(
            "accept_resume", hostlist, resume_file, request_id, outcome=Outcome.ACCEPTED
        )

    def suspend(self, hostlist: str, request_id: str) -> list[NodeResult]:
        return self._answer("suspend", hostlist, request_id)

    def resume_failed(self, hostlist: str, request_id: str) -> list[NodeResult]:
        return self._answer("resume_failed", hostlist, request_id)

    def node_event(
        self, kind: str, hostlist: str, reason: str, request_id: str
    ) -> list[NodeResult]:
        return self._answer("node_event", hostlist, kind, reason, request_id)

    def list_nodes(self, hostlist: str, stuck_after: timedelta | None = None) -> list[NodeStatus]:
        self.calls.append(
            ("list_nodes", (hostlist,) if stuck_after is None else (hostlist, stuck_after))
        )
        if self.error is not None:
            raise self.error
        return self.statuses

    # The pools' breakers: tests/unit/test_pool_rpc.py runs them on a real BridgeService.
    def pool_status(self) -> list[PoolBreakerStatus]:
        return []

    def resume_pool(self, pool: str, request_id: str) -> tuple[PoolBreakerStatus, bool]:
        raise InvalidInput(f"pool: {pool!r} is not a configured pool")

    def gang_scheduling(self) -> GangMode:
        return self.gang


def _stub(ch: grpc.Channel) -> pb_grpc.BridgeStub:
    return pb_grpc.BridgeStub(ch)  # type: ignore[no-untyped-call]  # generated


@pytest.fixture
def fake() -> FakeUseCases:
    return FakeUseCases()


@pytest.fixture
def sock(tmp_path: Path) -> Path:
    # AF_UNIX paths are limited to ~107 bytes; pytest's tmp_path can be long.
    path = tmp_path / "run" / "b.sock"
    assert len(str(path)) < 100
    return path


@pytest.fixture
def server(fake: FakeUseCases, sock: Path) -> Iterator[BridgeServer]:
    srv = build_server(fake, unix_socket=str(sock), socket_mode=0o660, max_workers=4)
    srv.start()
    yield srv
    srv.stop(None)


@pytest.fixture
def client(server: BridgeServer, sock: Path) -> Iterator[BridgeClient]:
    with BridgeClient(f"unix:{sock}", timeout_s=5.0) as c:
        yield c


# --- every RPC through the client ---------------------------------------------------------


@pytest.mark.parametrize(
    ("wait", "use_case", "outcome"),
    [(False, "accept_resume", Outcome.ACCEPTED), (True, "resume", Outcome.OK)],
    ids=["no-wait-accepts", "wait-creates"],
)
def test_resume_passes_hostlist_file_and_request_id(
    client: BridgeClient, fake: FakeUseCases, wait: bool, use_case: str, outcome: Outcome
) -> None:
    results = client.resume_nodes("c1,c2", '{"all_nodes":"c[1-2]"}', "rid-1", wait=wait)
    assert results == [NodeResult("c1", outcome), NodeResult("c2", outcome)]
    assert fake.calls == [(use_case, ("c1,c2", '{"all_nodes":"c[1-2]"}', "rid-1"))]


def test_a_resume_that_does_not_wait_releases_its_creates_once_the_answer_is_out(
    client: BridgeClient, fake: FakeUseCases
) -> None:
    """The creates start after the answer (gRPC's termination callback), so a thousand
    results are not serialised beside 64 create threads."""
    client.resume_nodes("c1", "", "rid-a")
    assert fake.answered is not None
    assert fake.answered_during_call is False
    assert fake.answered.wait(5)


@pytest.mark.parametrize(
    ("request_kwargs", "use_case"),
    [({}, "accept_resume"), ({"wait": False}, "accept_resume"), ({"wait": True}, "resume")],
    ids=["unset", "false", "true"],
)
def test_resume_wait_field_picks_the_use_case(
    server: BridgeServer,
    sock: Path,
    fake: FakeUseCases,
    request_kwargs: dict[str, bool],
    use_case: str,
) -> None:
    """An older client that never sets ``wait`` gets the fast answer, as the hooks do."""
    req = pb.ResumeNodesRequest(hostlist="c1", request_id="rid-w", **request_kwargs)
    with grpc.insecure_channel(f"unix:{sock}") as ch:
        _stub(ch).ResumeNodes(req, timeout=5)
    assert fake.calls == [(use_case, ("c1", "", "rid-w"))]


@pytest.mark.parametrize(
    ("method", "use_case"),
    [("suspend_nodes", "suspend"), ("resume_failed", "resume_failed")],
)
def test_hostlist_rpcs(
    client: BridgeClient, fake: FakeUseCases, method: str, use_case: str
) -> None:
    results = getattr(client, method)("c[1-3]", "rid-2")
    assert results == [NodeResult("c[1-3]", Outcome.OK)]
    assert fake.calls == [(use_case, ("c[1-3]", "rid-2"))]


@pytest.mark.parametrize("kind", NODE_EVENT_KINDS)
def test_node_event_kinds(client: BridgeClient, fake: FakeUseCases, kind: str) -> None:
    client.node_event(kind, "c1", "Not responding", "rid-3")
    assert fake.calls == [("node_event", ("c1", kind, "Not responding", "rid-3"))]


def test_node_event_unknown_kind_rejected_by_client(client: BridgeClient) -> None:
    with pytest.raises(InvalidInput, match="reboot"):
        client.node_event("reboot", "c1")


def test_node_event_unspecified_kind_rejected_by_server(
    server: BridgeServer, sock: Path, fake: FakeUseCases
) -> None:
    with grpc.insecure_channel(f"unix:{sock}") as ch:
        stub = _stub(ch)
        with pytest.raises(grpc.RpcError) as info:
            stub.NodeEvent(pb.NodeEventRequest(hostlist="c1"), timeout=5)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert fake.calls == []


def test_list_nodes(client: BridgeClient, fake: FakeUseCases) -> None:
    since = datetime(2026, 12, 2, 9, 30, 1, 500000, tzinfo=UTC)
    fake.statuses = [
        NodeStatus("c1", "cpu", "alloc", "Running", "10.0.0.5", "", since),
        NodeStatus("c2", "cpu", "idle~", "", "", "k8s: Unschedulable: 0/3 nodes", None),
    ]
    assert client.list_nodes("c[1-2]") == fake.statuses
    assert client.list_nodes() == fake.statuses
    assert fake.calls == [("list_nodes", ("c[1-2]",)), ("list_nodes", ("",))]


@pytest.mark.parametrize("error_class", list(ErrorClass))
@pytest.mark.parametrize("outcome", list(Outcome))
def test_every_outcome_and_error_class_round_trips(
    client: BridgeClient, fake: FakeUseCases, outcome: Outcome, error_class: ErrorClass
) -> None:
    fake.results = [NodeResult("c1", outcome, error_class, "why")]
    assert client.suspend_nodes("c1") == fake.results


def test_empty_request_id_gets_one_from_the_server(server: BridgeServer, sock: Path) -> None:
    with grpc.insecure_channel(f"unix:{sock}") as ch:
        resp = _stub(ch).SuspendNodes(pb.SuspendNodesRequest(hostlist="c1"), timeout=5)
    assert resp.request_id.startswith("srv-")
    assert [r.node for r in resp.results] == ["c1"]


@pytest.mark.parametrize(
    "request_id",
    [
        "x\n2026-12-05 12:00:00,000 INFO bridge.api.servicer: forged",
        "a" * 65,
        "id with blanks",
        "é",
    ],
    ids=["newline-forges-a-line", "too-long", "blanks", "not-ascii"],
)
def test_a_request_id_that_is_not_one_is_refused_and_logged_safely(
    server: BridgeServer,
    sock: Path,
    fake: FakeUseCases,
    caplog: pytest.LogCaptureFixture,
    request_id: str,
) -> None:
    """Issue 31 item 5: the caller's request id went into the log as sent (a newline forged a
    line) and on into Slurm and Kubernetes. It is refused, naming the field; the log line
    carries the server's own id and the hostlist escaped."""
    with (
        caplog.at_level(logging.INFO, logger="bridge.api.servicer"),
        grpc.insecure_channel(f"unix:{sock}") as ch,
        pytest.raises(grpc.RpcError) as info,
    ):
        _stub(ch).SuspendNodes(
            pb.SuspendNodesRequest(hostlist="c1\nforged", request_id=request_id), timeout=5
        )
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (info.value.details() or "").startswith("request_id: must be 1 to 64 of")
    assert fake.calls == []
    (line,) = [r.getMessage() for r in caplog.records if "SuspendNodes" in r.getMessage()]
    assert "\n" not in line and "request_id=srv-" in line and "hostlist=c1\\nforged" in line


@pytest.mark.parametrize("hostlist", ["", "  "])
def test_empty_hostlist_is_invalid_and_never_reaches_use_cases(
    client: BridgeClient, fake: FakeUseCases, hostlist: str
) -> None:
    with pytest.raises(InvalidInput, match="hostlist"):
        client.resume_nodes(hostlist)
    assert fake.calls == []


# --- error mapping ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "code", "client_error"),
    [
        (InvalidInput("bad resume file"), grpc.StatusCode.INVALID_ARGUMENT, InvalidInput),
        (HostlistError("c[1-"), grpc.StatusCode.INVALID_ARGUMENT, InvalidInput),
        (
            TransientBackendError("apiserver 503"),
            grpc.StatusCode.UNAVAILABLE,
            TransientBackendError,
        ),
        (BridgeStopping("stopping"), grpc.StatusCode.UNAVAILABLE, TransientBackendError),
        (ConfigError("pools.yaml:3"), grpc.StatusCode.FAILED_PRECONDITION, BridgeError),
        (NoCapacity("quota"), grpc.StatusCode.FAILED_PRECONDITION, BridgeError),
        (Conflict("pod c1 not ours"), grpc.StatusCode.FAILED_PRECONDITION, BridgeError),
        (Forbidden("rbac"), grpc.StatusCode.FAILED_PRECONDITION, BridgeError),
        (BackendError("scontrol exit 1"), grpc.StatusCode.FAILED_PRECONDITION, BridgeError),
        (BridgeError("odd"), grpc.StatusCode.INTERNAL, BridgeError),
        (KeyError("bug"), grpc.StatusCode.INTERNAL, BridgeError),
    ],
)
@pytest.mark.usefixtures("server")
def test_error_mapping(
    sock: Path,
    fake: FakeUseCases,
    error: Exception,
    code: grpc.StatusCode,
    client_error: type[BridgeError],
) -> None:
    fake.error = error
    with grpc.insecure_channel(f"unix:{sock}") as ch, pytest.raises(grpc.RpcError) as info:
        _stub(ch).ResumeNodes(pb.ResumeNodesRequest(hostlist="c1", request_id="rid-e"), timeout=5)
    assert info.value.code() == code
    details = info.value.details() or ""
    assert "rid-e" in details
    if not isinstance(error, KeyError):
        assert str(error) in details
    with (
        BridgeClient(f"unix:{sock}", timeout_s=5.0, attempts=2) as c,
        pytest.raises(client_error) as raised,
    ):
        c.list_nodes()
    assert not isinstance(raised.value, BridgeUnreachable)


def test_transient_backend_error_is_retried_then_raised(
    server: BridgeServer, sock: Path, fake: FakeUseCases
) -> None:
    fake.error = TransientBackendError("apiserver 503")
    with (
        BridgeClient(f"unix:{sock}", timeout_s=5.0, attempts=3) as c,
        pytest.raises(TransientBackendError, match="apiserver 503"),
    ):
        c.suspend_nodes("c1", "rid-t")
    assert [name for name, _ in fake.calls] == ["suspend"] * 3


def test_invalid_input_is_not_retried(client: BridgeClient, fake: FakeUseCases) -> None:
    fake.error = InvalidInput("nope")
    with pytest.raises(InvalidInput):
        client.suspend_nodes("c1")
    assert len(fake.calls) == 1


def test_one_log_line_per_request(client: BridgeClient, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="bridge.api"):
        client.resume_nodes("c1,c2", "", "rid-log")
    lines = [r.getMessage() for r in caplog.records if "rid-log" in r.getMessage()]
    assert len(lines) == 1
    assert "ResumeNodes" in lines[0]
    assert "hostlist=c1,c2" in lines[0]
    assert "nodes=2 ok=0 accepted=2 rejected=0 failed=0" in lines[0]


# --- reachability and retries ---------------------------------------------------------------


def test_unreachable_bridge_fails_fast(tmp_path: Path) -> None:
    start = time.monotonic()
    with (
        BridgeClient(f"unix:{tmp_path}/absent.sock", timeout_s=2.0) as c,
        pytest.raises(BridgeUnreachable, match="No such file"),
    ):
        c.resume_nodes("c1")
    assert time.monotonic() - start < 1.5


def test_retry_reaches_a_server_that_comes_up_late(fake: FakeUseCases, sock: Path) -> None:
    servers: list[BridgeServer] = []

    def start_later() -> None:
        time.sleep(0.1)
        srv = build_server(fake, unix_socket=str(sock), socket_mode=0o600)
        srv.start()
        servers.append(srv)

    thread = threading.Thread(target=start_later)
    thread.start()
    try:
        with BridgeClient(f"unix:{sock}", timeout_s=5.0, attempts=6) as c:
            assert c.suspend_nodes("c1") == [NodeResult("c1", Outcome.OK)]
    finally:
        thread.join()
        for srv in servers:
            srv.stop(None)


# --- health and the socket ------------------------------------------------------------------


@pytest.mark.parametrize("service", ["", SERVICE_NAME])
def test_health_serving(server: BridgeServer, sock: Path, service: str) -> None:
    with grpc.insecure_channel(f"unix:{sock}") as ch:
        resp = health_pb2_grpc.HealthStub(ch).Check(
            health_pb2.HealthCheckRequest(service=service), timeout=5
        )
    assert resp.status == health_pb2.HealthCheckResponse.SERVING
    assert SERVICE_NAME == "slurm_k8s_bridge.v1.Bridge"


@pytest.mark.parametrize("mode", [0o600, 0o660, 0o666])
def test_socket_mode_and_group(fake: FakeUseCases, sock: Path, mode: int) -> None:
    group = grp.getgrgid(os.getgid()).gr_name
    srv = build_server(fake, unix_socket=str(sock), socket_mode=mode, socket_group=group)
    try:
        st = sock.stat()
        assert stat.S_ISSOCK(st.st_mode)
        assert stat.S_IMODE(st.st_mode) == mode
        assert st.st_gid == os.getgid()
    finally:
        srv.stop(None)
    assert not sock.exists()


def test_unknown_socket_group(fake: FakeUseCases, sock: Path) -> None:
    with pytest.raises(ConfigError, match="no-such-group-skb"):
        build_server(fake, unix_socket=str(sock), socket_group="no-such-group-skb")


def test_stale_socket_is_replaced(fake: FakeUseCases, sock: Path) -> None:
    sock.parent.mkdir(parents=True)
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(sock))
    stale.close()  # the file stays, nobody listens: what a crashed bridge leaves behind
    srv = build_server(fake, unix_socket=str(sock))
    srv.start()
    try:
        with BridgeClient(f"unix:{sock}") as c:
            assert c.suspend_nodes("c1")
    finally:
        srv.stop(None)


def test_live_socket_is_not_stolen(server: BridgeServer, fake: FakeUseCases, sock: Path) -> None:
    with pytest.raises(ConfigError, match="in use"):
        build_server(fake, unix_socket=str(sock))
    with BridgeClient(f"unix:{sock}") as c:
        assert c.suspend_nodes("c1")


def test_regular_file_is_not_removed(fake: FakeUseCases, sock: Path) -> None:
    sock.parent.mkdir(parents=True)
    sock.write_text("precious")
    with pytest.raises(ConfigError, match="not a socket"):
        build_server(fake, unix_socket=str(sock))
    assert sock.read_text() == "precious"


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"unix_socket": None}, "Unix socket, a TCP"),
        ({"unix_socket": None, "tcp_listen": "127.0.0.1:0"}, "mutual TLS"),
    ],
)
def test_bad_listen_settings(fake: FakeUseCases, kwargs: dict[str, str | None], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        build_server(fake, **kwargs)  # type: ignore[arg-type]


# --- TCP with mutual TLS ------------------------------------------------------------------


@pytest.fixture
def tls_server(fake: FakeUseCases, pki: Path) -> Iterator[BridgeServer]:
    srv = build_server(
        fake,
        unix_socket=None,
        tcp_listen="127.0.0.1:0",
        tls=TlsServerFiles(str(pki / "server.pem"), str(pki / "server.key"), str(pki / "ca.pem")),
    )
    srv.start()
    yield srv
    srv.stop(None)


def test_mtls_round_trip(tls_server: BridgeServer, pki: Path, fake: FakeUseCases) -> None:
    assert tls_server.tcp_port
    tls = TlsFiles(str(pki / "client.pem"), str(pki / "client.key"), str(pki / "ca.pem"))
    with BridgeClient(f"127.0.0.1:{tls_server.tcp_port}", tls=tls, timeout_s=5.0) as c:
        assert c.resume_nodes("c1", "{}", "rid-tls") == [NodeResult("c1", Outcome.ACCEPTED)]
    assert fake.calls == [("accept_resume", ("c1", "{}", "rid-tls"))]


def test_mtls_rejects_a_certificate_from_another_ca(
    tls_server: BridgeServer, pki: Path, fake: FakeUseCases
) -> None:
    tls = TlsFiles(str(pki / "rogue.pem"), str(pki / "rogue.key"), str(pki / "ca.pem"))
    target = f"127.0.0.1:{tls_server.tcp_port}"
    with (
        BridgeClient(target, tls=tls, timeout_s=1.0, attempts=1) as c,
        pytest.raises(BridgeUnreachable),
    ):
        c.suspend_nodes("c1")
    assert fake.calls == []


def test_mtls_rejects_a_client_without_certificate(
    tls_server: BridgeServer, pki: Path, fake: FakeUseCases
) -> None:
    creds = grpc.ssl_channel_credentials(root_certificates=(pki / "ca.pem").read_bytes())
    target = f"127.0.0.1:{tls_server.tcp_port}"
    with grpc.secure_channel(target, creds) as ch, pytest.raises(grpc.RpcError) as info:
        _stub(ch).SuspendNodes(pb.SuspendNodesRequest(hostlist="c1"), timeout=1.0)
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    assert fake.calls == []


@pytest.mark.parametrize(
    ("cert", "allowed", "served"),
    [
        ("client", frozenset({"*"}), True),  # any certificate of the client CA, said so
        ("client", frozenset({"slurmctld"}), True),  # the client's DNS SAN
        ("client", frozenset({"client"}), False),  # its CN is no name to pin
        ("client", frozenset({"login-node", "other"}), False),
        ("mailer", frozenset({"slurmctld"}), False),  # an email SAN is not a host's name
        ("workload", frozenset({"spiffe://hpc.example/slurmctld"}), True),  # a URI SAN
        ("workload", frozenset({"slurmctld"}), False),
    ],
)
def test_mtls_pinned_client_names(
    fake: FakeUseCases, pki: Path, cert: str, allowed: frozenset[str], served: bool
) -> None:
    srv = build_server(
        fake,
        unix_socket=None,
        tcp_listen="127.0.0.1:0",
        tls=TlsServerFiles(str(pki / "server.pem"), str(pki / "server.key"), str(pki / "ca.pem")),
        allowed_client_names=allowed,
    )
    srv.start()
    tls = TlsFiles(str(pki / f"{cert}.pem"), str(pki / f"{cert}.key"), str(pki / "ca.pem"))
    try:
        with BridgeClient(f"127.0.0.1:{srv.tcp_port}", tls=tls, timeout_s=5.0) as c:
            if served:
                assert c.suspend_nodes("c1") == [NodeResult("c1", Outcome.OK)]
            else:
                with pytest.raises(CallerNotAllowed, match="tls_client_names"):
                    c.suspend_nodes("c1")
                with pytest.raises(CallerNotAllowed):
                    c.list_nodes()
    finally:
        srv.stop(None)
    assert fake.calls == ([("suspend", ("c1", fake.calls[0][1][1]))] if served else [])


class Follower:
    """Leader election on, another bridge leads."""

    def check(self, what: str) -> None:
        raise NotLeader(f"{what}: this bridge (b-host) does not lead; a-host holds lease x")

    def state(self) -> LeaderState:
        return LeaderState(
            True, "b-host", "x", "a-host", False, datetime(2026, 12, 6, tzinfo=UTC), 2
        )


def test_a_follower_takes_no_mutating_call_and_says_who_leads(
    fake: FakeUseCases, sock: Path
) -> None:
    """UNAVAILABLE (the hooks try the next bridge or retry), naming the leader; reads are
    served, and ListPools says who leads."""
    srv = build_server(fake, unix_socket=str(sock), max_workers=4, leader=Follower())
    srv.start()
    try:
        with grpc.insecure_channel(f"unix:{sock}") as ch:
            stub = _stub(ch)
            for call in (
                lambda: stub.SuspendNodes(pb.SuspendNodesRequest(hostlist="c1"), timeout=5),
                lambda: stub.ResumeNodes(pb.ResumeNodesRequest(hostlist="c1"), timeout=5),
                lambda: stub.ResumePool(pb.ResumePoolRequest(pool="cpu"), timeout=5),
            ):
                with pytest.raises(grpc.RpcError) as info:
                    call()
                assert info.value.code() == grpc.StatusCode.UNAVAILABLE
                assert "does not lead; a-host holds lease x" in (info.value.details() or "")
        with BridgeClient(f"unix:{sock}", timeout_s=5.0) as c:
            _pools, leadership = c.pools_and_leadership()
            assert leadership == Follower().state()
            c.list_nodes("c1")
    finally:
        srv.stop(None)
    assert [name for name, _ in fake.calls] == ["list_nodes"]


def test_without_election_list_pools_says_so(client: BridgeClient) -> None:
    assert client.pools_and_leadership()[1] == LeaderState(enabled=False)


@pytest.mark.parametrize(
    "mode",
    [
        GangMode(api_version="scheduling.k8s.io/v1beta1"),
        GangMode(why_off="the API server serves no PodGroup API"),
        GANG_MODE_OFF,
    ],
    ids=["on", "not-served", "configured-off"],
)
def test_list_pools_says_whether_the_bridge_gang_schedules(
    fake: FakeUseCases, client: BridgeClient, mode: GangMode
) -> None:
    fake.gang = mode
    assert client.pools_report()[2] == mode
