"""A full ResourceQuota is a wait, not a failure (issue 29 item 4). Before, the API server's
"exceeded quota" set the node DOWN at once (`k8s: NoCapacity`), requeued the job and counted
against the pool's breaker; at capacity every resume failed. Now the node stays POWERING_UP with
`Comment=k8s: waiting: NoCapacity since ...`, the reconciler retries the create every pass, and
the job runs as soon as the quota has room."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from bridge.domain.nodes import SlurmNode
from tests.cluster import NAMESPACE, job_finished, job_state, pods, slurm_node, submit, wait_for
from tests.conftest import ProvingGround, Use

pytestmark = pytest.mark.e2e

NODE = "cpu-14"
QUOTA = "skb-e2e-full"
#: How long the node is watched waiting: several reconcile passes (5 s each), each a refused
#: create that the old code would have turned into a DOWN.
WAIT_S = 15


def _quota_counted(pg: ProvingGround) -> bool | None:
    """The quota controller has counted the namespace: until then admission refuses with
    "status unknown for quota", which is not a full quota."""
    out = pg.kubectl("-n", NAMESPACE, "get", "resourcequota", QUOTA, "-o", "json", check=False)
    try:
        used = json.loads(out).get("status", {}).get("used", {})
    except json.JSONDecodeError:
        return None
    return "pods" in used or None


@contextmanager
def namespace_full(pg: ProvingGround) -> Iterator[None]:
    """No new pod fits the bridge's namespace (a quota of 0 pods; running pods stay)."""
    quota = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": QUOTA, "namespace": NAMESPACE},
        "spec": {"hard": {"pods": "0"}},
    }
    try:
        pg.kubectl("apply", "-f", "-", input_text=json.dumps(quota))
        wait_for("the quota counted", lambda: _quota_counted(pg), 60, every=1)
        yield
    finally:
        pg.kubectl("-n", NAMESPACE, "delete", "resourcequota", QUOTA, "--ignore-not-found")


def test_a_full_quota_holds_the_node_waiting_and_the_job_runs_once_there_is_room(
    proving_ground: ProvingGround, use: Use
) -> None:
    pg = proving_ground
    use(NODE)
    with namespace_full(pg):
        job = submit(
            pg, "-p", "cpu", "-N1", "-w", NODE, "--output=/dev/null", "--chdir=/tmp",
            "--wrap", "sleep 2",
        )  # fmt: skip

        def waiting() -> SlurmNode | None:
            seen = slurm_node(pg, NODE)
            assert not seen.is_down, f"{NODE} failed: {seen}"
            return seen if seen.comment.startswith("k8s: waiting: NoCapacity") else None

        wait_for(f"{NODE} waiting for capacity", waiting, 60, every=1)
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            seen = slurm_node(pg, NODE)
            assert not seen.is_down, f"{NODE} failed while the quota is full: {seen}"
            assert NODE not in pods(pg)
            assert job_state(pg, job) in ("PENDING", "CONFIGURING"), job_state(pg, job)
            time.sleep(1)
    # Room again: the next pass creates the pod, slurmd registers, the job runs.
    final = wait_for(f"job {job} to finish", lambda: job_finished(pg, job), 180, every=1)
    assert final == "COMPLETED", f"job {job}: {final}"
    assert "NoCapacity" not in slurm_node(pg, NODE).reason
