"""Which of the pods carrying the bridge's labels are its own (issue 29 item 11).

A pod is the bridge's when its name is its node's and the bridge either found it in its first
list (adoption) or created it: the pod carries the create id the bridge last sent for its name,
and is bound by its UID from then on. ``PodProvenance`` on its own first, then the real
``PodGateway`` over ``FakeApiServer``: what its list, watch, read, create and delete make of
pods that are not ours.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from bridge.adapters.kubernetes import PodGateway
from bridge.adapters.kubernetes.provenance import PodProvenance
from bridge.domain.pods import PodView, pod_view
from bridge.errors import Conflict
from tests.unit.fake_kube_api import (
    Answer,
    Answering,
    FakeApiServer,
    as_created,
    gateway_to,
    json_answer,
    line,
    ours,
    pod,
    pod_list,
    status_answer,
    stored,
    watch_answer,
)

PODS = "/api/v1/namespaces/slurm/pods"
PROVENANCE_LOG = "bridge.adapters.kubernetes.provenance"
#: A create id that no create of these tests sent.
NOT_SENT = "0123456789abcdef" * 2


# -- PodProvenance on its own ---------------------------------------------------------------------


@dataclass(frozen=True)
class Seen:
    """A pod as the provenance is shown it: ``node`` is its node label (its name when empty),
    ``create`` the key of the create id it carries (see :class:`Create`; none when empty)."""

    name: str
    uid: str
    node: str = ""
    create: str = ""


@dataclass(frozen=True)
class Create:
    """The bridge creates pod ``name``: the provenance makes its create id, kept as ``key``."""

    name: str
    key: str


@dataclass(frozen=True)
class Listed:
    """A list of ``pods`` (the first one adopts): the UIDs of those that are ours."""

    pods: tuple[Seen, ...]
    ours: tuple[str, ...]


@dataclass(frozen=True)
class Admits:
    """One pod seen (by the watch or a read): whether it is ours."""

    pod: Seen
    ours: bool


@dataclass(frozen=True)
class UidOf:
    """The UID of our pod named ``name`` as known ("" for none)."""

    name: str
    uid: str


@dataclass(frozen=True)
class TookTheLead:
    """Leader election: this bridge takes over from another (the next list adopts)."""


Step = Create | Listed | Admits | UidOf | TookTheLead


def view(seen: Seen, create_ids: dict[str, str]) -> PodView:
    create_id = create_ids[seen.create] if seen.create else ""
    labels = ours(seen.node or seen.name)
    return pod_view(pod(seen.name, uid=seen.uid, labels=labels, create_id=create_id))


@pytest.mark.parametrize(
    "steps",
    [
        pytest.param(
            [
                Listed((Seen("cpu-0", "u-0"), Seen("cpu-1", "u-1")), ("u-0", "u-1")),
                Admits(Seen("cpu-0", "u-0"), True),
                UidOf("cpu-0", "u-0"),
                UidOf("cpu-1", "u-1"),
                Listed((Seen("cpu-0", "u-0"), Seen("cpu-1", "u-1")), ("u-0", "u-1")),
            ],
            id="the-first-list-adopts-pods-named-after-their-node",
        ),
        pytest.param(
            [
                Listed(
                    (
                        Seen("cpu-0", "u-0"),
                        Seen("cpu-1", "u-9", node="cpu-2"),
                        Seen("impostor", "u-8", node="cpu-3"),
                    ),
                    ("u-0",),
                ),
                Admits(Seen("cpu-1", "u-9", node="cpu-2"), False),
                Admits(Seen("impostor", "u-8", node="cpu-3"), False),
                UidOf("cpu-1", ""),
                UidOf("impostor", ""),
            ],
            id="a-name-not-its-nodes-is-not-adopted",
        ),
        pytest.param(
            [
                Listed((), ()),
                Create("cpu-1", "a"),
                Admits(Seen("cpu-1", "u-9", node="cpu-2", create="a"), False),
                # The impostor did not use the create id up: our pod still gets it.
                Admits(Seen("cpu-1", "u-1", create="a"), True),
            ],
            id="nor-is-it-ours-with-the-create-id-sent-for-its-name",
        ),
        pytest.param(
            [
                Listed((), ()),
                Listed((Seen("cpu-0", "u-0"),), ()),
                UidOf("cpu-0", ""),
            ],
            id="only-the-first-list-adopts",
        ),
        pytest.param(
            [
                Listed((Seen("cpu-0", "u-0"),), ("u-0",)),
                Admits(Seen("cpu-1", "u-1"), False),
                Admits(Seen("cpu-0", "u-5"), False),  # a successor this bridge did not create
                Listed((Seen("cpu-0", "u-5"), Seen("cpu-1", "u-1")), ()),
                UidOf("cpu-0", "u-0"),
                UidOf("cpu-1", ""),
            ],
            id="a-pod-after-the-first-list-without-our-create-id-is-not-ours",
        ),
        pytest.param(
            [
                Listed((), ()),
                Create("cpu-0", "a"),
                Admits(Seen("cpu-0", "u-0", create="a"), True),
                UidOf("cpu-0", "u-0"),
                # Bound by its UID: ours still, the create id (or its annotation) aside.
                Admits(Seen("cpu-0", "u-0", create="a"), True),
                Admits(Seen("cpu-0", "u-0"), True),
                Listed((Seen("cpu-0", "u-0", create="a"),), ("u-0",)),
            ],
            id="a-pod-with-the-create-id-sent-is-ours-and-stays-ours",
        ),
        pytest.param(
            [
                Listed((), ()),
                Create("cpu-0", "a"),
                Listed((Seen("cpu-0", "u-0", create="a"),), ("u-0",)),
                Admits(Seen("cpu-0", "u-6", create="a"), False),
                Listed((Seen("cpu-0", "u-6", create="a"),), ()),
                UidOf("cpu-0", "u-0"),
            ],
            id="a-replay-of-a-used-create-id-is-not-ours",
        ),
        pytest.param(
            [
                Listed((), ()),
                Create("cpu-0", "a"),
                Create("cpu-0", "b"),
                Admits(Seen("cpu-0", "u-0", create="a"), True),
                UidOf("cpu-0", "u-0"),
                Admits(Seen("cpu-0", "u-1", create="b"), False),
            ],
            # A second create (a repeated resume) found the first's pod: that pod is ours, and
            # once one is seen the other ids are spent.
            id="any-create-id-sent-since-the-last-pod-seen-counts-once",
        ),
        pytest.param(
            [
                Listed((), ()),
                *[Create("cpu-0", f"id{i}") for i in range(9)],
                Admits(Seen("cpu-0", "u-0", create="id0"), False),
                Admits(Seen("cpu-0", "u-1", create="id1"), True),
            ],
            id="the-last-eight-create-ids-are-kept",
        ),
        pytest.param(
            [
                Listed((), ()),
                Create("cpu-1", "a"),
                Admits(Seen("cpu-0", "u-0", create="a"), False),
                Admits(Seen("cpu-1", "u-1", create="a"), True),
            ],
            id="a-create-id-is-for-its-name-only",
        ),
        pytest.param(
            [
                Listed((Seen("cpu-0", "u-0"),), ("u-0",)),
                Create("cpu-0", "a"),
                Admits(Seen("cpu-0", "u-1", create="a"), True),
                UidOf("cpu-0", "u-1"),
            ],
            id="a-new-pod-of-ours-takes-the-name-over",
        ),
        pytest.param(
            [
                Listed((), ()),
                # The leader created cpu-0 after this follower's first list: not ours, yet.
                Admits(Seen("cpu-0", "u-0"), False),
                TookTheLead(),
                Listed((Seen("cpu-0", "u-0"), Seen("cpu-1", "u-9", node="cpu-2")), ("u-0",)),
                Admits(Seen("cpu-0", "u-0"), True),
                UidOf("cpu-0", "u-0"),
                # Only the list right after taking the lead adopts.
                Listed((Seen("cpu-0", "u-0"), Seen("cpu-3", "u-3")), ("u-0",)),
            ],
            id="taking-the-lead-adopts-the-previous-leaders-pods",
        ),
    ],
)
def test_which_pods_are_ours(steps: Sequence[Step]) -> None:
    provenance = PodProvenance()
    create_ids: dict[str, str] = {}
    for step in steps:
        match step:
            case Create(name, key):
                create_ids[key] = provenance.new_create_id(name)
            case Listed(pods, uids):
                admitted = provenance.adopt([view(p, create_ids) for p in pods])
                assert tuple(p.uid for p in admitted) == uids, step
            case Admits(seen, expected):
                assert provenance.admits(view(seen, create_ids)) is expected, step
            case UidOf(name, uid):
                assert provenance.uid_of(name) == uid, step
            case TookTheLead():
                provenance.adopt_again()


def test_each_create_id_is_fresh_and_unguessable() -> None:
    provenance = PodProvenance()
    create_ids = [provenance.new_create_id("cpu-0") for _ in range(100)]
    assert all(re.fullmatch(r"[0-9a-f]{32}", c) for c in create_ids), create_ids
    assert len(set(create_ids)) == 100


@pytest.mark.parametrize(
    ("first_list", "seen", "why"),
    [
        pytest.param(
            (Seen("cpu-1", "u-9", node="cpu-2"),),
            Seen("cpu-1", "u-9", node="cpu-2"),
            "its name is not the node's",
            id="a-name-not-its-nodes",
        ),
        pytest.param(
            (),
            Seen("cpu-2", "u-9"),
            "this bridge did not create it, nor find it when it started",
            id="not-created-nor-found",
        ),
    ],
)
def test_a_pod_that_is_not_ours_is_named_in_the_log_once_per_uid(
    first_list: tuple[Seen, ...], seen: Seen, why: str, caplog: pytest.LogCaptureFixture
) -> None:
    provenance = PodProvenance()
    assert provenance.adopt([view(p, {}) for p in first_list]) == []
    for _ in range(3):
        assert provenance.admits(view(seen, {})) is False
    assert provenance.admitted([view(seen, {})]) == []
    successor = Seen(seen.name, "u-10", seen.node)
    assert provenance.admits(view(successor, {})) is False
    assert provenance.admits(view(successor, {})) is False

    node = seen.node or seen.name
    assert [(r.levelno, r.getMessage()) for r in caplog.records if r.name == PROVENANCE_LOG] == [
        (
            logging.WARNING,
            f"pod {seen.name} (UID {uid}) carries the bridge's labels for node {node}, "
            f"but {why}: not the node's pod, left alone",
        )
        for uid in ("u-9", "u-10")
    ]


# -- the gateway over the API server ---------------------------------------------------------------


def manifest(name: str) -> dict[str, Any]:
    """What the bridge renders for node ``name`` (the gateway adds the create id)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": ours(name)},
        "spec": {"containers": [{"name": "slurmd", "image": "localhost/slurmd:dev"}]},
    }


