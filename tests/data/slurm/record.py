#!/usr/bin/env python3
"""Re-record tests/data/slurm/ from real, throw-away Slurm clusters (run as root).

    python3 tests/data/slurm/record.py [--version 22.05|24.11|26.05|all] [--out DIR] [--keep]
    python3 tests/data/slurm/record.py --version 26.05 --job-start 3   # timings instead

22.05: Debian bookworm's slurmctld/slurmd/munge on the host, in /tmp/slurmrec-2205, with its own
munged socket and key. 24.11 and 26.05: Debian trixie's and sid's Slurm in debootstrap roots
cached at /root/.cache/slurm-k8s-bridge/rootfs-{trixie,sid}-slurm (created on first use; those
suites are never added to the host's apt sources), auth/slurm with a slurm.key, run in
/tmp/slurmrec-2411 or -2605 inside the root. Each cluster has eight State=CLOUD nodes, each
slurmd on its own port; ResumeProgram and SuspendProgram only log (ResumeProgram also keeps a
copy of $SLURM_RESUME_FILE), so a node stays POWERING_UP until this script starts its slurmd.

Ports: 22.05 uses 16817/16818 and 16821-16828, 24.11 16837/16838 and 16841-16848, 26.05
16857/16858 and 16861-16868 (--job-start: up to 15 nodes, still below the next base port).
Every process started is stopped by PID at the end (``--keep`` leaves the work dir for reading).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "dev"))
from proving_ground import slurm_series

HERE = Path(__file__).resolve().parent
CACHE = Path("/root/.cache/slurm-k8s-bridge")  # the proving ground's cache (its Debian roots)
#: Series recorded in a debootstrap root of the Debian suite that ships it: (suite, base port).
#: 22.05 is the host's own (bookworm) and base port 16817.
SUITES = {"24.11": ("trixie", 16837), "26.05": ("sid", 16857)}
VERSIONS = ("22.05", *SUITES)
NODES = [f"cloud{i}" for i in range(1, 9)]
POWER_PARAMS = "idle_on_node_suspend,power_save_interval=5,power_save_min_interval=0"

SLURM_CONF = """\
ClusterName={cluster}
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
{auth}
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool/%n
SlurmctldPidFile={d}/run/slurmctld.pid
SlurmdPidFile={d}/run/slurmd-%n.pid
SlurmctldLogFile={d}/log/slurmctld.log
SlurmdLogFile={d}/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
# 22.05 hides powered-down CLOUD nodes from sinfo/scontrol without this (even with --all).
PrivateData=cloud
SlurmctldParameters={ctld_params}
ResumeProgram={d}/etc/resume.sh
SuspendProgram={d}/etc/suspend.sh
ResumeFailProgram={d}/etc/resumefail.sh
SuspendTime=300
SuspendTimeout=30
ResumeTimeout=300
ResumeRate=0
SuspendRate=0
TreeWidth=65533
{nodes}
PartitionName=debug Nodes=cloud[1-{last}] Default=YES MaxTime=INFINITE State=UP
PartitionName=k8s Nodes=cloud[1-3] MaxTime=INFINITE State=UP
"""

HOOK = '#!/bin/sh\necho "{kind} $*" >> {d}/log/hooks.log\n'
# The resume file is a /proc/<pid>/fd path, gone once the hook exits: keep a copy per call ($$).
# Hooks run without PATH, hence /bin/cat.
RESUME_HOOK = (
    '#!/bin/sh\necho "resume $* $$" >> {d}/log/hooks.log\n'
    'if [ -n "$SLURM_RESUME_FILE" ]; then\n'
    '  /bin/cat "$SLURM_RESUME_FILE" > {d}/log/resume-$$.json\n'
    "fi\n"
)


# A PrologSlurmctld that returns once none of the job's nodes is powering up (#), powered down
# (~) or not responding (*). slurmctld launches a CONFIGURING batch job when its last prolog
# ends and the nodes are ready (prolog_running_decr), instead of at its 30 s periodic check.
PROLOG = """#!/bin/sh
echo "prolog $SLURM_JOB_ID $SLURM_JOB_NODELIST" >> {d}/log/hooks.log
i=0
while [ $i -lt 1200 ]; do
  states=$(SLURM_CONF={conf} /usr/bin/sinfo -h -N -n "$SLURM_JOB_NODELIST" -o %t)
  case "$states" in *'#'*|*'~'*|*'*'*|'') ;; *) exit 0 ;; esac
  i=$((i+1))
  /bin/sleep 0.25
