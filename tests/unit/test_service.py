"""BridgeService against in-memory fakes of Slurm and Kubernetes, with a fixed clock."""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import pytest

from bridge.config import parse_config
from bridge.domain.nodes import SlurmNode
from bridge.domain.pods import (
    LABEL_CLUSTER,
    LABEL_MANAGED_BY,
    LABEL_NODE,
    LABEL_POOL,
    MANAGED_BY,
    PodFailure,
    PodHoldup,
    PodView,
)
from bridge.domain.reason import Reason
from bridge.domain.reconcile import (
    CreatePod,
    DeletePod,
    MarkDown,
    PowerDown,
    ResumeNode,
    SetPodSlurmState,
)
from bridge.domain.results import ErrorClass, NodeResult, NodeStatus, Outcome
from bridge.domain.verdict import ScaleUpEvent
from bridge.errors import (
    BackendError,
    Conflict,
    Forbidden,
    InvalidInput,
    NoCapacity,
    TransientBackendError,
)
from bridge.settings import BridgeConfig
from tests.unit.fakes import MINIMAL_CONFIG, FakePods, Update
from tests.unit.harness import Harness

NOW = datetime(2026, 12, 2, 12, 0, 0, tzinfo=UTC)

CONFIG = (
    """\
bridge:
  pod_age_guard_s: 30
  failed_node_hold_s: 60
"""
    + MINIMAL_CONFIG
    + """\
  - name: gpu
    nodes: gpu-[0-1]
    cpus: 8
    real_memory_mb: 4096
    image: localhost/slurmd:dev
"""
)


#: The nodes of CONFIG's pools, as the service asks Slurm for them.
POOL_NODES = ("cpu-0", "cpu-1", "cpu-2", "cpu-3", "gpu-0", "gpu-1")


def config() -> BridgeConfig:
    return parse_config(CONFIG, "bridge.yaml")


def cloud(name: str, state: str = "IDLE", *flags: str, reason: str = "") -> SlurmNode:
    return SlurmNode(name, state, frozenset({"CLOUD", *flags}), reason)


def powering_up(*names: str) -> list[SlurmNode]:
    """Nodes Slurm is powering up for a job, as during a resume call."""
    return [cloud(name, "ALLOCATED", "POWERING_UP") for name in names]


class World(Harness):
    """The service wired to fakes that share one journal."""

    def __init__(self, *nodes: SlurmNode) -> None:
        super().__init__(nodes, now=NOW, config=config())


# -- resume --------------------------------------------------------------------------------------


def test_resume_creates_one_labelled_pod_per_node() -> None:
    w = World()
    results = w.service.resume("cpu-[0-1],gpu-1", "", "r1")
    assert results == [
        NodeResult("cpu-0", Outcome.OK),
        NodeResult("cpu-1", Outcome.OK),
        NodeResult("gpu-1", Outcome.OK),
    ]
    assert sorted(w.pods.pods) == ["cpu-0", "cpu-1", "gpu-1"]
    labels = w.pods.manifests["gpu-1"]["metadata"]["labels"]
    assert labels[LABEL_MANAGED_BY] == MANAGED_BY
    assert labels[LABEL_CLUSTER] == "lab"
    assert (labels[LABEL_POOL], labels[LABEL_NODE]) == ("gpu", "gpu-1")
    assert w.pods.manifests["cpu-0"]["metadata"]["namespace"] == "slurm"
    assert w.slurm.updates == []


def test_resume_records_an_event_per_created_pod_only() -> None:
    w = World()
    w.service.resume("cpu-0", '{"jobs":[{"job_id":7,"nodes":"cpu-0"}]}', "r1")
    w.service.resume("cpu-0", "", "r2")  # exists already: no second event
    assert w.pods.events == [
        ("cpu-0", "SlurmResume", "Slurm resumed node cpu-0 (jobs 7)", False),
    ]


def test_failed_nodes_get_a_warning_event_naming_the_reason() -> None:
    w = World(cloud("cpu-0", "ALLOCATED", "POWERING_UP"))
    w.pods.add("cpu-0", phase="Pending", failure=PodFailure("ErrImagePull", "no such image"))
    w.service.execute([MarkDown("cpu-0", Reason("ErrImagePull", "no such image"))])
    assert w.pods.events == [
        (
            "cpu-0",
            "SlurmNodeDown",
            "Slurm node cpu-0 set DOWN: k8s: ErrImagePull: no such image",
            True,
        ),
    ]


