"""What the service reads from Slurm, and how it writes (issue 33, items 1 and 2).

A pass reads the nodes the pools own and those a pod of ours still holds, never every node of
the cluster (1.5 s and 25 MB of JSON at a site of 10,000 static nodes); the failure paths read
no listing of their own and the jobs once, not once a reason; writes go one per distinct value.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

import pytest

from bridge.config import parse_config
from bridge.domain.job_failure import SlurmJob
from bridge.domain.nodes import SlurmNode
from bridge.domain.pods import PodFailure
from bridge.domain.reason import Reason
from bridge.domain.reconcile import DeletePod, MarkDown, PowerDownAsap
from bridge.errors import BridgeError, Forbidden, InvalidInput
from tests.unit import test_service_breaker
from tests.unit.test_service import CONFIG, NOW, POOL_NODES, World, cloud, powering_up

STARTING = frozenset({"RUNNING", "CONFIGURING", "POWER_UP_NODE"})
#: A node label no hostlist can carry (more digits than Slurm reads): no Slurm node has it.
UNCARRIABLE = "x" + "9" * 21


@dataclass(frozen=True)
class Observed:
    """Slurm's nodes and the nodes with a pod of ours; what a pass asks Slurm for, read by
    read, and which nodes it then plans with."""

    slurm: tuple[SlurmNode, ...]
    pods: tuple[str, ...]
    reads: tuple[tuple[str, ...], ...]
    planned: tuple[str, ...]


OBSERVE = [
    pytest.param(
        Observed(
            slurm=(cloud("cpu-0"), cloud("gpu-1"), cloud("other-0"), SlurmNode("static-0", "IDLE")),
            pods=(),
            reads=(POOL_NODES,),
            planned=("cpu-0", "gpu-1"),
        ),
        id="the-pools-nodes-only",
    ),
    pytest.param(
        Observed(
            slurm=(SlurmNode("cpu-1", "ALLOCATED"), cloud("cpu-0")),
            pods=(),
            reads=(POOL_NODES,),
            planned=("cpu-0",),
        ),
        id="a-static-node-with-a-pool-name-is-read-not-planned",
    ),
    pytest.param(
        Observed(
            slurm=(cloud("old-3", "ALLOCATED"), cloud("old-4", "ALLOCATED")),
            pods=("old-3",),
            reads=(POOL_NODES, ("old-3",)),
            planned=("old-3",),
        ),
        id="a-node-no-pool-owns-with-a-pod-of-ours",
    ),
    pytest.param(
        Observed(slurm=(), pods=(UNCARRIABLE,), reads=(POOL_NODES,), planned=()),
        id="a-pod-named-as-no-slurm-node-can-be",
    ),
]


@pytest.mark.parametrize("case", OBSERVE)
def test_a_pass_reads_the_pools_nodes_and_those_with_a_pod_of_ours(case: Observed) -> None:
    w = World(*case.slurm)
    for node in case.pods:
        w.pods.add(node)
    nodes, _, _, _ = w.service.observe()
    assert tuple(n.name for n in nodes) == case.planned
    assert tuple(w.slurm.filtered_reads) == case.reads
    assert w.slurm.full_reads == 0


def test_a_node_a_reload_took_from_its_pool_is_drained_not_orphaned() -> None:
    """cpu-3 runs a job on its pod when a reload shrinks the pool to cpu-[0-1]: the pass
    still reads it (it has a pod of ours), so the plan drains it through Slurm instead of
    deleting its pod under the job."""
    w = World(cloud("cpu-3", "ALLOCATED"))
    w.pods.add("cpu-3", created_at=NOW - timedelta(hours=1))
    w.service.replace_pools(parse_config(CONFIG.replace("cpu-[0-3]", "cpu-[0-1]")).pools)
    actions = w.service.reconcile_once()
    assert [type(a) for a in actions if a.node == "cpu-3"] == [PowerDownAsap]
    assert not [a for a in actions if isinstance(a, DeletePod)]
    assert [u.state for u in w.slurm.updates] == ["power_down_asap"]
    assert w.slurm.filtered_reads == [("cpu-0", "cpu-1", "gpu-0", "gpu-1"), ("cpu-3",)]
    assert w.slurm.full_reads == 0


@pytest.mark.parametrize(
    "call",
    [
        lambda w: w.service.reconcile_once(),
        lambda w: w.service.resume("cpu-[0-1]", "", "r1"),
    ],
    ids=["reconcile", "refused-resume"],
)
def test_a_static_node_with_a_pool_name_is_never_touched(call: Callable[[World], object]) -> None:
    """A pool's hostlist covers cpu-1, which slurm.conf defines as the site's own (not CLOUD)
    node: the bridge reads it with the pool's nodes and leaves it alone."""
    w = World(SlurmNode("cpu-1", "ALLOCATED"), *powering_up("cpu-0"))
    w.pods.create_errors.update({"cpu-0": Forbidden("psa"), "cpu-1": Forbidden("psa")})
    call(w)
    assert not [u for u in w.slurm.updates if "cpu-1" in u.nodes]
    assert "cpu-1" not in w.pods.pods
    assert w.slurm.full_reads == 0


