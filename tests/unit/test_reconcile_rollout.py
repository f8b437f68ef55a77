"""Template rollouts in the reconcile plan, as a table: a pod of an older template is replaced
through Slurm (``PowerDownAsap``: drained, powered down once idle, resumed on the new template),
never by deleting a pod under a job."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import pytest

from bridge.domain.nodes import SlurmNode
from bridge.domain.pods import PodView
from bridge.domain.reason import Reason
from bridge.domain.reconcile import Action, DeletePod, MarkDown, PowerDownAsap, plan
from tests.unit.fakes import FakePods, FakeSlurm
from tests.unit.test_reconcile_plan import ADMIN, DELETED, GUARDS, NOW, POOLS, core, node, pod

OLD, NEW = "0123456789", "abcdef0123"
CURRENT = {"cpu": NEW}
ROLL = "k8s: Rollout: pool cpu template 0123456789 -> abcdef0123"


def on(template_hash: str, view: PodView) -> PodView:
    return dataclasses.replace(view, template_hash=template_hash)


@dataclass(frozen=True)
class Case:
    id: str
    nodes: list[SlurmNode]
    pods: list[PodView]
    actions: list[Action]
    current: dict[str, str] = field(default_factory=lambda: dict(CURRENT))


CASES = [
    Case(
        "idle+old-template:power-down-asap",
        [node("cpu-0")],
        [on(OLD, pod("cpu-0"))],
        [PowerDownAsap("cpu-0", ROLL)],
    ),
    # Slurm powers it down once the job ends: the job runs on, on the old pod.
    Case(
        "busy+old-template:power-down-asap-after-the-job",
        [node("cpu-0", "ALLOCATED")],
        [on(OLD, pod("cpu-0"))],
        [PowerDownAsap("cpu-0", ROLL)],
    ),
    Case(
        "mixed+old-template:power-down-asap",
        [node("cpu-0", "MIXED")],
        [on(OLD, pod("cpu-0"))],
        [PowerDownAsap("cpu-0", ROLL)],
    ),
    Case("idle+current-template:nothing", [node("cpu-0")], [on(NEW, pod("cpu-0"))], []),
    # A pod of a bridge before the hash label: unknown, so upgrading the bridge rolls nothing.
    Case("idle+no-hash:nothing", [node("cpu-0")], [on("", pod("cpu-0"))], []),
    Case("pool-hash-unknown:nothing", [node("cpu-0")], [on(OLD, pod("cpu-0"))], [], current={}),
    # A job waits for this very pod: let it come up, roll after the job.
    Case(
        "powering-up+old-template:let-it-come-up",
        [node("cpu-0", "ALLOCATED", "POWERING_UP")],
        [on(OLD, pod("cpu-0", phase="Pending", age_s=2))],
        [],
    ),
    Case(
        "already-asked:nothing",
        [node("cpu-0", "ALLOCATED", "DRAIN", "POWER_DOWN", reason=ROLL, since_s=5)],
        [on(OLD, pod("cpu-0"))],
        [],
    ),
    Case(
        "admin-drain:their-reason-stays",
        [node("cpu-0", "IDLE", "DRAIN", reason=ADMIN, since_s=5)],
        [on(OLD, pod("cpu-0"))],
        [],
    ),
    Case(
        "pod-deleting:no-rollout-the-pod-is-going",
        [node("cpu-0")],
        [on(OLD, pod("cpu-0", failure=DELETED, deleting=True))],
        [MarkDown("cpu-0", Reason("Deleted", "the pod is being deleted"))],
    ),
    Case(
        "powered-down+old-pod:plain-delete",
        [node("cpu-0", "IDLE", "POWERED_DOWN")],
        [on(OLD, pod("cpu-0"))],
        [DeletePod("cpu-0", "Slurm node is powered down")],
    ),
    Case(
        "two-nodes:only-the-old-one",
        [node("cpu-0"), node("cpu-1")],
        [on(OLD, pod("cpu-0")), on(NEW, pod("cpu-1"))],
        [PowerDownAsap("cpu-0", ROLL)],
    ),
]


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id) for c in CASES])
def test_rollout_plan(case: Case) -> None:
    found = plan(case.nodes, case.pods, POOLS, NOW, GUARDS, current_hashes=case.current)
    assert core(found) == case.actions


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id) for c in CASES if c.actions])
def test_a_rollout_is_asked_once(case: Case) -> None:
    slurm = FakeSlurm(case.nodes, now=NOW)
    pods = FakePods(now=NOW)
    pods.pods = {p.node: p for p in case.pods}
    for action in plan(case.nodes, case.pods, POOLS, NOW, GUARDS, current_hashes=case.current):
        if isinstance(action, PowerDownAsap):
            slurm.update_nodes([action.node], state="power_down_asap", reason=action.reason)
    again = plan(
        slurm.list_nodes(), pods.list_pods()[0], POOLS, NOW, GUARDS, current_hashes=case.current
    )
    assert [a for a in again if isinstance(a, PowerDownAsap)] == []


def test_without_hashes_the_plan_is_the_same_as_before() -> None:
    nodes, pods = [node("cpu-0")], [on(OLD, pod("cpu-0"))]
    assert plan(nodes, pods, POOLS, NOW, GUARDS) == plan(
        nodes, pods, POOLS, NOW, GUARDS, current_hashes={}
    )


@pytest.mark.parametrize(
    ("cordoned", "reason_starts"),
    [
        (frozenset({"k8s-node-a"}), "k8s: Cordoned: kubernetes node k8s-node-a"),
        (frozenset(), ROLL),
    ],
    ids=["cordoned-host-wins", "rollout-alone"],
)
def test_a_cordoned_host_and_a_rollout_ask_once(
    cordoned: frozenset[str], reason_starts: str
) -> None:
    """Both replace the pod through Slurm; one PowerDownAsap, the cordon's reason first (the
    node must leave its host whatever the template)."""
    busy = on(OLD, dataclasses.replace(pod("cpu-0"), host="k8s-node-a"))
    found = plan(
        [node("cpu-0", "ALLOCATED")],
        [busy],
        POOLS,
        NOW,
        GUARDS,
        cordoned=cordoned,
        current_hashes=CURRENT,
    )
    asked = [a for a in found if isinstance(a, PowerDownAsap)]
    assert len(asked) == 1, found
    assert asked[0].reason.startswith(reason_starts), asked
