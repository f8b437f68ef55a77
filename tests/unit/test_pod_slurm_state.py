"""Slurm's state on the pods and the pods' facts in Slurm (issue 13), as tables.

The state word and ``registered`` from a node; the plan's ``SetPodSlurmState`` and Comment over
combinations of what each side shows; patches counted over a sequence of passes through the
service with the in-memory fakes (no change: no patch); the patches the real gateway sends.
"""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime, timedelta

import pytest

from bridge.domain.nodes import SlurmNode
from bridge.domain.pod_slurm_state import (
    SLURM_STATE_WORDS,
    is_registered,
    pod_comment,
    slurm_state_word,
)
from bridge.domain.pods import PodHoldup, PodView
from bridge.domain.pools import NodePool, PoolSet
from bridge.domain.reconcile import (
    Action,
    DeletePod,
    Guards,
    PowerDown,
    SetComment,
    SetPodSlurmState,
    plan,
)
from bridge.errors import Forbidden
from bridge.metrics import BridgeMetrics
from tests.unit.fake_kube_api import FakeApiServer, gateway_to, status_answer
from tests.unit.fakes import MINIMAL_CONFIG
from tests.unit.harness import Harness

NOW = datetime(2026, 12, 3, 12, 0, 0, tzinfo=UTC)
GUARDS = Guards()
POOLS = PoolSet(
    (
        NodePool.create(
            name="cpu", nodes="cpu-[0-3]", cpus=2, real_memory_mb=1024, image="localhost/s:1"
        ),
    )
)
FACTS = "k8s: pod slurm/cpu-0 on skb-real-0 ip 10.213.0.10"
WAITING = "k8s: waiting: Unschedulable since 2026-12-03T11:59:20Z"


def node(state: str = "IDLE", *flags: str, comment: str = "", reason: str = "") -> SlurmNode:
    return SlurmNode(
        "cpu-0", state, frozenset({"CLOUD", *flags}), reason, comment=comment, address=""
    )


def pod(
    *,
    shows: str = "",
    registered: bool | None = None,
    phase: str = "Running",
    host: str = "skb-real-0",
    ip: str = "10.213.0.10",
    deleting: bool = False,
) -> PodView:
    return PodView(
        name="cpu-0",
        node="cpu-0",
        pool="cpu",
        phase=phase,
        ip=ip,
        created_at=NOW - timedelta(seconds=60),
        deleting=deleting,
        failure=None,
        host=host,
        uid="u-0",
        namespace="slurm",
        slurm_state=shows,
        registered=registered,
    )


# -- the word and the condition -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("slurm", "word", "registered"),
    [
        pytest.param(node("IDLE", "POWERED_DOWN"), "powered-down", False, id="idle~"),
        pytest.param(node("ALLOCATED", "POWERING_UP"), "powering-up", False, id="alloc#"),
        pytest.param(node("IDLE", "POWERING_DOWN"), "powering-down", False, id="idle%"),
        pytest.param(node("ALLOCATED"), "allocated", True, id="alloc"),
        pytest.param(node("MIXED"), "mixed", True, id="mix"),
        pytest.param(node("IDLE"), "idle", True, id="idle"),
        pytest.param(node("ALLOCATED", "POWER_DOWN"), "allocated", True, id="alloc!:still-busy"),
        pytest.param(node("IDLE", "COMPLETING"), "completing", True, id="comp-flag"),
        pytest.param(node("COMPLETING"), "completing", True, id="comp-state"),
        pytest.param(node("IDLE", "DRAIN"), "drain", True, id="drain"),
        pytest.param(node("ALLOCATED", "DRAIN"), "drain", True, id="drng"),
        pytest.param(node("IDLE", "NOT_RESPONDING"), "not-responding", False, id="idle*"),
        pytest.param(node("DOWN"), "down", False, id="down"),
        pytest.param(node("DOWN", "POWERING_UP"), "powering-up", False, id="down#"),
        pytest.param(node("DOWN", "DRAIN"), "down", False, id="down+drain"),
        pytest.param(node("FUTURE"), "future", False, id="future"),
        pytest.param(node("UNKNOWN"), "unknown", False, id="unknown"),
        pytest.param(node("PLANNED"), "unknown", True, id="a-state-we-do-not-know:bounded"),
    ],
)
def test_the_state_word_and_registered_come_from_the_parsed_node(
    slurm: SlurmNode, word: str, registered: bool
) -> None:
    assert slurm_state_word(slurm) == word
    assert word in SLURM_STATE_WORDS
    assert is_registered(slurm) is registered


