"""What the configured ResumeProgram really runs (issue 28 item 3.4): doctor used to check
/usr/bin/python3 for every hook, so it failed a correct RHEL 9 pip install (whose entry points'
shebang names the venv's Python) and passed a checkout whose hooks would run a Python without
the bridge.

Tables: the resolution from the files (pure), hooks.env as hook.sh reads it, the verdict; then
the resolution checked against the real ``slurm_plugins/resume`` + ``hook.sh`` (run as slurmctld
runs it, with stand-ins that record what was exec'd), and the probe on real interpreters."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from bridge import doctor
from bridge.doctor import HookFiles, HookRuntime, PythonRun, Status

ROOT = Path(__file__).resolve().parents[2]
PLUGINS = ROOT / "slurm_plugins"
VENV_PYTHON = "/opt/skb/venv/bin/python3"
ENTRY_POINT = f"""#!{VENV_PYTHON}
# -*- coding: utf-8 -*-
import re
import sys
from bridge.hooks import resume_entry
if __name__ == "__main__":
    sys.argv[0] = re.sub(r"(-script\\.pyw|\\.exe)?$", "", sys.argv[0])
    sys.exit(resume_entry())
"""
SHELL_HOOK = (PLUGINS / "resume").read_text()


def files(head: str | None = SHELL_HOOK, **changes: object) -> HookFiles:
    base = HookFiles(
        program="/opt/skb/slurm_plugins/resume",
        real="/opt/skb/slurm_plugins/resume",
        head=head,
        hooks_env_path="/opt/skb/slurm_plugins/hooks.env",
    )
    return replace(base, **changes)


@pytest.mark.parametrize(
    ("hook", "python", "flags", "pythonpath", "go_client"),
    [
        # pip's entry point: its shebang, whatever hooks.env or /usr/bin/python3 say.
        (
            files(ENTRY_POINT, hooks_env="SKB_PYTHON=/usr/bin/python3\n"),
            VENV_PYTHON,
            (),
            "",
            "",
        ),
        # pip's form for an interpreter path over 127 characters or with blanks.
        (
            files(
                "#!/bin/sh\n'''exec' \"/opt/my venv/bin/python3\" \"$0\" \"$@\"\n' '''\n"
                "from bridge.hooks import resume_entry\n"
            ),
            "/opt/my venv/bin/python3",
            (),
            "",
            "",
        ),
        (
            files(
                "#!/bin/sh\n'''exec' /opt/" + "x" * 130 + "/python \"$0\" \"$@\"\n' '''\n"
                "from bridge.hooks import resume_entry\n"
            ),
            "/opt/" + "x" * 130 + "/python",
            (),
            "",
            "",
        ),
        # The shell hook: the Go client when it is built and not refused ...
        (files(go_client=True), "", (), "", "/opt/skb/slurm_plugins/bin/skb-hook"),
        (
            files(go_client=True, hooks_env="SKB_HOOK_CLIENT=\nSKB_PYTHON=/p\n"),
            "",
            (),
            "",
            "/opt/skb/slurm_plugins/bin/skb-hook",
        ),
        (
            files(go_client=True, hooks_env="SKB_HOOK_CLIENT=python\nSKB_PYTHON=/p\n"),
            "/p",
            ("-P", "-s"),
            "",
            "",
        ),
        # ... else SKB_PYTHON (the last line wins, one pair of quotes stripped, nothing trimmed)
        (files(hooks_env="SKB_PYTHON=/a\nSKB_PYTHON='/b'\n"), "/b", ("-P", "-s"), "", ""),
        (files(hooks_env='SKB_PYTHON="/q"'), "/q", ("-P", "-s"), "", ""),
        (
            files(hooks_env=" SKB_PYTHON=/x\nSKB_PYTHON=\n"),
            "/usr/bin/python3",
            ("-P", "-s"),
            "",
            "",
        ),
        # ... else the checkout's venv, else /usr/bin/python3; a checkout goes on PYTHONPATH.
        (
            files(venv_python=True, checkout=True),
            "/opt/skb/.venv/bin/python",
            ("-P", "-s"),
            "/opt/skb",
            "",
        ),
        (files(), "/usr/bin/python3", ("-P", "-s"), "", ""),
        # hook.sh's directory is the real file's, not the symlink's.
        (
            files(program="/etc/slurm/resume", real="/srv/skb/slurm_plugins/resume", checkout=True),
            "/usr/bin/python3",
            ("-P", "-s"),
            "/srv/skb",
            "",
        ),
    ],
)
def test_what_the_hook_runs(
    hook: HookFiles, python: str, flags: tuple[str, ...], pythonpath: str, go_client: str
) -> None:
    runtime = doctor.hook_runtime(hook)
    assert (runtime.python, runtime.flags, runtime.pythonpath, runtime.go_client) == (
        python,
        flags,
        pythonpath,
        go_client,
    )


@pytest.mark.parametrize(
    ("head", "how"),
    [
        (None, "cannot be read"),
        ("\x7fELF\x02\x01", "not a script this doctor knows"),
        ('#!/bin/sh\nexec /opt/site/wake-nodes "$@"\n', "runs /bin/sh, not a hook"),
        ("#!/usr/bin/env python3\nfrom bridge.hooks import resume_entry\n", "/usr/bin/env"),
        ("#!/usr/bin/python3\nimport site_cloud\n", "not a hook this doctor knows"),
    ],
)
def test_programs_that_are_no_hook_of_ours(head: str | None, how: str) -> None:
    runtime = doctor.hook_runtime(files(head))
    assert not runtime.python
    assert not runtime.go_client
    assert how in runtime.how
    check = doctor.check_hook_runtime(runtime, None, "/x/hooks.env")
    assert check.status is Status.WARN
    assert check.line().startswith("WARN  hooks python: cannot tell what the hooks run: ")


ENTRY = HookRuntime(
    "R is a pip entry point: its shebang runs /v/python3", "entry point", python="/v/python3"
)
SHELL = HookRuntime("R (hook.sh) runs /usr/bin/python3 (...)", "hook.sh", python="/usr/bin/python3")


@pytest.mark.parametrize(
    ("runtime", "run", "status", "text", "fix"),
    [
        (
            ENTRY,
            PythonRun(True, (3, 12), imported=True),
            Status.PASS,
            "Python 3.12, imports bridge.hooks",
            "",
        ),
        (
            HookRuntime(
                "R (hook.sh) runs the Go client /p/bin/skb-hook",
                "hook.sh",
                go_client="/p/bin/skb-hook",
            ),
            None,
            Status.PASS,
            "not needed: R (hook.sh) runs the Go client",
            "",
        ),
        (
            ENTRY,
            PythonRun(False),
            Status.FAIL,
            "which is not an executable",
            "reinstall slurm-k8s-bridge",
        ),
        (
            SHELL,
            PythonRun(False),
            Status.FAIL,
            "which is not an executable",
            "set SKB_PYTHON in /h/hooks.env",
        ),
        # RHEL 9's /usr/bin/python3.
        (
            SHELL,
            PythonRun(True, (3, 9)),
            Status.FAIL,
            "which is Python 3.9, older than 3.11",
            "make hook-client",
        ),
        (
            SHELL,
            PythonRun(True, error="Illegal instruction"),
            Status.FAIL,
            "does not run: Illegal instruction",
            "",
        ),
        (
            SHELL,
            PythonRun(True, (3, 11), error="ModuleNotFoundError: No module named 'bridge'"),
            Status.FAIL,
            "cannot import bridge.hooks: ModuleNotFoundError: No module named 'bridge'",
            "with slurm-k8s-bridge installed",
        ),
    ],
)
def test_the_verdict_on_what_the_hooks_run(
    runtime: HookRuntime, run: PythonRun | None, status: Status, text: str, fix: str
) -> None:
    check = doctor.check_hook_runtime(runtime, run, "/h/hooks.env")
    assert check.status is status, check.line()
    assert text in check.cause
    assert fix in check.fix


# --- against the real hook.sh ------------------------------------------------------------------

#: Stands in for a Python (and for the Go client): answers hook.sh's version question, records
#: what the hook exec'd and with which PYTHONPATH, exits 0 (so no scontrol runs).
RECORDER = """#!/bin/sh
case "$1" in -S) printf '3.11'; exit 0 ;; esac
{{ printf '%s\\n' "$0" "$@"; printf 'PYTHONPATH=%s\\n' "${{PYTHONPATH-}}"; }} >{record}
"""


def recorder(path: Path, record: Path) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(RECORDER.format(record=record))
    path.chmod(0o755)
    return str(path)


@pytest.mark.parametrize(
    ("layout"),
    [
        "SKB_HOOK_CLIENT=python, SKB_PYTHON",
        "two SKB_PYTHON lines, the second quoted",
        "no SKB_PYTHON: the checkout's venv",
        "a checkout: PYTHONPATH",
        "a symlink: hooks.env beside it wins",
        "the Go client",
        "SKB_HOOK_CLIENT empty: the Go client",
    ],
)
def test_the_resolution_is_what_hook_sh_execs(tmp_path: Path, layout: str) -> None:
    repo = tmp_path / "repo"
    plugins = repo / "slurm_plugins"
    plugins.mkdir(parents=True)
    for name in ("resume", "hook.sh"):
        shutil.copy2(PLUGINS / name, plugins / name)
    record = tmp_path / "record"
    fake_bin = tmp_path / "bin"
    # A resume whose client fails would set nodes DOWN: a scontrol that does nothing.
    recorder(fake_bin / "scontrol", tmp_path / "scontrol-called")
    python = recorder(tmp_path / "py" / "python", record)
    common = f"SKB_SLURM_BIN={fake_bin}\nSKB_HOOK_LOG=\nSKB_SOCKET=unix:{tmp_path}/none.sock\n"
    program = plugins / "resume"
    env_text = common
    if layout == "SKB_HOOK_CLIENT=python, SKB_PYTHON":
        recorder(plugins / "bin" / "skb-hook", record)
        env_text += f"SKB_HOOK_CLIENT=python\nSKB_PYTHON={python}\n"
    elif layout == "two SKB_PYTHON lines, the second quoted":
        env_text += f'SKB_HOOK_CLIENT=python\nSKB_PYTHON=/nowhere\nSKB_PYTHON="{python}"\n'
    elif layout == "no SKB_PYTHON: the checkout's venv":
        recorder(repo / ".venv" / "bin" / "python", record)
    elif layout == "a checkout: PYTHONPATH":
        (repo / "bridge").mkdir()
        (repo / "bridge" / "hooks.py").write_text("")
        env_text += f"SKB_PYTHON={python}\n"
    elif layout == "a symlink: hooks.env beside it wins":
        env_text += "SKB_PYTHON=/nowhere\n"
        links = tmp_path / "etc"
        links.mkdir()
        (links / "resume").symlink_to(program)
        (links / "hooks.env").write_text(common + f"SKB_PYTHON={python}\n")
        program = links / "resume"
    elif layout == "the Go client":
        recorder(plugins / "bin" / "skb-hook", record)
        env_text += "SKB_PYTHON=/nowhere\n"
    else:
        recorder(plugins / "bin" / "skb-hook", record)
        env_text += "SKB_HOOK_CLIENT=\nSKB_PYTHON=/nowhere\n"
    (plugins / "hooks.env").write_text(env_text)

    # As slurmctld runs it: no PATH, a few variables, the hostlist as the one argument.
    done = subprocess.run(
        [str(program), "doctor-test-0"],
        env={"SLURM_CONF": str(tmp_path / "slurm.conf")},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    exec_d = record.read_text().splitlines()
    assert not (tmp_path / "scontrol-called").exists()

    runtime = doctor.hook_runtime(doctor.probe_hook_files(str(program)))
    if runtime.go_client:
        assert exec_d[:3] == [runtime.go_client, "resume", "doctor-test-0"]
    else:
        assert exec_d[0] == runtime.python
        assert exec_d[1:-1] == [*runtime.flags, "-m", "bridge.hooks", "resume", "doctor-test-0"]
        assert exec_d[-1] == f"PYTHONPATH={runtime.pythonpath}"


# --- the probe, on real interpreters ------------------------------------------------------------


def write(path: Path, text: str, mode: int = 0o755) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)
    return path


def shell_hook(tmp_path: Path, hooks_env: str) -> str:
    """A copy of the checkout's shell hook with its own hooks.env (no Go client, no venv)."""
    plugins = tmp_path / "hooks" / "slurm_plugins"
    plugins.mkdir(parents=True)
    for name in ("resume", "hook.sh"):
        shutil.copy2(PLUGINS / name, plugins / name)
    (plugins / "hooks.env").write_text(hooks_env)
    return str(plugins / "resume")


