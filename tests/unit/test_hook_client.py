"""The hook contract, as one table that both hook clients run through.

The Go client (slurm_plugins/bin/skb-hook, the primary) and ``python -m bridge.hooks`` (the
fallback, and the pip install's entry points) implement one contract. Each row of
:data:`CONTRACT` is a scenario (argv, settings, resume file, what the bridge does) and what must
be observed: the exit status, the log lines (exactly, but for time, pid, request id and elapsed
time), the requests the bridge received, the scontrol command a failed resume runs, and what the
site's own program saw when the hook handed it the nodes no pool owns.
:func:`test_contract` runs every row with each client, as slurmctld runs a hook: no PATH, a
real gRPC server on a Unix socket (or TCP with mutual TLS) whose servicer follows the row's script.

The log line is ``<time> slurm-k8s-bridge-hook[<pid>] <fields>``; a value is bare when it is
non-empty and only holds ``A-Za-z0-9-_.,:/=@+[]~``, else a JSON string (see bridge.hooks.log_value
and logline.go).
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from concurrent import futures
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest

from bridge import hooks
from bridge.rpc._proto.slurm_k8s_bridge.v1 import bridge_pb2 as pb
from bridge.rpc._proto.slurm_k8s_bridge.v1 import bridge_pb2_grpc as pb_grpc
from bridge.rpc.wire import ERROR_METADATA_KEY
from tests.unit.as_slurmctld import run_as_slurmctld

REPO = Path(__file__).resolve().parents[2]
PLUGINS = REPO / "slurm_plugins"
HOOKCLIENT = PLUGINS / "hookclient"
RESUME_FILE_MAX = 16 * 1024 * 1024


def _go() -> str | None:
    return shutil.which("go") or next(
        (p for p in ("/usr/local/go/bin/go",) if os.access(p, os.X_OK)), None
    )


@pytest.fixture(scope="session")
def go_hook(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The Go client, built from this checkout's sources (Go's cache makes a rebuild cheap)."""
    go = _go()
    if go is None:
        pytest.skip(
            "no Go toolchain (go on PATH or /usr/local/go/bin/go): skb-hook cannot be built"
        )
    out = tmp_path_factory.mktemp("gohook") / "skb-hook"
    env = {**os.environ, "CGO_ENABLED": "0", "GOTOOLCHAIN": "local", "GOFLAGS": "-mod=readonly"}
    subprocess.run(
        [go, "build", "-trimpath", "-o", str(out), "."],
        cwd=HOOKCLIENT,
        env=env,
        check=True,
        timeout=600,
    )
    return out


@pytest.fixture(scope="session")
def big_resume_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("big") / "resume.json"
    path.write_bytes(b"x" * (RESUME_FILE_MAX + 1))
    return path


# --- a scripted bridge ---------------------------------------------------------------------


@dataclass(frozen=True)
class Script:
    """What the fake bridge answers: per-node outcomes, or an error, after an optional sleep."""

    outcome: int = pb.OUTCOME_OK
    results: tuple[pb.NodeResult, ...] | None = None
    code: grpc.StatusCode | None = None
    details: str = ""
    from_bridge: bool = True  # set the skb-error trailing metadata on an error
    #: The marker's value, the bridge's error class (the servicer's type(exc).__name__); ""
    #: for the status code's name.
    error_class: str = ""
    sleep_s: float = 0.0


@dataclass
class ScriptedBridge(pb_grpc.BridgeServicer):
    """Records every request as a dict of its fields and answers as ``script`` says."""

    script: Script = field(default_factory=Script)
    requests: list[tuple[str, dict[str, object]]] = field(default_factory=list)

    def _answer(self, method: str, req: object, context: grpc.ServicerContext) -> object:
        fields = {f.name: v for f, v in req.ListFields()}  # type: ignore[attr-defined]
        self.requests.append((method, fields))
        s = self.script
        if s.sleep_s:
            time.sleep(s.sleep_s)
        if s.code is not None:
            if s.from_bridge:
                marker = s.error_class or s.code.name
                context.set_trailing_metadata(((ERROR_METADATA_KEY, marker),))
            context.abort(s.code, s.details)
        hostlist = str(fields.get("hostlist", ""))
        results = s.results
        if results is None:
            results = tuple(pb.NodeResult(node=n, outcome=s.outcome) for n in hostlist.split(","))  # type: ignore[arg-type]
        response = getattr(pb, method + "Response")
        return response(results=results, request_id=fields.get("request_id", ""))

    def ResumeNodes(self, request, context):  # type: ignore[no-untyped-def]  # noqa: N802
        return self._answer("ResumeNodes", request, context)

    def SuspendNodes(self, request, context):  # type: ignore[no-untyped-def]  # noqa: N802
        return self._answer("SuspendNodes", request, context)

    def ResumeFailed(self, request, context):  # type: ignore[no-untyped-def]  # noqa: N802
        return self._answer("ResumeFailed", request, context)

    def NodeEvent(self, request, context):  # type: ignore[no-untyped-def]  # noqa: N802
        return self._answer("NodeEvent", request, context)


# --- the contract --------------------------------------------------------------------------

#: Instead of a Script: no socket at all, or one bound that nobody listens on.
ABSENT, REFUSING = "absent", "refusing"
#: A resume_file naming the session's 16 MiB + 1 byte file.
BIG = "<big>"
#: The fake scontrol records its argv; a row's ``scontrol_then`` runs after that.
RECORD = 'for a in "$@"; do printf "%s\\n" "$a"; done > {argv}\n'

#: The site's own program, at <root>/site: records its pid, argv, environment, and what reading
#: $SLURM_RESUME_FILE gives, then exits <exit>. Absolute paths only: no PATH, as under slurmctld.
SITE_PROGRAM = """#!/bin/sh
printf '%s\\n' "$$" "$@" > <root>/site.argv
/usr/bin/env -0 > <root>/site.env
if [ -n "${SLURM_RESUME_FILE+set}" ]; then
    /bin/cat -- "$SLURM_RESUME_FILE" > <root>/site.resume 2>/dev/null
    printf '%s' "$?" > <root>/site.resume.status
fi
exit <exit>
"""

RESUME = b'{"jobs":[{"job_id":2,"nodes_resume":"c1,c2,c3"}],"all_nodes_resume":"c1,c2,c3"}\n'
TLS = {
    "SKB_TLS_CERT": "<pki>/client.pem",
    "SKB_TLS_KEY": "<pki>/client.key",
    "SKB_TLS_CA": "<pki>/ca.pem",
}
Sent = tuple[str, Mapping[str, object]]


