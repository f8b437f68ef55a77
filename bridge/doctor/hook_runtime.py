"""What the configured ResumeProgram really runs, found the way it finds it, and the verdict on
it. Pure (the probe reads the files and runs the interpreter), tested as tables.

Two kinds of hook exist:

* a pip install's entry point (``<venv>/bin/slurm-k8s-bridge-resume``): the kernel runs the
  Python its shebang names (pip writes ``#!/bin/sh`` and an ``exec`` line instead when that path
  is long or has blanks); hooks.env's SKB_PYTHON does not apply;
* the checkout's shell hook (``slurm_plugins/resume``, which sources ``hook.sh``): hook.sh reads
  hooks.env beside the hook as invoked, else beside the real file; runs ``bin/skb-hook`` (the
  Go client, no Python at all) unless SKB_HOOK_CLIENT says otherwise or it is not built; else
  SKB_PYTHON, else ``<repo>/.venv/bin/python``, else ``/usr/bin/python3``, as
  ``python -P -s -m bridge.hooks`` with the checkout on PYTHONPATH.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from bridge.doctor.checks import MIN_PYTHON, Check, Status
from bridge.settings import hooks_env_values

NAME: Final = "hooks python"
#: The Python hook.sh falls back to, last.
SYSTEM_PYTHON: Final = "/usr/bin/python3"
#: The keys hook.sh reads that choose what runs.
_HOOK_KEYS: Final = ("SKB_HOOK_CLIENT", "SKB_PYTHON")
#: pip's (distlib's) launcher line for an interpreter path too long for a shebang.
_PIP_EXEC: Final = re.compile(r"'''exec' (?:\"([^\"]+)\"|(\S+)) \"\$0\" \"\$@\"")
_SHELLS: Final = frozenset({"sh", "bash", "dash", "ash", "ksh"})

SHELL_HOOK, ENTRY_POINT = "hook.sh", "entry point"


@dataclass(frozen=True)
class HookFiles:
    """What the probe read of the program slurmctld runs and of its neighbours."""

    #: The path as slurm.conf names it (hook.sh looks for hooks.env beside it first).
    program: str
    #: The same with its symlinks resolved (the file that runs; hook.sh's own directory).
    real: str
    #: The start of the real file, decoded; None when it could not be read.
    head: str | None
    #: The hooks.env hook.sh would read (its path and text); None: none is readable.
    hooks_env_path: str = ""
    hooks_env: str | None = None
    #: ``<real dir>/bin/skb-hook`` is executable (hook.sh's test -x).
    go_client: bool = False
    #: ``<repo>/.venv/bin/python`` is executable.
    venv_python: bool = False
    #: ``<repo>/bridge/hooks.py`` is a file: hook.sh puts the checkout on PYTHONPATH.
    checkout: bool = False


@dataclass(frozen=True)
class HookRuntime:
    """What a hook runs: the Go client, a Python (with its flags and PYTHONPATH), or neither
    known (``source`` ""); ``how`` says how it was found."""

    how: str
    source: str = ""
    go_client: str = ""
    python: str = ""
    flags: tuple[str, ...] = ()
    pythonpath: str = ""

    def import_argv(self) -> list[str]:
        """The interpreter asked to import the hooks' module as the hook would run it."""
        return [self.python, *self.flags, "-c", "import bridge.hooks"]


@dataclass(frozen=True)
class PythonRun:
    """What running the hook's Python showed; ``error`` says why a run failed."""

    executable: bool
    version: tuple[int, int] | None = None
    imported: bool = False
    error: str = ""


def hooks_env_settings(text: str | None) -> dict[str, str]:
    """SKB_HOOK_CLIENT and SKB_PYTHON as hook.sh reads them from hooks.env's ``text``."""
    return hooks_env_values(text or "", _HOOK_KEYS)