def test_resume_repeated_creates_nothing_new() -> None:
    w = World()
    first = w.service.resume("cpu-[0-1]", "", "r1")
    pods_after_first = dict(w.pods.pods)
    second = w.service.resume("cpu-[0-1]", "", "r2")
    assert first == second
    assert all(r.outcome is Outcome.OK for r in second)
    assert w.pods.pods == pods_after_first
    assert w.slurm.updates == []


def test_resume_rejects_unknown_nodes_leaves_slurm_alone_and_goes_on() -> None:
    # other-1 may be a static node with running jobs: the bridge must never set it DOWN.
    w = World(*powering_up("cpu-0"), SlurmNode("other-1", "ALLOCATED"))
    results = w.service.resume("other-1,cpu-0,other-2", "", "r1")
    assert [r.node for r in results] == ["other-1", "cpu-0", "other-2"], "hostlist order"
    assert results[1] == NodeResult("cpu-0", Outcome.OK)
    for r in (results[0], results[2]):
        assert (r.outcome, r.error_class) == (Outcome.REJECTED, ErrorClass.UNKNOWN_NODE)
        assert r.node in r.message and "bridge.yaml" in r.message
    assert list(w.pods.pods) == ["cpu-0"]
    assert w.slurm.updates == []


@pytest.mark.parametrize(
    ("hostlist", "bad"),
    [
        ("cpu-0,a{b}", "a{b}"),
        ("cpu-0,x=1", "x=1"),
        ("cpu-0,CPU-1", "CPU-1"),
        ("cpu-0,-cpu", "-cpu"),
        ("cpu-0,cpu_1", "cpu_1"),
        ("cpu-0," + "n" * 64, "n" * 64),
    ],
)
def test_resume_rejects_names_slurm_or_dns_would_misread(hostlist: str, bad: str) -> None:
    w = World(*powering_up("cpu-0"))
    results = w.service.resume(hostlist, "", "r1")
    assert results[0] == NodeResult("cpu-0", Outcome.OK)
    assert (results[1].node, results[1].outcome, results[1].error_class) == (
        bad,
        Outcome.REJECTED,
        ErrorClass.INVALID,
    )
    assert list(w.pods.pods) == ["cpu-0"]
    assert w.slurm.updates == []


def test_resume_failure_never_downs_a_node_slurm_does_not_list_as_cloud() -> None:
    # A pool range that overlaps a static node: Kubernetes' refusal must not touch it.
    w = World(SlurmNode("cpu-0", "ALLOCATED"), *powering_up("cpu-1"))
    w.pods.create_errors.update({"cpu-0": Forbidden("psa"), "cpu-1": Forbidden("psa")})
    w.service.resume("cpu-[0-1]", "", "r1")
    assert w.slurm.updates == [Update(("cpu-1",), "down", "k8s: Forbidden: psa")]


def test_reconcile_ignores_pool_nodes_slurm_does_not_list_as_cloud() -> None:
    # Slurm says the node is up and busy but not CLOUD: no pod may be missing for it.
    w = World(SlurmNode("cpu-0", "ALLOCATED"))
    assert w.service.reconcile_once() == []
    assert w.slurm.updates == []


@pytest.mark.parametrize(
    ("error", "error_class", "reason"),
    [
        (
            Conflict("pod slurm/cpu-1 exists and is not managed by the bridge"),
            ErrorClass.INTERNAL,
            "k8s: Conflict: pod slurm/cpu-1 exists and is not managed by the bridge",
        ),
        (
            Forbidden("create pod cpu-1: forbidden: no RBAC"),
            ErrorClass.INTERNAL,
            "k8s: Forbidden: create pod cpu-1: forbidden: no RBAC",
        ),
        (
            InvalidInput("create pod cpu-1: rejected by the API server: bad spec"),
            ErrorClass.INVALID,
            "k8s: InvalidInput: create pod cpu-1: rejected by the API server: bad spec",
        ),
        # Worth retrying: the reconciler creates the pod later; no DOWN.
        (TransientBackendError("create pod cpu-1: HTTP 503"), ErrorClass.TRANSIENT, None),
        (BackendError("create pod cpu-1: HTTP 404: ?"), ErrorClass.INTERNAL, None),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, Exception) else None,
)
def test_resume_failure_fails_the_node_fast_when_kubernetes_said_no(
    error: BackendError, error_class: ErrorClass, reason: str | None
) -> None:
    w = World(*powering_up("cpu-0", "cpu-1", "cpu-2"))
    w.pods.create_errors["cpu-1"] = error
    results = w.service.resume("cpu-[0-2]", "", "r1")
    assert results[1] == NodeResult("cpu-1", Outcome.FAILED, error_class, str(error))
    assert [r.outcome for r in results] == [Outcome.OK, Outcome.FAILED, Outcome.OK]
    assert sorted(w.pods.pods) == ["cpu-0", "cpu-2"]
    expected = [] if reason is None else [Update(("cpu-1",), "down", reason)]
    assert w.slurm.updates == expected