#: SiteRun.resume_var of a memfd the hook made: ``/proc/<the hook's pid>/fd/<n>``.
MEMFD = "<memfd>"


@dataclass(frozen=True)
class SiteRun:
    """What the site's program saw: its argument, ``$SLURM_RESUME_FILE`` (:data:`MEMFD`, a path
    with placeholders, or None: unset) and the bytes reading that gave (None: unreadable)."""

    nodes: str
    resume_var: str | None = None
    resume_bytes: bytes | None = None


@dataclass(frozen=True)
class Row:
    """One scenario and what both clients must do in it.

    Placeholders in ``env``, ``log`` and ``scontrol``: ``<root>`` (the run's directory, where
    ``bin/scontrol`` is), ``<sock>`` (the Unix socket), ``<port>`` (the TLS bridge's port),
    ``<pki>`` (the TLS files); in ``log``, ``<rid>`` is the request id (``<kind>-<pid>-<6 hex>``)
    and ``N`` the elapsed milliseconds; ``<cause>`` in ``log`` and ``scontrol`` is any text
    without ``"`` (a transport failure in the gRPC library's words). ``env`` goes over the
    defaults ``SKB_SOCKET=unix:<sock>``, ``SKB_SLURM_BIN=<root>/bin``,
    ``SKB_HOOK_LOG=<root>/hook.log``, ``SKB_TIMEOUT_S=2``. ``<root>/site`` is always there: the
    site's own program (:data:`SITE_PROGRAM`), which a row names in ``SKB_SITE_*_PROGRAM``; it
    records what it saw and exits ``site_exit``; ``site`` is what it must have seen (None: it
    must not have run).
    """

    id: str
    argv: tuple[str | bytes, ...]
    status: int
    log: str  # the line after `<time> slurm-k8s-bridge-hook[<pid>] `
    sent: tuple[Sent, ...] = ()  # what the bridge received, request_id left out
    scontrol: tuple[str, ...] | None = None  # scontrol's argv; None: it did not run
    bridge: Script | str = field(default_factory=Script)  # or ABSENT, REFUSING
    tls: bool = False  # the bridge listens on 127.0.0.1:<port> with mutual TLS instead
    env: Mapping[str, str] = field(default_factory=dict)
    # SLURM_RESUME_FILE: these bytes in <root>/resume.json; a str: that path under <root> (or
    # BIG); None: unset.
    resume_file: bytes | str | None = RESUME
    scontrol_then: str = ""  # shell run by the fake scontrol after it records its argv
    stderr_closed: bool = False  # slurmctld's way: no fd 2 at all
    more_log: tuple[str, ...] = ()  # the lines after ``log``, same placeholders
    site: SiteRun | None = None
    site_exit: int = 0


def resume(hostlist: str, resume_file: str = RESUME.decode()) -> Sent:
    fields = {"hostlist": hostlist}
    if resume_file:  # proto3 leaves an empty field (and wait=false) unset
        fields["resume_file"] = resume_file
    return "ResumeNodes", fields


def down(hostlist: str, reason: str) -> tuple[str, ...]:
    return ("update", f"nodename={hostlist}", "state=down", f"reason={reason}")


OK1 = "result=ok nodes=1 ok=1 accepted=0 not_ok=0 elapsed_ms=N"
OK_C1 = pb.NodeResult(node="c1", outcome=pb.OUTCOME_OK)
UNKNOWN_N1, UNKNOWN_N2 = (
    pb.NodeResult(
        node=n,
        outcome=pb.OUTCOME_REJECTED,
        error_class=pb.ERROR_CLASS_UNKNOWN_NODE,
        message="in no pool",
    )
    for n in ("n1", "n2")
)
SITE_KEYS = ("SKB_SITE_RESUME_PROGRAM", "SKB_SITE_SUSPEND_PROGRAM", "SKB_SITE_RESUME_FAIL_PROGRAM")
NO_SOCKET = "unix:<sock>: No such file or directory (3 attempts)"
#: A node's message with each kind of character the log line escapes, and some it does not.
WEIRD = 'it\'s "q" \\ é日\t\x01\x7f\x85\u2028\n'
USAGE = "usage: resume <hostlist> (exactly one hostlist, as Slurm passes it)"
EVENT_USAGE = "usage: node_event <down|drain|fail|up|idle> <hostlist>"
KINDS = "first argument must be one of resume, suspend, resume_fail, node_event"

