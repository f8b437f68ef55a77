"""The watch-fed pod cache (issue 11): reconcile and status read it instead of listing.

``PodWatcher`` fills a ``PodCache`` from the real ``PodGateway`` over ``FakeCoreApi``: the first
list, then each event; bookmarks and clean ends resume the watch, a 410 relists and replaces the
cache whole. ``Snapshots`` (the reconciler as the watcher sees it) writes down what the cache
held at every poke, which is when the reconciler would read it.

The first list adopts its pods; a pod that comes later is the bridge's when it carries the
create id the bridge sent for it (``sent``), else the cache never holds it.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import time
from collections import deque
from datetime import UTC, datetime, timedelta

import pytest
from kubernetes.client.exceptions import ApiException

from bridge.adapters.kubernetes import PodGateway, WatchExpired
from bridge.domain.pods import PodView
from bridge.runtime.pod_cache import NotSynced, PodCache
from bridge.runtime.pod_watcher import PodWatcher
from bridge.runtime.reconciler import Reconciler
from bridge.service.use_cases import BridgeService
from tests.unit.fake_kube_api import (
    FakeCoreApi,
    Session,
    bookmark,
    error_event,
    event,
    pod,
)
from tests.unit.fakes import FakePods, FakeSlurm
from tests.unit.harness import Harness

NOW = datetime(2026, 12, 2, 12, 0, 0, tzinfo=UTC)
#: When the cache saw a pod first, by the bridge's clock.
SEEN = NOW + timedelta(seconds=5)
GONE = error_event(410, "Expired", "too old resource version: 1 (2117)")


class Snapshots:
    """Pokes recorded as the cache's pod names and version at that moment, in the journal."""

    def __init__(self, cache: PodCache, journal: list[str]) -> None:
        self.cache = cache
        self.journal = journal

    def poke(self) -> None:
        pods, version = self.cache.list_pods()
        self.journal.append(f"cache {','.join(sorted(p.name for p in pods)) or '-'} @{version}")


def sent(name: str) -> str:
    """In a table, the create id the gateway sent when it created pod ``name``: ``run`` has
    the gateway make one, as ``create_pod`` does, and puts it in its place."""
    return f"<create id sent for {name}>"


SENT = re.compile(rb"<create id sent for ([^>]+)>")


def send_create_ids(pods: PodGateway, api: FakeCoreApi) -> None:
    """``pods`` creates the pods whose ``sent`` appears in ``api``'s script (each gets a
    create id from the gateway's provenance), and the script's pods carry those ids."""
    ids: dict[bytes, bytes] = {}

    def create_id(found: re.Match[bytes]) -> bytes:
        name = found.group(1)
        if name not in ids:
            ids[name] = pods.provenance.new_create_id(name.decode()).encode()
        return ids[name]

    api.sessions = deque(
        session
        if isinstance(session, BaseException)
        else [SENT.sub(create_id, c) if isinstance(c, bytes) else c for c in session]
        for session in api.sessions
    )
    api.list_script = deque(
        json.loads(SENT.sub(create_id, json.dumps(listed).encode())) for listed in api.list_script
    )


def run(api: FakeCoreApi) -> tuple[PodCache, list[str]]:
    """A watcher through ``api``'s script until its watch is quiet; the cache and journal."""
    cache = PodCache()
    pods = PodGateway(api, namespace="slurm", cluster_name="lab")
    send_create_ids(pods, api)
    watcher = PodWatcher(
        pods,
        Snapshots(cache, api.journal),
        cache=cache,
        watch_timeout_s=5,
        backoff_s=0.01,
        max_backoff_s=0.04,
    )
    watcher.start()
    try:
        assert api.drained.wait(10), f"the watcher stalled: {api.journal}"
    finally:
        watcher.stop()
        api.release.set()
        assert watcher.stop(wait_s=5)
    return cache, api.journal


