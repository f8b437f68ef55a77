"""dev/bench/pod_state_patches.py's pure part: reading the apiserver's and the bridge's metrics,
counting transitions from the pods, and the verdict (the run itself needs the proving ground)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "dev" / "bench"))

import pod_state_patches
from pod_state_patches import Counters, Phase, Shown

from bridge.domain.pods import CONDITION_REGISTERED, LABEL_SLURM_STATE
from bridge.domain.reconcile import SetPodSlurmState
from bridge.metrics import BridgeMetrics


def _request(code: str, resource: str, subresource: str, verb: str, count: int) -> str:
    # The shape of kube-apiserver's samples (its labels, in the order it writes them).
    return (
        f'apiserver_request_total{{code="{code}",component="apiserver",dry_run="",group="",'
        f'resource="{resource}",scope="resource",subresource="{subresource}",verb="{verb}",'
        f'version="v1"}} {count}'
    )


APISERVER = "\n".join(
    [
        "# HELP apiserver_request_total [STABLE] Counter of apiserver requests ...",
        "# TYPE apiserver_request_total counter",
        _request("200", "pods", "", "PATCH", 1000),
        _request("403", "pods", "", "PATCH", 3),
        _request("200", "pods", "status", "PATCH", 2000),
        _request("201", "pods", "", "POST", 1000),
        _request("200", "pods", "log", "GET", 7),
        _request("200", "nodes", "status", "PATCH", 50),
        'apiserver_request_total_other{resource="pods",subresource="",verb="PATCH"} 99',
    ]
)

BRIDGE = """\
# HELP slurm_k8s_bridge_reconcile_actions_total Actions the reconcile passes planned ...
# TYPE slurm_k8s_bridge_reconcile_actions_total counter
slurm_k8s_bridge_reconcile_actions_total{action="SetPodSlurmState"} 1500.0
slurm_k8s_bridge_reconcile_actions_total{action="PowerDown"} 12.0
slurm_k8s_bridge_reconcile_actions_created{action="SetPodSlurmState"} 1.7e+09
slurm_k8s_bridge_reconcile_pass_seconds_count 42.0
slurm_k8s_bridge_reconcile_pass_seconds_sum 3.5
slurm_k8s_bridge_pod_state_patches_total{part="label"} 998.0
slurm_k8s_bridge_pod_state_patches_total{part="condition"} 1000.0
"""


@pytest.mark.parametrize(
    ("text", "name", "labels", "expected"),
    [
        (APISERVER, "apiserver_request_total", {"verb": "PATCH", "subresource": ""}, 1003),
        (
            APISERVER,
            "apiserver_request_total",
            {"verb": "PATCH", "resource": "pods", "subresource": "status"},
            2000,
        ),
        (APISERVER, "apiserver_request_total", {"verb": "PATCH", "resource": "pods"}, 3003),
        (APISERVER, "apiserver_request_total", {"verb": "DELETE"}, 0),
        (BRIDGE, "slurm_k8s_bridge_reconcile_actions_total", {"action": "SetPodSlurmState"}, 1500),
        (BRIDGE, "slurm_k8s_bridge_reconcile_pass_seconds_count", {}, 42),
        # A label the sample lacks reads as "", as Prometheus has it.
        (BRIDGE, "slurm_k8s_bridge_reconcile_pass_seconds_count", {"pool": ""}, 42),
        (BRIDGE, "slurm_k8s_bridge_reconcile_pass_seconds_count", {"pool": "cpu"}, 0),
        ('m{a="x\\"y",b="z"} 2\nm{a="x"} 5\n', "m", {"a": 'x"y'}, 2),
        ("m 1.5 1700000000000\n", "m", {}, 1.5),
        ("", "m", {}, 0),
    ],
)
def test_sample_sum(text: str, name: str, labels: dict[str, str], expected: float) -> None:
    assert pod_state_patches.sample_sum(text, name, labels) == expected


def test_counters_from_the_two_scrapes() -> None:
    assert pod_state_patches.counters(APISERVER, BRIDGE) == Counters(
        1003, 2000, 998, 1000, 1500, 42
    )


def _pod(name: str, word: str | None, registered: str | None, deleting: bool = False) -> Any:
    meta: dict[str, Any] = {"name": name, "labels": {LABEL_SLURM_STATE: word} if word else {}}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    conditions = [{"type": "Ready", "status": "False"}]
    if registered:
        conditions.append({"type": CONDITION_REGISTERED, "status": registered})
    return {"metadata": meta, "status": {"conditions": conditions}}


def test_shown_states_leaves_out_pods_being_deleted() -> None:
    pods = [
        _pod("chaos-0", "powering-up", "False"),
        _pod("chaos-1", None, None),
        _pod("chaos-2", "powering-down", "False", deleting=True),
        {"metadata": {"name": "chaos-3"}},
    ]
    assert pod_state_patches.shown_states(pods) == {
        "chaos-0": ("powering-up", "False"),
        "chaos-1": (None, None),
        "chaos-3": (None, None),
    }


UP: Shown = ("powering-up", "False")


@pytest.mark.parametrize(
    ("before", "after", "expected"),
    [
        ({}, {"a": UP, "b": UP}, (2, 2)),  # new pods: none → powering-up
        ({}, {"a": (None, None)}, (0, 0)),  # a new pod that shows nothing yet
        ({"a": UP}, {"a": UP}, (0, 0)),
        ({"a": UP}, {"a": ("idle", "True")}, (1, 1)),
        ({"a": UP}, {"a": ("drain", "False")}, (1, 0)),
        ({"a": UP, "b": UP}, {}, (0, 0)),  # gone pods change nothing
    ],
)
def test_transitions(
    before: dict[str, Shown], after: dict[str, Shown], expected: tuple[int, int]
) -> None:
    assert pod_state_patches.transitions(before, after) == expected


@pytest.mark.parametrize(
    ("patches", "seen", "ratio", "ok"),
    [
        (1000, 1000, 1.0, True),
        (999, 1000, 0.999, True),
        (1001, 1000, 1.001, False),
        (0, 0, None, True),
        (1, 0, None, False),
    ],
)
def test_per_transition_and_budget(
    patches: float, seen: int, ratio: float | None, ok: bool
) -> None:
    assert pod_state_patches.per_transition(patches, seen) == ratio
    assert pod_state_patches.within_budget(patches, seen) is ok


@pytest.mark.parametrize(
    ("phase", "ok"),
    [
        # kwok's status patches inflate the apiserver's count; the verdict reads the bridge's.
        (Phase("1 power_up", 1000, 1000, 1000, Counters(1000, 2000, 1000, 1000, 1000, 4)), True),
        (Phase("1 power_up", 1000, 1000, 1000, Counters(1001, 2000, 1001, 1000, 1000, 4)), False),
        (Phase("1 power_up", 1000, 1000, 1000, Counters(1000, 2500, 1000, 1500, 1500, 4)), False),
        # Another client's label patch is not the bridge's.
        (Phase("3 quiet", 1000, 0, 0, Counters(1, 0, 0, 0, 0, 3)), True),
        (Phase("3 quiet", 1000, 0, 0, Counters(1, 0, 1, 0, 1, 3)), False),
        (Phase("4 power_down_force", 1000, 0, 0, Counters(0, 5, 0, 0, 0, 6)), True),
        # The bridge claims patches the apiserver never answered: its count is not believed.
        (Phase("1 power_up", 1000, 1000, 1000, Counters(900, 2000, 1000, 1000, 1000, 4)), False),
        (Phase("1 power_up", 1000, 1000, 1000, Counters(1000, 999, 1000, 1000, 1000, 4)), False),
    ],
)
def test_phase_verdict(phase: Phase, ok: bool) -> None:
    assert phase.ok is ok


def test_counters_minus() -> None:
    later, earlier = Counters(10, 20, 30, 40, 50, 60), Counters(1, 2, 3, 4, 5, 6)
    assert later.minus(earlier) == Counters(9, 18, 27, 36, 45, 54)


def test_table_and_bench_rows_name_every_phase() -> None:
    phases = [
        Phase("1 power_up", 3, 3, 3, Counters(3, 6, 3, 3, 3, 4)),
        Phase("3 quiet", 3, 0, 0, Counters(1, 0, 1, 0, 1, 3)),
        Phase("4 power_down_force", 3, 0, 0, Counters(0, 0, 0, 2, 0, 3)),
    ]
    text = pod_state_patches.table(phases)
    assert "1 power_up" in text
    assert "1 (no transition)" in text
    assert text.splitlines()[2].split()[-1] == "yes"
    assert text.splitlines()[3].split()[-1] == "NO"
    assert text.splitlines()[4].endswith("NO (apiserver saw fewer)")
    rows = pod_state_patches.table_lines(phases, 3)
    assert [r[3] for r in rows] == [
        "1.00 / 1.00",
        "1 (no transition) / 0 (no transition) OVER",
        "0 (no transition) / 2 (no transition) OVER",
    ]


@pytest.mark.parametrize(("argv", "nodes"), [([], 1000), (["--nodes", "200"], 200)])
def test_args(argv: list[str], nodes: int) -> None:
    assert pod_state_patches.parse_args(argv).nodes == nodes


def test_args_refuse_no_nodes() -> None:
    with pytest.raises(SystemExit):
        pod_state_patches.parse_args(["--nodes", "0"])


def test_the_bridges_own_metrics_read_as_the_bench_reads_them() -> None:
    metrics = BridgeMetrics()
    for _ in range(3):
        metrics.reconcile_pass(0.01, [SetPodSlurmState("chaos-0", "powering-up", False), object()])
    metrics.pod_state_patched("label")
    metrics.pod_state_patched("condition")
    metrics.pod_state_patched("condition")
    text = generate_latest(metrics.registry).decode()
    assert pod_state_patches.counters("", text) == Counters(0, 0, 1, 2, 3, 3)