def test_resume_batches_the_down_by_reason() -> None:
    w = World(*powering_up("cpu-0", "cpu-1", "cpu-2", "cpu-3"))
    refused = Forbidden("psa")
    w.pods.create_errors.update({"cpu-0": refused, "cpu-2": refused, "cpu-3": Conflict("not ours")})
    w.service.resume("cpu-[0-3]", "", "r1")
    assert w.slurm.updates == [
        Update(("cpu-0", "cpu-2"), "down", "k8s: Forbidden: psa"),
        Update(("cpu-3",), "down", "k8s: Conflict: not ours"),
    ]
    # One read of the pools' nodes serves both reasons: which nodes are CLOUD, and the jobs'
    # other nodes.
    assert w.slurm.filtered_reads == [POOL_NODES]
    assert w.slurm.node_reads == 1


def test_a_pass_that_fails_nodes_for_two_reasons_lists_slurm_once() -> None:
    w = World(*powering_up("cpu-0", "cpu-1"))
    w.pods.add("cpu-0", failure=PodFailure("ErrImagePull", "pull access denied"))
    w.pods.add("cpu-1", failure=PodFailure("InvalidImageName", "bad name"))
    actions = w.service.reconcile_once()
    assert {a.reason.kind for a in actions if isinstance(a, MarkDown)} == {
        "ErrImagePull",
        "InvalidImageName",
    }
    assert [u.state for u in w.slurm.updates].count("down") == 2
    # The pass reads the pools' nodes; its snapshot serves the failure path: no listing per
    # reason; the nodes to set DOWN are read once more, by name, to see that Slurm still wants
    # them up. Never every node of the cluster.
    assert w.slurm.filtered_reads == [POOL_NODES, ("cpu-0", "cpu-1")]
    assert w.slurm.node_reads == 2


def test_resume_survives_slurm_refusing_the_down(caplog: pytest.LogCaptureFixture) -> None:
    w = World(*powering_up("cpu-0"))
    w.pods.create_errors["cpu-0"] = Forbidden("psa")
    w.slurm.fail_next = TransientBackendError("slurmctld unreachable")
    results = w.service.resume("cpu-0", "", "r1")
    assert results == [NodeResult("cpu-0", Outcome.FAILED, ErrorClass.INTERNAL, "psa")]
    assert "could not set DOWN cpu-0" in caplog.text


@pytest.mark.parametrize(
    "resume_file",
    [
        "{not json",
        "[]",
        '{"jobs": 3}',
        '{"jobs": [{"job_id": "x"}]}',
        '{"jobs": [{"job_id": 1, "nodes": 5}]}',
    ],
    ids=["not-json", "not-object", "jobs-not-list", "job-id-not-int", "nodes-not-string"],
)
def test_resume_with_a_bad_resume_file_still_resumes(
    resume_file: str, caplog: pytest.LogCaptureFixture
) -> None:
    w = World()
    with caplog.at_level(logging.WARNING, logger="bridge.service.use_cases"):
        results = w.service.resume("cpu-[0-1]", resume_file, "r7")
    assert [r.outcome for r in results] == [Outcome.OK, Outcome.OK]
    assert sorted(w.pods.pods) == ["cpu-0", "cpu-1"]
    assert "request r7: resume_file: " in caplog.text
    assert "resuming the hostlist anyway" in caplog.text


RESUME_2205 = {
    "jobs": [{"job_id": 3, "nodes": "cpu-[0-1]"}, {"job_id": 4, "nodes": "cpu-1"}],
    "all_nodes": "cpu-[0-1]",
}


