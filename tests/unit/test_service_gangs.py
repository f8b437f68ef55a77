"""Gang scheduling in the service: a resume call makes each multi-node job's PodGroup before its
pods and renders them into it; a refused group costs atomicity, never a node; a gang short of
pods has its minCount lowered; the reconcile pass fails the pods of a gang the scheduler cannot
place and collects the groups no pod names."""

from __future__ import annotations

import dataclasses
import json
import logging
from datetime import timedelta
from typing import Any, cast

import pytest

from bridge.adapters.kubernetes import PodGateway
from bridge.config import parse_config
from bridge.domain.gang_mode import GANG_MODE_OFF, GangMode
from bridge.domain.gangs import gang_name, gang_suffix
from bridge.domain.pod_groups import GangUnschedulable
from bridge.domain.reconcile import CreatePod, DeletePodGroup, MarkDown
from bridge.domain.results import NodeResult, Outcome
from bridge.domain.verdict import ScaleUpEvent
from bridge.errors import Forbidden, TransientBackendError
from bridge.runtime.serve import discover_gang_mode
from tests.unit.fakes import MINIMAL_CONFIG, Update
from tests.unit.harness import Harness
from tests.unit.test_service import NOW, cloud, config, powering_up

ON = GangMode(api_version="scheduling.k8s.io/v1beta1")
REQUEST = "resume-4242-a1b2c3"
#: The groups' names for REQUEST (the suffix is the request id's hash).
G12_CPU = "skb-job-12-cpu-4a4dcd"
G13_GPU = "skb-job-13-gpu-4a4dcd"
#: Job 12 on three CPU nodes, job 13 on both GPU nodes and one CPU node, job 14 on one node.
RESUME_FILE = json.dumps(
    {
        "jobs": [
            {"job_id": 12, "nodes_resume": "cpu-[0-2]"},
            {"job_id": 13, "nodes_resume": "gpu-[0-1],cpu-3"},
        ],
        "all_nodes_resume": "cpu-[0-3],gpu-[0-1]",
    }
)
HOSTLIST = "cpu-[0-3],gpu-[0-1]"
ALL = ("cpu-0", "cpu-1", "cpu-2", "cpu-3", "gpu-0", "gpu-1")


class World(Harness):
    """The service wired to fakes, CONFIG's two pools, gang scheduling ``gang``."""

    def __init__(self, *nodes: Any, gang: GangMode = ON) -> None:
        super().__init__(nodes, now=NOW, config=config(), gang=gang)

    def group_of(self, node: str) -> str | None:
        return self.pods.pods[node].pod_group


def test_the_suffix_is_the_request_ids() -> None:
    """The names below are what the domain makes of REQUEST: checked once here."""
    assert gang_name(12, "cpu", gang_suffix(REQUEST)) == G12_CPU


def test_groups_are_created_before_their_pods_and_the_pods_name_them() -> None:
    w = World(*powering_up(*ALL))
    results = w.service.resume(HOSTLIST, RESUME_FILE, REQUEST)
    assert results == [NodeResult(n, Outcome.OK) for n in ALL]
    creates = [line for line in w.journal if line.startswith("create")]
    assert creates[:2] == [f"create podgroup {G12_CPU}", f"create podgroup {G13_GPU}"]
    assert sorted(creates[2:]) == [f"create {n}" for n in ALL]
    assert {n: w.group_of(n) for n in ALL} == {
        "cpu-0": G12_CPU,
        "cpu-1": G12_CPU,
        "cpu-2": G12_CPU,
        "cpu-3": None,  # job 13's only CPU node: a gang of one gates nothing
        "gpu-0": G13_GPU,
        "gpu-1": G13_GPU,
    }
    sent = w.pods.group_manifests[G12_CPU]
    assert sent["apiVersion"] == "scheduling.k8s.io/v1beta1"
    assert sent["spec"] == {"schedulingPolicy": {"gang": {"minCount": 3}}}
    assert w.pods.manifests["cpu-0"]["spec"]["schedulingGroup"] == {"podGroupName": G12_CPU}
    assert "schedulingGroup" not in w.pods.manifests["cpu-3"]["spec"]


