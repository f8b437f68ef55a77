"""Hook programs run the way slurmctld starts them, for the hook and hook-client tests."""

from __future__ import annotations

import subprocess
from pathlib import Path


def run_as_slurmctld(
    argv: list[str], env: dict[str, str], cwd: Path, *, stderr_closed: bool = False
) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` with only ``env`` set and, with ``stderr_closed``, file descriptor 2 closed:
    slurmctld starts its programs so, and a hook must not fail on either."""
    if stderr_closed:
        argv = ["/bin/sh", "-c", '"$0" "$@" 2>&-', *argv]
    return subprocess.run(
        argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=30, check=False
    )
