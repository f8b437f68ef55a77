"""A GPU-like pool on the real scheduler (issue 30 item 5): its Gres is requested on its pods as
the extended resource ``gres_resources`` names, so kube-scheduler binds them to the (kwok) node
that advertises the resource, and a pod asking more than any node has stays Unschedulable with
Kubernetes' "Insufficient" reason (which the bridge fails fast on)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from proving_ground.kube import kwok_node_manifest

from bridge.domain.pod_rendering import PodSettings, render_pods
from bridge.domain.pools import NodePool
from tests.cluster import NAMESPACE, pods, wait_for
from tests.conftest import ProvingGround

pytestmark = pytest.mark.integration

GPU_NODE = "skb-kwok-gpu"
RESOURCE = "example.org/gpu"
#: A cluster name no bridge on the ground uses: its pods are nobody's to act on.
SETTINGS = PodSettings(namespace=NAMESPACE, cluster_name="gres-test", conf_server="10.213.0.1:6817")


@pytest.fixture
def gpu_node(proving_ground: ProvingGround) -> Iterator[str]:
    node: dict[str, Any] = kwok_node_manifest(GPU_NODE)
    for key in ("allocatable", "capacity"):
        node["status"][key][RESOURCE] = "4"
    node["metadata"]["labels"]["example.org/gpu-node"] = "yes"
    proving_ground.kubectl("apply", "-f", "-", input_text=json.dumps(node))
    yield GPU_NODE
    proving_ground.kubectl("delete", "node", GPU_NODE, "--wait=false", check=False)


def gpu_pool(gres: str) -> NodePool:
    return NodePool.create(
        name="gpux",
        nodes="gpux-[0-1]",
        cpus=1,
        real_memory_mb=256,
        image="localhost/slurm-k8s-bridge/slurmd:dev",
        gres=(gres,),
        gres_resources={"gpu": RESOURCE},
        pod_template={
            "spec": {
                "nodeSelector": {"type": "kwok"},
                "tolerations": [
                    {"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}
                ],
            }
        },
    )


@pytest.fixture
def cleanup(proving_ground: ProvingGround) -> Iterator[None]:
    yield
    proving_ground.kubectl(
        "-n", NAMESPACE, "delete", "pod", "gpux-0", "gpux-1", "--ignore-not-found",
        "--grace-period=0", "--force", "--wait=false",
    )  # fmt: skip


def test_a_gpu_pool_s_pods_request_the_resource_and_land_where_it_is(
    proving_ground: ProvingGround, gpu_node: str, cleanup: None
) -> None:
    pg = proving_ground
    (fits,) = render_pods(gpu_pool("gpu:a100:2"), ["gpux-0"], SETTINGS)
    (too_big,) = render_pods(gpu_pool("gpu:8"), ["gpux-1"], SETTINGS)
    (slurmd,) = [c for c in fits["spec"]["containers"] if c["name"] == "slurmd"]
    assert slurmd["resources"]["requests"][RESOURCE] == "2"
    assert slurmd["resources"]["limits"][RESOURCE] == "2"
    for pod in (fits, too_big):
        pg.kubectl("create", "-f", "-", input_text=json.dumps(pod))
    placed = wait_for(
        "gpux-0 bound", lambda: pods(pg).get("gpux-0", {}).get("spec", {}).get("nodeName"), 60
    )
    assert placed == GPU_NODE  # the only node with example.org/gpu, among the kwok nodes

    def unschedulable() -> str | None:
        conditions = pods(pg).get("gpux-1", {}).get("status", {}).get("conditions") or []
        said = [c for c in conditions if c.get("reason") == "Unschedulable"]
        return said[0]["message"] if said else None

    assert f"Insufficient {RESOURCE}" in wait_for("gpux-1 Unschedulable", unschedulable, 60)
