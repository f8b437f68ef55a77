"""Pod creates and Events at the API server's pace (issue 11): bytes out, status back, Events
off the request path, and a 429's Retry-After honoured.

The real ``PodGateway`` and the real client library talk HTTP to ``FakeApiServer``.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from bridge.adapters.kubernetes.calls import (
    MAX_RETRY_AFTER_S,
    call,
    call_within,
    retry_after_s,
    translate,
)
from bridge.adapters.kubernetes.events import EventRecorder, QueuedEvent
from bridge.adapters.kubernetes.gateway import PodGateway
from bridge.domain.pods import ANNOTATION_CREATE_ID
from bridge.errors import (
    BackendError,
    Conflict,
    InvalidInput,
    TransientBackendError,
)
from tests.unit.fake_kube_api import (
    Answer,
    Answering,
    FakeApiServer,
    as_created,
    gateway_to,
    json_answer,
    ours,
    pod,
    pod_list,
    status_answer,
)

PODS = "/api/v1/namespaces/slurm/pods"
EVENTS = "/api/v1/namespaces/slurm/events"
#: A create id: 16 random bytes in hex.
CREATE_ID = re.compile(r"[0-9a-f]{32}")


def manifest(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": ours(name)},
        "spec": {"containers": [{"name": "slurmd", "image": "localhost/slurmd:dev"}]},
    }


def posts(api_server: FakeApiServer, path: str) -> list[Any]:
    return [r for r in api_server.requests if r.method == "POST" and r.path == path]


def without_create_id(sent: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """A create's body without the create id the gateway adds (its only annotation here),
    and that id."""
    metadata = dict(sent["metadata"])
    annotations = dict(metadata.pop("annotations"))
    create_id = annotations.pop(ANNOTATION_CREATE_ID)
    if annotations:
        metadata["annotations"] = annotations
    return {**sent, "metadata": metadata}, create_id


# -- creates ------------------------------------------------------------------------------------


def test_a_create_sends_the_manifest_as_json_bytes_with_the_credentials(
    api_server: FakeApiServer,
) -> None:
    # The 201's body is not JSON here: the create must not parse what it does not need.
    api_server.answer(f"POST {PODS}", Answer(201, b"not json: nobody reads this"))
    assert gateway_to(api_server, concurrency=8).create_pod(manifest("cpu-0")) is True

    (request,) = api_server.requests
    sent, create_id = without_create_id(json.loads(request.body))
    assert sent == manifest("cpu-0")
    assert CREATE_ID.fullmatch(create_id), create_id
    assert request.headers["content-type"] == "application/json"
    assert request.headers["authorization"] == "Bearer t0ken"


def test_creates_start_as_the_pods_come_not_after_the_last(api_server: FakeApiServer) -> None:
    # A resume renders its pods while the first are sent (58 ms for 1,000 pods, issue 33).
    first_arrived = threading.Event()

    def first(_requests: Sequence[Any]) -> Answer:
        first_arrived.set()
        return Answer(201)

    api_server.answer(f"POST {PODS}", first, Answer(201))
    waited: list[bool] = []

    def rendered() -> Iterator[dict[str, Any]]:
        yield manifest("cpu-0")
        # Read every pod before the first create, and this waits in vain.
        waited.append(first_arrived.wait(5))
        yield manifest("cpu-1")

    outcome = gateway_to(api_server, concurrency=4).create_pods(rendered())
    assert waited == [True]
    assert outcome == {"cpu-0": True, "cpu-1": True}


def test_behind_a_proxy_a_create_goes_through_the_proxy(api_server: FakeApiServer) -> None:
    # Creates take a route looked up once per client; behind a proxy the client's own
    # ProxyManager sends them (an absolute URL to the proxy), as every other call.
    configuration = api_server.core_api().api_client.configuration
    configuration.proxy, configuration.host = configuration.host, "http://apiserver.invalid:6443"
    pods = PodGateway(
        k8s.CoreV1Api(k8s.ApiClient(configuration)),
        namespace="slurm",
        cluster_name="lab",
        concurrency=2,
    )
    assert pods.create_pod(manifest("cpu-0")) is True
    (request,) = api_server.requests
    assert request.path == f"http://apiserver.invalid:6443{PODS}"
    assert request.headers["authorization"] == "Bearer t0ken"


@pytest.mark.parametrize(
    ("answers", "expected", "requests"),
    [
        pytest.param([Answer(201)], True, 1, id="created"),
        pytest.param(
            [status_answer(500, "InternalError", "etcd"), Answer(201)],
            True,
            2,
            id="5xx-retried",
        ),
        pytest.param(
            [status_answer(500, "InternalError", "etcd")] * 4,
            TransientBackendError,
            4,
            id="5xx-four-attempts",
        ),
        pytest.param(
            [status_answer(422, "Invalid", "spec.containers: Required value")],
            InvalidInput,
            1,
            id="422-not-retried",
        ),
        pytest.param(
            [status_answer(403, "Forbidden", "pods is forbidden")],
            BackendError,
            1,
            id="403-not-retried",
        ),
    ],
)
def test_only_transient_create_failures_are_retried(
    api_server: FakeApiServer, answers: list[Answer], expected: object, requests: int
) -> None:
    api_server.answer(f"POST {PODS}", *answers)
    pods = gateway_to(api_server, concurrency=8)
    if isinstance(expected, bool):
        assert pods.create_pod(manifest("cpu-0")) is expected
    else:
        assert isinstance(expected, type)
        with pytest.raises(expected):
            pods.create_pod(manifest("cpu-0"))
    assert len(posts(api_server, PODS)) == requests


CONFLICT = status_answer(409, "AlreadyExists", 'pods "cpu-0" exists')
OUR_CPU_0 = pod("cpu-0", uid="u-1", labels=ours("cpu-0"))


@pytest.mark.parametrize(
    ("listed", "creates", "existing", "expected"),
    [
        pytest.param(
            [],
            [status_answer(500, "InternalError", "etcd"), CONFLICT],
            as_created("u-7"),
            False,
            id="ours-a-retry-whose-first-try-got-through",
        ),
        pytest.param(
            [OUR_CPU_0],
            [CONFLICT],
            json_answer(OUR_CPU_0),
            False,
            id="ours-there-when-the-bridge-started",
        ),
        pytest.param(
            [],
            [CONFLICT],
            json_answer(pod("cpu-0", uid="u-9", labels=ours("cpu-0"))),
            Conflict,
            id="our-labels-but-this-bridge-did-not-create-it",
        ),
        pytest.param(
            [],
            [CONFLICT],
            json_answer(pod("cpu-0", labels={"app": "someone-else"})),
            Conflict,
            id="not-ours",
        ),
    ],
)
def test_a_409_reads_the_pod_to_tell_ours_from_someone_elses(
    api_server: FakeApiServer,
    listed: list[dict[str, Any]],
    creates: list[Answer],
    existing: Answer | Answering,
    expected: object,
) -> None:
    """``listed``: the gateway's first list (what was there when the bridge started)."""
    api_server.answer(f"GET {PODS}", pod_list(*listed))
    api_server.answer(f"POST {PODS}", *creates)
    api_server.answer(f"GET {PODS}/cpu-0", existing)
    pods = gateway_to(api_server, concurrency=8)
    pods.list_pods()
    if expected is False:
        assert pods.create_pod(manifest("cpu-0")) is False
    else:
        with pytest.raises(
            Conflict, match="pod slurm/cpu-0 exists and this bridge did not create it"
        ):
            pods.create_pod(manifest("cpu-0"))
    assert [r.method for r in api_server.requests if r.path == f"{PODS}/cpu-0"] == ["GET"]


