"""The Slurm hooks as slurmctld runs them: real executables, a bare environment with no PATH."""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bridge import hooks
from bridge.api import BridgeServer, build_server
from bridge.domain import resume_file
from bridge.rpc.client import NODE_EVENT_KINDS
from tests.unit.as_slurmctld import run_as_slurmctld
from tests.unit.test_api import FakeUseCases

REPO = Path(__file__).resolve().parents[2]
PLUGINS = REPO / "slurm_plugins"
HOOK_NAMES = ("resume", "suspend", "resume_fail", "node_event")


class Site:
    """A hook directory as an admin would set it up, plus a fake Slurm bin directory."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.hooks = root / "hooks"
        self.bin = root / "bin"
        self.sock = root / "b.sock"
        self.log = root / "hooks.log"
        self.scontrol_argv = root / "scontrol.argv"
        self.hooks.mkdir()
        self.bin.mkdir()
        for name in HOOK_NAMES:  # symlinks, so the hooks find the repo through them
            (self.hooks / name).symlink_to(PLUGINS / name)
        scontrol = self.bin / "scontrol"
        # Builtins only: the hook's environment has no PATH, and neither has this.
        scontrol.write_text(
            f'#!/bin/sh\nfor a in "$@"; do printf "%s\\n" "$a"; done > {self.scontrol_argv}\n'
        )
        scontrol.chmod(0o755)
        self.write_env()

    def write_env(self, **extra: str) -> None:
        lines = {
            # This interpreter, wherever its venv lives (hook.sh would look in <repo>/.venv).
            "SKB_PYTHON": sys.executable,
            # The Python client; test_hook_client.py runs the Go one (slurm_plugins/bin/skb-hook)
            # side by side with it.
            "SKB_HOOK_CLIENT": "python",
            "SKB_SOCKET": f"unix:{self.sock}",
            "SKB_SLURM_BIN": str(self.bin),
            "SKB_HOOK_LOG": f'"{self.log}"',  # quoted on purpose: the parser strips one pair
            "SKB_TIMEOUT_S": "2",
            **extra,
        }
        text = "# written by test_hooks\n" + "".join(f"{k}={v}\n" for k, v in lines.items())
        (self.hooks / "hooks.env").write_text(text + "IGNORED=1\necho not executed\n")

    def run(
        self, name: str, *args: str, resume_file: str | None = None, stderr_closed: bool = False
    ) -> subprocess.CompletedProcess[str]:
        """Run a hook the way slurmctld does: argv = hostlist, only PWD/SHLVL/SLURM_CONF set."""
        env = {"PWD": str(self.root), "SHLVL": "1", "SLURM_CONF": "/etc/slurm/slurm.conf"}
        if resume_file is not None:
            env["SLURM_RESUME_FILE"] = resume_file
        return run_as_slurmctld(
            [str(self.hooks / name), *args], env, self.root, stderr_closed=stderr_closed
        )

    def scontrol_calls(self) -> list[str]:
        if not self.scontrol_argv.exists():
            return []
        return self.scontrol_argv.read_text().splitlines()

    def log_lines(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []


@pytest.fixture
def site(tmp_path: Path) -> Site:
    return Site(tmp_path)


@pytest.fixture
def fake() -> FakeUseCases:
    return FakeUseCases()


@pytest.fixture
def server(site: Site, fake: FakeUseCases) -> Iterator[BridgeServer]:
    srv = build_server(fake, unix_socket=str(site.sock), socket_mode=0o600)
    srv.start()
    yield srv
    srv.stop(None)


RESUME_24_11 = (
    '{"jobs":[{"job_id":2,"nodes_alloc":"c[1-2]","nodes_resume":"c[1-2]","partition":"k8s"}],'
    '"all_nodes_resume":"c[1-2]"}'
)


# --- against a running bridge -------------------------------------------------------------


@pytest.mark.usefixtures("server")
def test_resume_sends_hostlist_and_resume_file_contents(site: Site, fake: FakeUseCases) -> None:
    # Slurm passes /proc/<slurmctld pid>/fd/N; an fd of this process behind an unlinked file
    # is the closest stand-in.
    path = site.root / "resume.json"
    path.write_text(RESUME_24_11)
    fd = os.open(path, os.O_RDONLY)
    path.unlink()
    try:
        done = site.run("resume", "c[1-2]", resume_file=f"/proc/{os.getpid()}/fd/{fd}")
    finally:
        os.close(fd)
    assert done.returncode == 0, done.stderr
    assert len(fake.calls) == 1
    name, (hostlist, contents, request_id) = fake.calls[0]
    # The hook does not wait for the pods (the bridge's accept path answers at once).
    assert (name, hostlist, contents) == ("accept_resume", "c[1-2]", RESUME_24_11)
    assert request_id.startswith("resume-")
    [line] = site.log_lines()
    assert (
        f"request_id={request_id} hostlist=c[1-2] result=ok nodes=1 ok=0 accepted=1 not_ok=0"
        in line
    )
    assert line in done.stderr
    assert site.scontrol_calls() == []


def big_resume_file(size: int) -> str:
    """A job array's resume file of about ``size`` characters (one job per node)."""
    jobs, total, i = [], 0, 0
    while total < size:
        job = f'{{"job_id":{i + 1},"nodes_resume":"c{i % 100}","partition":"k8s"}}'
        jobs.append(job)
        total += len(job) + 1
        i += 1
    return '{"jobs":[' + ",".join(jobs) + '],"all_nodes_resume":"c[0-99]"}'


