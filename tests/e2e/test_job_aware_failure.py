"""Job-aware failure on the proving ground (issue 14): a 2-node job one of whose pods the API
server refuses. The refused node goes DOWN with Kubernetes' words, the job's other node is
released within the fail-fast time (not held POWERING_UP until ResumeTimeout, 180 s here), and the
job is requeued with the reason in its AdminComment."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from tests.cluster import (
    NAMESPACE,
    job_state,
    kubectl_outcome,
    node,
    pods,
    submit,
    wait_down,
    wait_for,
    wait_idle_powered_down,
)
from tests.conftest import ProvingGround, Use

pytestmark = pytest.mark.e2e

POLICY = "skb-e2e-refuse-cpu-1"
MESSAGE = "e2e: cpu-1 may not run"
#: A ValidatingAdmissionPolicy (+ binding) refusing CREATE of the bridge's pod for cpu-1 only.
POLICY_OBJECTS = [
    {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": POLICY},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "namespaceSelector": {
                    "matchLabels": {"kubernetes.io/metadata.name": NAMESPACE},
                },
                "resourceRules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE"],
                        "resources": ["pods"],
                    }
                ],
            },
            "validations": [
                {
                    "expression": (
                        "!has(object.metadata.labels)"
                        " || !('slurm-k8s-bridge.io/node' in object.metadata.labels)"
                        " || object.metadata.labels['slurm-k8s-bridge.io/node'] != 'cpu-1'"
                    ),
                    "message": MESSAGE,
                    "reason": "Forbidden",
                }
            ],
        },
    },
    {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": POLICY},
        "spec": {"policyName": POLICY, "validationActions": ["Deny"]},
    },
]
#: What the policy is probed with (a server-side dry run: admission runs, nothing is stored).
PROBE_POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "skb-e2e-probe", "labels": {"slurm-k8s-bridge.io/node": "cpu-1"}},
    "spec": {
        "nodeSelector": {"slurm-k8s-bridge.io/none": "x"},
        "containers": [{"name": "c", "image": "localhost/slurm-k8s-bridge/slurmd:dev"}],
    },
}


def _refused_by_our_policy(pg: ProvingGround) -> bool:
    done = kubectl_outcome(
        pg,
        "-n",
        NAMESPACE,
        "create",
        "--dry-run=server",
        "-f",
        "-",
        input_text=json.dumps(PROBE_POD),
    )
    return done.returncode != 0 and MESSAGE in done.stderr


@contextmanager
def cpu_1_refused(pg: ProvingGround) -> Iterator[None]:
    """The policy in force (the API server loads a new policy within seconds), then gone."""
    document = {"apiVersion": "v1", "kind": "List", "items": POLICY_OBJECTS}
    try:
        pg.kubectl("apply", "-f", "-", input_text=json.dumps(document))
        wait_for("the e2e policy in force", lambda: _refused_by_our_policy(pg) or None, 60, 1)
        yield
    finally:
        for kind in ("validatingadmissionpolicybinding", "validatingadmissionpolicy"):
            pg.kubectl("delete", kind, POLICY, "--ignore-not-found", check=False)
        wait_for("the e2e policy gone", lambda: not _refused_by_our_policy(pg) or None, 60, 1)


def _admin_comment(pg: ProvingGround, job: int) -> str:
    """The job's AdminComment from ``squeue --json`` (22.05 lists every job, whatever the
    filter; 24.11 and 26.05 only the one asked for)."""
    out = pg.slurm("squeue", "--json", "--states=all", f"--jobs={job}", check=False)
    try:
        doc = json.loads(out)
    except json.JSONDecodeError:
        return ""
    for entry in doc.get("jobs") or []:
        if entry.get("job_id") == job:
            return str(entry.get("admin_comment") or "")
    return ""


def _flags(pg: ProvingGround, name: str) -> set[str]:
    return set(node(pg, name).get("State", "").split("+"))


def _released(pg: ProvingGround, name: str) -> bool:
    """Powered down or on the way there, and no longer powering up."""
    flags = _flags(pg, name)
    return "POWERING_UP" not in flags and bool(
        flags & {"POWER_DOWN", "POWERING_DOWN", "POWERED_DOWN"}
    )


def _pod_gone_or_going(pg: ProvingGround, name: str) -> bool:
    pod = pods(pg).get(name)
    return pod is None or bool(pod["metadata"].get("deletionTimestamp"))


def test_a_refused_pod_releases_the_jobs_other_node_and_requeues_it_with_the_reason(
    proving_ground: ProvingGround, use: Use
) -> None:
    pg = proving_ground
    use("cpu-[0-1]")
    job = 0
    log = pg.layout.logs / "bridge.log"
    log_offset = log.stat().st_size if log.exists() else 0
    try:
        with cpu_1_refused(pg):
            job = submit(
                pg,
                "-p",
                "cpu",
                "-N2",
                "-w",
                "cpu-[0-1]",
                "--requeue",
                "--output=/dev/null",
                "--chdir=/tmp",
                "--wrap",
                "sleep 30",
            )
            submitted = time.monotonic()
            down = wait_down(pg, "cpu-1", 30)
            assert down["Reason"].startswith("k8s: "), down["Reason"]
            assert MESSAGE in down["Reason"], down["Reason"]
            # Released within the fail-fast time, long before ResumeTimeout (180 s).
            wait_for("cpu-0 released", lambda: _released(pg, "cpu-0") or None, 30, every=1)
            released_after = time.monotonic() - submitted
            wait_for(
                f"job {job} requeued",
                lambda: job_state(pg, job) in ("PENDING", "REQUEUED", "CONFIGURING") or None,
                30,
                every=1,
            )
            comment = wait_for(
                f"job {job} AdminComment", lambda: _admin_comment(pg, job) or None, 30, every=1
            )
            assert comment.startswith("k8s: "), comment
            assert MESSAGE in comment, comment
            wait_for(
                "cpu-0's pod gone or going",
                lambda: _pod_gone_or_going(pg, "cpu-0") or None,
                60,
                every=1,
            )
            with log.open("rb") as f:
                f.seek(log_offset)
                text = f.read().decode(errors="replace")
            assert f"job {job}: node(s) cpu-1 failed (k8s: " in text, text[-4000:]
            assert "released cpu-0; AdminComment set" in text, text[-4000:]
            print(f"sbatch -N2 -> cpu-1 DOWN, cpu-0 released in {released_after:.1f}s")
    finally:
        if job:
            pg.slurm("scancel", str(job), check=False)
        # failed_node_hold_s is 20 s on the ground: then cpu-1 returns to idle~ by itself.
        wait_idle_powered_down(pg, "cpu-[0-1]", timeout=90)