def started(api_server: FakeApiServer, *found: dict[str, Any]) -> PodGateway:
    """A gateway that made its first list, which found ``found``."""
    api_server.answer(f"GET {PODS}", pod_list(*found))
    pods = gateway_to(api_server, concurrency=8)
    pods.list_pods()
    return pods


def created(api_server: FakeApiServer, pods: PodGateway, name: str, uid: str) -> dict[str, Any]:
    """``pods`` creates pod ``name``; the pod as the API server stored it as ``uid``."""
    api_server.answer(f"POST {PODS}", Answer(201))
    assert pods.create_pod(manifest(name)) is True
    made = stored(api_server.requests, name, uid)
    assert made is not None
    return made


def with_uid(made: dict[str, Any], uid: str) -> dict[str, Any]:
    return {**made, "metadata": {**made["metadata"], "uid": uid}}


def with_create_id(made: dict[str, Any], create_id: str) -> dict[str, Any]:
    annotations = {"slurm-k8s-bridge.io/create-id": create_id} if create_id else {}
    return {**made, "metadata": {**made["metadata"], "annotations": annotations}}


#: How each way of looking at the pods answers for a pod: a word for ours, another for not.
View = Callable[[FakeApiServer, PodGateway, dict[str, Any]], str]


def in_a_list(api_server: FakeApiServer, pods: PodGateway, seen: dict[str, Any]) -> str:
    api_server.answer(f"GET {PODS}", pod_list(seen, version="9"))
    listed, version = pods.list_pods()
    assert version == "9"
    return "listed" if [p.uid for p in listed] == [seen["metadata"]["uid"]] else "left out"


