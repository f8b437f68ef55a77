"""Each import contract in pyproject's ``[tool.importlinter]`` fails on a violation planted for
it. ``lint-imports`` runs on a copy of ``bridge/`` with one import added; the contract must report
BROKEN and name the planted import, so a contract that checks nothing (a renamed package, a
layer that matches no module) fails here instead of passing quietly."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")

#: contract id -> (module file under bridge/, the import planted in it, the importer as reported)
PLANTS = {
    # The issue that made the layers a package each: domain importing the status report.
    "layers": ("domain/nodes.py", "import bridge.cli.status_report", "bridge.domain.nodes"),
    "cli-inside": ("cli/status_report.py", "import bridge.cli.status", "bridge.cli.status_report"),
    "runtime-inside": (
        "runtime/pod_cache.py",
        "import bridge.runtime.serve",
        "bridge.runtime.pod_cache",
    ),
    "service-inside": (
        "service/ports.py",
        "import bridge.service.use_cases",
        "bridge.service.ports",
    ),
    "rpc-inside": ("rpc/wire.py", "import bridge.rpc.client", "bridge.rpc.wire"),
    "cheap-settings": ("settings.py", "import yaml", "bridge.settings"),
    "pure-domain": ("domain/hostlist.py", "import time", "bridge.domain.hostlist"),
    "kubernetes-adapter": ("service/cordons.py", "import kubernetes", "bridge.service.cordons"),
    "subprocess-callers": ("service/cordons.py", "import subprocess", "bridge.service.cordons"),
    "generated-code-at-the-edge": (
        "hooks.py",
        "import bridge.rpc._proto.slurm_k8s_bridge.v1.bridge_pb2",
        "bridge.hooks",
    ),
}


def contract_ids() -> list[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    return [c["id"] for c in config["contracts"]]


def lint(tree: Path, contract: str) -> subprocess.CompletedProcess[str]:
    # The copy comes first on the path, so grimp reads it and not the editable install.
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--no-logo", "--contract", contract, "pyproject.toml"],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tree = tmp_path_factory.mktemp("pristine")
    shutil.copytree(ROOT / "bridge", tree / "bridge", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tree / "pyproject.toml")
    return tree


def test_every_contract_has_a_planted_violation() -> None:
    assert sorted(PLANTS) == sorted(contract_ids())


@pytest.mark.parametrize("contract", sorted(PLANTS))
def test_the_contract_holds_on_the_tree_as_it_is(pristine: Path, contract: str) -> None:
    done = lint(pristine, contract)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 kept, 0 broken" in done.stdout


@pytest.mark.parametrize("contract", sorted(PLANTS))
def test_the_contract_breaks_on_its_planted_violation(
    pristine: Path, tmp_path: Path, contract: str
) -> None:
    module, planted, importer = PLANTS[contract]
    tree = tmp_path / "tree"
    shutil.copytree(pristine, tree)
    path = tree / "bridge" / module
    # After the docstring and `from __future__`: the last line is always a valid place.
    path.write_text(path.read_text() + f"\n{planted}  # planted\n")
    done = lint(tree, contract)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "0 kept, 1 broken" in done.stdout, done.stdout
    assert importer in done.stdout, done.stdout
