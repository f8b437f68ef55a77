"""A short `make chaos`: one storm round of 20 kwok nodes with every fault kind for 5 s each.

The full run (`make chaos`: rounds of 200+ nodes, 60 s faults) is too long for `make test`; this
smoke proves the harness and the bridge's behaviour under each fault on every test run. It runs
``dev/bench/chaos.py`` as a program, exactly as `make chaos` does, and needs every count at 0.
"""

from __future__ import annotations

import time

import pytest

from tests.cluster import run_bench
from tests.conftest import ProvingGround

pytestmark = pytest.mark.e2e


@pytest.mark.slow
def test_one_round_of_faults_leaves_no_orphans_duplicates_or_stuck_nodes(
    proving_ground: ProvingGround,
) -> None:
    started = time.monotonic()
    output = run_bench(
        "chaos.py",
        "--rounds=1",
        "--nodes=20",
        "--fault-seconds=5",
        "--faults-per-round=4",
        "--real-jobs=2",
        "--settle-seconds=120",
        "--seed=11",
        timeout=420,
    )
    table = output[output.index("chaos: results") :]
    for row in (
        "orphan pods",
        "duplicate pods",
        "POWERING_UP past ResumeTimeout",
        "nodes DOWN without a reason",
        "pods wrongly deleted while allocated",
    ):
        (line,) = [x for x in table.splitlines() if x.startswith(row)]
        assert line.split()[-1] == "0", table
    assert "bridge_sigkill 1, bridge_sigstop 1, apiserver_sigstop 1, slurmctld_restart 1" in table
    assert time.monotonic() - started < 300, f"the smoke took {time.monotonic() - started:.0f}s"
