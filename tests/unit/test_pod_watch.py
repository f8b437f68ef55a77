"""The pod watch survives every way its stream can fail (issue 7 item 5).

The real ``PodGateway`` and ``PodWatcher`` run over ``FakeCoreApi``, which hands over each
failure in the shape the client library gives it: a raw ERROR event line, an ``ApiException``,
a ``urllib3`` error mid-stream, a malformed line, or an exception from a client bug.
"""

from __future__ import annotations

import json
import logging
import re
import time

import pytest
import urllib3
from kubernetes.client.exceptions import ApiException

from bridge.adapters.kubernetes import PodGateway, WatchExpired
from bridge.errors import BackendError, Forbidden, TransientBackendError
from bridge.runtime.pod_watcher import PodWatcher
from tests.unit.fake_kube_api import (
    FakeCoreApi,
    Session,
    error_event,
    event,
    line,
    pod,
    status,
)

GONE = error_event(410, "Expired", "too old resource version: 1 (2117)")
INTERNAL = error_event(500, "InternalError", "etcdserver: request timed out")
#: Where the errors say they happened (a pool that never connects).
APISERVER = urllib3.HTTPSConnectionPool("127.0.0.1", 6443)
BROKEN = urllib3.exceptions.ProtocolError(
    "Connection broken: InvalidChunkLength(got length b'', 0 bytes read)"
)


def api_error(code: int, reason: str, message: str) -> ApiException:
    return ApiException(status=code, reason=reason, body=json.dumps(status(code, reason, message)))


class Poker:
    """The reconciler as the watcher sees it: poke() only, recorded in the shared journal."""

    def __init__(self, journal: list[str]) -> None:
        self.journal = journal

    def poke(self) -> None:
        self.journal.append("poke")


def gateway(api: FakeCoreApi) -> PodGateway:
    return PodGateway(api, namespace="slurm", cluster_name="lab")


def run_until_quiet(
    sessions: list[Session], *, backoff_s: float = 0.01, max_backoff_s: float = 0.04
) -> tuple[FakeCoreApi, list[str]]:
    """Run a watcher through the script until its watch is quiet, then stop it."""
    journal: list[str] = []
    api = FakeCoreApi(sessions, journal)
    watcher = PodWatcher(
        gateway(api),
        Poker(journal),
        watch_timeout_s=5,
        backoff_s=backoff_s,
        max_backoff_s=max_backoff_s,
    )
    watcher.start()
    try:
        assert api.drained.wait(10), f"the watcher stalled: {journal}"
    finally:
        watcher.stop()
        api.release.set()
        assert watcher.stop(wait_s=5), "the watcher did not end on stop()"
    return api, journal