CONTRACT: tuple[Row, ...] = (
    # --- argv: one call per hook, the RPC it makes --------------------------------------------
    Row(
        "resume-accepted",
        ("resume", "c1,c2,c3"),
        0,
        "resume request_id=<rid> hostlist=c1,c2,c3 result=ok nodes=3 ok=0 accepted=3 not_ok=0 "
        "elapsed_ms=N",
        sent=(resume("c1,c2,c3"),),
        bridge=Script(outcome=pb.OUTCOME_ACCEPTED),
    ),
    Row(
        "suspend",
        ("suspend", "c[1-2]"),
        0,
        f"suspend request_id=<rid> hostlist=c[1-2] {OK1}",
        sent=(("SuspendNodes", {"hostlist": "c[1-2]"}),),
    ),
    Row(
        "resume_fail",
        ("resume_fail", "c4"),
        0,
        f"resume_fail request_id=<rid> hostlist=c4 {OK1}",
        sent=(("ResumeFailed", {"hostlist": "c4"}),),
    ),
    *(
        Row(
            f"node_event-{event}",
            ("node_event", event, "c5"),
            0,
            f"node_event:{event} request_id=<rid> hostlist=c5 {OK1}",
            sent=(("NodeEvent", {"kind": kind, "hostlist": "c5"}),),
        )
        for event, kind in (
            ("down", pb.NODE_EVENT_KIND_DOWN),
            ("drain", pb.NODE_EVENT_KIND_DRAIN),
            ("fail", pb.NODE_EVENT_KIND_FAIL),
            ("up", pb.NODE_EVENT_KIND_UP),
            ("idle", pb.NODE_EVENT_KIND_IDLE),
        )
    ),
    Row(
        # Per-node failures are the bridge's to handle: exit 0, the first five listed, and an
        # unknown outcome or error class (a newer bridge) read as FAILED / INTERNAL.
        "not-ok-nodes-listed",
        ("suspend", "c1,c2,x,n4,n5,n6,n7"),
        0,
        "suspend request_id=<rid> hostlist=c1,c2,x,n4,n5,n6,n7 result=ok nodes=7 ok=1 "
        'accepted=0 not_ok=6 first_not_ok="c2:TRANSIENT:it\'s \\"q\\" \\\\ é日\\t\\u0001\\u007f'
        "\\u0085\\u2028\\n, "
        'x:INTERNAL:, n4:UNKNOWN_NODE:no pool, n5:UNKNOWN_NODE:no pool, n6:UNKNOWN_NODE:no pool" '
        "elapsed_ms=N",
        sent=(("SuspendNodes", {"hostlist": "c1,c2,x,n4,n5,n6,n7"}),),
        bridge=Script(
            results=(
                pb.NodeResult(node="c1", outcome=pb.OUTCOME_OK),
                pb.NodeResult(
                    node="c2",
                    outcome=pb.OUTCOME_FAILED,
                    error_class=pb.ERROR_CLASS_TRANSIENT,
                    message=WEIRD,
                ),
                pb.NodeResult(node="x", outcome=pb.OUTCOME_UNSPECIFIED, error_class=9),  # type: ignore[arg-type]
                *(
                    pb.NodeResult(
                        node=f"n{i}",
                        outcome=pb.OUTCOME_REJECTED,
                        error_class=pb.ERROR_CLASS_UNKNOWN_NODE,
                        message="no pool",
                    )
                    for i in range(4, 8)
                ),
            )
        ),
    ),
    # --- argv: usage errors (exit 2, nothing sent) ------------------------------------------
    Row("usage-none", (), 2, f'argv=[] result=UsageError error="{KINDS}"'),
    Row(
        "usage-bad-kind",
        ("bogus", "c1"),
        2,
        f'argv=["bogus","c1"] result=UsageError error="{KINDS}"',
    ),
    Row("usage-no-hostlist", ("resume",), 2, f'argv=["resume"] result=UsageError error="{USAGE}"'),
    Row(
        "usage-empty-hostlist",
        ("resume", ""),
        2,
        f'argv=["resume",""] result=UsageError error="{USAGE}"',
    ),
    Row(
        "usage-two-hostlists",
        ("suspend", "a", "b"),
        2,
        'argv=["suspend","a","b"] result=UsageError '
        'error="usage: suspend <hostlist> (exactly one hostlist, as Slurm passes it)"',
    ),
    Row(
        "usage-bad-event",
        ("node_event", "reboot", "c1"),
        2,
        f'argv=["node_event","reboot","c1"] result=UsageError error="{EVENT_USAGE}"',
    ),
    Row(
        "usage-event-no-hostlist",
        ("node_event", "down"),
        2,
        f'argv=["node_event","down"] result=UsageError error="{EVENT_USAGE}"',
    ),
    Row(
        "usage-quotes",
        ("resume", 'it\'s "q"\t\u00e9\u2028', "x"),
        2,
        f'argv=["resume","it\'s \\"q\\"\\t\u00e9\\u2028","x"] result=UsageError error="{USAGE}"',
    ),
    Row(
        # An undecodable byte is written \udcXX (Python's surrogateescape code point for it).
        "usage-undecodable-hostlist",
        (b"resume", b"c\xff1"),
        2,
        'argv=["resume","c\\udcff1"] result=UsageError error="hostlist is not UTF-8"',
    ),
    # --- settings ---------------------------------------------------------------------------
    Row(
        "no-log-file-stderr-only",
        ("suspend", "c1"),
        0,
        f"suspend request_id=<rid> hostlist=c1 {OK1}",
        sent=(("SuspendNodes", {"hostlist": "c1"}),),
        env={"SKB_HOOK_LOG": ""},
    ),
    Row(
        "stderr-closed-still-logs",
        ("suspend", "c1"),
        0,
        f"suspend request_id=<rid> hostlist=c1 {OK1}",
        sent=(("SuspendNodes", {"hostlist": "c1"}),),
        stderr_closed=True,
    ),
    Row(
        # SKB_TIMEOUT_S: digits with one '.', blanks around: 0.2 s, then no answer.
        "timeout-deadline-no-answer",
        ("resume", "c1"),
        1,
        "resume request_id=<rid> hostlist=c1 result=BridgeNoAnswer "
        'error="unix:<sock>: Deadline Exceeded (1 attempts)" '
        "action=none:left-powering-up-for-the-reconciler elapsed_ms=N",
        sent=(resume("c1"),),
        bridge=Script(sleep_s=0.5),
        env={"SKB_TIMEOUT_S": " 0.2\t"},
    ),
    Row(
        # Not a plain decimal (float() would read 0.1): the default 2 s, so the answer comes.
        "timeout-typo-is-default",
        ("suspend", "c1"),
        0,
        f"suspend request_id=<rid> hostlist=c1 {OK1}",
        sent=(("SuspendNodes", {"hostlist": "c1"}),),
        bridge=Script(sleep_s=0.5),
        env={"SKB_TIMEOUT_S": "1e-1"},
    ),
    # --- the resume file --------------------------------------------------------------------
    Row(
        # Sent as its bytes, no newline translation; each byte outside valid UTF-8 is U+FFFD.
        "resume-file-bytes",
        ("resume", "c1"),
        0,
        f"resume request_id=<rid> hostlist=c1 {OK1}",
        sent=(resume("c1", '{"a":1}\r\n\ufffd\ufffd\ufffdé'),),
        resume_file=b'{"a":1}\r\n\xff\xe2\x82\xc3\xa9',
    ),
    Row(
        "resume-file-unset",
        ("resume", "c1"),
        0,
        f'resume request_id=<rid> hostlist=c1 note="no SLURM_RESUME_FILE" {OK1}',
        sent=(resume("c1", ""),),
        resume_file=None,
    ),
    Row(
        "resume-file-missing",
        ("resume", "c1"),
        0,
        "resume request_id=<rid> hostlist=c1 "
        f'note="cannot read SLURM_RESUME_FILE: No such file or directory" {OK1}',
        sent=(resume("c1", ""),),
        resume_file="absent.json",
    ),
    Row(
        "resume-file-directory",
        ("resume", "c1"),
        0,
        'resume request_id=<rid> hostlist=c1 note="cannot read SLURM_RESUME_FILE: Is a directory" '
        f"{OK1}",
        sent=(resume("c1", ""),),
        resume_file=".",
    ),
    Row(
        "resume-file-too-big",
        ("resume", "c1"),
        0,
        "resume request_id=<rid> hostlist=c1 "
        f'note="SLURM_RESUME_FILE over 16777216 bytes: not sent" {OK1}',
        sent=(resume("c1", ""),),
        resume_file=BIG,
    ),
    # --- whole-call failures: retries, the log line, what a resume writes to Slurm ----------
    Row(
        "unreachable-no-socket-resume-down",
        ("resume", "c[1-2]"),
        1,
        f'resume request_id=<rid> hostlist=c[1-2] result=BridgeUnreachable error="{NO_SOCKET}" '
        "action=scontrol-state=down elapsed_ms=N",
        scontrol=down("c[1-2]", f"k8s: BridgeUnreachable: {NO_SOCKET}"),
        bridge=ABSENT,
    ),
    Row(
        "unreachable-refused-resume-down",
        ("resume", "c1"),
        1,
        "resume request_id=<rid> hostlist=c1 result=BridgeUnreachable "
        'error="unix:<sock>: Connection refused (3 attempts)" action=scontrol-state=down '
        "elapsed_ms=N",
        scontrol=down("c1", "k8s: BridgeUnreachable: unix:<sock>: Connection refused (3 attempts)"),
        bridge=REFUSING,
    ),
    Row(
        "unreachable-tcp-refused",
        ("resume", "c1"),
        1,
        "resume request_id=<rid> hostlist=c1 result=BridgeUnreachable "
        'error="127.0.0.1:1: UNKNOWN: ipv4:127.0.0.1:1: Failed to connect to remote host: '
        'Connection refused (3 attempts)" action=scontrol-state=down elapsed_ms=N',
        scontrol=down(
            "c1",
            "k8s: BridgeUnreachable: 127.0.0.1:1: UNKNOWN: ipv4:127.0.0.1:1: Failed to connect "
            "to remote host: Connection refused (3 attempts)",
        ),
        bridge=ABSENT,
        env={"SKB_SOCKET": "127.0.0.1:1"},
    ),
    Row(
        # Only a resume's nodes wait: other hooks log, and the bridge's reconciler repairs.
        "unreachable-suspend-only-logs",
        ("suspend", "c1"),
        1,
        f'suspend request_id=<rid> hostlist=c1 result=BridgeUnreachable error="{NO_SOCKET}" '
        "action=none elapsed_ms=N",
        bridge=ABSENT,
    ),
    Row(
        "caller-not-allowed",
        ("resume", "c1"),
        1,
        "resume request_id=<rid> hostlist=c1 result=BridgeFailed "
        'error="CallerNotAllowed: uid 1000 not allowed" action=scontrol-state=down elapsed_ms=N',
        sent=(resume("c1"),),
        scontrol=down("c1", "k8s: BridgeFailed: CallerNotAllowed: uid 1000 not allowed"),
        bridge=Script(code=grpc.StatusCode.PERMISSION_DENIED, details="uid 1000 not allowed"),
    ),
    Row(
        "invalid-input",
        ("suspend", "c["),
        1,
        "suspend request_id=<rid> hostlist=c[ result=BridgeFailed "
        "error=\"InvalidInput: bad hostlist 'c['\" action=none elapsed_ms=N",
        sent=(("SuspendNodes", {"hostlist": "c["}),),
        bridge=Script(code=grpc.StatusCode.INVALID_ARGUMENT, details="bad hostlist 'c['"),
    ),
    Row(
        # UNAVAILABLE is retried: 3 attempts (50 ms, 100 ms apart), one request id.
        "backend-unavailable-retried",
        ("resume", "c1"),
        1,
        "resume request_id=<rid> hostlist=c1 result=BridgeFailed "
        'error="TransientBackendError: kubernetes unreachable" action=scontrol-state=down '
        "elapsed_ms=N",
        sent=(resume("c1"),) * 3,
        scontrol=down("c1", "k8s: BridgeFailed: TransientBackendError: kubernetes unreachable"),
        bridge=Script(code=grpc.StatusCode.UNAVAILABLE, details="kubernetes unreachable"),
    ),
    Row(
        # Leader election mid-failover: retried like any UNAVAILABLE, then the nodes are left
        # POWERING_UP for the next leader's reconciler, not set DOWN.
        "no-leader-leaves-the-resume-to-the-next-leader",
        ("resume", "c1"),
        1,
        "resume request_id=<rid> hostlist=c1 result=NotLeader "
        'error="ResumeNodes: this bridge (b) does not lead" '
        "action=none:left-powering-up-for-the-next-leader elapsed_ms=N",
        sent=(resume("c1"),) * 3,
        bridge=Script(
            code=grpc.StatusCode.UNAVAILABLE,
            details="ResumeNodes: this bridge (b) does not lead",
            error_class="NotLeader",
        ),
    ),
    Row(
        "no-leader-on-a-suspend",
        ("suspend", "c1"),
        1,
        "suspend request_id=<rid> hostlist=c1 result=NotLeader "
        'error="SuspendNodes: this bridge (b) does not lead" action=none elapsed_ms=N',
        sent=(("SuspendNodes", {"hostlist": "c1"}),) * 3,
        bridge=Script(
            code=grpc.StatusCode.UNAVAILABLE,
            details="SuspendNodes: this bridge (b) does not lead",
            error_class="NotLeader",
        ),
    ),
    Row(
        "bridge-error-not-retried",
        ("resume", "c1"),
        1,
        "resume request_id=<rid> hostlist=c1 result=BridgeFailed "
        'error="BridgeError: FAILED_PRECONDITION: no pool" action=scontrol-state=down '
        "elapsed_ms=N",
        sent=(resume("c1"),),
        scontrol=down("c1", "k8s: BridgeFailed: BridgeError: FAILED_PRECONDITION: no pool"),
        bridge=Script(
            code=grpc.StatusCode.FAILED_PRECONDITION, details="no pool", from_bridge=False
        ),
    ),
    Row(
        # The reason is one line of at most 200 characters, the detail's newline a space.
        "reason-one-short-line",
        ("resume", "c1"),
        1,
        "resume request_id=<rid> hostlist=c1 result=BridgeFailed "
        f'error="InvalidInput: a\\nb {"é" * 200}" action=scontrol-state=down elapsed_ms=N',
        sent=(resume("c1"),),
        scontrol=down("c1", "k8s: BridgeFailed: InvalidInput: a b " + "é" * 160 + "..."),
        bridge=Script(code=grpc.StatusCode.INVALID_ARGUMENT, details="a\nb " + "é" * 200),
    ),
    Row(
        "scontrol-fails",
        ("resume", "c1"),
        1,
        f'resume request_id=<rid> hostlist=c1 result=BridgeUnreachable error="{NO_SOCKET}" '
        'action="scontrol update state=down exited 3: scontrol: error: Invalid node name" '
        "elapsed_ms=N",
        scontrol=down("c1", f"k8s: BridgeUnreachable: {NO_SOCKET}"),
        bridge=ABSENT,
        scontrol_then='echo "scontrol: error: Invalid node name" >&2; exit 3\n',
    ),
    Row(
        "scontrol-killed",
        ("resume", "c1"),
        1,
        f'resume request_id=<rid> hostlist=c1 result=BridgeUnreachable error="{NO_SOCKET}" '
        'action="scontrol update state=down killed by signal 9" elapsed_ms=N',
        scontrol=down("c1", f"k8s: BridgeUnreachable: {NO_SOCKET}"),
        bridge=ABSENT,
        scontrol_then="kill -9 $$\n",
    ),
    Row(
        "scontrol-missing",
        ("resume", "c1"),
        1,
        f'resume request_id=<rid> hostlist=c1 result=BridgeUnreachable error="{NO_SOCKET}" '
        'action="scontrol update state=down failed: No such file or directory" elapsed_ms=N',
        bridge=ABSENT,
        env={"SKB_SLURM_BIN": "<root>/nope"},
    ),
    # --- hand-off: nodes no pool owns go to the site's own program ---------------------------
    Row(
        # The site's program is exec'd in the hook's place: its exit status is the hook's, it
        # gets the nodes as one comma list, no SKB_* variable, and the resume file's bytes in a
        # memfd of its own (slurmctld's fd is short-lived).
        "handoff-resume-mixed",
        ("resume", "c1,n1,n2"),
        7,
        "resume request_id=<rid> hostlist=c1,n1,n2 result=ok nodes=3 ok=1 accepted=0 not_ok=2 "
        'first_not_ok="n1:UNKNOWN_NODE:in no pool, n2:UNKNOWN_NODE:in no pool" '
        "handed_off=n1,n2 program=<root>/site elapsed_ms=N",
        sent=(resume("c1,n1,n2"),),
        bridge=Script(results=(OK_C1, UNKNOWN_N1, UNKNOWN_N2)),
        env={"SKB_SITE_RESUME_PROGRAM": "<root>/site"},
        site=SiteRun("n1,n2", MEMFD, RESUME),
        site_exit=7,
    ),
    Row(
        # The bridge gets each byte outside UTF-8 as U+FFFD; the site's program, the raw bytes.
        "handoff-resume-raw-bytes",
        ("resume", "n1"),
        0,
        "resume request_id=<rid> hostlist=n1 result=ok nodes=1 ok=0 accepted=0 not_ok=1 "
        'first_not_ok="n1:UNKNOWN_NODE:in no pool" handed_off=n1 program=<root>/site '
        "elapsed_ms=N",
        sent=(resume("n1", '{"a":1}\r\n\ufffd\ufffd\ufffdé'),),
        bridge=Script(results=(UNKNOWN_N1,)),
        env={"SKB_SITE_RESUME_PROGRAM": "<root>/site"},
        resume_file=b'{"a":1}\r\n\xff\xe2\x82\xc3\xa9',
        site=SiteRun("n1", MEMFD, b'{"a":1}\r\n\xff\xe2\x82\xc3\xa9'),
    ),
    Row(
        # Nodes in the bridge's order, which need not be the hostlist's.
        "handoff-suspend",
        ("suspend", "n1,c1,n2"),
        0,
        "suspend request_id=<rid> hostlist=n1,c1,n2 result=ok nodes=3 ok=1 accepted=0 not_ok=2 "
        'first_not_ok="n2:UNKNOWN_NODE:in no pool, n1:UNKNOWN_NODE:in no pool" '
        "handed_off=n2,n1 program=<root>/site elapsed_ms=N",
        sent=(("SuspendNodes", {"hostlist": "n1,c1,n2"}),),
        bridge=Script(results=(OK_C1, UNKNOWN_N2, UNKNOWN_N1)),
        env={"SKB_SITE_SUSPEND_PROGRAM": "<root>/site"},
        resume_file=None,
        site=SiteRun("n2,n1"),
    ),
    Row(
        # Each kind has its own program: resume_fail's, not resume's.
        "handoff-resume_fail",
        ("resume_fail", "n1"),
        3,
        "resume_fail request_id=<rid> hostlist=n1 result=ok nodes=1 ok=0 accepted=0 not_ok=1 "
        'first_not_ok="n1:UNKNOWN_NODE:in no pool" handed_off=n1 program=<root>/site '
        "elapsed_ms=N",
        sent=(("ResumeFailed", {"hostlist": "n1"}),),
        bridge=Script(results=(UNKNOWN_N1,)),
        env={
            "SKB_SITE_RESUME_PROGRAM": "<root>/absent",
            "SKB_SITE_RESUME_FAIL_PROGRAM": "<root>/site",
        },
        resume_file=None,
        site=SiteRun("n1"),
        site_exit=3,
    ),
    Row(
        # No program for this kind (another kind's does not count): today's line, exit 0.
        "handoff-no-program",
        ("resume", "c1,n1"),
        0,
        "resume request_id=<rid> hostlist=c1,n1 result=ok nodes=2 ok=1 accepted=0 not_ok=1 "
        'first_not_ok="n1:UNKNOWN_NODE:in no pool" elapsed_ms=N',
        sent=(resume("c1,n1"),),
        bridge=Script(results=(OK_C1, UNKNOWN_N1)),
        env={"SKB_SITE_SUSPEND_PROGRAM": "<root>/site", "SKB_SITE_RESUME_PROGRAM": ""},
    ),
    Row(
        # Every node is the pools' (a failed one too): the program does not run.
        "handoff-no-unknown-node",
        ("resume", "c1,c2"),
        0,
        "resume request_id=<rid> hostlist=c1,c2 result=ok nodes=2 ok=1 accepted=0 not_ok=1 "
        'first_not_ok="c2:NO_CAPACITY:pool full" elapsed_ms=N',
        sent=(resume("c1,c2"),),
        bridge=Script(
            results=(
                OK_C1,
                pb.NodeResult(
                    node="c2",
                    outcome=pb.OUTCOME_FAILED,
                    error_class=pb.ERROR_CLASS_NO_CAPACITY,
                    message="pool full",
                ),
            )
        ),
        env={"SKB_SITE_RESUME_PROGRAM": "<root>/site"},
    ),
    Row(
        # Node events are never handed off: they have no program of the site's.
        "handoff-never-node_event",
        ("node_event", "down", "n1"),
        0,
        "node_event:down request_id=<rid> hostlist=n1 result=ok nodes=1 ok=0 accepted=0 "
        'not_ok=1 first_not_ok="n1:UNKNOWN_NODE:in no pool" elapsed_ms=N',
        sent=(("NodeEvent", {"kind": pb.NODE_EVENT_KIND_DOWN, "hostlist": "n1"}),),
        bridge=Script(results=(UNKNOWN_N1,)),
        env={k: "<root>/site" for k in SITE_KEYS},
    ),
    *(
        Row(
            # Relative (even one that resolves from the hook's directory), absent, not
            # executable: a second line says so, exit 1, and nothing is written to Slurm.
            f"handoff-failed-{case}",
            ("resume", "n1"),
            1,
            "resume request_id=<rid> hostlist=n1 result=ok nodes=1 ok=0 accepted=0 not_ok=1 "
            f'first_not_ok="n1:UNKNOWN_NODE:in no pool" handed_off=n1 program={program} '
            "elapsed_ms=N",
            more_log=(f"resume request_id=<rid> handoff=failed program={program} error={error}",),
            sent=(resume("n1"),),
            bridge=Script(results=(UNKNOWN_N1,)),
            env={"SKB_SITE_RESUME_PROGRAM": program},
        )
        for case, program, error in (
            ("relative", "site", '"not an absolute path"'),
            ("absent", "<root>/absent", '"No such file or directory"'),
            ("not-executable", "<root>/resume.json", '"Permission denied"'),
        )
    ),
    Row(
        # Without the bridge's answer the site's nodes are unknown: today's DOWN, no hand-off.
        "handoff-not-when-unreachable",
        ("resume", "c[1-2]"),
        1,
        f'resume request_id=<rid> hostlist=c[1-2] result=BridgeUnreachable error="{NO_SOCKET}" '
        "action=scontrol-state=down elapsed_ms=N",
        scontrol=down("c[1-2]", f"k8s: BridgeUnreachable: {NO_SOCKET}"),
        bridge=ABSENT,
        env={"SKB_SITE_RESUME_PROGRAM": "<root>/site"},
    ),
    Row(
        # The hook read no resume file: SLURM_RESUME_FILE stays as slurmctld set it (unset).
        "handoff-resume-file-unset",
        ("resume", "n1"),
        0,
        'resume request_id=<rid> hostlist=n1 note="no SLURM_RESUME_FILE" result=ok nodes=1 ok=0 '
        'accepted=0 not_ok=1 first_not_ok="n1:UNKNOWN_NODE:in no pool" handed_off=n1 '
        "program=<root>/site elapsed_ms=N",
        sent=(resume("n1", ""),),
        bridge=Script(results=(UNKNOWN_N1,)),
        env={"SKB_SITE_RESUME_PROGRAM": "<root>/site"},
        resume_file=None,
        site=SiteRun("n1"),
    ),
    Row(
        # ... or set, to the path the hook could not read.
        "handoff-resume-file-unreadable",
        ("resume", "n1"),
        0,
        "resume request_id=<rid> hostlist=n1 "
        'note="cannot read SLURM_RESUME_FILE: No such file or directory" result=ok nodes=1 ok=0 '
        'accepted=0 not_ok=1 first_not_ok="n1:UNKNOWN_NODE:in no pool" handed_off=n1 '
        "program=<root>/site elapsed_ms=N",
        sent=(resume("n1", ""),),
        bridge=Script(results=(UNKNOWN_N1,)),
        env={"SKB_SITE_RESUME_PROGRAM": "<root>/site"},
        resume_file="absent.json",
        site=SiteRun("n1", "<root>/absent.json"),
    ),
    # --- TCP with mutual TLS ------------------------------------------------------------------
    *(
        Row(
            f"mtls-{host}",
            ("suspend", "c1"),
            0,
            f"suspend request_id=<rid> hostlist=c1 {OK1}",
            sent=(("SuspendNodes", {"hostlist": "c1"}),),
            tls=True,
            env={"SKB_SOCKET": f"{host}:<port>", **TLS},
        )
        for host in ("127.0.0.1", "localhost")
    ),
    Row(
        "mtls-unreadable-file",
        ("resume", "c1"),
        1,
        "resume request_id=<rid> hostlist=c1 result=BridgeFailed "
        'error="ConfigError: cannot read TLS file <pki>/absent.pem: No such file or directory" '
        "action=scontrol-state=down elapsed_ms=N",
        scontrol=down(
            "c1",
            "k8s: BridgeFailed: ConfigError: cannot read TLS file <pki>/absent.pem: "
            "No such file or directory",
        ),
        tls=True,
        env={"SKB_SOCKET": "127.0.0.1:<port>", **TLS, "SKB_TLS_CERT": "<pki>/absent.pem"},
    ),
    Row(
        # The bridge refuses a certificate of another CA. How the handshake failed is each gRPC
        # library's own words (<cause>); the rest is the contract's.
        "mtls-rogue-certificate",
        ("resume", "c1"),
        1,
        "resume request_id=<rid> hostlist=c1 result=BridgeUnreachable "
        'error="127.0.0.1:<port>: <cause> (3 attempts)" action=scontrol-state=down elapsed_ms=N',
        scontrol=down("c1", "k8s: BridgeUnreachable: 127.0.0.1:<port>: <cause> (3 attempts)"),
        tls=True,
        env={
            "SKB_SOCKET": "127.0.0.1:<port>",
            **TLS,
            "SKB_TLS_CERT": "<pki>/rogue.pem",
            "SKB_TLS_KEY": "<pki>/rogue.key",
        },
    ),
)


