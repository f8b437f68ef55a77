"""The unit suite gives the same answers whatever the caller's shell exports."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
#: The files whose tests once read the caller's SLURM_CONF, KUBECONFIG or SKB_* settings.
AFFECTED = (
    "tests/unit/test_cli.py",
    "tests/unit/test_config.py",
    "tests/unit/test_doctor.py",
    "tests/unit/test_slurm_cli.py",
)
#: What an admin's shell on a Slurm head node might export: valid values that would change
#: answers (namespace, socket) and one that no configuration field accepts.
CALLER_ENVIRONMENT = {
    "SLURM_CONF": "/etc/slurm/from-the-callers-shell.conf",
    "KUBECONFIG": "/nonexistent/from-the-callers-shell/kubeconfig",
    "SKB_KUBERNETES_NAMESPACE": "from-the-callers-shell",
    "SKB_BRIDGE_SOCKET": "/nonexistent/from-the-callers-shell.sock",
    "SKB_SLURM_CONF_SERVER": "from-the-callers-shell:6817",
    "SKB_CLUSTER_NAME": "from-the-callers-shell",
    "SKB_SLURM_BIN": "/nonexistent",
    "SKB_SOCKET": "unix:/nonexistent/from-the-callers-shell.sock",
    "SKB_HOOKS_ENV": "/nonexistent/hooks.env",
}


@pytest.mark.slow
def test_affected_unit_tests_pass_with_the_callers_settings_exported() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *AFFECTED],
        env={**os.environ, **CALLER_ENVIRONMENT},
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
