"""`make bench`, the failure path's job read (issue 29 item 12): with N jobs queued in the
proving ground's real slurmctld, the peak RSS and the bytes a process reads to learn the jobs of
one failing node, two ways in the same run, each in a fresh child Python (its own peak, VmHWM),
both importing the same bridge modules first:

* ``json`` (the baseline: the bridge's read before): ``squeue --json --nodelist=<node>`` decoded
  whole, then the node's jobs kept. 22.05's ``--json`` ignores every filter and prints every job
  of the cluster, pending ones too.
* ``lines`` (the bridge's read now): ``SlurmCli.jobs_on_nodes([node])``, i.e. ``squeue
  --noheader --nodelist= --states= --Format=`` four fields, filtered by slurmctld.

The jobs are held (``sbatch --hold``: queued, never run) and cancelled afterwards. Slurm's default
MaxJobCount is 10,000, jobs of the ground included, so the default N stays below it.

``python dev/bench/failure_jobs.py [--jobs N]`` alone, or as a row of ``make bench``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "dev"))

from proving_ground import ground
from proving_ground.layout import Layout
from proving_ground.slurm import ground_programs

JOBS = 9_000
QUICK_JOBS = 200
JOB_NAME = "skb-bench-queued"
#: The failing node: no job holds it (the read finds none), as in a fail-fast on a fresh pod.
NODE = "cpu-15"
NOTE = (
    f"Failure-path job read: the jobs of one failing node ({NODE}) with N jobs held in the real "
    "slurmctld of the ground's series; peak RSS of a child Python (VmHWM) and bytes squeue "
    "printed; baseline: `squeue --json --nodelist=` decoded whole, the read before issue 29 "
    "item 12 (22.05's --json ignores the filter)."
)

#: The child's common part: the same imports either way, so the RSS difference is the read's.
_PRELUDE = """
import json, os, subprocess, sys
from bridge.adapters.slurm.cli import SlurmCli
from bridge.domain.hostlist import expand
bin_dir, conf, node = sys.argv[1:4]
def peak_kib():
    # VmHWM: this process image's own peak (ru_maxrss keeps the forking parent's across exec).
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
"""
_JSON_READ = (
    _PRELUDE
    + """
out = subprocess.run([bin_dir + "/squeue", "--json", "--nodelist=" + node],
                     capture_output=True, check=True, env=dict(os.environ, SLURM_CONF=conf)).stdout
doc = json.loads(out)
jobs = [j for j in doc["jobs"] if node in expand(j.get("nodes") or "")]
print(json.dumps({"bytes": len(out), "listed": len(doc["jobs"]), "jobs": len(jobs),
                  "maxrss_kib": peak_kib()}))
"""
)
_LINES_READ = (
    _PRELUDE
    + """
read = []
run_once = SlurmCli._run_once
def counting(self, argv):
    out = run_once(self, argv)
    read.append(len(out))
    return out
SlurmCli._run_once = counting
jobs = SlurmCli(bin_dir, conf=conf).jobs_on_nodes([node])
print(json.dumps({"bytes": sum(read), "listed": len(jobs), "jobs": len(jobs),
                  "maxrss_kib": peak_kib()}))