# --- running a row -------------------------------------------------------------------------


@dataclass
class Seen:
    """What one run left behind."""

    status: int
    log: list[str]  # the log file's lines, or stderr's when SKB_HOOK_LOG is empty
    stderr: str
    scontrol: tuple[str, ...] | None
    requests: list[tuple[str, dict[str, object]]]
    env: dict[str, str]  # the hook's environment
    site: SiteSeen | None  # None: the site's program did not run


@dataclass
class SiteSeen:
    """What the site's program recorded."""

    pid: int
    argv: list[str]  # after argv[0]
    env: dict[str, str]
    resume: bytes | None  # what reading $SLURM_RESUME_FILE gave; None: unset or unreadable


class Site:
    """A directory with a fake scontrol, and the bridge a row asks for."""

    def __init__(self, root: Path, pki: Path, big: Path) -> None:
        self.root, self.pki, self.big = root, pki, big
        self.sock = root / "b.sock"
        assert len(str(self.sock)) < 100  # AF_UNIX path limit
        self.scontrol_argv = root / "scontrol.argv"
        self.port = 0

    def fill(self, text: str) -> str:
        for key, value in (
            ("<root>", self.root),
            ("<sock>", self.sock),
            ("<pki>", self.pki),
            ("<port>", self.port),
        ):
            text = text.replace(key, str(value))
        return text

    def run(self, client: str, row: Row, go_hook: Path) -> Seen:
        (self.root / "bin").mkdir()
        scontrol = self.root / "bin" / "scontrol"  # builtins only: no PATH, as under slurmctld
        scontrol.write_text(
            "#!/bin/sh\n" + RECORD.format(argv=self.scontrol_argv) + row.scontrol_then
        )
        scontrol.chmod(0o755)
        program = self.root / "site"
        program.write_text(self.fill(SITE_PROGRAM).replace("<exit>", str(row.site_exit)))
        program.chmod(0o755)
        with _bridge(self, row) as bridge:
            env = self._env(row)
            if client == "go":
                argv: list[str | bytes] = [str(go_hook), *row.argv]
            else:
                argv = [sys.executable, "-P", "-s", "-m", "bridge.hooks", *row.argv]
                env["PYTHONPATH"] = str(REPO)
            done = run_as_slurmctld(argv, env, self.root, stderr_closed=row.stderr_closed)  # type: ignore[arg-type]
            requests = list(bridge.requests) if bridge else []
        log_path = env.get("SKB_HOOK_LOG", "")
        if log_path:
            log = Path(log_path).read_text().splitlines() if Path(log_path).exists() else []
        else:
            log = done.stderr.splitlines()
        recorded = (
            self.scontrol_argv.read_text().splitlines() if self.scontrol_argv.exists() else None
        )
        return Seen(
            done.returncode,
            log,
            done.stderr,
            tuple(recorded) if recorded is not None else None,
            requests,
            env,
            self._site_seen(),
        )

    def _site_seen(self) -> SiteSeen | None:
        argv = self.root / "site.argv"
        if not argv.exists():
            return None
        pid, *args = argv.read_text().splitlines()
        pairs = (self.root / "site.env").read_bytes().split(b"\0")[:-1]
        env = dict(os.fsdecode(p).split("=", 1) for p in pairs)
        status = self.root / "site.resume.status"
        readable = status.exists() and status.read_text() == "0"
        resume = (self.root / "site.resume").read_bytes() if readable else None
        return SiteSeen(int(pid), args, env, resume)

    def _env(self, row: Row) -> dict[str, str]:
        env = {
            "PWD": str(self.root),
            "SHLVL": "1",
            "SKB_SOCKET": f"unix:{self.sock}",
            "SKB_SLURM_BIN": str(self.root / "bin"),
            "SKB_HOOK_LOG": str(self.root / "hook.log"),
            "SKB_TIMEOUT_S": "2",
            **{k: self.fill(v) for k, v in row.env.items()},
        }
        if isinstance(row.resume_file, bytes):
            (self.root / "resume.json").write_bytes(row.resume_file)
            env["SLURM_RESUME_FILE"] = str(self.root / "resume.json")
        elif row.resume_file == BIG:
            env["SLURM_RESUME_FILE"] = str(self.big)
        elif row.resume_file is not None:
            env["SLURM_RESUME_FILE"] = str(self.root / row.resume_file)
        return env