def test_resume_logs_the_jobs_per_node(caplog: pytest.LogCaptureFixture) -> None:
    w = World()
    with caplog.at_level(logging.INFO, logger="bridge.service.use_cases"):
        w.service.resume("cpu-[0-1]", json.dumps(RESUME_2205), "r1")
    assert "request r1: pod cpu-1 created (jobs 3,4)" in caplog.text


# -- suspend and resume_failed -------------------------------------------------------------------


@pytest.mark.parametrize("call", ["suspend", "resume_failed"])
def test_suspend_and_resume_failed_delete_pods_absent_is_ok(call: str) -> None:
    w = World()
    w.pods.add("cpu-0")
    w.pods.add("gpu-0", pool="gpu")
    w.pods.delete_errors["cpu-2"] = TransientBackendError("delete pod cpu-2: HTTP 500")
    results = getattr(w.service, call)("cpu-[0-2],gpu-0,nope-1", "r1")
    assert results == [  # hostlist order
        NodeResult("cpu-0", Outcome.OK),
        NodeResult("cpu-1", Outcome.OK),
        NodeResult("cpu-2", Outcome.FAILED, ErrorClass.TRANSIENT, "delete pod cpu-2: HTTP 500"),
        NodeResult("gpu-0", Outcome.OK),
        NodeResult(
            "nope-1",
            Outcome.REJECTED,
            ErrorClass.UNKNOWN_NODE,
            "node nope-1 is in no pool of the bridge (bridge.yaml); Slurm left alone",
        ),
    ]
    assert w.pods.pods == {}
    assert w.pods.delete_calls == ["cpu-0", "cpu-1", "cpu-2", "gpu-0"]
    # Suspending an unknown node is harmless: nothing to set DOWN.
    assert w.slurm.updates == []


# -- reconcile -----------------------------------------------------------------------------------


def test_reconcile_once_executes_the_plan_slurm_first_batched_by_reason() -> None:
    image = PodFailure("ErrImagePull", "pull access denied")
    w = World(
        cloud("cpu-0", "ALLOCATED", "POWERING_UP"),
        cloud("cpu-1", "ALLOCATED", "POWERING_UP"),
        cloud("cpu-2", "IDLE", "POWERED_DOWN"),
        cloud("cpu-3", "ALLOCATED", "POWERING_UP"),
        cloud("gpu-0", "DOWN", "POWERED_DOWN", reason="k8s: Evicted: drained"),
        cloud("gpu-1", "IDLE"),  # up, but its pod is gone
        cloud("other-0", "IDLE"),  # Slurm's, not ours: ignored
    )
    old = NOW - timedelta(minutes=5)
    w.pods.add("cpu-0", phase="Pending", failure=image, created_at=old)
    w.pods.add("cpu-1", phase="Pending", failure=image, created_at=old)
    w.pods.add("cpu-2", created_at=old)
    actions = w.service.reconcile_once()
    assert actions == [
        MarkDown("cpu-0", Reason("ErrImagePull", "pull access denied")),
        DeletePod("cpu-0", "ErrImagePull: pull access denied"),
        MarkDown("cpu-1", Reason("ErrImagePull", "pull access denied")),
        DeletePod("cpu-1", "ErrImagePull: pull access denied"),
        DeletePod("cpu-2", "Slurm node is powered down"),
        CreatePod("cpu-3", "cpu", "Slurm node is powering up and has no pod"),
        ResumeNode("gpu-0", "held DOWN for 0:01:00"),
        MarkDown(
            "gpu-1",
            Reason("PodMissing", "no pod for node gpu-1; Slurm thinks it is up"),
            unless_pod_exists=True,
        ),
    ]
    assert w.journal == [
        # Before a DOWN the pod is read again from the API server, not the watch's cache.
        "read cpu-0",
        "read cpu-1",
        "read gpu-1",
        "slurm down cpu-0,cpu-1",
        "slurm down gpu-1",
        "delete cpu-0",
        "delete cpu-1",
        "delete cpu-2",
        "slurm resume gpu-0",
        "create cpu-3",
    ]
    assert w.slurm.updates[0] == Update(
        ("cpu-0", "cpu-1"), "down", "k8s: ErrImagePull: pull access denied"
    )
    assert sorted(w.pods.pods) == ["cpu-3"]
    # The failed nodes are held DOWN (visible, and a pause before Slurm retries them).
    w.journal.clear()
    # Only the new pod's first Slurm state (a patch, not in the journal).
    assert w.service.reconcile_once() == [SetPodSlurmState("cpu-3", "powering-up", False)]
    assert w.journal == []
    # After the hold they are powered down, batched, so they return to idle~.
    w.service.clock = lambda: NOW + timedelta(minutes=2)
    later = w.service.reconcile_once()
    assert {a.node for a in later if isinstance(a, PowerDown)} == {"cpu-0", "cpu-1", "gpu-1"}
    assert "slurm power_down_force cpu-0,cpu-1,gpu-1" in w.journal


