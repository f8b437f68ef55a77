"""Gang scheduling's pure rules as tables: which nodes of a resume call form a gang, the group's
manifest and name, reading a PodGroup back, which groups are stale, which gangs came out short,
and whether the bridge runs gang scheduling at all."""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from bridge.domain.gang_mode import GANG_MODE_OFF, GangMode, choose_pod_group_api, gang_mode
from bridge.domain.gangs import (
    Gang,
    gang_members,
    gang_name,
    gang_suffix,
    groups_in_view,
    job_gangs,
    render_pod_group,
    short_gangs,
    stale_pod_groups,
)
from bridge.domain.pod_groups import GangUnschedulable, PodGroupView, pod_group_view
from bridge.domain.pod_rendering import PodSettings
from bridge.domain.pods import MANAGED_BY, PodView
from bridge.domain.resume_file import ResumeJob
from bridge.errors import TransientBackendError

NOW = datetime(2026, 12, 2, 12, 0, 0, tzinfo=UTC)
SUFFIX = "3f2a1c"
SETTINGS = PodSettings(namespace="slurm", cluster_name="lab", conf_server="ctl:6817")
#: The call resumes these nodes, of these pools.
POOLS_OF = {
    "cpu-0": "cpu",
    "cpu-1": "cpu",
    "cpu-2": "cpu",
    "cpu-3": "cpu",
    "gpu-0": "gpu",
    "gpu-1": "gpu",
}


def job(job_id: int, *nodes: str) -> ResumeJob:
    return ResumeJob(job_id=job_id, nodes=nodes)


def gang(job_id: int, pool: str, *nodes: str) -> Gang:
    return Gang(f"skb-job-{job_id}-{pool}-{SUFFIX}", pool, job_id, nodes)


@pytest.mark.parametrize(
    ("jobs", "gangs"),
    [
        pytest.param([], [], id="no-resume-file"),
        pytest.param(
            [job(12, "cpu-0", "cpu-1", "cpu-2")],
            [gang(12, "cpu", "cpu-0", "cpu-1", "cpu-2")],
            id="one-job-one-pool",
        ),
        pytest.param(
            [job(12, "cpu-0", "gpu-0", "cpu-1", "gpu-1")],
            [gang(12, "cpu", "cpu-0", "cpu-1"), gang(12, "gpu", "gpu-0", "gpu-1")],
            id="multi-pool-job-one-gang-per-pool",
        ),
        pytest.param(
            [job(12, "cpu-0", "cpu-1", "gpu-0")],
            [gang(12, "cpu", "cpu-0", "cpu-1")],
            id="multi-pool-job-one-node-in-a-pool-left-alone",
        ),
        pytest.param([job(12, "cpu-0")], [], id="single-node-job-not-gated"),
        pytest.param(
            [job(12, "cpu-0", "cpu-1"), job(13, "cpu-1", "cpu-2", "cpu-3")],
            [gang(12, "cpu", "cpu-0", "cpu-1"), gang(13, "cpu", "cpu-2", "cpu-3")],
            id="shared-node-claimed-by-the-first-job",
        ),
        pytest.param(
            [job(12, "cpu-0", "cpu-1"), job(13, "cpu-1", "cpu-2")],
            [gang(12, "cpu", "cpu-0", "cpu-1")],
            id="shared-node-leaves-the-second-job-a-single-node",
        ),
        pytest.param(
            [job(12, "cpu-0"), job(13, "cpu-0", "cpu-1")],
            [gang(13, "cpu", "cpu-0", "cpu-1")],
            id="a-job-without-a-gang-claims-nothing",
        ),
        pytest.param(
            [job(12, "cpu-0", "cpu-9", "cpu-1")],
            [gang(12, "cpu", "cpu-0", "cpu-1")],
            id="nodes-the-call-does-not-resume-are-not-members",
        ),
        pytest.param(
            [job(12, "cpu-0", "cpu-8", "cpu-9")],
            [],
            id="the-call-resumes-one-node-of-the-job",
        ),
        pytest.param(
            [job(12, "cpu-0", "cpu-0", "cpu-1")],
            [gang(12, "cpu", "cpu-0", "cpu-1")],
            id="a-node-listed-twice-is-one-member",
        ),
        pytest.param(
            [job(12, "cpu-0"), job(13, "cpu-2"), job(12, "cpu-1")],
            [gang(12, "cpu", "cpu-0", "cpu-1")],
            id="a-job-listed-twice-is-one-job",
        ),
    ],
)
def test_job_gangs(jobs: list[ResumeJob], gangs: list[Gang]) -> None:
    assert job_gangs(jobs, POOLS_OF, SUFFIX) == gangs


