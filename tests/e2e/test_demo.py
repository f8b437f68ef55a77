"""`make demo`, the project's main job, run as a user runs it, on the test session's ground.

It must exit 0 only when it showed the whole cycle (every job completed, every node it woke
suspended again) and a fail fast (Kubernetes' reason in ``sinfo -R``), and end with the bridge's
metrics: each family of issue 13 listed with a non-zero count (a gauge: its peak).
"""

from __future__ import annotations

import re
import subprocess
import sys
import time

import pytest

from tests.cluster import pods, wait_for
from tests.conftest import ProvingGround, Use

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

#: The metric families `make demo` ends with, as a Prometheus scrape names their samples.
FAMILIES = (
    "rpc_calls_total",
    "resume_latency_seconds_count",
    "pods",
    "nodes",
    "fail_fast_total",
    "reconcile_pass_seconds_count",
    "reconcile_actions_total",
    "backend_errors_total",
    "backend_retries_total",
    "pod_state_patches_total",
)


def test_make_demo_shows_the_cycle_a_fail_fast_and_the_metrics(
    proving_ground: ProvingGround, use: Use
) -> None:
    pg = proving_ground
    # Every node the demo may wake: its jobs leave the choice to Slurm.
    use("cpu-[0-15],big-[0-3],broken-[0-1]")
    env = {
        **pg.env,
        "PYTHONPATH": str(pg.layout.root / "dev"),
        # The demo brings the ground up: the one running, not another series.
        "SKB_SLURM": pg.series,
        "SKB_AUTH": pg.auth,
    }
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "proving_ground", "demo"],
        cwd=pg.layout.root,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    out = done.stdout
    print(out)
    assert done.returncode == 0, out + done.stderr
    completed = re.search(r"jobs completed: (\d+)/(\d+);", out)
    assert completed and completed.group(1) == completed.group(2), out
    # The job that arrived while kube-apiserver hung woke a node, and ran once it answered.
    assert re.search(r"the bridge counted [1-9]\d* Kubernetes call errors \+ retries", out), out
    failed = re.search(r"sinfo -R: (broken-\d) k8s: ErrImageNeverPull: ", out)
    assert failed, out
    assert re.search(r"fail fast: broken-\d DOWN \d+\.\d+s after the start", out), out
    metrics = out[out.index("==> the bridge's metrics") :]
    for family in FAMILIES:
        # A counter's total, a histogram's count, or a gauge's peak while the demo ran.
        found = re.search(rf"^  slurm_k8s_bridge_{family}\s+(\d+)(?:  peak (\d+))?", metrics, re.M)
        assert found, f"{family} is not in the demo's metrics:\n{metrics}"
        assert int(found.group(2) or found.group(1)) > 0, f"{family} counted nothing"
    # The failing pool's node returns to idle~ by itself after the hold, with no pod.
    node = failed.group(1)
    wait_for(f"no pod for {node}", lambda: node not in pods(pg) or None, 60, every=1)
    print(f"make demo: {time.monotonic() - started:.0f}s; exit status {done.returncode}")