def test_reconcile_retries_a_refused_power_down_on_the_next_pass(
    caplog: pytest.LogCaptureFixture,
) -> None:
    w = World(cloud("cpu-0", "IDLE"))  # up, no pod
    w.service.execute([MarkDown("cpu-0", Reason("PodMissing", "x"))])
    w.service.clock = lambda: NOW + timedelta(minutes=2)  # the hold is over
    w.slurm.fail_next = TransientBackendError("slurmctld busy")
    assert w.service.reconcile_once() == [PowerDown("cpu-0", "held DOWN for 0:01:00")]
    assert "reconcile: power_down_force cpu-0 failed: slurmctld busy" in caplog.text
    assert w.slurm.nodes["cpu-0"].is_down
    assert w.service.reconcile_once() == [PowerDown("cpu-0", "held DOWN for 0:01:00")]
    assert w.slurm.nodes["cpu-0"].is_powered_down
    assert w.service.reconcile_once() == []


def test_node_event_reconciles_at_once() -> None:
    w = World(cloud("cpu-0", "ALLOCATED", "POWERING_UP"))
    results = w.service.node_event("down", "cpu-0,x-1", "slurmd died", "r1")
    assert [(r.node, r.outcome) for r in results] == [
        ("cpu-0", Outcome.OK),
        ("x-1", Outcome.REJECTED),
    ]
    assert "cpu-0" in w.pods.pods


# -- status --------------------------------------------------------------------------------------


def test_list_nodes_puts_both_views_side_by_side() -> None:
    cpu_0, cpu_1 = cloud("cpu-0", "ALLOCATED"), cloud("cpu-1", "IDLE", "POWERED_DOWN")
    cpu_2 = cloud("cpu-2", "DOWN", "POWERING_UP", reason="k8s: NoCapacity: full")
    w = World(cpu_0, cpu_1, cpu_2, cloud("other-0", "IDLE"))
    started = NOW - timedelta(minutes=3)
    w.pods.add("cpu-0", created_at=started, ip="10.1.0.5")
    w.pods.add("cpu-3", phase="Running", deleting=True, created_at=started)
    # Every pool node shows the template its pool renders now; these pods carry no hash.
    cpu, gpu = (w.service.template_hashes[pool] for pool in ("cpu", "gpu"))
    assert w.service.list_nodes("") == [
        NodeStatus(
            "cpu-0",
            "cpu",
            "alloc",
            "Running",
            "10.1.0.5",
            "",
            started,
            pool_template_hash=cpu,
            slurm_node=cpu_0,
            stuck="",
        ),
        NodeStatus(
            "cpu-1",
            "cpu",
            "idle~",
            "",
            "",
            "",
            None,
            pool_template_hash=cpu,
            slurm_node=cpu_1,
            stuck="",
        ),
        NodeStatus(
            "cpu-2",
            "cpu",
            "down#",
            "",
            "",
            "k8s: NoCapacity: full",
            None,
            pool_template_hash=cpu,
            slurm_node=cpu_2,
            stuck="k8s: NoCapacity: full",
        ),
        NodeStatus(
            "cpu-3",
            "cpu",
            "",
            "Terminating",
            "10.0.0.1",
            "",
            started,
            pool_template_hash=cpu,
            stuck="",
        ),
        NodeStatus("gpu-0", "gpu", "", "", "", "", None, pool_template_hash=gpu, stuck=""),
        NodeStatus("gpu-1", "gpu", "", "", "", "", None, pool_template_hash=gpu, stuck=""),
    ]


