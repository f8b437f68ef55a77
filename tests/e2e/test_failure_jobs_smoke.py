"""A short `make bench` failure-path row: dev/bench/failure_jobs.py with 50 jobs queued.

The full count (9,000 jobs) is a `make bench` row; this smoke runs the same program against the
ground's real slurmctld, so the read the bridge does on a fail-fast (issue 29 item 12) is proven
filtered by slurmctld itself: with 50 held jobs in the queue, none of them on the failing node,
it reads nothing at all; and the jobs are gone afterwards.
"""

from __future__ import annotations

import re

import pytest

from tests.cluster import run_bench
from tests.conftest import ProvingGround

pytestmark = pytest.mark.e2e
JOBS = 50


@pytest.mark.slow
def test_the_failure_path_reads_only_the_failing_node_s_jobs(
    proving_ground: ProvingGround,
) -> None:
    output = run_bench("failure_jobs.py", f"--jobs={JOBS}", timeout=600)
    row = re.search(
        r"(\d[\d,]*) jobs queued \(peak RSS\) \| (\d+) MiB \(([\d,]+) B read\) \| (\d+) MiB "
        r"\(([\d,]+) B, ([\d,]+) jobs listed",
        output,
    )
    assert row, output
    queued, read, listed_by_json = (int(row[i].replace(",", "")) for i in (1, 3, 6))
    assert queued == JOBS, output
    assert read == 0, output  # no job holds the failing node: slurmctld printed nothing
    if proving_ground.series == "22.05":
        # What the bridge read before: 22.05's --json lists every job whatever the filter.
        assert listed_by_json >= JOBS, output
    else:
        assert listed_by_json == 0, output  # later series honour --nodelist with --json too
    left = proving_ground.slurm("squeue", "--noheader", "--name=skb-bench-queued")
    assert left.strip() == "", left
