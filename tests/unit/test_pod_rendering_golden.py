"""render_pod against golden files: every pool of the shipped configurations and the unit tests'
odd templates, rendered for a pool's first and last node, must serialise to the JSON recorded
under tests/data/rendered_pods/ (key order included). A change to the rendering shows as a diff
of those files: ``SKB_UPDATE_GOLDEN=1 make unit`` rewrites them, and the diff is reviewed with
the change. (The goldens were first written, and checked equal, from the frozen copy of the
rendering before issue 11 that this file replaces, plus the later template hash label.)"""

from __future__ import annotations

import copy
import json
import os
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bridge.config import load_config
from bridge.domain.pod_rendering import PodSettings, render_pod, render_pods
from bridge.domain.pools import NodePool

from .test_pod_rendering import FULL_TEMPLATE, SETTINGS, pool_with

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "data" / "rendered_pods"
CONFIGS = [
    "deploy/examples/bridge.yaml",
    "deploy/compose/bridge.yaml",
    "dev/bridge.yaml",
    "deploy/kustomize/overlays/in-cluster/bridge.yaml",
]
UPDATE = os.environ.get("SKB_UPDATE_GOLDEN") == "1"


def _cases() -> list[tuple[str, NodePool, PodSettings]]:
    cases = [("unit: full template", pool_with(copy.deepcopy(FULL_TEMPLATE)), SETTINGS)]
    cases.append(("unit: empty template", pool_with({}), SETTINGS))
    # Values JSON cannot carry as they are (YAML gives dates; Python callers tuples).
    odd = {
        "metadata": {"annotations": {"since": "x"}},
        "spec": {
            "tolerations": ({"key": "a", "operator": "Exists"},),
            "x-scheduled": datetime(2026, 12, 3, tzinfo=UTC),
            "x-ratio": float("inf"),
        },
    }
    cases.append(("unit: template JSON cannot carry", pool_with(odd), SETTINGS))
    beyond_64_bits = {"spec": {"activeDeadlineSeconds": 2**70}}
    cases.append(("unit: integer orjson cannot write", pool_with(beyond_64_bits), SETTINGS))
    for path in CONFIGS:
        config = load_config(ROOT / path, environ={})
        cases += [(f"{path}: {pool.name}", pool, config.pod_settings()) for pool in config.pools]
    return cases


CASES = _cases()


def golden_path(case: str) -> Path:
    return GOLDEN / (re.sub(r"[^a-z0-9]+", "-", case.lower()).strip("-") + ".json")


def as_text(pods: object) -> str:
    # default=repr: the odd templates' dates and big integers; json keeps key order.
    return json.dumps(pods, default=repr, indent=1) + "\n"


@pytest.mark.parametrize(("case", "pool", "settings"), CASES, ids=[c[0] for c in CASES])
def test_rendering_matches_its_golden_file(
    case: str, pool: NodePool, settings: PodSettings
) -> None:
    template_before = copy.deepcopy(dict(pool.pod_template))
    nodes = list(pool.node_names)
    ends = [nodes[0], nodes[-1]]
    text = as_text([render_pod(pool, node, settings) for node in ends])
    path = golden_path(case)
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert path.is_file(), f"{path} missing: run with SKB_UPDATE_GOLDEN=1 and review the diff"
    assert text == path.read_text(), f"{case}: the rendering differs from {path.name}"
    # Rendered together (one template walk per pool) or one by one: the same pods.
    together = render_pods(pool, nodes, settings)
    assert together == [render_pod(pool, node, settings) for node in nodes]
    assert dict(pool.pod_template) == template_before


def test_every_golden_file_has_a_case() -> None:
    expected = {golden_path(case).name for case, _, _ in CASES}
    assert len(expected) == len(CASES), "two cases share a golden file name"
    assert {p.name for p in GOLDEN.glob("*.json")} == expected


def test_pods_rendered_together_share_nothing() -> None:
    pool = pool_with(copy.deepcopy(FULL_TEMPLATE))
    first, second = render_pods(pool, ["cpu-0", "cpu-1"], SETTINGS)
    first["spec"]["containers"][0]["image"] = "changed"
    first["spec"]["tolerations"][0]["key"] = "changed"
    first["spec"]["volumes"][0]["emptyDir"]["medium"] = "Memory"
    again = render_pod(pool, "cpu-0", SETTINGS)
    for pod in (second, again):
        assert pod["spec"]["containers"][0]["image"] == "busybox"
        assert pod["spec"]["tolerations"][0]["key"] == "dedicated"
        assert pod["spec"]["volumes"][0]["emptyDir"] == {}


def test_no_nodes_render_no_pods_and_a_stranger_is_refused() -> None:
    assert render_pods(pool_with({}), [], SETTINGS) == []
    with pytest.raises(ValueError, match="'gpu-0' is not in pool 'cpu'"):
        render_pods(pool_with({}), ["cpu-0", "gpu-0"], SETTINGS)


@pytest.mark.parametrize(("case", "pool", "settings"), CASES, ids=[c[0] for c in CASES])
def test_a_gang_adds_its_group_and_leaves_other_pods_byte_identical(
    case: str, pool: NodePool, settings: PodSettings
) -> None:
    nodes = list(pool.node_names)
    alone = render_pods(pool, nodes, settings)
    in_gang = render_pods(pool, nodes, settings, pod_groups={nodes[0]: "skb-job-12-x-3f2a1c"})
    # The rest of the call's pods: the very bytes they had without gang scheduling.
    assert as_text(in_gang[1:]) == as_text(alone[1:]), case
    grouped = in_gang[0]
    assert grouped["spec"].pop("schedulingGroup") == {"podGroupName": "skb-job-12-x-3f2a1c"}
    assert as_text(grouped) == as_text(alone[0])
    # A gang never changes the template hash: a pod's group is its node's, not the pool's.
    assert in_gang[0]["metadata"]["labels"] == alone[0]["metadata"]["labels"]
