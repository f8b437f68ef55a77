"""`make bench`: the bridge's numbers, each as a ratio against a baseline measured in the same run.

1. hook: a real resume hook (sh wrapper, then its static Go client or Python, gRPC over a Unix
   socket to a real server with a no-op use case): Go vs. the same hook with Python, and Python
   vs. the baseline of starting the same Python and importing grpc.
2. hostlist: our expand() in-process vs. `scontrol show hostnames` for the same expression.
3. reconcile pass (dev/bench/reconcile_pass.py): CPU and peak RSS at 1k / 10k / 50k CLOUD nodes of
   Slurm 22.05 and 24.11, Slurm read through a stub command, vs. the same pass reading Slurm's
   output as text with json.loads (the read before issue 11).
4. scale (dev/bench/resume_scale.py; needs the proving ground, started if absent; left out by
   --no-ground): resume and suspend of 1k / 5k / 10k kwok-backed nodes through the real hooks
   and a second bridge until all pods exist / are gone, beside a lean client (the apiserver's
   pace), the official client and a StatefulSet (Parallel) doing the same in the same run; and
   the resume hook's p50/p95 at 1 and 1,000 nodes against that bridge.
5. pod-state patches (dev/bench/pod_state_patches.py; the proving ground and root; left out by
   --no-ground): label and condition PATCH requests per pod per Slurm transition at 1,000
   kwok-backed nodes (issue 13), from the kube-apiserver's own request counter.
6. failure-path job read (dev/bench/failure_jobs.py; the proving ground; left out by
   --no-ground): peak RSS and bytes of reading one failing node's jobs with 9,000 jobs queued in
   the real slurmctld, vs. `squeue --json` decoded whole (the read before issue 29 item 12).
7. site reads (dev/bench/site_reads.py; the proving ground; left out by --no-ground): one
   reconcile pass's wall time and bytes read against a throwaway slurmctld with 10,000 static
   and 100 pool nodes, vs. the same pass reading every node (the read before issue 33).

``--quick``: reconcile at 1k nodes, scale and pod-state patches at 200 nodes, 200 queued jobs,
a site of 1,000 static nodes, fewer hook samples (a smoke run).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "dev"))

import failure_jobs
import pod_state_patches
import reconcile_pass
import resume_scale
import site_reads

from bridge.api import build_server
from bridge.domain.circuit import PoolBreakerStatus
from bridge.domain.gang_mode import GANG_MODE_OFF, GangMode
from bridge.domain.hostlist import expand
from bridge.domain.results import ErrorClass, NodeResult, NodeStatus, Outcome
from bridge.errors import InvalidInput

PYTHON = str(ROOT / ".venv" / "bin" / "python")


def median_s(fn: Callable[[], object], runs: int) -> float:
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


class NoOp:
    """A use case that answers at once: the hook's cost without Kubernetes."""

    def resume(self, hostlist: str, resume_file: str, request_id: str) -> list[NodeResult]:
        return [NodeResult(n, Outcome.OK, ErrorClass.NONE) for n in expand(hostlist)]

    def accept_resume(
        self,
        hostlist: str,
        resume_file: str,
        request_id: str,
        *,
        answered: threading.Event | None = None,
    ) -> list[NodeResult]:
        return [NodeResult(n, Outcome.ACCEPTED, ErrorClass.NONE) for n in expand(hostlist)]

    def suspend(self, hostlist: str, request_id: str) -> list[NodeResult]:
        return self.resume(hostlist, "", request_id)

    def resume_failed(self, hostlist: str, request_id: str) -> list[NodeResult]:
        return self.resume(hostlist, "", request_id)

    def node_event(
        self, kind: str, hostlist: str, reason: str, request_id: str
    ) -> list[NodeResult]:
        return self.resume(hostlist, "", request_id)

    def list_nodes(self, hostlist: str, stuck_after: timedelta | None = None) -> list[NodeStatus]:
        return []

    def pool_status(self) -> list[PoolBreakerStatus]:
        return []

    def resume_pool(self, pool: str, request_id: str) -> tuple[PoolBreakerStatus, bool]:
        # As the service answers for a pool it does not have: the bench configures none.
        raise InvalidInput(f"pool: {pool!r} is not a configured pool (the hook bench has none)")

    def gang_scheduling(self) -> GangMode:
        return GANG_MODE_OFF


def bench_hook(runs: int = 20, nodes: int = 3) -> tuple[float, float, float]:
    """Medians of the resume hook (hook.sh) with its Go client, with its Python client, and of
    the Python client's floor (python + import grpc)."""
    with tempfile.TemporaryDirectory(prefix="skb-bench-") as tmp:
        socket_path = f"{tmp}/bridge.sock"
        server = build_server(NoOp(), unix_socket=socket_path)
        server.start()
        try:
            hooks = Path(tmp) / "slurm_plugins"
            hooks.mkdir()
            (hooks / "bin").mkdir()
            for name in ("resume", "hook.sh", "bin/skb-hook"):
                (hooks / name).write_bytes((ROOT / "slurm_plugins" / name).read_bytes())
                (hooks / name).chmod(0o755)
            (hooks / "hooks.env").write_text(
                f"SKB_PYTHON={PYTHON}\nSKB_SOCKET=unix:{socket_path}\nSKB_HOOK_LOG=\n"
            )
            hostlist = f"cpu-[0-{nodes - 1}]"
            resume_file = Path(tmp) / "resume.json"
            resume_file.write_text(
                f'{{"jobs":[{{"job_id":1,"nodes":"{hostlist}"}}],"all_nodes":"{hostlist}"}}'
            )
            env = {
                "PWD": "/",
                "SHLVL": "1",
                "SLURM_RESUME_FILE": str(resume_file),
                "PYTHONPATH": str(ROOT),
            }

            def hook(client: str) -> None:
                subprocess.run(
                    [str(hooks / "resume"), hostlist],
                    env={**env, "SKB_HOOK_CLIENT": client},
                    check=True,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )

            def baseline() -> None:
                subprocess.run([PYTHON, "-P", "-s", "-c", "import grpc"], check=True)

            hook("go")  # warm the page cache once for each
            hook("python")
            return (
                median_s(lambda: hook("go"), runs),
                median_s(lambda: hook("python"), runs),
                median_s(baseline, runs),
            )
        finally:
            server.stop(0)