@pytest.mark.parametrize(
    ("listed", "sessions", "expected"),
    [
        pytest.param(
            [[pod("cpu-0", "1")]],
            [
                [
                    event("ADDED", "cpu-1", "5", create_id=sent("cpu-1")),
                    event("MODIFIED", "cpu-0", "6"),
                ]
            ],
            [
                "list 1",
                "cache cpu-0 @1",
                "watch 1",
                "send ADDED cpu-1",
                "cache cpu-0,cpu-1 @5",
                "send MODIFIED cpu-0",
                "cache cpu-0,cpu-1 @6",
                "watch 6",  # a clean end resumes from the last event: no list
            ],
            id="list-then-events",
        ),
        pytest.param(
            [[pod("cpu-0", "1")]],
            [[event("ADDED", "cpu-1", "5"), event("MODIFIED", "cpu-0", "6")]],
            [
                "list 1",
                "cache cpu-0 @1",
                "watch 1",
                "send ADDED cpu-1",
                "cache cpu-0 @5",  # the bridge did not create it: not cached
                "send MODIFIED cpu-0",
                "cache cpu-0 @6",
                "watch 6",
            ],
            id="a-pod-the-bridge-did-not-create-is-not-cached",
        ),
        pytest.param(
            [[pod("cpu-0", "1"), pod("cpu-1", "1")]],
            [[event("DELETED", "cpu-0", "7")]],
            [
                "list 1",
                "cache cpu-0,cpu-1 @1",
                "watch 1",
                "send DELETED cpu-0",
                "cache cpu-1 @7",
                "watch 7",
            ],
            id="a-deleted-pod-leaves-with-its-event",
        ),
        pytest.param(
            [[]],
            [
                [event("ADDED", "cpu-0", "3", create_id=sent("cpu-0")), bookmark("40")],
                [bookmark("90")],
            ],
            [
                "list 1",
                "cache - @1",
                "watch 1",
                "send ADDED cpu-0",
                "cache cpu-0 @3",
                "send BOOKMARK 40",
                "watch 40",
                "send BOOKMARK 90",
                "watch 90",
            ],
            id="bookmarks-move-the-version-to-resume-from",
        ),
        pytest.param(
            [
                [pod("cpu-0", "1"), pod("cpu-1", "1")],
                [pod("cpu-1", "2"), pod("cpu-2", "2", create_id=sent("cpu-2"))],
            ],
            [[event("MODIFIED", "cpu-0", "4"), GONE]],
            [
                "list 1",
                "cache cpu-0,cpu-1 @1",
                "watch 1",
                "send MODIFIED cpu-0",
                "cache cpu-0,cpu-1 @4",
                "send ERROR 410",
                "list 2",  # only the 410 relists; the list replaces the cache whole
                "cache cpu-1,cpu-2 @2",
                "watch 2",
            ],
            id="a-410-relists-and-replaces-the-cache",
        ),
    ],
)
def test_the_cache_follows_the_list_and_the_watch(
    listed: list[list[dict[str, object]]], sessions: list[Session], expected: list[str]
) -> None:
    api = FakeCoreApi(sessions)
    api.list_script.extend(listed)
    cache, journal = run(api)
    assert journal == expected
    assert cache.synced


def test_the_first_list_and_a_relist_are_paged() -> None:
    api = FakeCoreApi()
    api.listed = [pod(f"cpu-{n}", "1") for n in range(5)]
    pods = PodGateway(api, namespace="slurm", cluster_name="lab")
    pods.list_page_size = 2
    listed, version = pods.list_pods()
    assert sorted(p.name for p in listed) == [f"cpu-{n}" for n in range(5)]
    assert version == "1"
    assert api.journal == ["list 1", "page 1:2", "page 1:4"]
    assert [c["limit"] for c in api.list_calls] == [2, 2, 2]
    assert [c["_continue"] for c in api.list_calls] == [None, "1:2", "1:4"]


def test_an_expired_continue_token_is_a_410_like_a_watchs() -> None:
    api = FakeCoreApi()
    api.listed = [pod(f"cpu-{n}", "1") for n in range(3)]
    api.fail_continue = ApiException(status=410, reason="Gone", body='{"message": "expired"}')
    pods = PodGateway(api, namespace="slurm", cluster_name="lab")
    pods.list_page_size = 2
    with pytest.raises(WatchExpired, match="list pods: expired"):
        pods.list_pods()


# -- PodCache on its own ------------------------------------------------------------------------


def view(name: str) -> PodView:
    return PodView(name, name, "cpu", "Running", "10.0.0.1", NOW, False, None)