@contextmanager
def _bridge(site: Site, row: Row) -> Iterator[ScriptedBridge | None]:
    """The row's bridge for the length of one run: a scripted server, a refusing socket, none."""
    if row.bridge == REFUSING:
        with socket.socket(socket.AF_UNIX) as held:
            held.bind(str(site.sock))
            yield None
        return
    if not isinstance(row.bridge, Script):
        yield None
        return
    servicer = ScriptedBridge(script=row.bridge)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    pb_grpc.add_BridgeServicer_to_server(servicer, server)  # type: ignore[no-untyped-call]
    if row.tls:
        creds = grpc.ssl_server_credentials(
            [((site.pki / "server.key").read_bytes(), (site.pki / "server.pem").read_bytes())],
            root_certificates=(site.pki / "ca.pem").read_bytes(),
            require_client_auth=True,
        )
        site.port = server.add_secure_port("127.0.0.1:0", creds)
    else:
        server.add_insecure_port(f"unix:{site.sock}")
    server.start()
    try:
        yield servicer
    finally:
        server.stop(None)


_PREFIX = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d{4} slurm-k8s-bridge-hook\[(\d+)\] ")


def _normalized(line: str) -> tuple[str, str]:
    """The line after its time and pid, request id and elapsed time replaced; the request id."""
    prefix = _PREFIX.match(line)
    assert prefix, line
    rest = line[prefix.end() :]
    found = re.search(r" request_id=(\S+)", rest)
    rid = found.group(1) if found else ""
    if rid:
        kind = rest.split(" ", 1)[0].split(":")[0]
        assert re.fullmatch(rf"{kind}-{prefix.group(1)}-[0-9a-f]{{6}}", rid), line
        rest = rest.replace(f"request_id={rid}", "request_id=<rid>", 1)
    return re.sub(r" elapsed_ms=\d+$", " elapsed_ms=N", rest), rid


