"""deploy/grafana's sample dashboard: well-formed, and its queries name exactly the bridge's
metrics (a renamed metric must fail here, not leave an empty panel)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from bridge.metrics import PREFIX, BridgeMetrics

DASHBOARD = (
    Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "slurm-k8s-bridge-dashboard.json"
)
#: Sample names each metric type shows in a scrape, and so in PromQL.
SUFFIXES = {"counter": ("_total",), "gauge": ("",), "histogram": ("_bucket", "_sum", "_count")}
PANEL_TYPES = {"timeseries", "stat"}
METRIC_NAME = re.compile(rf"\b{PREFIX}[a-z0-9_]+")


def dashboard() -> dict[str, Any]:
    data = json.loads(DASHBOARD.read_text())
    assert isinstance(data, dict)
    return data


def panels() -> list[dict[str, Any]]:
    return list(dashboard()["panels"])


def exprs() -> list[str]:
    return [t["expr"] for p in panels() for t in p["targets"]]


def sample_names() -> dict[str, str]:
    """Sample name → its metric family, for every metric of the registry."""
    return {
        family.name + suffix: family.name
        for family in BridgeMetrics().registry.collect()
        for suffix in SUFFIXES[family.type]
    }


@pytest.mark.parametrize("key", ["title", "uid", "schemaVersion", "panels"])
def test_the_dashboard_has_grafanas_top_level_keys(key: str) -> None:
    assert dashboard()[key]


@pytest.mark.parametrize("panel", panels(), ids=lambda p: str(p.get("title")))
def test_every_panel_is_complete(panel: dict[str, Any]) -> None:
    assert {"id", "type", "title", "gridPos", "targets"} <= panel.keys()
    assert panel["type"] in PANEL_TYPES
    assert {"x", "y", "w", "h"} <= panel["gridPos"].keys()
    assert panel["targets"]
    assert all(t.get("expr") and t.get("refId") for t in panel["targets"])


def test_panel_ids_are_unique() -> None:
    ids = [p["id"] for p in panels()]
    assert len(ids) == len(set(ids))


@pytest.mark.parametrize("expr", exprs())
def test_every_query_names_metrics_the_bridge_exports(expr: str) -> None:
    names = METRIC_NAME.findall(expr)
    assert names, f"no bridge metric in {expr!r}"
    unknown = [n for n in names if n not in sample_names()]
    assert not unknown, f"{expr!r} names metrics the bridge does not export: {unknown}"


def test_every_metric_of_the_bridge_has_a_panel() -> None:
    used = {
        sample_names()[n] for e in exprs() for n in METRIC_NAME.findall(e) if n in sample_names()
    }
    assert used == set(BridgeMetrics().names())
