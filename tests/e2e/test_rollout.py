"""A template rollout through Slurm on the proving ground (issue 14): the `cpu` pool's template
changes while a job runs on one of its nodes; the bridge reloads on SIGHUP, drains the node with
`k8s: Rollout`, the job completes on its old pod, the pod goes once the node powers down, and the
next job on that node runs on a pod of the new template. No job fails."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from tests.cluster import (
    bridge_cli,
    bridge_pid,
    job_finished,
    job_state,
    node,
    pods,
    restart_bridge,
    submit,
    wait_for,
)
from tests.conftest import ProvingGround, Use

pytestmark = pytest.mark.e2e

NODE = "cpu-11"
HASH_LABEL = "slurm-k8s-bridge.io/template-hash"
#: The last env entry of the slurmd container in dev/bridge.yaml's `cpu` template (the
#: `&real` anchor: the pools that alias it change too, which rolls nothing they do not run).
ENV_ANCHOR = (
    "              - name: MUNGE_SOCKET\n"
    "                value: /run/skb-ground/munge/munge.socket.2\n"
)
MARK = '              - name: SKB_ROLLOUT_MARK\n                value: "2"\n'


def _job(pg: ProvingGround, seconds: int) -> int:
    return submit(
        pg, "-p", "cpu", "-N1", "-w", NODE, "--output=/dev/null", "--chdir=/tmp",
        "--wrap", f"sleep {seconds}",
    )  # fmt: skip


def _pod(pg: ProvingGround) -> dict[str, Any] | None:
    return pods(pg).get(NODE)


def _slurmd_env(pod: dict[str, Any]) -> dict[str, str]:
    (container,) = [c for c in pod["spec"]["containers"] if c["name"] == "slurmd"]
    return {e["name"]: e.get("value", "") for e in container.get("env") or []}


def _running(pg: ProvingGround, job: int) -> bool | None:
    return job_state(pg, job) == "RUNNING" or None


def _drained_for(pg: ProvingGround, reason: str) -> dict[str, str] | None:
    fields = node(pg, NODE)
    return fields if fields.get("Reason", "").startswith(reason) else None


def _status() -> str:
    return bridge_cli("status").stdout


def test_a_template_change_rolls_a_busy_node_after_its_job(
    proving_ground: ProvingGround, use: Use, bridge_tmp: Path
) -> None:
    pg = proving_ground
    use(NODE)
    original = (pg.layout.root / "dev/bridge.yaml").read_text()
    # The first occurrence is pool cpu's template (the &real anchor that big aliases too).
    assert 0 <= original.find(ENV_ANCHOR) < original.find("- name: big"), "cpu's env moved"
    config = bridge_tmp / "bridge.yaml"
    config.write_text(original)
    restart_bridge(pg, config)
    try:
        first = _job(pg, 40)
        wait_for(f"job {first} running", lambda: _running(pg, first), 180, every=1)
        old_pod = wait_for("its pod", lambda: _pod(pg), 30)
        old_uid, old_hash = old_pod["metadata"]["uid"], old_pod["metadata"]["labels"][HASH_LABEL]
        assert "SKB_ROLLOUT_MARK" not in _slurmd_env(old_pod)

        # The pool's template changes (a new env var: a new hash, the same image); SIGHUP.
        config.write_text(original.replace(ENV_ANCHOR, ENV_ANCHOR + MARK, 1))
        pid = bridge_pid(pg)
        assert pid is not None
        os.kill(pid, signal.SIGHUP)

        rollout = f"k8s: Rollout: pool cpu template {old_hash} -> "
        drained = wait_for(
            "the node drained for the rollout", lambda: _drained_for(pg, rollout), 30, every=1
        )
        assert "DRAIN" in drained["State"], drained
        status = _status()
        assert "rollout cpu: " in status and "waiting for their jobs" in status, status
        # The running job's pod stays (not deleting) for as long as the job runs.
        deadline = time.monotonic() + 120
        while job_finished(pg, first) is None:
            assert time.monotonic() < deadline, f"job {first} still {job_state(pg, first)}"
            pod = _pod(pg)
            assert pod is not None and pod["metadata"]["uid"] == old_uid, pod
            assert not pod["metadata"].get("deletionTimestamp"), pod["metadata"]
            time.sleep(1)
        assert job_finished(pg, first) == "COMPLETED"

        # After the job Slurm powers the node down (POWER_DOWN_ASAP) and the old pod goes.
        def old_pod_gone() -> bool | None:
            pod = _pod(pg)
            return (pod is None or pod["metadata"]["uid"] != old_uid) or None

        wait_for("the old pod to go", old_pod_gone, 120, every=1)

        # The next job on that very node runs on a pod of the new template.
        second = _job(pg, 5)
        wait_for(f"job {second} running", lambda: _running(pg, second), 180, every=1)
        new_pod = wait_for("the new pod", lambda: _pod(pg), 30)
        assert new_pod["metadata"]["uid"] != old_uid
        new_hash = new_pod["metadata"]["labels"][HASH_LABEL]
        assert new_hash != old_hash
        assert _slurmd_env(new_pod)["SKB_ROLLOUT_MARK"] == "2"
        state = wait_for(f"job {second} to finish", lambda: job_finished(pg, second), 120, every=1)
        assert state == "COMPLETED"
        # Not rolled again: the node on the new template is not drained.
        assert "DRAIN" not in node(pg, NODE)["State"]
    finally:
        config.write_text(original)
        restart_bridge(pg)
