"""Who may call: the peer gate in front of a real gRPC server, called by real processes of other
uids (the kernel fills in SO_PEERCRED; nothing here is faked)."""

from __future__ import annotations

import logging
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from bridge.api import BridgeServer, build_server
from bridge.api.peer_gate import resolve_uids
from bridge.domain.results import Outcome
from bridge.errors import CallerNotAllowed
from bridge.rpc.client import BridgeClient
from tests.unit.test_api import FakeUseCases

ROOT = Path(__file__).resolve().parents[2]
NOBODY = 65534

# A caller in another process: prints the outcome of one resume call, or the error's type.
CALLER = """
import sys
from bridge.rpc.client import BridgeClient
try:
    with BridgeClient("unix:" + sys.argv[1], timeout_s=5) as client:
        results = client.resume_nodes("cpu-0", "", "from-" + sys.argv[2])
    print("OK", results[0].outcome.name)
except Exception as e:
    print("ERR", type(e).__name__, e)
"""

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="starts callers as other uids")


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A directory every uid may enter: pytest's tmp_path is root-only, and the gate, not the
    file mode, must be what stops a caller here."""
    path = Path(tempfile.mkdtemp(prefix="skb-gate-", dir="/tmp"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def start(fake: FakeUseCases, sock: Path, allowed: frozenset[int]) -> BridgeServer:
    server = build_server(fake, unix_socket=str(sock), socket_mode=0o666, allowed_uids=allowed)
    server.start()
    return server


def call_as(uid: int, sock: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-c", CALLER, str(sock), str(uid)],
        user=uid,
        group=uid,
        extra_groups=[],
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "GRPC_VERBOSITY": "ERROR"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@needs_root
@pytest.mark.parametrize(
    ("caller", "allowed", "expected"),
    [
        (NOBODY, frozenset({0}), "ERR CallerNotAllowed"),
        (NOBODY, frozenset({0, NOBODY}), "OK ACCEPTED"),
        (0, frozenset({0}), "OK ACCEPTED"),
        (0, frozenset({NOBODY}), "ERR CallerNotAllowed"),
    ],
)
def test_only_allowed_uids_reach_the_service(
    open_dir: Path,
    caplog: pytest.LogCaptureFixture,
    caller: int,
    allowed: frozenset[int],
    expected: str,
) -> None:
    fake = FakeUseCases()
    sock = open_dir / "bridge.sock"
    server = start(fake, sock, allowed)
    try:
        with caplog.at_level(logging.WARNING, logger="bridge.api.peer_gate"):
            answer = call_as(caller, sock)
    finally:
        server.stop(0)
    assert answer.startswith(expected), answer
    if expected.startswith("ERR"):
        assert "permission denied" in answer
        assert fake.calls == [], "a refused caller must never reach the use cases"
        refusals = [r.getMessage() for r in caplog.records if "refused caller" in r.getMessage()]
        assert len(refusals) == 1, caplog.text
        assert f"uid={caller}(" in refusals[0] and "pid=" in refusals[0]
    else:
        assert fake.calls == [("accept_resume", ("cpu-0", "", f"from-{caller}"))]


def test_socket_is_never_wider_than_its_mode(open_dir: Path) -> None:
    previous = os.umask(0)  # the worst start-up environment: files born world-writable
    try:
        server = build_server(FakeUseCases(), unix_socket=str(open_dir / "b.sock"))
    finally:
        os.umask(previous)
    try:
        mode = stat.S_IMODE((open_dir / "b.sock").lstat().st_mode)
        assert mode == 0o660
        private = [p for p in open_dir.iterdir() if p.name == ".b.sock.d"]
        assert len(private) == 1
        # The gRPC servers' own sockets sit where only the bridge's user can reach them.
        assert stat.S_IMODE(private[0].stat().st_mode) == 0o700
    finally:
        server.stop(0)
    assert sorted(p.name for p in open_dir.iterdir()) == [], "stop() removes every socket"


def test_a_killed_bridges_private_directory_is_replaced(open_dir: Path) -> None:
    stale = open_dir / ".bridge.sock.d"
    stale.mkdir(mode=0o755)
    (stale / "a.sock").write_text("left by a bridge that was SIGKILLed")
    server = start(FakeUseCases(), open_dir / "bridge.sock", frozenset({os.geteuid()}))
    try:
        assert stat.S_IMODE(stale.stat().st_mode) == 0o700
        with BridgeClient(f"unix:{open_dir / 'bridge.sock'}", timeout_s=5) as client:
            assert client.suspend_nodes("n-1")[0].outcome is Outcome.OK
    finally:
        server.stop(0)


def test_many_concurrent_callers_all_answered(open_dir: Path) -> None:
    fake = FakeUseCases()
    sock = open_dir / "bridge.sock"
    server = start(fake, sock, frozenset({os.geteuid()}))
    outcomes: list[str] = []

    def one(i: int) -> None:
        with BridgeClient(f"unix:{sock}", timeout_s=10) as client:
            outcomes.append(client.suspend_nodes(f"n-{i}")[0].outcome.name)

    try:
        threads = [threading.Thread(target=one, args=(i,)) for i in range(64)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        server.stop(0)
    assert outcomes == [Outcome.OK.name] * 64


def test_large_request_passes_the_gate(open_dir: Path) -> None:
    """A 6 MiB resume file (a big job array) is carried whole, beyond gRPC's 4 MiB default."""
    fake = FakeUseCases()
    sock = open_dir / "bridge.sock"
    server = start(fake, sock, frozenset({os.geteuid()}))
    contents = '{"jobs": [], "pad": "' + "x" * (6 * 1024 * 1024) + '"}'
    try:
        with BridgeClient(f"unix:{sock}", timeout_s=20) as client:
            results = client.resume_nodes("cpu-0", contents, "big")
    finally:
        server.stop(0)
    assert [r.outcome for r in results] == [Outcome.ACCEPTED]
    assert fake.calls[0][1][1] == contents