def test_a_pip_entry_point_is_judged_by_its_shebang(tmp_path: Path) -> None:
    # The venv's Python, as pip writes it (this test's own interpreter has the bridge).
    hook = write(
        tmp_path / "venv" / "bin" / "slurm-k8s-bridge-resume",
        ENTRY_POINT.replace(VENV_PYTHON, sys.executable),
    )
    check = doctor.probe_hooks_python(str(hook))
    assert check.status is Status.PASS, check.line()
    assert f"is a pip entry point: its shebang runs {sys.executable}" in check.cause
    assert "imports bridge.hooks" in check.cause


def test_a_pip_entry_point_whose_python_is_gone_fails(tmp_path: Path) -> None:
    gone = tmp_path / "old-venv" / "bin" / "python3"
    hook = write(
        tmp_path / "bin" / "slurm-k8s-bridge-resume", ENTRY_POINT.replace(VENV_PYTHON, str(gone))
    )
    check = doctor.probe_hooks_python(str(hook))
    assert check.status is Status.FAIL
    assert f"runs {gone}, which is not an executable" in check.cause
    assert "reinstall slurm-k8s-bridge" in check.fix


@pytest.mark.skipif(
    not os.access("/usr/bin/python3", os.X_OK)
    or subprocess.run(
        ["/usr/bin/python3", "-P", "-s", "-c", "import bridge.hooks"],
        cwd="/",
        env={},
        capture_output=True,
        check=False,
        timeout=30,
    ).returncode
    == 0,
    reason="needs a /usr/bin/python3 without the bridge",
)
def test_a_shell_hook_falling_back_to_a_python_without_the_bridge_fails(tmp_path: Path) -> None:
    # No SKB_PYTHON, no venv beside the hooks, no Go client: hook.sh runs /usr/bin/python3,
    # which the old doctor passed because its version was fine.
    check = doctor.probe_hooks_python(shell_hook(tmp_path, "SKB_SOCKET=unix:/x\n"))
    assert check.status is Status.FAIL, check.line()
    assert "runs /usr/bin/python3" in check.cause
    assert (
        "cannot import bridge.hooks: ModuleNotFoundError: No module named 'bridge'" in check.cause
    )
    assert "set SKB_PYTHON in " in check.fix


