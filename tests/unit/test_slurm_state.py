"""tests/slurm_state.py, the job-state reader of the integration and e2e tests, on recorded JSON."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.slurm_state import job_state, job_state_in

DATA = Path(__file__).resolve().parents[1] / "data" / "slurm"


def _load(file: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((DATA / file).read_text())
    return loaded


@pytest.mark.parametrize(
    ("file", "job", "state"),
    [
        # 22.05: job_state is the string scontrol prints.
        ("v22.05/squeue-states.json", 1, "CONFIGURING"),
        ("v22.05/squeue-states.json", 2, "RUNNING"),
        # 24.11: ["RUNNING", "CONFIGURING", "POWER_UP_NODE"] reads as scontrol's JobState.
        ("v24.11/squeue-states.json", 1, "CONFIGURING"),
        ("v24.11/squeue-states.json", 2, "RUNNING"),
        # 26.05 (data_parser v0.0.45): the same list.
        ("v26.05/squeue-states.json", 1, "CONFIGURING"),
        ("v26.05/squeue-states.json", 2, "RUNNING"),
        ("v22.05/squeue-states.json", 3, ""),
        ("v24.11/squeue-states.json", 3, ""),
        ("v26.05/squeue-states.json", 3, ""),
    ],
)
def test_recorded_job_states(file: str, job: int, state: str) -> None:
    assert job_state_in(_load(file), job) == state


@pytest.mark.parametrize(
    ("job_state_field", "state"),
    [
        ("completed", "COMPLETED"),
        (["COMPLETED"], "COMPLETED"),
        (["COMPLETED", "COMPLETING"], "COMPLETING"),
        (["PENDING", "REQUEUED"], "REQUEUED"),
        (["RUNNING", "POWER_UP_NODE"], "RUNNING"),
        (["FAILED", "COMPLETING", "REQUEUED"], "COMPLETING"),
    ],
)
def test_flags_read_as_scontrol_prints_them(job_state_field: object, state: str) -> None:
    doc = {"jobs": [{"job_id": 7, "job_state": job_state_field}]}
    assert job_state_in(doc, 7) == state


@pytest.mark.parametrize(
    "doc",
    [{"errors": [{"error": "Invalid job id specified"}], "jobs": []}, {}, {"jobs": None}],
)
def test_no_such_job_is_empty(doc: dict[str, Any]) -> None:
    assert job_state_in(doc, 7) == ""


@pytest.mark.parametrize("malformed", [[], None, 3, [1, 2]])
def test_malformed_job_state_is_refused(malformed: object) -> None:
    with pytest.raises(AssertionError, match="job 7: job_state"):
        job_state_in({"jobs": [{"job_id": 7, "job_state": malformed}]}, 7)


def _slurm(replies: dict[str, str]) -> tuple[list[tuple[str, ...]], Any]:
    calls: list[tuple[str, ...]] = []

    def run(*argv: str) -> str:
        calls.append(argv)
        return replies.get(argv[0], "")

    return calls, run


def test_scontrol_json_is_asked_first() -> None:
    # 24.11's scontrol --json show job prints the same "jobs" list as its squeue --json.
    recorded = (DATA / "v24.11" / "squeue-states.json").read_text()
    calls, run = _slurm({"scontrol": recorded})
    assert job_state(run, 2) == "RUNNING"
    assert calls == [("scontrol", "--json", "show", "job", "2")]


def test_squeue_json_where_scontrol_has_no_json() -> None:
    # 22.05: scontrol rejects --json (nothing on stdout), squeue --json answers.
    recorded = (DATA / "v22.05" / "squeue-states.json").read_text()
    calls, run = _slurm({"squeue": recorded})
    assert job_state(run, 1) == "CONFIGURING"
    assert calls == [
        ("scontrol", "--json", "show", "job", "1"),
        ("squeue", "--json", "--states=all", "--jobs=1"),
    ]


def test_no_answer_at_all_is_empty() -> None:
    _, run = _slurm({"scontrol": "slurm_load_jobs error: Unable to contact slurm controller"})
    assert job_state(run, 1) == ""