def test_many_creates_go_out_in_parallel(api_server: FakeApiServer) -> None:
    api_server.default = Answer(201)
    outcome = gateway_to(api_server, concurrency=8).create_pods(
        [manifest(f"cpu-{n}") for n in range(40)]
    )
    assert outcome == {f"cpu-{n}": True for n in range(40)}
    assert sorted(json.loads(r.body)["metadata"]["name"] for r in api_server.requests) == sorted(
        f"cpu-{n}" for n in range(40)
    )
    sent = [without_create_id(json.loads(r.body))[1] for r in api_server.requests]
    assert len(set(sent)) == 40, "each create has a create id of its own"


# -- deletes ------------------------------------------------------------------------------------


GONE = status_answer(404, "NotFound", 'pods "cpu-0" not found')


def delete_options(**options: object) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "DeleteOptions", **options}


@pytest.mark.parametrize(
    ("asked", "answers", "expected", "sent"),
    [
        pytest.param(
            ("", None),
            {"GET": as_created("u-7"), "DELETE": Answer(200)},
            True,
            [("GET", None), ("DELETE", delete_options(preconditions={"uid": "u-7"}))],
            id="deleted-by-name-that-pod-only",
        ),
        pytest.param(
            ("u-7", 0),
            {"DELETE": Answer(200)},
            True,
            [("DELETE", delete_options(gracePeriodSeconds=0, preconditions={"uid": "u-7"}))],
            id="forced-that-pod-only",
        ),
        pytest.param(
            ("", None),
            {"GET": GONE},
            False,
            [("GET", None)],
            id="gone-by-name",
        ),
        pytest.param(
            ("u-7", None),
            {"DELETE": GONE},
            False,
            [("DELETE", delete_options(preconditions={"uid": "u-7"}))],
            id="gone",
        ),
        pytest.param(
            ("u-1", None),
            {
                "DELETE": status_answer(
                    409, "Conflict", "Precondition failed: UID in precondition: u-1"
                )
            },
            False,
            [("DELETE", delete_options(preconditions={"uid": "u-1"}))],
            id="a-successor-is-left-alone",
        ),
    ],
)
def test_a_delete_sends_its_options_as_json_bytes(
    api_server: FakeApiServer,
    asked: tuple[str, int | None],
    answers: dict[str, Answer | Answering],
    expected: bool,
    sent: list[tuple[str, dict[str, object] | None]],
) -> None:
    """The gateway created cpu-0 (the API server stored it as UID u-7), then deletes it.
    ``asked``: the delete's UID precondition and grace period; by name (no UID), the gateway
    reads the pod's UID first and makes the delete apply to that pod only. ``sent``: the
    requests about cpu-0, with their bodies (a delete's DeleteOptions)."""
    for method, answer in answers.items():
        api_server.answer(f"{method} {PODS}/cpu-0", answer)
    pods = gateway_to(api_server, concurrency=8)
    assert pods.create_pod(manifest("cpu-0")) is True
    uid, grace = asked
    assert pods.delete_pod("cpu-0", uid, grace) is expected
    requests = [r for r in api_server.requests if r.path == f"{PODS}/cpu-0"]
    assert [(r.method, json.loads(r.body) if r.body else None) for r in requests] == sent


