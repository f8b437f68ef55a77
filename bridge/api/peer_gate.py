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

Abuse (issue 31): a uid that may connect but is not allowed must not starve those that are. Each
spliced connection costs the bridge three descriptors, so refused callers get few and short ones
(:data:`REFUSED_PER_UID` each, :data:`REFUSED_TOTAL` in all, closed after
:data:`REFUSED_IDLE_S`); more are closed as soon as they are accepted. Allowed callers share what
the descriptor limit leaves. When accept() fails (EMFILE) the listener rests a moment instead of
spinning, and refusals are logged once per uid and then summarised, with the caller's process
name escaped (it is the caller's to choose).
"""

from __future__ import annotations

import contextlib
import logging
import os
import pwd
import resource
import selectors
import socket
import struct
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from bridge.api.log_fields import printable

log = logging.getLogger(__name__)

_CRED = struct.Struct("3i")  # struct ucred: pid, uid, gid
_CHUNK = 256 * 1024
_BACKLOG = 512
#: Spliced connections a refused uid may hold at once, and all refused uids together: a refused
#: caller needs one, for the milliseconds it takes to read PERMISSION_DENIED.
REFUSED_PER_UID = 4
REFUSED_TOTAL = 64
#: A refused connection is closed this long after it was accepted, whatever it does.
REFUSED_IDLE_S = 5.0
#: Descriptors kept for everything else the bridge opens (Kubernetes, Slurm's CLI, logs).
_FD_RESERVE = 256
#: Each spliced connection holds three descriptors: the caller's, the splice, the server's end.
_FDS_PER_CONNECTION = 3
#: How long the listener rests after accept() failed (EMFILE, ENFILE, ENOBUFS).
_ACCEPT_BACKOFF_S = 0.5
#: Connections accepted per wake-up: drains a full backlog quickly, still lets others run.
_ACCEPTS_PER_WAKE = 64
#: A uid's refusals after its first are summarised at most this often.
_REFUSAL_LOG_EVERY_S = 60.0


@dataclass(frozen=True)
class PeerCredentials:
    """What the kernel recorded about the process that connected."""

    pid: int
    uid: int
    gid: int

    def describe(self) -> str:
        """``uid=1000(alice) gid=1000 pid=4242(sbatch)`` for log lines and refusals; the
        process name is the caller's choice, so it is escaped."""
        return (
            f"uid={self.uid}({user_name(self.uid)}) gid={self.gid} "
            f"pid={self.pid}({printable(_process_name(self.pid))})"
        )


def connection_budget(soft_limit: int) -> int:
    """How many spliced connections fit in a descriptor limit of ``soft_limit`` (at least 16)."""
    return max(16, (soft_limit - _FD_RESERVE) // _FDS_PER_CONNECTION)


@dataclass
class _Refusals:
    """Per uid: connections held now, and refusals not yet logged since the last line."""

    held: dict[int, int] = field(default_factory=dict)
    unlogged: dict[int, int] = field(default_factory=dict)
    logged_at: dict[int, float] = field(default_factory=dict)

    def total(self) -> int:
        return sum(self.held.values())


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


def bind_unix_socket(path: Path, mode: int, gid: int | None, staging: Path) -> socket.socket:
    """A listening socket at ``path`` that is never wider than ``mode``: bound owner-only in
    ``staging`` (a directory only this user can enter), given its group and mode there, where
    nobody can swap the path for a symlink, then renamed into place."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    staged = staging / "p.sock"
    # umask is process-wide; this runs at start-up before the bridge's own threads write files.
    previous = os.umask(0o177)
    try:
        sock.bind(str(staged))
    except OSError:
        sock.close()
        raise
    finally:
        os.umask(previous)
    try:
        if gid is not None:
            os.chown(staged, -1, gid)
        os.chmod(staged, mode)
        sock.listen(_BACKLOG)
        os.rename(staged, path)
    except OSError:
        sock.close()
        staged.unlink(missing_ok=True)
        raise
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
        #: Refused callers' connections (the caller's side) → (uid, closing time).
        self._refused: dict[socket.socket, tuple[int, float]] = {}
        self._refusals = _Refusals()
        self._budget = connection_budget(resource.getrlimit(resource.RLIMIT_NOFILE)[0])
        self._resting_until = 0.0  # the listener is unwatched until then (accept failed)
        self._accept_errors = 0
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
            for key, events in self._selector.select(timeout=0.5):
                if key.data == "accept":
                    self._accept_some()
                elif key.data == "wake":
                    return
                else:
                    sock: socket.socket = key.fileobj  # type: ignore[assignment]
                    if events & selectors.EVENT_WRITE:
                        self._flush(sock)
                    if events & selectors.EVENT_READ and sock in self._pairs:
                        self._pump(sock)
            self._housekeeping(time.monotonic())

    def _housekeeping(self, now: float) -> None:
        """Close refused connections past their time; watch the listener again after a rest;
        write the refusal summaries that are due."""
        for sock, (_uid, until) in list(self._refused.items()):
            if now >= until:
                self._close(sock)
        if self._resting_until and now >= self._resting_until:
            self._resting_until = 0.0
            if self._accept_errors:
                log.error(
                    "peer gate: accept failed %d time(s) (descriptor limit?); %d connection(s) "
                    "open, room for %d",
                    self._accept_errors,
                    len(self._pairs) // 2,
                    self._budget,
                )
                self._accept_errors = 0
            self._selector.register(self._listener, selectors.EVENT_READ, "accept")
        for uid, count in list(self._refusals.unlogged.items()):
            if count and now - self._refusals.logged_at.get(uid, 0.0) >= _REFUSAL_LOG_EVERY_S:
                self._log_refusals(uid, count, now)

    def _log_refusals(self, uid: int, count: int, now: float) -> None:
        log.warning(
            "refused %d more connection(s) of uid=%d(%s) in the last %.0f s (uid not allowed)",
            count,
            uid,
            printable(user_name(uid)),
            _REFUSAL_LOG_EVERY_S,
        )
        self._refusals.unlogged[uid] = 0
        self._refusals.logged_at[uid] = now

    def _rest_listener(self) -> None:
        """Stop watching the listener for a moment: a listener that cannot accept stays
        readable, and watching it would spin."""
        self._accept_errors += 1
        if not self._resting_until:
            self._resting_until = time.monotonic() + _ACCEPT_BACKOFF_S
            with contextlib.suppress(KeyError, ValueError):
                self._selector.unregister(self._listener)

    def _accept_some(self) -> None:
        for _ in range(_ACCEPTS_PER_WAKE):
            if not self._accept() or self._resting_until:
                return

    def _accept(self) -> bool:
        """Accept one connection and splice it; False when there was none to accept."""
        try:
            conn, _ = self._listener.accept()
        except (BlockingIOError, InterruptedError):
            return False
        except OSError:  # EMFILE and the like: rest, keep serving the connections we have
            self._rest_listener()
            return False
        try:
            creds = peer_credentials(conn)
        except OSError as e:
            log.error("peer gate: cannot read the caller's credentials (%s); refusing", e)
            conn.close()
            return True
        allowed = creds.uid in self.allowed_uids
        if not self._admit(creds, allowed):
            conn.close()
            return True
        try:
            backend = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        except OSError:
            conn.close()
            self._rest_listener()
            return True
        target = self._allowed_path if allowed else self._refused_path
        try:
            backend.connect(target)
        except OSError as e:
            log.error("peer gate: cannot reach the gRPC server at %s: %s", target, e)
            backend.close()
            conn.close()
            return True
        for sock in (conn, backend):
            sock.setblocking(False)
            self._outbox[sock] = bytearray()
            self._selector.register(sock, selectors.EVENT_READ, "pump")
        self._pairs[conn] = backend
        self._pairs[backend] = conn
        if not allowed:
            self._refused[conn] = (creds.uid, time.monotonic() + REFUSED_IDLE_S)
            self._refusals.held[creds.uid] = self._refusals.held.get(creds.uid, 0) + 1
        return True

    def _admit(self, creds: PeerCredentials, allowed: bool) -> bool:
        """Whether a connection of ``creds`` gets a splice; a refused uid's are few (the
        refusal itself is logged here, once per uid and then summarised)."""
        if len(self._pairs) // 2 >= self._budget:
            return False  # the descriptor limit: the caller retries, as on a full backlog
        if allowed:
            return True
        uid, now = creds.uid, time.monotonic()
        if uid not in self._refusals.logged_at:
            log.warning(
                "refused caller %s: uid not allowed (allowed uids: %s)",
                creds.describe(),
                ",".join(map(str, sorted(self.allowed_uids))),
            )
            self._refusals.logged_at[uid] = now
        else:
            self._refusals.unlogged[uid] = self._refusals.unlogged.get(uid, 0) + 1
        held = self._refusals.held.get(uid, 0)
        return held < REFUSED_PER_UID and self._refusals.total() < REFUSED_TOTAL

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
            refused = self._refused.pop(s, None)
            if refused is not None:
                uid = refused[0]
                self._refusals.held[uid] -= 1
                if not self._refusals.held[uid]:
                    del self._refusals.held[uid]
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
