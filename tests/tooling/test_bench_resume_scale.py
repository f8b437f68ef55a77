"""`make bench`'s scale rows and ``resume_scale.py --explain``: the parts that need no ground.

The bench times the bridge's last create from its own log, so the bridge's real text format
writes the lines parsed here; the tables are checked for what they report (min / median / max,
the ratio of the medians), since the issue's must-show reads them.
"""

from __future__ import annotations

import io
import json
import logging
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "dev" / "bench"))

import resume_scale
from resume_scale import Breakdown, Results, Timing

from bridge.domain.gangs import job_gangs
from bridge.domain.resume_file import resume_jobs
from bridge.runtime.log_format import configure_logging


def test_the_bridges_created_lines_are_read_at_their_instant(tmp_path: Path) -> None:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    stream = io.StringIO()
    try:
        configure_logging("text")  # the serve process's own format
        handler = root.handlers[0]
        assert isinstance(handler, logging.StreamHandler)
        handler.setStream(stream)
        log = logging.getLogger("bridge.service.use_cases")
        log.info("request r1: pod scale-1 created (jobs 7)")
        log.info("request r1: pod scale-2 exists already (jobs 7)")
        logged_at = time.monotonic()
        log.info("request r1: pod scale-3 created (jobs -)")
    finally:
        root.handlers[:], root.level = handlers, level
    earlier = "2026-12-06 10:00:00,000 INFO x: request r0: pod scale-0 created (jobs 1)\n"
    path = tmp_path / "bridge.log"
    path.write_text(earlier + stream.getvalue())
    instants = resume_scale.created_log_instants(path, len(earlier))
    assert len(instants) == 2  # created, not "exists already"; nothing before the offset
    # The log has milliseconds; the wall and monotonic clocks are read a moment apart.
    assert abs(instants[1] - logged_at) < 0.1


@pytest.mark.parametrize(
    ("values", "shown"),
    [
        ([2.5], "2.50 s"),
        ([3.0, 1.0, 2.0], "1.00 / 2.00 / 3.00 s (min / median / max of 3)"),
    ],
)
def test_spread(values: list[float], shown: str) -> None:
    assert resume_scale.spread(values) == shown


def test_the_scale_table_reports_each_runs_spread_and_the_ratio_of_medians() -> None:
    timings = tuple(
        [Timing("bridge", 1000, s, 2.0) for s in (2.0, 3.0, 9.0)]
        + [Timing("lean", 1000, s, 1.0) for s in (1.0, 2.0, 2.5)]
    )
    lines = resume_scale.table_lines(Results(timings, ()))
    resume = [line for line in lines if line[0].startswith("resume 1,000")]
    assert resume == [
        (
            "resume 1,000 nodes via the hook → all pods exist",
            "2.00 / 3.00 / 9.00 s (min / median / max of 3)",
            "1.00 / 2.00 / 2.50 s (min / median / max of 3), " + resume_scale.DESCRIPTIONS["lean"],
            "1.50x (each round: 2.00 / 1.50 / 3.60)",
        )
    ]


def test_the_explain_table_has_a_line_per_variant_measured() -> None:
    found = [
        Breakdown("lean", 2.0, 1.9, {"kube-apiserver": 3.0, "the creator": 0.4}),
        Breakdown("lean", 3.0, 2.9, {"kube-apiserver": 4.0, "the creator": 0.6}),
        Breakdown("bridge", 2.5, 2.4, {"kube-apiserver": 3.5, "bridge": 0.9}),
    ]
    lines = resume_scale.explain_lines(found)
    assert lines[1:] == [
        "lean | 2.00 / 2.50 / 3.00 | 1.90 / 2.40 / 2.90 | kube-apiserver 3.50, the creator 0.50",
        "bridge | 2.50 / 2.50 / 2.50 | 2.40 / 2.40 / 2.40 | kube-apiserver 3.50, bridge 0.90",
    ]


@pytest.mark.parametrize(
    ("ours", "theirs", "cell"),
    [
        ([2.0], [1.0], "2.00x"),
        ([2.0, 4.0], [2.0, 2.0], "1.50x (each round: 1.00 / 2.00)"),
        # A contender that lost a round: no pairing to trust, the medians only.
        ([2.0, 4.0, 3.0], [2.0, 2.0], "1.50x"),
    ],
)
def test_the_ratio_cell_pairs_rounds_only_when_each_contender_ran_every_round(
    ours: list[float], theirs: list[float], cell: str
) -> None:
    assert resume_scale.ratio_cell(ours, theirs) == cell


@pytest.mark.parametrize(
    ("hostlist", "jobs"),
    [
        ("scale-7", {1: ("scale-7",)}),
        ("scale-[3-5]", {1: ("scale-3",), 2: ("scale-4",), 3: ("scale-5",)}),
    ],
)
def test_the_bench_resumes_one_one_node_job_per_node_so_its_pods_join_no_gang(
    hostlist: str, jobs: dict[int, tuple[str, ...]]
) -> None:
    """The baselines create plain pods; a job of N nodes would put the bridge's in a PodGroup
    (seen: ``pod group skb-job-1-scale-… created: … (minCount 1000)``, the scheduler's CPU
    2.8x lean's in the same run)."""
    parsed = resume_jobs(json.dumps(resume_scale.resume_file_of(hostlist)))
    assert {job.job_id: tuple(job.nodes) for job in parsed} == jobs
    pool_of_node = {node: resume_scale.POOL for nodes in jobs.values() for node in nodes}
    assert job_gangs(parsed, pool_of_node, "x") == []
