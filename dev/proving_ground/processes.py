"""Start daemons in the background, remember their PIDs, stop exactly those.

Every daemon we start is recorded in ``.local/state.json`` with its PID and start time, so
``down`` (or a test fixture) stops only what the proving ground started, even from another process.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from .layout import Layout

log = logging.getLogger(__name__)

#: Daemons started by this process. Holding the Popen objects keeps Python from warning that a
#: child is "still running" when they are collected; ``stop_daemon`` reaps through them.
_children: dict[int, subprocess.Popen[bytes]] = {}


@atexit.register
def _hand_over_children() -> None:
    # The daemons outlive us on purpose (state.json has their PIDs, `down` stops them): tell
    # Popen not to warn about them at exit.
    for child in _children.values():
        if child.poll() is None:
            child.returncode = 0


class ProvingGroundError(RuntimeError):
    """A step of the proving ground failed; the message says which and where to look."""


def _proc_start_time(pid: int) -> str | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return fields[19]  # starttime: guards against a recycled PID


class State:
    """The JSON record of what we started and created."""

    def __init__(self, layout: Layout) -> None:
        self.path = layout.state_file
        self.data: dict[str, Any] = {"processes": {}, "created": {}}
        if self.path.exists():
            self.data = json.loads(self.path.read_text())

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=2, sort_keys=True))
        tmp.replace(self.path)

    @property
    def processes(self) -> dict[str, dict[str, Any]]:
        procs: dict[str, dict[str, Any]] = self.data.setdefault("processes", {})
        return procs

    def running(self, name: str) -> int | None:
        """PID of our daemon ``name`` if it is still the process we started."""
        entry = self.processes.get(name)
        if not entry:
            return None
        pid = int(entry["pid"])
        if _proc_start_time(pid) != entry.get("start"):
            return None
        with contextlib.suppress(OSError):
            stat = Path(f"/proc/{pid}/stat").read_text()
            if stat.rsplit(")", 1)[1].split()[0] == "Z":
                return None
        return pid

    def remember(self, name: str, pid: int, argv: Sequence[str], log_path: Path) -> None:
        self.processes[name] = {
            "pid": pid,
            "start": _proc_start_time(pid),
            "argv": list(argv),
            "log": str(log_path),
        }
        self.save()

    def forget(self, name: str) -> None:
        self.processes.pop(name, None)
        self.save()

    def mark_created(self, kind: str, name: str) -> None:
        items: list[str] = self.data.setdefault("created", {}).setdefault(kind, [])
        if name not in items:
            items.append(name)
        self.save()

    def created(self, kind: str) -> list[str]:
        items: list[str] = self.data.setdefault("created", {}).get(kind, [])
        return list(items)

    def unmark_created(self, kind: str, name: str) -> None:
        items: list[str] = self.data.setdefault("created", {}).get(kind, [])
        if name in items:
            items.remove(name)
        self.save()


def start_daemon(
    state: State,
    name: str,
    argv: Sequence[str],
    *,
    log_dir: Path,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> int:
    """Start ``argv`` detached (own session, log in ``log_dir/name.log``) unless it runs."""
    pid = state.running(name)
    if pid is not None:
        log.info("%s already running (pid %d)", name, pid)
        return pid
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{name}.log"
    with log_path.open("ab") as out:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            start_new_session=True,  # survives our exit; our signals do not reach it
        )
    _children[proc.pid] = proc
    state.remember(name, proc.pid, argv, log_path)
    log.info("started %s (pid %d, log %s)", name, proc.pid, log_path)
    return proc.pid


def stop_daemon(state: State, name: str, *, timeout_s: float = 20.0) -> None:
    """SIGTERM our daemon ``name`` (by recorded PID), SIGKILL after ``timeout_s``."""
    pid = state.running(name)
    if pid is None:
        state.forget(name)
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and state.running(name) is not None:
        _reap(pid)
        time.sleep(0.1)
    if state.running(name) is not None:
        log.warning("%s (pid %d) ignored SIGTERM for %.0fs; SIGKILL", name, pid, timeout_s)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        time.sleep(0.2)
        _reap(pid)
    log.info("stopped %s (pid %d)", name, pid)
    state.forget(name)


def _reap(pid: int) -> None:
    child = _children.get(pid)
    if child is not None:
        if child.poll() is not None:
            del _children[pid]
        return
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def wait_until(
    what: str, check: Callable[[], bool], *, timeout_s: float, log_path: Path | None = None
) -> None:
    """Poll ``check`` until true; on timeout raise with the tail of the daemon's log."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except Exception as e:
            last = e
            del last
        time.sleep(0.25)
    tail = ""
    if log_path is not None and log_path.exists():
        tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-25:])
    raise ProvingGroundError(f"{what} not ready after {timeout_s:.0f}s\n{tail}")


def run(
    argv: Sequence[str],
    *,
    check: bool = True,
    timeout_s: float = 120.0,
    env: Mapping[str, str] | None = None,
    input_text: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run a command (argv list, never a shell) and fail with its stderr when ``check``."""
    result = subprocess.run(
        list(argv),
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env=dict(env) if env is not None else None,
        input=input_text,
        check=False,
    )
    if check and result.returncode != 0:
        raise ProvingGroundError(
            f"{' '.join(argv)} exited {result.returncode}: {result.stderr.strip()[-2000:]}"
        )
    return result
