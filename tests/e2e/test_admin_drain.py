"""An admin's drain outlives a pod failure (issue 29 item 10). Before, the bridge's DOWN
replaced the admin's reason with its own ``k8s: ...``, and after the failed-node hold its power
down cleared DOWN, DRAIN and the reason: the node was back in service, the drain lifted by
nobody who meant to. Now the DOWN keeps the admin's reason (Kubernetes' goes to the log, the
pod's Event and the job's AdminComment), and the bridge never powers the node down nor resumes
it. (Slurm's own power save still suspends it after SuspendTime, and with the rendered
``idle_on_node_suspend`` that clears DOWN and DRAIN: docs/operations.md.)"""

from __future__ import annotations

import json
import time

import pytest

from tests.cluster import job_state, node, pods, submit, wait_down, wait_for
from tests.conftest import ProvingGround, Use

pytestmark = pytest.mark.e2e

#: Pool big: no PodDisruptionBudget, so the test may evict the pod of a running job.
NODE = "big-2"
ADMIN_REASON = "admin: memory test before reuse"
#: dev/bridge.yaml's failed_node_hold_s (20) and two reconcile passes (5 s each): long enough for
#: the old code's power down, which lifted the drain.
HOLD_S = 35


def test_a_pod_failure_keeps_an_admin_s_drain_and_reason(
    proving_ground: ProvingGround, use: Use
) -> None:
    pg = proving_ground
    use(NODE)
    log = pg.layout.logs / "bridge.log"
    offset = log.stat().st_size
    job = submit(
        pg, "-p", "big", "-N1", "-w", NODE, "--chdir=/tmp", "--output=/dev/null",
        "--wrap", "sleep 600",
    )  # fmt: skip
    wait_for("job running", lambda: job_state(pg, job) == "RUNNING" or None, 120, every=1)
    pg.slurm("scontrol", "update", f"nodename={NODE}", "state=drain", f"reason={ADMIN_REASON}")
    eviction = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": NODE, "namespace": "slurm"},
    }
    pg.kubectl(
        "create", "--raw", f"/api/v1/namespaces/slurm/pods/{NODE}/eviction", "-f", "-",
        input_text=json.dumps(eviction),
    )  # fmt: skip
    down = wait_down(pg, NODE, 30)
    assert down["Reason"].startswith(ADMIN_REASON), down["Reason"]
    assert "DRAIN" in down["State"], down["State"]
    # The bridge still failed the node fast: the job is requeued, the pod goes.
    wait_for("job requeued", lambda: job_state(pg, job) in ("PENDING", "REQUEUED") or None, 30)
    wait_for("pod gone", lambda: NODE not in pods(pg) or None, 60)
    deadline = time.monotonic() + HOLD_S
    while time.monotonic() < deadline:
        fields = node(pg, NODE)
        if "POWER" in fields["State"]:
            break  # Slurm's power save took it (SuspendTime); what it does is not the bridge's
        assert "DRAIN" in fields["State"], f"{NODE}'s drain was lifted: {fields['State']}"
        assert fields["Reason"].startswith(ADMIN_REASON), fields["Reason"]
        time.sleep(1)
    with log.open() as f:
        f.seek(offset)
        writes = [line for line in f if f"scontrol update nodes={NODE} state=" in line]
    assert [w.split(" state=", 1)[1].split()[0] for w in writes] == ["down"] * len(writes), writes
    pg.slurm("scancel", str(job))
