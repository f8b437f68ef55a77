"""The shipped tmpfiles.d file, run by the real systemd-tmpfiles under --root (issue 30 item 7):
it creates the bridge's own paths, and leaves the site's existing /var/log/slurm as it was (it
used to set it to 0755 slurm:slurm at every boot)."""

from __future__ import annotations

import grp
import os
import pwd
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TMPFILES = ROOT / "deploy" / "systemd" / "tmpfiles.d" / "slurm-k8s-bridge.conf"


def _stat(path: Path) -> tuple[str, str, str]:
    st = path.stat()
    return (
        oct(st.st_mode & 0o7777),
        pwd.getpwuid(st.st_uid).pw_name,
        grp.getgrgid(st.st_gid).gr_name,
    )


@pytest.mark.parametrize("site_log_dir", [True, False], ids=["site-s-dir-kept", "created"])
def test_tmpfiles_creates_the_bridge_s_paths_and_keeps_the_site_s(
    tmp_path: Path, site_log_dir: bool
) -> None:
    if os.geteuid() != 0:
        pytest.fail("needs root: systemd-tmpfiles sets owners (make test runs as root)")
    for name in ("passwd", "group"):
        (tmp_path / "etc").mkdir(exist_ok=True)
        shutil.copy(f"/etc/{name}", tmp_path / "etc" / name)
    log_dir = tmp_path / "var/log/slurm"
    if site_log_dir:
        log_dir.mkdir(parents=True)
        log_dir.chmod(0o2750)
        os.chown(log_dir, 0, grp.getgrnam("adm").gr_gid)
    done = subprocess.run(
        ["systemd-tmpfiles", f"--root={tmp_path}", "--create", str(TMPFILES)],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    expected_dir = ("0o2750", "root", "adm") if site_log_dir else ("0o755", "root", "root")
    assert _stat(log_dir) == expected_dir
    assert _stat(log_dir / "slurm-k8s-bridge-hooks.log") == ("0o640", "slurm", "slurm")
    assert _stat(tmp_path / "etc/slurm-k8s-bridge") == ("0o750", "root", "slurm")