def test_the_bridge_times_what_has_no_clock_of_its_own_over_its_calls() -> None:
    w = World(*powering_up("cpu-0"))
    w.pods.create_errors["cpu-0"] = TransientBackendError("apiserver down")  # no pod gets made
    w.service.resume("cpu-0", "", "r1")
    [first] = w.service.list_nodes("cpu-0")
    assert first.stuck == ""  # first seen like this now: no age yet
    w.now = NOW + timedelta(seconds=400)
    [later] = w.service.list_nodes("cpu-0", timedelta(seconds=300))
    assert later.stuck == "Slurm powering up, no pod for 400s (> 300s)"
    [strict] = w.service.list_nodes("cpu-0", timedelta(seconds=500))
    assert strict.stuck == ""


def test_list_nodes_of_a_hostlist_includes_what_slurm_knows_and_skips_the_rest() -> None:
    w = World(cloud("other-0", "IDLE"), cloud("cpu-1", "IDLE", "POWERED_DOWN"))
    rows = w.service.list_nodes("cpu-1,other-[0-1]")
    assert [(r.node, r.pool, r.slurm_state) for r in rows] == [
        ("cpu-1", "cpu", "idle~"),
        ("other-0", "", "idle"),
    ]


def test_list_nodes_sorts_naturally() -> None:
    w = World()
    w.service.config = parse_config(CONFIG.replace("cpu-[0-3]", "cpu-[0-11]"), "bridge.yaml")
    names = [r.node for r in w.service.list_nodes("cpu-[9-11]")]
    assert names == ["cpu-9", "cpu-10", "cpu-11"]


def test_list_nodes_stays_linear_on_a_big_pool() -> None:
    # 22.05 hides powered-down CLOUD nodes, so most rows have neither a Slurm node nor a pod;
    # a per-row scan of all pool nodes made this 14 s for 20,000 nodes.
    w = World()
    w.service.config = parse_config(CONFIG.replace("cpu-[0-3]", "cpu-[0-19999]"), "bridge.yaml")
    started = time.perf_counter()
    rows = w.service.list_nodes("")
    assert len(rows) == 20_002
    assert time.perf_counter() - started < 3.0


# -- observation order, re-checks, autoscaler events, stuck pods, addresses ----------------------


def test_a_pod_created_while_slurm_is_read_is_never_missing() -> None:
    # The race seen with a slow scontrol: the pod is created and its slurmd registers while
    # the node listing runs. Slurm is read first, so the pod list that follows shows the pod.
    w = World(cloud("cpu-0", "ALLOCATED", "POWERING_UP"))
    listing = w.slurm.list_nodes

    def slow_listing(names: Sequence[str] | None = None) -> list[SlurmNode]:
        w.pods.add("cpu-0", ip="10.213.0.9")
        w.slurm.nodes["cpu-0"] = cloud("cpu-0", "ALLOCATED")  # registered meanwhile
        return listing(names)

    w.slurm.list_nodes = slow_listing  # type: ignore[method-assign]
    assert w.service.reconcile_once() == [SetPodSlurmState("cpu-0", "allocated", True)]
    assert not any(u.state == "down" for u in w.slurm.updates)


def test_pod_missing_is_rechecked_before_the_node_goes_down(
    caplog: pytest.LogCaptureFixture,
) -> None:
    w = World(cloud("cpu-0", "ALLOCATED"))
    listing = w.pods.list_pods

    def list_then_create() -> tuple[list[PodView], str]:
        seen = listing()
        w.pods.add("cpu-0")  # appears right after the list
        return seen

    w.pods.list_pods = list_then_create  # type: ignore[method-assign]
    with caplog.at_level(logging.INFO):
        w.service.reconcile_once()
    assert not any(u.state == "down" for u in w.slurm.updates)
    assert "cpu-0 has a pod after all" in caplog.text


def test_autoscaler_events_are_read_only_when_a_pod_is_unschedulable() -> None:
    w = World(cloud("cpu-0", "ALLOCATED", "POWERING_UP"))
    w.pods.add("cpu-0", phase="Pending")
    calls: list[int] = []
    w.pods.list_scale_up_events = lambda: calls.append(1) or []  # type: ignore[method-assign]
    w.service.reconcile_once()
    assert calls == []
    w.pods.pods["cpu-0"] = dataclasses.replace(
        w.pods.pods["cpu-0"], uid="u-1", holdup=PodHoldup("Unschedulable", "no fit", NOW)
    )
    w.service.reconcile_once()
    assert calls == [1]