@pytest.mark.parametrize(
    ("gang", "resume_file"),
    [
        (GANG_MODE_OFF, RESUME_FILE),
        (GangMode(why_off="the API server serves no PodGroup API"), RESUME_FILE),
        (ON, ""),  # scontrol power up: no job waits for the nodes
        (ON, "{not json"),  # a bad file costs the gangs, never the nodes
    ],
    ids=["configured-off", "not-served", "no-resume-file", "bad-resume-file"],
)
def test_without_gangs_the_pods_are_todays(gang: GangMode, resume_file: str) -> None:
    w = World(*powering_up(*ALL), gang=gang)
    results = w.service.resume(HOSTLIST, resume_file, REQUEST)
    assert results == [NodeResult(n, Outcome.OK) for n in ALL]
    assert w.pods.groups == {}
    assert not any("podgroup" in line for line in w.journal)
    assert all("schedulingGroup" not in w.pods.manifests[n]["spec"] for n in ALL)


def test_a_refused_group_leaves_its_pods_to_be_placed_one_by_one(
    caplog: pytest.LogCaptureFixture,
) -> None:
    w = World(*powering_up(*ALL))
    w.pods.group_errors[G12_CPU] = Forbidden("create podgroup: forbidden")
    with caplog.at_level(logging.WARNING):
        results = w.service.resume(HOSTLIST, RESUME_FILE, REQUEST)
    assert results == [NodeResult(n, Outcome.OK) for n in ALL]  # no node lost for its group
    assert [w.group_of(n) for n in ("cpu-0", "cpu-1", "cpu-2")] == [None, None, None]
    assert [w.group_of(n) for n in ("gpu-0", "gpu-1")] == [G13_GPU, G13_GPU]
    assert (
        f"request {REQUEST}: pod group {G12_CPU} not created, job 12's pods cpu-[0-2] are "
        "placed one by one: create podgroup: forbidden"
    ) in caplog.messages
    assert w.slurm.updates == []


def test_a_group_made_by_an_earlier_try_of_the_call_is_used() -> None:
    w = World(*powering_up(*ALL))
    w.service.resume(HOSTLIST, RESUME_FILE, REQUEST)
    for node in ALL:  # the pods went (say, a suspend), the groups stayed
        del w.pods.pods[node]
    w.service.resume(HOSTLIST, RESUME_FILE, REQUEST)
    assert w.group_of("cpu-0") == G12_CPU


def test_a_gang_short_of_pods_has_its_min_count_lowered(
    caplog: pytest.LogCaptureFixture,
) -> None:
    w = World(*powering_up(*ALL))
    w.pods.create_errors["cpu-1"] = TransientBackendError("create pod cpu-1: HTTP 503")
    with caplog.at_level(logging.WARNING):
        w.service.resume(HOSTLIST, RESUME_FILE, REQUEST)
    assert w.pods.groups[G12_CPU].min_count == 2
    assert w.pods.groups[G13_GPU].min_count == 2  # whole: untouched
    # The group's pods do not wait for the missing one, which the reconciler makes alone.
    assert w.journal.index(f"podgroup {G12_CPU} minCount 2") > w.journal.index("create cpu-2")
    assert (
        f"request {REQUEST}: pod group {G12_CPU}: 2 of 3 pods created (not cpu-1): minCount "
        "lowered to 2"
    ) in caplog.messages


def test_a_min_count_that_cannot_be_lowered_is_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    w = World(*powering_up(*ALL))
    w.pods.create_errors["cpu-1"] = TransientBackendError("HTTP 503")
    w.pods.min_count_error = TransientBackendError("patch: HTTP 503")
    with caplog.at_level(logging.WARNING):
        results = w.service.resume(HOSTLIST, RESUME_FILE, REQUEST)
    assert [r.node for r in results if r.outcome is Outcome.OK] == [n for n in ALL if n != "cpu-1"]
    assert any("minCount not lowered: patch: HTTP 503" in m for m in caplog.messages)


