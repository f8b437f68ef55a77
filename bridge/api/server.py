"""The gRPC server around the servicer: Unix socket behind the peer gate, TCP with mutual TLS,
and the standard ``grpc.health.v1`` service.

:func:`build_server` binds the Unix socket (and optionally TCP with mutual TLS) and adds the
health service; the RPCs themselves are :class:`~bridge.api.servicer.BridgeServicer`'s.
"""

from __future__ import annotations

import grp
import logging
import os
import shutil
import socket
import stat
import threading
from collections.abc import Iterable, Sequence
from concurrent import futures
from pathlib import Path
from typing import Any, NamedTuple

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from bridge.api.forwarding import LeaderForwarder
from bridge.api.metrics_interceptor import RpcMetricsInterceptor
from bridge.api.peer_gate import PeerGate, bind_unix_socket, user_name
from bridge.api.servicer import SERVICE_NAME, BridgeServicer, BridgeUseCases, Leader
from bridge.errors import ConfigError
from bridge.metrics import BridgeMetrics
from bridge.rpc._proto.slurm_k8s_bridge.v1 import bridge_pb2_grpc as pb_grpc
from bridge.rpc.tls import TlsFiles, read_tls_files

log = logging.getLogger(__name__)

#: The largest request the server reads: hooks cap the resume file below this, so a huge job
#: array never turns into RESOURCE_EXHAUSTED (which would leave the whole batch to the hook).
MAX_MESSAGE_BYTES = 32 * 1024 * 1024


class TlsServerFiles(NamedTuple):
    """PEM files for the TCP listener: server certificate, key, and the CA clients must chain to."""

    cert: str
    key: str
    client_ca: str


class BridgeServer(grpc.Server):
    """A :class:`grpc.Server` that also knows where it listens and cleans up its socket."""

    def __init__(
        self,
        server: grpc.Server,
        health_servicer: health.HealthServicer,
        unix_socket: str | None,
        tcp_port: int | None,
        gate: _Gate | None = None,
    ) -> None:
        self._server = server
        self._gate = gate
        self._health = health_servicer
        #: The Unix socket path, when listening on one.
        self.unix_socket = unix_socket
        #: The bound TCP port (the real one when asked for port 0), when listening on TCP.
        self.tcp_port = tcp_port

    def add_generic_rpc_handlers(self, generic_rpc_handlers: Iterable[Any]) -> None:
        """Delegate to the wrapped server."""
        self._server.add_generic_rpc_handlers(generic_rpc_handlers)

    def add_registered_method_handlers(self, service_name: str, method_handlers: Any) -> None:
        """Delegate to the wrapped server (generated code calls this on recent grpcio)."""
        self._server.add_registered_method_handlers(service_name, method_handlers)  # type: ignore[attr-defined]

    def add_insecure_port(self, address: str) -> int:
        """Delegate to the wrapped server."""
        return self._server.add_insecure_port(address)

    def add_secure_port(self, address: str, server_credentials: grpc.ServerCredentials) -> int:
        """Delegate to the wrapped server."""
        return self._server.add_secure_port(address, server_credentials)

    def start(self) -> None:
        """Start serving."""
        self._server.start()
        if self._gate is not None:
            self._gate.start()
        log.info("serving socket=%s tcp_port=%s", self.unix_socket or "-", self.tcp_port or "-")

    def stop(self, grace: float | None = None) -> threading.Event:
        """Report NOT_SERVING, stop accepting calls, and remove the socket file."""
        self._health.enter_graceful_shutdown()
        if self._gate is not None:
            self._gate.stop()
        done = self._server.stop(grace)
        if self.unix_socket is not None:
            _remove_socket(Path(self.unix_socket))
        return done

    def wait_for_termination(self, timeout: float | None = None) -> bool:
        """Block until the server stopped (or ``timeout`` passed)."""
        return self._server.wait_for_termination(timeout)