def _matched(expected: str, actual: str) -> str:
    """``expected`` with each ``<cause>`` replaced by what ``actual`` has there, when it fits."""
    if "<cause>" not in expected:
        return expected
    pattern = re.escape(expected).replace(re.escape("<cause>"), '[^"]+')
    return actual if re.fullmatch(pattern, actual) else expected


@pytest.fixture
def site(tmp_path: Path, pki: Path, big_resume_file: Path) -> Site:
    return Site(tmp_path, pki, big_resume_file)


@pytest.mark.parametrize("client", ["go", "python"])
@pytest.mark.parametrize("row", CONTRACT, ids=[r.id for r in CONTRACT])
def test_contract(row: Row, client: str, site: Site, go_hook: Path) -> None:
    seen = site.run(client, row, go_hook)
    expected = [site.fill(e) for e in (row.log, *row.more_log)]
    assert len(seen.log) == len(expected), (seen.log, seen.stderr)
    lines, rids = zip(*(_normalized(line) for line in seen.log), strict=True)
    rid = rids[0]
    assert set(rids) == {rid}  # every line of a call carries its request id
    assert (seen.status, [_matched(e, a) for e, a in zip(expected, lines, strict=True)]) == (
        row.status,
        list(lines),
    ), seen.stderr
    # To stderr as well unless slurmctld closed it.
    assert seen.stderr == ("" if row.stderr_closed else "".join(f"{x}\n" for x in seen.log))
    for _, fields in seen.requests:
        assert fields.pop("request_id") == rid
    assert seen.requests == [(m, dict(f)) for m, f in row.sent]
    if row.scontrol is None or seen.scontrol is None:
        assert seen.scontrol == row.scontrol
    else:
        expected = [site.fill(a) for a in row.scontrol]
        assert [_matched(e, a) for e, a in zip(expected, seen.scontrol, strict=False)] == list(
            seen.scontrol
        )
        assert len(seen.scontrol) == len(expected)
    _check_site(row, site, seen)


