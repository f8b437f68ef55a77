"""dev/install-deps.sh's table (``--list``): the executables the proving ground runs by
absolute path are installed by ``make deps`` and checked after it. The script itself, apt and the
check against this machine are tested in tests/integration/test_install_deps.py."""

from __future__ import annotations

import subprocess

import pytest

from tests.conftest import ROOT

SCRIPT = ROOT / "dev" / "install-deps.sh"


def listed_rows() -> dict[str, str]:
    """``install-deps.sh --list``: executable path → Debian package (no apt, any user)."""
    done = subprocess.run(
        ["/bin/bash", str(SCRIPT), "--list"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return dict(line.split() for line in done.stdout.splitlines())


@pytest.mark.parametrize(
    ("path", "package"),
    [
        # proving_ground/slurm_series.py: the other Slurm series' programs run in a private mount
        # namespace (unshare), then chrooted into their root.
        ("/usr/bin/unshare", "util-linux"),
        ("/usr/sbin/chroot", "coreutils"),
        # make venv: Debian's python3 has no ensurepip without it (a fresh machine's first step).
        ("/usr/lib/python3.11/ensurepip/__main__.py", "python3.11-venv"),
    ],
)
def test_the_proving_grounds_executables_are_in_the_table(path: str, package: str) -> None:
    assert listed_rows().get(path) == package
