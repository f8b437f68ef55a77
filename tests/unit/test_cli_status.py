"""``slurm-k8s-bridge status``: filters, summary, JSON, exit codes, the watch loop and --help.

The loop runs on a fake clock, a fake sleep and a fake fetch; two tests go through ``main`` and a
real gRPC server on a Unix socket (and a socket nobody listens on).
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from bridge.api import build_server
from bridge.cli.main import build_parser, main
from bridge.cli.status import (
    EXIT_OK,
    EXIT_STUCK,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    gang_note,
    known_state,
    leadership_note,
    options_from_args,
    select,
    state_matches,
    status_once,
    status_watch,
)
from bridge.cli.status_report import StatusOptions, as_json, render, summary_lines
from bridge.domain.gang_mode import GangMode
from bridge.domain.leadership import LeaderState
from bridge.domain.results import NodeStatus
from bridge.domain.stuck import find_stuck
from bridge.errors import InvalidInput
from bridge.rpc.client import BridgeUnreachable
from tests.unit.test_api import FakeUseCases

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)


def ago(seconds: int) -> datetime:
    return NOW - timedelta(seconds=seconds)


ROWS = [
    NodeStatus("cpu-0", "cpu", "alloc", "Running", "10.1.0.5", "", ago(3600)),
    NodeStatus("cpu-1", "cpu", "alloc", "Running", "10.1.0.6", "", ago(3500)),
    NodeStatus("cpu-2", "cpu", "idle~", "", "", "", None),
    NodeStatus("cpu-3", "cpu", "idle~", "", "", "", None),
    NodeStatus("cpu-4", "cpu", "idle#", "Pending", "", "", ago(400)),
    NodeStatus("cpu-5", "cpu", "down~", "", "", "k8s: NoCapacity: quota", None),
    NodeStatus("gpu-0", "gpu", "idle~", "", "", "", None),
    NodeStatus("gpu-1", "gpu", "drain~", "", "", "maintenance", None),
    NodeStatus("gpu-2", "gpu", "alloc#", "", "", "", None),
]


def opts(argv: Sequence[str] = ()) -> StatusOptions:
    return options_from_args(build_parser().parse_args(["status", *argv]))


def names(rows: Sequence[NodeStatus]) -> list[str]:
    return [r.node for r in rows]


# --- filters ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "word",
    [
        "idle",
        "IDLE~",
        "alloc#",
        "allocated",
        "down",
        "drain",
        "drng",
        "mix",
        "comp",
        "powered_down",
        "Powering-Up",
        "powering down",
        "not_responding",
        "pending",
        "Terminating",
        "failed",
    ],
)
def test_known_states(word: str) -> None:
    assert known_state(word)


@pytest.mark.parametrize("word", ["bogus", "idle~~", "", "runing", "up", "~"])
def test_unknown_states(word: str) -> None:
    assert not known_state(word)


@pytest.mark.parametrize(
    ("word", "slurm", "pod", "matches"),
    [
        ("idle", "idle~", "", True),  # the base state, whatever the power suffix
        ("idle", "idle#", "", True),
        ("idle~", "idle#", "", False),  # the suffix asked for must be there
        ("IDLE~", "idle~", "", True),
        ("idle", "drain~", "", False),  # drained is not idle
        ("drain", "drain~", "", True),
        ("drain", "drng", "Running", True),  # DRAIN is a flag: draining too
        ("allocated", "alloc#", "", True),
        ("alloc", "mix", "Running", False),
        ("down", "down~", "", True),
        ("powered_down", "down~", "", True),
        ("powered-down", "idle~", "", True),
        ("powering_up", "alloc#", "", True),
        ("powering_up", "alloc", "Running", False),
        ("running", "alloc", "Running", True),  # the pod phase
        ("Pending", "idle#", "Pending", True),
        ("pending", "", "Pending", True),  # a node Slurm does not know still has a phase
        ("idle", "", "Running", False),
    ],
)
def test_state_matches(word: str, slurm: str, pod: str, matches: bool) -> None:
    status = NodeStatus("n", "p", slurm, pod, "", "", None)
    assert state_matches(status, word) is matches


@pytest.mark.parametrize(
    ("argv", "selected"),
    [
        ([], [r.node for r in ROWS]),
        (["--pool", "gpu"], ["gpu-0", "gpu-1", "gpu-2"]),
        (["--pool", "gpu", "--pool", "cpu"], [r.node for r in ROWS]),
        (["--state", "alloc"], ["cpu-0", "cpu-1", "gpu-2"]),
        (["--state", "alloc", "--state", "PENDING"], ["cpu-0", "cpu-1", "cpu-4", "gpu-2"]),
        (["--state", "powering_up"], ["cpu-4", "gpu-2"]),
        (["--state", "down"], ["cpu-5"]),
        (["--pool", "cpu", "--state", "idle~"], ["cpu-2", "cpu-3"]),
        (["--node", "cpu-[1-3]"], ["cpu-1", "cpu-2", "cpu-3"]),
        (["cpu-[1-3]", "--node", "gpu-0"], ["cpu-1", "cpu-2", "cpu-3", "gpu-0"]),
        (["--node", "cpu-[0-99]", "--state", "running"], ["cpu-0", "cpu-1"]),
        (["--pool", "gpu", "--node", "cpu-0"], []),  # both known, nothing in both
    ],
)
def test_filters(argv: list[str], selected: list[str]) -> None:
    assert names(select(ROWS, opts(argv))) == selected


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--pool", "gpux"], "unknown pool 'gpux' (pools: cpu, gpu)"),
        (["--pool", "cpu", "--pool", "b", "--pool", "a"], "unknown pool 'a', 'b'"),
        (["--node", "login[1-2]"], "no node of the bridge in login[1-2]"),
    ],
)
def test_an_unknown_pool_or_hostlist_is_named(argv: list[str], message: str) -> None:
    with pytest.raises(InvalidInput) as error:
        select(ROWS, opts(argv))
    assert str(error.value).startswith(message)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--state", "bogus"], "unknown state 'bogus'"),
        (["--node", "cpu-[3-1]"], "'3-1'"),
    ],
)
def test_bad_options_are_rejected_before_any_call(argv: list[str], message: str) -> None:
    with pytest.raises(InvalidInput) as error:
        opts(argv)
    assert message in str(error.value)


# --- rendering ----------------------------------------------------------------------------------


def test_summary_counts_by_pool_and_state() -> None:
    assert summary_lines(ROWS) == [
        "cpu: 2 allocated, 1 powering up, 2 powered down, 1 down",
        "gpu: 1 powering up, 1 powered down, 1 drained",
    ]


def test_text_frame_table_hidden_summary_and_stuck_line() -> None:
    text, stuck = render(ROWS, opts(), NOW)
    lines = text.splitlines()
    assert lines[0].split()[:3] == ["NODE", "POOL", "SLURM"]
    table = [line.split()[0] for line in lines[1:7]]
    # idle~ without a pod is only counted; a drained or failed powered-down node is shown.
    assert table == ["cpu-0", "cpu-1", "cpu-4", "cpu-5", "gpu-1", "gpu-2"]
    assert lines[7] == "(3 more node(s) powered down with no pod; --all lists them)"
    assert lines[8:10] == summary_lines(ROWS)
    assert lines[10] == (
        "stuck: 2 node(s): cpu-4 (pod Pending for 400s (> 300s)); cpu-5 (k8s: NoCapacity: quota)"
    )
    assert len(lines) == 11
    assert [s.node for s in stuck] == ["cpu-4", "cpu-5"]


def test_text_frame_all_and_healthy() -> None:
    healthy = [r for r in ROWS if r.node in ("cpu-0", "cpu-2")]
    text, stuck = render(healthy, opts(["--all"]), NOW)
    assert stuck == []
    assert [line.split()[0] for line in text.splitlines()] == [
        "NODE",
        "cpu-0",
        "cpu-2",
        "cpu:",
        "stuck:",
    ]
    assert text.splitlines()[-1] == "stuck: none"


def test_quiet_prints_only_stuck_nodes() -> None:
    text, _ = render(ROWS, opts(["-q"]), NOW)
    assert text.splitlines() == [
        "cpu-4  pod Pending for 400s (> 300s)",
        "cpu-5  k8s: NoCapacity: quota",
    ]
    assert render(ROWS[:2], opts(["-q"]), NOW)[0] == ""  # cron mails nothing when healthy


def test_stuck_after_is_the_threshold() -> None:
    _, stuck = render(ROWS, opts(["--stuck-after", "500"]), NOW)
    assert [s.node for s in stuck] == ["cpu-5"]


def test_json_shape() -> None:
    o = opts(["--json", "--node", "cpu-[0-5]"])
    selected = select(ROWS, o)
    doc = as_json(selected, find_stuck(selected, NOW, o.stuck_after), NOW, o)
    assert list(doc) == ["time", "stuck_after_s", "nodes", "summary", "stuck", "rollouts"]
    assert doc["time"] == "2026-12-03T12:00:00Z"
    assert doc["stuck_after_s"] == 300
    assert doc["nodes"][0] == {
        "node": "cpu-0",
        "pool": "cpu",
        "slurm_state": "alloc",
        "pod_phase": "Running",
        "pod_ip": "10.1.0.5",
        "age_s": 3600,
        "since": "2026-12-03T11:00:00Z",
        "reason": None,
        "template_hash": None,
    }
    assert doc["nodes"][5] == {
        "node": "cpu-5",
        "pool": "cpu",
        "slurm_state": "down~",
        "pod_phase": None,
        "pod_ip": None,
        "age_s": None,
        "since": None,
        "reason": "k8s: NoCapacity: quota",
        "template_hash": None,
    }
    # Every node is listed, idle~ ones too: scripts filter for themselves.
    assert len(doc["nodes"]) == 6
    assert doc["summary"] == {
        "cpu": {"allocated": 2, "powering up": 1, "powered down": 2, "down": 1}
    }
    assert doc["stuck"] == [
        {"node": "cpu-4", "pool": "cpu", "why": "pod Pending for 400s (> 300s)"},
        {"node": "cpu-5", "pool": "cpu", "why": "k8s: NoCapacity: quota"},
    ]
    assert doc["rollouts"] == {}  # no pod is on an older template
    text, _ = render(selected, o, NOW)
    assert json.loads(text) == doc
    assert text.startswith('{\n  "time": ')  # indented once; one line per frame under --watch


# --- exit codes ---------------------------------------------------------------------------------


def _fetch_raising(error: Exception) -> Callable[[], list[NodeStatus]]:
    def fetch() -> list[NodeStatus]:
        raise error

    return fetch


@pytest.mark.parametrize(
    ("argv", "fetch", "code", "err"),
    [
        (["--pool", "cpu", "--state", "alloc"], lambda: ROWS, EXIT_OK, ""),
        ([], lambda: ROWS, EXIT_STUCK, ""),
        (["--pool", "gpu"], lambda: ROWS, EXIT_OK, ""),
        (["--pool", "tpu"], lambda: ROWS, EXIT_USAGE, "unknown pool 'tpu'"),
        (
            [],
            _fetch_raising(BridgeUnreachable("unix:/x: No such file or directory (3 attempts)")),
            EXIT_UNREACHABLE,
            "unix:/x: No such file",
        ),
        ([], _fetch_raising(InvalidInput("Slurm said no")), EXIT_UNREACHABLE, "Slurm said no"),
        ([], list, EXIT_OK, ""),  # a bridge with no nodes: nothing is stuck
    ],
    ids=["healthy", "stuck", "gpu-healthy", "unknown-pool", "unreachable", "error", "empty"],
)
def test_exit_codes(
    argv: list[str], fetch: Callable[[], list[NodeStatus]], code: int, err: str
) -> None:
    out, errors = io.StringIO(), io.StringIO()
    assert status_once(opts(argv), fetch, out, errors, NOW) == code
    assert err in errors.getvalue()
    if err:
        assert errors.getvalue().startswith("slurm-k8s-bridge status: ")
        assert out.getvalue() == ""


def test_main_against_a_real_server(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fake = FakeUseCases(statuses=list(ROWS))
    sock = tmp_path / "b.sock"
    server = build_server(fake, unix_socket=str(sock), socket_mode=0o600, max_workers=2)
    server.start()
    try:
        assert main(["status", "--socket", f"unix:{sock}", "-q"]) == EXIT_STUCK
        stuck = capsys.readouterr().out.splitlines()
        assert [line.split()[0] for line in stuck] == ["cpu-4", "cpu-5"]
        assert main(["status", "--socket", f"unix:{sock}", "--pool", "gpu"]) == EXIT_OK
        assert main(["status", "--socket", f"unix:{sock}", "--pool", "nope"]) == EXIT_USAGE
        assert "unknown pool 'nope'" in capsys.readouterr().err
    finally:
        server.stop(None)
    # The whole list is asked for and filtered here (so an unknown pool is told from an empty).
    assert fake.calls == [("list_nodes", ("", timedelta(seconds=300)))] * 3


def test_the_bridges_judgement_is_the_answer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The bridge judged every row: its verdict is shown whatever the rows alone would say here.
    judged = [dataclasses.replace(r, stuck="") for r in ROWS]
    judged[0] = dataclasses.replace(judged[0], stuck="Slurm powering up, no pod for 400s (> 300s)")
    fake = FakeUseCases(statuses=judged)
    sock = tmp_path / "b.sock"
    server = build_server(fake, unix_socket=str(sock), socket_mode=0o600, max_workers=2)
    server.start()
    try:
        code = main(["status", "--socket", f"unix:{sock}", "-q", "--stuck-after", "0.5"])
    finally:
        server.stop(None)
    assert code == EXIT_STUCK
    assert capsys.readouterr().out.splitlines() == [
        f"{judged[0].node}  Slurm powering up, no pod for 400s (> 300s)"
    ]
    # Under a second still asks for one (0 would mean the bridge's default).
    assert fake.calls == [("list_nodes", ("", timedelta(seconds=1)))]


def test_main_without_a_bridge(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["status", "--socket", f"unix:{tmp_path}/none.sock", "--timeout", "0.3"])
    assert code == EXIT_UNREACHABLE
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("slurm-k8s-bridge status: unix:")


@pytest.mark.parametrize(
    "argv",
    [
        ["--state", "bogus"],
        ["--node", "cpu-[3-1]"],
    ],
)
def test_main_usage_errors_exit_2_without_calling(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    # No server at this socket: a usage error must be found before any call.
    assert main(["status", "--socket", "unix:/nonexistent/b.sock", *argv]) == EXIT_USAGE
    assert capsys.readouterr().err.startswith("slurm-k8s-bridge status: ")


@pytest.mark.parametrize(
    "argv",
    [
        ["--json", "-q"],
        ["--stuck-after", "0"],
        ["--watch", "-1"],
        ["--stuck-after", "soon"],
    ],
)
def test_argparse_usage_errors_exit_2(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["status", *argv])
    assert exit_info.value.code == EXIT_USAGE


def test_help_documents_exit_codes_and_cron_use(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["status", "--help"])
    out = capsys.readouterr().out
    assert "exit status:" in out
    for code in ("0  no node stuck", "1  a node is stuck", "2  usage", "3  no status"):
        assert code in out
    assert "slurm-k8s-bridge status -q" in out
    assert "slurm-k8s-bridge status --json" in out
    assert "--stuck-after" in out


# --- the watch loop -----------------------------------------------------------------------------


class Loop:
    """A fake clock and sleep: each sleep advances the clock; Ctrl-C after ``frames`` frames."""

    def __init__(self, frames: int) -> None:
        self.now = NOW
        self.frames = frames
        self.slept: list[float] = []

    def clock(self) -> datetime:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += timedelta(seconds=seconds)
        if len(self.slept) >= self.frames:
            raise KeyboardInterrupt


def _fetches(*answers: list[NodeStatus] | Exception) -> Callable[[], list[NodeStatus]]:
    pending = list(answers)

    def fetch() -> list[NodeStatus]:
        answer = pending.pop(0) if len(pending) > 1 else pending[0]
        if isinstance(answer, Exception):
            raise answer
        return answer

    return fetch


def _watch(
    argv: list[str], fetch: Callable[[], list[NodeStatus]], frames: int, *, tty: bool = False
) -> tuple[int, str, str, Loop]:
    loop = Loop(frames)
    out, err = io.StringIO(), io.StringIO()
    code = status_watch(opts(argv), fetch, out, err, clock=loop.clock, sleep=loop.sleep, is_tty=tty)
    return code, out.getvalue(), err.getvalue(), loop


def test_watch_times_nodes_from_when_it_first_saw_them() -> None:
    # A node powering up with no pod has no clock of its own: stuck once watched for > 300 s.
    no_pod = [NodeStatus("cpu-0", "cpu", "alloc#", "", "", "", None)]
    code, out, err, loop = _watch(["--watch", "100", "--stuck-after", "250"], _fetches(no_pod), 4)
    assert code == EXIT_OK  # Ctrl-C
    assert loop.slept == [100.0] * 4
    frames = out.split("--- ")[1:]
    assert [f.splitlines()[0] for f in frames] == [
        "2026-12-03T12:00:00Z ---",
        "2026-12-03T12:01:40Z ---",
        "2026-12-03T12:03:20Z ---",
        "2026-12-03T12:05:00Z ---",
    ]
    assert [f.splitlines()[-1] for f in frames] == [
        "stuck: none",
        "stuck: none",
        "stuck: none",
        "stuck: 1 node(s): cpu-0 (Slurm powering up, no pod for 300s (> 250s))",
    ]
    assert "\x1b[" not in out  # not a terminal: no escape codes
    assert err == ""


def test_watch_restarts_a_nodes_clock_when_it_changes() -> None:
    no_pod = [NodeStatus("cpu-0", "cpu", "alloc#", "", "", "", None)]
    pod = [NodeStatus("cpu-0", "cpu", "alloc#", "Terminating", "", "", None)]
    fetch = _fetches(no_pod, no_pod, pod, pod, no_pod)
    _, out, _, _ = _watch(["--watch", "100", "--stuck-after", "150"], fetch, 5)
    last = [f.splitlines()[-1] for f in out.split("--- ")[1:]]
    assert last == [
        "stuck: none",
        "stuck: none",
        "stuck: none",
        "stuck: none",
        "stuck: none",
    ]


def test_watch_keeps_trying_when_the_bridge_does_not_answer() -> None:
    lost = BridgeUnreachable("unix:/b.sock: Connection refused (3 attempts)")
    fetch = _fetches(ROWS[:1], lost, lost, ROWS[:1])
    code, out, err, _ = _watch(["--watch"], fetch, 4)
    assert code == EXIT_OK
    assert (
        err.splitlines()
        == [
            "slurm-k8s-bridge status: unix:/b.sock: Connection refused (3 attempts) "
            "(trying again in 2s)"
        ]
        * 2
    )
    frames = out.split("--- ")[1:]
    assert len(frames) == 4
    assert frames[0].splitlines()[1].startswith("NODE")
    assert frames[1].splitlines() == ["2026-12-03T12:00:02Z ---"]  # the error went to stderr
    assert frames[3].splitlines()[1].startswith("NODE")


def test_watch_on_a_terminal_clears_the_screen() -> None:
    _, out, _, _ = _watch(["--watch", "5"], _fetches(ROWS[:1]), 2, tty=True)
    frames = out.split("\x1b[H\x1b[2J")
    assert frames[0] == ""
    assert len(frames) == 3
    assert frames[1].startswith("every 5s  2026-12-03T12:00:00Z  (Ctrl-C to stop)\n\nNODE")
    assert "--- " not in out


def test_watch_json_is_one_document_per_line() -> None:
    _, out, _, _ = _watch(["--watch", "--json"], _fetches(ROWS), 3)
    docs = [json.loads(line) for line in out.splitlines()]
    assert [d["time"] for d in docs] == [
        "2026-12-03T12:00:00Z",
        "2026-12-03T12:00:02Z",
        "2026-12-03T12:00:04Z",
    ]
    assert all(len(d["nodes"]) == len(ROWS) for d in docs)


def test_watch_stops_on_an_unknown_pool() -> None:
    code, out, err, loop = _watch(["--watch", "--pool", "tpu"], _fetches(ROWS), 3)
    assert out == "--- 2026-12-03T12:00:00Z ---\n"
    assert code == EXIT_USAGE
    assert "unknown pool 'tpu'" in err
    assert loop.slept == []


def test_watch_defaults_to_two_seconds() -> None:
    args = build_parser().parse_args(["status", "--watch"])
    assert isinstance(args, argparse.Namespace)
    assert opts(["--watch"]).watch == 2.0
    assert opts([]).watch is None
    assert opts(["-w", "0.5"]).watch == 0.5


@pytest.mark.parametrize(
    ("state", "note"),
    [
        (LeaderState(enabled=False), ""),
        (
            LeaderState(
                True, "b-host", "skb-lab", "a-host", False, datetime(2026, 12, 6, tzinfo=UTC), 1
            ),
            "leader: a-host since 2026-12-06T00:00:00Z (this bridge, b-host, follows and writes "
            "nothing; lease skb-lab, 1 failover)",
        ),
        (
            LeaderState(True, "a-host", "skb-lab", "a-host", True, None, 0),
            "leader: a-host (this bridge, a-host, leads; lease skb-lab, 0 failovers)",
        ),
        (
            LeaderState(True, "a-host", "skb-lab", "", False, None, 3),
            "leader: none (this bridge, a-host, follows and writes nothing; lease skb-lab, "
            "3 failovers)",
        ),
    ],
)
def test_leadership_note(state: LeaderState, note: str) -> None:
    assert leadership_note(state) == note


@pytest.mark.parametrize(
    ("mode", "note"),
    [
        (None, ""),  # a bridge older than gang scheduling says nothing
        (
            GangMode(api_version="scheduling.k8s.io/v1beta1"),
            "gang scheduling: on (scheduling.k8s.io/v1beta1 PodGroup)",
        ),
        (
            GangMode(why_off="the API server serves no PodGroup API"),
            "gang scheduling: off: the API server serves no PodGroup API; a multi-node job's "
            "pods are placed one by one (job-aware failure)",
        ),
    ],
    ids=["older-bridge", "on", "off"],
)
def test_gang_note(mode: GangMode | None, note: str) -> None:
    assert gang_note(mode) == note