def in_the_watch(api_server: FakeApiServer, pods: PodGateway, seen: dict[str, Any]) -> str:
    api_server.answer(f"GET {PODS}", watch_answer(line({"type": "ADDED", "object": seen})))
    (event,) = pods.watch("9", timeout_s=5)
    assert event.pod.uid == seen["metadata"]["uid"]
    return event.kind


def read(api_server: FakeApiServer, pods: PodGateway, seen: dict[str, Any]) -> str:
    name = seen["metadata"]["name"]
    api_server.answer(f"GET {PODS}/{name}", json_answer(seen))
    found = pods.read_pod(name)
    return "None" if found is None else f"read {found.uid}"


def exists(api_server: FakeApiServer, pods: PodGateway, seen: dict[str, Any]) -> str:
    name = seen["metadata"]["name"]
    api_server.answer(f"GET {PODS}/{name}", json_answer(seen))
    return "exists" if pods.pod_exists(name) else "absent"


VIEWS: dict[str, View] = {
    "list": in_a_list,
    "watch": in_the_watch,
    "read": read,
    "exists": exists,
}


def answers(ours: bool, uid: str) -> dict[str, str]:
    """What each view answers for a pod with ``uid`` that is ``ours`` or not."""
    if ours:
        return {"list": "listed", "watch": "ADDED", "read": f"read {uid}", "exists": "exists"}
    return {"list": "left out", "watch": "DELETED", "read": "None", "exists": "absent"}


