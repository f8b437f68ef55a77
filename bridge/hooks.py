"""What slurmctld runs: ResumeProgram, SuspendProgram, ResumeFailProgram and strigger programs.

``python -m bridge.hooks resume|suspend|resume_fail <hostlist>`` or
``python -m bridge.hooks node_event down|drain|fail|up|idle <hostlist>``; the ``slurm_plugins/``
executables find the interpreter and settings and exec this, unless the static Go client
(slurm_plugins/hookclient, ``bin/skb-hook``) is built: it is the primary client, this one is the
fallback (and the ``pip install`` entry points). Both follow one contract, written as a table in
tests/unit/test_hook_client.py that runs both; slurm_plugins/README.md says it in words.

A hook only forwards the call to the bridge and exits: Slurm kills slow programs, a slow hook
stalls ``scontrol reconfigure``, and processes a hook spawns inherit slurmctld's blocked signals.
Slurm's environment has no PATH, so every program is called by absolute path.

If the bridge cannot be reached, a resume marks its nodes DOWN with a ``k8s: BridgeUnreachable``
reason (through ``scontrol``), so Slurm requeues the jobs now instead of after ResumeTimeout;
other hooks only log, since the bridge's reconcile loop repairs them later. Exit status: 0 when
the bridge took the call (per-node failures are the bridge's to handle), 1 when it did not,
2 for a usage error.

Hand-off: slurmctld has one ResumeProgram (SuspendProgram, ResumeFailProgram) for all nodes, so
a site that powers its own static nodes names its previous program in ``SKB_SITE_RESUME_PROGRAM``
(``SKB_SITE_SUSPEND_PROGRAM``, ``SKB_SITE_RESUME_FAIL_PROGRAM``). After the bridge answered a
resume, suspend or resume_fail, the nodes it answered UNKNOWN_NODE for (no pool owns them) are
the site's: the log line gains ``handed_off=<nodes> program=<path>`` and the hook execs
``<path> <nodes>`` in its place (same pid, so the program's exit status is the hook's), without
the ``SKB_*`` variables and, for a resume, with ``SLURM_RESUME_FILE`` naming a memfd that holds
the file's bytes as slurmctld wrote them (slurmctld's own fd is short-lived). A program that is
not an absolute path, or fails to start, is a second line ``handoff=failed`` and exit status 1.
When the bridge did not answer, nothing is handed off: which nodes are the site's is unknown.

Start-up time matters (Slurm waits for ResumeProgram): only ``os``, ``sys`` and ``time`` are
imported up front; the resume file is read before grpc is even imported, because its fd is
short-lived.

Settings (environment, normally from ``slurm_plugins/hooks.env``): ``SKB_SOCKET`` (gRPC target,
``unix:/path`` or ``host:port``), ``SKB_SLURM_BIN`` (directory holding ``scontrol``),
``SKB_HOOK_LOG`` (log file; empty: stderr only), ``SKB_TIMEOUT_S`` (total deadline, retries
included), ``SKB_TLS_CERT``/``SKB_TLS_KEY``/``SKB_TLS_CA`` (mutual TLS for a TCP target),
``SKB_SITE_RESUME_PROGRAM``/``SKB_SITE_SUSPEND_PROGRAM``/``SKB_SITE_RESUME_FAIL_PROGRAM`` (the
hand-off above; unset or empty: none).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bridge.hook_handoff import hand_off, initial_environ, site_env
from bridge.settings import DEFAULT_TARGET as DEFAULT_SOCKET
from bridge.settings import HOOKS_ENV_PATH, hooks_env_values

if TYPE_CHECKING:
    from bridge.domain.results import NodeResult

DEFAULT_SLURM_BIN = "/usr/bin"
DEFAULT_HOOK_LOG = "/var/log/slurm/slurm-k8s-bridge-hooks.log"
DEFAULT_TIMEOUT_S = 2.0
#: SKB_TIMEOUT_S above this (or not a plain positive decimal) is a typo: the default applies.
MAX_TIMEOUT_S = 3600.0
SCONTROL_TIMEOUT_S = 10

#: The biggest resume file sent on, in bytes (the bridge's own limit is as many characters,
#: bridge.domain.resume_file.MAX_SIZE; a test keeps the two equal). A bigger one is not sent: the
#: hostlist alone is enough to resume the nodes, and a too-big call would fail the whole batch.
RESUME_FILE_MAX = 16 * 1024 * 1024

HOOK_KINDS = ("resume", "suspend", "resume_fail", "node_event")
#: strigger node events node_event forwards (the same as bridge.rpc.client.NODE_EVENT_KINDS, which
#: is not imported here for start-up time; a test keeps the two equal).
EVENT_KINDS = ("down", "drain", "fail", "up", "idle")
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
#: The setting naming the site's own program for each hook kind that hands nodes off.
SITE_PROGRAM_KEYS = {
    "resume": "SKB_SITE_RESUME_PROGRAM",
    "suspend": "SKB_SITE_SUSPEND_PROGRAM",
    "resume_fail": "SKB_SITE_RESUME_FAIL_PROGRAM",
}


@dataclass(frozen=True)
class HookSettings:
    """Where the bridge is and where the hook writes; read from the environment."""

    target: str = DEFAULT_SOCKET
    slurm_bin: str = DEFAULT_SLURM_BIN
    log_path: str = DEFAULT_HOOK_LOG
    timeout_s: float = DEFAULT_TIMEOUT_S
    tls: tuple[str, str, str] | None = None
    #: The site's own programs (see the module doc), by hook kind; "" for none.
    site_resume_program: str = ""
    site_suspend_program: str = ""
    site_resume_fail_program: str = ""

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> HookSettings:
        """Settings from ``SKB_*`` variables; unset or empty ones take the defaults, except
        ``SKB_HOOK_LOG``, which may be set empty (stderr only)."""
        cert, key, ca = (env.get(k, "") for k in ("SKB_TLS_CERT", "SKB_TLS_KEY", "SKB_TLS_CA"))
        return cls(
            target=env.get("SKB_SOCKET") or DEFAULT_SOCKET,
            slurm_bin=env.get("SKB_SLURM_BIN") or DEFAULT_SLURM_BIN,
            log_path=env.get("SKB_HOOK_LOG", DEFAULT_HOOK_LOG),
            timeout_s=parse_seconds(env.get("SKB_TIMEOUT_S", "")) or DEFAULT_TIMEOUT_S,
            tls=(cert, key, ca) if cert and key and ca else None,
            site_resume_program=env.get(SITE_PROGRAM_KEYS["resume"], ""),
            site_suspend_program=env.get(SITE_PROGRAM_KEYS["suspend"], ""),
            site_resume_fail_program=env.get(SITE_PROGRAM_KEYS["resume_fail"], ""),
        )

    def site_program(self, kind: str) -> str:
        """The site's program the nodes no pool owns go to after a ``kind`` call ("": none)."""
        return {
            "resume": self.site_resume_program,
            "suspend": self.site_suspend_program,
            "resume_fail": self.site_resume_fail_program,
        }.get(kind, "")


