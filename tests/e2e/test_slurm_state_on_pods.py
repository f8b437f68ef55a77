"""Issue 13 on the proving ground: Slurm's state on the pods, the pods' facts in Slurm.

During a 2-node job ``kubectl get pods -l slurm-k8s-bridge.io/slurm-state=allocated`` selects
exactly the job's pods; the readiness gate holds each pod NotReady until Slurm shows its slurmd
registered; ``scontrol show node`` Comment names pod, Kubernetes node and IP during the job and
is gone after the suspend. (A node forced down while powering up, on kwok, is
tests/integration/test_pod_state_forced_down.py.)
"""

from __future__ import annotations

import re
import time
from typing import Any

import pytest

from tests.cluster import (
    NAMESPACE,
    job_finished,
    pods,
    submit,
    wait_for,
    wait_idle_powered_down,
)
from tests.conftest import ProvingGround, Use
from tests.integration.pod_state import SHOWN_WITHIN_S, STATE_LABEL
from tests.integration.pod_state import state_events as _state_events

pytestmark = pytest.mark.e2e

NAMES = ["cpu-0", "cpu-1"]
REGISTERED = "slurm-k8s-bridge.io/registered"


def _condition(pod: dict[str, Any], kind: str) -> str:
    """The status of the pod's condition ``kind`` ("" when absent)."""
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == kind:
            return str(condition.get("status") or "")
    return ""


def _slurm_line(pg: ProvingGround, name: str) -> str:
    return pg.slurm("scontrol", "show", "node", "-o", name)


def _registered(line: str) -> bool:
    """Slurm shows the node up: its slurmd registered and responds."""
    state = re.search(r"\bState=(\S+)", line)
    flags = state.group(1) if state else ""
    return bool(flags) and not any(
        f in flags for f in ("POWERING_UP", "NOT_RESPONDING", "POWERED_DOWN", "DOWN")
    )


def _comment(line: str) -> str:
    """The node's Comment ("" when unset): free text with spaces, up to the next ``Key=``."""
    found = re.search(r"\bComment=(.*?)(?=\s+[A-Za-z]+=|$)", line)
    value = found.group(1).strip() if found else ""
    return "" if value in ("(null)", "") else value


def test_slurm_state_on_pods_and_pod_facts_in_slurm(
    proving_ground: ProvingGround, use: Use
) -> None:
    pg = proving_ground
    use("cpu-[0-1]")
    # --exclusive: the whole node, so Slurm says ALLOCATED (one CPU of two would be MIXED).
    job = submit(
        pg,
        "-p",
        "cpu",
        "-N2",
        "--exclusive",
        "-w",
        "cpu-[0-1]",
        "--chdir=/tmp",
        "--wrap",
        "sleep 45",
    )

    # Powering up: every look at a pod, then at Slurm (that order: a pod Ready before the look
    # at Slurm had registered before it). Ready may never come before Slurm shows the node up.
    seen_not_ready: set[str] = set()

    def all_ready() -> bool:
        ours = pods(pg)
        ready = 0
        for name in NAMES:
            pod = ours.get(name)
            if pod is None:
                continue
            pod_ready = _condition(pod, "Ready") == "True"
            line = _slurm_line(pg, name)
            if not pod_ready:
                seen_not_ready.add(name)
                continue
            assert _registered(line), f"pod {name} Ready before Slurm shows it up: {line}"
            assert _condition(pod, REGISTERED) == "True", pod["status"]
            ready += 1
        return ready == len(NAMES)

    wait_for("both pods Ready", lambda: all_ready() or None, 180, every=0.5)
    assert seen_not_ready == set(NAMES), "each pod was NotReady while its slurmd registered"
    for name in NAMES:
        gates = pods(pg)[name]["spec"].get("readinessGates") or []
        assert {"conditionType": REGISTERED} in gates

    # The job runs: the state label selects exactly its pods.
    def allocated() -> set[str] | None:
        selected = set(pods(pg, f"{STATE_LABEL}=allocated"))
        return selected if selected == set(NAMES) else None

    assert wait_for("allocated pods = the job's", allocated, SHOWN_WITHIN_S, every=1)
    assert job_finished(pg, job) is None, "the job must still run while the label is checked"

    # scontrol show node names the pod, its Kubernetes node and IP.
    for name in NAMES:
        pod = pods(pg)[name]
        wanted = (
            f"k8s: pod {NAMESPACE}/{name} on {pod['spec']['nodeName']} ip {pod['status']['podIP']}"
        )
        shown = wait_for(
            f"the Comment of {name}",
            lambda n=name, w=wanted: _comment(_slurm_line(pg, n)) == w or None,
            SHOWN_WITHIN_S,
            every=1,
        )
        assert shown
        # The transition to allocated was recorded on the pod.
        messages = wait_for(
            f"a SlurmStateChanged Event on {name}",
            lambda n=name: _state_events(pg, f"name={n}") or None,
            SHOWN_WITHIN_S,
            every=1,
        )
        assert any(m.endswith("→ allocated") for m in messages), messages

    state = wait_for(f"job {job} to finish", lambda: job_finished(pg, job), 120, every=1)
    assert state == "COMPLETED", f"job {job} ended {state}"

    # Idle: the label follows (the condition stays True).
    def idle() -> bool:
        ours = pods(pg)
        return all(
            name in ours
            and ours[name]["metadata"]["labels"].get(STATE_LABEL) == "idle"
            and _condition(ours[name], REGISTERED) == "True"
            for name in NAMES
        )

    # Within SuspendTime (20 s), before the pods go.
    wait_for("the pods labelled idle", lambda: idle() or None, 15, every=1)

    # SuspendTime: the pods go, and with them the Comment.
    finished = time.monotonic()
    wait_idle_powered_down(pg, "cpu-[0-1]", timeout=90)
    for name in NAMES:
        wait_for(
            f"the Comment of {name} cleared",
            lambda n=name: _comment(_slurm_line(pg, n)) == "" or None,
            SHOWN_WITHIN_S,
            every=1,
        )
    print(f"pods gone and comments cleared {time.monotonic() - finished:.0f}s after the job")
