"""A hung backend against the proving ground's bridge: kube-apiserver or slurmctld stopped with
SIGSTOP (a hung process, not a crash) shows in the bridge's ``backend_errors`` and
``backend_retries`` metrics, and the bridge carries on once it answers again. On kwok nodes (the
``sim`` pool): no slurmd."""

from __future__ import annotations

import os
import signal
import time

import pytest
from proving_ground.processes import State

from tests.cluster import bridge_metrics, metric_total, pods, submit, wait_for
from tests.conftest import ProvingGround, Use

pytestmark = pytest.mark.integration

#: How long each backend is frozen: longer than a reconcile interval (5 s on the ground) plus a
#: call's timeout (10 s), so some call surely times out (seen: 15 s sometimes was not enough).
FROZEN_S = 25


@pytest.mark.parametrize("daemon", ["kube-apiserver", "slurmctld"])
def test_a_frozen_backend_shows_in_the_bridges_error_and_retry_counts(
    proving_ground: ProvingGround, use: Use, daemon: str
) -> None:
    """A backend that stops answering (SIGSTOP: a hung process, not a crash) is what the
    ``backend_errors`` and ``backend_retries`` metrics are for; they must move, and the bridge
    must carry on once it answers again."""
    pg = proving_ground
    backend = "kubernetes" if daemon == "kube-apiserver" else "slurm"
    use("sim-[56-57]")

    def failures() -> float:
        scrape = bridge_metrics(pg)
        errors = metric_total(scrape, "slurm_k8s_bridge_backend_errors_total", backend=backend)
        retries = metric_total(scrape, "slurm_k8s_bridge_backend_retries_total", backend=backend)
        return errors + retries

    before = failures()
    pid = State(pg.layout).running(daemon)
    assert pid is not None, f"{daemon} is not running"
    job: int | None = None
    os.kill(pid, signal.SIGSTOP)
    try:
        if backend == "kubernetes":
            # Pods to create while Kubernetes hangs (the reconcile pass reads the watch's cache).
            job = submit(pg, "-p", "sim", "-N2", "-w", "sim-[56-57]", "--wrap", "true")
        time.sleep(FROZEN_S)
    finally:
        os.kill(pid, signal.SIGCONT)
    moved = wait_for(
        f"{backend} errors or retries counted", lambda: (failures() - before) or None, 60
    )
    print(f"{daemon} frozen {FROZEN_S}s: {moved:.0f} {backend} errors + retries counted")
    if job is not None:
        # kwok pods run no slurmd (the job never starts): the pods are what the bridge owed.
        names = {"sim-56", "sim-57"}
        wait_for("the pods, once Kubernetes answers", lambda: names <= set(pods(pg)) or None, 60)
