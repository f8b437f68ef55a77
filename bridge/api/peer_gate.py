"""Who may call the bridge over its Unix socket: the kernel's word on the caller, not a file mode.

gRPC's Python server does not expose the connection's file descriptor, so it cannot ask the
kernel who connected. The gate therefore owns the public socket itself: for each connection it
reads ``SO_PEERCRED`` (uid, gid and pid, filled in by the kernel at ``connect()``), logs refused
callers by uid and pid, and splices the bytes to one of two gRPC servers listening on private
sockets in a directory only the bridge's user can enter:

* the real server, for a caller whose uid is allowed;
* a refusal server that answers every call ``PERMISSION_DENIED`` naming the uid, so a refused
  caller reads why instead of a reset connection it would take for a dead bridge.

The public socket is bound under a umask that leaves it owner-only, then given its group and
mode, so at no moment is it wider than the configured mode.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pwd
import selectors
import socket
import struct
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

_CRED = struct.Struct("3i")  # struct ucred: pid, uid, gid
_CHUNK = 256 * 1024
_BACKLOG = 512


@dataclass(frozen=True)
class PeerCredentials:
    """What the kernel recorded about the process that connected."""

    pid: int
    uid: int
    gid: int

    def describe(self) -> str:
        """``uid=1000(alice) gid=1000 pid=4242(sbatch)`` for log lines and refusals."""
        return (
            f"uid={self.uid}({user_name(self.uid)}) gid={self.gid} "
            f"pid={self.pid}({_process_name(self.pid)})"
        )


def peer_credentials(conn: socket.socket) -> PeerCredentials:
    """``SO_PEERCRED`` of a connected Unix socket."""
    raw = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _CRED.size)
    pid, uid, gid = _CRED.unpack(raw)
    return PeerCredentials(pid=pid, uid=uid, gid=gid)


def resolve_uids(callers: Iterable[str | int]) -> frozenset[int]:
    """User names or numeric uids → uids; an unknown name raises ``KeyError`` naming it."""
    uids = set()
    for caller in callers:
        if isinstance(caller, int) or str(caller).isdigit():
            uids.add(int(caller))
        else:
            try:
                uids.add(pwd.getpwnam(str(caller)).pw_uid)
            except KeyError as e:
                raise KeyError(f"no such user {caller!r}") from e
    return frozenset(uids)


def bind_unix_socket(path: Path, mode: int, gid: int | None) -> socket.socket:
    """A listening socket at ``path`` that is never wider than ``mode``: bound owner-only, then
    given its group, then its mode."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    # umask is process-wide; this runs at start-up before the bridge's own threads write files.
    previous = os.umask(0o177)
    try:
        sock.bind(str(path))
    except OSError:
        sock.close()
        raise
    finally:
        os.umask(previous)
    if gid is not None:
        os.chown(path, -1, gid)
    os.chmod(path, mode)
    sock.listen(_BACKLOG)
    return sock


