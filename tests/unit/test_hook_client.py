"""The Go hook client (slurm_plugins/bin/skb-hook) and ``python -m bridge.hooks``, side by side.

Both run with the same argv and a slurmctld-like environment (no PATH) against one real gRPC
server on a Unix socket whose servicer follows a script; each case asserts the two agree on the
exit status, the log line (but for time, pid, request id and elapsed time), the requests the
server received, and the scontrol command a failed resume runs.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent import futures
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


# --- a scripted bridge ---------------------------------------------------------------------


@dataclass
class Script:
    """What the fake bridge answers: per-node outcomes, or an error, after an optional sleep."""

    outcome: pb.Outcome = pb.OUTCOME_OK
    results: list[pb.NodeResult] | None = None
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
            results = [pb.NodeResult(node=n, outcome=s.outcome) for n in hostlist.split(",")]
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


class Site:
    """A socket path, a fake scontrol that records its argv, and a way to run either client."""

    def __init__(self, root: Path, go_hook: Path) -> None:
        self.root = root
        self.go_hook = go_hook
        self.sock = root / "b.sock"
        assert len(str(self.sock)) < 100  # AF_UNIX path limit
        self.bin = root / "bin"
        self.bin.mkdir()
        self.scontrol_argv = root / "scontrol.argv"
        self.scontrol_script('for a in "$@"; do printf "%s\\n" "$a"; done > {argv}\n')

    def scontrol_script(self, body: str) -> None:
        scontrol = self.bin / "scontrol"  # builtins only: no PATH, as under slurmctld
        scontrol.write_text("#!/bin/sh\n" + body.format(argv=self.scontrol_argv))
        scontrol.chmod(0o755)

    def run(
        self, client: str, argv: list[str], env: dict[str, str], *, stderr_closed: bool = False
    ) -> Outcome:
        """Run ``client`` (go or python) as slurmctld would; what it left behind."""
        log = self.root / f"{client}.log"
        log.unlink(missing_ok=True)
        self.scontrol_argv.unlink(missing_ok=True)
        full_env = {
            "PWD": str(self.root),
            "SHLVL": "1",
            "SKB_SOCKET": f"unix:{self.sock}",
            "SKB_SLURM_BIN": str(self.bin),
            "SKB_HOOK_LOG": str(log),
            "SKB_TIMEOUT_S": "2",
            **env,
        }
        if client == "go":
            cmd = [str(self.go_hook), *argv]
        else:
            cmd = [sys.executable, "-P", "-s", "-m", "bridge.hooks", *argv]
            full_env["PYTHONPATH"] = str(REPO)
        done = run_as_slurmctld(cmd, full_env, self.root, stderr_closed=stderr_closed)
        lines = log.read_text().splitlines() if log.exists() else []
        scontrol = (
            self.scontrol_argv.read_text().splitlines() if self.scontrol_argv.exists() else None
        )
        return Outcome(done.returncode, lines, done.stderr, scontrol)


@dataclass
class Outcome:
    status: int
    log: list[str]
    stderr: str
    scontrol: list[str] | None

    def normalized(self) -> tuple[int, list[str], list[str] | None]:
        return self.status, [_normalize(line) for line in self.log], self.scontrol


_STAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d{4} slurm-k8s-bridge-hook\[\d+\] ")
_REQUEST_ID = re.compile(r"\b(resume|suspend|resume_fail|node_event)-\d+-[0-9a-f]{6}\b")


def _normalize(line: str) -> str:
    assert _STAMP.match(line), line
    line = _STAMP.sub("<stamp> ", line)
    line = _REQUEST_ID.sub(r"\1-<pid>-<hex>", line)
    return re.sub(r"elapsed_ms=\d+", "elapsed_ms=N", line)


@pytest.fixture
def site(tmp_path: Path, go_hook: Path) -> Site:
    return Site(tmp_path, go_hook)


@pytest.fixture
def bridge(site: Site) -> Iterator[ScriptedBridge]:
    servicer = ScriptedBridge()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    pb_grpc.add_BridgeServicer_to_server(servicer, server)  # type: ignore[no-untyped-call]
    server.add_insecure_port(f"unix:{site.sock}")
    server.start()
    yield servicer
    server.stop(None)


def _run_both(
    site: Site,
    bridge: ScriptedBridge | None,
    argv: list[str],
    env: dict[str, str],
    *,
    stderr_closed: bool = False,
) -> tuple[Outcome, Outcome]:
    """Python then Go; asserts they received the same requests; returns both outcomes."""
    seen: dict[str, list[tuple[str, dict[str, object]]]] = {}
    outcomes = {}
    for client in ("python", "go"):
        if bridge is not None:
            bridge.requests.clear()
        outcomes[client] = site.run(client, argv, env, stderr_closed=stderr_closed)
        if bridge is not None:
            seen[client] = list(bridge.requests)
    py, go = outcomes["python"], outcomes["go"]
    assert go.normalized() == py.normalized(), (py.stderr, go.stderr)
    if bridge is not None:
        kind = argv[0]
        for client, requests in seen.items():
            for _, fields in requests:
                rid = str(fields.pop("request_id", ""))
                assert re.fullmatch(rf"{kind}-\d+-[0-9a-f]{{6}}", rid), (client, rid)
        assert seen["go"] == seen["python"]
    return py, go


RESUME_FILE = '{"jobs":[{"job_id":2,"nodes_resume":"c1,c2"}],\r\n"all_nodes_resume":"c1,c2"}\n'

# (id, argv, env, script, expected log fragment, whether scontrol ran)
ANSWERED = [
    (
        "resume-accepted",
        ["resume", "c1,c2"],
        {},
        Script(outcome=pb.OUTCOME_ACCEPTED),
        "result=ok nodes=2 ok=0 accepted=2 not_ok=0",
        False,
    ),
    ("suspend-ok", ["suspend", "c1"], {}, Script(), "result=ok nodes=1 ok=1", False),
    ("resume_fail-ok", ["resume_fail", "c[1-2]"], {}, Script(), "result=ok nodes=1", False),
    ("node_event-drain", ["node_event", "drain", "c1"], {}, Script(), "node_event:drain", False),
    ("node_event-idle", ["node_event", "idle", "c1"], {}, Script(), "node_event:idle", False),
    (
        "not-ok-nodes-listed",
        ["suspend", "c1,c2,x"],
        {},
        Script(
            results=[
                pb.NodeResult(node="c1", outcome=pb.OUTCOME_OK),
                pb.NodeResult(
                    node="c2",
                    outcome=pb.OUTCOME_FAILED,
                    error_class=pb.ERROR_CLASS_TRANSIENT,
                    message="it's 'quoted'\n",
                ),
                # Unknown outcome and class (a newer bridge): read as FAILED / INTERNAL.
                pb.NodeResult(node="x", outcome=pb.OUTCOME_UNSPECIFIED, error_class=9),  # type: ignore[arg-type]
            ]
        ),
        "not_ok=2 first_not_ok=",
        False,
    ),
    (
        "bad-timeout-is-default",
        ["suspend", "c1"],
        {"SKB_TIMEOUT_S": "soon"},
        Script(),
        "result=ok",
        False,
    ),
    ("no-log-file", ["suspend", "c1"], {"SKB_HOOK_LOG": ""}, Script(), "", False),
    # Whole-call errors the bridge raised on purpose (skb-error metadata).
    (
        "caller-not-allowed",
        ["resume", "c1"],
        {},
        Script(code=grpc.StatusCode.PERMISSION_DENIED, details="uid 1000 not allowed"),
        "result=BridgeFailed error='CallerNotAllowed: uid 1000 not allowed' "
        "action=scontrol-state=down",
        True,
    ),
    (
        "invalid-input",
        ["suspend", "c["],
        {},
        Script(code=grpc.StatusCode.INVALID_ARGUMENT, details="bad hostlist 'c['"),
        "result=BridgeFailed error=\"InvalidInput: bad hostlist 'c['\" action=none",
        False,
    ),
    (
        "backend-unavailable-retried",
        ["resume", "c1"],
        {"SKB_TIMEOUT_S": "1"},
        Script(code=grpc.StatusCode.UNAVAILABLE, details="kubernetes unreachable"),
        "error='TransientBackendError: kubernetes unreachable' action=scontrol-state=down",
        True,
    ),
    (
        "misconfigured",
        ["resume", "c1"],
        {},
        Script(code=grpc.StatusCode.FAILED_PRECONDITION, details="no pool", from_bridge=False),
        "error='BridgeError: FAILED_PRECONDITION: no pool'",
        True,
    ),
    (
        "deadline-no-answer",
        ["resume", "c1"],
        {"SKB_TIMEOUT_S": "0.3"},
        Script(sleep_s=1.0),
        "result=BridgeNoAnswer error='unix:<sock>: Deadline Exceeded (1 attempts)' "
        "action=none:left-powering-up-for-the-reconciler",
        False,
    ),
]


@pytest.mark.parametrize("case", [pytest.param(c[1:], id=c[0]) for c in ANSWERED])
def test_go_and_python_agree_against_a_bridge(
    site: Site,
    bridge: ScriptedBridge,
    case: tuple[list[str], dict[str, str], Script, str, bool],
) -> None:
    argv, env, script, fragment, scontrol = case
    bridge.script = script
    env = {"SLURM_RESUME_FILE": str(site.root / "resume.json"), **env}
    (site.root / "resume.json").write_text(RESUME_FILE)
    _py, go = _run_both(site, bridge, argv, env)
    if env.get("SKB_HOOK_LOG") == "":
        assert go.log == [] and "slurm-k8s-bridge-hook[" in go.stderr
        return
    assert len(go.log) == 1
    assert fragment.replace("<sock>", str(site.sock)) in go.log[0]
    assert (go.scontrol is not None) == scontrol
    if scontrol:
        assert go.scontrol is not None
        assert go.scontrol[:3] == ["update", f"nodename={argv[1]}", "state=down"]
        assert go.scontrol[3].startswith("reason=k8s: BridgeFailed: ")


def test_resume_sends_the_file_as_python_reads_it(site: Site, bridge: ScriptedBridge) -> None:
    (site.root / "resume.json").write_bytes(RESUME_FILE.encode() + b"\xff")
    _run_both(
        site, bridge, ["resume", "c1,c2"], {"SLURM_RESUME_FILE": str(site.root / "resume.json")}
    )
    ((_, fields),) = bridge.requests
    assert fields["resume_file"] == RESUME_FILE.replace("\r\n", "\n") + "\ufffd"
    assert "wait" not in fields  # false: proto3 leaves a default field unset


@pytest.mark.parametrize(
    ("resume_file", "note"),
    [
        (None, "no SLURM_RESUME_FILE"),
        ("absent.json", "cannot read SLURM_RESUME_FILE: No such file or directory"),
        ("big.json", "SLURM_RESUME_FILE over 16777216 characters: not sent"),
    ],
    ids=["unset", "missing", "too-big"],
)
def test_resume_file_notes_agree(
    site: Site, bridge: ScriptedBridge, resume_file: str | None, note: str
) -> None:
    (site.root / "big.json").write_text("x" * (16 * 1024 * 1024 + 1))
    env = {} if resume_file is None else {"SLURM_RESUME_FILE": str(site.root / resume_file)}
    _py, go = _run_both(site, bridge, ["resume", "c1"], env)
    assert f"note='{note}' result=ok" in go.log[0]
    ((_, fields),) = bridge.requests
    assert "resume_file" not in fields  # empty


@pytest.mark.parametrize(
    ("bound", "error"),
    [
        (False, "No such file or directory (3 attempts)"),
        (True, "Connection refused (3 attempts)"),
    ],
    ids=["no-socket", "refused"],
)
def test_unreachable_bridge_agrees_and_marks_resume_down(
    site: Site, bound: bool, error: str
) -> None:
    held = _bound_not_listening(site.sock) if bound else None
    try:
        _py, go = _run_both(site, None, ["resume", "c[1-2]"], {})
    finally:
        if held is not None:
            held.close()
    assert go.status == 1
    assert f"result=BridgeUnreachable error='unix:{site.sock}: {error}'" in go.log[0]
    assert go.scontrol == [
        "update",
        "nodename=c[1-2]",
        "state=down",
        f"reason=k8s: BridgeUnreachable: unix:{site.sock}: {error}",
    ]
    _py, go = _run_both(site, None, ["suspend", "c1"], {})  # other hooks only log
    assert go.scontrol is None and "action=none" in go.log[0]


def _bound_not_listening(path: Path) -> socket.socket:
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(path))
    return s


@pytest.mark.usefixtures("bridge")
def test_stderr_closed_still_logs_to_the_file(site: Site) -> None:
    _py, go = _run_both(site, None, ["suspend", "c1"], {}, stderr_closed=True)
    assert go.status == 0 and go.stderr == "" and "result=ok" in go.log[0]


def test_failing_scontrol_is_reported_alike(site: Site) -> None:
    site.scontrol_script('echo "scontrol: error: Invalid node name" >&2\nexit 3\n')
    _py, go = _run_both(site, None, ["resume", "c1"], {})
    assert (
        "action='scontrol update state=down exited 3: scontrol: error: Invalid node name'"
        in (go.log[0])
    )
    site.scontrol_argv.unlink(missing_ok=True)
    _py, go = _run_both(site, None, ["resume", "c1"], {"SKB_SLURM_BIN": str(site.root / "nope")})
    assert "failed: [Errno 2] No such file or directory" in go.log[0]


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["bogus", "c1"],
        ["resume"],
        ["suspend", "a", "b"],
        ["node_event", "reboot", "c1"],
        ["node_event", "down"],
        ["resume", 'it\'s "q"\t\u00e9', "extra"],
    ],
    ids=[
        "none",
        "bad-kind",
        "no-hostlist",
        "two-hostlists",
        "bad-event",
        "event-no-hostlist",
        "quotes",
    ],
)
def test_usage_errors_agree(site: Site, argv: list[str]) -> None:
    _py, go = _run_both(site, None, argv, {})
    assert go.status == 2 and "usage error: " in go.log[0]


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


# --- TCP with mutual TLS ----------------------------------------------------------------------


@pytest.fixture
def tls_bridge(pki: Path) -> Iterator[tuple[ScriptedBridge, int]]:
    servicer = ScriptedBridge()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    pb_grpc.add_BridgeServicer_to_server(servicer, server)  # type: ignore[no-untyped-call]
    creds = grpc.ssl_server_credentials(
        [((pki / "server.key").read_bytes(), (pki / "server.pem").read_bytes())],
        root_certificates=(pki / "ca.pem").read_bytes(),
        require_client_auth=True,
    )
    port = server.add_secure_port("127.0.0.1:0", creds)
    server.start()
    yield servicer, port
    server.stop(None)


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_mtls_calls_agree(
    site: Site, pki: Path, tls_bridge: tuple[ScriptedBridge, int], host: str
) -> None:
    bridge, port = tls_bridge
    env = {
        "SKB_SOCKET": f"{host}:{port}",
        "SKB_TLS_CERT": str(pki / "client.pem"),
        "SKB_TLS_KEY": str(pki / "client.key"),
        "SKB_TLS_CA": str(pki / "ca.pem"),
    }
    _py, go = _run_both(site, bridge, ["suspend", "c1"], env)
    assert go.status == 0 and "result=ok nodes=1 ok=1" in go.log[0]


@pytest.mark.parametrize(
    "case",
    [
        # The bridge refuses a certificate of another CA.
        pytest.param(("rogue", "BridgeUnreachable", ""), id="rogue"),
        pytest.param(
            ("absent", "BridgeFailed", "ConfigError: cannot read TLS file: [Errno 2]"), id="absent"
        ),
    ],
)
def test_mtls_refusals_agree(
    site: Site, pki: Path, tls_bridge: tuple[ScriptedBridge, int], case: tuple[str, str, str]
) -> None:
    cert, result, fragment = case
    bridge, port = tls_bridge
    env = {
        "SKB_SOCKET": f"127.0.0.1:{port}",
        "SKB_TLS_CERT": str(pki / f"{cert}.pem"),
        "SKB_TLS_KEY": str(pki / f"{cert}.key"),
        "SKB_TLS_CA": str(pki / "ca.pem"),
        "SKB_TIMEOUT_S": "1",
    }
    runs = {client: site.run(client, ["resume", "c1"], env) for client in ("python", "go")}
    for client, run in runs.items():
        assert run.status == 1, client
        assert f"result={result} " in run.log[0] and fragment in run.log[0], (client, run.log)
        assert run.scontrol is not None and run.scontrol[3].startswith(f"reason=k8s: {result}: ")
    # grpc's own words for a refused handshake differ between its C core and Go; the rest agrees.
    if result == "BridgeFailed":
        assert runs["go"].normalized() == runs["python"].normalized()
    assert bridge.requests == []


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