def _check_site(row: Row, site: Site, seen: Seen) -> None:
    """The site's program ran as the row says, exec'd in the hook's place."""
    if row.site is None or seen.site is None:
        assert seen.site == row.site  # both None: it did not run
        return
    prefix = _PREFIX.match(seen.log[0])
    assert prefix
    pid = int(prefix.group(1))
    assert seen.site.pid == pid  # the same process: exec'd, not spawned
    assert seen.site.argv == [row.site.nodes]
    var = seen.site.env.get("SLURM_RESUME_FILE")
    if row.site.resume_var == MEMFD:
        assert var is not None
        assert re.fullmatch(rf"/proc/{pid}/fd/\d+", var), var
    else:
        assert var == (None if row.site.resume_var is None else site.fill(row.site.resume_var))
    assert seen.site.resume == row.site.resume_bytes
    # The hook's environment without SKB_* (SLURM_RESUME_FILE checked above), nothing added.
    assert {k: v for k, v in seen.site.env.items() if k != "SLURM_RESUME_FILE"} == {
        k: v for k, v in seen.env.items() if not k.startswith("SKB_") and k != "SLURM_RESUME_FILE"
    }


# --- hook.sh picks the client -----------------------------------------------------------------

STUB_PYTHON = """#!/bin/sh
case "$1" in
    -S) printf 3.12 ;;
    *) printf '%s\\n' "$@" > {marker} ;;
esac
"""


