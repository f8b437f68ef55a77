"""The wheel carries what a site installs besides the Python code (the unit, sysusers.d,
tmpfiles.d, logrotate, the examples, the PrologSlurmctld and strigger scripts, the site guide)
and the LICENSE; installed into a fresh venv it gives ``--version`` and ``install-service``.

Built offline as a packager would (``pip wheel --no-deps --no-build-isolation``) from a copy of
this tree's files (``git ls-files``, uncommitted ones included), so setuptools' build/ and
egg-info never land in the checkout.
"""

from __future__ import annotations

import email
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
DATA = f"slurm_k8s_bridge-{VERSION}.data/data/share/slurm-k8s-bridge"
DIST_INFO = f"slurm_k8s_bridge-{VERSION}.dist-info"

#: Member of the wheel -> the checkout's file it must be, byte for byte.
SHIPPED = [
    (f"{DATA}/systemd/slurm-k8s-bridge.service", "deploy/systemd/slurm-k8s-bridge.service"),
    (f"{DATA}/sysusers.d/slurm-k8s-bridge.conf", "deploy/systemd/sysusers.d/slurm-k8s-bridge.conf"),
    (f"{DATA}/tmpfiles.d/slurm-k8s-bridge.conf", "deploy/systemd/tmpfiles.d/slurm-k8s-bridge.conf"),
    (f"{DATA}/logrotate.d/slurm-k8s-bridge-hooks", "deploy/logrotate/slurm-k8s-bridge-hooks"),
    (f"{DATA}/examples/bridge.yaml", "deploy/examples/bridge.yaml"),
    (f"{DATA}/examples/hooks.env.example", "slurm_plugins/hooks.env.example"),
    (f"{DATA}/examples/slurm.conf.example", "slurm_plugins/slurm.conf.example"),
    (f"{DATA}/libexec/hook.sh", "slurm_plugins/hook.sh"),
    (f"{DATA}/libexec/job_ready", "slurm_plugins/job_ready"),
    (f"{DATA}/libexec/job_ready.sh", "slurm_plugins/job_ready.sh"),
    (f"{DATA}/libexec/strigger-setup.sh", "slurm_plugins/strigger-setup.sh"),
    (f"{DATA}/doc/site-guide.md", "docs/site-guide.md"),
    (f"{DATA}/doc/CHANGELOG.md", "CHANGELOG.md"),
    (f"{DIST_INFO}/licenses/LICENSE", "LICENSE"),
]  # fmt: skip


def _tree_files() -> list[str]:
    listed = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        check=True,
        timeout=60,
    )
    return [name for name in listed.stdout.decode().split("\0") if name]


def _copy(files: list[str], into: Path) -> Path:
    for name in files:
        source = ROOT / name
        if source.is_file():  # a file deleted but not yet committed is still listed
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, into / name)
    return into


def _build_wheel(source: Path, out: Path) -> Path:
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
         "--no-index", "--quiet", "--wheel-dir", str(out), str(source)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = out.glob("slurm_k8s_bridge-*.whl")
    return wheel


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    source = _copy(_tree_files(), tmp_path_factory.mktemp("source"))
    return _build_wheel(source, tmp_path_factory.mktemp("wheel"))


@pytest.mark.parametrize(("member", "source"), SHIPPED, ids=[s for _, s in SHIPPED])
def test_the_wheel_carries_the_file(member: str, source: str, wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        assert archive.read(member) == (ROOT / source).read_bytes()


def test_the_wheel_carries_no_other_data_file(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        data = sorted(n for n in archive.namelist() if ".data/" in n)
    assert data == sorted(member for member, _ in SHIPPED if ".data/" in member)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("Name", "slurm-k8s-bridge"),
        ("Version", VERSION),
        ("License-Expression", "Apache-2.0"),
        ("License-File", "LICENSE"),
    ],
)
def test_the_metadata_says(field: str, value: str, wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        metadata = email.message_from_bytes(archive.read(f"{DIST_INFO}/METADATA"))
    assert value in metadata.get_all(field, [])


def test_installed_in_a_fresh_venv_it_installs_the_service(wheel: Path, tmp_path: Path) -> None:
    """pip puts the data files where install-service looks (the venv's share/), with no
    dependency installed: --version and install-service need none."""
    venv = tmp_path / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120
    )
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(venv / "bin/python"), "install",
         "--quiet", "--no-deps", "--no-index", "--no-cache-dir", str(wheel)],
        check=True, timeout=300,
    )  # fmt: skip
    program = str(venv / "bin/slurm-k8s-bridge")
    version = subprocess.run(
        [program, "--version"], capture_output=True, text=True, timeout=60, check=True
    )
    assert version.stdout == f"slurm-k8s-bridge {VERSION}\n"
    root = tmp_path / "root"
    root.mkdir()
    installed = subprocess.run(
        [program, "install-service", "--root", str(root)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert (installed.returncode, installed.stderr) == (0, "")
    unit = root / "usr/lib/systemd/system/slurm-k8s-bridge.service"
    assert f"wrote {unit} (mode 0644, from {venv}/share/slurm-k8s-bridge/systemd/" in (
        installed.stdout
    )
    assert unit.read_bytes() == (ROOT / "deploy/systemd/slurm-k8s-bridge.service").read_bytes()


def test_a_tree_of_only_the_package_still_builds(tmp_path: Path) -> None:
    """dev/proving_ground/bridge_image.py builds its image's wheel from pyproject.toml,
    README.md and bridge/ alone: each data file is a pattern that may match nothing there."""
    package = [n for n in _tree_files() if n in {"pyproject.toml", "README.md"}]
    package += [n for n in _tree_files() if n.startswith("bridge/")]
    wheel = _build_wheel(_copy(package, tmp_path / "source"), tmp_path / "wheel")
    with zipfile.ZipFile(wheel) as archive:
        assert not [n for n in archive.namelist() if ".data/" in n]
        assert f"{DIST_INFO}/entry_points.txt" in archive.namelist()
