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
