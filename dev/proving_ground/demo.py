"""`make demo`: the elastic cycle, live. Jobs arrive, slurmd pods appear, the jobs run, the
nodes idle and the pods go away, shown as a timeline of sinfo/squeue/pod snapshots."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from datetime import datetime

from . import ground, kube
from .bridge_daemon import SHARED_DIR, metrics_url
from .layout import JOB_USER, NAMESPACE, Layout
from .processes import ProvingGroundError, State
from .slurm import SUSPEND_TIME, running_series, slurm_env

#: The workload: (partition, nodes, command). Small enough for a 2-core machine.
WORKLOAD = (
    ("cpu", 2, "srun hostname"),
    ("big", 1, "sleep 5; hostname"),
    ("cpu", 1, "sleep 15; hostname"),
)
TERMINAL = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY")
#: The partitions of the workload, as the timeline counts their nodes.
PARTITIONS = "cpu,big"
#: A job for the pool whose image does not exist: Kubernetes says no, and Slurm shows why in
#: ``sinfo -R`` long before ResumeTimeout; the job is requeued (then the demo cancels it).
FAILING = ("broken", 1, "hostname")
#: How long the demo stops kube-apiserver: longer than a reconcile interval (5 s on the ground)
#: plus a Kubernetes call's timeout (10 s), so some call surely times out and is retried
#: (tests/e2e/test_production_faults.py saw 15 s fall short).
HUNG_S = 25
#: The job that arrives while kube-apiserver hangs, on a node the workload leaves powered down
#: (an idle node that is up would run it with no call to Kubernetes at all).
HUNG_JOB = ("cpu", 1, "hostname", "cpu-15")
#: The demo's pods: those of its partitions' pools (tests may leave others in the namespace).
POD_SELECTOR = "slurm-k8s-bridge.io/pool in (cpu,big,broken)"


@dataclass
class NodeTimes:
    """When each step of a node's resume was first seen (monotonic seconds from the start)."""

    hook: float | None = None
    pod_running: float | None = None
    slurm_up: float | None = None
    job_start: float | None = None
    suspended: float | None = None


@dataclass(frozen=True)
class FailFast:
    """The failing job's node as ``sinfo -R`` showed it with the bridge's reason."""

    seconds: float
    node: str
    reason: str
    job_state: str