def test_every_state_word_is_a_valid_label_value() -> None:
    for word in SLURM_STATE_WORDS:
        assert len(word) <= 63 and word[0].isalnum() and word[-1].isalnum()
        assert all(c.isalnum() or c in "-_." for c in word)


@pytest.mark.parametrize(
    ("shown", "comment"),
    [
        pytest.param(pod(), FACTS, id="running:pod-node-ip"),
        pytest.param(pod(phase="Pending", host="", ip=""), "", id="pending:nothing"),
        pytest.param(pod(phase="Pending", ip=""), "", id="scheduled-no-ip-yet:nothing"),
        pytest.param(pod(deleting=True), "", id="terminating:nothing"),
        pytest.param(
            dataclasses.replace(pod(), namespace=""),
            "k8s: pod cpu-0 on skb-real-0 ip 10.213.0.10",
            id="namespace-unknown:name-alone",
        ),
    ],
)
def test_pod_comment(shown: PodView, comment: str) -> None:
    assert pod_comment(shown) == comment


# -- the plan -----------------------------------------------------------------------------------


def pod_state(
    state: str, registered: bool, was: str = "", was_registered: bool | None = None
) -> SetPodSlurmState:
    return SetPodSlurmState("cpu-0", state, registered, was, was_registered, uid="u-0")