class PeerGate:
    """Accepts on the public socket and splices each connection to ``allowed_path`` or, for a uid
    outside ``allowed_uids``, to ``refused_path``."""

    def __init__(
        self,
        listener: socket.socket,
        allowed_uids: frozenset[int],
        allowed_path: str,
        refused_path: str,
    ) -> None:
        self._listener = listener
        self.allowed_uids = allowed_uids
        self._allowed_path = allowed_path
        self._refused_path = refused_path
        self._selector = selectors.DefaultSelector()
        self._pairs: dict[socket.socket, socket.socket] = {}
        self._outbox: dict[socket.socket, bytearray] = {}
        self._draining: set[socket.socket] = set()
        self._wake_r, self._wake_w = socket.socketpair()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="peer-gate", daemon=True)

    def start(self) -> None:
        """Start accepting."""
        self._listener.setblocking(False)
        self._selector.register(self._listener, selectors.EVENT_READ, "accept")
        self._selector.register(self._wake_r, selectors.EVENT_READ, "wake")
        self._thread.start()

    def stop(self) -> None:
        """Stop accepting, close every spliced connection and the listener."""
        self._stopping.set()
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        for sock in list(self._pairs):
            self._close(sock)
        for sock in (self._listener, self._wake_r, self._wake_w):
            sock.close()
        self._selector.close()

    def _run(self) -> None:
        # One thread with a selector: a hook holds its connection for milliseconds, and a
        # thousand of them at once must not mean two thousand threads.
        while not self._stopping.is_set():
            for key, events in self._selector.select(timeout=1.0):
                if key.data == "accept":
                    self._accept()
                elif key.data == "wake":
                    return
                else:
                    sock: socket.socket = key.fileobj  # type: ignore[assignment]
                    if events & selectors.EVENT_WRITE:
                        self._flush(sock)
                    if events & selectors.EVENT_READ and sock in self._pairs:
                        self._pump(sock)

    def _accept(self) -> None:
        try:
            conn, _ = self._listener.accept()
        except (BlockingIOError, InterruptedError):
            return
        except OSError as e:  # e.g. EMFILE: keep serving the connections we have
            log.error("peer gate: accept failed: %s", e)
            return
        try:
            creds = peer_credentials(conn)
        except OSError as e:
            log.error("peer gate: cannot read the caller's credentials (%s); refusing", e)
            conn.close()
            return
        if creds.uid in self.allowed_uids:
            target = self._allowed_path
        else:
            log.warning(
                "refused caller %s: uid not allowed (allowed uids: %s)",
                creds.describe(),
                ",".join(map(str, sorted(self.allowed_uids))),
            )
            target = self._refused_path
        backend = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            backend.connect(target)
        except OSError as e:
            log.error("peer gate: cannot reach the gRPC server at %s: %s", target, e)
            backend.close()
            conn.close()
            return
        for sock in (conn, backend):
            sock.setblocking(False)
            self._outbox[sock] = bytearray()
            self._selector.register(sock, selectors.EVENT_READ, "pump")
        self._pairs[conn] = backend
        self._pairs[backend] = conn

    def _pump(self, source: socket.socket) -> None:
        sink = self._pairs[source]
        try:
            data = source.recv(_CHUNK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            # The source is done: close both once what it sent has reached the sink.
            self._draining.add(sink)
            self._outbox[source].clear()
            self._flush(sink)
            return
        self._outbox[sink] += data
        self._flush(sink)

    def _flush(self, sink: socket.socket) -> None:
        """Send what is queued for ``sink``; while it backs up, stop reading its peer."""
        box = self._outbox.get(sink)
        if box is None:
            return
        try:
            sent = sink.send(box) if box else 0
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError:
            self._close(sink)
            return
        del box[:sent]
        if sink in self._draining and not box:
            self._close(sink)
            return
        self._watch(sink)
        self._watch(self._pairs[sink])

    def _watch(self, sock: socket.socket) -> None:
        """Read from ``sock`` while its peer's queue is short; write while its own is not empty.

        A peer that stops reading thus stalls only its own connection (gRPC deadlines end it).
        """
        peer = self._pairs.get(sock)
        if peer is None:
            return
        events = 0
        if peer not in self._draining and len(self._outbox[peer]) <= _CHUNK:
            events |= selectors.EVENT_READ
        if self._outbox[sock]:
            events |= selectors.EVENT_WRITE
        registered = sock in self._selector.get_map()
        if events and registered:
            self._selector.modify(sock, events, "pump")
        elif events:
            self._selector.register(sock, events, "pump")
        elif registered:
            self._selector.unregister(sock)

    def _close(self, sock: socket.socket) -> None:
        peer = self._pairs.pop(sock, None)
        for s in (sock, peer):
            if s is None:
                continue
            self._pairs.pop(s, None)
            self._outbox.pop(s, None)
            self._draining.discard(s)
            with contextlib.suppress(KeyError, ValueError):
                self._selector.unregister(s)
            s.close()


def user_name(uid: int) -> str:
    """The user name of ``uid``, or ``?``."""
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return "?"


def _process_name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return "?"
