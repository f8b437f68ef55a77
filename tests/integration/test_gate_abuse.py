"""The peer gate under abuse (issue 31 item 4): a uid that may connect to the bridge's socket
but is not allowed to call it must not starve the callers that are.

The security review saw it: each refused connection held three file descriptors in the bridge
(the caller's, the splice to the refusal server, the refusal server's own) for as long as the
caller kept it open, so idle connections from any uid that could connect ran the bridge out of
descriptors; accept() then failed in a loop writing ~40,000 log lines a second, and the hooks got
BridgeUnreachable and set their nodes DOWN. Here a process of uid ``nobody`` with the socket's
group (slurm) opens 10,000 idle connections to the ground's real bridge and holds them, while
slurmctld's hook calls it.
"""

from __future__ import annotations

import grp
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cluster import bridge_pid, run_hook
from tests.conftest import ProvingGround

pytestmark = pytest.mark.integration

CONNECTIONS = 10_000
#: The hook's own deadline (hooks.env sets no SKB_TIMEOUT_S: the default, 2 s).
HOOK_BUDGET_S = 2.0

ATTACKER = """
import socket, sys, time
path, count = sys.argv[1], int(sys.argv[2])
held, failed = [], 0
deadline = time.monotonic() + 60
while len(held) + failed < count and time.monotonic() < deadline:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
        held.append(s)
    except BlockingIOError:  # the listen backlog is full: wait for the bridge to accept
        s.close()
        time.sleep(0.001)
    except OSError:
        failed += 1
        s.close()
print(f"held {len(held)} failed {failed}", flush=True)
sys.stdin.read()  # hold them until the test closes our stdin
"""


def _become_nobody_in_group(gid: int) -> None:
    """In the child: room for the connections, then uid/gid nobody with the socket's group."""
    resource.setrlimit(resource.RLIMIT_NOFILE, (CONNECTIONS + 100, CONNECTIONS + 100))
    os.setgroups([gid])
    os.setgid(65534)
    os.setuid(65534)


def test_ten_thousand_idle_connections_of_a_refused_uid_starve_no_hook(
    proving_ground: ProvingGround,
) -> None:
    pg = proving_ground
    socket_path = "/run/slurm-k8s-bridge/bridge.sock"
    log = pg.layout.logs / "bridge.log"
    group = grp.getgrgid(os.stat(socket_path).st_gid).gr_gid
    assert run_hook(pg, "suspend", "stray-0") == 0  # the bridge answers before the flood
    offset = log.stat().st_size
    attacker = subprocess.Popen(
        [sys.executable, "-c", ATTACKER, socket_path, str(CONNECTIONS)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: _become_nobody_in_group(group),  # noqa: PLW1509 (no threads here)
        cwd="/",
    )
    try:
        assert attacker.stdout is not None
        held = attacker.stdout.readline()
        print(f"attacker: {held.strip()}")
        flooded = time.monotonic()
        timings = []
        for _ in range(5):
            started = time.monotonic()
            status = run_hook(pg, "resume", "stray-0")
            timings.append(time.monotonic() - started)
            assert status == 0, f"the hook failed under the flood (exit {status})"
        # stray-0 is in no pool: the bridge answers UNKNOWN_NODE at once, and nothing is made.
        print(f"resume hook calls under the flood: {', '.join(f'{t:.3f}s' for t in timings)}")
        assert max(timings) < HOOK_BUDGET_S, timings
        pid = bridge_pid(pg)
        fds = len(os.listdir(f"/proc/{pid}/fd"))
        print(f"bridge descriptors under the flood: {fds}")
        assert fds < 1000, fds  # a few per refused connection it keeps, not 3 per connection
        time.sleep(2)
        seconds = time.monotonic() - flooded
        lines = _lines_since(log, offset)
        print(f"bridge log: {len(lines)} lines in {seconds:.1f}s under the flood")
        assert len(lines) / seconds < 20, lines[-5:]
    finally:
        assert attacker.stdin is not None and attacker.stdout is not None
        attacker.stdin.close()
        attacker.wait(timeout=30)
        attacker.stdout.close()
    assert run_hook(pg, "suspend", "stray-0") == 0  # and after it


def _lines_since(path: Path, offset: int) -> list[str]:
    with path.open("rb") as f:
        f.seek(offset)
        return f.read().decode(errors="replace").splitlines()