def test_not_trigger_scale_up_fails_the_node_with_the_autoscalers_words() -> None:
    w = World(cloud("cpu-0", "ALLOCATED", "POWERING_UP"))
    w.pods.add("cpu-0", phase="Pending")
    w.pods.pods["cpu-0"] = dataclasses.replace(
        w.pods.pods["cpu-0"], uid="u-1", holdup=PodHoldup("Unschedulable", "no fit", NOW)
    )
    w.pods.scale_up_events = [
        ScaleUpEvent("u-1", "NotTriggerScaleUp", "pod didn't trigger scale-up", NOW)
    ]
    w.service.reconcile_once()
    assert w.slurm.updates[0] == Update(
        ("cpu-0",), "down", "k8s: NotTriggerScaleUp: pod didn't trigger scale-up"
    )
    assert w.pods.delete_options == [("cpu-0", "u-1", None)]


def test_unreadable_autoscaler_events_fail_nothing(caplog: pytest.LogCaptureFixture) -> None:
    w = World(cloud("cpu-0", "ALLOCATED", "POWERING_UP"))
    w.pods.add("cpu-0", phase="Pending")
    w.pods.pods["cpu-0"] = dataclasses.replace(
        w.pods.pods["cpu-0"], uid="u-1", holdup=PodHoldup("Unschedulable", "no fit", NOW)
    )

    def refused() -> list[ScaleUpEvent]:
        raise Forbidden("list events: forbidden")

    w.pods.list_scale_up_events = refused  # type: ignore[method-assign]
    actions = w.service.reconcile_once()
    assert [type(a).__name__ for a in actions] == ["SetComment", "SetPodSlurmState"]
    assert "autoscaler events not read" in caplog.text


def test_a_stuck_predecessor_is_force_deleted_with_its_uid_and_an_event() -> None:
    w = World(cloud("cpu-0", "ALLOCATED", "POWERING_UP"))
    w.pods.add("cpu-0", deleting=True, failure=PodFailure("Deleted", "being deleted"))
    w.pods.pods["cpu-0"] = dataclasses.replace(
        w.pods.pods["cpu-0"], uid="u-old", deletion_deadline=NOW - timedelta(seconds=60)
    )
    w.service.reconcile_once()
    assert w.pods.delete_options == [("cpu-0", "u-old", 0)]
    assert [e[1] for e in w.pods.events] == ["SlurmForceDelete"]
    # The next pass creates this cycle's pod.
    w.service.reconcile_once()
    assert w.pods.create_calls == ["cpu-0"]


def test_addresses_follow_the_pods_in_one_scontrol_call() -> None:
    w = World(
        SlurmNode("cpu-0", "ALLOCATED", frozenset({"CLOUD"}), address="cpu-0"),
        SlurmNode("cpu-1", "IDLE", frozenset({"CLOUD"}), address="10.213.0.2"),
        SlurmNode("cpu-2", "IDLE", frozenset({"CLOUD", "POWERED_DOWN"}), address="10.213.0.5"),
    )
    w.pods.add("cpu-0", ip="10.213.0.8")
    w.pods.add("cpu-1", ip="10.213.0.9")
    w.service.reconcile_once()
    assert w.journal == [
        "slurm nodeaddr cpu-0=10.213.0.8,cpu-1=10.213.0.9,cpu-2=cpu-2",
    ]
    assert w.service.reconcile_once() == []


def test_a_full_quota_is_a_wait_then_a_create_then_nothing_left() -> None:
    """Issue 29 item 4: a quota refusal leaves the node POWERING_UP with a waiting Comment; the
    reconciler retries the create each pass, and the pod is created once there is room."""
    w = World(*powering_up("cpu-0"))
    w.pods.create_errors["cpu-0"] = NoCapacity("create pod cpu-0: exceeded quota: pods")
    results = w.service.resume("cpu-0", "", "r1")
    assert results == [NodeResult("cpu-0", Outcome.ACCEPTED)]
    waiting = "k8s: waiting: NoCapacity since 2026-12-02T12:00:00Z"
    assert w.slurm.nodes["cpu-0"].comment == waiting
    assert "cpu-0" not in w.pods.pods
    w.now += timedelta(seconds=60)
    w.service.reconcile_once()  # still full: no DOWN, the Comment stays, written once
    assert w.slurm.updates == []
    assert sum("slurm comment cpu-0" in line for line in w.journal) == 1
    del w.pods.create_errors["cpu-0"]
    w.now += timedelta(seconds=60)
    w.service.reconcile_once()
    assert "cpu-0" in w.pods.pods
    assert w.slurm.updates == []


