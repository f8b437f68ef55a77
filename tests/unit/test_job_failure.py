"""plan_job_failure: which jobs a fail-fast touches, which of their nodes are released, which
AdminComments are ours to write. A table of cases, as tests/unit/test_reconcile_plan.py."""

from __future__ import annotations

import pytest

from bridge.domain.job_failure import FailedJob, SlurmJob, nodes_to_release, plan_job_failure
from bridge.domain.nodes import SlurmNode


def node(name: str, state: str = "ALLOCATED", *flags: str) -> SlurmNode:
    return SlurmNode(name, state, frozenset(flags))


def starting(name: str) -> SlurmNode:
    """A CLOUD node Slurm is powering up for a job (``alloc#``)."""
    return node(name, "ALLOCATED", "CLOUD", "POWERING_UP")


def job(job_id: int, nodes: str, *states: str, comment: str = "") -> SlurmJob:
    return SlurmJob(job_id, frozenset(states or ("CONFIGURING",)), nodes, comment)


def owns_cpu(name: str) -> bool:
    return name.startswith("cpu-")


@pytest.mark.parametrize(
    ("failed", "jobs", "nodes", "expected"),
    [
        pytest.param(
            ["cpu-1"],
            [job(7, "cpu-[0-1]")],
            [starting("cpu-0"), starting("cpu-1")],
            [FailedJob(7, ("cpu-1",), ("cpu-0",), True)],
            id="two-node-job-other-node-released",
        ),
        pytest.param(
            ["cpu-1"],
            [job(7, "cpu-[0-1]", "RUNNING", "CONFIGURING", "POWER_UP_NODE")],
            [starting("cpu-0"), starting("cpu-1")],
            [FailedJob(7, ("cpu-1",), ("cpu-0",), True)],
            id="24.11-state-list",
        ),
        pytest.param(
            ["cpu-1"],
            [job(7, "cpu-[0-1]")],
            [node("cpu-0", "ALLOCATED", "CLOUD"), starting("cpu-1")],
            [FailedJob(7, ("cpu-1",), (), True)],
            id="registered-node-kept",
        ),
        pytest.param(
            ["cpu-1"],
            [job(7, "cpu-[0-1],static-0")],
            [starting("cpu-0"), starting("cpu-1"), node("static-0", "ALLOCATED", "POWERING_UP")],
            [FailedJob(7, ("cpu-1",), ("cpu-0",), True)],
            id="node-of-no-pool-kept",
        ),
        pytest.param(
            ["cpu-1"],
            [job(7, "cpu-[0-1]")],
            [node("cpu-0", "ALLOCATED", "POWERING_UP"), starting("cpu-1")],
            [FailedJob(7, ("cpu-1",), (), True)],
            id="not-cloud-kept",
        ),
        pytest.param(
            ["cpu-1"],
            [job(7, "cpu-[0-1]")],
            [starting("cpu-1")],
            [FailedJob(7, ("cpu-1",), (), True)],
            id="node-not-in-snapshot-kept",
        ),
        pytest.param(
            ["cpu-2"],
            [job(7, "cpu-[0-2]"), job(8, "cpu-0", "RUNNING")],
            [starting("cpu-0"), starting("cpu-1"), starting("cpu-2")],
            [FailedJob(7, ("cpu-2",), ("cpu-1",), True)],
            id="node-of-another-live-job-kept",
        ),
        pytest.param(
            ["cpu-2"],
            [job(7, "cpu-[0-2]"), job(8, "cpu-0", "COMPLETED"), job(9, "", "PENDING")],
            [starting("cpu-0"), starting("cpu-1"), starting("cpu-2")],
            [FailedJob(7, ("cpu-2",), ("cpu-0", "cpu-1"), True)],
            id="finished-and-pending-jobs-hold-nothing",
        ),
        pytest.param(
            ["cpu-1", "cpu-3"],
            [job(7, "cpu-[0-1]"), job(8, "cpu-[2-3]")],
            [starting(f"cpu-{i}") for i in range(4)],
            [
                FailedJob(7, ("cpu-1",), ("cpu-0",), True),
                FailedJob(8, ("cpu-3",), ("cpu-2",), True),
            ],
            id="two-jobs-each-released",
        ),
        pytest.param(
            ["cpu-0", "cpu-1"],
            [job(7, "cpu-[0-2]")],
            [starting("cpu-0"), starting("cpu-1"), starting("cpu-2")],
            [FailedJob(7, ("cpu-0", "cpu-1"), ("cpu-2",), True)],
            id="failed-nodes-never-released",
        ),
        pytest.param(
            ["cpu-1"],
            [job(7, "cpu-[0-1]", comment="k8s: NoCapacity: earlier")],
            [starting("cpu-0"), starting("cpu-1")],
            [FailedJob(7, ("cpu-1",), ("cpu-0",), True)],
            id="our-admin-comment-replaced",
        ),
        pytest.param(
            ["cpu-1"],
            [job(7, "cpu-[0-1]", comment="ticket 42: keep")],
            [starting("cpu-0"), starting("cpu-1")],
            [FailedJob(7, ("cpu-1",), ("cpu-0",), False)],
            id="admins-admin-comment-kept",
        ),
        pytest.param(
            ["cpu-1"],
            [job(7, "cpu-0"), job(8, "cpu-1", "REQUEUED")],
            [starting("cpu-0"), starting("cpu-1")],
            [],
            id="no-live-job-on-the-failed-node",
        ),
        pytest.param(["cpu-1"], [], [starting("cpu-1")], [], id="no-jobs"),
    ],
)
def test_plan_job_failure(
    failed: list[str], jobs: list[SlurmJob], nodes: list[SlurmNode], expected: list[FailedJob]
) -> None:
    assert plan_job_failure(failed, jobs, nodes, owns_cpu) == expected


@pytest.mark.parametrize(
    ("states", "nodes", "holds"),
    [
        ({"CONFIGURING"}, "cpu-0", True),  # 22.05: one string, the flag scontrol shows
        ({"RUNNING", "CONFIGURING", "POWER_UP_NODE"}, "cpu-0", True),
        ({"RUNNING"}, "cpu-0", True),
        ({"COMPLETING"}, "cpu-0", True),
        ({"SUSPENDED"}, "cpu-0", True),
        ({"PENDING"}, "", False),
        ({"PENDING", "REQUEUED"}, "cpu-0", False),
        ({"COMPLETED"}, "cpu-0", False),
        ({"RUNNING"}, "", False),
    ],
)
def test_which_jobs_hold_their_nodes(states: set[str], nodes: str, holds: bool) -> None:
    assert SlurmJob(1, frozenset(states), nodes).holds_nodes is holds


def test_nodes_to_release_lists_each_node_once_in_order() -> None:
    jobs = [
        FailedJob(7, ("cpu-3",), ("cpu-1", "cpu-0"), True),
        FailedJob(8, ("cpu-3",), ("cpu-0", "cpu-2"), False),
    ]
    assert nodes_to_release(jobs) == ["cpu-1", "cpu-0", "cpu-2"]