"""
)


@dataclass(frozen=True)
class Read:
    how: str
    bytes: int
    listed: int
    maxrss_kib: int


def progress(what: str) -> None:
    print(f"  failure jobs: {what} ...", file=sys.stderr, flush=True)


def _submit(sbatch: str, conf: str, count: int) -> int:
    """``count`` held jobs, four sbatch at a time; returns how many Slurm took."""

    def one(_: int) -> bool:
        argv = [sbatch, "--hold", "-p", "cpu", "-J", JOB_NAME, "-o", "/dev/null", "--wrap", "true"]
        try:
            done = subprocess.run(
                argv,
                capture_output=True,
                env={**os.environ, "SLURM_CONF": conf},
                check=False,
                timeout=60,
            )
        except subprocess.TimeoutExpired:
            return False  # sbatch waits for room when MaxJobCount is reached
        return done.returncode == 0

    taken = 0
    with ThreadPoolExecutor(max_workers=4) as pool:
        for index, ok in enumerate(pool.map(one, range(count)), start=1):
            taken += ok
            if index % 1000 == 0:
                progress(f"{index:,}/{count:,} jobs submitted")
    return taken


def _room(bin_dir: str, conf: str) -> int:
    """Job records slurmctld takes before MaxJobCount (finished jobs count for MinJobAge: a
    second run right after the first finds fewer), less a margin for the ground's own jobs."""
    env = {**os.environ, "SLURM_CONF": conf}
    shown = subprocess.run(
        [f"{bin_dir}/scontrol", "show", "config"], capture_output=True, text=True, env=env,
        check=True, timeout=60,
    ).stdout  # fmt: skip
    limit = next(
        (int(line.split("=")[1]) for line in shown.splitlines() if line.startswith("MaxJobCount")),
        10_000,
    )
    records = subprocess.run(
        [f"{bin_dir}/squeue", "--noheader", "--states=all", "--format=%i"],
        capture_output=True, text=True, env=env, check=True, timeout=120,
    ).stdout.split()  # fmt: skip
    return max(0, limit - len(records) - 100)


def _read(how: str, code: str, bin_dir: str, conf: str) -> Read:
    out = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "python"), "-c", code, bin_dir, conf, NODE],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
        cwd=ROOT,
    ).stdout
    seen = json.loads(out)
    return Read(how, seen["bytes"], seen["listed"], seen["maxrss_kib"])


def measure(jobs: int) -> tuple[int, list[Read]]:
    """Queue ``jobs`` held jobs, read the failing node's jobs both ways (twice each, in turn),
    cancel the jobs; returns how many were queued and the reads."""
    layout = Layout.default()
    if not ground.healthy(layout):
        progress("starting the proving ground")
        ground.up(layout)
    programs = ground_programs(layout)
    bin_dir, conf = str(programs.bin_dir), str(layout.slurm_conf)
    room = _room(bin_dir, conf)
    if room < jobs:
        progress(f"only {room:,} job records free under MaxJobCount: queueing {room:,}")
    started = time.monotonic()
    try:
        queued = _submit(str(programs.bin_dir / "sbatch"), conf, min(jobs, room))
        progress(f"{queued:,} jobs held in {time.monotonic() - started:.0f}s")
        reads = []
        for _ in range(2):
            reads.append(_read("json", _JSON_READ, bin_dir, conf))
            reads.append(_read("lines", _LINES_READ, bin_dir, conf))
        return queued, reads
    finally:
        subprocess.run(
            [str(programs.bin_dir / "scancel"), "--name", JOB_NAME],
            env={**os.environ, "SLURM_CONF": conf},
            check=False,
            timeout=300,
        )


def table_lines(queued: int, reads: list[Read]) -> list[tuple[str, str, str, str]]:
    def best(how: str) -> Read:
        return min((r for r in reads if r.how == how), key=lambda r: r.maxrss_kib)

    ours, theirs = best("lines"), best("json")
    return [
        (
            f"failure path: jobs of one failing node, {queued:,} jobs queued (peak RSS)",
            f"{ours.maxrss_kib / 1024:.0f} MiB ({ours.bytes:,} B read)",
            f"{theirs.maxrss_kib / 1024:.0f} MiB ({theirs.bytes:,} B, {theirs.listed:,} jobs "
            "listed: squeue --json)",
            f"{ours.maxrss_kib / theirs.maxrss_kib:.2f}x",
        )
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=JOBS, help=f"jobs to queue (default {JOBS})")
    args = parser.parse_args(argv)
    queued, reads = measure(args.jobs)
    for line in table_lines(queued, reads):
        print(" | ".join(line))
    print(NOTE)
    return 0


if __name__ == "__main__":
    sys.exit(main())
