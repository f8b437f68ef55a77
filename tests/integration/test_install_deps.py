"""dev/install-deps.sh (`make deps`) on this machine: every executable the proving ground,
the tests, the demo and the compose path run is checked, and a missing one is named with its
Debian package (issue 7: a fresh machine lacked /usr/bin/catatonit, which podman only Recommends).

The check-only tests point ``SKB_DEPS_ROOT`` at a tree of symlinks built here, so nothing on the
machine changes. ``test_deps_reinstall_a_removed_package`` really removes a package (root, apt).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "dev" / "install-deps.sh"
REMOVED = "catatonit"
REMOVED_PATH = Path("/usr/bin/catatonit")


def deps(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k != "SKB_DEPS_ROOT"}
    return subprocess.run(
        ["/bin/bash", str(SCRIPT), *args],
        env={**environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )


def table() -> dict[str, str]:
    """The script's own table: executable path → Debian package."""
    listed = deps("--list")
    assert listed.returncode == 0, listed.stderr
    pairs = [line.split() for line in listed.stdout.splitlines()]
    rows = {path: package for path, package in pairs}
    assert rows, "install-deps.sh --list printed no rows"
    return rows


def test_check_passes_on_this_machine() -> None:
    done = deps("--check")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout == f"deps: all {len(table())} executables present\n"


def test_install_when_all_present_is_one_fast_line() -> None:
    if not Path("/etc/containers/containers.conf").exists():
        pytest.skip("no /etc/containers/containers.conf: this run would write it (a 2nd line)")
    if deps("--check").returncode != 0:
        pytest.skip("something is missing: this run would install it")
    started = time.monotonic()
    done = deps()
    elapsed = time.monotonic() - started
    assert (done.returncode, done.stdout, done.stderr) == (
        0,
        f"deps: all {len(table())} executables present\n",
        "",
    )
    assert elapsed < 10, f"{elapsed:.1f}s with nothing to install"


@pytest.mark.parametrize(
    ("name", "package"),
    [
        ("catatonit", "catatonit"),  # issue 7: podman only Recommends it
        ("runc", "runc"),
        ("debootstrap", "debootstrap"),
        ("loopback", "containernetworking-plugins"),
        ("sinfo", "slurm-client"),
        ("unshare", "util-linux"),  # the other Slurm series' programs run under it
    ],
)
@pytest.mark.parametrize("how", ["absent", "not-executable"])
def test_check_names_the_missing_executable_and_its_package(
    tmp_path: Path, name: str, package: str, how: str
) -> None:
    rows = table()
    (path,) = [p for p in rows if Path(p).name == name]
    for other in rows:
        if other != path:
            link = tmp_path / other.lstrip("/")
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(other)
    if how == "not-executable":
        stub = tmp_path / path.lstrip("/")
        stub.parent.mkdir(parents=True, exist_ok=True)
        stub.write_text("#!/bin/sh\n")
        stub.chmod(0o644)

    done = deps("--check", env={"SKB_DEPS_ROOT": str(tmp_path)})

    assert done.returncode != 0
    assert done.stdout == ""
    assert done.stderr.splitlines() == [
        f"deps: {path} missing (package {package})",
        f"deps: 1 of {len(rows)} executables missing (make deps installs them)",
    ]


def test_check_on_an_empty_tree_names_every_row(tmp_path: Path) -> None:
    rows = table()
    done = deps("--check", env={"SKB_DEPS_ROOT": str(tmp_path)})
    assert done.returncode != 0
    named = {line for line in done.stderr.splitlines() if " missing (package " in line}
    assert named == {f"deps: {p} missing (package {pkg})" for p, pkg in rows.items()}


def test_a_test_prefix_never_reaches_apt(tmp_path: Path) -> None:
    done = deps(env={"SKB_DEPS_ROOT": str(tmp_path)})
    assert (done.returncode, done.stdout) == (2, "")
    assert "SKB_DEPS_ROOT is for --check only" in done.stderr


def _apt(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["apt-get", *args],
        env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def _installed(package: str) -> bool:
    status = subprocess.run(
        ["dpkg-query", "-W", "-f=${db:Status-Status}", package],
        capture_output=True,
        text=True,
        check=False,
    )
    return status.stdout == "installed"


@pytest.fixture
def removable() -> Iterator[str]:
    """catatonit, when removing it is safe here; reinstalled afterwards whatever happened."""
    if os.geteuid() != 0:
        pytest.skip("needs root: removes and reinstalls a Debian package")
    if shutil.which("apt-get") is None or shutil.which("dpkg") is None:
        pytest.skip("no apt-get/dpkg: not a Debian machine")
    if not _installed(REMOVED):
        pytest.skip(f"{REMOVED} is not installed: nothing to remove (run make deps first)")
    simulated = _apt("-s", "remove", REMOVED)
    plan = simulated.stdout.splitlines()
    removals = [line.split()[1] for line in plan if line.startswith("Remv")]
    if simulated.returncode != 0 or removals != [REMOVED]:
        pytest.skip(f"removing {REMOVED} would also remove {removals or simulated.stderr.strip()}")
    # The .deb in apt's cache first: the reinstall below must not depend on the mirror later.
    fetched = _apt("install", "-y", "-qq", "--reinstall", "--download-only", REMOVED)
    if fetched.returncode != 0:
        pytest.skip(f"apt-get cannot fetch {REMOVED}: {fetched.stderr.strip()}")
    try:
        yield REMOVED
    finally:
        if not _installed(REMOVED):
            restored = _apt("install", "-y", "-qq", "--no-install-recommends", REMOVED)
            assert restored.returncode == 0, f"could not reinstall {REMOVED}: {restored.stderr}"


@pytest.mark.slow
def test_deps_reinstall_a_removed_package(removable: str) -> None:
    subprocess.run(["dpkg", "--remove", removable], check=True, capture_output=True, timeout=300)
    assert not REMOVED_PATH.exists()
    gone = deps("--check")
    assert gone.returncode != 0
    assert f"deps: {REMOVED_PATH} missing (package {removable})" in gone.stderr

    done = deps()

    assert done.returncode == 0, done.stdout + done.stderr
    assert f"deps: installing {removable}" in done.stdout
    assert REMOVED_PATH.is_file()
    assert os.access(REMOVED_PATH, os.X_OK)
    again = deps("--check")
    assert again.returncode == 0, again.stderr