@dataclass
class Watch:
    layout: Layout
    started_wall: float = field(default_factory=time.time)
    started: float = field(default_factory=time.monotonic)
    nodes: dict[str, NodeTimes] = field(default_factory=dict)
    last_line: str = ""
    fail_fast: FailFast | None = None
    #: The nodes of the workload's partitions (the failing pool's are told apart from them).
    workload_nodes: set[str] = field(default_factory=set)
    #: Each bridge gauge's highest total seen while the demo ran (pods are all gone at its end).
    gauge_peaks: dict[str, float] = field(default_factory=dict)

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

    def snapshot(self, jobs: list[int], *, pods_why_not: str = "") -> tuple[str, dict[int, str]]:
        """One timeline line, and each node's steps seen in it. The steps are read against
        their causal order (job, node, pod), all stamped with one time: a step seen in a look
        implies that the ones before it are seen in the same look, so none reads as later.
        With ``pods_why_not`` the pods are not looked at (kubectl would hang) and it says why."""
        now = self.elapsed()
        job_states = self.job_states(jobs, now)
        queue = " ".join(f"{job}:{state}" for job, state in job_states.items())
        nodes = self.slurm_nodes(now)
        pods = f"({pods_why_not})" if pods_why_not else self._pods(now)
        return f"nodes: {nodes:<32} | jobs: {queue:<40} | pods: {pods}", job_states

    def _pods(self, now: float) -> str:
        pods = json.loads(self.kubectl_pods() or '{"items": []}')["items"]
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
                self.times(name).pod_running = now
        return " ".join(f"{n} {p}" for p, n in sorted(phases.items())) or "none"

    def kubectl_pods(self) -> str:
        return kube.kubectl(
            self.layout, "-n", NAMESPACE, "get", "pods", "-l", POD_SELECTOR, "-o", "json",
            check=False,
        )  # fmt: skip

    def look_for_fail_fast(self, job: int) -> FailFast | None:
        """The first time ``sinfo -R`` shows a node of the failing pool with the bridge's
        ``k8s:`` reason: print it and the job's state, then cancel the job (Slurm requeued it,
        and would only try the same broken pool again)."""
        if self.fail_fast is not None:
            return self.fail_fast
        partition = FAILING[0]
        for line in self.slurm("sinfo", "-h", "-R", "-p", partition, "-o", "%N|%E").splitlines():
            nodes, _, reason = line.partition("|")
            if not reason.startswith("k8s:"):
                continue
            state = self.slurm("squeue", "-h", "-j", str(job), "-o", "%T (%r)").strip()
            self.fail_fast = FailFast(self.elapsed(), nodes, reason, state or "?")
            print(
                f"  {self.elapsed():6.1f}s  sinfo -R: {nodes} {reason}\n"
                f"  {'':6}   job {job} ({partition}): {state or '?'}; scancel {job}",
                flush=True,
            )
            self.slurm("scancel", str(job))
            return self.fail_fast
        return None

    def job_states(self, jobs: list[int], now: float) -> dict[int, str]:
        result = {}
        for job in jobs:
            out = self.slurm("scontrol", "show", "job", "-o", str(job))
            match = re.search(r"JobState=(\S+)", out)
            result[job] = match.group(1) if match else "?"
            if result[job] in ("RUNNING", "COMPLETING", "COMPLETED"):
                nodes = re.search(r" NodeList=(\S+)", out)
                for name in expand(nodes.group(1)) if nodes else []:
                    if self.times(name).job_start is None:
                        self.times(name).job_start = now
        return result

    def slurm_nodes(self, now: float) -> str:
        """The partitions' nodes counted by state; each node's power steps recorded."""
        out = self.slurm("sinfo", "-h", "-N", "-p", PARTITIONS, "-o", "%N %T")
        states: dict[str, int] = {}
        for line in out.splitlines():
            name, state = line.split()
            states[state] = states.get(state, 0) + 1
            self.workload_nodes.add(name)
            if state.endswith("#"):  # powering up: one of the demo's nodes from now on
                self.times(name)
            up = not state.endswith(("~", "#", "%"))
            if up and name in self.nodes and self.times(name).slurm_up is None:
                self.times(name).slurm_up = now
            if state.endswith("~") and name in self.nodes:
                t = self.times(name)
                if t.slurm_up is not None and t.suspended is None:
                    t.suspended = now
        return " ".join(f"{count} {state}" for state, count in sorted(states.items()))

    def hook_times(self) -> None:
        """When the hook called ResumeNodes for each node, from the bridge's log (millisecond
        timestamps): the RPC's own line, not the pod's creation, which a hung kube-apiserver
        delays."""
        log = self.layout.logs / "bridge.log"
        pattern = re.compile(
            r"^(\S+ \S+) INFO bridge\.api\.servicer: ResumeNodes request_id=\S+ hostlist=(\S+) "
        )
        for line in log.read_text(errors="replace").splitlines():
            match = pattern.match(line)
            if not match:
                continue
            wall = datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
            if wall < self.started_wall:
                continue
            # The servicer logs when it answers; the call came elapsed_ms before.
            answered = re.search(r" elapsed_ms=([\d.]+)", line)
            called = wall - (float(answered.group(1)) / 1000 if answered else 0.0)
            for node in expand(match.group(2)):
                if node in self.nodes and self.times(node).hook is None:
                    self.times(node).hook = called - self.started_wall

    def sample_gauges(self) -> None:
        """Raise each gauge's peak to its total now (nothing when the bridge does not answer)."""
        try:
            families = _families(_scrape(self.layout))
        except OSError:
            return
        for name, (kind, total, _) in families.items():
            if kind == "gauge":
                self.gauge_peaks[name] = max(total, self.gauge_peaks.get(name, 0.0))

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