@pytest.mark.usefixtures("server")
@pytest.mark.parametrize(
    ("size", "sent"),
    [(6 * 1024 * 1024, True), (hooks.RESUME_FILE_MAX + 1024, False)],
    ids=["6MiB-sent-whole", "over-the-limit-hostlist-only"],
)
def test_big_resume_file_never_fails_the_batch(
    site: Site, fake: FakeUseCases, size: int, sent: bool
) -> None:
    contents = big_resume_file(size)
    path = site.root / "resume.json"
    path.write_text(contents)
    done = site.run("resume", "c[0-99]", resume_file=str(path))
    assert done.returncode == 0, done.stderr
    assert fake.calls[0][1][:2] == ("c[0-99]", contents if sent else "")
    assert site.scontrol_calls() == [], "no node may be set DOWN for a big resume file"
    if not sent:
        assert "not sent" in site.log_lines()[0]


def test_resume_file_limit_matches_the_bridges() -> None:
    assert hooks.RESUME_FILE_MAX == resume_file.MAX_SIZE


@pytest.mark.usefixtures("server")
@pytest.mark.parametrize(
    ("name", "args", "expected"),
    [
        ("suspend", ("c[1-3]",), ("suspend", "c[1-3]")),
        ("resume_fail", ("c4",), ("resume_failed", "c4")),
        ("node_event", ("down", "c5"), ("node_event", "c5", "down", "")),
        ("node_event", ("drain", "c[6-7]"), ("node_event", "c[6-7]", "drain", "")),
    ],
)
def test_other_hooks_forward_the_call(
    site: Site, fake: FakeUseCases, name: str, args: tuple[str, ...], expected: tuple[str, ...]
) -> None:
    done = site.run(name, *args)
    assert done.returncode == 0, done.stderr
    [(called, call_args)] = fake.calls
    assert (called, *call_args[:-1]) == expected  # the last argument is the request id
    assert call_args[-1].startswith(f"{name}-")


# --- hook.sh without a working Python ----------------------------------------------------------


def test_missing_python_still_marks_resume_down(site: Site) -> None:
    python = f'{site.root}/no "python" here'  # the log line quotes it as bridge.hooks would
    site.write_env(SKB_PYTHON=python)
    done = site.run("resume", "c1")
    assert done.returncode == 1
    assert site.scontrol_calls() == down_argv("c1", f"k8s: HookBroken: no Python at {python}")
    quoted = python.replace('"', '\\"')
    [line] = site.log_lines()
    assert line.endswith(
        f'] resume argv=["c1"] result=HookBroken error="no Python at {quoted}" '
        f'python="{quoted}" action=scontrol-state=down'
    ), line


def down_argv(hostlist: str, reason: str) -> list[str]:
    return ["update", f"nodename={hostlist}", "state=down", f"reason={reason}"]


# --- start-up time --------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.usefixtures("server")
def test_hook_wall_time(site: Site, fake: FakeUseCases) -> None:
    times = []
    for _ in range(20):
        start = time.monotonic()
        done = site.run("resume", "c1", resume_file="/dev/null")
        times.append(time.monotonic() - start)
        assert done.returncode == 0, done.stderr
    median = statistics.median(times)
    print(f"hook wall time, 20 runs: median {median * 1000:.0f} ms, max {max(times) * 1000:.0f} ms")
    assert len(fake.calls) == 20
    assert median < 1.5  # generous: the machine is shared; the report carries the real figure


# --- the pure parts -------------------------------------------------------------------------


