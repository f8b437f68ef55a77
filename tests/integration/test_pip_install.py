"""`pip install .` (not editable) into a fresh venv: the hooks ship as entry points, the render
names programs that exist and run, and its globals are exactly the documented set (issue 8)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from bridge.domain.slurm_conf import DEFAULT_GLOBALS, rendered_globals

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
ENTRY_POINTS = (
    "slurm-k8s-bridge",
    "slurm-k8s-bridge-resume",
    "slurm-k8s-bridge-suspend",
    "slurm-k8s-bridge-resume-fail",
    "slurm-k8s-bridge-node-event",
)


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A venv from the system Python holding the package as a wheel would install it."""
    root = tmp_path_factory.mktemp("pip-install")
    src = root / "src"  # a copy: pip's in-tree build must not write into the shared checkout
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    shutil.copytree(ROOT / "bridge", src / "bridge", ignore=shutil.ignore_patterns("__pycache__"))
    env_dir = root / "venv"
    subprocess.run(["/usr/bin/python3", "-m", "venv", str(env_dir)], check=True, timeout=120)
    subprocess.run(
        [
            str(env_dir / "bin" / "pip"),
            "install",
            "--quiet",
            "--disable-pip-version-check",
            str(src),
        ],
        check=True,
        timeout=900,
        cwd=root,
    )
    yield env_dir


def test_entry_points_are_installed(venv: Path) -> None:
    for name in ENTRY_POINTS:
        path = venv / "bin" / name
        assert path.is_file() and os.access(path, os.X_OK), path


def test_render_names_existing_executables_and_only_the_documented_globals(venv: Path) -> None:
    done = subprocess.run(
        [
            str(venv / "bin" / "slurm-k8s-bridge"),
            "render-slurm-conf",
            "-c",
            str(ROOT / "deploy" / "examples" / "bridge.yaml"),
            # No slurmctld is asked: the series is given.
            "--slurm-version",
            "24.11",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd="/",
        check=False,
    )
    assert done.returncode == 0, done.stderr
    found = rendered_globals(done.stdout)
    assert tuple(found) == DEFAULT_GLOBALS
    # The site's own SlurmctldParameters line is left to it; the render names its entries.
    assert "#   SlurmctldParameters: enable_configless,idle_on_node_suspend\n" in done.stdout
    for key in ("ResumeProgram", "SuspendProgram", "ResumeFailProgram"):
        path = Path(found[key])
        assert path.parent == venv / "bin", path
        assert path.is_file() and os.access(path, os.X_OK), path
    for line in done.stdout.splitlines():
        if line.startswith("PartitionName="):
            assert "SuspendTime=300 SuspendTimeout=30 ResumeTimeout=600" in line


def test_installed_resume_hook_runs_without_path_and_fails_nodes_down(
    venv: Path, tmp_path: Path
) -> None:
    """As slurmctld runs it: argv = hostlist, no PATH; no bridge → the nodes go DOWN."""
    args = tmp_path / "scontrol.argv"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    scontrol = bin_dir / "scontrol"
    scontrol.write_text(f'#!/bin/sh\nfor a in "$@"; do printf "%s\\n" "$a"; done > {args}\n')
    scontrol.chmod(0o755)
    hooks_env = tmp_path / "hooks.env"
    hooks_env.write_text(
        f"SKB_SOCKET=unix:{tmp_path / 'none.sock'}\nSKB_SLURM_BIN={bin_dir}\n"
        f"SKB_HOOK_LOG={tmp_path / 'hooks.log'}\n"
    )
    env = {"PWD": "/", "SHLVL": "1", "SLURM_CONF": "/etc/slurm/slurm.conf"}
    env["SKB_HOOKS_ENV"] = str(hooks_env)  # the default is /etc/slurm-k8s-bridge/hooks.env
    done = subprocess.run(
        [str(venv / "bin" / "slurm-k8s-bridge-resume"), "c[1-2]"],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        cwd="/",
        check=False,
    )
    assert done.returncode == 1
    lines = args.read_text().splitlines()
    assert lines[:3] == ["update", "nodename=c[1-2]", "state=down"]
    assert lines[3].startswith("reason=k8s: BridgeUnreachable: ")
    assert "result=BridgeUnreachable" in (tmp_path / "hooks.log").read_text()