def _sbatch(
    env: dict[str, str], partition: str, count: int, command: str, nodelist: str = ""
) -> int:
    out = subprocess.run(
        [
            # As a user who exists only on this host, as a site's users submit (the job runs
            # in its pod as that uid; the ground's site layout, docs/development.md).
            "runuser",
            "-u",
            JOB_USER,
            "--",
            "sbatch",
            "--parsable",
            "-p",
            partition,
            f"-N{count}",
            *([f"--nodelist={nodelist}"] if nodelist else []),
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
    job = int(out.strip().split(";")[0])
    where = f" -w {nodelist}" if nodelist else ""
    print(f"  {JOB_USER}$ sbatch -p {partition} -N{count}{where} --wrap '{command}'  -> job {job}")
    return job


def run_demo(layout: Layout) -> int:
    """The demo; 0 when every job of the workload completed, every node it woke was suspended
    again and the failing pool's node showed Kubernetes' reason, else 1 (what was missing is
    printed)."""
    print("==> slurm-k8s-bridge demo: Slurm power saving backed by Kubernetes pods\n")
    ground.up(layout)
    watch = Watch(layout)
    env = slurm_env(layout)
    print("\n==> submitting a small mixed workload (each job wakes powered-down CLOUD nodes)")
    jobs = [_sbatch(env, partition, count, command) for partition, count, command in WORKLOAD]
    print("  and one job for a pool whose image does not exist (Kubernetes will say no):")
    failing = _sbatch(env, *FAILING)
    print("\n==> timeline (a line each time sinfo, squeue or the pods change)")
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        line, states = watch.snapshot(jobs)
        watch.print_if_changed(line)
        watch.sample_gauges()
        seen = watch.look_for_fail_fast(failing)
        if all(s in TERMINAL for s in states.values()) and seen:
            break
        time.sleep(1)
    if watch.fail_fast is None:
        watch.slurm("scancel", str(failing))
    hung_job, hang_counted = _hung_apiserver(watch, env)
    jobs.append(hung_job)
    while time.monotonic() < deadline:
        line, states = watch.snapshot(jobs)
        watch.print_if_changed(line)
        if states[hung_job] in TERMINAL:
            break
        time.sleep(1)
    print(
        f"\n==> jobs done; nodes idle for SuspendTime={SUSPEND_TIME}s, then Slurm suspends "
        "them and the bridge deletes their pods"
    )
    while time.monotonic() < deadline + 120:
        line, _ = watch.snapshot(jobs)
        watch.print_if_changed(line)
        pods = json.loads(watch.kubectl_pods() or '{"items": []}')
        if not pods["items"] and all(t.suspended for t in watch.nodes.values() if t.slurm_up):
            break
        time.sleep(1)
    watch.hook_times()
    missing = _summary(layout, watch, jobs, env)
    if not hang_counted:
        missing.append("the hung kube-apiserver moved no Kubernetes error or retry count")
    _metrics_summary(layout, watch.gauge_peaks)
    _try_next(layout)
    if missing:
        print("\n==> the demo did not show everything it should:")
        for line in missing:
            print(f"  - {line}")
        return 1
    return 0


def _hung_apiserver(watch: Watch, env: dict[str, str]) -> tuple[int, bool]:
    """Stop kube-apiserver (SIGSTOP: hung, as a stuck process or a partitioned network looks)
    for :data:`HUNG_S` while a job arrives; the bridge's calls time out and are retried, then it
    creates the pod once the API server answers. The job, and whether the bridge's metrics
    counted Kubernetes errors or retries meanwhile."""
    pid = State(watch.layout).running("kube-apiserver")
    if pid is None:
        raise ProvingGroundError("kube-apiserver is not running: run make up")
    before = _kubernetes_failures(watch.layout)
    print(
        f"\n==> kube-apiserver hangs for {HUNG_S}s (SIGSTOP) while a job arrives: the bridge's "
        "calls time out and are retried; Slurm keeps the node powering up"
    )
    os.kill(pid, signal.SIGSTOP)
    try:
        job = _sbatch(env, *HUNG_JOB)
        resumes = time.monotonic() + HUNG_S
        while time.monotonic() < resumes:
            line, _ = watch.snapshot([job], pods_why_not="kube-apiserver stopped")
            watch.print_if_changed(line)
            time.sleep(1)
    finally:
        os.kill(pid, signal.SIGCONT)
    print(f"  {watch.elapsed():6.1f}s  kube-apiserver answers again (SIGCONT)", flush=True)
    moved = 0.0
    counted_by = time.monotonic() + 60
    while time.monotonic() < counted_by:
        moved = _kubernetes_failures(watch.layout) - before
        if moved:
            break
        time.sleep(1)
    print(
        f"  {watch.elapsed():6.1f}s  the bridge counted {moved:g} Kubernetes call errors + "
        "retries (slurm_k8s_bridge_backend_errors_total, _retries_total)",
        flush=True,
    )
    return job, moved > 0


def _summary(layout: Layout, watch: Watch, jobs: list[int], env: dict[str, str]) -> list[str]:
    """Print the summary; what the run failed to show, one line each (empty when all did)."""
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
    resumed = [
        n
        for n, t in watch.nodes.items()
        if n in watch.workload_nodes and (t.hook is not None or t.slurm_up is not None)
    ]
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
    failed = watch.fail_fast
    if failed is not None:
        print(
            f"  fail fast: {failed.node} DOWN {failed.seconds:.1f}s after the start with "
            f"{failed.reason!r} (ResumeTimeout is far longer); job {failed.job_state}"
        )
    missing = [] if completed == len(jobs) else [f"jobs completed: {completed}/{len(jobs)}"]
    if not resumed:
        missing.append("no node was resumed")
    missing += [f"{n} was not suspended again" for n in sorted(set(resumed) - set(suspended))]
    if failed is None:
        missing.append(f"no node of partition {FAILING[0]} showed a k8s: reason in sinfo -R")
    return missing


#: Samples shown per metric family: the busiest series first.
SHOWN_SERIES = 4


def _scrape(layout: Layout) -> str:
    """The bridge's metrics page; :class:`OSError` when it does not answer or is off."""
    url = metrics_url(layout)
    if not url.startswith("http://"):
        raise OSError(url)
    with urllib.request.urlopen(url, timeout=10) as response:  # noqa: S310 (http, checked)
        return str(response.read().decode())


def _kubernetes_failures(layout: Layout) -> float:
    """The bridge's Kubernetes call errors plus retries so far (0 when it does not answer)."""
    from prometheus_client.parser import text_string_to_metric_families  # noqa: PLC0415

    wanted = {"slurm_k8s_bridge_backend_errors_total", "slurm_k8s_bridge_backend_retries_total"}
    try:
        text = _scrape(layout)
    except OSError:
        return 0.0
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name in wanted and sample.labels.get("backend") == "kubernetes"
    )


def _families(text: str) -> dict[str, tuple[str, float, str]]:
    """The bridge's metric families in a scrape: each sample name a Prometheus query would
    sum (a counter's _total, a histogram's _count, a gauge itself) -> its type, the total and
    its busiest series."""
    from prometheus_client.parser import text_string_to_metric_families  # noqa: PLC0415

    result = {}
    for family in text_string_to_metric_families(text):
        # The parser reads a counter's _created timestamps as families of their own.
        if not family.name.startswith("slurm_k8s_bridge_") or family.name.endswith("_created"):
            continue
        wanted = {"counter": "_total", "histogram": "_count"}.get(family.type, "")
        series = [s for s in family.samples if s.name == family.name + wanted]
        busiest = sorted((s for s in series if s.value), key=lambda s: -s.value)[:SHOWN_SERIES]
        shown = ", ".join(
            f"{','.join(f'{k}={v}' for k, v in s.labels.items()) or 'all'}: {s.value:g}"
            for s in busiest
        )
        result[family.name + wanted] = (family.type, sum(s.value for s in series), shown)
    return result


def _metrics_summary(layout: Layout, gauge_peaks: dict[str, float]) -> None:
    """Each bridge metric family's total after the run and its busiest series (what a
    Prometheus scraping the bridge now holds); a gauge also shows its peak during the demo."""
    url = metrics_url(layout)
    if not url.startswith("http://"):
        print(f"\n==> metrics: {url}")
        return
    try:
        text = _scrape(layout)
    except OSError as e:
        print(f"\n==> metrics: {url} did not answer: {e}")
        return
    print(f"\n==> the bridge's metrics (curl {url}): totals, busiest series")
    for name, (kind, total, shown) in _families(text).items():
        peak = f"peak {gauge_peaks.get(name, total):g}" if kind == "gauge" else ""
        print(f"  {name:55} {total:>7g}  {'; '.join(part for part in (peak, shown) if part)}")


def _try_next(layout: Layout) -> None:
    print(f"""
==> the proving ground stays up. Try:
  source {layout.local / "env"}
  sinfo                      # CLOUD nodes: idle~ powered down, # powering up, % powering down
  runuser -u {JOB_USER} -- sbatch -N2 -p cpu --chdir=/tmp --output={SHARED_DIR}/%j.out \\
      --wrap 'srun hostname'   # as a job user only this host knows
  sacct -X                   # accounting: slurmdbd records every job with its user
  squeue; sinfo -R           # reasons the bridge writes start with 'k8s:'
  kubectl -n {NAMESPACE} get pods -l app.kubernetes.io/managed-by=slurm-k8s-bridge -o wide
  slurm-k8s-bridge status --socket unix:/run/slurm-k8s-bridge/bridge.sock
  make down                  # stops everything `make up` started (the build cache stays)
""")
