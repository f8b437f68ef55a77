"""The pure parts the service hands hostlists and status to: splitting a hostlist into pools
and rejections, and the status rows (tables; the service's own tests cover the wiring)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from bridge.config import parse_config
from bridge.domain.node_names import split_hostlist
from bridge.domain.node_status import node_statuses
from bridge.domain.nodes import SlurmNode
from bridge.domain.pods import PodView
from bridge.domain.results import ErrorClass, Outcome
from tests.unit.fakes import MINIMAL_CONFIG

NOW = datetime(2026, 12, 3, 12, 0, 0, tzinfo=UTC)
POOLS = parse_config(MINIMAL_CONFIG.replace("cpu-[0-3]", "cpu-[0-11]"), "bridge.yaml").pools


@pytest.mark.parametrize(
    ("hostlist", "names", "groups", "rejected"),
    [
        pytest.param("cpu-[0-1]", ["cpu-0", "cpu-1"], {"cpu": ["cpu-0", "cpu-1"]}, [], id="all"),
        pytest.param("cpu-1,cpu-1", ["cpu-1"], {"cpu": ["cpu-1"]}, [], id="distinct"),
        pytest.param(
            "x-1,cpu-2",
            ["x-1", "cpu-2"],
            {"cpu": ["cpu-2"]},
            [("x-1", ErrorClass.UNKNOWN_NODE)],
            id="no pool",
        ),
        pytest.param("CPU-1", ["CPU-1"], {}, [("CPU-1", ErrorClass.INVALID)], id="bad name"),
    ],
)
def test_split_hostlist(
    hostlist: str,
    names: list[str],
    groups: dict[str, list[str]],
    rejected: list[tuple[str, ErrorClass]],
) -> None:
    got_names, got_groups, got_rejected = split_hostlist(hostlist, POOLS, "bridge.yaml")
    assert got_names == names
    assert got_groups == groups
    assert [(r.node, r.error_class) for r in got_rejected] == rejected
    assert all(r.outcome is Outcome.REJECTED for r in got_rejected)


def test_an_unknown_name_is_rejected_naming_the_source() -> None:
    _, _, (result,) = split_hostlist("x-1", POOLS, "bridge.yaml")
    assert result.message == "node x-1 is in no pool of the bridge (bridge.yaml); Slurm left alone"


def pod(node: str, *, deleting: bool = False) -> PodView:
    return PodView(node, node, "cpu", "Running", "10.0.0.9", NOW, deleting, None)


@pytest.mark.parametrize(
    ("wanted", "slurm", "pods", "rows"),
    [
        pytest.param(
            ["cpu-10", "cpu-9", "cpu-11"],
            [],
            [],
            [("cpu-9", "cpu", "", ""), ("cpu-10", "cpu", "", ""), ("cpu-11", "cpu", "", "")],
            id="natural order",
        ),
        pytest.param(
            ["other-0", "other-1"],
            [SlurmNode("other-0", "IDLE", frozenset())],
            [],
            [("other-0", "", "idle", "")],
            id="a static node Slurm lists; nothing for an unknown one",
        ),
        pytest.param(
            ["cpu-0", "cpu-1"],
            [],
            [pod("cpu-0"), pod("cpu-1", deleting=True)],
            [("cpu-0", "cpu", "", "Running"), ("cpu-1", "cpu", "", "Terminating")],
            id="pods",
        ),
    ],
)
def test_node_statuses(
    wanted: list[str],
    slurm: list[SlurmNode],
    pods: list[PodView],
    rows: list[tuple[str, str, str, str]],
) -> None:
    got = node_statuses(wanted, slurm, pods, POOLS, {"cpu": "abc"})
    assert [(r.node, r.pool, r.slurm_state, r.pod_phase) for r in got] == rows
    assert {r.pool_template_hash for r in got if r.pool} <= {"abc"}