def test_event_kinds_agree_with_the_client() -> None:
    assert hooks.EVENT_KINDS == NODE_EVENT_KINDS


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, hooks.HookSettings()),
        (
            {"SKB_SOCKET": "unix:/s", "SKB_SLURM_BIN": "/opt/slurm/bin", "SKB_HOOK_LOG": ""},
            hooks.HookSettings(target="unix:/s", slurm_bin="/opt/slurm/bin", log_path=""),
        ),
        ({"SKB_TIMEOUT_S": "0.5"}, hooks.HookSettings(timeout_s=0.5)),
        ({"SKB_TIMEOUT_S": " 3\t"}, hooks.HookSettings(timeout_s=3)),
        ({"SKB_TIMEOUT_S": ".5"}, hooks.HookSettings(timeout_s=0.5)),
        ({"SKB_TIMEOUT_S": "3600"}, hooks.HookSettings(timeout_s=3600)),
        *(
            ({"SKB_TIMEOUT_S": typo}, hooks.HookSettings())
            for typo in ("3601", "0", "-1", ".", "1.2.3", "1_0", "1e1", "inf", "soon", "0x10")
        ),
        ({"SKB_TLS_CERT": "c", "SKB_TLS_KEY": "k"}, hooks.HookSettings()),
        (
            {"SKB_TLS_CERT": "c", "SKB_TLS_KEY": "k", "SKB_TLS_CA": "a"},
            hooks.HookSettings(tls=("c", "k", "a")),
        ),
    ],
)
def test_settings_from_env(env: dict[str, str], expected: hooks.HookSettings) -> None:
    assert hooks.HookSettings.from_env(env) == expected


@pytest.mark.parametrize(
    ("value", "written"),
    [
        # The same as slurm_plugins/hookclient/hook_test.go's TestLogValue.
        ("", '""'),
        ("c[1-3],gpu-[01-02]", "c[1-3],gpu-[01-02]"),
        ("scontrol-state=down", "scontrol-state=down"),
        ("no SLURM_RESUME_FILE", '"no SLURM_RESUME_FILE"'),
        ("it's", '"it\'s"'),
        ('say "hi" \\ bye', '"say \\"hi\\" \\\\ bye"'),
        ("tab\tnl\ncr\r\b\f", '"tab\\tnl\\ncr\\r\\b\\f"'),
        ("\x00\x1f\x7f\x85\x9f\xa0", '"\\u0000\\u001f\\u007f\\u0085\\u009f\xa0"'),
        ("é 日本 \u2028\u2029 \U0001f600", '"é 日本 \\u2028\\u2029 \U0001f600"'),
        (os.fsdecode(b"bad\xffbyte\xe2\x82"), '"bad\\udcffbyte\\udce2\\udc82"'),
        ("\ufffd", '"\ufffd"'),
    ],
)
def test_log_value(value: str, written: str) -> None:
    assert hooks.log_value(value) == written


def test_log_list() -> None:
    assert hooks.log_list(["resume", "a b", 'x"y']) == '["resume","a b","x\\"y"]'
    assert hooks.log_list([]) == "[]"


# --- strigger-setup.sh, against a fake strigger -----------------------------------------------