@pytest.mark.parametrize(
    ("slurm", "shown", "actions"),
    [
        # -- the label and the condition follow Slurm, on a difference only ------------------
        pytest.param(
            node("ALLOCATED", "POWERING_UP"),
            pod(phase="Pending", host="", ip=""),
            [pod_state("powering-up", False)],
            id="new-pod:first-label-and-condition",
        ),
        pytest.param(
            node("ALLOCATED", "POWERING_UP"),
            pod(shows="powering-up", registered=False, phase="Pending", host="", ip=""),
            [],
            id="powering-up+shown:quiet",
        ),
        pytest.param(
            node("ALLOCATED", comment=FACTS),
            pod(shows="powering-up", registered=False),
            [pod_state("allocated", True, "powering-up", False)],
            id="registered:label-and-condition",
        ),
        pytest.param(
            node("IDLE", comment=FACTS),
            pod(shows="allocated", registered=True),
            [pod_state("idle", True, "allocated", True)],
            id="job-ended:label-only",
        ),
        pytest.param(
            node("IDLE", "NOT_RESPONDING", comment=FACTS),
            pod(shows="not-responding", registered=True),
            [pod_state("not-responding", False, "not-responding", True)],
            id="condition-only-differs:condition-only",
        ),
        pytest.param(
            node("MIXED", comment=FACTS),
            pod(shows="mixed", registered=True),
            [],
            id="steady:quiet",
        ),
        pytest.param(
            node("IDLE", "POWERED_DOWN"),
            pod(shows="idle", registered=True, deleting=True),
            [],
            id="terminating-pod:not-patched",
        ),
        pytest.param(
            node("IDLE", "POWERING_DOWN", comment=FACTS),
            pod(shows="idle", registered=True),
            [DeletePod("cpu-0", "Slurm node is powering down", "u-0"), SetComment("cpu-0", "")],
            id="pod-being-deleted-this-pass:not-patched",
        ),
        # power_down_force on a node still powering up: Slurm clears POWERING_UP and queues
        # the power down (state seen on slurmctld 26.05: IDLE+DRAIN+NOT_RESPONDING+POWER_DOWN);
        # its power-save thread suspends it within a cycle, so the pod is on its way out.
        pytest.param(
            node("IDLE", "DRAIN", "NOT_RESPONDING", "POWER_DOWN", comment=FACTS),
            pod(shows="powering-up", registered=False),
            [],
            id="power-down-forced-while-powering-up:not-patched",
        ),
        pytest.param(
            node("IDLE", "POWER_DOWN", comment=FACTS),
            pod(shows="allocated", registered=True),
            [],
            id="idle-with-power-down-queued:not-patched",
        ),
        pytest.param(
            node("ALLOCATED", "POWER_DOWN", comment=FACTS),
            pod(shows="idle", registered=True),
            [pod_state("allocated", True, "idle", True)],
            id="alloc!:busy-until-its-job-ends:still-followed",
        ),
        # -- the Comment names pod, node and IP while the pod runs ---------------------------
        pytest.param(
            node("ALLOCATED"),
            pod(shows="allocated", registered=True),
            [SetComment("cpu-0", FACTS)],
            id="running:comment-set",
        ),
        pytest.param(
            node("ALLOCATED", comment="k8s: pod slurm/cpu-0 on skb-real-1 ip 10.213.0.3"),
            pod(shows="allocated", registered=True),
            [SetComment("cpu-0", FACTS)],
            id="an-old-pod's-facts:replaced",
        ),
        pytest.param(
            node("ALLOCATED", "POWERING_UP", comment=WAITING),
            pod(shows="powering-up", registered=False),
            [SetComment("cpu-0", FACTS)],
            id="waiting-message-then-running:facts",
        ),
        pytest.param(
            node("ALLOCATED", comment="rack 4"),
            pod(shows="allocated", registered=True),
            [],
            id="admin-comment:kept",
        ),
        pytest.param(
            node("IDLE", "POWERED_DOWN", comment=FACTS),
            None,
            [SetComment("cpu-0", "")],
            id="pod-gone:cleared",
        ),
        pytest.param(
            node("DOWN", comment=FACTS, reason="k8s: PodMissing: gone"),
            None,
            [PowerDown("cpu-0", "held DOWN for 0:00:30"), SetComment("cpu-0", "")],
            id="down-pod-gone:cleared",
        ),
        pytest.param(
            node("IDLE", "POWERED_DOWN", comment="rack 4"),
            None,
            [],
            id="pod-gone+admin-comment:kept",
        ),
    ],
)
def test_plan_shows_each_side_on_the_other(
    slurm: SlurmNode, shown: PodView | None, actions: list[object]
) -> None:
    assert plan([slurm], [shown] if shown else [], POOLS, NOW, GUARDS) == actions


@pytest.mark.parametrize(
    ("comment", "actions"),
    [
        pytest.param(WAITING, [], id="says-so:quiet"),
        pytest.param(FACTS, [SetComment("cpu-0", WAITING)], id="old-facts:waiting-wins"),
        pytest.param("", [SetComment("cpu-0", WAITING)], id="empty:waiting"),
    ],
)
def test_a_waiting_message_wins_while_the_pod_is_pending(
    comment: str, actions: list[Action]
) -> None:
    held = dataclasses.replace(
        pod(shows="powering-up", registered=False, phase="Pending", host="", ip=""),
        holdup=PodHoldup("Unschedulable", "0/3 nodes", NOW - timedelta(seconds=40)),
    )
    slurm = node("ALLOCATED", "POWERING_UP", comment=comment)
    assert plan([slurm], [held], POOLS, NOW, GUARDS) == actions


# -- patches counted over passes -----------------------------------------------------------------


class World(Harness):
    def __init__(self, *nodes: SlurmNode) -> None:
        super().__init__(nodes, now=NOW)

    def becomes(self, name: str, state: str, *flags: str) -> None:
        self.slurm.nodes[name] = dataclasses.replace(
            self.slurm.nodes[name], state=state, flags=frozenset({"CLOUD", *flags})
        )

    def passes(self, count: int = 1) -> list[tuple[str, str]]:
        """Run ``count`` reconcile passes; the patches they sent."""
        before = len(self.pods.patches)
        for _ in range(count):
            self.service.reconcile_once()
        return self.pods.patches[before:]


