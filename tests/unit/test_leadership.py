"""Leader election: the decisions (bridge.domain.leadership), the elector with its fence
(bridge.runtime.leadership) over a Lease store that answers as the API server does (409 on a
stale resourceVersion), and the fenced ports (bridge.runtime.fencing)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from bridge.adapters.kubernetes.lease import _manifest, _record
from bridge.domain.leadership import LeaderState, LeaseRecord, Step, claim, next_step, released
from bridge.domain.reconcile import SetPodSlurmState
from bridge.errors import Conflict, NotLeader, TransientBackendError
from bridge.rpc.wire import leadership_from_pb, leadership_to_pb
from bridge.runtime.fencing import FencedPods, FencedSlurm
from bridge.runtime.leadership import Leadership

T0 = datetime(2026, 12, 6, tzinfo=UTC)


def record(holder: str, version: str = "1", transitions: int = 0) -> LeaseRecord:
    return LeaseRecord(holder, 15, T0, T0, transitions, version)


@pytest.mark.parametrize(
    ("lease", "unchanged_for_s", "step"),
    [
        (None, 0.0, Step.CREATE),
        (record("a"), 0.0, Step.RENEW),  # ours: renew (a restarted "a" too)
        (record("a"), 99.0, Step.RENEW),
        (record("b"), 0.0, Step.FOLLOW),
        (record("b"), 14.9, Step.FOLLOW),
        (record("b"), 15.0, Step.TAKE_OVER),  # unchanged for its whole duration
        (record(""), 0.0, Step.TAKE_OVER),  # released
    ],
)
def test_next_step(lease: LeaseRecord | None, unchanged_for_s: float, step: Step) -> None:
    assert next_step(lease, "a", unchanged_for_s) is step


def test_claims() -> None:
    now = T0 + timedelta(seconds=30)
    assert claim(Step.CREATE, None, "a", now, 15) == LeaseRecord("a", 15, now, now, 0)
    ours = record("a", version="7")
    assert claim(Step.RENEW, ours, "a", now, 15) == replace(ours, renewed=now)
    theirs = record("b", version="7", transitions=2)
    assert claim(Step.TAKE_OVER, theirs, "a", now, 20) == LeaseRecord("a", 20, now, now, 3, "7")
    assert released(ours).holder == ""
    # The address is the writer's, every write; a released Lease names none.
    here = claim(Step.RENEW, replace(ours, address="old:1"), "a", now, 15, address="a:7000")
    assert here.address == "a:7000"
    assert claim(Step.TAKE_OVER, theirs, "a", now, 15, address="a:7000").address == "a:7000"
    assert released(here).address == ""
    with pytest.raises(ValueError, match="writes nothing"):
        claim(Step.FOLLOW, theirs, "a", now, 15)


class LeaseStore:
    """One Lease as the API server keeps it: every write bumps the resourceVersion; a replace
    at another version is a 409."""

    name = "slurm-k8s-bridge-lab"

    def __init__(self) -> None:
        self.lease: LeaseRecord | None = None
        self.version = 0
        self.writes: list[tuple[str, str]] = []
        self.down = False

    def read(self) -> LeaseRecord | None:
        if self.down:
            raise TransientBackendError("read lease: connection refused")
        return self.lease

    def create(self, lease: LeaseRecord) -> LeaseRecord:
        if self.lease is not None:
            raise Conflict("create lease: already exists")
        return self._save(lease)

    def replace(self, lease: LeaseRecord) -> LeaseRecord:
        if self.lease is None or lease.version != self.lease.version:
            raise Conflict("update lease: the object has been modified")
        return self._save(lease)

    def _save(self, lease: LeaseRecord) -> LeaseRecord:
        self.version += 1
        self.lease = replace(lease, version=str(self.version))
        self.writes.append((lease.holder, self.lease.version))
        return self.lease


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def elector(store: LeaseStore, identity: str, clock: Clock, events: list[str]) -> Leadership:
    return Leadership(
        store,
        identity,
        duration_s=15,
        retry_s=2,
        on_started=lambda: events.append(f"{identity} leads"),
        on_stopped=lambda: events.append(f"{identity} stops"),
        clock=clock,
        now=lambda: T0 + timedelta(seconds=clock.t),
    )


def test_one_bridge_leads_at_once_and_its_fence_holds_only_while_renewed() -> None:
    store, clock, events = LeaseStore(), Clock(), list[str]()
    a = elector(store, "a", clock, events)
    assert not a.leading()  # nothing read yet
    a.run_once()
    assert a.leading() and events == ["a leads"]
    a.check("create pods")  # no error
    # Renewed every retry period: still leading long after the first deadline.
    for _ in range(10):
        clock.t += 2
        a.run_once()
    assert a.leading()
    # Not renewed (the process stopped, its VM froze, or the API server is down): the fence
    # closes two thirds into the Lease, before anyone may take over.
    store.down = True
    clock.t += 9.9
    a.run_once()
    assert a.leading()
    clock.t += 0.2
    assert not a.leading()
    with pytest.raises(NotLeader, match=r"create pods: this bridge \(a\) does not lead"):
        a.check("create pods")
    a.run_once()
    assert events == ["a leads", "a stops"]
    # Back: it still holds the Lease and leads again (re-reading everything first).
    store.down = False
    a.run_once()
    assert a.leading() and events == ["a leads", "a stops", "a leads"]


def test_the_other_takes_over_a_silent_leader_and_the_resumed_one_writes_nothing() -> None:
    store, clock, events = LeaseStore(), Clock(), list[str]()
    a, b = elector(store, "a", clock, events), elector(store, "b", clock, events)
    a.run_once()
    b.run_once()
    assert a.leading() and not b.leading()
    assert b.state().leader == "a"
    with pytest.raises(NotLeader, match=r"this bridge \(b\) does not lead; a holds lease"):
        b.check("scontrol update down")
    # "a" is stopped (SIGSTOP): "b" sees the same record for the Lease's duration.
    for _ in range(7):
        clock.t += 2
        b.run_once()
    assert not b.leading()  # 14 s: not yet
    clock.t += 2
    b.run_once()
    assert b.leading() and b.state().transitions == 1
    # "a" resumes: its deadline is long past before it even reads the Lease.
    assert not a.leading()
    a.run_once()
    assert not a.leading() and a.state().leader == "b"
    assert events == ["a leads", "b leads", "a stops"]
    # Everything "a" wrote to the Lease came before "b" took it over.
    assert [holder for holder, _ in store.writes] == ["a", "b"]


def test_two_taking_over_at_once_one_wins() -> None:
    store, clock, events = LeaseStore(), Clock(), list[str]()
    store.lease = record("gone", version="5")
    store.version = 5
    b, c = elector(store, "b", clock, events), elector(store, "c", clock, events)
    b.run_once()
    c.run_once()
    clock.t += 15
    # Both read version 5 and decide to take over; the second write meets a 409.
    lease = store.read()
    b_claim = claim(Step.TAKE_OVER, lease, "b", T0, 15)
    store.replace(b_claim)
    c.run_once()  # reads b's record: follows
    b.run_once()
    assert b.leading() and not c.leading()


def test_a_released_lease_is_taken_at_once_and_a_restart_keeps_its_own() -> None:
    store, clock, events = LeaseStore(), Clock(), list[str]()
    a, b = elector(store, "a", clock, events), elector(store, "b", clock, events)
    a.run_once()
    b.run_once()
    a.stop(release=True)  # the thread never started: stop() only releases
    assert store.lease is not None and store.lease.holder == ""
    b.run_once()
    assert b.leading()
    # "b" restarts (same identity): its Lease is its own at once, no wait for expiry.
    b2 = elector(store, "b", clock, events)
    b2.run_once()
    assert b2.leading()


@pytest.mark.parametrize(
    ("taken_meanwhile", "holder_after"),
    [
        # Stalled past its own deadline (a loaded host), nobody took over yet: released anyway,
        # so the other leads at once instead of at the Lease's expiry.
        (False, ""),
        # Another bridge took the Lease meanwhile: the release meets a 409 and changes nothing.
        (True, "b"),
    ],
)
def test_a_leader_past_its_own_deadline_still_releases_what_it_last_held(
    taken_meanwhile: bool, holder_after: str
) -> None:
    store, clock, events = LeaseStore(), Clock(), list[str]()
    a, b = elector(store, "a", clock, events), elector(store, "b", clock, events)
    a.run_once()
    b.run_once()
    clock.t += 11  # past two thirds of the 15 s Lease without a renewal
    assert not a.leading()
    if taken_meanwhile:
        clock.t += 5
        b.run_once()
        assert b.leading()
    a.stop(release=True)
    assert store.lease is not None and store.lease.holder == holder_after


def test_the_observer_hears_every_step() -> None:
    store, clock = LeaseStore(), Clock()
    seen: list[tuple[str, bool, int]] = []
    a = Leadership(
        store,
        "a",
        duration_s=15,
        retry_s=2,
        observer=lambda s: seen.append((s.leader, s.leading, s.transitions)),
        clock=clock,
    )
    a.run_once()
    store.down = True
    a.run_once()
    assert seen == [("a", True, 0), ("a", True, 0)]


class Recorder:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(name)
            if name in ("create_pods", "delete_pods", "set_slurm_states", "create_pod_groups"):
                return {}
            if name in ("list_pods",):
                return [], "1"
            if name in ("list_pod_groups",):
                return []
            return None

        return call


def test_fenced_ports_pass_reads_and_refuse_writes_of_a_follower() -> None:
    refusal = NotLeader("follower")

    def fence(what: str) -> None:
        raise refusal

    slurm, pods = Recorder(), Recorder()
    fenced_slurm = FencedSlurm(slurm, fence)
    fenced_pods = FencedPods(pods, fence)
    fenced_slurm.list_nodes(["a"])
    fenced_slurm.jobs_on_nodes(["a"])
    fenced_pods.list_pods()
    fenced_pods.read_pod("a")
    fenced_pods.list_pod_groups()
    assert slurm.calls == ["list_nodes", "jobs_on_nodes"]
    assert pods.calls == ["list_pods", "read_pod", "list_pod_groups"]
    writes: list[Callable[[], object]] = [
        lambda: fenced_slurm.update_nodes(["a"], state="down", reason="x"),
        lambda: fenced_slurm.set_node_addresses({"a": "10.0.0.1"}),
        lambda: fenced_slurm.set_node_comment(["a"], "x"),
        lambda: fenced_slurm.set_jobs_admin_comment([1], "x"),
        lambda: fenced_pods.set_pod_group_min_count("g", 2),
        lambda: fenced_pods.delete_pod_group("g"),
    ]
    for write in writes:
        with pytest.raises(NotLeader):
            write()
    # The pod writes answer per pod, as the gateway does; an event is dropped.
    manifest = {"metadata": {"name": "a"}}
    assert fenced_pods.create_pods([manifest]) == {"a": refusal}
    assert fenced_pods.delete_pods(["a", "b"]) == {"a": refusal, "b": refusal}
    change = SetPodSlurmState("a", "idle", registered=True)
    assert fenced_pods.set_slurm_states([change]) == {"a": refusal}
    assert fenced_pods.create_pod_groups([{"metadata": {"name": "g"}}]) == {"g": refusal}
    fenced_pods.record_event("a", "Created", "x")
    assert slurm.calls == ["list_nodes", "jobs_on_nodes"]
    assert pods.calls == ["list_pods", "read_pod", "list_pod_groups"]


def test_fenced_ports_pass_writes_of_the_leader() -> None:
    slurm, pods = Recorder(), Recorder()
    fenced_slurm = FencedSlurm(slurm, lambda what: None)
    fenced_pods = FencedPods(pods, lambda what: None)
    fenced_slurm.update_nodes(["a"], state="down", reason="x")
    fenced_pods.create_pods([{"metadata": {"name": "a"}}])
    fenced_pods.record_event("a", "Created", "x")
    fenced_pods.create_pod_groups([{"metadata": {"name": "g"}}])
    fenced_pods.set_pod_group_min_count("g", 2)
    fenced_pods.delete_pod_group("g")
    assert slurm.calls == ["update_nodes"]
    assert pods.calls == [
        "create_pods",
        "record_event",
        "create_pod_groups",
        "set_pod_group_min_count",
        "delete_pod_group",
    ]


def test_the_lease_s_json_round_trips() -> None:
    """What LeaseGateway sends and reads back (MicroTime in UTC with microseconds)."""
    moment = datetime(2026, 12, 6, 1, 2, 3, 456789, tzinfo=UTC)
    lease = LeaseRecord("ctl-a", 15, moment, moment, 4, "77")
    manifest = _manifest("skb-lab", lease)
    assert manifest["metadata"] == {"name": "skb-lab", "resourceVersion": "77"}
    assert manifest["spec"] == {
        "holderIdentity": "ctl-a",
        "leaseDurationSeconds": 15,
        "leaseTransitions": 4,
        "acquireTime": "2026-12-06T01:02:03.456789Z",
        "renewTime": "2026-12-06T01:02:03.456789Z",
    }
    assert _record(manifest) == lease
    # The holder's address rides on an annotation; a record without one writes none.
    addressed = replace(lease, address="ctl-a.example:7000")
    assert _manifest("skb-lab", addressed)["metadata"]["annotations"] == {
        "slurm-k8s-bridge.io/leader-address": "ctl-a.example:7000"
    }
    assert _record(_manifest("skb-lab", addressed)) == addressed
    # Released: no holder on the wire; read back as "".
    assert "holderIdentity" not in _manifest("skb-lab", released(lease))["spec"]
    assert _record({"metadata": {}, "spec": {}}) == LeaseRecord("", 1, None, None, 0, "")


def test_leadership_on_the_wire() -> None:
    for state in (
        LeaderState(True, "a", "l", "b", False, T0, 3),
        LeaderState(True, "a", "l", "", False, None, 0),
        LeaderState(enabled=False),
    ):
        assert leadership_from_pb(leadership_to_pb(state)) == state
