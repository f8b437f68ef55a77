"""The whole elastic cycle with real slurmd pods on the real kubelet node: a job arrives, pods
appear, slurmd registers, the job runs, the nodes idle, the pods go away."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.cluster import (
    SHARED,
    bridge_cli,
    bridge_metrics,
    job_finished,
    job_state,
    metric_total,
    node,
    pods,
    restart_bridge,
    step_output,
    submit,
    wait_down,
    wait_for,
    wait_idle_powered_down,
    wait_pod_ips,
)
from tests.conftest import ProvingGround, Use

pytestmark = pytest.mark.e2e

#: Every bridge metric's prefix.
P = "slurm_k8s_bridge_"


def _submit_srun_hostname(pg: ProvingGround, partition: str, nodes: str, out: Path) -> int:
    """``sbatch -N2 --wrap 'srun hostname'`` on ``nodes``, output on the shared directory."""
    return submit(
        pg,
        "-p",
        partition,
        "-N2",
        "-w",
        nodes,
        f"--output={out}",
        "--chdir=/tmp",
        "--wrap",
        "srun hostname",
    )


def _stuck_nodes(hostlist: str) -> list[str]:
    """The stuck nodes ``status HOSTLIST --json`` names; its exit status must agree (1 when
    one is stuck, else 0)."""
    done = bridge_cli("status", hostlist, "--json")
    assert done.returncode in (0, 1), done
    stuck = [entry["node"] for entry in json.loads(done.stdout)["stuck"]]
    assert done.returncode == (1 if stuck else 0), done
    return stuck


def _run_two_node_job(pg: ProvingGround, partition: str, nodes: str, names: list[str]) -> float:
    out = SHARED / f"e2e-{partition}-%j.out"
    started = time.monotonic()
    job = _submit_srun_hostname(pg, partition, nodes, out)
    seen = wait_for("two pods", lambda: all(n in pods(pg) for n in names) or None, 60)
    del seen
    state = wait_for(f"job {job} to finish", lambda: job_finished(pg, job), 180, every=1)
    assert state == "COMPLETED", f"job {job} ended {state}"
    text = Path(str(out).replace("%j", str(job))).read_text()
    assert step_output(text) == sorted(names), text
    ips = wait_pod_ips(pg, names)  # the pods stay until SuspendTime
    for name in names:
        pod = pods(pg)[name]
        assert pod["spec"]["hostname"] == name
        fields = node(pg, name)
        assert fields["NodeAddr"] == ips[name]
        # The pod's slurmd is of the ground's series (a slurmd of another one is refused).
        assert fields["Version"].startswith(f"{pg.series}."), fields["Version"]
    return time.monotonic() - started


def test_job_scales_pods_up_and_back_down(proving_ground: ProvingGround, use: Use) -> None:
    before = bridge_metrics(proving_ground)
    two_node_job_cycle(proving_ground, use)
    after = bridge_metrics(proving_ground)

    def moved(name: str, **labels: str) -> float:
        return metric_total(after, name, **labels) - metric_total(before, name, **labels)

    # What the cycle must show in the metrics (issue 13), as deltas: the bridge outlives tests.
    moves = {
        ("rpc_calls_total", "rpc=ResumeNodes"): moved(P + "rpc_calls_total", rpc="ResumeNodes"),
        ("rpc_calls_total", "rpc=SuspendNodes"): moved(P + "rpc_calls_total", rpc="SuspendNodes"),
        **{
            ("resume_latency_seconds_count", f"stage={stage}"): moved(
                P + "resume_latency_seconds_count", stage=stage
            )
            # Not job_started: a pass sees a job only if it outlasts the reconcile interval,
            # and ``srun hostname`` does not (the demo's ``sleep 15`` job does).
            for stage in ("pod_running", "node_registered")
        },
        ("reconcile_pass_seconds_count", ""): moved(P + "reconcile_pass_seconds_count"),
        ("reconcile_actions_total", "action=SetPodSlurmState"): moved(
            P + "reconcile_actions_total", action="SetPodSlurmState"
        ),
        ("pod_state_patches_total", "part=label"): moved(
            P + "pod_state_patches_total", part="label"
        ),
        ("pod_state_patches_total", "part=condition"): moved(
            P + "pod_state_patches_total", part="condition"
        ),
    }
    print("metrics moved by the cycle:", moves)
    still = {k: v for k, v in moves.items() if v < 2}
    assert not still, f"each moves at least once per node (2 nodes): {still}"
    assert metric_total(after, P + "nodes") > 0, "the nodes gauge counts the pools' nodes"


def two_node_job_cycle(pg: ProvingGround, use: Use) -> None:
    """A 2-node job on two pods (srun across them), then both pods go at SuspendTime."""
    use("cpu-[0-1]")
    elapsed = _run_two_node_job(pg, "cpu", "cpu-[0-1]", ["cpu-0", "cpu-1"])
    print(f"sbatch -N2 -> COMPLETED in {elapsed:.1f}s")
    # SuspendTime is 20 s: then SuspendProgram, the bridge deletes both pods, nodes idle~.
    finished = time.monotonic()
    wait_for("pods deleted", lambda: not ({"cpu-0", "cpu-1"} & set(pods(pg))) or None, 90, every=1)
    wait_idle_powered_down(pg, "cpu-[0-1]", timeout=60)
    print(f"job done -> pods gone and nodes idle~ in {time.monotonic() - finished:.1f}s")


def test_two_jobs_on_two_pools_at_once(proving_ground: ProvingGround, use: Use) -> None:
    pg = proving_ground
    use("cpu-[2-3]")
    use("big-[0-1]")
    jobs = {}
    for partition, nodes in (("cpu", "cpu-[2-3]"), ("big", "big-[0-1]")):
        out = SHARED / f"e2e-two-{partition}-%j.out"
        jobs[partition] = _submit_srun_hostname(pg, partition, nodes, out)
    for partition, job in jobs.items():
        state = wait_for(f"{partition} job", lambda job=job: job_finished(pg, job), 180, every=1)
        assert state == "COMPLETED"
    labels = {n: p["metadata"]["labels"]["slurm-k8s-bridge.io/pool"] for n, p in pods(pg).items()}
    assert labels.get("cpu-2") == "cpu" and labels.get("big-0") == "big"


def test_broken_pool_fails_fast_recovers_and_runs_once_fixed(
    proving_ground: ProvingGround, use: Use, bridge_tmp: Path
) -> None:
    broken_pool_cycle(proving_ground, use, bridge_tmp)


def broken_pool_cycle(pg: ProvingGround, use: Use, bridge_tmp: Path) -> None:
    """A pod that cannot run: the node DOWN with Kubernetes' reason, the job requeued, the node
    back to idle~, and the job run once the pool's image is fixed."""
    use("broken-1")
    counted = (P + "fail_fast_total", {"reason": "ErrImageNeverPull"})
    fail_fasts_before = metric_total(bridge_metrics(pg), counted[0], **counted[1])
    out = SHARED / "e2e-broken-%j.out"
    job = submit(
        pg,
        "-p",
        "broken",
        "-N1",
        "-w",
        "broken-1",
        f"--output={out}",
        "--chdir=/tmp",
        "--wrap",
        "hostname",
    )
    down = wait_down(pg, "broken-1", 60)
    assert down["Reason"].startswith("k8s: ErrImageNeverPull:"), down["Reason"]
    fail_fasts = metric_total(bridge_metrics(pg), counted[0], **counted[1])
    assert fail_fasts - fail_fasts_before >= 1, "the fail-fast is counted by its reason's kind"
    # `status` is what cron and monitoring run: a node DOWN with our reason is stuck at once.
    assert _stuck_nodes("broken-1") == ["broken-1"]
    wait_for("job requeued", lambda: job_state(pg, job) == "PENDING" or None, 30)
    # It returns to idle~ by itself once the hold (failed_node_hold_s: 20 s) is over.
    wait_for(
        "broken-1 back to idle~",
        lambda: (
            (
                "POWERED_DOWN" in node(pg, "broken-1")["State"]
                and not node(pg, "broken-1")["State"].startswith("DOWN")
            )
            or None
        ),
        90,
        every=1,
    )
    assert _stuck_nodes("broken-1") == [], "back at idle~, nothing is stuck"
    # Fix the pool's image in the configuration and restart the bridge (it reads it at start).
    config = (pg.layout.root / "dev/bridge.yaml").read_text()
    fixed = bridge_tmp / "bridge.yaml"
    fixed.write_text(config.replace("slurmd:does-not-exist", "slurmd:dev"))
    restart_bridge(pg, fixed)
    try:
        # Slurm holds a requeued job back for a while (its BeginTime, ~2 min); what is tested
        # here is the bridge, so let it start now, as an admin would.
        pg.slurm("scontrol", "update", f"jobid={job}", "StartTime=now")
        state = wait_for("job to run", lambda: job_finished(pg, job), 240, every=2)
        assert state == "COMPLETED"
        assert Path(str(out).replace("%j", str(job))).read_text().strip() == "broken-1"
    finally:
        restart_bridge(pg)