def hook_runtime(files: HookFiles) -> HookRuntime:
    """What ``files.program`` runs when slurmctld starts it."""
    head = files.head
    if head is None:
        return HookRuntime(f"{files.program} cannot be read")
    lines = head.split("\n")
    if not lines[0].startswith("#!"):
        return HookRuntime(f"{files.program} is not a script this doctor knows")
    # The kernel passes what follows the interpreter as one argument, whatever its blanks.
    shebang = lines[0][2:].strip().split(None, 1)
    interpreter = shebang[0] if shebang else ""
    if len(lines) > 1 and Path(interpreter).name in _SHELLS:
        launcher = _PIP_EXEC.fullmatch(lines[1])
        if launcher:  # pip's form for a long interpreter path; the exec line names it
            interpreter, shebang = launcher[1] or launcher[2], []
    if Path(interpreter).name.startswith("python") and "bridge.hooks" in head:
        return HookRuntime(
            f"{files.program} is a pip entry point: its shebang runs {interpreter}",
            ENTRY_POINT,
            python=interpreter,
            flags=tuple(shebang[1:]),
        )
    if Path(interpreter).name in _SHELLS and "hook.sh" in head:
        return _shell_hook(files)
    return HookRuntime(f"{files.program} runs {lines[0][2:].strip()}, not a hook this doctor knows")


def _shell_hook(files: HookFiles) -> HookRuntime:
    directory = Path(files.real).parent
    settings = hooks_env_settings(files.hooks_env)
    where = files.hooks_env_path if files.hooks_env is not None else "no hooks.env"
    client = settings.get("SKB_HOOK_CLIENT") or "go"
    go_client = directory / "bin" / "skb-hook"
    if client == "go" and files.go_client:
        return HookRuntime(
            f"{files.program} (hook.sh) runs the Go client {go_client} "
            f"(SKB_HOOK_CLIENT {settings.get('SKB_HOOK_CLIENT') or 'unset'}; {where})",
            SHELL_HOOK,
            go_client=str(go_client),
        )
    why = "SKB_HOOK_CLIENT=" + client if client != "go" else f"{go_client} not built"
    venv = directory.parent / ".venv" / "bin" / "python"
    if settings.get("SKB_PYTHON"):
        python, found = settings["SKB_PYTHON"], f"SKB_PYTHON in {where}"
    elif files.venv_python:
        python, found = str(venv), f"no SKB_PYTHON ({where}), the checkout's venv"
    else:
        python, found = SYSTEM_PYTHON, f"no SKB_PYTHON ({where}), no {venv}"
    return HookRuntime(
        f"{files.program} (hook.sh) runs {python} ({why}; {found})",
        SHELL_HOOK,
        python=python,
        flags=("-P", "-s"),
        pythonpath=str(directory.parent) if files.checkout else "",
    )


def check_hook_runtime(runtime: HookRuntime, run: PythonRun | None, hooks_env: str) -> Check:
    """The verdict on what the hooks run; ``run`` is None when no Python was run (the Go client,
    or nothing known); ``hooks_env`` is where SKB_PYTHON would go."""
    if runtime.go_client:
        return Check(Status.PASS, NAME, f"not needed: {runtime.how}")
    if not runtime.python or run is None:
        return Check(
            Status.WARN,
            NAME,
            f"cannot tell what the hooks run: {runtime.how}",
            "point ResumeProgram at slurm_plugins/resume or the slurm-k8s-bridge-resume entry "
            "point (render-slurm-conf), or check its interpreter by hand",
        )
    if runtime.source == ENTRY_POINT:
        fix = (
            "reinstall slurm-k8s-bridge into a Python 3.11+ (pip install), so that its entry "
            "points name that Python, then render-slurm-conf and scontrol reconfigure"
        )
    else:
        fix = (
            f"set SKB_PYTHON in {hooks_env} to a Python 3.11+ with slurm-k8s-bridge installed, "
            "or build the Go client (make hook-client)"
        )
    if not run.executable:
        return Check(
            Status.FAIL,
            NAME,
            f"{runtime.how}, which is not an executable: every hook call fails (a resume sets "
            "its nodes DOWN)",
            fix,
        )
    want = ".".join(map(str, MIN_PYTHON))
    if run.version is None:
        return Check(Status.FAIL, NAME, f"{runtime.how}, which does not run: {run.error}", fix)
    shown = ".".join(map(str, run.version))
    if run.version < MIN_PYTHON:
        return Check(
            Status.FAIL,
            NAME,
            f"{runtime.how}, which is Python {shown}, older than {want}",
            fix,
        )
    if not run.imported:
        return Check(
            Status.FAIL,
            NAME,
            f"{runtime.how}, which cannot import bridge.hooks: {run.error}",
            fix,
        )
    return Check(Status.PASS, NAME, f"{runtime.how}: Python {shown}, imports bridge.hooks")