def watch_log(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    return [
        (r.levelno, r.getMessage())
        for r in caplog.records
        if r.name == "bridge.runtime.pod_watcher"
    ]


AFTER_THE_FAILURE = [
    "list 2",
    "poke",
    "watch 2",
    "send ADDED cpu-1",
    "poke",
    # That watch ended cleanly (the server's timeout): resume from the last event's version
    # (the fake's pods are all at 100), no list.
    "watch 100",
]


#: How a transient watch failure is logged, before what the failure was.
TRANSIENT = "pod watch failed (TransientBackendError), listing again in 0.01s: watch pods: "


def after_cpu_0(failure: bytes | BaseException) -> Session:
    """A first watch that delivers cpu-0's ADDED, then ends with ``failure``."""
    return [event("ADDED", "cpu-0"), failure]


@pytest.mark.parametrize(
    ("first_session", "level", "message"),
    [
        pytest.param(
            after_cpu_0(GONE),
            logging.INFO,
            "pod watch expired at resourceVersion 1, listing again in 0.00s: "
            "watch pods: ERROR event 410 Expired: too old resource version: 1 (2117)",
            id="error-event-410",
        ),
        pytest.param(
            after_cpu_0(INTERNAL),
            logging.WARNING,
            TRANSIENT + "ERROR event 500 InternalError: etcdserver: request timed out",
            id="error-event-500",
        ),
        pytest.param(
            after_cpu_0(line({"type": "ERROR", "object": {"message": "?"}})),
            logging.WARNING,
            TRANSIENT + "ERROR event None None: ?",
            id="error-event-without-status",
        ),
        pytest.param(
            api_error(410, "Gone", "too old resource version: 1 (2117)"),
            logging.INFO,
            "pod watch expired at resourceVersion 1, listing again in 0.00s: "
            "watch pods: too old resource version: 1 (2117)",
            id="http-410",
        ),
        pytest.param(
            api_error(403, "Forbidden", 'pods is forbidden: cannot watch resource "pods"'),
            logging.WARNING,
            "pod watch failed (Forbidden), listing again in 0.01s: "
            'watch pods: forbidden: pods is forbidden: cannot watch resource "pods"',
            id="http-403",
        ),
        pytest.param(
            after_cpu_0(BROKEN),
            logging.WARNING,
            TRANSIENT + "ProtocolError: Connection broken: InvalidChunkLength",
            id="protocol-error",
        ),
        pytest.param(
            after_cpu_0(ConnectionResetError(104, "Connection reset by peer")),
            logging.WARNING,
            TRANSIENT + "ConnectionResetError: [Errno 104] Connection reset by peer",
            id="connection-reset",
        ),
        pytest.param(
            after_cpu_0(
                urllib3.exceptions.ReadTimeoutError(APISERVER, "/api/v1/pods", "Read timed out.")
            ),
            logging.WARNING,
            TRANSIENT + "ReadTimeoutError: HTTPSConnectionPool(host='127.0.0.1', port=6443): "
            "Read timed out.",
            id="read-timeout",
        ),
        pytest.param(
            after_cpu_0(b'{"type": "ADDED", "object": {"metadata": {}}}\n'),
            logging.WARNING,
            TRANSIENT + "malformed ADDED event: KeyError: 'creationTimestamp'",
            id="pod-without-keys",
        ),
        pytest.param(
            after_cpu_0(b'{"type": "MODIFIED"}\n'),
            logging.WARNING,
            TRANSIENT + 'malformed event: b\'{"type": "MODIFIED"}\'',
            id="event-without-object",
        ),
        pytest.param(
            after_cpu_0(b'["ADDED"]\n'),
            logging.WARNING,
            TRANSIENT + "malformed event: b'[\"ADDED\"]'",
            id="event-not-a-dict",
        ),
        pytest.param(
            after_cpu_0(b"<html>502 Bad Gateway</html>\n"),
            logging.WARNING,
            TRANSIENT + "event is not JSON: b'<html>502 Bad Gateway</html>'",
            id="not-json",
        ),
        pytest.param(
            after_cpu_0(b'{"type": "ADDED", "obj'),
            logging.WARNING,
            TRANSIENT + 'the stream ended inside an event: b\'{"type": "ADDED", "obj\'',
            id="cut-inside-an-event",
        ),
        pytest.param(
            after_cpu_0(KeyError("raw_object")),
            logging.ERROR,
            "pod watch crashed, listing again in 0.01s",
            id="client-bug-keyerror",
        ),
        pytest.param(
            after_cpu_0(RuntimeError("something the client never expected")),
            logging.ERROR,
            "pod watch crashed, listing again in 0.01s",
            id="client-bug-runtimeerror",
        ),
    ],
)
def test_the_watch_lists_again_and_keeps_delivering_after(
    first_session: Session, level: int, message: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="bridge.runtime.pod_watcher")
    api, journal = run_until_quiet([first_session, [event("ADDED", "cpu-1")]])

    assert journal[:3] == ["list 1", "poke", "watch 1"]
    assert journal[journal.index("list 2") :] == AFTER_THE_FAILURE
    logged = watch_log(caplog)
    assert any(lvl == level and msg.startswith(message) for lvl, msg in logged), logged
    assert (
        logging.INFO,
        "pod watch recovered: listed 0 pod(s), watching from resourceVersion 2",
    ) in logged
    assert all(r.closed and r.released for r in api.responses)


def test_a_crash_is_logged_with_its_traceback(caplog: pytest.LogCaptureFixture) -> None:
    run_until_quiet([[RuntimeError("client bug")], []])

    (crash,) = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert crash.exc_info is not None
    assert isinstance(crash.exc_info[1], RuntimeError)


AGAIN_IN = re.compile(r"listing again in ([0-9.]+)s")


def test_repeated_failures_back_off_up_to_the_bound_and_a_first_410_relists_at_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="bridge.runtime.pod_watcher")
    sessions: list[Session] = [
        [GONE],
        [GONE],
        [GONE],
        [event("MODIFIED", "cpu-0")],  # a healthy watch resets the count
        [INTERNAL],
        [BROKEN],
        [INTERNAL],
        [INTERNAL],
    ]
    _, journal = run_until_quiet(sessions, backoff_s=0.01, max_backoff_s=0.04)

    delays = [m.group(1) for _, msg in watch_log(caplog) if (m := AGAIN_IN.search(msg))]
    assert delays == ["0.00", "0.01", "0.02", "0.01", "0.02", "0.04", "0.04"]
    lists = [entry for entry in journal if entry.startswith("list ")]
    assert lists == [f"list {n}" for n in range(1, 9)], "each failure relisted, the clean end not"