def test_eviction_is_reflected_in_slurm_and_the_job_requeued(
    proving_ground: ProvingGround, use: Use
) -> None:
    eviction_cycle(proving_ground, use)


def eviction_cycle(pg: ProvingGround, use: Use) -> None:
    """A running job's pod evicted: the node DOWN with a k8s: reason, the job requeued.

    On pool big: pool cpu has a PodDisruptionBudget on the proving ground, which refuses the
    eviction of a registered pod (tests/e2e/test_drain.py)."""
    use("big-3")
    job = submit(
        pg,
        "-p",
        "big",
        "-N1",
        "-w",
        "big-3",
        "--chdir=/tmp",
        "--output=/dev/null",
        "--wrap",
        "sleep 600",
    )
    wait_for("job running", lambda: job_state(pg, job) == "RUNNING" or None, 120, every=1)
    eviction = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": "big-3", "namespace": "slurm"},
    }
    evicted = time.monotonic()
    pg.kubectl(
        "create",
        "--raw",
        "/api/v1/namespaces/slurm/pods/big-3/eviction",
        "-f",
        "-",
        input_text=json.dumps(eviction),
    )
    down = wait_down(pg, "big-3", 30)
    print(f"eviction -> Slurm node DOWN in {time.monotonic() - evicted:.1f}s: {down['Reason']}")
    assert down["Reason"].startswith("k8s: "), down["Reason"]
    wait_for("job requeued", lambda: job_state(pg, job) in ("PENDING", "REQUEUED") or None, 30)
    wait_for("pod gone", lambda: "big-3" not in pods(pg) or None, 60)
    pg.slurm("scancel", str(job))
