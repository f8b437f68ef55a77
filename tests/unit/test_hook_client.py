"""The hook contract, as one table that both hook clients run through.

The Go client (slurm_plugins/bin/skb-hook, the primary) and ``python -m bridge.hooks`` (the
fallback, and the pip install's entry points) implement one contract. Each row of
:data:`CONTRACT` is a scenario (argv, settings, resume file, what the bridge does) and what must
be observed: the exit status, the log line (exactly, but for time, pid, request id and elapsed
time), the requests the bridge received, and the scontrol command a failed resume runs.
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
                context.set_trailing_metadata(((ERROR_METADATA_KEY, s.code.name),))
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

RESUME = b'{"jobs":[{"job_id":2,"nodes_resume":"c1,c2,c3"}],"all_nodes_resume":"c1,c2,c3"}\n'
TLS = {
    "SKB_TLS_CERT": "<pki>/client.pem",
    "SKB_TLS_KEY": "<pki>/client.key",
    "SKB_TLS_CA": "<pki>/ca.pem",
}
Sent = tuple[str, Mapping[str, object]]


@dataclass(frozen=True)
class Row:
    """One scenario and what both clients must do in it.

    Placeholders in ``env``, ``log`` and ``scontrol``: ``<root>`` (the run's directory, where
    ``bin/scontrol`` is), ``<sock>`` (the Unix socket), ``<port>`` (the TLS bridge's port),
    ``<pki>`` (the TLS files); in ``log``, ``<rid>`` is the request id (``<kind>-<pid>-<6 hex>``)
    and ``N`` the elapsed milliseconds; ``<cause>`` in ``log`` and ``scontrol`` is any text
    without ``"`` (a transport failure in the gRPC library's words). ``env`` goes over the
    defaults ``SKB_SOCKET=unix:<sock>``, ``SKB_SLURM_BIN=<root>/bin``,
    ``SKB_HOOK_LOG=<root>/hook.log``, ``SKB_TIMEOUT_S=2``.
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


def resume(hostlist: str, resume_file: str = RESUME.decode()) -> Sent:
    fields = {"hostlist": hostlist}
    if resume_file:  # proto3 leaves an empty field (and wait=false) unset
        fields["resume_file"] = resume_file
    return "ResumeNodes", fields


def down(hostlist: str, reason: str) -> tuple[str, ...]:
    return ("update", f"nodename={hostlist}", "state=down", f"reason={reason}")


OK1 = "result=ok nodes=1 ok=1 accepted=0 not_ok=0 elapsed_ms=N"
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
        )

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
    assert len(seen.log) == 1, (seen.log, seen.stderr)
    line, rid = _normalized(seen.log[0])
    assert (seen.status, _matched(site.fill(row.log), line)) == (row.status, line), seen.stderr
    # One line, to stderr as well unless slurmctld closed it.
    assert seen.stderr == ("" if row.stderr_closed else seen.log[0] + "\n")
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
