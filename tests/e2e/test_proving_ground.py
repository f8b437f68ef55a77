"""The proving ground itself (issue: a real Slurm and a real Kubernetes running real slurmd
containers): a hand-made slurmd pod on the real kubelet registers with slurmctld and srun reaches
it. Its Kubernetes side alone (kwok at 500 pods, readiness gates, RBAC) is
tests/integration/test_proving_ground_kubernetes.py."""

from __future__ import annotations

import json
import time

import pytest

from tests.cluster import (
    job_state,
    node,
    reset_nodes,
    site_slurmd_pod,
    submit,
    wait_for,
    wait_idle_powered_down,
)
from tests.conftest import ProvingGround

pytestmark = pytest.mark.e2e

#: A CLOUD node no bridge pool owns, so the bridge leaves this pod and node alone.
NODE = "stray-1"


def test_slurmd_pod_registers_and_srun_reaches_it(proving_ground: ProvingGround) -> None:
    pg = proving_ground
    pg.kubectl("-n", "slurm", "delete", "pod", NODE, "--ignore-not-found", "--wait=true")
    reset_nodes(pg, NODE)
    wait_idle_powered_down(pg, NODE)
    pg.kubectl("create", "-f", "-", input_text=json.dumps(site_slurmd_pod(NODE)))
    try:
        pod = wait_for(
            "pod Running",
            lambda: (
                (
                    (p := json.loads(pg.kubectl("-n", "slurm", "get", "pod", NODE, "-o", "json")))[
                        "status"
                    ].get("phase")
                    == "Running"
                    and p
                )
                or None
            ),
            90,
        )
        assert pod["spec"]["nodeName"] == "skb-real-0", "placed by kube-scheduler on the real node"
        pod_ip = pod["status"]["podIP"]
        up = wait_for(
            "slurmd registered",
            lambda: (
                (
                    (n := node(pg, NODE))["State"].startswith("IDLE")
                    and "POWERED_DOWN" not in n["State"]
                    and n
                )
                or None
            ),
            60,
        )
        assert up["NodeAddr"] == pod_ip
        out = pg.slurm("srun", "--chdir=/tmp", "-p", "stray", "-w", NODE, "hostname", timeout=60)
        assert out.strip() == NODE

        # What Slurm shows when a busy registered node's pod disappears (informs the bridge's
        # design: Slurm alone takes SlurmdTimeout to notice, so the bridge must tell it).
        job = submit(
            pg,
            "-p",
            "stray",
            "-w",
            NODE,
            "--chdir=/tmp",
            "--output=/dev/null",
            "--wrap",
            "sleep 300",
        )
        wait_for("job running", lambda: job_state(pg, job) == "RUNNING" or None, 60)
        deleted = time.monotonic()
        pg.kubectl("-n", "slurm", "delete", "pod", NODE, "--grace-period=0", "--force")
        timeline = []
        last = ""
        while time.monotonic() - deleted < 120:
            fields = node(pg, NODE)
            now = f"{fields['State']} {fields.get('Reason', '')}".strip()
            if now != last:
                timeline.append(f"{time.monotonic() - deleted:5.1f}s {now}")
                last = now
            if fields["State"].startswith("DOWN"):
                break
            time.sleep(1)
        print("after deleting the pod of a busy registered node:\n  " + "\n  ".join(timeline))
        assert any("NOT_RESPONDING" in line for line in timeline), timeline
        assert timeline[-1].split()[1].startswith("DOWN"), timeline
        pg.slurm("scancel", str(job), check=False)
    finally:
        pg.kubectl("-n", "slurm", "delete", "pod", NODE, "--ignore-not-found", "--wait=false")
        pg.slurm("scontrol", "update", f"nodename={NODE}", "state=power_down_force", check=False)
        pg.slurm("scontrol", "update", f"nodename={NODE}", "state=resume", check=False)