def test_accepted_resumes_make_the_groups_before_the_pods_in_the_background() -> None:
    w = World(*powering_up(*ALL))
    answer = w.service.accept_resume(HOSTLIST, RESUME_FILE, REQUEST)
    assert [r.outcome for r in answer] == [Outcome.ACCEPTED] * len(ALL)
    assert w.service.resumes.wait_idle(10)
    assert w.journal.index(f"create podgroup {G12_CPU}") < w.journal.index("create cpu-0")
    assert w.group_of("gpu-1") == G13_GPU


def unplaceable(w: World, name: str, *, ago_s: float = 5) -> None:
    """The scheduler's word on ``name``: the gang cannot be placed whole."""
    w.pods.groups[name] = dataclasses.replace(
        w.pods.groups[name],
        unschedulable=GangUnschedulable(
            "0/3 nodes are available: 3 Insufficient cpu.", NOW - timedelta(seconds=ago_s)
        ),
    )


def test_the_pass_fails_a_gang_the_scheduler_cannot_place_at_once() -> None:
    w = World(*powering_up(*ALL))
    w.service.resume(HOSTLIST, RESUME_FILE, REQUEST)
    unplaceable(w, G12_CPU)
    actions = w.service.reconcile_once()
    reason = (
        f"k8s: Unschedulable: pod group {G12_CPU} cannot be placed whole: 0/3 nodes are "
        "available: 3 Insufficient cpu."
    )
    downs = [u for u in w.slurm.updates if u.state == "down"]
    assert downs == [Update(("cpu-0", "cpu-1", "cpu-2"), "down", reason)]
    assert {a.node for a in actions if isinstance(a, MarkDown)} == {"cpu-0", "cpu-1", "cpu-2"}
    assert not any(n in w.pods.pods for n in ("cpu-0", "cpu-1", "cpu-2"))
    assert all(n in w.pods.pods for n in ("cpu-3", "gpu-0", "gpu-1"))  # other gangs: untouched


def test_the_pass_waits_while_an_autoscaler_adds_nodes_for_the_gang() -> None:
    w = World(*powering_up(*ALL))
    w.service.resume(HOSTLIST, RESUME_FILE, REQUEST)
    unplaceable(w, G12_CPU)
    for node in ("cpu-0", "cpu-1", "cpu-2"):
        # The fake's pods have no UID: one, as the API server gives it, for the Events to name.
        w.pods.pods[node] = dataclasses.replace(w.pods.pods[node], uid=f"u-{node}")
        w.pods.scale_up_events.append(
            ScaleUpEvent(f"u-{node}", "TriggeredScaleUp", "group a 1->4", NOW)
        )
    w.service.reconcile_once()
    assert [u for u in w.slurm.updates if u.state == "down"] == []
    assert all(n in w.pods.pods for n in ALL)


def test_pods_the_reconciler_creates_join_no_gang() -> None:
    """The reconciler has no resume file: a pod it makes for a missed resume is placed alone."""
    w = World(*powering_up("cpu-0", "cpu-1"))
    actions = w.service.reconcile_once()
    assert [a for a in actions if isinstance(a, CreatePod)] == [
        CreatePod("cpu-0", "cpu", "Slurm node is powering up and has no pod"),
        CreatePod("cpu-1", "cpu", "Slurm node is powering up and has no pod"),
    ]
    assert [w.group_of("cpu-0"), w.group_of("cpu-1")] == [None, None]
    assert not any("podgroup" in line for line in w.journal)


