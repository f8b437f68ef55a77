"""``status`` during a template rollout: per pool, pods on the current template vs older ones."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from bridge.cli.status_report import Rollout, as_json, render, rollout_lines, rollouts
from bridge.domain.nodes import SlurmNode
from bridge.domain.results import NodeStatus
from bridge.rpc.wire import status_from_pb, status_to_pb
from tests.unit.harness import Harness
from tests.unit.test_cli_status import opts
from tests.unit.test_service import config

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
OLD, NEW = "0123456789", "abcdef0123"


def row(node: str, state: str, pod_hash: str = "", *, pod: bool = True) -> NodeStatus:
    return NodeStatus(
        node,
        node.split("-", maxsplit=1)[0],
        state,
        "Running" if pod else "",
        "10.1.0.5" if pod else "",
        "",
        NOW - timedelta(minutes=5) if pod else None,
        template_hash=pod_hash if pod else "",
        pool_template_hash=NEW,
    )


@pytest.mark.parametrize(
    ("rows", "lines"),
    [
        ([row("cpu-0", "idle", NEW), row("cpu-1", "alloc", NEW)], []),
        # Pods of a bridge before the hash: unknown, no rollout.
        ([row("cpu-0", "idle", ""), row("cpu-1", "alloc", "")], []),
        (
            [
                row("cpu-0", "idle", NEW),
                # Busy and drained for the rollout (POWER_DOWN_ASAP): waits for its job.
                row("cpu-1", "drng!", OLD),
                row("cpu-2", "mix", OLD),
                # Idle and drained: Slurm powers it down at once.
                row("cpu-3", "drain!", OLD),
                row("cpu-4", "idle", NEW),
                row("cpu-5", "idle~", pod=False),
            ],
            [f"rollout cpu: 2/5 pods on template {NEW}; 2 waiting for their jobs"],
        ),
        (
            [row("cpu-0", "idle", OLD), row("gpu-0", "alloc", OLD), row("gpu-1", "idle", NEW)],
            [
                f"rollout cpu: 0/1 pods on template {NEW}; 0 waiting for their jobs",
                f"rollout gpu: 1/2 pods on template {NEW}; 1 waiting for their jobs",
            ],
        ),
    ],
    ids=["all-current", "unknown-hashes", "in-progress", "two-pools"],
)
def test_rollout_lines(rows: list[NodeStatus], lines: list[str]) -> None:
    assert rollout_lines(rows) == lines


def test_the_text_shows_the_rollout_before_the_stuck_line() -> None:
    rows = [row("cpu-0", "alloc", OLD), row("cpu-1", "idle", NEW)]
    text, _ = render(rows, opts(), NOW)
    assert text.splitlines()[-2:] == [
        f"rollout cpu: 1/2 pods on template {NEW}; 1 waiting for their jobs",
        "stuck: none",
    ]


def test_the_json_shows_hashes_and_rollouts() -> None:
    rows = [row("cpu-0", "alloc", OLD), row("cpu-1", "idle", NEW)]
    doc = as_json(rows, [], NOW, opts(["--json"]))
    assert [n["template_hash"] for n in doc["nodes"]] == [OLD, NEW]
    assert doc["rollouts"] == {
        "cpu": {"template": NEW, "pods": 2, "current": 1, "older": 1, "waiting_for_jobs": 1}
    }
    assert rollouts(rows) == [Rollout("cpu", NEW, 2, 1, 1, 1)]


def test_the_hashes_cross_the_wire() -> None:
    status = row("cpu-0", "alloc", OLD)
    assert status_from_pb(status_to_pb(status)) == status


def test_list_nodes_carries_the_pod_and_pool_hashes() -> None:
    h = Harness([SlurmNode("cpu-0", "IDLE", frozenset({"CLOUD"}))], now=NOW, config=config())
    service = h.service
    service.resume("cpu-0", "", "r1")
    (status,) = service.list_nodes("cpu-0")
    assert status.template_hash == service.template_hashes["cpu"] == status.pool_template_hash
    assert not status.on_older_template