def test_stop_ends_a_long_backoff_at_once(caplog: pytest.LogCaptureFixture) -> None:
    api = FakeCoreApi([[INTERNAL]])
    watcher = PodWatcher(gateway(api), Poker([]), backoff_s=60, max_backoff_s=60)
    watcher.start()
    deadline = time.monotonic() + 5
    while not any("listing again in 60.00s" in m for _, m in watch_log(caplog)):
        assert time.monotonic() < deadline, watch_log(caplog)
        time.sleep(0.01)
    started = time.monotonic()
    assert watcher.stop(wait_s=5)
    assert time.monotonic() - started < 1


# -- PodGateway.watch on its own: what each stream turns into ------------------------------------


def events_of(api: FakeCoreApi) -> list[str]:
    """The events the gateway's watch yields after its first list, which adopts the pods in
    ``api.listed`` (a pod this bridge neither found there nor created shows as DELETED)."""
    pods = gateway(api)
    pods.list_pods()
    return [f"{e.kind} {e.pod.name}" for e in pods.watch("7", timeout_s=30)]


ADDED_0 = event("ADDED", "cpu-0")


@pytest.mark.parametrize(
    ("session", "expected"),
    [
        pytest.param([], [], id="quiet"),
        pytest.param(
            [ADDED_0, event("MODIFIED", "cpu-0") + event("DELETED", "cpu-0")],
            ["ADDED cpu-0", "MODIFIED cpu-0", "DELETED cpu-0"],
            id="two-events-in-one-chunk",
        ),
        pytest.param(
            [ADDED_0[:9], ADDED_0[9:40], ADDED_0[40:]],
            ["ADDED cpu-0"],
            id="one-event-in-three-chunks",
        ),
        pytest.param(
            [b"\n", line({"type": "BOOKMARK", "object": {"metadata": {}}}), ADDED_0],
            ["ADDED cpu-0"],
            id="blank-lines-and-bookmarks-carry-no-change",
        ),
    ],
)
def test_watch_yields_the_pod_events(session: Session, expected: list[str]) -> None:
    api = FakeCoreApi([session])
    api.listed = [pod("cpu-0")]
    assert events_of(api) == expected
    assert api.responses[0].closed and api.responses[0].released


def test_watch_asks_for_a_bounded_watch_of_our_pods() -> None:
    api = FakeCoreApi([[]])
    events_of(api)
    (call,) = api.watch_calls
    assert call == {
        "label_selector": "app.kubernetes.io/managed-by=slurm-k8s-bridge,"
        "slurm-k8s-bridge.io/cluster=lab",
        "resource_version": "7",
        "timeout_seconds": 30,
        "allow_watch_bookmarks": True,
        "watch": True,
        "_preload_content": False,
        # connect as any call; read: the server's timeout plus a margin
        "_request_timeout": (10.0, 40.0),
    }


