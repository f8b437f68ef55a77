"""bridge.domain.resume_file: the resume file of each Slurm series, and hostile ones refused."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from bridge.domain.resume_file import (
    MAX_DEPTH,
    MAX_JOBS,
    MAX_SIZE,
    ResumeJob,
    jobs_by_node,
    json_depth,
    resume_jobs,
)
from bridge.errors import HostlistError, InvalidInput

DATA = Path(__file__).resolve().parents[1] / "data" / "slurm"

# As slurmctld writes them (src/slurmctld/power_save.c of each series), trimmed to one job each.
SLURM_22_05 = {
    "all_nodes": "cpu-[0-1]",
    "jobs": [
        {"job_id": 3, "nodes": "cpu-[0-1]", "features": None, "extra": None},
        {"job_id": 4, "nodes": "cpu-1"},
    ],
}
SLURM_24_11 = {
    "all_nodes_resume": "cpu-[1-2]",
    "jobs": [
        {
            "job_id": 2,
            "nodes_alloc": "cpu-[0-2]",
            "nodes_resume": "cpu-[1-2]",
            "partition": "cpu",
            "features": None,
            "extra": None,
            "oversubscribe": "OK",
            "reservation": None,
        }
    ],
}
# A newer series with fields we do not know: they are ignored.
SLURM_26_05 = {
    "all_nodes_resume": "cpu-[1-2]",
    "version": {"major": 26, "minor": 5},
    "jobs": [
        {
            "job_id": 7,
            "nodes_alloc": "cpu-[1-2]",
            "nodes_resume": "cpu-[1-2]",
            "account": "a",
            "licenses": [],
            "het_job": {"offset": 0},
        }
    ],
}

VALID = [
    ("", {}),
    ("  \n", {}),
    ('{"jobs": []}', {}),
    (json.dumps(SLURM_22_05), {"cpu-0": [3], "cpu-1": [3, 4]}),
    (json.dumps(SLURM_24_11), {"cpu-1": [2], "cpu-2": [2]}),
    (json.dumps(SLURM_26_05), {"cpu-1": [7], "cpu-2": [7]}),
    # nodes_alloc only when nothing says which nodes resume; an empty nodes_resume wins.
    ('{"jobs": [{"job_id": 1, "nodes_alloc": "a[1-2]"}]}', {"a1": [1], "a2": [1]}),
    ('{"jobs": [{"job_id": 1, "nodes_resume": "", "nodes_alloc": "a1"}]}', {}),
    ('{"jobs": [{"job_id": 1, "nodes_resume": null, "nodes": "a1"}]}', {"a1": [1]}),
    ('{"jobs": [{"job_id": 1}]}', {}),
    ('{"jobs": [{"job_id": 1, "nodes": "a1,a1"}]}', {"a1": [1]}),
    ('{"jobs": [{"job_id": 4294967295, "nodes": "a1"}]}', {"a1": [4294967295]}),
    ('{"jobs": [{"job_id": 1, "nodes": "a\\"b"}]}', {'a"b': [1]}),  # strings keep their escapes
]


@pytest.mark.parametrize(("contents", "expected"), VALID)
def test_jobs_by_node(contents: str, expected: dict[str, list[int]]) -> None:
    assert jobs_by_node(contents) == expected


# What slurmctld wrote into $SLURM_RESUME_FILE (record.py): job 4 on cloud[1-2] (sbatch -N2),
# job 5 on cloud5 (sbatch -C big --exclusive). 22.05 writes job ids and nodes only; 24.11 adds
# partition and features but has no "exclusive"; 26.05 writes it (and priority, not kept).
RECORDED = [
    ("v22.05", "2-nodes", ResumeJob(4, ("cloud1", "cloud2"))),
    ("v22.05", "features-exclusive", ResumeJob(5, ("cloud5",))),
    ("v24.11", "2-nodes", ResumeJob(4, ("cloud1", "cloud2"), "debug", None, None)),
    ("v24.11", "features-exclusive", ResumeJob(5, ("cloud5",), "debug", "big", None)),
    ("v26.05", "2-nodes", ResumeJob(4, ("cloud1", "cloud2"), "debug", None, False)),
    ("v26.05", "features-exclusive", ResumeJob(5, ("cloud5",), "debug", "big", True)),
]


@pytest.mark.parametrize(
    ("series", "case", "job"), RECORDED, ids=[f"{r[0]}-{r[1]}" for r in RECORDED]
)
def test_recorded_resume_files(series: str, case: str, job: ResumeJob) -> None:
    contents = (DATA / series / f"resume-file-{case}.json").read_text()
    assert resume_jobs(contents) == [job]
    assert jobs_by_node(contents) == {node: [job.job_id] for node in job.nodes}


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({}, ResumeJob(1, ("a1",))),
        ({"partition": None, "features": None, "exclusive": None}, ResumeJob(1, ("a1",))),
        ({"exclusive": "USER"}, ResumeJob(1, ("a1",), exclusive=True)),
        ({"exclusive": "no"}, ResumeJob(1, ("a1",), exclusive=False)),
        # Another type in a later series: read as absent, the job and its nodes still count.
        ({"features": ["big"], "exclusive": 1, "partition": {}}, ResumeJob(1, ("a1",))),
        ({"priority": 4294967294, "het_job_offset": 0}, ResumeJob(1, ("a1",))),
    ],
)
def test_descriptive_fields(fields: dict[str, object], expected: ResumeJob) -> None:
    contents = json.dumps({"jobs": [{"job_id": 1, "nodes_resume": "a1", **fields}]})
    assert resume_jobs(contents) == [expected]


def nested(depth: int) -> str:
    return '{"jobs": [], "x": ' + "[" * (depth - 1) + "]" * (depth - 1) + "}"


INVALID = [
    ("{", "resume_file: not JSON: "),
    ("nope", "resume_file: not JSON: "),
    ("[]", "resume_file: must be a JSON object, got a list"),
    ("3", "resume_file: must be a JSON object, got 3"),
    ("{}", "resume_file: jobs: must be a list, got null"),
    ('{"jobs": {}}', "resume_file: jobs: must be a list, got an object"),
    ('{"jobs": [1]}', "resume_file: jobs[0]: must be an object, got 1"),
    ('{"jobs": [{"job_id": 1}, {}]}', "resume_file: jobs[1].job_id: must be a job id"),
    ('{"jobs": [{"job_id": "7"}]}', "jobs[0].job_id: must be a job id (1 to 4294967295), got '7'"),
    (
        '{"jobs": [{"job_id": true}]}',
        "jobs[0].job_id: must be a job id (1 to 4294967295), got true",
    ),
    ('{"jobs": [{"job_id": 1.5}]}', "jobs[0].job_id: must be a job id (1 to 4294967295), got 1.5"),
    ('{"jobs": [{"job_id": 0}]}', "jobs[0].job_id: must be a job id (1 to 4294967295), got 0"),
    ('{"jobs": [{"job_id": 4294967296}]}', "jobs[0].job_id: must be a job id"),
    ('{"jobs": [{"job_id": ' + "9" * 400 + "}]}", "got an integer of 1329 bits"),
    ('{"jobs": [{"job_id": ' + "9" * 5000 + "}]}", "resume_file: not JSON: "),
    ('{"jobs": [{"job_id": NaN}]}', "jobs[0].job_id: must be a job id (1 to 4294967295), got nan"),
    ('{"jobs": [{"job_id": 1, "nodes": 5}]}', "resume_file: jobs[0].nodes: must be a hostlist"),
    ('{"jobs": [{"job_id": 1, "nodes_resume": ["a1"]}]}', "jobs[0].nodes_resume: must be a host"),
    ('{"jobs": [{"job_id": 1, "nodes": "a[3-1]"}]}', "jobs[0].nodes: invalid range '3-1'"),
    (
        '{"jobs": [{"job_id": 1, "nodes": "a[1-50000]"}, {"job_id": 2, "nodes": "b[0-50000]"}]}',
        "resume_file: jobs[1].nodes: the jobs list more than 100000 nodes in all",
    ),
    (
        '{"jobs": [{"job_id": 1, "nodes": "a[0-9999]b[0-99]"}]}',
        "resume_file: jobs[0].nodes: hostlist 'a[0-9999]b[0-99]' has more than 100000 hosts",
    ),
    (nested(MAX_DEPTH + 1), f"resume_file: JSON nested {MAX_DEPTH + 1} levels deep, more than"),
    ("[" * 100_000, "resume_file: JSON nested 100000 levels deep"),
    ('{"jobs": []}' + " " * MAX_SIZE, f"more than the limit of {MAX_SIZE}"),
    # Jobs that wait for no node escape the node bound: counted before parsing.
    (
        '{"jobs": [' + ",".join(['{"job_id":1,"nodes":""}'] * (MAX_JOBS + 1)) + "]}",
        f"resume_file: {MAX_JOBS + 1} jobs, more than the limit of {MAX_JOBS}",
    ),
    (
        '{"jobs": [' + ",".join(["{}"] * (MAX_JOBS + 1)) + "]}",
        f"resume_file: {MAX_JOBS + 1} jobs, more than the limit of {MAX_JOBS}",
    ),
]


@pytest.mark.parametrize(("contents", "message"), INVALID)
def test_jobs_by_node_refuses(contents: str, message: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        jobs_by_node(contents)
    assert message in str(caught.value)
    assert len(str(caught.value)) < 300  # never the whole file


def test_hostlist_errors_stay_hostlist_errors() -> None:
    with pytest.raises(HostlistError, match=r"^resume_file: jobs\[0\]\.nodes_alloc: "):
        jobs_by_node('{"jobs": [{"job_id": 1, "nodes_alloc": "a[x]"}]}')


DEPTHS = [
    ("", 0),
    ("1", 0),
    ("[]", 1),
    ('{"a": [[1], {"b": []}]}', 4),
    ('["[[[", "\\"[[["]', 1),  # brackets in strings, escaped quotes too
    ('["\\\\", [[]]]', 3),  # an escaped backslash ends before the quote
    ('"unterminated [[[', 3),  # invalid JSON: still a bound, and parsing will refuse it
    ("]]][", 0),  # below zero is invalid JSON, and the parser stops at the first ']'
]


@pytest.mark.parametrize(("text", "depth"), DEPTHS)
def test_json_depth(text: str, depth: int) -> None:
    assert json_depth(text) == depth


@pytest.mark.parametrize(
    "contents",
    [
        nested(MAX_DEPTH),
        '{"jobs": [' + ",".join(['{"job_id": 1, "x": "[[[[["}'] * MAX_JOBS) + "]}",
        '{"jobs": [], "x": "' + "\\\\" * (MAX_SIZE // 2 - 20) + '"}',
    ],
    ids=["deepest-allowed", "many-jobs", "long-string"],
)
def test_large_files_parse_quickly(contents: str) -> None:
    start = time.monotonic()
    assert jobs_by_node(contents) == {}
    assert time.monotonic() - start < 10
