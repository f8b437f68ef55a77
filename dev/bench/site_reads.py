"""`make bench`, a site's size (issue 33): one reconcile pass, wall time and bytes read from Slurm,
at a site of 10,000 static nodes and 100 pool nodes, against a real slurmctld.

A throwaway slurmctld of the proving ground's series (its Slurm programs and munged; the ground
is started if absent) with a slurm.conf of its own: cluster ``sitebench`` on port 16817, the
site's static nodes ``site-[0-9999]`` (DOWN, never pinged: no slurmd answers for them) and the
pool's CLOUD nodes ``cpu-[0-99]``, powered down. The bridge's ``BridgeService.reconcile_once``
runs against it with its real ``SlurmCli`` and no pods (a steady state: the pass plans nothing),
two ways in the same run, each pass timed wall clock (``time.perf_counter``, the command's run
included) and its stdout bytes counted:

* ``bridge``: today's read, ``scontrol show nodes <pools' hostlist> --json``;
* ``baseline``: the read before issue 33, ``scontrol show nodes --json`` (every node of the
  site), kept to the pools' nodes afterwards.

``python dev/bench/site_reads.py [--static N] [--runs R]`` alone, or as a row of ``make bench``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "dev"))

from proving_ground import ground
from proving_ground.layout import Layout
from proving_ground.slurm import controller_lines, ground_programs, running_auth
from proving_ground.slurm_series import SlurmPrograms

from bridge.adapters.slurm.cli import SlurmCli
from bridge.config import parse_config
from bridge.domain.nodes import SlurmNode
from bridge.domain.pods import PodView
from bridge.service.use_cases import BridgeService

STATIC = 10_000
QUICK_STATIC = 1_000
POOL_NODES = 100
PORT = 16817
CLUSTER = "sitebench"
#: Passes per way and run; the row reports each run's median, over RUNS runs.
PASSES = 5
RUNS = 3
NOTE = (
    f"Site reads: one reconcile pass (wall, bytes read from Slurm) against a throwaway slurmctld "
    f"of the ground's series with N static nodes and {POOL_NODES} pool nodes, no pods; "
    "baseline: the same pass reading every node (`scontrol show nodes --json`), the read before "
    "issue 33; min/median/max of the runs' medians."
)


def progress(what: str) -> None:
    print(f"  site reads: {what} ...", file=sys.stderr, flush=True)


def render_conf(state_dir: Path, static: int, auth: str) -> str:
    lines = controller_lines(
        f"# A throwaway site of {static:,} static nodes (dev/bench/site_reads.py).",
        cluster=CLUSTER,
        port=PORT,
        state_dir=state_dir,
        log_dir=state_dir,
        slurmd_timeout=0,  # never ping the static nodes (no slurmd answers for them)
        auth=auth,
    )
    return "\n".join(
        [
            *lines,
            "SlurmdPidFile=/var/spool/slurmd/slurmd-%n.pid",
            # Addressed, so slurmctld never waits on a name lookup; DOWN, so nothing runs there.
            f"NodeName=site-[0-{static - 1}] NodeAddr=127.0.0.1 Port=16899 CPUs=1 State=DOWN",
            f"PartitionName=site Nodes=site-[0-{static - 1}] State=UP",
            f"NodeName=cpu-[0-{POOL_NODES - 1}] CPUs=4 RealMemory=4096 State=CLOUD",
            f"PartitionName=cpu Nodes=cpu-[0-{POOL_NODES - 1}] State=UP Default=YES",
            "SuspendTime=600",
            "SuspendProgram=/bin/true",
            "ResumeProgram=/bin/true",
            "",
        ]
    )


class CountingCli(SlurmCli):
    """The bridge's SlurmCli, counting the bytes its commands print."""

    read_bytes = 0

    def _run_once(self, argv: list[str]) -> bytes:
        out = super()._run_once(argv)
        self.read_bytes += len(out)
        return out


class EveryNodeCli(CountingCli):
    """The read before: every node of the cluster, then the asked ones kept."""

    def list_nodes(self, names: Sequence[str] | None = None) -> list[SlurmNode]:
        every = super().list_nodes(None)
        if names is None:
            return every
        wanted = set(names)
        return [n for n in every if n.name in wanted]


class NoPods:
    def list_pods(self) -> tuple[list[PodView], str]:
        return [], "1"

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"steady state should not call pods.{name}")


@dataclass(frozen=True)
class Pass:
    how: str
    wall_s: float
    read_bytes: int