def build_server(
    use_cases: BridgeUseCases,
    *,
    unix_socket: str | None,
    socket_mode: int = 0o660,
    socket_group: str | None = None,
    tcp_listen: str | None = None,
    tls: TlsServerFiles | Sequence[str] | None = None,
    max_workers: int = 8,
    allowed_uids: frozenset[int] | None = None,
    allowed_client_names: frozenset[str] = frozenset(),
    metrics: BridgeMetrics | None = None,
    leader: Leader | None = None,
    forwarder: LeaderForwarder | None = None,
) -> BridgeServer:
    """Build (not start) the bridge's gRPC server with the health service set to SERVING.

    ``unix_socket``: path to listen on (parent created, stale socket removed, bound owner-only and
    then given ``socket_group`` and ``socket_mode``); only callers whose uid is in
    ``allowed_uids`` (default: root and this process's user) reach the service, others get
    PERMISSION_DENIED (see :mod:`bridge.api.peer_gate`). ``tcp_listen``: ``host:port`` (port 0 picks
    one, see :attr:`BridgeServer.tcp_port`); TCP is only ever served with mutual TLS, so it needs
    ``tls`` = (cert, key, client_ca). ``metrics``: counts every call (see
    :class:`~bridge.api.metrics_interceptor.RpcMetricsInterceptor`).
    """
    if unix_socket is None and tcp_listen is None:
        raise ConfigError("api: set a Unix socket, a TCP listen address, or both")
    if tcp_listen is not None and tls is None:
        raise ConfigError("api: TCP listening requires mutual TLS (cert, key, client_ca)")
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=max_workers),
        options=[("grpc.max_receive_message_length", MAX_MESSAGE_BYTES)],
        interceptors=[RpcMetricsInterceptor(metrics)] if metrics is not None else None,
    )
    # The generated grpc module has no type hints.
    servicer = BridgeServicer(
        use_cases, allowed_client_names=allowed_client_names, leader=leader, forwarder=forwarder
    )
    pb_grpc.add_BridgeServicer_to_server(servicer, server)  # type: ignore[no-untyped-call]
    health_servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    for service in ("", SERVICE_NAME):  # "" is the whole server, as probes ask by default
        health_servicer.set(service, health_pb2.HealthCheckResponse.SERVING)

    gate = None
    if unix_socket is not None:
        gate = _gate_unix_socket(
            server,
            Path(unix_socket),
            socket_mode,
            socket_group,
            allowed_uids if allowed_uids is not None else frozenset({0, os.geteuid()}),
        )
    tcp_port = None
    if tcp_listen is not None and tls is not None:
        cert, key, client_ca = read_tls_files(TlsFiles(*tls))
        creds = grpc.ssl_server_credentials(
            [(key, cert)], root_certificates=client_ca, require_client_auth=True
        )
        try:
            tcp_port = server.add_secure_port(tcp_listen, creds)
        except RuntimeError as e:
            raise ConfigError(f"api: cannot listen on {tcp_listen}: {e}") from e
        if tcp_port == 0:
            raise ConfigError(f"api: cannot listen on {tcp_listen}")
    return BridgeServer(server, health_servicer, unix_socket, tcp_port, gate)