def test_a_quota_full_past_schedule_timeout_fails_the_node_uncounted() -> None:
    w = World(*powering_up("cpu-0"))
    w.pods.create_errors["cpu-0"] = NoCapacity("exceeded quota: pods")
    w.service.resume("cpu-0", "", "r1")
    w.now += timedelta(seconds=300)
    w.service.reconcile_once()
    (down,) = [u for u in w.slurm.updates if u.state == "down"]
    assert down.reason == (
        "k8s: NoCapacity: exceeded quota: pods (waited 300s, schedule_timeout 300s)"
    )
    reason = Reason.parse(down.reason)
    assert reason is not None and not reason.is_fail_fast  # the pool's breaker does not count it


@pytest.mark.parametrize(
    ("now_in_slurm", "downed"),
    [
        (cloud("cpu-0", "IDLE"), True),
        (cloud("cpu-0", "IDLE", "POWERING_DOWN"), False),
        (cloud("cpu-0", "IDLE", "POWERED_DOWN"), False),
        (cloud("cpu-0", "DOWN", reason="maintenance"), False),
        (cloud("cpu-0", "IDLE", "POWER_DOWN", "DRAIN"), False),
    ],
    ids=["still-up", "suspend-landed", "powered-down", "admin-down", "power-down-queued"],
)
def test_a_down_is_read_again_and_dropped_when_slurm_moved_on(
    now_in_slurm: SlurmNode, downed: bool
) -> None:
    """Issue 29 item 6: the pass read Slurm (cpu-0 idle and up), then the pods (cpu-0's gone:
    Slurm suspended the node in between). PodMissing is planned on that stale read; the live
    re-read before the DOWN finds Slurm moved on, and no DOWN of ours overwrites it."""
    w = World(cloud("cpu-0", "IDLE"))
    planned = MarkDown("cpu-0", Reason("PodMissing", "no pod for node cpu-0"))
    w.slurm.nodes["cpu-0"] = now_in_slurm  # the suspend (or an admin) lands after the read
    w.service.execute([planned])
    assert [u.state for u in w.slurm.updates] == (["down"] if downed else [])


class StaleView:
    """The watch's cache as an API server outage leaves it: the pods as last seen."""

    def __init__(self, pods: list[PodView]) -> None:
        self.pods = pods

    def list_pods(self) -> tuple[list[PodView], str]:
        return list(self.pods), "1"


@pytest.mark.parametrize(
    ("live", "read_error", "downed"),
    [
        (PodFailure("ErrImagePull", "pull access denied"), None, True),
        (None, None, False),  # it has started since: Running, no failure
        (
            PodFailure("ErrImagePull", "pull access denied"),
            TransientBackendError("timed out"),
            False,
        ),
    ],
    ids=["live-read-agrees", "started-since", "api-server-unreachable"],
)
def test_a_down_is_decided_on_the_pod_read_live_not_on_the_cache(
    live: PodFailure | None, read_error: BackendError | None, downed: bool
) -> None:
    """Issue 29 item 2: the cache still shows cpu-0's pod failing (its last event before an
    outage); the pod is read again before the DOWN, and the DOWN follows only what it shows."""
    old = NOW - timedelta(minutes=5)
    stale = FakePods(now=NOW)
    stale.add(
        "cpu-0",
        phase="Pending",
        failure=PodFailure("ErrImagePull", "pull access denied"),
        created_at=old,
    )
    h = Harness(
        powering_up("cpu-0"),
        now=NOW,
        config=config(),
        pod_views=StaleView(list(stale.pods.values())),
    )
    h.pods.add("cpu-0", phase="Pending" if live else "Running", failure=live, created_at=old)
    h.pods.read_error = read_error
    h.service.reconcile_once()
    assert [u.state for u in h.slurm.updates].count("down") == (1 if downed else 0)
    # The pod goes with the DOWN, and stays without it (a healthy pod is never deleted).
    assert ("cpu-0" not in h.pods.pods) is downed