def test_patches_only_on_transitions_one_label_and_one_status_patch_at_most() -> None:
    w = World(SlurmNode("cpu-0", "ALLOCATED", frozenset({"CLOUD", "POWERING_UP"})))
    assert w.passes() == []  # the pass that creates the pod: no pod to show anything yet
    assert w.passes() == [("cpu-0", "label"), ("cpu-0", "status")]  # powering-up, False
    assert w.passes(5) == []  # nothing changed: nothing sent
    w.pods.pods["cpu-0"] = dataclasses.replace(
        w.pods.pods["cpu-0"], phase="Running", ip="10.0.0.9", host="worker-1"
    )
    w.becomes("cpu-0", "ALLOCATED")  # slurmd registered
    assert w.passes(3) == [("cpu-0", "label"), ("cpu-0", "status")]
    w.becomes("cpu-0", "IDLE")  # the job ended: the condition stays True
    assert w.passes(3) == [("cpu-0", "label")]
    w.becomes("cpu-0", "IDLE", "NOT_RESPONDING")
    assert w.passes(3) == [("cpu-0", "label"), ("cpu-0", "status")]
    # One Event per transition (the first label is none), in order.
    assert [(p, r, m) for p, r, m, _ in w.pods.events if r == "SlurmStateChanged"] == [
        ("cpu-0", "SlurmStateChanged", "powering-up → allocated"),
        ("cpu-0", "SlurmStateChanged", "allocated → idle"),
        ("cpu-0", "SlurmStateChanged", "idle → not-responding"),
    ]


def test_comments_are_set_once_per_change() -> None:
    w = World(
        SlurmNode("cpu-0", "ALLOCATED", frozenset({"CLOUD"})),
        SlurmNode("cpu-1", "IDLE", frozenset({"CLOUD"})),
    )
    w.pods.add("cpu-0", ip="10.0.0.1")
    w.pods.add("cpu-1", ip="10.0.0.2")
    for name in ("cpu-0", "cpu-1"):
        w.pods.pods[name] = dataclasses.replace(w.pods.pods[name], host="worker-1")
    w.passes()
    assert w.slurm.nodes["cpu-0"].comment == "k8s: pod cpu-0 on worker-1 ip 10.0.0.1"
    assert w.slurm.nodes["cpu-1"].comment == "k8s: pod cpu-1 on worker-1 ip 10.0.0.2"
    before = len(w.slurm.journal)
    w.passes(3)
    assert not [j for j in w.slurm.journal[before:] if "comment" in j]


def test_patches_at_a_thousand_nodes_cost_one_per_pod_per_transition() -> None:
    config = MINIMAL_CONFIG.replace("cpu-[0-3]", "cpu-[0-999]")
    nodes = [SlurmNode(f"cpu-{i}", "IDLE", frozenset({"CLOUD"})) for i in range(1000)]
    h = Harness(nodes, now=NOW, config=config)
    slurm, pods, service = h.slurm, h.pods, h.service
    for n in nodes:
        pods.add(n.name)
    service.reconcile_once()
    assert len(pods.patches) == 2000  # first label and condition of each
    service.reconcile_once()
    assert len(pods.patches) == 2000
    for i in range(0, 1000, 10):  # a job on every tenth node
        slurm.nodes[f"cpu-{i}"] = dataclasses.replace(slurm.nodes[f"cpu-{i}"], state="ALLOCATED")
    service.reconcile_once()
    service.reconcile_once()
    assert len(pods.patches) == 2100  # a label each, the condition unchanged


@pytest.mark.parametrize(
    ("memory_s", "patches"),
    [
        pytest.param(30.0, [("cpu-0", "label"), ("cpu-0", "status")], id="watch-lags:sent-once"),
        pytest.param(0.0, [("cpu-0", "label"), ("cpu-0", "status")] * 2, id="memory-over:again"),
    ],
)
def test_a_pass_before_the_watch_shows_a_patch_does_not_send_it_again(
    memory_s: float, patches: list[tuple[str, str]]
) -> None:
    w = World(SlurmNode("cpu-0", "IDLE", frozenset({"CLOUD"})))
    w.pods.add("cpu-0")
    w.service.state_sent_memory_s = memory_s
    real = w.pods.set_slurm_states

    def lagging(changes: list[SetPodSlurmState]) -> dict[str, object]:
        shown = dict(w.pods.pods)
        result = real(changes)
        w.pods.pods = shown  # the patch went out; the watch has not brought it back yet
        return dict(result)

    w.pods.set_slurm_states = lagging  # type: ignore[method-assign]
    assert w.passes(2) == patches
    events = [e for e in w.pods.events if e[1] == "SlurmStateChanged"]
    assert events == []  # a first label is no transition