def test_a_delete_that_keeps_failing_ends_within_its_budget(api_server: FakeApiServer) -> None:
    api_server.default = status_answer(
        503, "ServiceUnavailable", "shutting down", ("Retry-After", "5")
    )
    pods = gateway_to(api_server, concurrency=8)
    pods.delete_budget_s = 0.6
    started = time.monotonic()
    with pytest.raises(TransientBackendError, match="delete pod cpu-0: "):
        pods.delete_pod("cpu-0", "u-1")
    assert time.monotonic() - started < 1.5
    # Retry-After (5 s) was cut to the budget: the first attempt and at most one more.
    assert 1 <= len(api_server.requests) <= 2


# -- 429 and Retry-After ------------------------------------------------------------------------


def throttled(retry_after: str | None) -> Answer:
    headers = (("Retry-After", retry_after),) if retry_after is not None else ()
    return status_answer(
        429, "TooManyRequests", "the server has received too many requests", *headers
    )


@pytest.mark.parametrize(
    ("retry_after", "least_s", "most_s"),
    [
        pytest.param("1.0", 1.0, 3.0, id="waits-as-asked"),
        pytest.param(None, 0.15, 0.9, id="no-header-backs-off-as-usual"),
    ],
)
def test_a_429_is_retried_after_the_servers_retry_after(
    api_server: FakeApiServer, retry_after: str | None, least_s: float, most_s: float
) -> None:
    api_server.answer(f"POST {PODS}", throttled(retry_after), Answer(201))
    assert gateway_to(api_server, concurrency=8).create_pod(manifest("cpu-0")) is True
    first, second = posts(api_server, PODS)
    assert least_s <= second.at - first.at < most_s


def api_error(status: int, headers: dict[str, str] | None) -> ApiException:
    error = ApiException(status=status, reason="r", body="{}")
    error.headers = headers
    return error


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        pytest.param(api_error(429, {"Retry-After": "2"}), 2.0, id="429"),
        pytest.param(api_error(429, {"retry-after": "1.5"}), 1.5, id="lower-case-header"),
        pytest.param(api_error(503, {"Retry-After": "3"}), 3.0, id="503"),
        pytest.param(api_error(429, {"Retry-After": "600"}), MAX_RETRY_AFTER_S, id="capped"),
        pytest.param(api_error(429, {"Retry-After": "-1"}), 0.0, id="negative-is-now"),
        pytest.param(
            api_error(429, {"Retry-After": "Wed, 21 Oct 2026 07:28:00 GMT"}), None, id="http-date"
        ),
        pytest.param(api_error(429, None), None, id="no-headers"),
        pytest.param(api_error(500, {"Retry-After": "2"}), None, id="not-429-or-503"),
        pytest.param(OSError("connection refused"), None, id="not-an-http-answer"),
    ],
)
def test_retry_after_is_read_from_the_answer_behind_the_error(
    error: Exception, expected: float | None
) -> None:
    translated = translate(error, "create pod cpu-0")
    translated.__cause__ = error
    assert retry_after_s(translated) == expected


