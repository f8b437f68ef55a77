"""``pod_view`` and ``pod_failure`` over pod JSON as the API server sends it."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from bridge.domain.pods import (
    LABEL_NODE,
    LABEL_POOL,
    LABEL_TEMPLATE_HASH,
    PodFailure,
    PodHoldup,
    PodView,
    pod_failure,
    pod_view,
)

CREATED = "2026-12-02T11:58:00Z"


def manifest(status: dict[str, Any], *, deleting: bool = False, **metadata: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": "cpu-0",
        "namespace": "slurm",
        "creationTimestamp": CREATED,
        "labels": {LABEL_NODE: "cpu-0", LABEL_POOL: "cpu"},
        **metadata,
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-12-02T12:00:00Z"
    return {"metadata": meta, "spec": {"nodeName": "worker-1"}, "status": status}


def waiting(reason: str, message: str = "") -> dict[str, Any]:
    state: dict[str, Any] = {"waiting": {"reason": reason}}
    if message:
        state["waiting"]["message"] = message
    return {"name": "slurmd", "ready": False, "state": state}


def terminated(reason: str, code: int) -> dict[str, Any]:
    return {"name": "slurmd", "state": {"terminated": {"reason": reason, "exitCode": code}}}


SCHEDULED = {"type": "PodScheduled", "status": "True"}
UNSCHEDULABLE = {
    "type": "PodScheduled",
    "status": "False",
    "reason": "Unschedulable",
    "message": "0/3 nodes are available: 3 Insufficient cpu.",
}


@pytest.mark.parametrize(
    ("status", "failure"),
    [
        pytest.param({}, None, id="no-status-yet"),
        pytest.param({"phase": "Pending"}, None, id="pending"),
        pytest.param(
            {
                "phase": "Pending",
                "conditions": [SCHEDULED],
                "containerStatuses": [waiting("ContainerCreating")],
            },
            None,
            id="pending-container-creating",
        ),
        pytest.param(
            {
                "phase": "Running",
                "podIP": "10.1.0.5",
                "conditions": [SCHEDULED],
                "containerStatuses": [{"name": "slurmd", "state": {"running": {}}}],
            },
            None,
            id="running",
        ),
        pytest.param(
            {"phase": "Pending", "conditions": [UNSCHEDULABLE]},
            None,  # a hold-up with a clock (PodView.holdup), not a failure
            id="unschedulable",
        ),
        pytest.param(
            {"phase": "Pending", "conditions": [{**UNSCHEDULABLE, "message": ""}]},
            None,
            id="unschedulable-no-message",
        ),
        pytest.param(
            {"phase": "Pending", "conditions": [{**UNSCHEDULABLE, "reason": "SchedulerError"}]},
            None,
            id="not-scheduled-other-reason",
        ),
        pytest.param(
            {
                "phase": "Pending",
                "containerStatuses": [waiting("ErrImagePull", "pull access denied")],
            },
            None,  # may succeed on the kubelet's next try: a hold-up
            id="err-image-pull",
        ),
        pytest.param(
            {"phase": "Pending", "containerStatuses": [waiting("ImagePullBackOff")]},
            None,
            id="image-pull-backoff-no-message",
        ),
        pytest.param(
            {
                "phase": "Pending",
                "containerStatuses": [
                    waiting("CreateContainerConfigError", 'secret "k" not found')
                ],
            },
            PodFailure("CreateContainerConfigError", 'secret "k" not found'),
            id="missing-secret",
        ),
        pytest.param(
            {
                "phase": "Pending",
                "initContainerStatuses": [waiting("ErrImagePull", "no such image")],
                "containerStatuses": [waiting("PodInitializing")],
            },
            None,
            id="init-container-image-pull",
        ),
        pytest.param(
            {"phase": "Pending", "containerStatuses": [waiting("ErrImageNeverPull", "never")]},
            PodFailure("ErrImageNeverPull", "never"),
            id="image-never-pull-is-permanent",
        ),
        pytest.param(
            {"phase": "Pending", "containerStatuses": [waiting("InvalidImageName", "bad")]},
            PodFailure("InvalidImageName", "bad"),
            id="invalid-image-name-is-permanent",
        ),
        pytest.param(
            {
                "phase": "Running",
                "initContainerStatuses": [terminated("Completed", 0)],
                "containerStatuses": [{"name": "slurmd", "state": {"running": {}}}],
            },
            None,
            id="init-container-completed",
        ),
        pytest.param(
            {
                "phase": "Failed",
                "reason": "Evicted",
                "message": "The node was low on resource: memory.",
            },
            PodFailure("Evicted", "The node was low on resource: memory."),
            id="evicted",
        ),
        pytest.param(
            {"phase": "Failed", "containerStatuses": [terminated("Error", 1)]},
            PodFailure("Failed", "pod phase is Failed"),
            id="failed-phase",
        ),
        pytest.param(
            {"phase": "Succeeded"},
            PodFailure("Completed", "pod phase is Succeeded"),
            id="succeeded",
        ),
        pytest.param(
            {
                "phase": "Running",
                "conditions": [
                    {
                        "type": "DisruptionTarget",
                        "status": "True",
                        "reason": "EvictionByEvictionAPI",
                        "message": "Eviction API: evicting",
                    }
                ],
            },
            PodFailure("EvictionByEvictionAPI", "Eviction API: evicting"),
            id="disruption-target",
        ),
        pytest.param(
            {"phase": "Running", "conditions": [{"type": "DisruptionTarget", "status": "True"}]},
            PodFailure("DisruptionTarget", "Kubernetes is disrupting the pod"),
            id="disruption-target-bare",
        ),
        pytest.param(
            {"phase": "Running", "conditions": [{"type": "DisruptionTarget", "status": "False"}]},
            None,
            id="disruption-target-false",
        ),
        pytest.param(
            {
                "phase": "Running",
                "containerStatuses": [
                    {"name": "slurmd", "state": {"running": {}}},
                    {**terminated("OOMKilled", 137), "name": "sidecar"},
                ],
            },
            None,  # slurmd and its jobs run on; Kubernetes keeps the pod Running too
            id="sidecar-killed-slurmd-runs",
        ),
        pytest.param(
            {
                "phase": "Running",
                "containerStatuses": [
                    {"name": "slurmd", "state": {"running": {}}},
                    {**terminated("Completed", 0), "name": "log-shipper"},
                ],
            },
            None,
            id="sidecar-done-slurmd-runs",
        ),
        pytest.param(
            {
                "phase": "Running",
                "containerStatuses": [
                    {"name": "log-shipper", "state": {"running": {}}},
                    terminated("OOMKilled", 137),
                ],
            },
            PodFailure("OOMKilled", "slurmd exited with code 137"),
            id="slurmd-killed-sidecar-runs",
        ),
        pytest.param(
            {"phase": "Running", "containerStatuses": [waiting("CrashLoopBackOff")]},
            PodFailure("CrashLoopBackOff", "CrashLoopBackOff"),
            id="crash-loop",
        ),
    ],
)
def test_pod_failure(status: dict[str, Any], failure: PodFailure | None) -> None:
    assert pod_failure(status) == failure
    assert pod_view(manifest(status)).failure == failure


SINCE = "2026-12-02T11:59:00Z"


@pytest.mark.parametrize(
    ("status", "holdup"),
    [
        pytest.param({"phase": "Pending"}, None, id="pending"),
        pytest.param(
            {"phase": "Pending", "conditions": [{**UNSCHEDULABLE, "lastTransitionTime": SINCE}]},
            PodHoldup(
                "Unschedulable",
                "0/3 nodes are available: 3 Insufficient cpu.",
                datetime(2026, 12, 2, 11, 59, tzinfo=UTC),
            ),
            id="unschedulable-since-its-transition",
        ),
        pytest.param(
            {"phase": "Pending", "conditions": [{**UNSCHEDULABLE, "message": ""}]},
            PodHoldup("Unschedulable", "no node fits", datetime(2026, 12, 2, 11, 58, tzinfo=UTC)),
            id="unschedulable-no-time-counts-from-creation",
        ),
        pytest.param(
            {
                "phase": "Pending",
                "conditions": [{**SCHEDULED, "lastTransitionTime": SINCE}],
                "containerStatuses": [waiting("ErrImagePull", "registry timeout")],
            },
            PodHoldup(
                "ErrImagePull", "registry timeout", datetime(2026, 12, 2, 11, 59, tzinfo=UTC)
            ),
            id="pull-since-scheduled",
        ),
        pytest.param(
            {
                "phase": "Pending",
                "initContainerStatuses": [waiting("ImagePullBackOff", "back-off")],
            },
            PodHoldup("ImagePullBackOff", "back-off", datetime(2026, 12, 2, 11, 58, tzinfo=UTC)),
            id="init-container-pull",
        ),
        pytest.param(
            {"phase": "Pending", "containerStatuses": [waiting("ErrImageNeverPull", "never")]},
            None,  # a failure instead (see test_pod_failure)
            id="permanent-pull-error-is-no-holdup",
        ),
    ],
)
def test_pod_holdup(status: dict[str, Any], holdup: PodHoldup | None) -> None:
    assert pod_view(manifest(status)).holdup == holdup


def test_deletion_deadline_and_uid_are_read() -> None:
    view = pod_view(manifest({"phase": "Running"}, deleting=True, uid="u-1"))
    assert view.uid == "u-1"
    assert view.deletion_deadline == datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
    assert view.holdup is None
    assert view.deletion_grace_s is None


@pytest.mark.parametrize(
    ("value", "grace"),
    [(30, 30), (0, 0), ("0", None), (True, None), (None, None)],
    ids=["graceful", "forced", "text", "bool", "absent"],
)
def test_the_deletion_grace_period_is_read(value: object, grace: int | None) -> None:
    metadata = {} if value is None else {"deletionGracePeriodSeconds": value}
    view = pod_view(manifest({"phase": "Running"}, deleting=True, **metadata))
    assert view.deletion_grace_s == grace


def test_pod_view_reads_the_manifest() -> None:
    status = {"phase": "Running", "podIP": "10.1.0.5"}
    assert pod_view(manifest(status)) == PodView(
        name="cpu-0",
        node="cpu-0",
        pool="cpu",
        phase="Running",
        ip="10.1.0.5",
        created_at=datetime(2026, 12, 2, 11, 58, tzinfo=UTC),
        deleting=False,
        failure=None,
        host="worker-1",
        namespace="slurm",
    )
    assert pod_view(manifest(status)).is_running


REGISTERED = "slurm-k8s-bridge.io/registered"


@pytest.mark.parametrize(
    ("labels", "conditions", "state", "registered"),
    [
        pytest.param({}, [], "", None, id="fresh-pod:nothing-shown"),
        pytest.param(
            {"slurm-k8s-bridge.io/slurm-state": "allocated"},
            [{"type": REGISTERED, "status": "True"}],
            "allocated",
            True,
            id="label+condition-true",
        ),
        pytest.param(
            {"slurm-k8s-bridge.io/slurm-state": "powering-up"},
            [SCHEDULED, {"type": REGISTERED, "status": "False"}],
            "powering-up",
            False,
            id="label+condition-false-among-others",
        ),
        pytest.param(
            {},
            [{"type": REGISTERED, "status": "Unknown"}],
            "",
            None,
            id="condition-unknown:as-absent",
        ),
        pytest.param(
            {}, [{"type": "Ready", "status": "True"}], "", None, id="only-kubelet's-conditions"
        ),
    ],
)
def test_pod_view_reads_the_slurm_state_the_pod_shows(
    labels: dict[str, str],
    conditions: list[dict[str, str]],
    state: str,
    registered: bool | None,
) -> None:
    base = {LABEL_NODE: "cpu-0", LABEL_POOL: "cpu"}
    view = pod_view(
        manifest({"phase": "Running", "conditions": conditions}, labels={**base, **labels})
    )
    assert (view.slurm_state, view.registered) == (state, registered)


@pytest.mark.parametrize(
    ("status", "failure"),
    [
        ({"phase": "Running"}, PodFailure("Deleted", "the pod is being deleted")),
        # A known cause wins over the generic "Deleted".
        ({"phase": "Failed", "reason": "Evicted", "message": "m"}, PodFailure("Evicted", "m")),
    ],
    ids=["running", "evicted"],
)
def test_a_deleting_pod_has_a_failure_and_is_not_running(
    status: dict[str, Any], failure: PodFailure
) -> None:
    view = pod_view(manifest(status, deleting=True))
    assert view.deleting
    assert view.failure == failure
    assert not view.is_running


def test_defaults_when_fields_are_missing() -> None:
    view = pod_view({"metadata": {"name": "cpu-7", "creationTimestamp": CREATED}})
    assert (view.node, view.pool, view.phase, view.ip, view.host) == (
        "cpu-7",
        "",
        "Pending",
        "",
        "",
    )
    assert view.failure is None
    assert not view.deleting


@pytest.mark.parametrize(
    ("labels", "template_hash"),
    [
        ({LABEL_NODE: "cpu-0", LABEL_TEMPLATE_HASH: "ab12cd34ef"}, "ab12cd34ef"),
        # A pod of a bridge before the label: unknown, which the plan never rolls.
        ({LABEL_NODE: "cpu-0"}, ""),
    ],
    ids=["labelled", "older bridge"],
)
def test_pod_view_reads_the_template_hash(labels: dict[str, str], template_hash: str) -> None:
    assert pod_view(manifest({}, labels=labels)).template_hash == template_hash


@pytest.mark.parametrize(
    ("spec", "pod_group"),
    [
        ({"schedulingGroup": {"podGroupName": "skb-job-12-cpu-3f2a1c"}}, "skb-job-12-cpu-3f2a1c"),
        ({}, None),
        ({"schedulingGroup": {}}, None),
        ({"schedulingGroup": {"podGroupName": ""}}, None),
        ({"schedulingGroup": "skb-job-12"}, None),
    ],
    ids=["in-a-gang", "on-its-own", "no-name", "empty-name", "malformed"],
)
def test_pod_view_reads_its_pod_group(spec: dict[str, Any], pod_group: str | None) -> None:
    doc = manifest({})
    doc["spec"] = {**doc["spec"], **spec}
    assert pod_view(doc).pod_group == pod_group