def _passes(how: str, cli: CountingCli, passes: int) -> Pass:
    config = parse_config(
        f"""
cluster_name: {CLUSTER}
kubernetes: {{namespace: slurm}}
slurm: {{conf_server: "127.0.0.1:{PORT}", command_timeout_s: 60}}
pools:
  - name: cpu
    nodes: cpu-[0-{POOL_NODES - 1}]
    cpus: 4
    real_memory_mb: 4096
    image: localhost/slurmd:dev
""",
        "<bench>",
        {},
    )
    service = BridgeService(config, cli, NoPods())
    actions = service.reconcile_once()  # warm-up; also probes the Slurm version
    assert actions == [], f"not a steady state: {actions[:3]}"
    walls, reads = [], []
    for _ in range(passes):
        cli.read_bytes = 0
        started = time.perf_counter()
        service.reconcile_once()
        walls.append(time.perf_counter() - started)
        reads.append(cli.read_bytes)
    return Pass(how, statistics.median(walls), int(statistics.median(reads)))


def _start(programs: SlurmPrograms, conf: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    log = (conf.parent / "slurmctld.out").open("ab")
    ctld = subprocess.Popen(
        [*programs.slurmctld, "-D", "-f", str(conf)],
        env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        pinged = subprocess.run(
            [programs.client("scontrol"), "ping"], env=env, capture_output=True, text=True,
            check=False, timeout=30,
        ).stdout  # fmt: skip
        if "UP" in pinged:
            return ctld
        if ctld.poll() is not None:
            break
        time.sleep(0.5)
    ctld.kill()
    raise RuntimeError(f"the throwaway slurmctld did not answer: see {conf.parent}")


def measure(static: int, runs: int = RUNS, passes: int = PASSES) -> list[Pass]:
    """Start the throwaway site, run ``runs`` rounds of both ways, stop it."""
    layout = Layout.default()
    if not ground.healthy(layout):
        progress("starting the proving ground")
        ground.up(layout)
    programs = ground_programs(layout)
    # Under /tmp: a Slurm root's programs see it (its wrappers bind /tmp in).
    with tempfile.TemporaryDirectory(prefix="skb-site-bench-") as tmp:
        state_dir = Path(tmp)
        (state_dir / "state").mkdir()
        conf = state_dir / "slurm.conf"
        conf.write_text(render_conf(state_dir, static, running_auth(layout)))
        env = {**os.environ, "SLURM_CONF": str(conf)}
        progress(f"slurmctld with {static:,} static + {POOL_NODES} pool nodes")
        ctld = _start(programs, conf, env)
        try:
            results = []
            for run in range(runs):
                progress(f"run {run + 1}/{runs}")
                for how, kind in (("bridge", CountingCli), ("baseline", EveryNodeCli)):
                    cli = kind(str(programs.bin_dir), timeout_s=60.0, conf=str(conf))
                    results.append(_passes(how, cli, passes))
            return results
        finally:
            ctld.terminate()
            try:
                ctld.wait(30)
            except subprocess.TimeoutExpired:
                ctld.kill()
                ctld.wait(10)


def table_lines(static: int, results: Sequence[Pass]) -> list[tuple[str, str, str, str]]:
    def spread(how: str) -> tuple[list[float], int]:
        mine = [p for p in results if p.how == how]
        return sorted(p.wall_s for p in mine), max(p.read_bytes for p in mine)

    ours, our_bytes = spread("bridge")
    theirs, their_bytes = spread("baseline")

    def show(walls: list[float], read: int) -> str:
        ms = [w * 1000 for w in walls]
        return f"{ms[0]:.0f}/{statistics.median(ms):.0f}/{ms[-1]:.0f} ms, {read / 1024:,.0f} KiB"

    return [
        (
            f"reconcile pass at a site: {static:,} static + {POOL_NODES} pool nodes "
            "(wall min/median/max, bytes read)",
            show(ours, our_bytes),
            show(theirs, their_bytes) + " (every node)",
            f"{statistics.median(theirs) / statistics.median(ours):.1f}x faster",
        )
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--static", type=int, default=STATIC, help="the site's static nodes")
    parser.add_argument("--runs", type=int, default=RUNS, help="rounds of both ways")
    args = parser.parse_args(argv)
    for row in table_lines(args.static, measure(args.static, args.runs)):
        print(" | ".join(row))
    print(NOTE)
    return 0


if __name__ == "__main__":
    sys.exit(main())