def test_a_retry_after_never_outlasts_the_calls_budget() -> None:
    attempts: list[float] = []

    def throttled_call(timeout: float) -> None:
        attempts.append(time.monotonic())
        raise api_error(429, {"Retry-After": "5"})

    started = time.monotonic()
    with pytest.raises(TransientBackendError):
        call_within("delete pod cpu-0", 0.5, throttled_call)
    assert time.monotonic() - started < 1.5
    assert len(attempts) >= 1


def test_retries_stop_after_four_attempts_whatever_retry_after_says() -> None:
    attempts: list[int] = []

    def throttled_call() -> None:
        attempts.append(1)
        raise api_error(429, {"Retry-After": "0"})

    with pytest.raises(TransientBackendError, match="HTTP 429"):
        call("create pod cpu-0", throttled_call)
    assert len(attempts) == 4


# -- Events -------------------------------------------------------------------------------------


def test_an_event_is_sent_in_the_background_as_json(api_server: FakeApiServer) -> None:
    pods = gateway_to(api_server, concurrency=8)
    pods.record_event("cpu-0", "SlurmResume", "Slurm resumed node cpu-0 (jobs 7)")
    assert pods.events.flush(5)
    (request,) = posts(api_server, EVENTS)
    event = json.loads(request.body)
    assert event["involvedObject"] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": "cpu-0",
        "namespace": "slurm",
    }
    assert (event["reason"], event["type"]) == ("SlurmResume", "Normal")
    assert event["message"] == "Slurm resumed node cpu-0 (jobs 7)"


def test_recording_events_never_waits_for_a_slow_api_server(api_server: FakeApiServer) -> None:
    api_server.hold = threading.Event()
    pods = gateway_to(api_server, concurrency=8)
    started = time.monotonic()
    for n in range(50):
        pods.record_event(f"cpu-{n}", "SlurmResume", "resumed")
    assert time.monotonic() - started < 0.5, "record_event waited for the API server"
    api_server.hold.set()
    assert pods.events.flush(10)
    assert len(posts(api_server, EVENTS)) == 50


def test_a_failed_event_is_logged_and_the_rest_still_go_out(
    api_server: FakeApiServer, caplog: pytest.LogCaptureFixture
) -> None:
    api_server.answer(f"POST {EVENTS}", status_answer(403, "Forbidden", "events is forbidden"))
    pods = gateway_to(api_server, concurrency=8)
    pods.record_event("cpu-0", "SlurmNodeDown", "down", warning=True)
    pods.record_event("cpu-1", "SlurmNodeDown", "down", warning=True)
    assert pods.events.flush(5)
    assert len(posts(api_server, EVENTS)) == 2
    assert "event SlurmNodeDown for pod cpu-0 not recorded" in caplog.text or (
        "event SlurmNodeDown for pod cpu-1 not recorded" in caplog.text
    )


def test_a_full_event_queue_drops_and_counts_instead_of_blocking(
    caplog: pytest.LogCaptureFixture,
) -> None:
    sending, release = threading.Event(), threading.Event()
    sent: list[str] = []

    def send(event: QueuedEvent) -> None:
        sending.set()
        release.wait(5)
        sent.append(event.label)

    recorder = EventRecorder(send, capacity=2, senders=1)
    assert recorder.record(QueuedEvent("e0", b"{}"))
    assert sending.wait(5)  # the one sender is busy with e0
    started = time.monotonic()
    accepted = [recorder.record(QueuedEvent(f"e{n}", b"{}")) for n in range(1, 6)]
    assert time.monotonic() - started < 0.5
    assert accepted == [True, True, False, False, False]
    assert recorder.dropped == 3
    assert "e3 dropped, 1 Event(s) dropped so far" in caplog.text
    release.set()
    assert recorder.flush(5)
    assert sent == ["e0", "e1", "e2"]
    recorder.close()


def test_a_crash_while_sending_does_not_stop_the_sender(caplog: pytest.LogCaptureFixture) -> None:
    sent: list[str] = []

    def send(event: QueuedEvent) -> None:
        if event.label == "bad":
            raise RuntimeError("bug")
        sent.append(event.label)

    recorder = EventRecorder(send, senders=1)
    recorder.record(QueuedEvent("bad", b"{}"))
    recorder.record(QueuedEvent("good", b"{}"))
    assert recorder.flush(5)
    assert sent == ["good"]
    assert "event bad: sending crashed" in caplog.text
    recorder.close()
