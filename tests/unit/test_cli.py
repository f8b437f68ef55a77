"""The command line: hostnames, --help of every subcommand, the status table, check-config."""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tomllib
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

import bridge
from bridge.api import build_server
from bridge.cli.main import build_parser, main
from bridge.cli.status_report import format_status
from bridge.domain.results import NodeStatus
from tests.unit.fakes import MINIMAL_CONFIG
from tests.unit.test_api import FakeUseCases

SUBCOMMANDS = [
    "serve",
    "doctor",
    "resume",
    "suspend",
    "resume-fail",
    "status",
    "render-slurm-conf",
    "check-config",
    "hostnames",
    "install-service",
    "pool",
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


def test_check_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bridge.yaml"
    path.write_text(MINIMAL_CONFIG)
    assert main(["check-config", "-c", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{path}: OK\n")
    assert "pool cpu: cpu-[0-3] (4 nodes)" in out


def test_check_config_names_the_bad_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bridge.yaml"
    path.write_text(MINIMAL_CONFIG.replace("cpus: 2", "cpus: two"))
    assert main(["check-config", "-c", str(path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("slurm-k8s-bridge check-config: ")
    assert f"{path}:7" in err  # cpus: line 7 of MINIMAL_CONFIG (line 1 is cluster_name)
    assert "pools[0].cpus" in err


def test_check_config_of_a_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check-config", "-c", str(tmp_path / "nope.yaml")]) == 1
    assert "nope.yaml" in capsys.readouterr().err


# --- render-slurm-conf -----------------------------------------------------------------------

SHOW_CONFIG = """\
Configuration data as of 2026-12-03T08:30:42
GresTypes               = (null)
PrivateData             = jobs,usage
ResumeProgram           = (null)
SlurmctldParameters     = {params}
SLURM_VERSION           = {version}
TreeWidth               = 50
"""


#: The site's SlurmctldParameters with every entry the bridge needs (24.11).
SITE_PARAMS = "enable_configless,max_dbd_msg_action=discard,idle_on_node_suspend"


def fake_slurm(
    tmp_path: Path, version: str = "24.11.5", fail: bool = False, params: str = SITE_PARAMS
) -> Path:
    """A config whose slurm.bin_dir holds a fake scontrol answering `show config`/`--version`."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (tmp_path / "show-config").write_text(SHOW_CONFIG.format(version=version, params=params))
    scontrol = bin_dir / "scontrol"
    body = (
        "echo 'slurm_load_ctl_conf error: Unable to contact slurm controller' >&2; exit 1\n"
        if fail
        else f'[ "$1" = --version ] && {{ echo "slurm {version}"; exit 0; }}\n'
        f"cat {tmp_path / 'show-config'}\n"
    )
    scontrol.write_text("#!/bin/sh\n" + body)
    scontrol.chmod(0o755)
    site = tmp_path / "slurm.conf"
    site.write_text(SITE_CONF)
    path = tmp_path / "bridge.yaml"
    path.write_text(
        MINIMAL_CONFIG.replace("slurm:\n", f"slurm:\n  bin_dir: {bin_dir}\n  conf: {site}\n")
    )
    return path


#: The site's slurm.conf next to the fake scontrol: a static node and partition of its own, and
#: the bridge's fragment Included (rendered before: its names are the bridge's, no clash).
SITE_CONF = """\
ClusterName=site
NodeName=DEFAULT CPUs=2
NodeName=n[01-02] \\
    RealMemory=1000  # static
PartitionName=site Nodes=n[01-02] Default=YES
Include k8s-bridge.conf
"""


def hooks_dir(tmp_path: Path, mode: int = 0o755, missing: str = "") -> Path:
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    for name in ("resume", "suspend", "resume_fail"):
        if name != missing:
            (hooks / name).write_text("#!/bin/sh\n")
            (hooks / name).chmod(mode)
    return hooks


def globals_of(text: str) -> dict[str, str]:
    from bridge.domain.slurm_conf import rendered_globals  # noqa: PLC0415

    return rendered_globals(text)


@pytest.mark.parametrize(
    ("params", "warning"),
    [
        (SITE_PARAMS, ""),
        (
            "enable_configless,max_dbd_msg_action=discard",
            "slurm-k8s-bridge render-slurm-conf: warning: SlurmctldParameters: lacks "
            "idle_on_node_suspend (running: enable_configless,max_dbd_msg_action=discard); add "
            "them to the site's own SlurmctldParameters line, then `scontrol reconfigure`\n",
        ),
    ],
    ids=["the-site-has-them", "one-lacking"],
)
def test_render_leaves_the_list_globals_to_the_site(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], params: str, warning: str
) -> None:
    """Issue 30 item 3: the fragment writes no SlurmctldParameters (an Included copy would undo
    the site's later edits); it names the entries, and warns about those the running lacks."""
    config = fake_slurm(tmp_path, params=params)
    hooks = hooks_dir(tmp_path)
    assert main(["render-slurm-conf", "-c", str(config), "--hooks-dir", str(hooks)]) == 0
    out, err = capsys.readouterr()
    assert globals_of(out) == {
        "ResumeProgram": f"{hooks}/resume",
        "SuspendProgram": f"{hooks}/suspend",
        "ResumeFailProgram": f"{hooks}/resume_fail",
    }
    assert "#   SlurmctldParameters: enable_configless,idle_on_node_suspend\n" in out
    assert "for Slurm 24.11" in out
    assert err == warning


def test_render_for_22_05_warns_about_private_data(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = fake_slurm(tmp_path, version="22.05.8")
    hooks = hooks_dir(tmp_path)
    argv = ["render-slurm-conf", "-c", str(config), "--hooks-dir", str(hooks)]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    assert "#   SlurmctldParameters: cloud_reg_addrs,enable_configless,idle_on_node_suspend" in out
    assert "SlurmctldParameters: lacks cloud_reg_addrs" in err
    assert "--private-data-cloud" in err
    assert main([*argv, "--private-data-cloud"]) == 0
    out, err = capsys.readouterr()
    assert "PrivateData" not in globals_of(out)  # the site's line, with its privacy, is kept
    assert "#   PrivateData: cloud\n" in out
    assert "PrivateData: lacks cloud (running: jobs,usage)" in err
    assert "--private-data-cloud" not in err


def test_render_without_a_running_slurmctld_needs_the_parameters(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = fake_slurm(tmp_path, fail=True)
    hooks = hooks_dir(tmp_path)
    argv = ["render-slurm-conf", "-c", str(config), "--hooks-dir", str(hooks)]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "Unable to contact slurm controller" in err and "--slurm-version" in err
    assert main([*argv, "--slurm-version", "26.05"]) == 0
    out, err = capsys.readouterr()
    assert "SlurmctldParameters" not in globals_of(out)
    assert err == (
        "slurm-k8s-bridge render-slurm-conf: note: the site's own SlurmctldParameters line must "
        "hold enable_configless,idle_on_node_suspend (this render does not set it)\n"
    )
    # A slurm.conf generated whole (the in-cluster image) asks for the lines themselves.
    whole = ["--write-list-globals", "--slurmctld-parameters", "power_save_interval=5"]
    assert main([*argv, "--slurm-version", "26.05", *whole]) == 0
    out, err = capsys.readouterr()
    assert globals_of(out)["SlurmctldParameters"] == (
        "power_save_interval=5,enable_configless,idle_on_node_suspend"
    )
    assert err == ""


@pytest.mark.parametrize(
    ("mode", "missing", "problem"),
    [
        (0o755, "suspend", "suspend does not exist"),
        (0o644, "", "resume is not executable"),
        (0o775, "", "resume is group- or world-writable (slurmctld refuses it)"),
    ],
)
def test_render_refuses_programs_slurmctld_cannot_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], mode: int, missing: str, problem: str
) -> None:
    config = fake_slurm(tmp_path)
    hooks = hooks_dir(tmp_path, mode=mode, missing=missing)
    assert main(["render-slurm-conf", "-c", str(config), "--hooks-dir", str(hooks)]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert f"{hooks}/{problem}" in err


def test_render_defaults_to_this_checkouts_hooks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = fake_slurm(tmp_path)
    assert main(["render-slurm-conf", "-c", str(config)]) == 0
    plugins = Path(__file__).resolve().parents[2] / "slurm_plugins"
    found = globals_of(capsys.readouterr().out)
    assert found["ResumeProgram"] == f"{plugins}/resume"
    assert found["ResumeFailProgram"] == f"{plugins}/resume_fail"


@pytest.mark.parametrize(
    ("files", "clashes"),
    [
        pytest.param({}, [], id="the-site-s-own-names-only"),
        pytest.param(
            {"slurm.conf": SITE_CONF + "PartitionName=cpu Nodes=n01\n"},
            ["pool cpu: partition cpu is already defined in {dir}/slurm.conf"],
            id="a-site-partition-named-like-the-pool",
        ),
        pytest.param(
            {"slurm.conf": SITE_CONF + "NodeName=cpu-[2-3],x CPUs=1\n"},
            [
                "pool cpu: node cpu-2 is already defined in {dir}/slurm.conf",
                "pool cpu: node cpu-3 is already defined in {dir}/slurm.conf",
            ],
            id="site-nodes-named-like-pool-nodes",
        ),
        pytest.param(
            {
                "slurm.conf": SITE_CONF + "Include nodes.d/*.conf\n",
                "nodes.d/a.conf": ("NodeName=cpu-1 CPUs=1\n"),
            },
            ["pool cpu: node cpu-1 is already defined in {dir}/nodes.d/a.conf"],
            id="in-an-included-file",
        ),
        pytest.param(
            {
                "k8s-bridge.conf": "# Generated by slurm-k8s-bridge from bridge.yaml\n"
                "NodeName=cpu-[0-3] State=CLOUD\nPartitionName=cpu Nodes=cpu-[0-3]\n"
            },
            [],
            id="the-bridge-s-own-fragment-is-not-a-clash",
        ),
        pytest.param(
            {"slurm.conf": SITE_CONF.replace("Include", "#Include") + "#PartitionName=cpu\n"},
            [],
            id="comments-define-nothing",
        ),
    ],
)
@pytest.mark.parametrize("check", [False, True], ids=["render", "check"])
def test_render_refuses_pools_that_reuse_the_site_s_names(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    files: dict[str, str],
    clashes: list[str],
    check: bool,
) -> None:
    config = fake_slurm(tmp_path)
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    argv = ["render-slurm-conf", "-c", str(config), "--hooks-dir", str(hooks_dir(tmp_path))]
    code = main([*argv, *(["--check", "--allow-change", ALL_GLOBALS] if check else [])])
    out, err = capsys.readouterr()
    expected = [c.format(dir=tmp_path) for c in clashes]
    named = [
        line.strip().split(" (slurmctld")[0]
        for line in err.splitlines()
        if line.startswith("  pool ")
    ]
    assert named == expected, err
    assert code == (1 if clashes else 0), err
    if clashes:
        assert out == ""
        assert "sbatch -p site,k8s" in err


ALL_GLOBALS = "ResumeProgram,SuspendProgram,ResumeFailProgram"

IPMI = "/opt/ipmi/power-on"


@pytest.mark.parametrize(
    ("site_lines", "hooks_env", "refused"),
    [
        pytest.param(
            f"ResumeProgram={IPMI}\n", "", [f"SKB_SITE_RESUME_PROGRAM={IPMI}"], id="taken"
        ),
        pytest.param(
            f"ResumeProgram={IPMI}\nSuspendProgram=/opt/ipmi/off\n",
            f"SKB_SITE_RESUME_PROGRAM={IPMI}\n",
            ["SKB_SITE_SUSPEND_PROGRAM=/opt/ipmi/off"],
            id="one-handed-off-one-not",
        ),
        pytest.param(
            f"ResumeProgram={IPMI}\nSuspendProgram=/opt/ipmi/off\n",
            f"SKB_SITE_RESUME_PROGRAM='{IPMI}'\nSKB_SITE_SUSPEND_PROGRAM=/opt/ipmi/off\n",
            [],
            id="handed-off",
        ),
        pytest.param(
            "resumeprogram=/opt/old-bridge/resume\n", "", [], id="an-earlier-install-of-ours"
        ),
        pytest.param(
            f"#ResumeProgram={IPMI}\nResumeProgram={IPMI}  # the last line wins\n"
            "ResumeProgram=/opt/old-bridge/resume\n",
            "",
            [],
            id="overridden-before-the-include",
        ),
    ],
)
def test_render_refuses_to_take_the_site_s_power_saving_without_a_hand_off(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    site_lines: str,
    hooks_env: str,
    refused: list[str],
) -> None:
    """Issue 30 item 2: the programs are global; a site powering its own nodes (IPMI) would
    lose that, its nodes sitting POWERING_UP until ResumeTimeout. The render refuses unless
    hooks.env hands the nodes no pool owns to the site's programs."""
    config = fake_slurm(tmp_path)
    (tmp_path / "opt" / "old-bridge").mkdir(parents=True)
    (tmp_path / "slurm.conf").write_text(
        SITE_CONF.replace("/opt/old-bridge", str(tmp_path / "opt" / "old-bridge"))
        + site_lines.replace("/opt/old-bridge", str(tmp_path / "opt" / "old-bridge"))
    )
    (tmp_path / "opt" / "old-bridge" / "resume").write_text(
        '#!/bin/sh\nskb_kind=resume\n. "$skb_dir/hook.sh"\n'
    )
    hooks = hooks_dir(tmp_path)
    if hooks_env:
        (hooks / "hooks.env").write_text(hooks_env)
    argv = ["render-slurm-conf", "-c", str(config), "--hooks-dir", str(hooks)]
    code = main(argv)
    out, err = capsys.readouterr()
    if refused:
        assert code == 1
        assert out == ""
        named = [line.strip() for line in err.splitlines() if line.startswith("  SKB_SITE_")]
        assert named == refused, err
        assert f"to {hooks}/hooks.env" in err
    else:
        assert code == 0, err
        assert globals_of(out)["ResumeProgram"] == f"{hooks}/resume"


@pytest.mark.parametrize(
    ("breaks", "written"),
    [
        pytest.param("", True, id="written-and-mode-kept"),
        pytest.param("hooks", False, id="a-render-that-fails-leaves-the-old-file"),
        pytest.param("clash", False, id="a-clash-leaves-the-old-file"),
    ],
)
def test_output_replaces_the_file_whole_or_not_at_all(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], breaks: str, written: bool
) -> None:
    config = fake_slurm(tmp_path)
    hooks = hooks_dir(tmp_path, missing="suspend" if breaks == "hooks" else "")
    if breaks == "clash":
        (tmp_path / "slurm.conf").write_text(SITE_CONF + "PartitionName=cpu Nodes=n01\n")
    output = tmp_path / "k8s-bridge.conf"
    old = b"# Generated by slurm-k8s-bridge before\nNodeName=cpu-[0-3] State=CLOUD\n"
    output.write_bytes(old)
    output.chmod(0o640)
    argv = ["render-slurm-conf", "-c", str(config), "--hooks-dir", str(hooks), "-o", str(output)]
    assert main(argv) == (0 if written else 1)
    out, _ = capsys.readouterr()
    assert out == ""  # the lines went to the file, not stdout
    if written:
        assert globals_of(output.read_text())["ResumeProgram"] == f"{hooks}/resume"
    else:
        assert output.read_bytes() == old
    assert output.stat().st_mode & 0o777 == 0o640
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".k8s")) == []


def test_check_names_every_global_it_would_change(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = fake_slurm(tmp_path)
    hooks = hooks_dir(tmp_path)
    argv = ["render-slurm-conf", "-c", str(config), "--hooks-dir", str(hooks), "--check"]
    assert main([*argv, "--tree-width", "50"]) == 3
    out = capsys.readouterr().out.splitlines()
    assert out == [
        f"ResumeProgram: (not set) -> {hooks}/resume  [not listed in --allow-change]",
        f"SuspendProgram: (not set) -> {hooks}/suspend  [not listed in --allow-change]",
        f"ResumeFailProgram: (not set) -> {hooks}/resume_fail  [not listed in --allow-change]",
        "render-slurm-conf --check: 3 global(s) would change; not listed: ResumeProgram, "
        "SuspendProgram, ResumeFailProgram",
    ]  # TreeWidth=50 is what runs already: not a change
    allow = [
        "--allow-change",
        "ResumeProgram,SuspendProgram",
        "--allow-change",
        "resumefailprogram",
    ]
    assert main([*argv, *allow]) == 0
    assert "[not listed" not in capsys.readouterr().out


def test_check_names_the_entries_the_site_s_lists_lack(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 30 item 3: the site's own line must hold the bridge's entries; --check says which
    it lacks and where they go, and exits 4 (even when every change is allowed)."""
    config = fake_slurm(tmp_path, params="max_dbd_msg_action=discard")
    hooks = hooks_dir(tmp_path)
    argv = ["render-slurm-conf", "-c", str(config), "--hooks-dir", str(hooks), "--check"]
    assert main([*argv, "--allow-change", ALL_GLOBALS]) == 4
    out = capsys.readouterr().out.splitlines()
    assert out[0] == (
        "SlurmctldParameters: lacks enable_configless,idle_on_node_suspend (running: "
        "max_dbd_msg_action=discard); add them to the site's own SlurmctldParameters line"
    )
    assert out[-1] == (
        "render-slurm-conf --check: 1 list global(s) lack the bridge's entries; add them to "
        "the site's own lines, then `scontrol reconfigure`"
    )


@pytest.mark.parametrize(
    ("flags", "use_case", "printed"),
    [
        ([], "accept_resume", ["c1: accepted", "c2: accepted"]),
        (["--wait"], "resume", ["c1: ok", "c2: ok"]),
    ],
    ids=["default-does-not-wait", "wait"],
)
def test_resume_waits_only_with_wait(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    flags: list[str],
    use_case: str,
    printed: list[str],
) -> None:
    fake = FakeUseCases()
    sock = tmp_path / "b.sock"
    server = build_server(fake, unix_socket=str(sock), socket_mode=0o600, max_workers=2)
    server.start()
    try:
        assert main(["resume", "c1,c2", "--socket", f"unix:{sock}", *flags]) == 0
    finally:
        server.stop(None)
    assert [name for name, _ in fake.calls] == [use_case]
    assert capsys.readouterr().out.splitlines() == printed


def _pyproject_version() -> str:
    with (Path(__file__).resolve().parents[2] / "pyproject.toml").open("rb") as f:
        version: str = tomllib.load(f)["project"]["version"]
    return version


@pytest.mark.parametrize(
    "argv",
    [["--version"], ["--version", "hostnames", "c1"], ["--version", "status"]],
    ids=["alone", "before-a-command", "before-a-command-missing-its-options"],
)
def test_version_prints_the_package_version_and_exits_0(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 0
    assert capsys.readouterr() == (f"slurm-k8s-bridge {_pyproject_version()}\n", "")


def test_the_sources_version_is_pyprojects() -> None:
    """The fallback of --version (and serve's first log line) without package metadata."""
    assert bridge.__version__ == _pyproject_version()


def test_version_in_a_source_tree_without_package_metadata(tmp_path: Path) -> None:
    """Only bridge/ on the path (no dist-info or egg-info beside it), no site-packages."""
    shutil.copytree(
        Path(__file__).resolve().parents[2] / "bridge",
        tmp_path / "bridge",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    script = (
        "import sys\n"
        "from importlib import metadata\n"
        "try:\n"
        "    metadata.version('slurm-k8s-bridge')\n"
        "except metadata.PackageNotFoundError:\n"
        "    pass\n"
        "else:\n"
        "    sys.exit('package metadata found')\n"
        "from bridge.cli.main import main\n"
        "sys.exit(main(['--version']))\n"
    )
    done = subprocess.run(
        [sys.executable, "-S", "-c", script],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (done.returncode, done.stdout, done.stderr) == (
        0,
        f"slurm-k8s-bridge {_pyproject_version()}\n",
        "",
    )
