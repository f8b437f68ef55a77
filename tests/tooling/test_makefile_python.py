"""The venv's base interpreter (the Makefile's PYTHON): Debian's python3, not whichever python3
comes first on PATH, unless PYTHON says otherwise. Read from ``make -n`` (nothing runs)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ROOT

DEBIAN_PYTHON = Path("/usr/bin/python3")


def _venv_command(path_first: Path, *assignments: str) -> str:
    """The command ``make`` would build the venv with, ``path_first`` leading PATH."""
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHON", "MAKEFLAGS", "MAKELEVEL"}}
    env["PATH"] = f"{path_first}:{env.get('PATH', '/usr/bin:/bin')}"
    done = subprocess.run(
        ["make", "-n", "--always-make", "-C", str(ROOT), *assignments, ".venv/.stamp"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=True,
    )
    return next(line for line in done.stdout.splitlines() if " -m venv " in line)


@pytest.fixture
def shadowing_python(tmp_path: Path) -> Path:
    """A directory whose python3 (a pyenv shim, say) would win on PATH."""
    python = tmp_path / "python3"
    python.write_text("#!/bin/sh\nexit 1\n")
    python.chmod(0o755)
    return tmp_path


@pytest.mark.skipif(not DEBIAN_PYTHON.exists(), reason="no /usr/bin/python3 on this machine")
def test_the_venv_is_built_from_debians_python(shadowing_python: Path) -> None:
    assert _venv_command(shadowing_python).startswith(f"{DEBIAN_PYTHON} -m venv ")


def test_python_overrides_it(shadowing_python: Path) -> None:
    assert _venv_command(shadowing_python, "PYTHON=/opt/py/bin/python3").startswith(
        "/opt/py/bin/python3 -m venv "
    )