def _run_setup(tmp_path: Path, existing: str, *args: str) -> list[list[str]]:
    """Run strigger-setup.sh with a fake strigger that lists ``existing`` and records calls."""
    bin_dir = tmp_path / "fakebin"
    bin_dir.mkdir(exist_ok=True)
    (tmp_path / "existing").write_text(existing)
    calls = tmp_path / "calls"
    calls.write_text("")
    fake = bin_dir / "strigger"
    fake.write_text(
        "#!/bin/sh\n"
        f'printf "%s\\n" "$*" >> {calls}\n'
        f'[ "$1" = --get ] && cat {tmp_path / "existing"}\n'
        "exit 0\n"
    )
    fake.chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin"}
    done = subprocess.run(
        [str(PLUGINS / "strigger-setup.sh"), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert done.stderr == ""
    return [line.split(" ") for line in calls.read_text().splitlines() if "--get" not in line]


def test_strigger_setup_registers_each_event_once(tmp_path: Path) -> None:
    program = PLUGINS / "node_event"
    calls = _run_setup(tmp_path, "", "--nodes", "k8s-[0-3]")
    assert [c[:4] for c in calls] == [
        ["--set", "--node=k8s-[0-3]", f"--{opt}", "--flags=PERM"]
        for opt in ("down", "drained", "fail", "up")
    ]
    assert [c[4:] for c in calls] == [
        [f"--program={program}", kind] for kind in ("down", "drain", "fail", "up")
    ]
    existing = "".join(
        f"{i} node * {opt} 0 slurm PERM {program} {kind}\n"
        for i, (opt, kind) in enumerate([("down", "down"), ("drained", "drain")], start=7)
    )
    calls = _run_setup(tmp_path, existing)
    assert [c[2] for c in calls] == ["--fail", "--up"]
    assert _run_setup(tmp_path, existing + "9 node * down 0 slurm PERM /other\n", "--clear") == [
        ["--clear", "--id=7"],
        ["--clear", "--id=8"],
    ]


def test_strigger_setup_registers_the_given_program(tmp_path: Path) -> None:
    hook = tmp_path / "bin" / "slurm-k8s-bridge-node-event"
    hook.parent.mkdir()
    hook.write_text("#!/bin/sh\n")
    hook.chmod(0o755)
    calls = _run_setup(tmp_path, "", "--program", str(hook))
    assert [c[4] for c in calls] == [f"--program={hook}"] * 4


def test_strigger_setup_outside_a_checkout_uses_the_entry_point_or_says_what_to_give(
    tmp_path: Path,
) -> None:
    """A copy of the script with no node_event beside it (as a package installs it) registers
    slurm-k8s-bridge-node-event from PATH, by absolute path; with none there it names --program."""
    script = tmp_path / "alone" / "strigger-setup.sh"
    script.parent.mkdir()
    script.write_bytes((PLUGINS / "strigger-setup.sh").read_bytes())
    script.chmod(0o755)
    fake_bin = tmp_path / "fakebin"
    fake_bin.mkdir()
    (fake_bin / "strigger").write_text("#!/bin/sh\nexit 0\n")
    (fake_bin / "strigger").chmod(0o755)
    env = {"PATH": f"{fake_bin}:/usr/bin:/bin"}
    missing = subprocess.run(
        [str(script), "--dry-run"], env=env, capture_output=True, text=True, timeout=30, check=False
    )
    assert missing.returncode == 1
    assert "give --program" in missing.stderr
    entry = fake_bin / "slurm-k8s-bridge-node-event"
    entry.write_text("#!/bin/sh\n")
    entry.chmod(0o755)
    found = subprocess.run(
        [str(script), "--dry-run"], env=env, capture_output=True, text=True, timeout=30, check=True
    )
    assert f"--program={entry} down" in found.stdout


# --- a too-old interpreter (a stub that reports 3.9) ------------------------------------------


def _stub_python(site: Site, version: str) -> Path:
    """A stand-in interpreter that answers every call with ``version``, as 3.9 would be asked."""
    stub = site.root / f"python{version}"
    stub.write_text(f"#!/bin/sh\necho {version}\nexit 0\n")
    stub.chmod(0o755)
    return stub


def test_too_old_python_marks_resume_down_and_logs(site: Site) -> None:
    stub = _stub_python(site, "3.9")
    site.write_env(SKB_PYTHON=str(stub))
    done = site.run("resume", "c[1-2]", resume_file="/dev/null")
    assert done.returncode == 1
    assert site.scontrol_calls() == [
        "update",
        "nodename=c[1-2]",
        "state=down",
        "reason=k8s: HookBroken: Python 3.9 is older than 3.11",
    ]
    [line] = site.log_lines()
    assert line.endswith(
        f'] resume argv=["c[1-2]"] result=HookBroken error="Python 3.9 is older than 3.11" '
        f"python={stub} action=scontrol-state=down"
    ), line
    assert line in done.stderr


@pytest.mark.parametrize(("name", "args"), [("suspend", ("c1",)), ("node_event", ("up", "c1"))])
def test_too_old_python_other_hooks_only_log(site: Site, name: str, args: tuple[str, ...]) -> None:
    site.write_env(SKB_PYTHON=str(_stub_python(site, "3.9")))
    done = site.run(name, *args)
    assert done.returncode == 1
    assert site.scontrol_calls() == []
    [line] = site.log_lines()
    assert "Python 3.9 is older than 3.11" in line and "action=none" in line


@pytest.mark.parametrize("version", ["3.11", "3.12", "4.0"])
def test_new_enough_python_passes_the_check(site: Site, version: str) -> None:
    # The stub passes the version check and is then exec'd with -P: it prints its version again
    # and exits 0; nothing is set DOWN and nothing is logged by the shell.
    site.write_env(SKB_PYTHON=str(_stub_python(site, version)))
    done = site.run("resume", "c1")
    assert done.returncode == 0
    assert site.scontrol_calls() == []
    assert site.log_lines() == []


def test_without_skb_python_the_checkouts_venv_is_used(tmp_path: Path) -> None:
    # A copy of the hooks in a checkout of their own, whose .venv holds a stub that says 3.9:
    # the refusal naming that stub shows hook.sh picked <repo>/.venv/bin/python.
    repo = tmp_path / "repo"
    shutil.copytree(PLUGINS, repo / "slurm_plugins")
    python = repo / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text("#!/bin/sh\necho 3.9\nexit 0\n")
    python.chmod(0o755)
    log = tmp_path / "hooks.log"
    hooks_env = f"SKB_HOOK_LOG={log}\nSKB_HOOK_CLIENT=python\n"  # not a built bin/skb-hook
    (repo / "slurm_plugins" / "hooks.env").write_text(hooks_env)
    done = run_as_slurmctld(
        [str(repo / "slurm_plugins" / "suspend"), "c1"],
        {"PWD": str(tmp_path), "SHLVL": "1"},
        tmp_path,
    )
    assert done.returncode == 1
    assert f"python={python}" in log.read_text()


# --- the installed entry points (slurm-k8s-bridge-resume, ...) --------------------------------


def _console_script(site: Site, function: str) -> Path:
    """What pip writes for a [project.scripts] entry: this Python's shebang, one call."""
    script = site.root / f"entry-{function}"
    script.write_text(
        f"#!{sys.executable}\n"
        "import sys\n"
        f"from bridge.hooks import {function}\n"
        f"sys.exit({function}())\n"
    )
    script.chmod(0o755)
    return script


def _run_entry(site: Site, script: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        "PWD": str(site.root),
        "SHLVL": "1",
        "SLURM_CONF": "/etc/slurm/slurm.conf",
        "SKB_HOOKS_ENV": str(site.hooks / "hooks.env"),
        "PYTHONPATH": str(REPO),  # where pip would have installed the package
    }
    return run_as_slurmctld([str(script), *args], env, site.root)


@pytest.mark.usefixtures("server")
@pytest.mark.parametrize(
    ("function", "args", "expected"),
    [
        ("resume_entry", ("c[1-2]",), ("accept_resume", "c[1-2]", "")),
        ("suspend_entry", ("c3",), ("suspend", "c3")),
        ("resume_fail_entry", ("c4",), ("resume_failed", "c4")),
        ("node_event_entry", ("drain", "c5"), ("node_event", "c5", "drain", "")),
    ],
)
def test_entry_points_forward_the_call(
    site: Site, fake: FakeUseCases, function: str, args: tuple[str, ...], expected: tuple[str, ...]
) -> None:
    done = _run_entry(site, _console_script(site, function), *args)
    assert done.returncode == 0, done.stderr
    [(called, call_args)] = fake.calls
    assert (called, *call_args[:-1]) == expected
    assert "result=ok" in site.log_lines()[0]


def test_entry_point_without_bridge_marks_resume_down(site: Site) -> None:
    done = _run_entry(site, _console_script(site, "resume_entry"), "c1")
    assert done.returncode == 1
    assert site.scontrol_calls()[:3] == ["update", "nodename=c1", "state=down"]
    assert site.scontrol_calls()[3].startswith("reason=k8s: BridgeUnreachable: ")


def test_read_hooks_env(tmp_path: Path) -> None:
    path = tmp_path / "hooks.env"
    path.write_text(
        "# comment\nSKB_SOCKET=\"unix:/s\"\nSKB_HOOK_LOG=''\nSKB_PYTHON=/x\nPATH=/evil\n"
        "SKB_TIMEOUT_S=3\n"
    )
    assert hooks.read_hooks_env(str(path)) == {
        "SKB_SOCKET": "unix:/s",
        "SKB_HOOK_LOG": "",
        "SKB_TIMEOUT_S": "3",
    }
    assert hooks.read_hooks_env(str(tmp_path / "absent")) == {}


def test_too_old_python_with_stderr_closed_still_logs_and_marks_down(site: Site) -> None:
    site.write_env(SKB_PYTHON=str(_stub_python(site, "3.9")))
    done = site.run("resume", "c1", stderr_closed=True)
    assert done.returncode == 1
    assert site.scontrol_calls()[3] == "reason=k8s: HookBroken: Python 3.9 is older than 3.11"
    [line] = site.log_lines()
    assert "action=scontrol-state=down" in line
