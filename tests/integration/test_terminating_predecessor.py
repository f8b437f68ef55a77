"""A node resumed while its previous pod is stuck Terminating on a dead kubelet.

The dead kubelet is a Node object no kubelet (and no kwok) manages: it never reports, so a pod
bound to it and deleted stays Terminating for good — what a crashed or partitioned worker does.
The bridge must wait out the pod's grace period plus its margin, force-delete it, and run this
cycle's pod; and an evicted predecessor's reason must never fail the new cycle.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from tests.cluster import NAMESPACE, job_state, node, pods, restart_bridge, submit, wait_for
from tests.conftest import ProvingGround, Use

pytestmark = pytest.mark.integration
DEAD_NODE = "skb-dead-0"
GRACE_S = 5
MARGIN_S = 15  # the bridge's terminating_margin_s (default)


@pytest.fixture
def dead_node(proving_ground: ProvingGround) -> Iterator[str]:
    manifest = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": DEAD_NODE, "labels": {"slurm-k8s-bridge.io/node-kind": "dead"}},
    }
    proving_ground.kubectl("apply", "-f", "-", input_text=json.dumps(manifest))
    yield DEAD_NODE
    proving_ground.kubectl("delete", "node", DEAD_NODE, "--wait=false", check=False)


def _stranded_pod(pg: ProvingGround, name: str) -> str:
    """A pod of ours for ``name`` bound to the dead node; returns its UID."""
    manifest = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "labels": {
                "app.kubernetes.io/managed-by": "slurm-k8s-bridge",
                "slurm-k8s-bridge.io/cluster": "provingground",
                "slurm-k8s-bridge.io/pool": "sim",
                "slurm-k8s-bridge.io/node": name,
            },
        },
        "spec": {
            "nodeName": DEAD_NODE,
            "terminationGracePeriodSeconds": GRACE_S,
            "containers": [{"name": "slurmd", "image": "localhost/slurm-k8s-bridge/slurmd:dev"}],
        },
    }
    out = pg.kubectl("create", "-f", "-", "-o", "json", input_text=json.dumps(manifest))
    return str(json.loads(out)["metadata"]["uid"])


def _evict(pg: ProvingGround, name: str) -> None:
    eviction = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": name, "namespace": NAMESPACE},
    }
    pg.kubectl(
        "create",
        "--raw",
        f"/api/v1/namespaces/{NAMESPACE}/pods/{name}/eviction",
        "-f",
        "-",
        input_text=json.dumps(eviction),
    )


@pytest.mark.parametrize(
    ("name", "how"), [("sim-40", "deleted"), ("sim-41", "evicted")], ids=["deleted", "evicted"]
)
def test_resume_over_a_predecessor_stuck_terminating(
    proving_ground: ProvingGround, use: Use, dead_node: str, name: str, how: str
) -> None:
    pg = proving_ground
    use(name)
    # A job arrives right after the predecessor started terminating: Slurm powers the node up
    # and the bridge's create meets the old pod's name.
    old_uid = _stranded_pod(pg, name)
    # Made by the admin (nothing the bridge renders is bound to a node), it is the bridge's
    # once the bridge finds it at its start (see bridge/adapters/kubernetes/provenance.py).
    restart_bridge(pg)
    if how == "evicted":
        _evict(pg, name)
    else:
        pg.kubectl("-n", NAMESPACE, "delete", "pod", name, "--wait=false")
    old = pods(pg)[name]
    assert old["metadata"].get("deletionTimestamp"), "the predecessor is not terminating"
    resumed = time.monotonic()
    job = submit(pg, "-p", "sim", "-N1", "-w", name, "--wrap", "true")
    wait_for(f"{name} powering up", lambda: "POWERING_UP" in node(pg, name)["State"] or None, 30)
    reasons: set[str] = set()

    def successor_running() -> bool:
        fields = node(pg, name)
        if fields.get("State", "").startswith("DOWN"):
            reasons.add(fields.get("Reason", ""))
        pod = pods(pg).get(name) or {}
        return (
            pod.get("metadata", {}).get("uid") not in (None, old_uid)
            and pod.get("status", {}).get("phase") == "Running"
        )

    wait_for(f"{name}'s new pod Running", lambda: successor_running() or None, GRACE_S + 60)
    elapsed = time.monotonic() - resumed
    print(
        f"{name} ({how} predecessor on a dead kubelet): new pod Running {elapsed:.1f}s after "
        f"sbatch (grace {GRACE_S}s + margin {MARGIN_S}s + reconcile interval 5s)"
    )
    assert not reasons, f"the new cycle was failed with {reasons}"
    assert "POWERING_UP" in node(pg, name)["State"]
    assert job_state(pg, job) in ("CONFIGURING", "RUNNING", "PENDING")
    assert elapsed < GRACE_S + MARGIN_S + 20
    events = pg.kubectl(
        "-n",
        NAMESPACE,
        "get",
        "events",
        f"--field-selector=involvedObject.name={name},reason=SlurmForceDelete",
        "-o",
        "name",
    )
    assert events.strip(), "no SlurmForceDelete event on the pod"
