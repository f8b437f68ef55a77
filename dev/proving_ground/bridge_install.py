"""The bridge as the site guide installs it: a wheel built from this checkout, installed (not
editable) into a venv of its own from the system Python — the ground's stand-in for
/opt/slurm-k8s-bridge/venv. Rebuilt only when a file that goes into the wheel changed, so a
restart of the ground's bridge costs no build; ``make up`` after an edit costs one (~10 s).
"""

from __future__ import annotations

import hashlib
import shutil
import sys
import tempfile
from pathlib import Path

from .layout import Layout
from .processes import ProvingGroundError, run

#: The system Python the guide builds the venv from (the Makefile's PYTHON picks it too).
SYSTEM_PYTHON = "/usr/bin/python3"
#: Where the wheel's files come from (pyproject.toml's packages and data-files): the whole
#: tree of each directory, and single files.
_TREES = ("bridge",)
_FILES = (
    "pyproject.toml",
    "README.md",
    "LICENSE",
    "CHANGELOG.md",
    "docs/site-guide.md",
    "deploy/systemd/slurm-k8s-bridge.service",
    "deploy/systemd/sysusers.d/slurm-k8s-bridge.conf",
    "deploy/systemd/tmpfiles.d/slurm-k8s-bridge.conf",
    "deploy/logrotate/slurm-k8s-bridge-hooks",
    "deploy/examples/bridge.yaml",
    "slurm_plugins/hooks.env.example",
    "slurm_plugins/slurm.conf.example",
    "slurm_plugins/hook.sh",
    "slurm_plugins/job_ready",
    "slurm_plugins/job_ready.sh",
    "slurm_plugins/strigger-setup.sh",
)
_DIGEST_FILE = ".skb-wheel-digest"


def venv_dir(layout: Layout) -> Path:
    return layout.local / "bridge-venv"


def wheel_sources(root: Path) -> list[Path]:
    """Every file of the checkout that goes into the wheel, relative to ``root``."""
    files = [Path(name) for name in _FILES if (root / name).is_file()]
    for tree in _TREES:
        files += [
            p.relative_to(root)
            for p in (root / tree).rglob("*")
            if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
        ]
    return sorted(files)


def sources_digest(root: Path) -> str:
    digest = hashlib.sha256()
    for relative in wheel_sources(root):
        digest.update(str(relative).encode() + b"\0" + (root / relative).read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def build_wheel(root: Path, out: Path) -> Path:
    """The wheel of the checkout at ``root``, built into ``out`` (which must exist)."""
    with tempfile.TemporaryDirectory(prefix="skb-wheel-source-") as scratch:
        source = Path(scratch)
        # A copy, so that setuptools' build/ and egg-info never land in the checkout.
        for relative in wheel_sources(root):
            (source / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(root / relative, source / relative)
        # The dev venv's setuptools builds it (no isolated build env: no download per build).
        run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
             "--disable-pip-version-check", "--wheel-dir", str(out), str(source)],
            timeout_s=300)  # fmt: skip
    built = sorted(out.glob("slurm_k8s_bridge-*.whl"))
    if len(built) != 1:
        raise ProvingGroundError(f"pip wheel built {[w.name for w in built]}, not one wheel")
    return built[0]


def ensure_installed(layout: Layout) -> Path:
    """The bridge's venv holding the wheel of this checkout (built and installed when the
    sources changed since the last install); returns the venv."""
    venv = venv_dir(layout)
    digest = sources_digest(layout.root)
    stamp = venv / _DIGEST_FILE
    if stamp.exists() and stamp.read_text().strip() == digest:
        return venv
    print(f"    the bridge: wheel of this checkout into {venv} (sources {digest})", flush=True)
    with tempfile.TemporaryDirectory(prefix="skb-wheel-") as scratch:
        wheel = build_wheel(layout.root, Path(scratch))
        if not (venv / "bin" / "python").exists():
            shutil.rmtree(venv, ignore_errors=True)
            run([SYSTEM_PYTHON, "-m", "venv", str(venv)], timeout_s=120)
        pip = [str(venv / "bin" / "pip"), "install", "--quiet", "--disable-pip-version-check"]
        # The package itself replaced even at the same version; then its dependencies (a no-op
        # when they are there; PyPI on the first install or when pyproject.toml changed them).
        run([*pip, "--force-reinstall", "--no-deps", str(wheel)], timeout_s=300)
        run([*pip, str(wheel)], timeout_s=900)
    stamp.write_text(digest + "\n")
    return venv