def parse_seconds(text: str) -> float | None:
    """``SKB_TIMEOUT_S``: ASCII digits with at most one ``.``, blanks (space, tab) around; more
    than 0 and at most :data:`MAX_TIMEOUT_S`. Anything else is None: a typo must not stop nodes
    from being resumed, so the default applies."""
    t = text.strip(" \t")
    if not (t.isascii() and t.count(".") <= 1 and t.replace(".", "", 1).isdigit()):
        return None
    seconds = float(t)
    return seconds if 0 < seconds <= MAX_TIMEOUT_S else None


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
        call = HookCall(kind=kind, event=rest[0], hostlist=rest[1])
    elif len(rest) != 1 or not rest[0]:
        raise UsageError(f"usage: {kind} <hostlist> (exactly one hostlist, as Slurm passes it)")
    else:
        call = HookCall(kind=kind, hostlist=rest[0])
    if not _is_utf8(call.hostlist):  # an undecodable argv byte: no Slurm hostlist has one
        raise UsageError("hostlist is not UTF-8")
    return call


def _is_utf8(s: str) -> bool:
    """False when ``s`` holds a lone surrogate: Python's stand-in for an undecodable byte."""
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def read_resume_file(env: Mapping[str, str]) -> tuple[bytes | None, str]:
    """The bytes of ``$SLURM_RESUME_FILE``, or None and a note saying why it was not read.

    Unset, unreadable or too big is not fatal: the bridge can still resume the hostlist without
    the per-job context. The bytes go to the bridge as :func:`resume_file_text` and, when the
    hook hands nodes to the site's program, to that program as they are.
    """
    path = env.get("SLURM_RESUME_FILE")
    if not path:
        return None, "no SLURM_RESUME_FILE"
    try:
        with open(path, "rb") as f:
            raw = f.read(RESUME_FILE_MAX + 1)
    except OSError as e:
        return None, f"cannot read SLURM_RESUME_FILE: {e.strerror}"
    if len(raw) > RESUME_FILE_MAX:
        return None, f"SLURM_RESUME_FILE over {RESUME_FILE_MAX} bytes: not sent"
    return raw, ""


