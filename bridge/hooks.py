"""What slurmctld runs: ResumeProgram, SuspendProgram, ResumeFailProgram and strigger programs.

``python -m bridge.hooks resume|suspend|resume_fail <hostlist>`` or
``python -m bridge.hooks node_event down|drain|fail|up|idle <hostlist>``; the ``slurm_plugins/``
executables find the interpreter and settings and exec this.

A hook only forwards the call to the bridge and exits: Slurm kills slow programs, a slow hook
stalls ``scontrol reconfigure``, and processes a hook spawns inherit slurmctld's blocked signals.
Slurm's environment has no PATH, so every program is called by absolute path.

If the bridge cannot be reached, a resume marks its nodes DOWN with a ``k8s: BridgeUnreachable``
reason (through ``scontrol``), so Slurm requeues the jobs now instead of after ResumeTimeout;
other hooks only log, since the bridge's reconcile loop repairs them later. Exit status: 0 when
the bridge took the call (per-node failures are the bridge's to handle), 1 when it did not,
2 for a usage error.

Start-up time matters (Slurm waits for ResumeProgram): only ``os``, ``sys`` and ``time`` are
imported up front; the resume file is read before grpc is even imported, because its fd is
short-lived.

Settings (environment, normally from ``slurm_plugins/hooks.env``): ``SKB_SOCKET`` (gRPC target,
``unix:/path`` or ``host:port``), ``SKB_SLURM_BIN`` (directory holding ``scontrol``),
``SKB_HOOK_LOG`` (log file; empty: stderr only), ``SKB_TIMEOUT_S`` (total deadline, retries
included), ``SKB_TLS_CERT``/``SKB_TLS_KEY``/``SKB_TLS_CA`` (mutual TLS for a TCP target).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass

from bridge.settings import DEFAULT_TARGET as DEFAULT_SOCKET

DEFAULT_SLURM_BIN = "/usr/bin"
DEFAULT_HOOK_LOG = "/var/log/slurm/slurm-k8s-bridge-hooks.log"
DEFAULT_TIMEOUT_S = 2.0
SCONTROL_TIMEOUT_S = 10.0

#: The biggest resume file sent on (the bridge's own limit, bridge.domain.resume_file.MAX_SIZE;
#: a test keeps the two equal). A bigger one is not sent: the hostlist alone is enough to resume
#: the nodes, and a too-big call would fail the whole batch.
RESUME_FILE_MAX = 16 * 1024 * 1024

HOOK_KINDS = ("resume", "suspend", "resume_fail", "node_event")
#: strigger node events node_event forwards (the same as bridge.rpc.client.NODE_EVENT_KINDS, which
#: is not imported here for start-up time; a test keeps the two equal).
EVENT_KINDS = ("down", "drain", "fail", "up", "idle")
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


@dataclass(frozen=True)
class HookSettings:
    """Where the bridge is and where the hook writes; read from the environment."""

    target: str = DEFAULT_SOCKET
    slurm_bin: str = DEFAULT_SLURM_BIN
    log_path: str = DEFAULT_HOOK_LOG
    timeout_s: float = DEFAULT_TIMEOUT_S
    tls: tuple[str, str, str] | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> HookSettings:
        """Settings from ``SKB_*`` variables; unset or empty ones take the defaults."""
        cert, key, ca = (env.get(k, "") for k in ("SKB_TLS_CERT", "SKB_TLS_KEY", "SKB_TLS_CA"))
        try:
            timeout_s = float(env.get("SKB_TIMEOUT_S") or DEFAULT_TIMEOUT_S)
        except ValueError:
            timeout_s = DEFAULT_TIMEOUT_S  # a typo must not stop nodes from being resumed
        return cls(
            target=env.get("SKB_SOCKET") or DEFAULT_SOCKET,
            slurm_bin=env.get("SKB_SLURM_BIN") or DEFAULT_SLURM_BIN,
            log_path=env.get("SKB_HOOK_LOG", DEFAULT_HOOK_LOG),
            timeout_s=timeout_s,
            tls=(cert, key, ca) if cert and key and ca else None,
        )


@dataclass(frozen=True)
class HookCall:
    """One invocation: which hook, for which nodes, with what."""

    kind: str  # one of HOOK_KINDS
    hostlist: str
    event: str = ""  # node_event only: down, drain, fail, up, idle
    resume_file: str = ""  # resume only: $SLURM_RESUME_FILE's contents

    @property
    def name(self) -> str:
        """``resume`` or ``node_event:down``, as log lines show it."""
        return f"{self.kind}:{self.event}" if self.event else self.kind


class UsageError(Exception):
    """The hook was called with arguments Slurm would never pass."""


def parse_argv(argv: list[str]) -> HookCall:
    """``[kind, hostlist]`` or ``["node_event", event, hostlist]`` → :class:`HookCall`."""
    if not argv or argv[0] not in HOOK_KINDS:
        raise UsageError(f"first argument must be one of {', '.join(HOOK_KINDS)}")
    kind, rest = argv[0], argv[1:]
    if kind == "node_event":
        if len(rest) != 2 or rest[0] not in EVENT_KINDS or not rest[1]:
            raise UsageError(f"usage: node_event <{'|'.join(EVENT_KINDS)}> <hostlist>")
        return HookCall(kind=kind, event=rest[0], hostlist=rest[1])
    if len(rest) != 1 or not rest[0]:
        raise UsageError(f"usage: {kind} <hostlist> (exactly one hostlist, as Slurm passes it)")
    return HookCall(kind=kind, hostlist=rest[0])


def read_resume_file(env: Mapping[str, str]) -> tuple[str, str]:
    """Contents of ``$SLURM_RESUME_FILE`` and a note when it could not be read.

    Unset or unreadable is not fatal: the bridge can still resume the hostlist without the
    per-job context.
    """
    path = env.get("SLURM_RESUME_FILE")
    if not path:
        return "", "no SLURM_RESUME_FILE"
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            contents = f.read(RESUME_FILE_MAX + 1)
    except OSError as e:
        return "", f"cannot read SLURM_RESUME_FILE: {e.strerror}"
    if len(contents) > RESUME_FILE_MAX:
        return "", f"SLURM_RESUME_FILE over {RESUME_FILE_MAX} characters: not sent"
    return contents, ""


def main(argv: list[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    """Run one hook; returns the exit status."""
    start = time.monotonic()
    env = os.environ if env is None else env
    argv = sys.argv[1:] if argv is None else argv
    settings = HookSettings.from_env(env)
    try:
        call = parse_argv(argv)
    except UsageError as e:
        _log(settings, f"usage error: {e}; argv={argv!r}")
        return EXIT_USAGE
    note = ""
    if call.kind == "resume":  # first thing: the fd behind the file lives only briefly
        contents, note = read_resume_file(env)
        call = HookCall(kind=call.kind, hostlist=call.hostlist, resume_file=contents)
    request_id = f"{call.kind}-{os.getpid()}-{os.urandom(3).hex()}"
    head = f"{call.name} request_id={request_id} hostlist={call.hostlist}"
    if note:
        head += f" note={note!r}"
    # grpc's C core logs connection chatter to stderr at INFO otherwise.
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
    try:
        summary = _send(call, settings, request_id)
    except Exception as e:  # the process boundary: whatever went wrong must be logged and acted on
        failure, detail = _describe_failure(e)
        action = _on_failure(call, settings, failure, detail)
        _log(settings, f"{head} result={failure} error={detail!r} action={action} {_ms(start)}")
        return EXIT_FAILED
    _log(settings, f"{head} result=ok {summary} {_ms(start)}")
    return EXIT_OK


def _send(call: HookCall, settings: HookSettings, request_id: str) -> str:
    """Make the RPC; returns a summary of per-node outcomes for the log line."""
    from bridge.rpc.client import BridgeClient, TlsFiles  # noqa: PLC0415 (start-up time, see module doc)

    tls = TlsFiles(*settings.tls) if settings.tls else None
    with BridgeClient(settings.target, tls=tls, timeout_s=settings.timeout_s) as client:
        if call.kind == "resume":
            # Not waiting for the pods: at a thousand nodes that outlasts our deadline, and
            # Slurm ignores our exit status; the bridge sets nodes it cannot back DOWN itself.
            results = client.resume_nodes(call.hostlist, call.resume_file, request_id, wait=False)
        elif call.kind == "suspend":
            results = client.suspend_nodes(call.hostlist, request_id)
        elif call.kind == "resume_fail":
            results = client.resume_failed(call.hostlist, request_id)
        else:
            results = client.node_event(call.event, call.hostlist, "", request_id)
    accepted = sum(1 for r in results if r.outcome.name == "ACCEPTED")
    not_ok = [r for r in results if r.outcome.name not in ("OK", "ACCEPTED")]
    ok = len(results) - accepted - len(not_ok)
    summary = f"nodes={len(results)} ok={ok} accepted={accepted} not_ok={len(not_ok)}"
    if not_ok:  # the bridge handles these; listing a few helps whoever reads the hook log
        shown = ", ".join(f"{r.node}:{r.error_class.name}:{r.message}" for r in not_ok[:5])
        summary += f" first_not_ok={shown!r}"
    return summary


def _describe_failure(e: Exception) -> tuple[str, str]:
    """The reason kind (``k8s: <kind>: ...``) and detail a failed call is reported under."""
    if isinstance(e, ImportError):
        # A broken install is, to Slurm, as bad as no bridge: the nodes must not wait.
        return "HookBroken", f"{type(e).__name__}: {e}"
    from bridge.rpc.client import (  # noqa: PLC0415 (already imported by _send)
        BridgeNoAnswer,
        BridgeUnreachable,
    )

    if isinstance(e, BridgeNoAnswer):
        return "BridgeNoAnswer", str(e)
    if isinstance(e, BridgeUnreachable):
        return "BridgeUnreachable", str(e)
    return "BridgeFailed", f"{type(e).__name__}: {e}"


def _on_failure(call: HookCall, settings: HookSettings, failure: str, detail: str) -> str:
    """For a resume, set the nodes DOWN so their jobs requeue now; returns what was done."""
    if call.kind != "resume":
        return "none"  # reconcile repairs a lost suspend/resume_fail/event; nothing waits on it
    if failure == "BridgeNoAnswer":
        # The bridge may hold the call: failing the nodes would fight pods it is creating. Its
        # reconciler finishes the resume from POWERING_UP once it answers; else ResumeTimeout.
        return "none:left-powering-up-for-the-reconciler"
    from bridge.domain.reason import our_reason  # noqa: PLC0415

    scontrol = os.path.join(settings.slurm_bin, "scontrol")
    argv = [
        scontrol,
        "update",
        f"nodename={call.hostlist}",
        "state=down",
        f"reason={our_reason(failure, detail)}",
    ]
    import subprocess  # noqa: PLC0415 (only the failure path pays for it)

    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=SCONTROL_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"'scontrol update state=down failed: {e}'"
    if done.returncode != 0:
        err = (done.stderr or done.stdout).strip().replace("\n", " ")
        return f"'scontrol update state=down exited {done.returncode}: {err}'"
    return "scontrol-state=down"


def _ms(start: float) -> str:
    return f"elapsed_ms={(time.monotonic() - start) * 1000:.0f}"


def _log(settings: HookSettings, message: str) -> None:
    """One line to stderr and, when configured, appended to the hook log file."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    line = f"{stamp} slurm-k8s-bridge-hook[{os.getpid()}] {message}\n"
    # slurmctld starts hooks with fd 2 closed: Python then sets sys.stderr to None.
    if sys.stderr is not None:
        sys.stderr.write(line)
    if not settings.log_path:
        return
    try:
        # One write() with O_APPEND keeps lines whole when several hooks log at once.
        fd = os.open(settings.log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o640)
        try:
            os.write(fd, line.encode("utf-8", "replace"))
        finally:
            os.close(fd)
    except OSError as e:
        if sys.stderr is not None:
            sys.stderr.write(f"slurm-k8s-bridge-hook: cannot write {settings.log_path}: {e}\n")