done
exit 0
"""


class Cluster:
    """One throw-away slurmctld with CLOUD nodes; ``run`` runs a Slurm client command."""

    def __init__(
        self, version: str, out: Path, nodes: int = len(NODES), *, prolog: bool = False
    ) -> None:
        self.version = version
        self.prolog = prolog
        # More nodes than the scenario's eight only for --job-start (ports stay below the next
        # series' base port up to 12).
        self.nodes = [f"cloud{i}" for i in range(1, nodes + 1)]
        self.out = out / f"v{version}"
        self.legacy = version == "22.05"
        tag = version.replace(".", "")
        self.dir = Path(f"/tmp/slurmrec-{tag}")  # path as the daemons see it
        self.root = None if self.legacy else slurm_series.rootfs(CACHE, version)
        self.host_dir = self.root / self.dir.relative_to("/") if self.root else self.dir
        self.base_port = 16817 if self.legacy else SUITES[version][1]
        self.conf = self.dir / "etc" / "slurm.conf"
        self.procs: list[subprocess.Popen[bytes]] = []
        self.slurmds: dict[str, subprocess.Popen[bytes]] = {}

    # --- setup ---------------------------------------------------------------------------------

    def write_config(self) -> None:
        if self.host_dir.exists():
            raise SystemExit(f"{self.host_dir} exists: another recording running? remove it")
        for sub in ("etc", "state", "log", "run", *(f"spool/{n}" for n in self.nodes)):
            (self.host_dir / sub).mkdir(parents=True)
        etc = self.host_dir / "etc"
        for kind in ("resume", "suspend", "resumefail"):
            hook = etc / f"{kind}.sh"
            hook.write_text(
                (RESUME_HOOK if kind == "resume" else HOOK).format(kind=kind, d=self.dir)
            )
            hook.chmod(0o755)
        key = etc / ("munge.key" if self.legacy else "slurm.key")
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        if self.legacy:
            auth = (
                f"AuthType=auth/munge\nAuthInfo=socket={self.dir}/run/munge.sock\n"
                "CredType=cred/munge"
            )
            params = f"cloud_reg_addrs,{POWER_PARAMS}"
        else:
            auth = "AuthType=auth/slurm\nCredType=cred/slurm"
            params = POWER_PARAMS  # 24.11 calls cloud_reg_addrs defunct
            # slurmd 24.11 loads a cgroup plugin even with proctrack/linuxproc; no cgroupfs here.
            (etc / "cgroup.conf").write_text("CgroupPlugin=disabled\n")
        nodes = "\n".join(
            f"NodeName={n} CPUs=1 RealMemory=100 State=CLOUD Port={self.base_port + 4 + i}"
            # A feature, so that the resume file shows what a job asking for one carries.
            + (" Features=big" if n == "cloud5" else "")
            for i, n in enumerate(self.nodes, start=1)
        )
        extra = ""
        if self.prolog:
            (etc / "prolog.sh").write_text(PROLOG.format(d=self.dir, conf=self.conf))
            (etc / "prolog.sh").chmod(0o755)
            extra = f"PrologSlurmctld={self.dir}/etc/prolog.sh\n"
        (etc / "slurm.conf").write_text(
            extra
            + SLURM_CONF.format(
                cluster=f"rec{self.version.replace('.', '')}",
                host=socket.gethostname(),
                ctld_port=self.base_port,
                slurmd_port=self.base_port + 1,
                auth=auth,
                d=self.dir,
                ctld_params=params,
                nodes=nodes,
                last=len(self.nodes),
            )
        )

    def conf_path(self) -> Path:
        """slurm.conf as this process sees it (the daemons see :attr:`conf`)."""
        return self.host_dir / "etc" / "slurm.conf"

    def argv(self, *cmd: str, private_run: bool = False) -> list[str]:
        if self.legacy:
            return list(cmd)
        # A private mount namespace with its own /proc; each slurmd also gets a private /run,
        # because every 24.11 daemon owns /run/slurm/sack.socket.
        script = (
            'mount -t proc proc "$0/proc" && '
            + ('mount -t tmpfs tmpfs "$0/run" && ' if private_run else "")
            + 'mkdir -p "$0/run/slurm" && exec chroot "$0" env SLURM_CONF="$SLURM_CONF" "$@"'
        )
        return [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            script,
            str(self.root),
            *cmd,
        ]

    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def start(self, name: str, *cmd: str, private_run: bool = False) -> subprocess.Popen[bytes]:
        log = (self.host_dir / "log" / f"{name}.out").open("wb")
        proc = subprocess.Popen(
            self.argv(*cmd, private_run=private_run),
            env=self.env(),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        self.procs.append(proc)
        return proc

    def start_daemons(self) -> None:
        if self.legacy:
            d = self.dir
            self.start(
                "munged",
                "munged", "-F", "--force", f"--socket={d}/run/munge.sock",
                f"--key-file={d}/etc/munge.key", f"--pid-file={d}/run/munged.pid",
                f"--log-file={d}/log/munged.log", f"--seed-file={d}/run/munged.seed",
            )  # fmt: skip
            time.sleep(1)
        self.start("slurmctld", "slurmctld", "-D", "-i")
        for _ in range(30):
            time.sleep(1)
            if self.run("sinfo", check=False).returncode == 0:
                return
        raise SystemExit(f"slurmctld {self.version} did not come up; see {self.host_dir}/log")

    def start_slurmd(self, node: str) -> None:
        # -b: report a fresh boot, else slurmctld waits for a "reboot" until ResumeTimeout.
        self.slurmds[node] = self.start(
            f"slurmd-{node}", "slurmd", "-D", "-b", "-N", node, private_run=not self.legacy
        )

    # --- commands ------------------------------------------------------------------------------

    def run(self, *cmd: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            self.argv(*cmd), env=self.env(), capture_output=True, text=True, timeout=60, check=False
        )
        if check and done.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed: {done.stderr}")
        return done

    def update(self, nodes: str, state: str, reason: str | None = None) -> None:
        args = ["scontrol", "update", f"nodename={nodes}", f"state={state}"]
        self.run(*args, *([f"reason={reason}"] if reason else []))

    def nodes_json(self) -> str:
        if self.legacy:
            return self.run("sinfo", "--json").stdout
        return self.run("scontrol", "show", "nodes", "--json").stdout

    def record(self, name: str, text: str) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        (self.out / name).write_text(text)
        print(f"  recorded {self.out / name}")

    def record_error(self, name: str, *cmd: str) -> None:
        done = self.run(*cmd, check=False)
        print(f"  {' '.join(cmd)} -> rc={done.returncode}")
        (self.out / "errors").mkdir(parents=True, exist_ok=True)
        (self.out / "errors" / f"{name}.stderr").write_text(done.stderr)
        if done.stdout.strip():
            self.record(f"{name}.json", done.stdout)

    def show(self) -> None:
        print(self.run("sinfo", "-N", "-p", "debug", "-o", "%N %t %E").stdout, end="")

    # --- teardown ------------------------------------------------------------------------------

    def stop(self) -> None:
        if not self.procs:
            return
        self.run("scancel", "--full", "--user=root", check=False)
        time.sleep(2)
        # Batch steps outlive a killed slurmd (they ignore SIGTERM): find ours and kill them.
        for pid in self._leftover_pids():
            if pid not in {p.pid for p in self.procs}:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(5)
        self.procs.clear()

    def _leftover_pids(self) -> Iterator[int]:
        """Processes of this cluster: SLURM_CONF in their environment or our dir in argv."""
        conf = f"SLURM_CONF={self.conf}".encode()
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            with contextlib.suppress(OSError):
                environ = (entry / "environ").read_bytes().split(b"\0")
                cmdline = (entry / "cmdline").read_bytes()
                if conf in environ or str(self.dir / "spool").encode() in cmdline:
                    yield int(entry.name)


def wait_for(cluster: Cluster, node: str, want: Sequence[str], timeout_s: float = 60) -> None:
    """Wait until the node's compact sinfo state is one of ``want``."""
    deadline = time.monotonic() + timeout_s
    state = ""
    while time.monotonic() < deadline:
        state = cluster.run("sinfo", "-h", "-N", "-p", "debug", "-n", node, "-o", "%t").stdout
        if state.strip() in want:
            return
        time.sleep(1)
    raise SystemExit(f"{node} is {state.strip()!r}, wanted one of {want}")


