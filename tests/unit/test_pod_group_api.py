"""The PodGroup API through the real ``PodGateway`` and client library, against
``FakeApiServer``: which version discovery picks, and the groups' create, list, minCount patch
and delete, with the API server's answers translated as for pods."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from bridge.domain.gangs import Gang, render_pod_group
from bridge.domain.pod_rendering import PodSettings
from bridge.errors import BackendError, Forbidden, InvalidInput
from tests.unit.fake_kube_api import Answer, FakeApiServer, gateway_to, json_answer, status_answer

GROUP = "/apis/scheduling.k8s.io"
V1BETA1 = f"{GROUP}/v1beta1"
PODGROUPS = f"{V1BETA1}/namespaces/slurm/podgroups"
SETTINGS = PodSettings(namespace="slurm", cluster_name="lab", conf_server="ctl:6817")
NAME = "skb-job-12-cpu-3f2a1c"


def api_group(*versions: str) -> Answer:
    """``GET /apis/scheduling.k8s.io``: the group's served versions."""
    return json_answer(
        {
            "kind": "APIGroup",
            "name": "scheduling.k8s.io",
            "versions": [
                {"groupVersion": f"scheduling.k8s.io/{v}", "version": v} for v in versions
            ],
        }
    )


def resources(version: str, *names: str) -> Answer:
    return json_answer(
        {
            "kind": "APIResourceList",
            "groupVersion": f"scheduling.k8s.io/{version}",
            "resources": [{"name": n, "namespaced": n != "priorityclasses"} for n in names],
        }
    )


NOT_FOUND = status_answer(404, "NotFound", "the server could not find the requested resource")


@pytest.mark.parametrize(
    ("answers", "api", "asked"),
    [
        pytest.param({GROUP: [NOT_FOUND]}, None, [GROUP], id="group-not-served"),
        pytest.param(
            {GROUP: [api_group("v1")], f"{GROUP}/v1": [resources("v1", "priorityclasses")]},
            None,
            [GROUP, f"{GROUP}/v1"],
            id="only-priority-classes",
        ),
        pytest.param(
            {
                GROUP: [api_group("v1", "v1beta1", "v1alpha3")],
                f"{GROUP}/v1": [resources("v1", "priorityclasses")],
                V1BETA1: [resources("v1beta1", "podgroups", "podgroups/status", "workloads")],
            },
            "scheduling.k8s.io/v1beta1",
            [GROUP, f"{GROUP}/v1", V1BETA1],  # found: the alpha is not asked
            id="1.37-beta",
        ),
        pytest.param(
            {
                GROUP: [api_group("v1", "v1alpha3")],
                f"{GROUP}/v1": [resources("v1", "priorityclasses")],
                f"{GROUP}/v1alpha3": [resources("v1alpha3", "podgroups")],
            },
            "scheduling.k8s.io/v1alpha3",
            [GROUP, f"{GROUP}/v1", f"{GROUP}/v1alpha3"],
            id="alpha",
        ),
        pytest.param(
            {
                GROUP: [api_group("v1", "v1alpha1")],
                f"{GROUP}/v1": [resources("v1", "priorityclasses")],
            },
            None,
            [GROUP, f"{GROUP}/v1"],  # a version the bridge does not speak is not asked
            id="1.35-workloads-only",
        ),
    ],
)
def test_discovery_picks_the_preferred_version_that_serves_podgroups(
    api_server: FakeApiServer,
    answers: dict[str, list[Answer]],
    api: str | None,
    asked: list[str],
) -> None:
    for path, scripted in answers.items():
        api_server.answer(f"GET {path}", *scripted)
    gateway = gateway_to(api_server)
    assert gateway.pod_group_api() == api
    assert gateway.pod_group_api() == api  # asked once: the answer is kept
    assert [r.path for r in api_server.requests] == asked


def served(api_server: FakeApiServer) -> None:
    api_server.answer(f"GET {GROUP}", api_group("v1", "v1beta1"))
    api_server.answer(f"GET {GROUP}/v1", resources("v1", "priorityclasses"))
    api_server.answer(f"GET {V1BETA1}", resources("v1beta1", "podgroups"))


def manifest() -> dict[str, Any]:
    gang = Gang(NAME, "cpu", 12, ("cpu-0", "cpu-1"))
    return render_pod_group(gang, "scheduling.k8s.io/v1beta1", SETTINGS)