def test_nodes_resumed_without_a_job_are_never_gated() -> None:
    """``scontrol power up``: the call resumes nodes no job of the file waits for."""
    gangs = job_gangs([job(12, "cpu-0", "cpu-1")], POOLS_OF, SUFFIX)
    assert gang_members(gangs) == {
        "cpu-0": "skb-job-12-cpu-3f2a1c",
        "cpu-1": "skb-job-12-cpu-3f2a1c",
    }


#: Kubernetes' DNS-1123 subdomain, as the API server checks a PodGroup's name.
SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


@pytest.mark.parametrize(
    ("job_id", "pool"),
    [(1, "cpu"), (2**32 - 1, "p" * 63), (12, "a-b-c")],
    ids=["small", "largest-job-id-longest-pool", "dashes"],
)
def test_a_group_name_is_a_dns_subdomain(job_id: int, pool: str) -> None:
    name = gang_name(job_id, pool, gang_suffix("resume-4242-a1b2c3"))
    assert SUBDOMAIN.fullmatch(name)
    assert len(name) <= 253


@pytest.mark.parametrize(
    ("first", "second", "same"),
    [
        ("resume-1-a", "resume-1-a", True),  # a retried call finds its group made
        ("resume-1-a", "resume-2-b", False),  # a requeued job's next resume gets a new one
    ],
    ids=["retry", "next-resume"],
)
def test_the_suffix_follows_the_request_id(first: str, second: str, same: bool) -> None:
    assert (gang_suffix(first) == gang_suffix(second)) is same
    assert re.fullmatch(r"[0-9a-f]{6}", gang_suffix(first))


def test_the_pod_group_manifest() -> None:
    manifest = render_pod_group(
        gang(12, "cpu", "cpu-0", "cpu-1", "cpu-2"), "scheduling.k8s.io/v1beta1", SETTINGS
    )
    assert manifest == {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {
            "name": "skb-job-12-cpu-3f2a1c",
            "namespace": "slurm",
            "labels": {
                "app.kubernetes.io/managed-by": "slurm-k8s-bridge",
                "slurm-k8s-bridge.io/cluster": "lab",
                "slurm-k8s-bridge.io/pool": "cpu",
            },
            "annotations": {
                "slurm-k8s-bridge.io/job-id": "12",
                "slurm-k8s-bridge.io/nodes": "cpu-[0-2]",
            },
        },
        "spec": {"schedulingPolicy": {"gang": {"minCount": 3}}},
    }


def group_manifest(
    conditions: list[dict[str, Any]] | None = None, **metadata: Any
) -> dict[str, Any]:
    """A PodGroup as the API server sends it."""
    manifest = render_pod_group(gang(12, "cpu", "cpu-0", "cpu-1"), "v", SETTINGS)
    manifest["metadata"].update(creationTimestamp="2026-12-02T11:58:00Z", **metadata)
    if conditions is not None:
        manifest["status"] = {"conditions": conditions}
    return manifest


def scheduled(status: str, reason: str, message: str = "m") -> dict[str, str]:
    return {
        "type": "PodGroupInitiallyScheduled",
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": "2026-12-02T11:59:00Z",
    }


CREATED = datetime(2026, 12, 2, 11, 58, tzinfo=UTC)
CONDITION_AT = datetime(2026, 12, 2, 11, 59, tzinfo=UTC)