def resume_file_text(raw: bytes) -> str:
    """The resume file as the bridge gets it: its bytes, except that each byte that is not part
    of a valid UTF-8 sequence becomes U+FFFD (the gRPC field is a UTF-8 string)."""
    # surrogateescape keeps one stand-in per undecodable byte ("replace" would merge a cut-off
    # sequence into one U+FFFD), so the rule is per byte, as a UTF-8 decoder reading bytes sees it.
    text = raw.decode("utf-8", "surrogateescape")
    if not _is_utf8(text):
        text = "".join("\ufffd" if "\udc80" <= c <= "\udcff" else c for c in text)
    return text


# --- the log line -----------------------------------------------------------------------------

#: Characters a log value may hold and still be written bare; any other value (or an empty one)
#: is written as a JSON string. See :func:`log_value`.
BARE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.,:/=@+[]~")
#: JSON's short escapes; every other escaped character is written \uXXXX (see _escapes).
_SHORT_ESCAPES = {
    '"': '\\"',
    "\\": "\\\\",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
}
_ESCAPES: dict[int, str] = {}


def _escapes() -> dict[int, str]:
    """What :func:`log_value` escapes inside a JSON string (a str.translate table, made once)."""
    if not _ESCAPES:
        _ESCAPES.update({c: f"\\u{c:04x}" for c in range(0x20)})  # C0 controls
        _ESCAPES.update({c: f"\\u{c:04x}" for c in range(0x7F, 0xA0)})  # DEL, C1 (U+0085 too)
        _ESCAPES.update({0x2028: "\\u2028", 0x2029: "\\u2029"})  # line, paragraph separators
        _ESCAPES.update({c: f"\\u{c:04x}" for c in range(0xD800, 0xE000)})  # undecodable bytes
        _ESCAPES.update({ord(k): v for k, v in _SHORT_ESCAPES.items()})
    return _ESCAPES


def log_value(value: str) -> str:
    """A log line's value: bare when non-empty and every character is in :data:`BARE`, else a
    JSON string (RFC 8259) in which ``"`` ``\\`` ``\\b \\f \\n \\r \\t`` are escaped so, and
    U+0000-U+001F, U+007F-U+009F, U+2028 and U+2029 as ``\\u00xx`` / ``\\u2028``: no character
    of the line splits it, for any reader's notion of a line. Every other character is itself,
    in UTF-8. An undecodable byte 0xXX of argv or the environment (the lone surrogate U+DCXX
    surrogateescape decodes it to) is written ``\\udcxx``, so json.loads and os.fsencode give
    the bytes back. The Go client (logline.go) writes the same bytes."""
    if value and BARE.issuperset(value):
        return value
    return '"' + value.translate(_escapes()) + '"'


def log_list(values: list[str]) -> str:
    """A list (argv) in a log line: ``[`` JSON strings joined by ``,`` ``]``, no spaces."""
    return "[" + ",".join('"' + v.translate(_escapes()) + '"' for v in values) + "]"