@pytest.mark.parametrize("look", list(VIEWS))
@pytest.mark.parametrize(
    ("carries", "expected"),
    [
        pytest.param("nothing", False, id="without-a-create-id"),
        pytest.param("the-create-id-sent", True, id="with-the-create-id-sent"),
        pytest.param("a-create-id-not-sent", False, id="with-another-create-id"),
    ],
)
def test_a_pod_after_the_first_list_is_ours_only_with_the_create_id_sent(
    api_server: FakeApiServer, carries: str, expected: bool, look: str
) -> None:
    """The gateway found cpu-0 in its first list and created cpu-1; then a pod cpu-1 shows
    up, carrying ``carries``."""
    pods = started(api_server, pod("cpu-0", uid="u-0", labels=ours("cpu-0")))
    made = created(api_server, pods, "cpu-1", "u-1")
    shown = {
        "nothing": with_create_id(made, ""),
        "the-create-id-sent": made,
        "a-create-id-not-sent": with_create_id(made, NOT_SENT),
    }[carries]
    assert VIEWS[look](api_server, pods, shown) == answers(expected, "u-1")[look]
    assert pods.provenance.uid_of("cpu-1") == ("u-1" if expected else "")


@pytest.mark.parametrize("first", list(VIEWS))
def test_a_pod_the_gateway_created_stays_ours_and_a_replay_of_its_create_id_is_not(
    api_server: FakeApiServer, first: str
) -> None:
    """Whichever view sees the created pod first binds it by UID; every view then takes it
    for ours, and a later pod of that name with the same create id (a replay: another UID)
    for someone else's."""
    pods = started(api_server)
    made = created(api_server, pods, "cpu-0", "u-0")
    assert VIEWS[first](api_server, pods, made) == answers(True, "u-0")[first]
    assert pods.provenance.uid_of("cpu-0") == "u-0"
    for look, see in VIEWS.items():
        assert see(api_server, pods, made) == answers(True, "u-0")[look], look
    replay = with_uid(made, "u-6")
    for look, see in VIEWS.items():
        assert see(api_server, pods, replay) == answers(False, "u-6")[look], look
    assert pods.provenance.uid_of("cpu-0") == "u-0"


