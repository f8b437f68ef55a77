"""`render-slurm-conf --check` against the proving ground's running slurmctld (22.05): it names
every global the render would change and fails unless each is listed (issue 8)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ProvingGround

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "dev" / "bridge.yaml"


def check(pg: ProvingGround, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "bridge.cli.main",
            "render-slurm-conf",
            "-c",
            str(CONFIG),
            "--check",
            *argv,
        ],
        env=pg.env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_check_against_the_ground_lists_what_it_would_change(
    proving_ground: ProvingGround, tmp_path: Path
) -> None:
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    for name in ("resume", "suspend", "resume_fail"):
        (hooks / name).write_text("#!/bin/sh\n")
        (hooks / name).chmod(0o755)
    done = check(
        proving_ground, "--hooks-dir", str(hooks), "--tree-width", "100", "--resume-rate", "7"
    )
    print(done.stdout)
    assert done.returncode == 3, done.stderr
    changed = [line.split(":", 1)[0] for line in done.stdout.splitlines()[:-1]]
    assert changed == [
        "ResumeProgram",
        "SuspendProgram",
        "ResumeFailProgram",
        "ResumeRate",
        "TreeWidth",
    ]
    assert f"ResumeProgram: {ROOT}/slurm_plugins/resume -> {hooks}/resume" in done.stdout
    assert "TreeWidth: 65533 -> 100  [not listed in --allow-change]" in done.stdout
    assert "ResumeRate: 0 nodes/min -> 7" in done.stdout
    # SlurmctldParameters: the running list already has the bridge's entries (22.05:
    # cloud_reg_addrs too), so the merge changes nothing.
    assert "SlurmctldParameters" not in done.stdout
    allowed = check(
        proving_ground,
        "--hooks-dir",
        str(hooks),
        "--tree-width",
        "100",
        "--resume-rate",
        "7",
        "--allow-change",
        "ResumeProgram,SuspendProgram,ResumeFailProgram,ResumeRate,TreeWidth",
    )
    assert allowed.returncode == 0, allowed.stdout + allowed.stderr


def test_check_of_the_grounds_own_render_changes_nothing(proving_ground: ProvingGround) -> None:
    """The ground renders with these hooks and asks for its globals: nothing would change."""
    assert os.path.exists(proving_ground.layout.slurm_conf)
    done = check(proving_ground)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout == "render-slurm-conf --check: no global would change\n"