def test_a_read_before_the_first_list_raises_instead_of_answering_no_pods() -> None:
    cache = PodCache(sync_wait_s=0.05, clock=lambda: SEEN)
    started = time.monotonic()
    with pytest.raises(NotSynced, match="no pod list yet"):
        cache.list_pods()
    assert time.monotonic() - started >= 0.05
    cache.replace([view("cpu-0")], "7")
    assert cache.list_pods() == ([dataclasses.replace(view("cpu-0"), first_seen=SEEN)], "7")


def test_the_cache_keeps_each_pods_first_sighting_on_the_bridges_clock() -> None:
    """Issue 29 item 13: the age guards also count from when the bridge first saw a pod, by its
    own clock; a MODIFIED event or a relist keeps that moment, a new pod (new UID) gets its own."""
    now = [SEEN]
    cache = PodCache(clock=lambda: now[0])
    cache.replace([dataclasses.replace(view("cpu-0"), uid="u-1")], "7")
    now[0] = SEEN + timedelta(seconds=40)
    cache.apply("MODIFIED", dataclasses.replace(view("cpu-0"), uid="u-1", phase="Running"), "8")
    cache.replace([dataclasses.replace(view("cpu-0"), uid="u-1")], "9")
    cache.apply("ADDED", dataclasses.replace(view("cpu-1"), uid="u-2"), "10")
    seen = {p.name: p.first_seen for p in cache.list_pods()[0]}
    assert seen == {"cpu-0": SEEN, "cpu-1": SEEN + timedelta(seconds=40)}
    cache.apply("MODIFIED", dataclasses.replace(view("cpu-1"), uid="u-3"), "11")  # recreated
    assert {p.name: p.first_seen for p in cache.list_pods()[0]}["cpu-1"] == now[0]


@pytest.mark.parametrize(
    ("changes", "names", "version"),
    [
        pytest.param([("ADDED", "cpu-1", "8")], ["cpu-0", "cpu-1"], "8", id="added"),
        pytest.param([("MODIFIED", "cpu-0", "8")], ["cpu-0"], "8", id="modified"),
        pytest.param([("DELETED", "cpu-0", "8")], [], "8", id="deleted"),
        pytest.param([("DELETED", "cpu-9", "8")], ["cpu-0"], "8", id="deleted-unknown"),
        pytest.param([("ADDED", "cpu-1", "")], ["cpu-0", "cpu-1"], "7", id="no-version-kept"),
    ],
)
def test_cache_events(changes: list[tuple[str, str, str]], names: list[str], version: str) -> None:
    cache = PodCache()
    cache.replace([view("cpu-0")], "7")
    for kind, name, at in changes:
        cache.apply(kind, view(name), at)
    pods, got = cache.list_pods()
    assert (sorted(p.name for p in pods), got) == (names, version)


# -- the reconciler before the first list -------------------------------------------------------


def service_on(cache: PodCache) -> tuple[BridgeService, FakeSlurm, FakePods]:
    h = Harness(now=NOW, pod_views=cache)
    return h.service, h.slurm, h.pods


def test_reconcile_reads_the_cache_not_a_list() -> None:
    cache = PodCache()
    service, _, pods = service_on(cache)
    pods.list_pods = lambda: pytest.fail("reconcile listed the pods")  # type: ignore[method-assign]
    cache.replace([view("cpu-0")], "7")
    service.reconcile_once()
    assert [row.node for row in service.list_nodes("cpu-0") if row.pod_phase] == ["cpu-0"]


def test_a_pass_before_the_first_list_is_skipped_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    cache = PodCache(sync_wait_s=0.01)
    service, slurm, pods = service_on(cache)
    reconciler = Reconciler(service, interval_s=60, min_gap_s=0.01)
    caplog.set_level(logging.INFO, logger="bridge.runtime.reconciler")
    reconciler.start()
    reconciler.poke()
    deadline = time.monotonic() + 5
    while "reconcile pass skipped: pod cache: no pod list yet" not in caplog.text:
        assert time.monotonic() < deadline, caplog.text
        time.sleep(0.01)
    reconciler.stop()
    assert slurm.updates == [] and pods.create_calls == [] and pods.delete_calls == []
