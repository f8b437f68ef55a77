"""The command line: hostnames, --help of every subcommand, the status table, check-config."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from bridge.cli import build_parser, format_status, main
from bridge.domain.results import NodeStatus

SUBCOMMANDS = [
    "serve",
    "resume",
    "suspend",
    "resume-fail",
    "status",
    "render-slurm-conf",
    "check-config",
    "hostnames",
]


@pytest.mark.parametrize(
    ("hostlist", "names"),
    [
        ("cpu-[0-2]", ["cpu-0", "cpu-1", "cpu-2"]),
        ("gpu-[08-10],login", ["gpu-08", "gpu-09", "gpu-10", "login"]),
        ("a[1-2]-[3-4]", ["a1-3", "a1-4", "a2-3", "a2-4"]),
        ("", []),
    ],
)
def test_hostnames_prints_one_name_per_line(
    hostlist: str, names: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["hostnames", hostlist]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines() == names
    assert err == ""


@pytest.mark.parametrize(
    ("hostlist", "bad_part"),
    [
        ("cpu-[3-1]", "'3-1'"),
        ("cpu-[1,x]", "'x'"),
        ("cpu-[0-99999999]", "'0-99999999'"),
    ],
)
def test_hostnames_rejects_a_bad_hostlist_naming_the_bad_part(
    hostlist: str, bad_part: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["hostnames", hostlist]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("slurm-k8s-bridge hostnames: ")
    assert bad_part in err
    assert err.count("\n") == 1  # one line, no traceback


def test_the_parser_has_exactly_the_documented_subcommands() -> None:
    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    assert sorted(sub.choices) == sorted(SUBCOMMANDS)


@pytest.mark.parametrize("argv", [["--help"], *([c, "--help"] for c in SUBCOMMANDS)])
def test_help_works(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    expected = "usage: slurm-k8s-bridge" + ("" if argv[0] == "--help" else f" {argv[0]}")
    assert out.startswith(expected)


def test_no_subcommand_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main([])
    assert exit_info.value.code == 2
    assert "COMMAND" in capsys.readouterr().err


def test_format_status_table_shape() -> None:
    long_ago = datetime.now(UTC) - timedelta(hours=3, minutes=1)
    rows = [
        NodeStatus("cpu-0", "cpu", "alloc", "Running", "10.1.0.5", "", long_ago),
        NodeStatus("cpu-10", "cpu", "down#", "", "", "k8s: NoCapacity: full", None),
        NodeStatus("gpu-1", "gpu", "", "Terminating", "", "", None),
    ]
    lines = format_status(rows).splitlines()
    assert lines[0].split() == ["NODE", "POOL", "SLURM", "POD", "POD", "IP", "AGE", "REASON"]
    assert len(lines) == 1 + len(rows)
    assert lines[1].split() == ["cpu-0", "cpu", "alloc", "Running", "10.1.0.5", "3h"]
    assert lines[2].split() == [
        "cpu-10",
        "cpu",
        "down#",
        "-",
        "-",
        "-",
        "k8s:",
        "NoCapacity:",
        "full",
    ]
    assert lines[3].split() == ["gpu-1", "gpu", "-", "Terminating", "-", "-"]
    # Columns line up: each header word starts where its cells start.
    for header in ("POOL", "SLURM", "POD IP", "AGE"):
        column = lines[0].index(header)
        for line in lines[1:]:
            assert line[column - 2 : column] == "  "
            assert line[column] != " "
    assert lines[2][lines[0].index("REASON") :] == "k8s: NoCapacity: full"
    # An empty REASON leaves no trailing blanks.
    assert all(line == line.rstrip() for line in lines)


def test_format_status_with_no_rows_is_the_header() -> None:
    assert format_status([]) == "NODE  POOL  SLURM  POD  POD IP  AGE  REASON"


CONFIG = """\
slurm:
  conf_server: 10.213.0.1:6817
pools:
  - name: cpu
    nodes: cpu-[0-3]
    cpus: 2
    real_memory_mb: 1024
    image: localhost/slurmd:dev
"""


def test_check_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bridge.yaml"
    path.write_text(CONFIG)
    assert main(["check-config", "-c", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{path}: OK\n")
    assert "pool cpu: cpu-[0-3] (4 nodes)" in out


def test_check_config_names_the_bad_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bridge.yaml"
    path.write_text(CONFIG.replace("cpus: 2", "cpus: two"))
    assert main(["check-config", "-c", str(path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("slurm-k8s-bridge check-config: ")
    assert f"{path}:6" in err
    assert "pools[0].cpus" in err


def test_check_config_of_a_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check-config", "-c", str(tmp_path / "nope.yaml")]) == 1
    assert "nope.yaml" in capsys.readouterr().err