@pytest.mark.parametrize(
    ("python", "status", "text"),
    [
        (sys.executable, Status.PASS, "imports bridge.hooks"),
        # An old Python: hook.sh refuses it.
        ("#!/bin/sh\nprintf '3.9'\n", Status.FAIL, "which is Python 3.9, older than 3.11"),
        # A Python that runs but has no bridge: without site-packages.
        (f'#!/bin/sh\nexec {sys.executable} -S "$@"\n', Status.FAIL, "No module named 'bridge'"),
        ("#!/bin/sh\nexit 3\n", Status.FAIL, "which does not run: exit status 3"),
        ("", Status.FAIL, "which is not an executable"),
    ],
)
def test_a_shell_hook_runs_its_skb_python(
    tmp_path: Path, python: str, status: Status, text: str
) -> None:
    if python.startswith("#!"):
        python = str(write(tmp_path / "py" / "python3", python))
    elif not python:
        python = str(tmp_path / "nowhere" / "python3")
    check = doctor.probe_hooks_python(
        shell_hook(tmp_path, f"SKB_HOOK_CLIENT=python\nSKB_PYTHON={python}\n")
    )
    assert check.status is status, check.line()
    assert f"runs {python} (SKB_HOOK_CLIENT=python; SKB_PYTHON in " in check.cause
    assert text in check.cause
