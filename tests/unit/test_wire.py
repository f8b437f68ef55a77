"""bridge.rpc.wire alone: each enum value both ways, and what an unknown value from a peer means."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from bridge.domain.nodes import SlurmNode
from bridge.domain.results import ErrorClass, NodeResult, NodeStatus, Outcome
from bridge.rpc._proto.slurm_k8s_bridge.v1 import bridge_pb2 as pb
from bridge.rpc.wire import (
    ERROR_CLASS_TO_PB,
    NODE_EVENT_KIND_TO_PB,
    NODE_EVENT_KINDS,
    OUTCOME_TO_PB,
    node_event_kind_from_pb,
    result_from_pb,
    result_to_pb,
    status_from_pb,
    status_to_pb,
)


@pytest.mark.parametrize(
    ("table", "domain_values", "proto_enum"),
    [
        (OUTCOME_TO_PB, set(Outcome), pb.Outcome),
        (ERROR_CLASS_TO_PB, set(ErrorClass), pb.ErrorClass),
        (NODE_EVENT_KIND_TO_PB, set(NODE_EVENT_KINDS), pb.NodeEventKind),
    ],
    ids=["outcome", "error_class", "node_event_kind"],
)
def test_each_table_covers_both_enums_one_to_one(
    table: dict[object, int], domain_values: set[object], proto_enum: object
) -> None:
    assert set(table) == domain_values
    proto_values = {v for name, v in proto_enum.items() if not name.endswith("_UNSPECIFIED")}
    assert sorted(table.values()) == sorted(proto_values)


@pytest.mark.parametrize("error_class", list(ErrorClass))
@pytest.mark.parametrize("outcome", list(Outcome))
def test_every_result_round_trips(outcome: Outcome, error_class: ErrorClass) -> None:
    result = NodeResult("c1", outcome, error_class, "why")
    assert result_from_pb(result_to_pb(result)) == result


@pytest.mark.parametrize(
    ("outcome", "error_class", "expected"),
    [
        (pb.OUTCOME_UNSPECIFIED, pb.ERROR_CLASS_NONE, (Outcome.FAILED, ErrorClass.INTERNAL)),
        (99, pb.ERROR_CLASS_NONE, (Outcome.FAILED, ErrorClass.INTERNAL)),
        (pb.OUTCOME_REJECTED, 99, (Outcome.REJECTED, ErrorClass.INTERNAL)),
        (pb.OUTCOME_OK, pb.ERROR_CLASS_NONE, (Outcome.OK, ErrorClass.NONE)),
    ],
    ids=["unspecified-outcome", "newer-outcome", "newer-error-class", "known"],
)
def test_unknown_values_from_a_peer(
    outcome: int, error_class: int, expected: tuple[Outcome, ErrorClass]
) -> None:
    r = result_from_pb(pb.NodeResult(node="c1", outcome=outcome, error_class=error_class))
    assert (r.outcome, r.error_class) == expected
    assert r.node == "c1"


@pytest.mark.parametrize("kind", NODE_EVENT_KINDS)
def test_node_event_kinds_round_trip(kind: str) -> None:
    assert node_event_kind_from_pb(NODE_EVENT_KIND_TO_PB[kind]) == kind


@pytest.mark.parametrize("value", [pb.NODE_EVENT_KIND_UNSPECIFIED, 99])
def test_unknown_node_event_kind_is_none(value: int) -> None:
    assert node_event_kind_from_pb(value) is None


@pytest.mark.parametrize(
    "since",
    [datetime(2026, 12, 2, 9, 30, 1, 500000, tzinfo=UTC), None],
    ids=["with-since", "without-since"],
)
def test_status_round_trips(since: datetime | None) -> None:
    status = NodeStatus("c1", "cpu", "alloc", "Running", "10.0.0.5", "k8s: x", since)
    msg = status_to_pb(status)
    assert msg.HasField("since") == (since is not None)
    assert status_from_pb(msg) == status


@pytest.mark.parametrize(
    "reason_since",
    [datetime(2026, 12, 2, 9, 0, 0, tzinfo=UTC), None],
    ids=["with-reason-since", "without-reason-since"],
)
def test_status_carries_slurms_node_whole(reason_since: datetime | None) -> None:
    node = SlurmNode(
        "c1",
        "ALLOCATED",
        frozenset({"CLOUD", "DRAIN", "POWER_DOWN", "POWERING_UP"}),
        "k8s: Rollout: template changed",
        reason_since=reason_since,
    )
    status = NodeStatus(
        "c1", "cpu", node.display_state, "Running", "", node.reason, None, slurm_node=node
    )
    back = status_from_pb(status_to_pb(status))
    assert back.slurm_node == node
    # The compact form alone loses the queued power down (``drng#``): the whole node keeps it.
    assert back.slurm_view.power_down_queued
    assert not SlurmNode.from_display_state("c1", node.display_state).power_down_queued


def test_a_status_from_an_older_bridge_is_read_from_its_compact_state() -> None:
    msg = status_to_pb(NodeStatus("c1", "cpu", "idle~", "", "", "", None))
    assert not msg.base_state
    back = status_from_pb(msg)
    assert back.slurm_node is None
    assert back.slurm_view.is_powered_down


@pytest.mark.parametrize("stuck", ["", "pod Failed", None], ids=["not-stuck", "stuck", "unjudged"])
def test_the_bridges_stuck_judgement_round_trips(stuck: str | None) -> None:
    status = NodeStatus("c1", "cpu", "idle", "Failed", "", "", None, stuck=stuck)
    msg = status_to_pb(status)
    assert msg.HasField("stuck") == (stuck is not None)
    assert status_from_pb(msg).stuck == stuck
