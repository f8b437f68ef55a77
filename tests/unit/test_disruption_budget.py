"""A pool's PodDisruptionBudget: the config option, the rendered manifest (a table), and the
adapter's create-or-patch."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from bridge.config import parse_config
from bridge.domain.disruption_budget import render_disruption_budget, render_disruption_budgets
from bridge.domain.pod_rendering import PodSettings
from bridge.domain.pools import NodePool
from bridge.errors import ConfigError, Forbidden
from bridge.runtime.serve import ensure_disruption_budgets
from tests.unit.fake_kube_api import Answer, FakeApiServer, gateway_to, status_answer
from tests.unit.fakes import MINIMAL_CONFIG

SETTINGS = PodSettings(namespace="slurm", cluster_name="lab", conf_server="10.213.0.1:6817")
SELECTOR = {
    "app.kubernetes.io/managed-by": "slurm-k8s-bridge",
    "slurm-k8s-bridge.io/cluster": "lab",
}


def pool(name: str, nodes: str, *, budget: bool = True) -> NodePool:
    return NodePool.create(
        name=name,
        nodes=nodes,
        cpus=2,
        real_memory_mb=1024,
        image="localhost/s:1",
        disruption_budget=budget,
    )


def budget(name: str, pool_name: str, min_available: int) -> dict[str, Any]:
    labels = {**SELECTOR, "slurm-k8s-bridge.io/pool": pool_name}
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": "slurm", "labels": labels},
        "spec": {
            "minAvailable": min_available,
            "selector": {"matchLabels": labels},
            "unhealthyPodEvictionPolicy": "IfHealthyBudget",
        },
    }


@pytest.mark.parametrize(
    ("node_pool", "expected"),
    [
        pytest.param(pool("cpu", "cpu-[0-3]"), budget("lab-cpu", "cpu", 4), id="four-nodes"),
        pytest.param(pool("big", "big-1"), budget("lab-big", "big", 1), id="one-node"),
        pytest.param(
            pool("gpu", "gpu-[0-9],gpu-[20-29]"), budget("lab-gpu", "gpu", 20), id="hostlist"
        ),
    ],
)
def test_render(node_pool: NodePool, expected: dict[str, Any]) -> None:
    assert render_disruption_budget(node_pool, SETTINGS) == expected


def test_only_the_pools_that_ask_get_one() -> None:
    pools = [pool("cpu", "cpu-[0-3]"), pool("big", "big-[0-1]", budget=False)]
    assert render_disruption_budgets(pools, SETTINGS) == [budget("lab-cpu", "cpu", 4)]


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        pytest.param("", False, id="default-off"),
        pytest.param("    disruption_budget: true\n", True, id="true"),
        pytest.param("    disruption_budget: false\n", False, id="false"),
    ],
)
def test_the_pool_option(line: str, expected: bool) -> None:
    config = parse_config(MINIMAL_CONFIG + line, "bridge.yaml")
    (cpu,) = config.pools
    assert cpu.disruption_budget is expected


def test_the_pool_option_is_a_boolean() -> None:
    with pytest.raises(ConfigError, match=r"bridge.yaml:10: pools\[0\].disruption_budget"):
        parse_config(MINIMAL_CONFIG + "    disruption_budget: yes please\n", "bridge.yaml")


# -- the adapter -----------------------------------------------------------------------------------

PDBS = "/apis/policy/v1/namespaces/slurm/poddisruptionbudgets"


def test_a_missing_budget_is_created(api_server: FakeApiServer) -> None:
    manifest = budget("lab-cpu", "cpu", 4)
    assert gateway_to(api_server, concurrency=2).ensure_disruption_budget(manifest) is True
    (request,) = api_server.requests
    assert (request.method, request.path) == ("POST", PDBS)
    assert json.loads(request.body) == manifest


def test_an_existing_budget_is_patched_to_the_manifest(api_server: FakeApiServer) -> None:
    api_server.answer(f"POST {PDBS}", status_answer(409, "AlreadyExists", "lab-cpu already exists"))
    api_server.answer(f"PATCH {PDBS}/lab-cpu", Answer(200))
    manifest = budget("lab-cpu", "cpu", 4)
    assert gateway_to(api_server, concurrency=2).ensure_disruption_budget(manifest) is False
    _, patch = api_server.requests
    assert (patch.method, patch.path) == ("PATCH", f"{PDBS}/lab-cpu")
    assert patch.headers["content-type"] == "application/merge-patch+json"
    assert json.loads(patch.body) == {
        "metadata": {"labels": manifest["metadata"]["labels"]},
        "spec": manifest["spec"],
    }


def test_a_forbidden_budget_is_forbidden(api_server: FakeApiServer) -> None:
    api_server.answer(f"POST {PDBS}", status_answer(403, "Forbidden", "cannot create"))
    with pytest.raises(Forbidden):
        gateway_to(api_server, concurrency=2).ensure_disruption_budget(budget("lab-cpu", "cpu", 4))


# -- at start --------------------------------------------------------------------------------------


class RecordingBudgets:
    """The gateway's ``ensure_disruption_budget``: records, creates, or says no by name."""

    def __init__(self, refuse: str = "") -> None:
        self.refuse = refuse
        self.ensured: list[str] = []

    def ensure_disruption_budget(self, manifest: dict[str, Any]) -> bool:
        name = str(manifest["metadata"]["name"])
        if name == self.refuse:
            raise Forbidden(f"create poddisruptionbudget {name}: forbidden")
        self.ensured.append(name)
        return True


TWO_POOLS = (
    MINIMAL_CONFIG
    + """\
    disruption_budget: true
  - name: big
    nodes: big-[0-1]
    cpus: 4
    real_memory_mb: 2048
    image: localhost/slurmd:dev
    disruption_budget: true
  - name: sim
    nodes: sim-[0-1]
    cpus: 4
    real_memory_mb: 2048
    image: localhost/slurmd:dev
"""
)


@pytest.mark.parametrize(
    ("refuse", "ensured", "warned"),
    [
        pytest.param("", ["lab-cpu", "lab-big"], False, id="every-pool-that-asks"),
        pytest.param("lab-cpu", ["lab-big"], True, id="a-refusal-is-a-warning-and-the-rest-go-on"),
    ],
)
def test_the_budgets_are_ensured_at_start(
    refuse: str, ensured: list[str], warned: bool, caplog: pytest.LogCaptureFixture
) -> None:
    budgets = RecordingBudgets(refuse)
    with caplog.at_level(logging.INFO, logger="bridge.runtime.serve"):
        ensure_disruption_budgets(parse_config(TWO_POOLS, "bridge.yaml"), budgets)  # type: ignore[arg-type]
    assert budgets.ensured == ensured
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert bool(warnings) is warned
    if warned:
        assert "policy/poddisruptionbudgets" in warnings[0]