@pytest.mark.parametrize(
    ("answer", "outcome"),
    [
        (Answer(201), True),
        (status_answer(409, "AlreadyExists", f'podgroups "{NAME}" already exists'), False),
        (status_answer(403, "Forbidden", "podgroups is forbidden"), Forbidden),
        (status_answer(422, "Invalid", "spec.schedulingPolicy: Required value"), InvalidInput),
    ],
    ids=["created", "exists-already", "forbidden", "invalid"],
)
def test_create_sends_the_manifest_to_its_versions_collection(
    api_server: FakeApiServer, answer: Answer, outcome: object
) -> None:
    api_server.answer(f"POST {PODGROUPS}", answer)
    results = gateway_to(api_server).create_pod_groups([manifest()])
    result = results[NAME]
    if isinstance(outcome, bool):
        assert result is outcome
    else:
        assert type(result) is outcome
    (request,) = api_server.requests  # no discovery: the manifest names its version
    assert (request.method, request.path) == ("POST", PODGROUPS)
    assert json.loads(request.body) == manifest()
    assert request.headers["authorization"] == "Bearer t0ken"


def listed(*items: dict[str, Any], then: str = "") -> Answer:
    metadata = {"resourceVersion": "7", **({"continue": then} if then else {})}
    return json_answer({"kind": "PodGroupList", "metadata": metadata, "items": list(items)})


def stored(name: str, **status: Any) -> dict[str, Any]:
    doc = manifest()
    doc["metadata"] = {**doc["metadata"], "name": name, "creationTimestamp": "2026-12-02T12:00:00Z"}
    if status:
        doc["status"] = status
    return doc


def test_list_reads_every_page_by_the_bridges_selector(api_server: FakeApiServer) -> None:
    served(api_server)
    unschedulable = {
        "type": "PodGroupInitiallyScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": "0/3 nodes are available",
        "lastTransitionTime": "2026-12-02T12:00:05Z",
    }
    api_server.answer(
        f"GET {PODGROUPS}",
        listed(stored("g1"), then="next"),
        listed(stored("g2", conditions=[unschedulable])),
    )
    groups = gateway_to(api_server).list_pod_groups()
    assert [(g.name, g.unschedulable is not None) for g in groups] == [
        ("g1", False),
        ("g2", True),
    ]
    lists = [urlsplit(r.path) for r in api_server.requests if r.path.startswith(PODGROUPS)]
    queries = [parse_qs(q.query) for q in lists]
    assert [q["labelSelector"] for q in queries] == [
        ["app.kubernetes.io/managed-by=slurm-k8s-bridge,slurm-k8s-bridge.io/cluster=lab"]
    ] * 2
    assert [q.get("continue") for q in queries] == [None, ["next"]]


def test_min_count_is_a_merge_patch_of_that_field(api_server: FakeApiServer) -> None:
    served(api_server)
    api_server.answer(f"PATCH {PODGROUPS}/{NAME}", Answer(200))
    gateway_to(api_server).set_pod_group_min_count(NAME, 2)
    request = api_server.requests[-1]
    assert (request.method, request.path) == ("PATCH", f"{PODGROUPS}/{NAME}")
    assert request.headers["content-type"] == "application/merge-patch+json"
    assert json.loads(request.body) == {"spec": {"schedulingPolicy": {"gang": {"minCount": 2}}}}


@pytest.mark.parametrize(
    ("answer", "deleted"),
    [(Answer(200), True), (status_answer(404, "NotFound", "not found"), False)],
    ids=["deleted", "gone-already"],
)
def test_delete(api_server: FakeApiServer, answer: Answer, deleted: bool) -> None:
    served(api_server)
    api_server.answer(f"DELETE {PODGROUPS}/{NAME}", answer)
    assert gateway_to(api_server).delete_pod_group(NAME) is deleted
    assert api_server.requests[-1].method == "DELETE"


def test_writes_without_a_served_api_say_so(api_server: FakeApiServer) -> None:
    api_server.answer(f"GET {GROUP}", NOT_FOUND)
    gateway = gateway_to(api_server)
    with pytest.raises(BackendError, match="serves no PodGroup API"):
        gateway.delete_pod_group(NAME)
    assert gateway.list_pod_groups() == []