@pytest.mark.parametrize(
    ("conditions", "unschedulable"),
    [
        pytest.param(None, None, id="not-tried-yet"),
        pytest.param(
            [scheduled("False", "Unschedulable", "0/3 nodes are available: 3 Insufficient cpu.")],
            GangUnschedulable("0/3 nodes are available: 3 Insufficient cpu.", CONDITION_AT),
            id="unschedulable",
        ),
        pytest.param([scheduled("True", "Scheduled")], None, id="placed"),
        pytest.param(
            [scheduled("False", "SchedulerError")], None, id="scheduler-error-is-no-verdict"
        ),
        pytest.param(
            [{"type": "PodGroupInitiallyScheduled", "status": "False", "reason": "Unschedulable"}],
            GangUnschedulable("the scheduler cannot place the gang whole", CREATED),
            id="no-message-nor-time",
        ),
        pytest.param(
            [{"type": "SomethingElse", "status": "False", "reason": "Unschedulable"}],
            None,
            id="another-condition",
        ),
    ],
)
def test_pod_group_view_reads_the_schedulers_word(
    conditions: list[dict[str, Any]] | None, unschedulable: GangUnschedulable | None
) -> None:
    assert pod_group_view(group_manifest(conditions)).unschedulable == unschedulable


def test_pod_group_view_reads_whose_it_is() -> None:
    assert pod_group_view(group_manifest()) == PodGroupView(
        name="skb-job-12-cpu-3f2a1c",
        created_at=CREATED,
        managed_by=MANAGED_BY,
        cluster="lab",
        pool="cpu",
        job_id="12",
        min_count=2,
    )
    foreign = pod_group_view(
        {"metadata": {"name": "train", "creationTimestamp": "2026-12-02T11:58:00Z"}}
    )
    assert (foreign.is_ours, foreign.min_count, foreign.job_id) == (False, None, "")


def group(
    name: str, age_s: float, *, ours: bool = True, min_count: int | None = None
) -> PodGroupView:
    return PodGroupView(
        name,
        NOW - timedelta(seconds=age_s),
        managed_by=MANAGED_BY if ours else "kueue",
        min_count=min_count,
    )


def pod(name: str, pod_group: str | None, *, deleting: bool = False) -> PodView:
    return PodView(
        name=name,
        node=name,
        pool="cpu",
        phase="Running",
        ip="",
        created_at=NOW,
        deleting=deleting,
        failure=None,
        pod_group=pod_group,
    )


@pytest.mark.parametrize(
    ("groups", "pods", "stale"),
    [
        pytest.param([group("g1", 60)], [], ["g1"], id="nobody-names-it"),
        pytest.param([group("g1", 59)], [], [], id="too-young-its-pods-are-on-their-way"),
        pytest.param([group("g1", 600)], [pod("cpu-0", "g1")], [], id="a-pod-names-it"),
        pytest.param(
            [group("g1", 600)],
            [pod("cpu-0", "g1", deleting=True)],
            [],
            id="a-terminating-pod-still-names-it",
        ),
        pytest.param([group("g1", 600, ours=False)], [], [], id="someone-elses-is-never-deleted"),
        pytest.param(
            [group("g2", 600), group("g1", 600), group("g3", 600)],
            [pod("cpu-0", "g3"), pod("cpu-1", None)],
            ["g1", "g2"],
            id="sorted",
        ),
    ],
)
def test_stale_pod_groups(
    groups: list[PodGroupView], pods: list[PodView], stale: list[str]
) -> None:
    assert stale_pod_groups(groups, pods, NOW) == stale


@pytest.mark.parametrize(
    ("groups", "pods", "in_view"),
    [
        pytest.param(
            [group("g1", 5, min_count=3)],
            [pod("cpu-0", "g1"), pod("cpu-1", "g1"), pod("cpu-2", "g1")],
            ["g1"],
            id="the-view-holds-the-whole-gang",
        ),
        pytest.param(
            [group("g1", 5, min_count=3)],
            [pod("cpu-0", "g1"), pod("cpu-1", None)],
            [],
            id="the-watch-has-shown-one-of-three",
        ),
        pytest.param(
            [group("g1", 5, min_count=2)],
            [pod("cpu-0", "g1"), pod("cpu-1", "g1", deleting=True)],
            ["g1"],
            id="a-terminating-member-still-counts",
        ),
        pytest.param(
            [group("g1", 5, min_count=3), group("g2", 5, min_count=2)],
            [pod("cpu-0", "g2"), pod("cpu-1", "g2"), pod("cpu-2", "g1")],
            ["g2"],
            id="each-group-by-its-own-members",
        ),
        pytest.param([group("g1", 5)], [], ["g1"], id="no-min-count-no-guard"),
    ],
)
def test_groups_in_view(
    groups: list[PodGroupView], pods: list[PodView], in_view: list[str]
) -> None:
    assert sorted(groups_in_view(groups, pods)) == in_view


