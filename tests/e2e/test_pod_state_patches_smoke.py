"""A short `make bench` pod-state row: dev/bench/pod_state_patches.py at 50 kwok nodes.

The full count (1,000 nodes) is a `make bench` row; this smoke runs the same program, exactly as
the bench does, so the harness, the bridge's own patch counter and the ground's kwok stages (no
second writer of the readiness gate) are proven on every test run.
"""

from __future__ import annotations

import time

import pytest

from tests.cluster import run_bench
from tests.conftest import ProvingGround

pytestmark = pytest.mark.e2e
NODES = 50


@pytest.mark.slow
def test_fifty_pods_cost_one_patch_per_transition_and_none_when_quiet(
    proving_ground: ProvingGround,
) -> None:
    del proving_ground  # started by the fixture; the bench adds its own second cluster
    started = time.monotonic()
    output = run_bench(
        "pod_state_patches.py", f"--nodes={NODES}", "--phase-timeout=180", timeout=600
    )
    rows = {
        line.split("  ")[0]: line.split()
        for line in output.splitlines()
        if line[:1].isdigit() and " " in line
    }
    assert set(rows) == {"1 power_up", "2 drain", "3 quiet", "4 power_down_force"}, output
    # Power up: every pod gets its label and condition, by one bridge patch each.
    power_up = rows["1 power_up"]
    assert power_up[3:6] == [f"{NODES}/{NODES}", f"{NODES}/{NODES}", f"{NODES},"], output
    assert all(r[-1] == "yes" for r in rows.values()), output
    print(f"pod-state patch smoke: {time.monotonic() - started:.0f}s")