def bench_hostlist(runs: int = 10) -> tuple[float, float] | None:
    scontrol = "/usr/bin/scontrol"
    if not os.path.exists(scontrol):
        return None
    expression = "rack[0-9]-node[0000-1999]"
    with tempfile.TemporaryDirectory(prefix="skb-bench-") as tmp:
        conf = Path(tmp) / "slurm.conf"
        conf.write_text("ClusterName=bench\nSlurmctldHost=localhost\n")
        env = {**os.environ, "SLURM_CONF": str(conf)}
        ours = median_s(lambda: expand(expression), runs)
        theirs = median_s(
            lambda: subprocess.run(
                [scontrol, "show", "hostnames", expression],
                env=env,
                check=True,
                capture_output=True,
            ),
            runs,
        )
    return ours, theirs


Line = tuple[str, str, str, str]


def print_table(lines: list[Line], notes: list[str]) -> None:
    header: Line = ("what", "figure", "baseline (same run)", "ratio")
    widths = [max(len(line[i]) for line in [header, *lines]) for i in range(4)]
    for line in [header, tuple("-" * w for w in widths), *lines]:
        print("  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)))
    for note in notes:
        print(f"\n{note}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="slurm-k8s-bridge benchmarks")
    parser.add_argument(
        "--quick", action="store_true", help="a smoke run: reconcile at 1k nodes, fewer samples"
    )
    parser.add_argument(
        "--no-ground", action="store_true", help="leave out what needs the proving ground"
    )
    parser.add_argument(
        "--scale-sizes",
        default="",
        help="node counts of the scale rows, comma-separated (default 1000,5000,10000; "
        "--quick: 200)",
    )
    args = parser.parse_args(argv)
    print("slurm-k8s-bridge benchmarks (medians; ratios against a baseline from the same run)\n")
    lines: list[Line] = []
    go_hook, python_hook, python_grpc = bench_hook(runs=5 if args.quick else 20)
    lines.append(
        (
            "hook: resume hook round trip, Go client (hook.sh's default)",
            f"{go_hook * 1000:.1f} ms",
            f"{python_hook * 1000:.0f} ms (the same hook, SKB_HOOK_CLIENT=python)",
            f"{go_hook / python_hook:.2f}x",
        )
    )
    lines.append(
        (
            "hook: resume hook round trip, Python client",
            f"{python_hook * 1000:.0f} ms",
            f"{python_grpc * 1000:.0f} ms (python + import grpc)",
            f"{python_hook / python_grpc:.2f}x",
        )
    )
    hostlist = bench_hostlist()
    if hostlist:
        ours, theirs = hostlist
        lines.append(
            (
                "hostlist: expand 20,000 names",
                f"{ours * 1000:.1f} ms",
                f"{theirs * 1000:.1f} ms (scontrol show hostnames)",
                f"{ours / theirs:.2f}x",
            )
        )
    reconcile_sizes = reconcile_pass.QUICK_SIZES if args.quick else reconcile_pass.SIZES
    lines += reconcile_pass.table_lines(reconcile_pass.measure_rows(reconcile_sizes))
    notes = [reconcile_pass.NOTE]
    if not args.no_ground:
        scale_sizes = [
            int(n)
            for n in (args.scale_sizes or ("200" if args.quick else "1000,5000,10000")).split(",")
        ]
        hooks = [(1, 5), (200, 3)] if args.quick else [(1, 20), (1000, 10)]
        lines += resume_scale.table_lines(resume_scale.run(scale_sizes, hooks))
        notes.append(resume_scale.NOTE)
        nodes = 200 if args.quick else 1000
        if os.geteuid() == 0:
            phases = pod_state_patches.measure(
                pod_state_patches.parse_args(["--nodes", str(nodes)])
            )
            lines += pod_state_patches.table_lines(phases, nodes)
            notes.append(pod_state_patches.NOTE)
        else:
            notes.append(
                "Pod-state patch rows left out: dev/bench/pod_state_patches.py needs root."
            )
        jobs = failure_jobs.QUICK_JOBS if args.quick else failure_jobs.JOBS
        lines += failure_jobs.table_lines(*failure_jobs.measure(jobs))
        notes.append(failure_jobs.NOTE)
        static = site_reads.QUICK_STATIC if args.quick else site_reads.STATIC
        lines += site_reads.table_lines(static, site_reads.measure(static))
        notes.append(site_reads.NOTE)
    print_table(lines, notes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
