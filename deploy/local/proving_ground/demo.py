"""`make demo`: the elastic cycle, live. Jobs arrive, slurmd pods appear, the jobs run, the
nodes idle and the pods go away, shown as a timeline of sinfo/squeue/pod snapshots."""

from __future__ import annotations

import json
import re
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from datetime import datetime

from . import ground, kube
from .bridge_daemon import SHARED_DIR, metrics_url
from .layout import NAMESPACE, Layout
from .slurm import SUSPEND_TIME, running_series, slurm_env

#: The workload: (partition, nodes, command). Small enough for a 2-core machine.
WORKLOAD = (
    ("cpu", 2, "srun hostname"),
    ("big", 1, "sleep 5; hostname"),
    ("cpu", 1, "sleep 15; hostname"),
)
TERMINAL = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY")


@dataclass
class NodeTimes:
    """When each step of a node's resume was first seen (monotonic seconds from the start)."""

    hook: float | None = None
    pod_running: float | None = None
    slurm_up: float | None = None
    job_start: float | None = None
    suspended: float | None = None


@dataclass
class Watch:
    layout: Layout
    started_wall: float = field(default_factory=time.time)
    started: float = field(default_factory=time.monotonic)
    nodes: dict[str, NodeTimes] = field(default_factory=dict)
    last_line: str = ""

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def slurm(self, *argv: str) -> str:
        result = subprocess.run(
            list(argv),
            env=slurm_env(self.layout),
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        return result.stdout

    def times(self, node: str) -> NodeTimes:
        return self.nodes.setdefault(node, NodeTimes())

    def snapshot(self, jobs: list[int]) -> tuple[str, dict[int, str]]:
        sinfo = self.slurm("sinfo", "-h", "-p", "cpu,big", "-o", "%P %T %D")
        states: dict[str, int] = {}
        for line in sinfo.splitlines():
            _, state, count = line.split()
            states[state] = states.get(state, 0) + int(count)
        nodes = " ".join(f"{count} {state}" for state, count in sorted(states.items()))
        job_states = self._job_states(jobs)
        queue = " ".join(f"{job}:{state}" for job, state in job_states.items())
        pods = json.loads(
            kube.kubectl(self.layout, "-n", NAMESPACE, "get", "pods", "-o", "json", check=False)
            or '{"items": []}'
        )["items"]
        phases: dict[str, int] = {}
        for pod in pods:
            name = pod["metadata"]["name"]
            phase = (
                "Terminating"
                if pod["metadata"].get("deletionTimestamp")
                else pod["status"].get("phase", "Pending")
            )
            phases[phase] = phases.get(phase, 0) + 1
            if phase == "Running" and self.times(name).pod_running is None:
                self.times(name).pod_running = self.elapsed()
        pod_text = " ".join(f"{n} {p}" for p, n in sorted(phases.items())) or "none"
        self._slurm_node_times()
        return f"nodes: {nodes:<32} | jobs: {queue:<40} | pods: {pod_text}", job_states

    def _job_states(self, jobs: list[int]) -> dict[int, str]:
        result = {}
        for job in jobs:
            out = self.slurm("scontrol", "show", "job", "-o", str(job))
            match = re.search(r"JobState=(\S+)", out)
            result[job] = match.group(1) if match else "?"
            if result[job] in ("RUNNING", "COMPLETING", "COMPLETED"):
                nodes = re.search(r" NodeList=(\S+)", out)
                for name in expand(nodes.group(1)) if nodes else []:
                    if self.times(name).job_start is None:
                        self.times(name).job_start = self.elapsed()
        return result

    def _slurm_node_times(self) -> None:
        out = self.slurm("sinfo", "-h", "-N", "-p", "cpu,big", "-o", "%N %T")
        for line in out.splitlines():
            name, state = line.split()
            up = not state.endswith(("~", "#", "%"))
            if up and name in self.nodes and self.times(name).slurm_up is None:
                self.times(name).slurm_up = self.elapsed()
            if state.endswith("~") and name in self.nodes:
                t = self.times(name)
                if t.slurm_up is not None and t.suspended is None:
                    t.suspended = self.elapsed()

    def hook_times(self) -> None:
        """Resume calls from the bridge's log (millisecond timestamps)."""
        log = self.layout.logs / "bridge.log"
        pattern = re.compile(r"^(\S+ \S+) INFO bridge\.service: request resume-\S+: pod (\S+) ")
        for line in log.read_text(errors="replace").splitlines():
            match = pattern.match(line)
            if not match:
                continue
            wall = datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
            if wall >= self.started_wall and self.times(match.group(2)).hook is None:
                self.times(match.group(2)).hook = wall - self.started_wall

    def print_if_changed(self, line: str) -> None:
        if line != self.last_line:
            print(f"  {self.elapsed():6.1f}s  {line}", flush=True)
            self.last_line = line


def expand(hostlist: str) -> list[str]:
    from bridge.domain.hostlist import expand as bridge_expand  # noqa: PLC0415

    return bridge_expand(hostlist)


def _fmt(value: float | None, base: float | None) -> str:
    if value is None or base is None:
        return "-"
    return f"+{value - base:5.1f}s"


def run_demo(layout: Layout) -> int:
    print("==> slurm-k8s-bridge demo: Slurm power saving backed by Kubernetes pods\n")
    ground.up(layout)
    watch = Watch(layout)
    env = slurm_env(layout)
    print("\n==> submitting a small mixed workload (each job wakes powered-down CLOUD nodes)")
    jobs = []
    for partition, count, command in WORKLOAD:
        out = subprocess.run(
            [
                "sbatch",
                "--parsable",
                "-p",
                partition,
                f"-N{count}",
                "--chdir=/tmp",
                f"--output={SHARED_DIR}/demo-%j.out",
                "--wrap",
                command,
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
        jobs.append(int(out.strip().split(";")[0]))
        print(f"  sbatch -p {partition} -N{count} --wrap '{command}'  -> job {jobs[-1]}")
    print("\n==> timeline (a line each time sinfo, squeue or the pods change)")
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        line, states = watch.snapshot(jobs)
        watch.print_if_changed(line)
        if all(s in TERMINAL for s in states.values()):
            break
        time.sleep(1)
    print(
        f"\n==> jobs done; nodes idle for SuspendTime={SUSPEND_TIME}s, then Slurm suspends "
        "them and the bridge deletes their pods"
    )
    while time.monotonic() < deadline + 120:
        line, _ = watch.snapshot(jobs)
        watch.print_if_changed(line)
        pods = json.loads(kube.kubectl(layout, "-n", NAMESPACE, "get", "pods", "-o", "json"))
        if not pods["items"] and all(t.suspended for t in watch.nodes.values() if t.slurm_up):
            break
        time.sleep(1)
    watch.hook_times()
    _summary(layout, watch, jobs, env)
    _metrics_summary(layout)
    _try_next(layout)
    return 0


def _summary(layout: Layout, watch: Watch, jobs: list[int], env: dict[str, str]) -> None:
    print("\n==> summary")
    completed = 0
    for job in jobs:
        out = subprocess.run(
            ["scontrol", "show", "job", "-o", str(job)],
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        ).stdout
        state = re.search(r"JobState=(\S+)", out)
        nodes = re.search(r" NodeList=(\S+)", out)
        output = SHARED_DIR / f"demo-{job}.out"
        text = output.read_text().split() if output.exists() else []
        completed += bool(state and state.group(1) == "COMPLETED")
        print(
            f"  job {job}: {state.group(1) if state else '?':10} on "
            f"{nodes.group(1) if nodes else '-':12} output: {' '.join(text) or '-'}"
        )
    resumed = [n for n, t in watch.nodes.items() if t.hook is not None or t.slurm_up is not None]
    suspended = [n for n, t in watch.nodes.items() if t.suspended is not None]
    print(
        f"  jobs completed: {completed}/{len(jobs)}; nodes resumed: {len(resumed)}; "
        f"nodes suspended again: {len(suspended)}"
    )
    print(
        f"  resume latency per node on Slurm {running_series(layout)} (from the bridge's resume "
        "call; polled at ~1 s):"
    )
    print(
        f"    {'node':8} {'pod Running':>12} {'node up':>10} {'job start':>10} {'suspended':>10}"
        f" {'node up -> job start':>21}"
    )
    for name in sorted(resumed):
        t = watch.nodes[name]
        print(
            f"    {name:8} {_fmt(t.pod_running, t.hook):>12} {_fmt(t.slurm_up, t.hook):>10} "
            f"{_fmt(t.job_start, t.hook):>10} {_fmt(t.suspended, t.hook):>10}"
            f" {_fmt(t.job_start, t.slurm_up):>21}"
        )


#: Samples shown per metric family: the busiest series first.
SHOWN_SERIES = 4


def _metrics_summary(layout: Layout) -> None:
    """Each bridge metric family's total after the run, and its busiest series (what a
    Prometheus scraping the bridge now holds)."""
    from prometheus_client.parser import text_string_to_metric_families  # noqa: PLC0415

    url = metrics_url(layout)
    if not url.startswith("http://"):
        print(f"\n==> metrics: {url}")
        return
    try:
        with urllib.request.urlopen(url, timeout=10) as response:  # noqa: S310 (http, checked)
            text = response.read().decode()
    except OSError as e:
        print(f"\n==> metrics: {url} did not answer: {e}")
        return
    print(f"\n==> the bridge's metrics (curl {url}): totals, busiest series")
    for family in text_string_to_metric_families(text):
        # The parser reads a counter's _created timestamps as families of their own.
        if not family.name.startswith("slurm_k8s_bridge_") or family.name.endswith("_created"):
            continue
        # A counter's _total, a histogram's _count, a gauge's value: one number per series.
        wanted = {"counter": "_total", "histogram": "_count"}.get(family.type, "")
        series = [s for s in family.samples if s.name == family.name + wanted]
        total = sum(s.value for s in series)
        busiest = sorted((s for s in series if s.value), key=lambda s: -s.value)[:SHOWN_SERIES]
        shown = ", ".join(
            f"{','.join(f'{k}={v}' for k, v in s.labels.items()) or 'all'}: {s.value:g}"
            for s in busiest
        )
        print(f"  {family.name + wanted:55} {total:>7g}  {shown}")


def _try_next(layout: Layout) -> None:
    print(f"""
==> the proving ground stays up. Try:
  source {layout.local / "env"}
  sinfo                      # CLOUD nodes: idle~ powered down, # powering up, % powering down
  sbatch -N2 -p cpu --chdir=/tmp --output={SHARED_DIR}/%j.out --wrap 'srun hostname'
  squeue; sinfo -R           # reasons the bridge writes start with 'k8s:'
  kubectl -n {NAMESPACE} get pods -l app.kubernetes.io/managed-by=slurm-k8s-bridge -o wide
  slurm-k8s-bridge status --socket unix:/run/slurm-k8s-bridge/bridge.sock
  make down                  # stops everything `make up` started (the build cache stays)
""")