def test_a_refused_patch_is_logged_and_retried_next_pass(caplog: pytest.LogCaptureFixture) -> None:
    w = World(SlurmNode("cpu-0", "IDLE", frozenset({"CLOUD"})))
    w.pods.add("cpu-0")
    real = w.pods.set_slurm_states
    w.pods.set_slurm_states = lambda changes: {  # type: ignore[method-assign]
        c.node: Forbidden("pods is forbidden: cannot patch") for c in changes
    }
    actions: list[Action] = w.service.reconcile_once()
    assert [type(a).__name__ for a in actions] == ["SetPodSlurmState"]
    assert "Slurm state of pod(s) cpu-0 not shown" in caplog.text
    w.pods.set_slurm_states = real  # type: ignore[method-assign]
    assert w.passes() == [("cpu-0", "label"), ("cpu-0", "status")]


# -- what the gateway sends ---------------------------------------------------------------------


POD = "/api/v1/namespaces/slurm/pods/cpu-0"


def patched_count(metrics: BridgeMetrics, part: str) -> float:
    value = metrics.registry.get_sample_value(
        "slurm_k8s_bridge_pod_state_patches_total", {"part": part}
    )
    assert value is not None, f"no {part} series: every part is a series from the start"
    return value


@pytest.mark.parametrize(
    ("change", "sent"),
    [
        pytest.param(
            pod_state("allocated", True, "powering-up", False),
            [("PATCH", POD), ("PATCH", f"{POD}/status")],
            id="both",
        ),
        pytest.param(pod_state("idle", True, "allocated", True), [("PATCH", POD)], id="label"),
        pytest.param(
            pod_state("idle", False, "idle", True), [("PATCH", f"{POD}/status")], id="condition"
        ),
    ],
)
def test_the_gateway_patches_only_what_changed(
    api_server: FakeApiServer, change: SetPodSlurmState, sent: list[tuple[str, str]]
) -> None:
    api_server.default = status_answer(200, "", "")
    gateway = gateway_to(api_server)
    gateway.counters = metrics = BridgeMetrics()
    assert gateway.set_slurm_states([change]) == {"cpu-0": True}
    assert [(r.method, r.path) for r in api_server.requests] == sent
    # The metric counts exactly the patches sent, by part (the bench reads it at 1,000 pods).
    patched = {part: patched_count(metrics, part) for part in ("label", "condition")}
    assert patched == {
        "label": sum(1 for _, path in sent if path == POD),
        "condition": sum(1 for _, path in sent if path.endswith("/status")),
    }
    for request in api_server.requests:
        body = json.loads(request.body)
        if request.path.endswith("/status"):
            assert request.headers["content-type"] == "application/strategic-merge-patch+json"
            (condition,) = body["status"]["conditions"]
            assert condition["type"] == "slurm-k8s-bridge.io/registered"
            assert condition["status"] == ("True" if change.registered else "False")
            assert condition["message"] == f"Slurm node cpu-0 is {change.state}"
        else:
            assert request.headers["content-type"] == "application/merge-patch+json"
            assert body == {
                "metadata": {"labels": {"slurm-k8s-bridge.io/slurm-state": change.state}}
            }


def test_a_patch_of_a_pod_that_is_gone_is_no_error(api_server: FakeApiServer) -> None:
    api_server.answer(f"PATCH {POD}", status_answer(404, "NotFound", 'pods "cpu-0" not found'))
    gateway = gateway_to(api_server)
    gateway.counters = metrics = BridgeMetrics()
    assert gateway.set_slurm_states([pod_state("idle", True, "allocated", True)]) == {
        "cpu-0": False
    }
    assert patched_count(metrics, "label") == 0
