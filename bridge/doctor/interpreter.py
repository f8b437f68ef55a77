"""Run the hooks' Python as slurmctld would run it: no environment but what hook.sh exports
(PYTHONPATH for a checkout), ``/`` as the working directory, argv lists with a timeout.

The one module of the doctor that starts a process; the Slurm CLI adapter has the others.
"""

from __future__ import annotations

import os
import subprocess
from typing import Final

from bridge.doctor.hook_runtime import HookRuntime, PythonRun

#: hook.sh asks the version so before it runs the hook (no site, no environment: a few ms).
VERSION_ARGV: Final = (
    "-S",
    "-E",
    "-c",
    'import sys; sys.stdout.write("%d.%d" % sys.version_info[:2])',
)
#: Importing grpc and the hooks' module takes ~0.2 s; a cold cache with no .pyc a second or two.
TIMEOUT_S: Final = 20.0


def run_hook_python(runtime: HookRuntime) -> PythonRun:
    """Whether ``runtime.python`` is executable, its version, and whether it imports
    ``bridge.hooks`` with the hook's flags and PYTHONPATH."""
    python = runtime.python
    if not os.access(python, os.X_OK) or os.path.isdir(python):
        return PythonRun(executable=False)
    code, out, err = _run([python, *VERSION_ARGV], {})
    parts = out.strip().split(".")
    if code != 0 or len(parts) != 2 or not all(p.isdigit() for p in parts):
        return PythonRun(executable=True, error=_last_line(err) or f"exit status {code}")
    version = (int(parts[0]), int(parts[1]))
    env = {"PYTHONPATH": runtime.pythonpath} if runtime.pythonpath else {}
    code, _, err = _run(runtime.import_argv(), env)
    if code != 0:
        return PythonRun(True, version, error=_last_line(err) or f"exit status {code}")
    return PythonRun(True, version, imported=True)


def _run(argv: list[str], env: dict[str, str]) -> tuple[int, str, str]:
    """Exit status, stdout and stderr; -1 and the reason when it could not run or timed out."""
    try:
        done = subprocess.run(
            argv,
            env=env,
            cwd="/",
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return -1, "", f"no answer within {TIMEOUT_S:g} s"
    except OSError as e:
        return -1, "", f"cannot run: {e.strerror or e}"
    return (
        done.returncode,
        done.stdout.decode(errors="replace"),
        done.stderr.decode(errors="replace"),
    )


def _last_line(text: str) -> str:
    """A traceback's last line names the error (ModuleNotFoundError: No module named 'bridge')."""
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""
