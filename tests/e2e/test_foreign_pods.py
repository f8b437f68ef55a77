"""Pods the bridge did not create are not its pods, whatever their labels (issue 29 item 11).

Before, the bridge selected its pods by label alone: anyone allowed to create pods in the
namespace could add one labelled for a node. An impostor that failed set the node DOWN under its
running job; a pod squatting a powered-down node's name was adopted on resume ("exists already"),
and the node's NodeAddr pointed at it, so Slurm would have sent job scripts there. Now a pod is
the bridge's only if this bridge created it (a create id it sent) or found it when it started;
anything else is left alone and named in the log, and a resume that finds its name taken fails
fast with Kubernetes' Conflict.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.cluster import (
    job_state,
    node,
    pods,
    submit_as_job_user,
    wait_down,
    wait_for,
)
from tests.conftest import ProvingGround, Use

pytestmark = pytest.mark.e2e

NAMESPACE = "slurm"
#: dev/bridge.yaml's reconcile_interval_s is 5: three passes.
PASSES_S = 15


def foreign_pod(name: str, node_name: str, command: str) -> dict[str, Any]:
    """A pod with every label the bridge puts on node ``node_name``'s pod, made by someone else."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "labels": {
                "app.kubernetes.io/managed-by": "slurm-k8s-bridge",
                "slurm-k8s-bridge.io/cluster": "provingground",
                "slurm-k8s-bridge.io/pool": "big",
                "slurm-k8s-bridge.io/node": node_name,
            },
        },
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "nodeSelector": {"slurm-k8s-bridge.io/node-kind": "real"},
            "containers": [
                {
                    "name": "slurmd",
                    "image": "localhost/slurm-k8s-bridge/slurmd:dev",
                    "imagePullPolicy": "Never",
                    "command": ["/bin/sh", "-c", command],
                    "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
                }
            ],
        },
    }


@pytest.fixture
def make_foreign(proving_ground: ProvingGround) -> Iterator[Any]:
    made: list[str] = []

    def make(name: str, node_name: str, command: str) -> dict[str, Any]:
        manifest = json.dumps(foreign_pod(name, node_name, command))
        proving_ground.kubectl("create", "-f", "-", input_text=manifest)
        made.append(name)
        return wait_for(f"pod {name} created", lambda: pods(proving_ground).get(name), 30)

    yield make
    for name in made:
        proving_ground.kubectl(
            "-n", NAMESPACE, "delete", "pod", name, "--ignore-not-found", "--grace-period=0",
            "--force", "--wait=false",
        )  # fmt: skip


def bridge_log_since(pg: ProvingGround, offset: int) -> str:
    with (pg.layout.logs / "bridge.log").open() as f:
        f.seek(offset)
        return f.read()


def test_an_impostor_that_fails_leaves_the_node_and_its_job_alone(
    proving_ground: ProvingGround, use: Use, make_foreign: Any
) -> None:
    pg = proving_ground
    use("big-0")
    offset = (pg.layout.logs / "bridge.log").stat().st_size
    job = submit_as_job_user(
        pg, "-p", "big", "-N1", "-w", "big-0", "--output=/dev/null", "--wrap", "sleep 600"
    )
    wait_for("job running", lambda: job_state(pg, job) == "RUNNING" or None, 120, every=1)
    own_ip = wait_for("big-0's NodeAddr", lambda: node(pg, "big-0").get("NodeAddr"), 30)
    impostor = make_foreign("impostor-big-0", "big-0", "sleep 5; exit 1")
    uid = impostor["metadata"]["uid"]
    # Running with an IP for 5 s (before: "NodeAddr big-0=<its IP>: pod impostor-big-0 has IP"),
    # then Failed (the old code's DOWN, had the IP not been taken first).
    deadline = time.monotonic() + 5 + 2 * PASSES_S
    while time.monotonic() < deadline:
        fields = node(pg, "big-0")
        assert fields.get("NodeAddr") == own_ip, f"NodeAddr moved to the impostor: {fields}"
        assert "DOWN" not in fields["State"], fields
        time.sleep(1)
    assert pods(pg)["impostor-big-0"]["status"]["phase"] == "Failed"
    assert job_state(pg, job) == "RUNNING", job_state(pg, job)
    assert pods(pg)["impostor-big-0"]["metadata"]["uid"] == uid  # left alone, not deleted
    assert "big-0" in pods(pg)  # the node's own pod is still there
    assert "impostor-big-0" in bridge_log_since(pg, offset)  # named, for the admin
    pg.slurm("scancel", str(job))


def test_a_pod_squatting_a_node_s_name_is_not_adopted(
    proving_ground: ProvingGround, use: Use, make_foreign: Any
) -> None:
    pg = proving_ground
    use("big-1")
    squat = make_foreign("big-1", "big-1", "sleep 3600")
    uid = squat["metadata"]["uid"]
    ip = wait_for(
        "the squat's IP", lambda: pods(pg).get("big-1", {}).get("status", {}).get("podIP"), 60
    )
    job = submit_as_job_user(
        pg, "-p", "big", "-N1", "-w", "big-1", "--output=/dev/null", "--wrap", "hostname"
    )
    # Before: "pod big-1 exists already", NodeAddr=<the squat's IP>, then ResumeTimeout (180 s).
    down = wait_down(pg, "big-1", 60)
    assert "Conflict" in down["Reason"] and "did not create" in down["Reason"], down["Reason"]
    assert down.get("NodeAddr") != ip, down
    assert pods(pg)["big-1"]["metadata"]["uid"] == uid  # the squat is left to its owner
    pg.slurm("scancel", str(job))