def test_the_pass_collects_groups_no_pod_names_once_stale(
    caplog: pytest.LogCaptureFixture,
) -> None:
    w = World(*[cloud(n, "IDLE", "POWERED_DOWN") for n in ALL])
    w.service.resume(HOSTLIST, RESUME_FILE, REQUEST)
    w.pods.pods.clear()  # the jobs ended, Slurm suspended the nodes, the pods went
    assert not [a for a in w.service.reconcile_once() if isinstance(a, DeletePodGroup)]
    w.now = NOW + timedelta(seconds=60)
    with caplog.at_level(logging.INFO):
        actions = w.service.reconcile_once()
    assert [a.name for a in actions if isinstance(a, DeletePodGroup)] == [G12_CPU, G13_GPU]
    assert w.pods.groups == {}
    assert f"reconcile: pod group {G12_CPU} deleted: no pod names it any more" in caplog.messages


def test_groups_that_cannot_be_read_leave_the_pass_to_the_pods_clocks(
    caplog: pytest.LogCaptureFixture,
) -> None:
    w = World(*powering_up(*ALL))
    w.service.resume(HOSTLIST, RESUME_FILE, REQUEST)
    unplaceable(w, G12_CPU)
    w.pods.list_groups_error = Forbidden("list podgroups: forbidden")
    with caplog.at_level(logging.WARNING):
        w.service.reconcile_once()
    assert [u for u in w.slurm.updates if u.state == "down"] == []
    assert "reconcile: pod groups not read: list podgroups: forbidden" in caplog.messages


def test_with_gang_scheduling_off_no_group_is_read() -> None:
    w = World(*powering_up("cpu-0"), gang=GANG_MODE_OFF)
    w.service.reconcile_once()
    assert w.pods.group_lists == 0
    assert w.service.gang_scheduling() == GANG_MODE_OFF


class Discovery:
    """What ``discover_gang_mode`` asks of the gateway: the served PodGroup API."""

    def __init__(self, answer: str | Exception | None) -> None:
        self.answer = answer
        self.asked = 0

    def pod_group_api(self) -> str | None:
        self.asked += 1
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


@pytest.mark.parametrize(
    ("setting", "answer", "level", "line"),
    [
        (
            "auto",
            "scheduling.k8s.io/v1beta1",
            logging.INFO,
            "gang scheduling: on (scheduling.k8s.io/v1beta1 PodGroup)",
        ),
        (
            "auto",
            None,
            logging.INFO,
            "gang scheduling: off: the API server serves no PodGroup API; a multi-node job's "
            "pods are placed one by one (job-aware failure)",
        ),
        (
            "off",
            "scheduling.k8s.io/v1beta1",
            logging.INFO,
            "gang scheduling: off: kubernetes.gang_scheduling is off; a multi-node job's pods "
            "are placed one by one (job-aware failure)",
        ),
        (
            "auto",
            TransientBackendError("discover /apis/scheduling.k8s.io: HTTP 503"),
            logging.WARNING,
            "gang scheduling: off: the PodGroup API could not be discovered (discover "
            "/apis/scheduling.k8s.io: HTTP 503); a multi-node job's pods are placed one by one "
            "(job-aware failure)",
        ),
    ],
    ids=["on", "not-served", "configured-off", "discovery-failed"],
)
def test_the_mode_is_logged_once_at_start(
    caplog: pytest.LogCaptureFixture,
    setting: str,
    answer: str | Exception | None,
    level: int,
    line: str,
) -> None:
    text = MINIMAL_CONFIG + f"kubernetes:\n  gang_scheduling: '{setting}'\n"
    gateway = Discovery(answer)
    with caplog.at_level(logging.INFO, logger="bridge.runtime.serve"):
        mode = discover_gang_mode(parse_config(text), cast(PodGateway, gateway))
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [(level, line)]
    assert mode.on is (line == "gang scheduling: on (scheduling.k8s.io/v1beta1 PodGroup)")
    assert gateway.asked == (0 if setting == "off" else 1)  # off: the API server is not asked
