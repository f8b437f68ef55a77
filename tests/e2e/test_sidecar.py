"""A pod with a sidecar on the real kubelet (issue 29 item 3): the sidecar ends (exit 0, as a
one-shot helper or a log shipper that is done does) while slurmd runs a job. Kubernetes keeps the
pod Running; the bridge must too: the node stays up, the job completes, nothing is requeued.
(Before, any container that ended set the node DOWN with "slurmd exited with code 0".)"""

from __future__ import annotations

import copy
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cluster import (
    job_finished,
    job_restarts,
    node,
    pods,
    restart_bridge,
    submit,
    wait_for,
)
from tests.conftest import ProvingGround, Use

pytestmark = pytest.mark.e2e

NODE = "big-1"
#: Ends 5 s after it starts, long before the job does.
SIDECAR: dict[str, Any] = {
    "name": "helper",
    "image": "localhost/slurm-k8s-bridge/slurmd:dev",
    "imagePullPolicy": "Never",
    "command": ["/bin/sh", "-c", "sleep 5"],
    "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"memory": "32Mi"}},
}


def with_sidecar(pg: ProvingGround, into: Path) -> Path:
    """The ground's bridge.yaml with SIDECAR in pool big's pods."""
    config = yaml.safe_load((pg.layout.root / "dev" / "bridge.yaml").read_text())
    big = next(p for p in config["pools"] if p["name"] == "big")
    template = copy.deepcopy(big["pod_template"])  # an alias of cpu's: change big's alone
    template["spec"]["containers"].append(SIDECAR)
    big["pod_template"] = template
    into.write_text(yaml.safe_dump(config, sort_keys=False))
    return into


def sidecar_ended(pg: ProvingGround) -> dict[str, Any] | None:
    pod = pods(pg).get(NODE)
    statuses = (pod or {}).get("status", {}).get("containerStatuses") or []
    ended = [s for s in statuses if s["name"] == "helper" and "terminated" in s.get("state", {})]
    return ended[0]["state"]["terminated"] if ended else None


def test_a_sidecar_that_ends_leaves_the_node_and_its_job_alone(
    proving_ground: ProvingGround, use: Use, bridge_tmp: Path
) -> None:
    pg = proving_ground
    use(NODE)
    restart_bridge(pg, with_sidecar(pg, bridge_tmp / "bridge.yaml"))
    try:
        job = submit(
            pg, "-p", "big", "-N1", "-w", NODE, "--output=/dev/null", "--chdir=/tmp",
            "--wrap", "sleep 40",
        )  # fmt: skip
        ended = wait_for("the sidecar to end", lambda: sidecar_ended(pg), 120, every=1)
        assert ended["exitCode"] == 0, ended
        # From the sidecar's end to the job's: the node is never set DOWN.
        downs: list[str] = []
        deadline = time.monotonic() + 180
        while (final := job_finished(pg, job)) is None and time.monotonic() < deadline:
            state = node(pg, NODE)
            if "DOWN" in state["State"]:
                downs.append(f"{state['State']}: {state.get('Reason', '')}")
            time.sleep(1)
        assert downs == [], f"{NODE} was set DOWN after its sidecar ended: {downs[0]}"
        assert final == "COMPLETED", final
        assert job_restarts(pg, job) == 0
        assert pods(pg)[NODE]["status"]["phase"] == "Running"
    finally:
        restart_bridge(pg)