@pytest.mark.parametrize(
    ("hook_client", "with_binary", "expected"),
    [
        (None, True, "go"),
        ("go", True, "go"),
        ("python", True, "python"),
        (None, False, "python"),
    ],
    ids=["default-go", "go", "forced-python", "no-binary-python"],
)
def test_hook_sh_picks_the_client(
    tmp_path: Path, go_hook: Path, hook_client: str | None, with_binary: bool, expected: str
) -> None:
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    for name in ("resume", "hook.sh"):
        shutil.copy2(PLUGINS / name, plugins / name)
    if with_binary:
        (plugins / "bin").mkdir()
        shutil.copy2(go_hook, plugins / "bin" / "skb-hook")
    marker = tmp_path / "python.argv"
    python = tmp_path / "python"
    python.write_text(STUB_PYTHON.format(marker=marker))
    python.chmod(0o755)
    log = tmp_path / "hooks.log"
    lines = [
        f"SKB_PYTHON={python}",
        f"SKB_SOCKET=unix:{tmp_path / 'none.sock'}",
        f"SKB_HOOK_LOG={log}",
        "SKB_TIMEOUT_S=0.2",
        f"SKB_SLURM_BIN={tmp_path}",  # no scontrol there: the action says so
    ]
    if hook_client is not None:
        lines.append(f"SKB_HOOK_CLIENT={hook_client}")
    (plugins / "hooks.env").write_text("\n".join(lines) + "\n")
    done = run_as_slurmctld(
        [str(plugins / "resume"), "c1"], {"PWD": str(tmp_path), "SHLVL": "1"}, tmp_path
    )
    if expected == "go":
        assert done.returncode == 1, done.stderr
        assert not marker.exists()
        assert "resume request_id=resume-" in log.read_text()
        assert "result=BridgeUnreachable" in log.read_text()
    else:
        assert done.returncode == 0, done.stderr
        assert marker.read_text().splitlines() == ["-P", "-s", "-m", "bridge.hooks", "resume", "c1"]
        assert not log.exists()


#: hooks.env keys only hook.sh reads: which client and Python to run, and job_ready's.
HOOK_SH_ONLY = {"SKB_HOOK_CLIENT", "SKB_PYTHON", "SKB_JOB_READY_MAX_S", "SKB_SLURM_CONF"}


def test_both_clients_read_the_keys_hook_sh_passes() -> None:
    """hook.sh's whitelist, bridge.hooks.HOOKS_ENV_KEYS (the pip entry points' hooks.env) and the
    settings the Go client reads name the same keys: a key one of them misses is a setting that
    silently does nothing there."""
    text = (PLUGINS / "hook.sh").read_text()
    case = re.search(r"case \$skb_line in\n(.*?)\)\n", text, re.DOTALL)
    assert case, "hook.sh: no `case $skb_line in` whitelist"
    whitelist = set(re.findall(r"(SKB_[A-Z_]+)=\*", case.group(1)))
    sources = (p.read_text() for p in HOOKCLIENT.glob("*.go") if not p.name.endswith("_test.go"))
    go = set(re.findall(r'"(SKB_[A-Z_]+)"', "".join(sources)))
    assert whitelist - HOOK_SH_ONLY == set(hooks.HOOKS_ENV_KEYS) == go
    assert set(SITE_KEYS) <= go


def test_go_generated_code_is_fresh(tmp_path: Path) -> None:
    """The committed internal/bridgepb is what generate.sh makes of proto/ today."""
    gobin = Path.home() / "go" / "bin"
    search = os.pathsep.join([str(gobin), os.environ.get("PATH", "")])
    missing = [
        p for p in ("protoc-gen-go", "protoc-gen-go-grpc") if not shutil.which(p, path=search)
    ]
    if missing:
        pytest.skip(
            f"{', '.join(missing)} not installed (see slurm_plugins/hookclient/generate.sh)"
        )
    env = {**os.environ, "PATH": search, "SKB_PROTOC_PYTHON": sys.executable}
    subprocess.run(
        [str(HOOKCLIENT / "generate.sh"), str(tmp_path)], env=env, check=True, timeout=120
    )
    committed = HOOKCLIENT / "internal" / "bridgepb"
    fresh = tmp_path / "internal" / "bridgepb"
    names = sorted(p.name for p in committed.glob("*.go"))
    assert names == sorted(p.name for p in fresh.glob("*.go"))
    for name in names:
        assert (fresh / name).read_text() == (committed / name).read_text(), (
            f"{name} is stale: run slurm_plugins/hookclient/generate.sh"
        )