def wait_job_running(cluster: Cluster, job: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cluster.run("squeue", "-h", "-j", job, "-o", "%T").stdout.strip() == "RUNNING":
            return
        time.sleep(1)
    raise SystemExit(f"job {job} did not start")


def scenario(c: Cluster) -> None:
    """Drive every node into one power state, record, then apply the transitions and record."""
    nodes_file = "sinfo" if c.legacy else "scontrol"
    c.run("sbatch", "-w", "cloud2", "--wrap", "sleep 3000")
    job = c.run("sbatch", "--parsable", "-w", "cloud3", "--wrap", "sleep 3000").stdout.strip()
    c.update("cloud4,cloud5", "power_up")
    for node in ("cloud2", "cloud3"):
        wait_for(c, node, ["alloc#"])
    for node in ("cloud3", "cloud4", "cloud5"):
        c.start_slurmd(node)
    for node in ("cloud4", "cloud5"):
        wait_for(c, node, ["idle"])
    wait_job_running(c, job)
    c.update("cloud6", "down", "ResumeTimeout reached (set by hand)")
    c.update("cloud7", "drain", "maintenance: disk check")
    c.update("cloud8", "down", "k8s: ImagePullBackOff: Back-off pulling image localhost/slurmd:dev")
    c.update("cloud5", "power_down_force")
    wait_for(c, "cloud5", ["idle%"])
    c.show()
    c.record(f"{nodes_file}-states.json", c.nodes_json())
    c.record("squeue-states.json", c.run("squeue", "--json").stdout)
    if not c.legacy:
        c.record("sinfo-states.json", c.run("sinfo", "--json").stdout)

    # DOWN on a POWERING_UP node: it stays POWERING_UP (down#) and its job is requeued.
    c.update("cloud2", "down", "test down on powering up")
    wait_for(c, "cloud2", ["down#"])
    c.record(f"{nodes_file}-down-on-powering-up.json", c.nodes_json())
    c.update("cloud2", "power_down_force")
    c.update("cloud6", "resume")
    c.run("sbatch", "-w", "cloud1", "--wrap", "sleep 3000")
    wait_for(c, "cloud1", ["alloc#"])
    c.update("cloud1", "power_down_force")
    c.update("cloud3", "power_down")
    c.update("cloud4", "drain", "k8s: Evicted: node drained by kubectl")
    for node in ("cloud1", "cloud2"):
        wait_for(c, node, ["idle~"], timeout_s=90)  # SuspendTimeout=30
    c.show()
    c.record(f"{nodes_file}-after-transitions.json", c.nodes_json())

    c.record_error(
        "update-invalid-node-name",
        "scontrol",
        "update",
        "nodename=nosuchnode",
        "state=down",
        "reason=x",
    )
    c.record_error(
        "update-invalid-state-transition", "scontrol", "update", "nodename=cloud5", "state=resume"
    )
    c.record_error("update-bogus-state", "scontrol", "update", "nodename=cloud5", "state=bogus")
    if c.legacy:
        c.record_error("scontrol-json-unsupported", "scontrol", "show", "nodes", "--json")
    c.record("scontrol-version.txt", c.run("scontrol", "--version").stdout)
    resume_files(c)
    power_down_with_reason(c)
    c.stop()
    # slurmctld gone: what clients say (the Slurm client itself retries for ~9 s first).
    c.record_error(
        "update-unreachable", "scontrol", "update", "nodename=cloud5", "state=down", "reason=x"
    )
    if c.legacy:
        c.record_error("sinfo-unreachable", "sinfo", "--json")  # exit 0, error inside the JSON
    else:
        c.record_error("scontrol-unreachable", "scontrol", "show", "nodes", "--json")  # fmt: skip


def resume_file_after(c: Cluster, calls_before: int, timeout_s: float = 30) -> str:
    """The resume file of the first ResumeProgram call after ``calls_before`` calls."""
    deadline = time.monotonic() + timeout_s
    hooks = c.host_dir / "log" / "hooks.log"
    while time.monotonic() < deadline:
        calls = [line for line in hooks.read_text().splitlines() if line.startswith("resume ")]
        if len(calls) > calls_before:
            copy = c.host_dir / "log" / f"resume-{calls[calls_before].split()[-1]}.json"
            time.sleep(1)  # the hook logs its call before it copies the file
            print(f"  {calls[calls_before]}")
            return copy.read_text() if copy.exists() else ""
        time.sleep(0.5)
    raise SystemExit(f"no ResumeProgram call after {calls_before} (see {hooks})")


def resume_calls(c: Cluster) -> int:
    hooks = c.host_dir / "log" / "hooks.log"
    text = hooks.read_text() if hooks.exists() else ""
    return sum(line.startswith("resume ") for line in text.splitlines())


def resume_files(c: Cluster) -> None:
    """What slurmctld writes into $SLURM_RESUME_FILE: a 2-node job, then a job asking for a
    feature and the whole node (one at a time, or Slurm batches both into one call)."""
    before = resume_calls(c)
    c.run("sbatch", "-N2", "-w", "cloud[1-2]", "--wrap", "sleep 3000")
    c.record("resume-file-2-nodes.json", resume_file_after(c, before))
    before = resume_calls(c)
    c.run("sbatch", "-C", "big", "--exclusive", "-w", "cloud5", "--wrap", "sleep 3000")
    c.record("resume-file-features-exclusive.json", resume_file_after(c, before))
    for node in ("cloud1", "cloud2", "cloud5"):
        wait_for(c, node, ["alloc#"])


#: The reason of a one-step power down, as the bridge would write it.
POWER_DOWN_REASON = "k8s: PodFailed: one-step power down"


def power_down_with_reason(c: Cluster) -> None:
    """Which command powers a CLOUD node down with our reason in one call, and what remains.

    cloud1 (alloc#, half of a 2-node job) gets ``scontrol power down force ... reason=``;
    cloud5 (alloc#, exclusive job) gets ``scontrol update ... state=power_down_force reason=``.
    The commands and their output go to power-down-reason.txt; the listing right after
    (power-down-reason.json) and once both settled (power-down-reason-settled.json)."""
    attempts = [
        ("scontrol", "power", "down", "force", "cloud1", f"reason={POWER_DOWN_REASON}"),
        (
            "scontrol", "update", "nodename=cloud5", "state=power_down_force",
            f"reason={POWER_DOWN_REASON}",
        ),
    ]  # fmt: skip
    lines = []
    accepted = []
    for node, cmd in zip(("cloud1", "cloud5"), attempts, strict=True):
        done = c.run(*cmd, check=False)
        if done.returncode == 0:
            accepted.append(node)
        shown = " ".join(f"'{a}'" if " " in a else a for a in cmd)
        lines += [f"$ {shown}", f"rc={done.returncode}", done.stdout + done.stderr]
    time.sleep(3)
    lines += [
        "$ sinfo -N -p debug -o '%N %t %E'",
        c.run("sinfo", "-N", "-p", "debug", "-o", "%N %t %E").stdout,
    ]
    lines += ["$ squeue -o '%i %T %r %N'", c.run("squeue", "-o", "%i %T %r %N").stdout]
    c.record("power-down-reason.json", c.nodes_json())
    for node in accepted:  # a refused command leaves its node alloc#
        with contextlib.suppress(SystemExit):
            wait_for(c, node, ["idle~", "down~", "drain~"], timeout_s=90)
    lines += [
        "(settled)",
        "$ sinfo -N -p debug -o '%N %t %E'",
        c.run("sinfo", "-N", "-p", "debug", "-o", "%N %t %E").stdout,
    ]
    lines += ["$ squeue -o '%i %T %r %N'", c.run("squeue", "-o", "%i %T %r %N").stdout]
    c.record("power-down-reason-settled.json", c.nodes_json())
    c.record("power-down-reason.txt", "\n".join(lines))


def requeue_on_resume_failure(c: Cluster) -> None:
    """Does this slurmctld know ``SchedulerParameters=requeue_on_resume_failure``? Restart it with
    the setting and keep what ``scontrol show config`` and its log say (requeue-on-resume.txt)."""
    log = c.host_dir / "log" / "slurmctld.log"
    offset = log.stat().st_size if log.exists() else 0
    with c.conf_path().open("a") as conf:
        conf.write("SchedulerParameters=requeue_on_resume_failure\n")
    c.start_daemons()
    shown = c.run("scontrol", "show", "config").stdout
    lines = [line for line in shown.splitlines() if line.startswith("SchedulerParameters")]
    with log.open() as f:
        f.seek(offset)
        lines += [
            line.rstrip()
            for line in f
            if "SchedulerParameters" in line or "requeue_on_resume" in line or "rror" in line
        ]
    c.stop()
    c.record("requeue-on-resume.txt", "\n".join(lines) + "\n")


#: What --job-start calls right after a node registered, to see if the job starts sooner.
NUDGES: dict[str, tuple[str, ...]] = {
    "nothing": (),
    "reconfigure": ("scontrol", "reconfigure"),
    "state=resume": ("scontrol", "update", "nodename={node}", "state=resume"),
    "wait_job": ("scontrol", "wait_job", "{job}"),
}
#: Seconds between "alloc#" and slurmd's start for the staggered runs. Runs back to back start
#: a few seconds after slurmctld's 30 s periodic check (the previous job started at one), so
#: they all wait nearly the whole period; a delay moves registration across the period.
STAGGER = (8, 16, 24)
#: One fresh idle~ node a run; the ports of more than 15 reach the next series' base port.
MAX_NODES = 15


def log_time(line: str) -> float:
    """Seconds since the epoch of a slurmctld log line (``[2026-12-03T13:48:52.586] ...``)."""
    stamp = line[1 : line.index("]")]
    return time.mktime(time.strptime(stamp[:19], "%Y-%m-%dT%H:%M:%S")) + float(stamp[19:] or 0)


def wait_log(c: Cluster, needles: Sequence[str], timeout_s: float = 90) -> float:
    """When slurmctld logged a line containing one of ``needles`` (its own stamp, ms)."""
    log = c.host_dir / "log" / "slurmctld.log"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for line in log.read_text(errors="replace").splitlines():
            if any(needle in line for needle in needles):
                return log_time(line)
        time.sleep(0.05)
    raise SystemExit(f"slurmctld never logged {needles!r}")


def timed_start(c: Cluster, node: str, nudge: tuple[str, ...] = (), delay_s: float = 0) -> float:
    """Seconds from slurmctld's "Node X now responding" to its "Configuration for JobId=N
    (is) complete" for a job that waited on the powering-up node (both slurmctld's stamps)."""
    job = c.run("sbatch", "--parsable", "-w", node, "--wrap", "sleep 300").stdout.strip()
    wait_for(c, node, ["alloc#"])
    time.sleep(1 + delay_s)  # ResumeProgram has run: the pod would be starting now
    c.start_slurmd(node)
    registered = wait_log(c, [f"Node {node} now responding"])
    if nudge:
        cmd = [a.format(node=node, job=job) for a in nudge]
        done = c.run(*cmd, check=False)
        print(f"  {' '.join(cmd)} -> rc={done.returncode} {done.stderr.strip()}")
    # job_time_limit logs "... complete", prolog_running_decr "... is complete".
    started = wait_log(c, [f"Configuration for JobId={job} complete", f"JobId={job} is complete"])
    print(f"  {node} job {job}: {started - registered:.2f} s")
    return started - registered


def job_start(c: Cluster, runs: int) -> list[str]:
    """Registration -> job start: ``runs`` runs per nudge (back to back), then the staggered
    runs; with a PrologSlurmctld cluster, ``runs`` runs staggered. Returns the table lines."""
    nodes = iter(c.nodes)
    lines = []
    if c.prolog:
        waits = [
            timed_start(c, next(nodes), delay_s=STAGGER[i % len(STAGGER)]) for i in range(runs)
        ]
        return [f"{'PrologSlurmctld':>24}: " + ", ".join(f"{w:.2f}" for w in waits)]
    for nudge, template in NUDGES.items():
        waits = [timed_start(c, next(nodes), template) for _ in range(runs)]
        lines.append(f"{nudge:>24}: " + ", ".join(f"{w:.2f}" for w in waits))
    waits = [timed_start(c, next(nodes), delay_s=delay) for delay in STAGGER]
    label = "nothing, " + "/".join(map(str, STAGGER)) + " s later"
    lines.append(f"{label:>24}: " + ", ".join(f"{w:.2f}" for w in waits))
    return lines


def record_version(version: str, out: Path, keep: bool) -> None:
    if version in SUITES:
        slurm_series.ensure_rootfs(CACHE, version)
    c = Cluster(version, out)
    with running(c, keep):
        scenario(c)
        requeue_on_resume_failure(c)


def record_job_start(version: str, out: Path, keep: bool, runs: int) -> None:
    """job-start.txt: a cluster for the nudges, then one with a waiting PrologSlurmctld."""
    if version in SUITES:
        slurm_series.ensure_rootfs(CACHE, version)
    lines = [
        f"Slurm {version}: seconds from 'Node X now responding' to 'Configuration ... complete'"
    ]
    nodes = len(NUDGES) * runs + len(STAGGER)
    if nodes > MAX_NODES:
        raise SystemExit(f"--job-start {runs} needs {nodes} nodes, more than {MAX_NODES}")
    c = Cluster(version, out, nodes=nodes)
    with running(c, keep, "-nudges"):
        lines += job_start(c, runs)
    c = Cluster(version, out, nodes=max(runs, 3), prolog=True)  # 3: partition k8s is cloud[1-3]
    with running(c, keep, "-prolog"):
        lines += job_start(c, runs)
    c.record("job-start.txt", "\n".join(lines) + "\n")


@contextlib.contextmanager
def running(c: Cluster, keep: bool, kept_suffix: str = "") -> Iterator[None]:
    """The cluster's daemons for the block; all stopped (by PID) after it."""
    print(f"Slurm {c.version}: work dir {c.host_dir}")
    c.write_config()
    try:
        c.start_daemons()
        yield
    finally:
        c.stop()
        if keep:
            kept = c.host_dir.with_name(c.host_dir.name + kept_suffix)
            if kept != c.host_dir:
                shutil.rmtree(kept, ignore_errors=True)
                c.host_dir.rename(kept)
            print(f"  kept {kept}")
        else:
            shutil.rmtree(c.host_dir, ignore_errors=True)
        if c.root:
            # The shared /run of the chroot holds slurmctld's sack socket.
            with contextlib.suppress(FileNotFoundError):
                (c.root / "run/slurm/sack.socket").unlink()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--version", choices=[*VERSIONS, "all"], default="all")
    parser.add_argument("--out", type=Path, default=HERE)
    parser.add_argument("--keep", action="store_true", help="keep the work dir and logs")
    parser.add_argument(
        "--job-start",
        type=int,
        default=0,
        metavar="RUNS",
        help="instead of the scenario: time registration -> job start, RUNS times per nudge",
    )
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root: it starts slurmctld/slurmd and uses chroot/unshare")
    versions = list(VERSIONS) if args.version == "all" else [args.version]
    for version in versions:
        if args.job_start:
            record_job_start(version, args.out.resolve(), args.keep, args.job_start)
        else:
            record_version(version, args.out.resolve(), args.keep)


if __name__ == "__main__":
    main()