Raised = type[BaseException]


@pytest.mark.parametrize(
    ("session", "kind", "message", "cause"),
    [
        pytest.param(
            [ADDED_0, GONE],
            WatchExpired,
            "watch pods: ERROR event 410 Expired: too old resource version: 1 (2117)",
            None,
            id="error-event-410",
        ),
        pytest.param(
            [line({"type": "ERROR", "object": {"reason": "Gone", "message": "gone"}})],
            WatchExpired,
            "watch pods: ERROR event None Gone: gone",
            None,
            id="error-event-gone-without-code",
        ),
        pytest.param(
            [INTERNAL],
            TransientBackendError,
            "watch pods: ERROR event 500 InternalError: etcdserver: request timed out",
            None,
            id="error-event-500",
        ),
        pytest.param(
            api_error(410, "Gone", "too old resource version: 1 (2117)"),
            WatchExpired,
            "watch pods: too old resource version: 1 (2117)",
            ApiException,
            id="http-410",
        ),
        pytest.param(
            api_error(503, "Service Unavailable", "apiserver is shutting down"),
            TransientBackendError,
            "watch pods: HTTP 503: apiserver is shutting down",
            ApiException,
            id="http-503",
        ),
        pytest.param(
            api_error(403, "Forbidden", "no"),
            Forbidden,
            "watch pods: forbidden: no",
            ApiException,
            id="http-403",
        ),
        pytest.param(
            urllib3.exceptions.MaxRetryError(
                APISERVER, "/api/v1", ConnectionRefusedError(111, "no")
            ),
            TransientBackendError,
            "watch pods: MaxRetryError: HTTPSConnectionPool(host='127.0.0.1', port=6443): "
            "Max retries exceeded with url: /api/v1",
            urllib3.exceptions.MaxRetryError,
            id="connection-refused",
        ),
        pytest.param(
            [ADDED_0, BROKEN],
            TransientBackendError,
            "watch pods: ProtocolError: Connection broken: InvalidChunkLength",
            urllib3.exceptions.ProtocolError,
            id="protocol-error-mid-stream",
        ),
        pytest.param(
            [ADDED_0, line({"type": "SURPRISE", "object": {}})],
            TransientBackendError,
            "watch pods: unknown event type 'SURPRISE'",
            None,
            id="unknown-type",
        ),
        pytest.param(
            [b"null\n"],
            TransientBackendError,
            "watch pods: malformed event: b'null'",
            None,
            id="json-null",
        ),
        pytest.param(
            [line({"type": "ADDED", "object": {**pod("cpu-0"), "metadata": "cpu-0"}})],
            TransientBackendError,
            "watch pods: malformed ADDED event: AttributeError:",
            AttributeError,
            id="metadata-not-a-dict",
        ),
    ],
)
def test_watch_translates_every_failure_into_a_bridge_error(
    session: Session, kind: type[BackendError], message: str, cause: Raised | None
) -> None:
    api = FakeCoreApi([session])
    with pytest.raises(BackendError) as raised:
        events_of(api)
    assert type(raised.value) is kind
    assert str(raised.value).startswith(message), str(raised.value)
    if cause is None:
        assert raised.value.__cause__ is None
    else:
        assert isinstance(raised.value.__cause__, cause), "chained with raise ... from"
    assert all(r.closed and r.released for r in api.responses)


@pytest.mark.parametrize(
    "bug",
    [KeyError("raw_object"), RuntimeError("client bug")],
    ids=["keyerror", "runtimeerror"],
)
def test_watch_lets_a_client_bug_through_to_the_watchers_last_resort(
    bug: BaseException,
) -> None:
    api = FakeCoreApi([[ADDED_0, bug]])
    with pytest.raises(type(bug)):
        events_of(api)
    assert api.responses[0].closed
