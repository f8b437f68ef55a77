"""The bridge against the proving ground's real slurmctld 22.05 and real kube-apiserver.

Simulated (kwok) pods: these tests are about the bridge's decisions and timing, not slurmd.
Nodes: the ``sim`` pool (kwok) and the ``stray`` partition (Slurm nodes no pool owns).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time

import pytest
from proving_ground.bridge_daemon import BRIDGE_SOCKET
from proving_ground.processes import State

from bridge.domain.results import ErrorClass, Outcome
from bridge.rpc.client import BridgeClient
from tests.cluster import (
    job_state,
    kill_bridge,
    node,
    pods,
    restart_bridge,
    run_hook,
    submit,
    wait_down,
    wait_for,
)
from tests.conftest import ProvingGround, Use

pytestmark = pytest.mark.integration


def _pods_for(pg: ProvingGround, names: list[str]) -> dict[str, dict[str, object]]:
    found = pods(pg)
    return {n: found[n] for n in names if n in found}


def test_sbatch_creates_one_labelled_pod_per_node(proving_ground: ProvingGround, use: Use) -> None:
    pg = proving_ground
    names = ["sim-10", "sim-11", "sim-12"]
    use("sim-[10-12]")
    submitted = time.monotonic()
    job = submit(pg, "-p", "sim", "-N3", "-w", "sim-[10-12]", "--wrap", "true")
    found = wait_for("three pods", lambda: len(_pods_for(pg, names)) == 3 or None, 30)
    latency = time.monotonic() - submitted
    for name in names:
        labels = _pods_for(pg, names)[name]["metadata"]["labels"]  # type: ignore[index]
        assert labels["slurm-k8s-bridge.io/pool"] == "sim"
        assert labels["slurm-k8s-bridge.io/node"] == name
    assert "POWERING_UP" in node(pg, "sim-10")["State"]
    print(f"sbatch -> 3 pods: {latency:.2f}s (includes Slurm's power save pass)")
    assert job_state(pg, job) in ("CONFIGURING", "PENDING", "RUNNING")
    del found


def test_hook_call_to_pods_within_one_second_and_repeat_is_idempotent(
    proving_ground: ProvingGround, use: Use
) -> None:
    pg = proving_ground
    names = ["sim-20", "sim-21", "sim-22"]
    use("sim-[20-22]")
    started = time.monotonic()
    assert run_hook(pg, "resume", "sim-[20-22]") == 0
    wait_for("three pods", lambda: len(_pods_for(pg, names)) == 3 or None, 10, every=0.02)
    elapsed = time.monotonic() - started
    print(f"resume hook call -> 3 pods exist: {elapsed * 1000:.0f} ms")
    assert elapsed < 3.0, "generous bound; the target is 1 s"
    uids = {n: p["metadata"]["uid"] for n, p in _pods_for(pg, names).items()}  # type: ignore[index]
    assert run_hook(pg, "resume", "sim-[20-22]") == 0
    again = {n: p["metadata"]["uid"] for n, p in _pods_for(pg, names).items()}  # type: ignore[index]
    assert again == uids, "a repeated resume must not replace or add pods"
    assert len([p for p in pods(pg) if p.startswith("sim-2")]) == 3


def test_suspend_deletes_the_pods(proving_ground: ProvingGround, use: Use) -> None:
    pg = proving_ground
    use("sim-[23-24]")
    assert run_hook(pg, "resume", "sim-[23-24]") == 0
    wait_for("pods", lambda: len(_pods_for(pg, ["sim-23", "sim-24"])) == 2 or None, 10)
    assert run_hook(pg, "suspend", "sim-[23-24]") == 0
    wait_for("pods gone", lambda: not _pods_for(pg, ["sim-23", "sim-24"]) or None, 30)


def test_reconciler_deletes_a_pod_whose_node_is_powered_down(
    proving_ground: ProvingGround, use: Use
) -> None:
    pg = proving_ground
    use("sim-30")
    # A resume Slurm never asked for: Slurm keeps the node powered down (idle~).
    assert run_hook(pg, "resume", "sim-30") == 0
    created = time.monotonic()
    wait_for("pod", lambda: _pods_for(pg, ["sim-30"]) or None, 10)
    assert "POWERED_DOWN" in node(pg, "sim-30")["State"]
    wait_for("orphan pod deleted", lambda: not _pods_for(pg, ["sim-30"]) or None, 60, every=0.5)
    age = time.monotonic() - created
    # pod_age_guard_s is 10 in dev/bridge.yaml: never before it.
    assert age >= 9.5, f"deleted after {age:.1f}s, before the age guard"
    print(f"powered-down node's pod deleted after {age:.1f}s (guard 10 s + reconcile interval)")


def test_names_no_pool_owns_leave_slurm_untouched_and_the_rest_proceed(
    proving_ground: ProvingGround, use: Use
) -> None:
    """stray-0 is a Slurm node no pool owns (it could be a static node running jobs); ``a{b}`` is
    a name newer Slurm reads as a hostlist function. Neither may change anything in Slurm."""
    pg = proving_ground
    use("sim-[40-41]")
    use("stray-0")
    before = node(pg, "stray-0")
    with BridgeClient(f"unix:{BRIDGE_SOCKET}", timeout_s=10) as client:
        # wait=True: the OKs below are the pods' creates, not only the bridge taking the nodes.
        results = client.resume_nodes("sim-[40-41],stray-0,a{b}", "", "test-unknown", wait=True)
    assert [(r.node, r.outcome, r.error_class) for r in results] == [
        ("sim-40", Outcome.OK, ErrorClass.NONE),
        ("sim-41", Outcome.OK, ErrorClass.NONE),
        ("stray-0", Outcome.REJECTED, ErrorClass.UNKNOWN_NODE),
        ("a{b}", Outcome.REJECTED, ErrorClass.INVALID),
    ]
    wait_for("sim pods", lambda: len(_pods_for(pg, ["sim-40", "sim-41"])) == 2 or None, 10)
    time.sleep(6)  # a reconcile pass (interval 5 s) must not touch stray-0 either
    after = node(pg, "stray-0")
    assert (after["State"], after.get("Reason")) == (before["State"], before.get("Reason"))
    assert "stray-0" not in pods(pg)


def test_bridge_killed_right_after_accepting_a_resume(
    proving_ground: ProvingGround, use: Use
) -> None:
    pg = proving_ground
    names = [f"sim-{i}" for i in range(50, 56)]
    use("sim-[50-55]")
    job = submit(pg, "-p", "sim", "-N6", "-w", "sim-[50-55]", "--wrap", "true")
    # Kill as soon as the first pod shows up: the bridge is mid-way through the batch.
    wait_for("first pod", lambda: _pods_for(pg, names) or None, 30, every=0.01)
    kill_bridge(pg, signal.SIGKILL)
    restart_bridge(pg)
    found = wait_for(
        "all six pods",
        lambda: (len(_pods_for(pg, names)) == 6 and _pods_for(pg, names)) or None,
        30,
    )
    assert sorted(found) == names
    assert len([p for p in pods(pg) if p in names]) == 6, "no node has two pods"
    assert job_state(pg, job) != "FAILED"


def test_bridge_killed_mid_resume_is_recovered_from_powering_up_without_a_new_call(
    proving_ground: ProvingGround, use: Use
) -> None:
    """The bridge accepted a Resume (the hook does not wait for the pods: ACCEPTED), then died
    before creating them: the nodes stay POWERING_UP, and the restarted bridge's reconciler
    creates the pods from that state. Kubernetes is frozen (SIGSTOP) to hold the creates.
    """
    pg = proving_ground
    names = ["sim-60", "sim-61"]
    use("sim-[60-61]")
    apiserver = State(pg.layout).running("kube-apiserver")
    assert apiserver is not None
    accepted = re.compile(
        r"resume request_id=\S+ hostlist=\S*sim-\[60-61\]\S* .*result=ok nodes=\d+ ok=\d+ "
        r"accepted=[1-9]"
    )
    seen = len(accepted.findall(_hooks_log(pg)))
    os.kill(apiserver, signal.SIGSTOP)
    try:
        submit(pg, "-p", "sim", "-N2", "-w", "sim-[60-61]", "--wrap", "true")
        wait_for(
            "the bridge to accept the resume with Kubernetes frozen",
            lambda: len(accepted.findall(_hooks_log(pg))) > seen or None,
            40,
        )
        state = node(pg, "sim-60")["State"]
        assert "POWERING_UP" in state and not state.startswith("DOWN"), state
        kill_bridge(pg, signal.SIGKILL)
    finally:
        os.kill(apiserver, signal.SIGCONT)
    calls_before = _hooks_log(pg).count("hostlist=sim-[60-61]")
    restart_bridge(pg)
    wait_for("pods from POWERING_UP", lambda: len(_pods_for(pg, names)) == 2 or None, 30)
    assert _hooks_log(pg).count("hostlist=sim-[60-61]") == calls_before, "no new hook call"
    assert not node(pg, "sim-60")["State"].startswith("DOWN")


def _hooks_log(pg: ProvingGround) -> str:
    path = pg.layout.logs / "hooks.log"
    return path.read_text() if path.exists() else ""


def test_bridge_unreachable_sets_nodes_down_so_jobs_requeue(
    proving_ground: ProvingGround, use: Use
) -> None:
    pg = proving_ground
    use("sim-62")
    kill_bridge(pg, signal.SIGKILL)
    try:
        job = submit(pg, "-p", "sim", "-N1", "-w", "sim-62", "--wrap", "true")
        down = wait_for(
            "sim-62 DOWN",
            lambda: ((n := node(pg, "sim-62"))["State"].startswith("DOWN") and n) or None,
            40,
        )
        assert down["Reason"].startswith("k8s: BridgeUnreachable:")
        wait_for("job requeued", lambda: job_state(pg, job) == "PENDING" or None, 20)
    finally:
        restart_bridge(pg)


@pytest.mark.parametrize(
    ("pool", "nodes", "reason_kind", "within_s"),
    [
        # More CPU than any node has and no autoscaler speaks: Unschedulable is only a clock,
        # so the node fails at the pool's schedule_timeout_s (30 s), before ResumeTimeout.
        pytest.param("huge", "huge-0", "k8s: Unschedulable:", (25, 70), id="huge"),
        # The image is not in containerd and pulling is not allowed: the kubelet says no for
        # good (ErrImageNeverPull is permanent), so the node fails at once.
        pytest.param("broken", "broken-0", "k8s: ErrImageNeverPull:", (0, 30), id="broken"),
    ],
)
def test_pod_that_cannot_run_fails_with_the_kubernetes_reason_before_resume_timeout(
    proving_ground: ProvingGround,
    use: Use,
    pool: str,
    nodes: str,
    *,
    reason_kind: str,
    within_s: tuple[float, float],
) -> None:
    pg = proving_ground
    use(nodes)
    submitted = time.monotonic()
    job = submit(pg, "-p", pool, "-N1", "-w", nodes, "--wrap", "true")
    down = wait_down(pg, nodes, within_s[1] + 10)
    elapsed = time.monotonic() - submitted
    print(f"{pool}: sbatch -> node DOWN with {down['Reason']!r} in {elapsed:.1f}s")
    assert down["Reason"].startswith(reason_kind), down["Reason"]
    low, high = within_s
    assert low <= elapsed < high, f"DOWN after {elapsed:.1f}s, expected {low}-{high} s"
    wait_for("job requeued", lambda: job_state(pg, job) == "PENDING" or None, 20)
    wait_for("pod removed", lambda: nodes not in pods(pg) or None, 30)
    events = pg.kubectl(
        "-n",
        "slurm",
        "get",
        "events",
        f"--field-selector=involvedObject.name={nodes}",
        "-o",
        "jsonpath={range .items[*]}{.reason}|{.message}{'\\n'}{end}",
    )
    assert any(
        line.startswith("SlurmNodeDown|") and reason_kind in line for line in events.splitlines()
    ), events


def test_status_lists_slurm_and_pod_side_by_side(proving_ground: ProvingGround, use: Use) -> None:
    pg = proving_ground
    use("sim-63")
    assert run_hook(pg, "resume", "sim-63") == 0
    wait_for("pod", lambda: _pods_for(pg, ["sim-63"]) or None, 10)
    out = subprocess.run(
        [
            str(pg.layout.root / ".venv" / "bin" / "slurm-k8s-bridge"),
            "status",
            "sim-[62-63]",
            "--all",
        ],
        capture_output=True,
        text=True,
        timeout=20,
        check=True,
    ).stdout
    lines = out.splitlines()
    assert lines[0].split()[:4] == ["NODE", "POOL", "SLURM", "POD"]
    row = next(line for line in lines if line.startswith("sim-63"))
    assert row.split()[1] == "sim" and row.split()[2] == "idle~"
