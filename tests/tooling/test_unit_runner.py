"""dev/proving_ground/unit_runner.py: reading a systemd unit (the shipped one and tables of
lines), and starting a service with the unit's user, runtime directory and privilege drops."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT

from proving_ground.unit_runner import (  # isort: skip (conftest sets the path)
    DEFAULT_PATH,
    EnvironmentFile,
    ExecCommand,
    ServiceUnit,
    UnitError,
    expand_variables,
    parse_unit,
    privilege_problem,
    read_environment_file,
    replace_paths,
    summary,
)

SHIPPED_UNIT = ROOT / "deploy" / "systemd" / "slurm-k8s-bridge.service"
RUNTIME = Path("/run/skb-unit-runner-test")


def _service(*lines: str) -> str:
    # Line 1 and 2 are [Unit], line 3 is [Service]: the first of `lines` is line 4.
    return "\n".join(["[Unit]", "Description=test", "[Service]", *lines]) + "\n"


def test_the_shipped_unit() -> None:
    unit = parse_unit(SHIPPED_UNIT.read_text())
    argv = ("/opt/slurm-k8s-bridge/venv/bin/slurm-k8s-bridge",)
    config = ("-c", "/etc/slurm-k8s-bridge/bridge.yaml")
    assert (unit.user, unit.group) == ("slurm-k8s-bridge", "slurm")
    assert unit.runtime_directory == ("slurm-k8s-bridge",)
    assert (unit.runtime_directory_mode, unit.umask) == (0o750, 0o027)
    assert unit.no_new_privileges
    assert unit.capability_bounding_set == ()
    assert unit.ambient_capabilities == ()
    assert unit.exec_start_pre == (ExecCommand((*argv, "check-config", *config)),)
    assert unit.exec_start == ExecCommand((*argv, "serve", *config))
    assert (unit.kill_signal, unit.timeout_stop_sec) == (signal.SIGTERM, 30)
    others = dict(unit.others)
    assert {"ProtectSystem", "PrivateTmp", "SystemCallFilter", "Restart"} <= set(others)
    assert not {"User", "ExecStart", "UMask", "Type"} & set(others)


@pytest.mark.parametrize(
    ("lines", "field", "expected"),
    [
        # Exec lines: systemd's quoting, no shell.
        (["ExecStart=/bin/echo a  b"], "exec_start", ExecCommand(("/bin/echo", "a", "b"))),
        (
            ["ExecStart=/bin/sh -c 'echo \"x y\"; exit 0'"],
            "exec_start",
            ExecCommand(("/bin/sh", "-c", 'echo "x y"; exit 0')),
        ),
        (['ExecStart=/bin/echo a"b c"d'], "exec_start", ExecCommand(("/bin/echo", "ab cd"))),
        (
            [r'ExecStart=/bin/echo \x41 "a\"b" \\ \t x\ y'],
            "exec_start",
            ExecCommand(("/bin/echo", "A", 'a"b', "\\", "\t", "x y")),
        ),
        (["ExecStart=/bin/echo 100%%"], "exec_start", ExecCommand(("/bin/echo", "100%"))),
        (["ExecStart=/bin/echo ''"], "exec_start", ExecCommand(("/bin/echo", ""))),
        # Continuations join with a space; a comment line inside one is skipped.
        (
            ["ExecStart=/bin/echo a \\", "# a comment", "  b\\", "c"],
            "exec_start",
            ExecCommand(("/bin/echo", "a", "b", "c")),
        ),
        # Prefix '-'; an empty assignment resets; ExecStart may be given again after a reset.
        (
            ["ExecStartPre=-/bin/false", "ExecStartPre=/bin/true"],
            "exec_start_pre",
            (ExecCommand(("/bin/false",), True), ExecCommand(("/bin/true",))),
        ),
        (
            ["ExecStartPre=/bin/a", "ExecStartPre=", "ExecStartPre=/bin/b"],
            "exec_start_pre",
            (ExecCommand(("/bin/b",)),),
        ),
        (["ExecStart=", "ExecStart=/bin/b"], "exec_start", ExecCommand(("/bin/b",))),
        # Environment=: several per line, several lines, the last assignment wins, "" resets.
        (
            ['Environment=A=1 "B=two words"', "Environment=C=3 A=4"],
            "environment",
            (("A", "4"), ("B", "two words"), ("C", "3")),
        ),
        (["Environment=A=1", "Environment=", "Environment=B="], "environment", (("B", ""),)),
        (
            ["EnvironmentFile=-/etc/a", "EnvironmentFile=/etc/b"],
            "environment_files",
            (EnvironmentFile("/etc/a", optional=True), EnvironmentFile("/etc/b")),
        ),
        (["EnvironmentFile=/etc/a", "EnvironmentFile="], "environment_files", ()),
        # Scalars, with systemd's defaults when absent.
        ([], "user", None),
        (["User=nobody", "User="], "user", None),
        (["RuntimeDirectory=a b/c"], "runtime_directory", ("a", "b/c")),
        ([], "runtime_directory_mode", 0o755),
        (["UMask=077"], "umask", 0o077),
        (["NoNewPrivileges=false"], "no_new_privileges", False),
        (["NoNewPrivileges=on"], "no_new_privileges", True),
        ([], "capability_bounding_set", None),
        (["CapabilityBoundingSet="], "capability_bounding_set", ()),
        (["WorkingDirectory=-~"], "working_directory", "-~"),
        (["KillSignal=INT"], "kill_signal", signal.SIGINT),
        (["TimeoutStopSec=1min 30s"], "timeout_stop_sec", 90),
        (["TimeoutStopSec=500ms"], "timeout_stop_sec", 0.5),
        ([], "timeout_stop_sec", 90),
        # Whatever it does not apply, in order; Type=simple/exec is what exec does anyway.
        (
            ["Type=exec", "ProtectSystem=strict", "PrivateTmp=yes", "ProtectSystem=full"],
            "others",
            (("ProtectSystem", "strict"), ("PrivateTmp", "yes"), ("ProtectSystem", "full")),
        ),
    ],
)
def test_parse(lines: list[str], field: str, expected: Any) -> None:
    exec_start = [] if any(line.startswith("ExecStart=") for line in lines) else ["ExecStart=/x"]
    assert getattr(parse_unit(_service(*exec_start, *lines)), field) == expected


def test_only_the_service_section_counts() -> None:
    text = "[Unit]\nUser=root\n[Service]\nExecStart=/x\n[Install]\nWantedBy=multi-user.target\n"
    assert parse_unit(text) == ServiceUnit(exec_start=ExecCommand(("/x",)))


@pytest.mark.parametrize(
    ("lines", "error"),
    [
        (["ExecStart=@/bin/true true"], "line 4: ExecStart=: prefix '@'"),
        (["ExecStart=+/bin/true"], "line 4: ExecStart=: prefix '+'"),
        (["ExecStart=/x", "ExecStartPre=-!!/bin/true"], "line 5: ExecStartPre=: prefix '-!!'"),
        (["ExecStart=:/bin/true"], "line 4: ExecStart=: prefix ':'"),
        (["ExecStart=-"], "line 4: ExecStart=: no command"),
        (["ExecStart=/a", "ExecStart=/b"], "line 5: ExecStart=: a second command"),
        (["User=nobody"], "[Service] has no ExecStart="),
        (["ExecStart=/bin/sh -c 'echo"], "line 4: ExecStart=: unterminated ' quote"),
        (["ExecStart=/bin/echo \\q"], "line 4: ExecStart=: unknown escape \\q"),
        (["ExecStart=/bin/echo %n"], "line 4: ExecStart=: specifier '%n'"),
        (["ExecStart=/x", "NoNewPrivileges=maybe"], "line 5: NoNewPrivileges=: not a boolean"),
        (["ExecStart=/x", "UMask=0999"], "line 5: UMask=: not an octal mode"),
        (["ExecStart=/x", "Environment=1A=x"], "line 5: Environment=: '1A=x' is not NAME"),
        (["ExecStart=/x", "Environment=A"], "line 5: Environment=: 'A' is not NAME=VALUE"),
        (["ExecStart=/x", "EnvironmentFile=-env"], "line 5: EnvironmentFile=: '-env' is not"),
        (["ExecStart=/x", "RuntimeDirectory=../etc"], "line 5: RuntimeDirectory=: '../etc'"),
        (["ExecStart=/x", "RuntimeDirectory=/run/x"], "line 5: RuntimeDirectory=: '/run/x'"),
        (["ExecStart=/x", "TimeoutStopSec=2 weeks"], "line 5: TimeoutStopSec=: not a time"),
        (["ExecStart=/x", "KillSignal=SIGFOO"], "line 5: KillSignal=: not a signal"),
        (["ExecStart=/x", "Type=forking"], "line 5: Type=: 'forking'"),
        (
            ["ExecStart=/x", "CapabilityBoundingSet=CAP_NET_RAW"],
            "line 5: CapabilityBoundingSet=: 'CAP_NET_RAW': only the empty value",
        ),
        (["ExecStart=/x", "AmbientCapabilities=CAP_X"], "line 5: AmbientCapabilities=: 'CAP_X'"),
        # The line an assignment starts on, when it continues on the next.
        (["ExecStart=/x", "UMask=\\", "  0999"], "line 5: UMask=: not an octal mode"),
        (["ExecStart=/x", "junk"], "line 5: not an assignment: 'junk'"),
        (["ExecStart=/x", "[Service"], "line 5: bad section header"),
    ],
)
def test_bad_units_name_the_line_and_key(lines: list[str], error: str) -> None:
    with pytest.raises(UnitError, match=re.escape(error)):
        parse_unit(_service(*lines))


def test_an_assignment_outside_a_section() -> None:
    with pytest.raises(UnitError, match="line 2: ExecStart= before any section"):
        parse_unit("# a unit\nExecStart=/x\n[Service]\n")


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["/opt/skb/venv/bin/skb", "-c", "/etc/skb/bridge.yaml"], ["/v/bin/skb", "-c", "/b.yaml"]),
        (["/opt/skb/venv"], ["/v"]),
        # Whole path components only, on whole words only; the longest OLD wins.
        (["/opt/skb/venv2/bin/x", "--c=/etc/skb/bridge.yaml"], None),
        (["/opt/skb/venv/lib/special"], ["/special"]),
    ],
)
def test_replace_paths(argv: list[str], expected: list[str] | None) -> None:
    replacements = [
        ("/opt/skb/venv", "/v"),
        ("/etc/skb/bridge.yaml", "/b.yaml"),
        ("/opt/skb/venv/lib/special", "/special"),
    ]
    assert replace_paths(argv, replacements) == (argv if expected is None else expected)


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["/bin/echo", "$WORDS"], ["/bin/echo", "a", "b"]),
        (["/bin/echo", "${WORDS}"], ["/bin/echo", "a  b"]),
        (["/bin/echo", "x${ONE}y", "$NONE", "${NONE}"], ["/bin/echo", "x1y", ""]),
        # Left for a shell's -c: $NAME inside a word; "$$" is a dollar sign.
        (["/bin/sh", "-c", 'ls "$ONE" $$'], ["/bin/sh", "-c", 'ls "$ONE" $']),
    ],
)
def test_expand_variables(argv: list[str], expected: list[str]) -> None:
    assert expand_variables(argv, {"WORDS": "a  b", "ONE": "1"}) == expected


def test_read_environment_file() -> None:
    text = '# comment\n; comment\n\nA=1\nB = \'two words\'\nC="say \\"hi\\""\nD=\n'
    assert read_environment_file(text) == {"A": "1", "B": "two words", "C": 'say "hi"', "D": ""}
    with pytest.raises(UnitError, match="line 2: 'oops' is not NAME=VALUE"):
        read_environment_file("A=1\noops\n")


@pytest.mark.parametrize(
    ("ids", "refused"),
    [
        ((65534, 65534, 0, 0), False),  # root becomes anyone
        ((1000, 1000, 1000, 1000), False),  # already User= and Group=
        ((65534, 65534, 1000, 1000), True),
        ((1000, 0, 1000, 1000), True),  # another group needs root too
    ],
)
def test_who_may_run_a_unit(ids: tuple[int, int, int, int], refused: bool) -> None:
    unit = ServiceUnit(exec_start=ExecCommand(("/x",)), user="someone")
    problem = privilege_problem(unit, *ids)
    assert (problem is not None) == refused
    if problem:
        assert problem.startswith("must run as root: User=someone")


def test_summary_names_what_is_not_applied() -> None:
    line = summary(parse_unit(SHIPPED_UNIT.read_text()), ["/v/bin/skb", "serve"])
    applied, stopper, not_applied = line.split("; ")
    assert "User=slurm-k8s-bridge" in applied
    assert "UMask=0027" in applied
    assert applied.endswith("ExecStart=/v/bin/skb serve")
    assert stopper == "left to whoever stops it: KillSignal=SIGTERM TimeoutStopSec=30"
    assert not_applied.startswith("NOT applied: Restart RestartSec ProtectSystem ")
    assert {"PrivateTmp", "SystemCallFilter", "RestrictAddressFamilies"} <= set(not_applied.split())


# The real thing: as root, a unit whose service reports what it got. The child runs as nobody,
# which cannot read pytest's tmp_path (0700), so the service reads nothing from it.

needs_root = pytest.mark.skipif(
    os.geteuid() != 0, reason="switching to User=nobody and dropping capabilities need root"
)


@pytest.fixture
def runtime_directory() -> Iterator[Path]:
    RUNTIME.mkdir(exist_ok=True)
    (RUNTIME / "stale").write_text("from an earlier start\n")
    yield RUNTIME
    if RUNTIME.exists():
        shutil.rmtree(RUNTIME)


def _run(tmp_path: Path, unit_text: str, *args: str) -> subprocess.CompletedProcess[str]:
    unit = tmp_path / "test.service"
    unit.write_text(unit_text)
    return subprocess.run(
        [sys.executable, "-m", "proving_ground.unit_runner", "--unit", str(unit), *args],
        env={**os.environ, "PYTHONPATH": str(ROOT / "dev")},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@needs_root
def test_a_service_runs_as_the_unit_says(tmp_path: Path, runtime_directory: Path) -> None:
    result = _run(
        tmp_path,
        _service(
            "User=nobody",
            "Group=nogroup",
            "RuntimeDirectory=skb-unit-runner-test",
            "RuntimeDirectoryMode=0750",
            "UMask=0027",
            "NoNewPrivileges=yes",
            "CapabilityBoundingSet=",
            "ProtectSystem=strict",
            'ExecStart=/bin/sh -c \'id -u; umask; grep -E "NoNewPrivs|CapBnd" /proc/self/status;'
            ' ls -ld "$RUNTIME_DIRECTORY"\'',
        ),
    )
    assert result.returncode == 0, result.stderr
    uid, umask, *status, listing = result.stdout.splitlines()
    assert (uid, umask) == ("65534", "0027")
    assert sorted(re.sub(r"\s+", " ", line) for line in status) == [
        "CapBnd: 0000000000000000",
        "NoNewPrivs: 1",
    ]
    assert re.fullmatch(r"drwxr-x--- \d+ nobody nogroup .* /run/skb-unit-runner-test", listing)
    stat = runtime_directory.stat()
    assert (stat.st_uid, stat.st_gid, stat.st_mode & 0o7777) == (65534, 65534, 0o750)
    assert list(runtime_directory.iterdir()) == []  # fresh at each start
    [log_line] = result.stderr.splitlines()
    assert log_line.startswith("unit_runner: test.service: applied: User=nobody Group=nogroup ")
    assert log_line.endswith("NOT applied: ProtectSystem")


@needs_root
def test_the_callers_paths_and_environment_win(tmp_path: Path) -> None:
    result = _run(
        tmp_path,
        _service(
            "User=nobody",
            "Environment=GREETING=unit WHERE=unit",
            "ExecStart=/opt/skb-nowhere/bin/env",
        ),
        "--replace",
        "/opt/skb-nowhere=/usr",
        "--setenv",
        "GREETING=caller",
    )
    assert result.returncode == 0, result.stderr
    env = dict(line.split("=", 1) for line in result.stdout.splitlines())
    # Nothing of the runner's own environment (PYTHONPATH) reaches the service.
    assert env == {
        "PATH": DEFAULT_PATH,
        "USER": "nobody",
        "LOGNAME": "nobody",
        "HOME": "/nonexistent",
        "SHELL": "/usr/sbin/nologin",
        "GREETING": "caller",
        "WHERE": "unit",
    }


@needs_root
@pytest.mark.parametrize(
    ("pre", "returncode", "stdout", "stderr"),
    [
        ("ExecStartPre=/bin/false", 1, "", "ExecStartPre=/bin/false: exit status 1"),
        ("ExecStartPre=-/bin/false", 0, "started\n", "(ignored: '-')"),
        ("ExecStartPre=-/nonexistent/program", 0, "started\n", "(ignored: '-')"),
        ("ExecStartPre=/nonexistent/program", 1, "", "/nonexistent/program: no such program"),
        ("ExecStartPre=/bin/sh -c 'test $(id -u) = 65534'", 0, "started\n", "applied: "),
    ],
)
def test_exec_start_pre(
    pre: str, returncode: int, stdout: str, stderr: str, tmp_path: Path
) -> None:
    result = _run(tmp_path, _service("User=nobody", pre, "ExecStart=/bin/echo started"))
    assert (result.returncode, result.stdout) == (returncode, stdout), result.stderr
    assert stderr in result.stderr
