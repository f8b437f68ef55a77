"""`render-slurm-conf --check` against the proving ground's running slurmctld: it names every
global the render would change and fails unless each is listed (issue 8), and it refuses pools
that reuse the site's names (issue 30)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from proving_ground.slurm import STATIC_NODE, fragment_path

from tests.cluster import wait_for
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


def test_pools_reusing_the_site_s_names_are_refused_and_nothing_is_written(
    proving_ground: ProvingGround, tmp_path: Path
) -> None:
    """Issue 30 item 1: a pool named like the ground's static partition, whose nodes include
    the static node, would stop slurmctld at its next reconfigure (`duplicate entry for
    partition`, `Duplicated NodeName`). The render and --check refuse it, naming each clash,
    and the fragment slurmctld reads is left byte for byte."""
    pg = proving_ground
    config = yaml.safe_load(CONFIG.read_text())
    cpu = next(p for p in config["pools"] if p["name"] == "cpu")
    config["pools"].append({**cpu, "name": "static", "nodes": "static-[0-1]"})
    del config["pools"][-1]["partition"]  # the partition defaults to the pool's name
    clashing = tmp_path / "bridge.yaml"
    clashing.write_text(yaml.safe_dump(config, sort_keys=False))
    fragment = fragment_path(pg.layout)
    before = fragment.read_bytes()
    site = pg.layout.slurm_conf
    for extra in (["--check"], ["--output", str(fragment)]):
        done = subprocess.run(
            [sys.executable, "-m", "bridge.cli.main", "render-slurm-conf", "-c", str(clashing),
             *extra],
            env=pg.env, cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert done.returncode == 1, done.stdout + done.stderr
        assert f"pool static: partition static is already defined in {site}" in done.stderr
        assert f"pool static: node {STATIC_NODE} is already defined in {site}" in done.stderr
        assert "static-1 is" not in done.stderr
        assert done.stdout == ""
    assert fragment.read_bytes() == before
    assert "UP" in pg.slurm("scontrol", "ping")


def test_an_edit_of_the_site_s_own_slurmctld_parameters_is_in_force(
    proving_ground: ProvingGround,
) -> None:
    """Issue 30 item 3: the fragment used to carry a copy of SlurmctldParameters taken at render
    time; Included last, it replaced the site's own line, so a site's later edit of that line
    was silently overridden at the next reconfigure. Now the line is the site's alone: the edit
    is in force, and --check still finds the bridge's entries in it."""
    pg = proving_ground
    site = pg.layout.slurm_conf
    before = site.read_text()
    lines = before.splitlines()
    at = next((i for i, line in enumerate(lines) if line.startswith("SlurmctldParameters=")), None)
    edit = "max_dbd_msg_action=discard"
    if at is None:  # a site without the line: it adds one
        at = next(i for i, line in enumerate(lines) if line.startswith("Include "))
        lines.insert(at, f"SlurmctldParameters={edit}")
    else:
        lines[at] += f",{edit}"
    try:
        site.write_text("\n".join(lines) + "\n")
        pg.slurm("scontrol", "reconfigure")
        seen: list[str] = []

        def running_params() -> str | None:
            # 23.11+ re-executes slurmctld on reconfigure: it may not answer for a moment.
            shown = pg.slurm("scontrol", "show", "config", check=False)
            seen[:] = [line for line in shown.splitlines() if line.startswith("SlurmctldParam")]
            return seen[0] if seen and edit in seen[0] else None

        try:
            wait_for("the site's edit in the running SlurmctldParameters", running_params, 20)
        except AssertionError as e:
            raise AssertionError(f"the site's edit is not in force: {seen}") from e
        done = check(pg)
        assert done.returncode == 0, done.stdout + done.stderr
    finally:
        site.write_text(before)
        pg.slurm("scontrol", "reconfigure")