def _prepare_socket_path(path: Path) -> None:
    """Create the parent directory and check that no other user may write it; remove a stale
    socket, but never a live one or a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    check_socket_directory(path.parent)
    try:
        st = path.lstat()
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(st.st_mode):
        raise ConfigError(f"api: {path} exists and is not a socket; refusing to replace it")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.settimeout(0.5)
        probe.connect(str(path))
    except OSError:
        log.info("removing stale socket %s", path)
        path.unlink(missing_ok=True)
        return
    finally:
        probe.close()
    raise ConfigError(f"api: {path} is in use by another process (is a bridge already running?)")


def check_socket_directory(directory: Path) -> None:
    """Refuse a socket directory another user could write: anyone who may rename in it can
    replace the bridge's private directory (and answer its callers) or swap a path for a
    symlink: not group- or world-writable unless sticky. (Its owner may too: an image's
    service user owning it while the bridge runs as root, say; that is the site's choice.)"""
    st = directory.stat()
    writable = st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    if writable and not st.st_mode & stat.S_ISVTX:
        raise ConfigError(
            f"api: the socket directory {directory} (mode {stat.S_IMODE(st.st_mode):04o}) is "
            "writable by other users without the sticky bit, who could replace the bridge's "
            f"sockets; make it 0755 (or 1777): chmod go-w {directory}"
        )


class _Gate:
    """The peer gate with the refusal server and the private directory behind it."""

    def __init__(self, gate: PeerGate, refusal: grpc.Server, private_dir: Path) -> None:
        self.gate = gate
        self.refusal = refusal
        self.private_dir = private_dir

    def start(self) -> None:
        self.refusal.start()
        self.gate.start()

    def stop(self) -> None:
        self.gate.stop()
        self.refusal.stop(0)
        shutil.rmtree(self.private_dir, ignore_errors=True)


def _gate_unix_socket(
    server: grpc.Server,
    path: Path,
    mode: int,
    group: str | None,
    allowed_uids: frozenset[int],
) -> _Gate:
    """Serve ``server`` behind a :class:`PeerGate` on ``path``: the gRPC servers listen in a
    directory only this user can enter; the public socket is the gate's."""
    gid = None
    if group is not None:
        try:
            gid = grp.getgrnam(group).gr_gid
        except KeyError as e:
            raise ConfigError(f"api: socket group {group!r} does not exist") from e
    _prepare_socket_path(path)
    # No live bridge serves this socket (checked above), so a directory left by one that was
    # killed is stale. mkdir(0o700) is owner-only whatever the umask; short names keep the
    # socket paths under sun_path's 108 bytes.
    private_dir = path.parent / f".{path.name}.d"
    shutil.rmtree(private_dir, ignore_errors=True)
    try:
        private_dir.mkdir(mode=0o700)
    except OSError as e:
        raise ConfigError(f"api: cannot create {private_dir}: {e}") from e
    allowed, refused = private_dir / "a.sock", private_dir / "r.sock"
    if server.add_insecure_port(f"unix:{allowed}") == 0:
        raise ConfigError(f"api: cannot listen on unix socket {allowed}")
    refusal = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    refusal.add_generic_rpc_handlers((_RefuseEverything(allowed_uids),))
    if refusal.add_insecure_port(f"unix:{refused}") == 0:
        raise ConfigError(f"api: cannot listen on unix socket {refused}")
    try:
        listener = bind_unix_socket(path, mode, gid, private_dir)
    except OSError as e:
        raise ConfigError(f"api: cannot listen on unix socket {path}: {e}") from e
    return _Gate(PeerGate(listener, allowed_uids, str(allowed), str(refused)), refusal, private_dir)


class _RefuseEverything(grpc.GenericRpcHandler):  # type: ignore[type-arg]
    """Answers every method PERMISSION_DENIED: what a caller whose uid is not allowed reads."""

    def __init__(self, allowed_uids: frozenset[int]) -> None:
        names = ", ".join(f"{uid}({user_name(uid)})" for uid in sorted(allowed_uids))
        self._message = (
            f"permission denied: your uid may not call the bridge (allowed uids: {names}; "
            "bridge.allowed_callers in the bridge's configuration)"
        )

    def service(
        self, handler_call_details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler | None:  # type: ignore[type-arg]
        message = self._message

        def refuse(_request: bytes, context: grpc.ServicerContext) -> bytes:
            context.abort(grpc.StatusCode.PERMISSION_DENIED, message)

        return grpc.unary_unary_rpc_method_handler(refuse)


def _remove_socket(path: Path) -> None:
    try:
        if stat.S_ISSOCK(path.lstat().st_mode):
            path.unlink()
    except FileNotFoundError:
        pass