#: Settings file of the installed entry points (``slurm-k8s-bridge-resume`` and the others):
#: slurmctld passes them no SKB_* variables. ``$SKB_HOOKS_ENV`` names another file.
HOOKS_ENV_PATH = "/etc/slurm-k8s-bridge/hooks.env"
HOOKS_ENV_KEYS = (
    "SKB_SOCKET",
    "SKB_SLURM_BIN",
    "SKB_HOOK_LOG",
    "SKB_TIMEOUT_S",
    "SKB_TLS_CERT",
    "SKB_TLS_KEY",
    "SKB_TLS_CA",
)


def read_hooks_env(path: str) -> dict[str, str]:
    """``KEY=value`` lines of a hooks.env for the keys above (as hook.sh reads them; no code
    runs, one pair of quotes is stripped); a missing file is no settings."""
    found: dict[str, str] = {}
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return found
    for line in lines:
        key, sep, value = line.partition("=")
        if sep and key in HOOKS_ENV_KEYS:
            if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
                value = value[1:-1]
            found[key] = value
    return found


def _entry(kind: str) -> int:
    # The file wins over the environment, as in hook.sh.
    path = os.environ.get("SKB_HOOKS_ENV") or HOOKS_ENV_PATH
    return main([kind, *sys.argv[1:]], {**os.environ, **read_hooks_env(path)})


def resume_entry() -> int:
    """``slurm-k8s-bridge-resume <hostlist>``: ResumeProgram as an installed executable."""
    return _entry("resume")


def suspend_entry() -> int:
    """``slurm-k8s-bridge-suspend <hostlist>``: SuspendProgram."""
    return _entry("suspend")


def resume_fail_entry() -> int:
    """``slurm-k8s-bridge-resume-fail <hostlist>``: ResumeFailProgram."""
    return _entry("resume_fail")


def node_event_entry() -> int:
    """``slurm-k8s-bridge-node-event <event> <hostlist>``: an strigger program."""
    return _entry("node_event")


if __name__ == "__main__":
    sys.exit(main())
