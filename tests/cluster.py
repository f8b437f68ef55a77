"""Small helpers the integration and e2e tests share: waiting, reading Slurm and pods."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from proving_ground.bridge_daemon import BRIDGE_SOCKET, metrics_url, start_bridge
from proving_ground.layout import JOB_USER
from proving_ground.processes import State, stop_daemon
from proving_ground.slurm import ground_programs, start_slurm

from bridge.adapters.slurm.cli import SlurmCli
from bridge.domain.hostlist import expand
from bridge.domain.nodes import SlurmNode
from tests import slurm_state
from tests.conftest import ProvingGround

T = TypeVar("T")
NAMESPACE = "slurm"
#: The proving ground's stand-in for a shared file system: mounted at the same path in pods.
SHARED = Path("/var/lib/slurm-k8s-bridge/shared")
HOOKS = os.path.join(os.path.dirname(os.path.dirname(__file__)), "slurm_plugins")
#: The admin CLI installed next to the interpreter running the tests.
CLI = Path(sys.executable).with_name("slurm-k8s-bridge")


def wait_for(what: str, probe: Callable[[], T | None], timeout: float, every: float = 0.2) -> T:
    """Poll ``probe`` until it returns something truthy; fail naming ``what``."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")


def kubectl_outcome(
    pg: ProvingGround, *argv: str, input_text: str | None = None
) -> subprocess.CompletedProcess[str]:
    """kubectl as the cluster admin, its exit status and stderr kept: for a command the test
    expects the API server to refuse (``ProvingGround.kubectl`` gives only stdout)."""
    return subprocess.run(
        pg.kubectl_argv(*argv),
        input=input_text,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def bridge_cli(*argv: str) -> subprocess.CompletedProcess[str]:
    """``slurm-k8s-bridge ARGV --socket <the ground's bridge>``."""
    return subprocess.run(
        [str(CLI), *argv, "--socket", f"unix:{BRIDGE_SOCKET}"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def node(pg: ProvingGround, name: str) -> dict[str, str]:
    """``scontrol show node`` as key → value (State, Reason, NodeAddr ...)."""
    out = pg.slurm("scontrol", "show", "node", "-o", name)
    fields: dict[str, str] = {}
    reason_at = out.find("Reason=")
    head = out[:reason_at] if reason_at >= 0 else out
    for part in head.split():
        if "=" in part:
            key, value = part.split("=", 1)
            fields[key] = value
    if reason_at >= 0:
        fields["Reason"] = out[reason_at + len("Reason=") :].strip()
    return fields


def slurm_node(pg: ProvingGround, name: str) -> SlurmNode:
    """The node as the bridge reads it (address and Comment included, any Slurm series)."""
    cli = SlurmCli(str(ground_programs(pg.layout).bin_dir), conf=str(pg.layout.slurm_conf))
    (found,) = [n for n in cli.list_nodes() if n.name == name]
    return found


def pods(
    pg: ProvingGround, selector: str = "app.kubernetes.io/managed-by=slurm-k8s-bridge"
) -> dict[str, Any]:
    """Our pods by name (full JSON)."""
    out = pg.kubectl("-n", NAMESPACE, "get", "pods", "-l", selector, "-o", "json")
    return {p["metadata"]["name"]: p for p in json.loads(out)["items"]}


def run_hook(pg: ProvingGround, hook: str, hostlist: str, resume_file: str | None = None) -> int:
    """Run a hook the way slurmctld does: no PATH, fd 2 closed, SLURM_CONF set."""
    env = {"PWD": "/", "SHLVL": "1", "SLURM_CONF": str(pg.layout.slurm_conf)}
    if resume_file is not None:
        env["SLURM_RESUME_FILE"] = resume_file
    return subprocess.run(
        [os.path.join(HOOKS, hook), hostlist],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=30,
        check=False,
    ).returncode


def step_output(text: str) -> list[str]:
    """The words a job's steps printed, without srun's own diagnostics (``srun: ...``). When
    job_ready starts a job within a second of its pods, srun may log a retried lookup of a peer
    whose DNS record cluster DNS has not published yet (``getaddrinfo() failed: Temporary
    failure in name resolution``) and then succeed; the steps' output is what counts."""
    return sorted(
        word for line in text.splitlines() if not line.startswith("srun: ") for word in line.split()
    )


def wait_pod_ips(pg: ProvingGround, names: list[str], timeout: float = 30) -> dict[str, str]:
    """The pods' IPs once the apiserver shows them. slurmd can register, and with job_ready
    (PrologSlurmctld) a short job end, before the kubelet has reported the pod's IP."""

    def probe() -> dict[str, str] | None:
        current = pods(pg)
        ips = {n: current[n]["status"].get("podIP", "") for n in names if n in current}
        return ips if len(ips) == len(names) and all(ips.values()) else None

    return wait_for(f"pod IPs of {', '.join(names)}", probe, timeout)


def submit(pg: ProvingGround, *args: str) -> int:
    out = pg.slurm("sbatch", "--parsable", *args)
    return int(out.strip().split(";")[0])


def submit_as_job_user(pg: ProvingGround, *args: str) -> int:
    """``sbatch`` as the ground's job user (not root, as a site's users submit)."""
    submitted = subprocess.run(
        ["runuser", "-u", JOB_USER, "--", "sbatch", "--parsable", *args],
        env=pg.env, capture_output=True, text=True, timeout=60, check=False, cwd="/tmp",
    )  # fmt: skip
    assert submitted.returncode == 0, submitted.stderr
    return int(submitted.stdout.strip().split(";")[0])


def job_state(pg: ProvingGround, job: int) -> str:
    """The job's ``JobState`` word, read from Slurm's JSON ("" once slurmctld forgot the job)."""
    return slurm_state.job_state(lambda *argv: pg.slurm(*argv, check=False), job)


FINAL_JOB_STATES = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL"})


def job_finished(pg: ProvingGround, job: int) -> str | None:
    """The job's final state, or None while it is still pending or running."""
    state = job_state(pg, job)
    return state if state in FINAL_JOB_STATES else None


def cancel_jobs_on(pg: ProvingGround, hostlist: str) -> None:
    """Cancel jobs running on, or asking for (``-w``), any node of ``hostlist``."""
    wanted = set(expand(hostlist))
    out = pg.slurm("squeue", "-h", "-o", "%i|%n|%N", check=False)
    for line in out.splitlines():
        job, requested, allocated = [*line.split("|"), "", ""][:3]
        names = set()
        for part in (requested, allocated):
            if part.strip() and part.strip() != "(null)":
                names |= set(expand(part.strip()))
        if names & wanted:
            pg.slurm("scancel", job.strip(), check=False)


def state_flags(pg: ProvingGround, hostlist: str) -> dict[str, frozenset[str]]:
    """Node name -> the words of its ``scontrol show node`` State (IDLE, CLOUD, POWERED_DOWN)."""
    flags: dict[str, frozenset[str]] = {}
    out = pg.slurm("scontrol", "show", "node", "-o", hostlist, check=False)
    for line in out.splitlines():
        fields = dict(part.split("=", 1) for part in line.split() if "=" in part)
        if "NodeName" in fields:
            flags[fields["NodeName"]] = frozenset(fields.get("State", "").split("+"))
    return flags


#: A node on its way down or down already: forcing it again is not a no-op on 24.11 and later
#: (slurmctld logs "power down request repeating" and runs SuspendProgram a second time; the
#: node is POWERING_DOWN for SuspendTimeout and a job submitted meanwhile waits for the next
#: scheduler pass, ~60 s), so reset_nodes leaves these alone.
_ASLEEP = frozenset({"POWERED_DOWN", "POWERING_DOWN", "POWER_DOWN"})


def reset_nodes(pg: ProvingGround, hostlist: str) -> None:
    """Back to ``idle~``: cancel their jobs, power down what is up, clear DOWN, and delete pods a
    test made by calling the resume hook itself (Slurm never woke those nodes: the suspend hook
    is what slurmctld would call)."""
    cancel_jobs_on(pg, hostlist)
    flags = state_flags(pg, hostlist)
    awake = [name for name, words in flags.items() if not words & _ASLEEP]
    if awake:
        names = ",".join(awake)
        pg.slurm("scontrol", "update", f"nodename={names}", "state=power_down_force", check=False)
    current = pods(pg)
    stray = [n for n, words in flags.items() if "POWERED_DOWN" in words and n in current]
    if stray:
        run_hook(pg, "suspend", ",".join(stray))
    pg.slurm("scontrol", "update", f"nodename={hostlist}", "state=resume", check=False)


def bridge_pid(pg: ProvingGround) -> int | None:
    return State(pg.layout).running("bridge")


def kill_bridge(pg: ProvingGround, sig: int = signal.SIGKILL) -> None:
    pid = bridge_pid(pg)
    assert pid is not None, "the bridge is not running"
    os.kill(pid, sig)


def restart_bridge(
    pg: ProvingGround, config: Path | None = None, env_overrides: dict[str, str] | None = None
) -> int:
    """SIGKILL the bridge and start it again; returns once the *new* one serves.

    The socket probe alone is not enough: seen in CI, a hook called right after this returned
    met "connection refused" because the new bridge had not bound its socket yet.
    """
    state = State(pg.layout)
    log = pg.layout.logs / "bridge.log"
    pid = state.running("bridge")
    if pid is not None:
        os.kill(pid, signal.SIGKILL)
        wait_for("bridge to die", lambda: state.running("bridge") is None, 10)
    offset = log.stat().st_size if log.exists() else 0
    started = start_bridge(pg.layout, state, config, env_overrides)

    def serving() -> bool:
        with log.open("rb") as f:
            f.seek(offset)
            return b"bridge serving on" in f.read()

    wait_for("the restarted bridge to serve", lambda: serving() or None, 30)
    return started


def wait_idle_powered_down(pg: ProvingGround, hostlist: str, timeout: float = 60) -> None:
    """Wait until every node of ``hostlist`` is ``idle~`` (clearing our DOWN) with no pod and no
    power down pending (24.11 and later show a node whose power down is queued as ``idle~`` too)."""

    def settled() -> bool:
        out = pg.slurm("sinfo", "-h", "-N", "-n", hostlist, "-o", "%N %T")
        states = dict(line.split() for line in out.splitlines() if line.strip())
        for name, state in states.items():
            if state in ("down~", "drained~"):
                pg.slurm("scontrol", "update", f"nodename={name}", "state=resume", check=False)
        ours = pods(pg)
        flags = state_flags(pg, hostlist)
        return (
            all(s == "idle~" for s in states.values())
            and not any({"POWER_DOWN", "POWERING_DOWN"} & words for words in flags.values())
            and not any(n in ours for n in states)
        )

    wait_for(f"{hostlist} idle~ without pods", lambda: settled() or None, timeout, every=1)


def wait_down(pg: ProvingGround, name: str, timeout: float) -> dict[str, str]:
    """Wait until Slurm has ``name`` DOWN; return its ``scontrol show node`` fields."""

    def probe() -> dict[str, str] | None:
        fields = node(pg, name)
        return fields if fields.get("State", "").startswith("DOWN") else None

    return wait_for(f"{name} DOWN", probe, timeout)


def restart_slurmctld(pg: ProvingGround) -> float:
    """SIGTERM slurmctld and start it again (state kept); returns the seconds it was away."""
    state = State(pg.layout)
    started = time.monotonic()
    stop_daemon(state, "slurmctld")
    start_slurm(pg.layout, state)
    return time.monotonic() - started


def job_restarts(pg: ProvingGround, job: int) -> int:
    """How often Slurm requeued ``job`` (``restart_cnt`` of ``squeue --json``)."""
    # --states=all: 24.11 and later list a finished job only when asked for every state.
    doc = json.loads(pg.slurm("squeue", "--json", "--states=all", f"--jobs={job}"))
    (entry,) = [j for j in doc["jobs"] if j["job_id"] == job]
    return int(entry["restart_cnt"])


def emit_autoscaler_event(pg: ProvingGround, pod_name: str, reason: str, message: str) -> None:
    """An Event on the pod as cluster-autoscaler writes it (core/v1, source cluster-autoscaler)."""
    pod = pg.kubectl("-n", NAMESPACE, "get", "pod", pod_name, "-o", "json")
    uid = json.loads(pod)["metadata"]["uid"]
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    event = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{pod_name}.", "namespace": NAMESPACE},
        "involvedObject": {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": pod_name,
            "namespace": NAMESPACE,
            "uid": uid,
        },
        "reason": reason,
        "message": message,
        "type": "Normal" if reason == "TriggeredScaleUp" else "Warning",
        "source": {"component": "cluster-autoscaler"},
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }
    pg.kubectl("create", "-f", "-", input_text=json.dumps(event))


def pod_condition(pg: ProvingGround, name: str, kind: str) -> dict[str, Any]:
    """The pod's condition of type ``kind`` ({} when absent or no pod)."""
    pod = pods(pg).get(name) or {}
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == kind:
            return dict(condition)
    return {}


#: One scrape of the ground's bridge metrics: (sample name, sorted labels) → value.
Scrape = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def bridge_metrics(pg: ProvingGround) -> Scrape:
    """What the ground's bridge serves at its metrics endpoint (``make status`` names it)."""
    from prometheus_client.parser import text_string_to_metric_families  # noqa: PLC0415

    url = metrics_url(pg.layout)
    if not url.startswith("http://"):
        raise AssertionError(f"the ground's bridge serves no metrics: {url}")
    with urllib.request.urlopen(url, timeout=10) as response:  # noqa: S310 (http, checked)
        text = response.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def metric_total(scrape: Scrape, name: str, **labels: str) -> float:
    """The sum of ``name``'s samples whose labels include ``labels``."""
    return sum(
        value
        for (sample, have), value in scrape.items()
        if sample == name and set(labels.items()) <= set(have)
    )


def run_bench(script: str, *args: str, timeout: float) -> str:
    """``dev/bench/<script>`` run as ``make bench``/``make chaos`` run it (this interpreter, its own
    process); its output, stdout then stderr. A non-zero exit fails, with that output."""
    done = subprocess.run(
        [
            sys.executable,
            str(Path(__file__).resolve().parents[1] / "dev" / "bench" / script),
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"dev/bench/{script} exited {done.returncode}:\n{output}"
    return output


def site_slurmd_pod(name: str) -> dict[str, object]:
    """A slurmd pod for ``name`` made by hand, no bridge label on it: a machine of the site's
    own, as the proving ground can make one (Slurm 26.05 with munge)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "slurm", "labels": {"test": "proving-ground"}},
        "spec": {
            "hostname": name,
            "restartPolicy": "Never",
            "enableServiceLinks": False,
            "automountServiceAccountToken": False,
            "nodeSelector": {"slurm-k8s-bridge.io/node-kind": "real"},
            "containers": [
                {
                    "name": "slurmd",
                    "image": "localhost/slurm-k8s-bridge/slurmd:dev",
                    "imagePullPolicy": "Never",
                    "env": [
                        {"name": "SLURM_NODENAME", "value": name},
                        {"name": "SLURM_CONF_SERVER", "value": "10.213.0.1:6817"},
                        {
                            "name": "MUNGE_SOCKET",
                            "value": "/run/skb-ground/munge/munge.socket.2",
                        },
                    ],
                    "securityContext": {"privileged": True},
                    "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}},
                    "volumeMounts": [
                        {"name": "munge", "mountPath": "/etc/munge-secret", "readOnly": True}
                    ],
                }
            ],
            "volumes": [
                {"name": "munge", "secret": {"secretName": "slurm-munge-key", "defaultMode": 256}}
            ],
        },
    }