def test_refusal_is_caller_not_allowed_for_the_client(open_dir: Path) -> None:
    sock = open_dir / "bridge.sock"
    server = start(FakeUseCases(), sock, frozenset({os.geteuid() + 1}))
    try:
        with (
            BridgeClient(f"unix:{sock}", timeout_s=5) as client,
            pytest.raises(CallerNotAllowed, match="may not call the bridge"),
        ):
            client.list_nodes()
    finally:
        server.stop(0)


@pytest.mark.parametrize(
    ("callers", "expected"),
    [
        (["root"], {0}),
        (["0", 65534], {0, 65534}),
        ([], set()),
    ],
)
def test_resolve_uids(callers: list[str | int], expected: set[int]) -> None:
    assert resolve_uids(callers) == frozenset(expected)


def test_resolve_unknown_user_names_it() -> None:
    with pytest.raises(KeyError, match="no-such-user-here"):
        resolve_uids(["no-such-user-here"])


# Opens N connections as another uid, then reports after ``hold_s`` how many the gate had
# closed (read to EOF; a spliced one stays open after the server's HTTP/2 preface).
HOLDER = """
import socket, sys, time
path, count, hold_s = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
held = []
for _ in range(count):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    held.append(s)
def closed():
    n = 0
    for s in held:
        s.settimeout(0.05)
        try:
            while s.recv(4096):
                pass
            n += 1
        except socket.timeout:
            pass
    return n
time.sleep(0.5)
first = closed()
time.sleep(hold_s)
print(first, closed())
"""


@needs_root
def test_a_refused_uid_holds_few_connections_and_not_for_long(
    open_dir: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 31 item 4: idle connections of a refused uid cost the bridge three descriptors
    each; they are capped per uid and closed after a short while, and logged once."""
    from bridge.api import peer_gate  # noqa: PLC0415

    monkeypatch.setattr(peer_gate, "REFUSED_IDLE_S", 1.0)
    sock = open_dir / "bridge.sock"
    server = start(FakeUseCases(), sock, frozenset({0}))
    try:
        with caplog.at_level(logging.WARNING, logger="bridge.api.peer_gate"):
            done = subprocess.run(
                [sys.executable, "-c", HOLDER, str(sock), "20", "1.5"],
                user=NOBODY, group=NOBODY, extra_groups=[], cwd="/", capture_output=True,
                text=True, timeout=60, check=False,
            )  # fmt: skip
            assert done.returncode == 0, done.stderr
            # Meanwhile and after, an allowed caller is answered.
            assert call_as(0, sock) == "OK ACCEPTED"
    finally:
        server.stop(0)
    at_first, at_last = map(int, done.stdout.split())
    assert at_first == 20 - peer_gate.REFUSED_PER_UID, done.stdout  # the rest closed at once
    assert at_last == 20, done.stdout  # the spliced ones too, after REFUSED_IDLE_S
    refusals = [r.getMessage() for r in caplog.records if "refused caller" in r.getMessage()]
    assert len(refusals) == 1, caplog.text


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("sbatch", "sbatch"),
        ("evil\n2026-12-05 INFO forged", "evil\\n2026-12-05 INFO forged"),
        ("\x1b[31mred\\", "\\x1b[31mred\\\\"),
        ("é\u2028", "\\xe9\\u2028"),
        ("x" * 70, "x" * 64 + "..."),
    ],
)
def test_a_caller_s_process_name_is_escaped_in_the_log(text: str, shown: str) -> None:
    from bridge.api.log_fields import printable  # noqa: PLC0415

    assert printable(text) == shown


@pytest.mark.parametrize(("soft", "budget"), [(1024, 256), (20000, 6581), (100, 16)])
def test_connection_budget_leaves_room_for_the_rest(soft: int, budget: int) -> None:
    from bridge.api.peer_gate import connection_budget  # noqa: PLC0415

    assert connection_budget(soft) == budget


@needs_root
@pytest.mark.parametrize(
    ("mode", "owner", "refused"),
    [
        (0o755, 0, ""),
        (0o750, 0, ""),
        (0o1777, 0, ""),  # /tmp: others may create, but not rename what is ours
        (0o777, 0, "writable by other users without the sticky bit"),
        (0o775, 0, "writable by other users without the sticky bit"),
        (0o755, NOBODY, ""),  # another owner: the site's choice (an image's service user)
        (0o1770, NOBODY, ""),
    ],
)
def test_a_socket_directory_others_may_write_is_refused(
    open_dir: Path, mode: int, owner: int, refused: str
) -> None:
    """Issue 31 item 4: in a directory another uid may rename in (the in-cluster emptyDir was
    0777), that uid replaced the bridge's private directory and answered a root caller itself."""
    from bridge.api.server import check_socket_directory  # noqa: PLC0415
    from bridge.errors import ConfigError  # noqa: PLC0415

    directory = open_dir / "run"
    directory.mkdir()
    os.chown(directory, owner, owner)
    directory.chmod(mode)
    if not refused:
        check_socket_directory(directory)
        return
    with pytest.raises(ConfigError, match=refused):
        check_socket_directory(directory)
    with pytest.raises(ConfigError, match=refused):  # and the bridge does not start there
        build_server(FakeUseCases(), unix_socket=str(directory / "b.sock"), socket_mode=0o660)