def _failing_pass(w: World) -> None:
    w.pods.add("cpu-0", failure=PodFailure("ErrImagePull", "pull access denied"))
    w.pods.add("cpu-1", failure=PodFailure("InvalidImageName", "bad name"))
    w.service.reconcile_once()


def _execute_without_a_snapshot(w: World) -> None:
    w.pods.add("cpu-1", phase="Pending", failure=PodFailure("ErrImagePull", "denied"))
    w.service.execute([MarkDown("cpu-1", Reason("ErrImagePull", "denied"))])


def _refused_resume(w: World) -> None:
    w.pods.create_errors.update({"cpu-0": Forbidden("psa"), "cpu-1": InvalidInput("bad spec")})
    w.service.resume("cpu-[0-1]", "", "r1")


@pytest.mark.parametrize(
    ("call", "reads"),
    [
        # The pass's snapshot serves its failures; the nodes to set DOWN are read again by name.
        (_failing_pass, [POOL_NODES, ("cpu-0", "cpu-1")]),
        # No pass: the node to set DOWN by name, then the pools' nodes its job could release.
        (_execute_without_a_snapshot, [("cpu-1",), POOL_NODES]),
        # A refused create: one read of the pools' nodes for both reasons.
        (_refused_resume, [POOL_NODES]),
        (lambda w: w.service.list_nodes(""), [POOL_NODES]),
        (lambda w: w.service.list_nodes("cpu-1,other-[0-1]"), [("cpu-1", "other-0", "other-1")]),
    ],
    ids=["failing-pass", "execute", "refused-resume", "status", "status-of-a-hostlist"],
)
def test_no_path_lists_every_node_of_the_cluster(
    call: Callable[[World], object], reads: list[tuple[str, ...]]
) -> None:
    w = World(*powering_up("cpu-0", "cpu-1"), cloud("other-0"), SlurmNode("static-0", "IDLE"))
    w.slurm.jobs[7] = SlurmJob(7, STARTING, "cpu-[0-1]")
    call(w)
    assert w.slurm.filtered_reads == reads
    assert w.slurm.full_reads == 0


def test_a_paused_pool_reads_only_the_nodes_it_refuses() -> None:
    w = test_service_breaker.World()
    w.pause_cpu()
    w.slurm.filtered_reads.clear()
    w.service.resume("cpu-2", "", "r2")
    assert w.slurm.filtered_reads == [("cpu-2",)]
    assert w.slurm.full_reads == 0


def test_a_refused_resume_of_two_reasons_reads_the_jobs_once() -> None:
    """Issue 33: the resume path read squeue once a distinct reason, as the pass did before
    issue 29 item 12."""
    w = World(*powering_up("cpu-0", "cpu-1", "cpu-2"))
    w.slurm.jobs[7] = SlurmJob(7, STARTING, "cpu-[0-2]")
    w.pods.create_errors.update({"cpu-1": Forbidden("psa"), "cpu-2": InvalidInput("bad spec")})
    w.service.resume("cpu-[0-2]", "", "r1")
    assert [u.state for u in w.slurm.updates].count("down") == 2
    # One read covers both failed nodes and the one the job could release; a release reads
    # its node once more after the DOWN (another job may have taken it meanwhile).
    assert w.slurm.jobs_reads[0] == ("cpu-1", "cpu-2", "cpu-0")
    assert all(read == ("cpu-0",) for read in w.slurm.jobs_reads[1:]), w.slurm.jobs_reads


@pytest.mark.parametrize(
    ("errors", "writes"),
    [
        (
            {"cpu-1": Forbidden("psa"), "cpu-3": Forbidden("psa")},
            [
                "slurm admincomment 7,8 'k8s: Forbidden: psa'",
                "slurm down cpu-1,cpu-3",
                "slurm power_down_force cpu-0,cpu-2",
            ],
        ),
        (
            {"cpu-1": Forbidden("psa"), "cpu-3": InvalidInput("bad spec")},
            [
                "slurm admincomment 7 'k8s: Forbidden: psa'",
                "slurm down cpu-1",
                "slurm power_down_force cpu-0",
                "slurm admincomment 8 'k8s: InvalidInput: bad spec'",
                "slurm down cpu-3",
                "slurm power_down_force cpu-2",
            ],
        ),
    ],
    ids=["one-reason", "two-reasons"],
)
def test_a_fail_fast_writes_once_per_distinct_value(
    errors: dict[str, BridgeError], writes: list[str]
) -> None:
    w = World(*powering_up("cpu-0", "cpu-1", "cpu-2", "cpu-3"))
    w.slurm.jobs[7] = SlurmJob(7, STARTING, "cpu-[0-1]")
    w.slurm.jobs[8] = SlurmJob(8, STARTING, "cpu-[2-3]")
    w.pods.create_errors.update(errors)
    w.service.resume("cpu-[0-3]", "", "r1")
    assert [line for line in w.journal if line.startswith("slurm")] == writes
