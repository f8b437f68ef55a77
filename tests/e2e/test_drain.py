"""``kubectl drain`` of the real node while a job runs on one of its slurmd pods: the bridge sees
the cordon and drains the Slurm node with its own reason first; pool cpu's PodDisruptionBudget
keeps the drain from evicting the busy pod; the job completes, Slurm powers the node down, the
bridge deletes the pod (no eviction) and the drain completes."""

from __future__ import annotations

import subprocess
import time

import pytest
from proving_ground.layout import REAL_NODE

from tests.cluster import (
    job_finished,
    job_restarts,
    job_state,
    node,
    pod_condition,
    pods,
    submit,
    wait_for,
)
from tests.conftest import ProvingGround, Use

pytestmark = pytest.mark.e2e

NODE = "cpu-6"
JOB_S = 40
DRAIN_TIMEOUT_S = 240


def _sinfo_state(pg: ProvingGround, name: str) -> str:
    return pg.slurm("sinfo", "-h", "-N", "-n", name, "-o", "%t").strip()


def _drained_by_us(pg: ProvingGround, name: str) -> dict[str, str] | None:
    fields = node(pg, name)
    drained = "DRAIN" in fields.get("State", "").split("+")
    ours = fields.get("Reason", "").startswith("k8s: Cordoned:")
    return fields if drained and ours else None


def test_kubectl_drain_waits_for_the_job_and_drains_slurm_first(
    proving_ground: ProvingGround, use: Use
) -> None:
    pg = proving_ground
    use(NODE)
    budget = pg.kubectl("-n", "slurm", "get", "pdb", "provingground-cpu", "-o", "name")
    assert budget.strip() == "poddisruptionbudget.policy/provingground-cpu", budget
    job = submit(
        pg,
        "-p",
        "cpu",
        "-N1",
        "-w",
        NODE,
        "--chdir=/tmp",
        "--output=/dev/null",
        "--wrap",
        f"sleep {JOB_S}",
    )
    wait_for("job running", lambda: job_state(pg, job) == "RUNNING" or None, 120, every=1)
    assert pods(pg)[NODE]["spec"]["nodeName"] == REAL_NODE
    # The budget counts Ready pods, and a slurmd pod is Ready once the bridge marked it
    # registered (its readiness gate). A job may start first (seen in CI: slurmd registered
    # 0.7 s after the create and the job ran at once): a drain then would evict a pod the
    # budget does not count yet. Drain a node whose pod the budget protects.
    wait_for(
        f"pod {NODE} ready",
        lambda: pod_condition(pg, NODE, "Ready").get("status") == "True" or None,
        30,
    )
    drain = subprocess.Popen(
        pg.kubectl_argv(
            "drain",
            REAL_NODE,
            "--ignore-daemonsets",
            "--delete-emptydir-data",
            # Our pods have no controller: without --force kubectl refuses to touch them (it
            # still evicts them, through the budget, with it).
            "--force",
            f"--timeout={DRAIN_TIMEOUT_S}s",
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        started = time.monotonic()
        fields = wait_for(f"{NODE} drained with our reason", lambda: _drained_by_us(pg, NODE), 30)
        print(f"cordon -> Slurm drain in {time.monotonic() - started:.1f}s: {fields['Reason']}")
        assert _sinfo_state(pg, NODE).startswith("drng"), _sinfo_state(pg, NODE)
        assert NODE in pods(pg), "the busy pod went before its job ended"
        assert drain.poll() is None, "kubectl drain ended while the job still ran"
        state = wait_for(f"job {job} to end", lambda: job_finished(pg, job), JOB_S + 90, every=1)
        assert state == "COMPLETED", f"job {job} ended {state}"
        assert job_restarts(pg, job) == 0, f"job {job} was requeued"
        wait_for(f"pod {NODE} gone", lambda: NODE not in pods(pg) or None, 90, every=1)
        out, _ = drain.communicate(timeout=DRAIN_TIMEOUT_S)
        assert drain.returncode == 0, out
        print(f"kubectl drain done in {time.monotonic() - started:.1f}s")
    finally:
        if drain.poll() is None:
            drain.kill()
            drain.wait(timeout=10)
        if drain.stdout is not None:
            drain.stdout.close()  # else the pipe's ResourceWarning fails a later test
        pg.kubectl("uncordon", REAL_NODE, check=False)
        # Evicted pods of other pools (none should be running between tests) come back as
        # new resumes; the node must take pods again before the next test.
        wait_for(
            f"{REAL_NODE} schedulable",
            lambda: (
                "true"
                not in pg.kubectl("get", "node", REAL_NODE, "-o", "jsonpath={.spec.unschedulable}")
                or None
            ),
            30,
        )