G12 = gang(12, "cpu", "cpu-0", "cpu-1", "cpu-2")
G13 = gang(13, "gpu", "gpu-0", "gpu-1")


@pytest.mark.parametrize(
    ("created", "short"),
    [
        pytest.param(
            {"cpu-0": True, "cpu-1": True, "cpu-2": True, "gpu-0": True, "gpu-1": True},
            [],
            id="all-made",
        ),
        pytest.param(
            {
                "cpu-0": True,
                "cpu-1": TransientBackendError("HTTP 503"),
                "cpu-2": True,
                "gpu-0": True,
                "gpu-1": True,
            },
            [(G12, 2)],
            id="a-create-failed",
        ),
        pytest.param(
            {"cpu-0": False, "cpu-1": True, "cpu-2": True, "gpu-0": False, "gpu-1": False},
            [(G12, 2), (G13, 0)],
            id="pods-there-already-carry-no-group",
        ),
        pytest.param({}, [(G12, 0), (G13, 0)], id="none-answered"),
    ],
)
def test_short_gangs(created: Mapping[str, object], short: list[tuple[Gang, int]]) -> None:
    assert short_gangs([G12, G13], created) == short


@pytest.mark.parametrize(
    ("resources", "api"),
    [
        pytest.param({}, None, id="group-not-served"),
        pytest.param({"v1": ["priorityclasses"]}, None, id="only-priority-classes"),
        pytest.param(
            {"v1": ["priorityclasses"], "v1beta1": ["podgroups", "podgroups/status"]},
            "scheduling.k8s.io/v1beta1",
            id="1.37-beta",
        ),
        pytest.param(
            {"v1": ["priorityclasses"], "v1alpha3": ["podgroups"]},
            "scheduling.k8s.io/v1alpha3",
            id="alpha",
        ),
        pytest.param(
            {"v1": ["priorityclasses", "podgroups"], "v1beta1": ["podgroups"]},
            "scheduling.k8s.io/v1",
            id="v1-preferred",
        ),
        pytest.param(
            {"v1beta1": ["podgroups"], "v1alpha3": ["podgroups"]},
            "scheduling.k8s.io/v1beta1",
            id="beta-over-alpha",
        ),
        pytest.param({"v1alpha1": ["workloads"]}, None, id="1.35-workloads-only"),
    ],
)
def test_choose_pod_group_api(resources: dict[str, list[str]], api: str | None) -> None:
    assert choose_pod_group_api(resources) == api


@pytest.mark.parametrize(
    ("setting", "served", "unknown", "mode", "line"),
    [
        pytest.param(
            "auto",
            "scheduling.k8s.io/v1beta1",
            "",
            GangMode(api_version="scheduling.k8s.io/v1beta1"),
            "on (scheduling.k8s.io/v1beta1 PodGroup)",
            id="on",
        ),
        pytest.param(
            "auto",
            None,
            "",
            GangMode(why_off="the API server serves no PodGroup API"),
            "off: the API server serves no PodGroup API; a multi-node job's pods are placed "
            "one by one (job-aware failure)",
            id="not-served",
        ),
        pytest.param(
            "off",
            "scheduling.k8s.io/v1beta1",
            "",
            GANG_MODE_OFF,
            "off: kubernetes.gang_scheduling is off; a multi-node job's pods are placed one by "
            "one (job-aware failure)",
            id="configured-off",
        ),
        pytest.param(
            "auto",
            None,
            "HTTP 503",
            GangMode(why_off="the PodGroup API could not be discovered (HTTP 503)"),
            "off: the PodGroup API could not be discovered (HTTP 503); a multi-node job's "
            "pods are placed one by one (job-aware failure)",
            id="discovery-failed",
        ),
    ],
)
def test_gang_mode(
    setting: str, served: str | None, unknown: str, mode: GangMode, line: str
) -> None:
    found = gang_mode(setting, served, unknown=unknown)
    assert found == mode
    assert found.describe() == line
    assert found.on is bool(served and setting == "auto" and not unknown)
