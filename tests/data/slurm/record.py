#!/usr/bin/env python3
"""Re-record tests/data/slurm/ from real, throw-away Slurm clusters (run as root).

    python3 tests/data/slurm/record.py [--version 22.05|24.11|all] [--out DIR] [--keep]

22.05: Debian bookworm's slurmctld/slurmd/munge on the host, in /tmp/slurmrec-2205, with its own
munged socket and key. 24.11: Debian trixie's Slurm in a debootstrap root cached at
/root/.cache/slurm-k8s-bridge/rootfs-trixie-slurm (created on first use; trixie is never added to
the host's apt sources), auth/slurm with a slurm.key, run in /tmp/slurmrec-2411 inside that root.
Each cluster has eight State=CLOUD nodes, each slurmd on its own port; ResumeProgram and
SuspendProgram only log, so a node stays POWERING_UP until this script starts its slurmd.

Ports: 22.05 uses 16817/16818 and 16821-16828, 24.11 uses 16837/16838 and 16841-16848.
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

HERE = Path(__file__).resolve().parent
ROOTFS = Path("/root/.cache/slurm-k8s-bridge/rootfs-trixie-slurm")
MIRROR = "http://deb.debian.org/debian"
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
PartitionName=debug Nodes=cloud[1-8] Default=YES MaxTime=INFINITE State=UP
PartitionName=k8s Nodes=cloud[1-3] MaxTime=INFINITE State=UP
"""

HOOK = '#!/bin/sh\necho "{kind} $*" >> {d}/log/hooks.log\n'


class Cluster:
    """One throw-away slurmctld with CLOUD nodes; ``run`` runs a Slurm client command."""

    def __init__(self, version: str, out: Path) -> None:
        self.version = version
        self.out = out / f"v{version}"
        self.legacy = version == "22.05"
        tag = version.replace(".", "")
        self.dir = Path(f"/tmp/slurmrec-{tag}")  # path as the daemons see it
        self.host_dir = self.dir if self.legacy else ROOTFS / self.dir.relative_to("/")
        self.base_port = 16817 if self.legacy else 16837
        self.conf = self.dir / "etc" / "slurm.conf"
        self.procs: list[subprocess.Popen[bytes]] = []
        self.slurmds: dict[str, subprocess.Popen[bytes]] = {}

    # --- setup ---------------------------------------------------------------------------------

    def write_config(self) -> None:
        if self.host_dir.exists():
            raise SystemExit(f"{self.host_dir} exists: another recording running? remove it")
        for sub in ("etc", "state", "log", "run", *(f"spool/{n}" for n in NODES)):
            (self.host_dir / sub).mkdir(parents=True)
        etc = self.host_dir / "etc"
        for kind in ("resume", "suspend", "resumefail"):
            hook = etc / f"{kind}.sh"
            hook.write_text(HOOK.format(kind=kind, d=self.dir))
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
            for i, n in enumerate(NODES, start=1)
        )
        (etc / "slurm.conf").write_text(
            SLURM_CONF.format(
                cluster=f"rec{self.version.replace('.', '')}",
                host=socket.gethostname(),
                ctld_port=self.base_port,
                slurmd_port=self.base_port + 1,
                auth=auth,
                d=self.dir,
                ctld_params=params,
                nodes=nodes,
            )
        )

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
            str(ROOTFS),
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
    c.stop()
    # slurmctld gone: what clients say (the Slurm client itself retries for ~9 s first).
    c.record_error(
        "update-unreachable", "scontrol", "update", "nodename=cloud5", "state=down", "reason=x"
    )
    if c.legacy:
        c.record_error("sinfo-unreachable", "sinfo", "--json")  # exit 0, error inside the JSON
    else:
        c.record_error("scontrol-unreachable", "scontrol", "show", "nodes", "--json")  # fmt: skip


def ensure_rootfs() -> None:
    """Create the cached trixie root with Slurm 24.11 (separate apt sources: the root's own)."""
    if (ROOTFS / "usr/sbin/slurmctld").exists():
        return
    partial = ROOTFS.with_name(ROOTFS.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["debootstrap", "--variant=minbase", "trixie", str(partial), MIRROR], check=True)
    policy = partial / "usr/sbin/policy-rc.d"  # never start services inside the root
    policy.write_text("#!/bin/sh\nexit 101\n")
    policy.chmod(0o755)
    install = (
        "apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y "
        "--no-install-recommends slurmctld slurmd slurm-client && apt-get clean"
    )
    subprocess.run(["chroot", str(partial), "sh", "-c", install], check=True)
    partial.rename(ROOTFS)


def record_version(version: str, out: Path, keep: bool) -> None:
    if version == "24.11":
        ensure_rootfs()
    c = Cluster(version, out)
    print(f"Slurm {version}: work dir {c.host_dir}")
    c.write_config()
    try:
        c.start_daemons()
        scenario(c)
    finally:
        c.stop()
        if keep:
            print(f"  kept {c.host_dir}")
        else:
            shutil.rmtree(c.host_dir, ignore_errors=True)
            if not c.legacy:
                # The shared /run of the chroot holds slurmctld's sack socket.
                with contextlib.suppress(FileNotFoundError):
                    (ROOTFS / "run/slurm/sack.socket").unlink()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--version", choices=["22.05", "24.11", "all"], default="all")
    parser.add_argument("--out", type=Path, default=HERE)
    parser.add_argument("--keep", action="store_true", help="keep the work dir and logs")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root: it starts slurmctld/slurmd and uses chroot/unshare")
    versions = ["22.05", "24.11"] if args.version == "all" else [args.version]
    for version in versions:
        record_version(version, args.out.resolve(), args.keep)


if __name__ == "__main__":
    main()