def main(argv: list[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    """Run one hook; returns the exit status (or, on a hand-off, becomes the site's program)."""
    start = time.monotonic()
    env = os.environ if env is None else env
    argv = sys.argv[1:] if argv is None else argv
    settings = HookSettings.from_env(env)
    try:
        call = parse_argv(argv)
    except UsageError as e:
        _log(settings, f"argv={log_list(argv)} result=UsageError error={log_value(str(e))}")
        return EXIT_USAGE
    note, raw = "", None
    if call.kind == "resume":  # first thing: the fd behind the file lives only briefly
        raw, note = read_resume_file(env)
        text = resume_file_text(raw) if raw is not None else ""
        call = HookCall(kind=call.kind, hostlist=call.hostlist, resume_file=text)
    request_id = f"{call.kind}-{os.getpid()}-{os.urandom(3).hex()}"
    head = f"{call.name} request_id={request_id} hostlist={log_value(call.hostlist)}"
    if note:
        head += f" note={log_value(note)}"
    # grpc's C core logs connection chatter to stderr at INFO otherwise.
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
    try:
        results = _send(call, settings, request_id)
    except Exception as e:  # the process boundary: whatever went wrong must be logged and acted on
        failure, detail = _describe_failure(e)
        action = _on_failure(call, settings, failure, detail)
        _log(
            settings,
            f"{head} result={failure} error={log_value(detail)} action={log_value(action)} "
            f"{_ms(start)}",
        )
        return EXIT_FAILED
    line = f"{head} result=ok {summarize(results)}"
    program = settings.site_program(call.kind)
    nodes = site_nodes(results) if program else []
    if not nodes:
        _log(settings, f"{line} {_ms(start)}")
        return EXIT_OK
    handed_off = ",".join(nodes)  # a comma list is a Slurm hostlist
    _log(
        settings,
        f"{line} handed_off={log_value(handed_off)} program={log_value(program)} {_ms(start)}",
    )
    environ = initial_environ()
    program_env = site_env(env if environ is None else environ)
    error = hand_off(program, handed_off, program_env, raw)  # returns only when it failed
    _log(
        settings,
        f"{call.name} request_id={request_id} handoff=failed program={log_value(program)} "
        f"error={log_value(error)}",
    )
    return EXIT_FAILED


def _send(call: HookCall, settings: HookSettings, request_id: str) -> list[NodeResult]:
    """Make the RPC; returns the per-node outcomes."""
    from bridge.rpc.client import BridgeClient, TlsFiles  # noqa: PLC0415 (start-up time, see module doc)

    tls = TlsFiles(*settings.tls) if settings.tls else None
    with BridgeClient(settings.target, tls=tls, timeout_s=settings.timeout_s) as client:
        if call.kind == "resume":
            # Not waiting for the pods: at a thousand nodes that outlasts our deadline, and
            # Slurm ignores our exit status; the bridge sets nodes it cannot back DOWN itself.
            return client.resume_nodes(call.hostlist, call.resume_file, request_id, wait=False)
        if call.kind == "suspend":
            return client.suspend_nodes(call.hostlist, request_id)
        if call.kind == "resume_fail":
            return client.resume_failed(call.hostlist, request_id)
        return client.node_event(call.event, call.hostlist, "", request_id)


def summarize(results: list[NodeResult]) -> str:
    """Per-node outcomes counted for the log line."""
    accepted = sum(1 for r in results if r.outcome.name == "ACCEPTED")
    not_ok = [r for r in results if r.outcome.name not in ("OK", "ACCEPTED")]
    ok = len(results) - accepted - len(not_ok)
    summary = f"nodes={len(results)} ok={ok} accepted={accepted} not_ok={len(not_ok)}"
    if not_ok:  # the bridge handles these; listing a few helps whoever reads the hook log
        shown = ", ".join(f"{r.node}:{r.error_class.name}:{r.message}" for r in not_ok[:5])
        summary += f" first_not_ok={log_value(shown)}"
    return summary


def site_nodes(results: list[NodeResult]) -> list[str]:
    """The nodes no pool owns (UNKNOWN_NODE), in the bridge's order: the site's to power."""
    return [r.node for r in results if r.error_class.name == "UNKNOWN_NODE"]


def _describe_failure(e: Exception) -> tuple[str, str]:
    """The reason kind (``k8s: <kind>: ...``) and detail a failed call is reported under."""
    if isinstance(e, ImportError):
        # A broken install is, to Slurm, as bad as no bridge: the nodes must not wait.
        return "HookBroken", f"{type(e).__name__}: {e}"
    from bridge.errors import ConfigError, NotLeader  # noqa: PLC0415 (imported by _send)
    from bridge.rpc.client import (  # noqa: PLC0415
        BridgeNoAnswer,
        BridgeUnreachable,
    )

    if isinstance(e, BridgeNoAnswer):
        return "BridgeNoAnswer", str(e)
    if isinstance(e, BridgeUnreachable):
        return "BridgeUnreachable", str(e)
    if isinstance(e, NotLeader):
        return "NotLeader", str(e)
    cause = e.__cause__
    if isinstance(e, ConfigError) and isinstance(cause, OSError) and cause.filename:
        # bridge.rpc.tls could not read a PEM file: say which and why, without Python's repr().
        detail = f"cannot read TLS file {cause.filename}: {cause.strerror}"
        return "BridgeFailed", f"ConfigError: {detail}"
    return "BridgeFailed", f"{type(e).__name__}: {e}"


def _on_failure(call: HookCall, settings: HookSettings, failure: str, detail: str) -> str:
    """For a resume, set the nodes DOWN so their jobs requeue now; returns what was done."""
    if call.kind != "resume":
        return "none"  # reconcile repairs a lost suspend/resume_fail/event; nothing waits on it
    if failure == "BridgeNoAnswer":
        # The bridge may hold the call: failing the nodes would fight pods it is creating. Its
        # reconciler finishes the resume from POWERING_UP once it answers; else ResumeTimeout.
        return "none:left-powering-up-for-the-reconciler"
    if failure == "NotLeader":
        # Mid-failover: whichever bridge leads next finishes the resume from POWERING_UP (its
        # first pass re-reads Slurm); if none does, ResumeTimeout fails the nodes.
        return "none:left-powering-up-for-the-next-leader"
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

    what = "scontrol update state=down"
    try:
        done = subprocess.run(argv, capture_output=True, timeout=SCONTROL_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        return f"{what} timed out after {SCONTROL_TIMEOUT_S} s"
    except OSError as e:
        return f"{what} failed: {e.strerror}"
    if done.returncode == 0:
        return "scontrol-state=down"
    code = done.returncode
    how = f"exited {code}" if code > 0 else f"killed by signal {-code}"
    out = (done.stderr or done.stdout).decode("utf-8", "surrogateescape").strip(" \t\n\r\v\f")
    return f"{what} {how}: " + out.replace("\n", " ") if out else f"{what} {how}"


def _ms(start: float) -> str:
    """``elapsed_ms=N``: whole milliseconds, truncated."""
    return f"elapsed_ms={int((time.monotonic() - start) * 1000)}"


def _log(settings: HookSettings, message: str) -> None:
    """One line to stderr and, when configured, appended to the hook log file."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    line = f"{stamp} slurm-k8s-bridge-hook[{os.getpid()}] {message}\n"
    # slurmctld starts hooks with fd 2 closed: Python then sets sys.stderr to None.
    if sys.stderr is not None:
        sys.stderr.write(line)
        sys.stderr.flush()
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
            sys.stderr.write(
                f"slurm-k8s-bridge-hook: cannot write {settings.log_path}: {e.strerror}\n"
            )


#: The installed entry points (``slurm-k8s-bridge-resume`` and the others) read
#: :data:`HOOKS_ENV_PATH` (``$SKB_HOOKS_ENV`` names another file): slurmctld passes them no
#: SKB_* variables.
HOOKS_ENV_KEYS = (
    "SKB_SOCKET",
    "SKB_SLURM_BIN",
    "SKB_HOOK_LOG",
    "SKB_TIMEOUT_S",
    "SKB_TLS_CERT",
    "SKB_TLS_KEY",
    "SKB_TLS_CA",
    *SITE_PROGRAM_KEYS.values(),
)


def read_hooks_env(path: str) -> dict[str, str]:
    """The keys above that a hooks.env sets (:func:`bridge.settings.hooks_env_values`); a
    missing file is no settings."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return hooks_env_values(f.read(), HOOKS_ENV_KEYS)
    except OSError:
        return {}


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