@pytest.mark.parametrize(
    ("name", "node"),
    [
        pytest.param("cpu-1", "cpu-2", id="a-nodes-name-labelled-for-another-node"),
        pytest.param("impostor", "cpu-0", id="another-name-labelled-for-a-node"),
    ],
)
def test_a_pod_whose_name_is_not_its_nodes_is_never_ours_and_named_once_per_uid(
    api_server: FakeApiServer, name: str, node: str, caplog: pytest.LogCaptureFixture
) -> None:
    impostor = pod(name, uid="u-9", labels=ours(node))
    ours_0 = pod("cpu-0", uid="u-0", labels=ours("cpu-0"))
    api_server.answer(f"GET {PODS}", pod_list(ours_0, impostor))
    pods = gateway_to(api_server, concurrency=8)
    assert [p.name for p in pods.list_pods()[0]] == ["cpu-0"], "not even adopted"
    for look, see in VIEWS.items():
        assert see(api_server, pods, impostor) == answers(False, "u-9")[look], look
    successor = with_uid(impostor, "u-10")
    for look, see in VIEWS.items():
        assert see(api_server, pods, successor) == answers(False, "u-10")[look], look

    warned = [r.getMessage() for r in caplog.records if r.name == PROVENANCE_LOG]
    assert [m.split(" carries ")[0] for m in warned] == [
        f"pod {name} (UID u-9)",
        f"pod {name} (UID u-10)",
    ]
    why = "but its name is not the node's: not the node's pod, left alone"
    assert all(m.endswith(why) for m in warned), warned


CONFLICT = status_answer(409, "AlreadyExists", 'pods "cpu-0" exists')
OUR_CPU_0 = pod("cpu-0", uid="u-1", labels=ours("cpu-0"))


@pytest.mark.parametrize(
    ("found", "existing", "expected"),
    [
        pytest.param((), as_created("u-7"), False, id="ours-it-carries-this-creates-id"),
        pytest.param((OUR_CPU_0,), json_answer(OUR_CPU_0), False, id="ours-found-at-start"),
        pytest.param(
            (),
            json_answer(pod("cpu-0", uid="u-9", labels=ours("cpu-0"))),
            Conflict,
            id="our-labels-without-a-create-id",
        ),
        pytest.param(
            (),
            json_answer(pod("cpu-0", uid="u-9", labels=ours("cpu-0"), create_id=NOT_SENT)),
            Conflict,
            id="our-labels-with-another-create-id",
        ),
        pytest.param(
            (pod("cpu-0", uid="u-9", labels=ours("cpu-9")),),
            json_answer(pod("cpu-0", uid="u-9", labels=ours("cpu-9"))),
            Conflict,
            id="there-at-start-but-labelled-for-another-node",
        ),
        pytest.param(
            (),
            json_answer(pod("cpu-0", uid="u-9", labels={"app": "someone-else"})),
            Conflict,
            id="someone-elses-labels",
        ),
    ],
)
def test_a_create_that_meets_a_pod_of_that_name_tells_ours_from_someone_elses(
    api_server: FakeApiServer,
    found: tuple[dict[str, Any], ...],
    existing: Answer | Answering,
    expected: object,
) -> None:
    """``found``: the gateway's first list; the create answers 409, ``existing`` is the read
    of the pod that is there."""
    pods = started(api_server, *found)
    api_server.answer(f"POST {PODS}", CONFLICT)
    api_server.answer(f"GET {PODS}/cpu-0", existing)
    if expected is False:
        assert pods.create_pod(manifest("cpu-0")) is False
    else:
        with pytest.raises(Conflict, match="did not create") as raised:
            pods.create_pod(manifest("cpu-0"))
        assert str(raised.value) == "pod slurm/cpu-0 exists and this bridge did not create it"
    assert [r.method for r in api_server.requests if r.path == f"{PODS}/cpu-0"] == ["GET"]


@pytest.mark.parametrize(
    ("found", "existing", "expected", "sent"),
    [
        pytest.param(
            (),
            json_answer(pod("cpu-0", uid="u-9", labels=ours("cpu-0"))),
            False,
            ["GET"],
            id="our-labels-but-not-created-nor-found",
        ),
        pytest.param(
            (pod("cpu-0", uid="u-9", labels=ours("cpu-9")),),
            json_answer(pod("cpu-0", uid="u-9", labels=ours("cpu-9"))),
            False,
            ["GET"],
            id="found-at-start-but-labelled-for-another-node",
        ),
        pytest.param(
            (),
            json_answer(pod("cpu-0", uid="u-9", labels={"app": "someone-else"})),
            False,
            ["GET"],
            id="someone-elses-labels",
        ),
        pytest.param(
            (OUR_CPU_0,),
            None,
            True,
            ["DELETE u-1"],  # the UID is known: no read
            id="ours-found-at-start",
        ),
    ],
)
def test_a_delete_by_name_leaves_a_pod_that_is_not_ours_alone(
    api_server: FakeApiServer,
    found: tuple[dict[str, Any], ...],
    existing: Answer | None,
    expected: bool,
    sent: list[str],
) -> None:
    """``found``: the gateway's first list; ``existing``: the read of cpu-0; ``sent``: the
    requests about cpu-0 (a delete with its UID precondition)."""
    pods = started(api_server, *found)
    if existing is not None:
        api_server.answer(f"GET {PODS}/cpu-0", existing)
    api_server.answer(f"DELETE {PODS}/cpu-0", Answer(200))
    assert pods.delete_pod("cpu-0") is expected
    requests = [r for r in api_server.requests if r.path == f"{PODS}/cpu-0"]
    assert [
        f"DELETE {json.loads(r.body)['preconditions']['uid']}" if r.method == "DELETE" else r.method
        for r in requests
    ] == sent


@pytest.mark.parametrize(
    ("call", "expected"),
    [
        pytest.param(lambda pods: pods.read_pod("cpu-0").uid, "u-1", id="read"),
        pytest.param(lambda pods: pods.create_pod(manifest("cpu-0")), False, id="create-exists"),
        pytest.param(lambda pods: pods.delete_pod("cpu-0"), True, id="delete-by-name"),
    ],
)
def test_a_call_before_the_first_list_lists_first(
    api_server: FakeApiServer, call: Callable[[PodGateway], Any], expected: Any
) -> None:
    """Right after a restart a resume may meet its node's pod before the watch's first list:
    the pod the bridge had before must be its own, not someone else's."""
    api_server.answer(f"GET {PODS}", pod_list(OUR_CPU_0))
    api_server.answer(f"GET {PODS}/cpu-0", json_answer(OUR_CPU_0))
    api_server.answer(f"POST {PODS}", CONFLICT)
    api_server.answer(f"DELETE {PODS}/cpu-0", Answer(200))
    pods = gateway_to(api_server, concurrency=8)
    assert call(pods) == expected
    assert not pods.provenance.adopting
    assert pods.provenance.uid_of("cpu-0") == "u-1"
