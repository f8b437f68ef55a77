"""`make bench` rows: one reconcile pass at 1k / 10k / 50k CLOUD nodes, 20 % of them up.

The Slurm side is real I/O: the bridge's own SlurmCli runs a stub ``scontrol`` (24.11) or
``sinfo`` (22.05, chosen after the stub's ``scontrol --version`` as for a real one) from its
``bin_dir``; the stub
``cat``s a listing generated here in the shape recorded from real daemons
(tests/data/slurm/v*/): every node is a recorded node with its name and address changed, pretty
printed as Slurm prints it (24.11: about 2.4 kB a node). The pods side comes from memory: a list
of N PodViews, as the informer will hand them over (it is not built yet), so the figures leave out
listing pods from the API server.

Each (series, size, path) runs in a child process of its own, so that ru_maxrss is the peak of
that pass alone: the child builds the service, runs one warm-up pass, then times passes with
time.process_time (the bridge's own CPU: the stub's ``cat`` runs in a grandchild and stands in for
Slurm's work). The baseline is the same pass in the same run with Slurm's output read the way it
was before issue 11: decoded to text and ``json.loads`` with the collector running.

Run alone: ``.venv/bin/python dev/bench/reconcile_pass.py [--quick]``.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bridge.adapters.slurm import parse as slurm_json
from bridge.adapters.slurm.cli import SlurmCli
from bridge.config import parse_config
from bridge.domain.nodes import SlurmNode
from bridge.domain.pods import PodView
from bridge.service.use_cases import BridgeService
from bridge.settings import BridgeConfig

RECORDED = {
    "22.05": ROOT / "tests" / "data" / "slurm" / "v22.05" / "sinfo-states.json",
    "24.11": ROOT / "tests" / "data" / "slurm" / "v24.11" / "scontrol-states.json",
}
#: The command each series lists nodes with, as SlurmCli runs it.
LISTING_ARGV = {
    "22.05": ["sinfo", "--json", "--all"],
    "24.11": ["scontrol", "show", "nodes", "--json"],
}
SIZES = (1_000, 10_000, 50_000)
QUICK_SIZES = (1_000,)
UP_FRACTION = 0.2
POOL = "sc"
#: Passes timed per size (after one warm-up pass); the median is reported.
PASSES = {1_000: 10, 10_000: 5, 50_000: 3}
PATHS = ("bridge", "baseline")


# --- What the stub prints -----------------------------------------------------------------------


def _recorded_node(doc: Mapping[str, Any], name: str) -> dict[str, Any]:
    (node,) = [n for n in doc["nodes"] if n["name"] == name]
    return dict(node)


def write_listing(series: str, total: int, path: Path) -> int:
    """A listing of ``total`` CLOUD nodes ``sc-<i>``: every fifth one up (a recorded busy or idle
    node with an address), the others powered down (recorded ``idle~``). Returns its size."""
    recorded = json.loads(RECORDED[series].read_text())
    texts = {}
    for kind, name in (("down", "cloud1"), ("busy", "cloud3"), ("idle", "cloud4")):
        node = _recorded_node(recorded, name)
        node.update(name="@NAME@", hostname="@NAME@", address="@ADDRESS@")
        if kind != "down":
            # What the bridge writes while the pod runs (pod_slurm_state.pod_comment).
            node.update(comment="k8s: pod @NAME@ on kwok-node-0 ip @ADDRESS@")
        # Nested under "nodes": [ as Slurm indents it.
        texts[kind] = "\n".join("    " + line for line in json.dumps(node, indent=2).split("\n"))
    head, tail = json.dumps({**recorded, "nodes": "@NODES@"}, indent=2).split('"@NODES@"')
    # Written node by node: the bench's own memory must not grow with the listing, since a
    # child's peak is measured apart from it anyway.
    with path.open("w") as out:
        out.write(head + "[\n")
        for i in range(total):
            name = f"{POOL}-{i}"
            if is_up(i):
                text = texts["busy" if i % 2 else "idle"].replace("@ADDRESS@", address(i))
            else:
                text = texts["down"].replace("@ADDRESS@", name)
            out.write(("" if i == 0 else ",\n") + text.replace("@NAME@", name))
        out.write("\n  ]" + tail + "\n")
    return path.stat().st_size


def is_up(i: int) -> bool:
    return i % round(1 / UP_FRACTION) == 0


def address(i: int) -> str:
    return f"10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}"


def write_stub_bin(bin_dir: Path, series: str, listing: Path) -> None:
    """scontrol/sinfo that print the listing as the series' real ones would."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    version = ROOT / "tests" / "data" / "slurm" / f"v{series}" / "scontrol-version.txt"
    # SlurmCli asks scontrol --version once, and picks the listing by the answer.
    probe = f'#!/bin/sh\nif [ "$1" = --version ]; then exec cat {version}; fi\n'
    if series == "24.11":
        scripts = {"scontrol": f"{probe}exec cat {listing}\n"}
    else:
        scripts = {
            "scontrol": f"{probe}echo \"scontrol: unrecognized option '--json'\" >&2\nexit 1\n",
            "sinfo": f"#!/bin/sh\nexec cat {listing}\n",
        }
    for name, text in scripts.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)


# --- The child: one service, timed passes -------------------------------------------------------


def config_for(total: int, bin_dir: Path) -> BridgeConfig:
    return parse_config(
        f"""
cluster_name: bench
kubernetes: {{namespace: slurm}}
slurm: {{conf_server: "10.0.0.1:6817", bin_dir: "{bin_dir}", command_timeout_s: 60}}
pools:
  - name: {POOL}
    nodes: {POOL}-[0-{total - 1}]
    cpus: 4
    real_memory_mb: 4096
    image: localhost/slurmd:dev
""",
        "<bench>",
        {},
    )


def peak_rss_kb() -> int:
    """This process's peak RSS since it started: VmHWM of its address space. Not ru_maxrss:
    Linux carries that over from the parent across fork and exec, so a child started by a big
    parent would report the parent's peak."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # not Linux: the best there is


class PodsFromMemory:
    """The pods port as the informer will serve it: N views, no API server."""

    def __init__(self, total: int) -> None:
        started = datetime.now(UTC) - timedelta(hours=1)
        self.pods = [
            PodView(
                name=f"{POOL}-{i}",
                node=f"{POOL}-{i}",
                pool=POOL,
                phase="Running",
                ip=address(i),
                created_at=started,
                deleting=False,
                failure=None,
                host="kwok-node-0",
                uid=f"uid-{i}",
                # What the reconciler put there (the listing's busy and idle nodes).
                slurm_state="allocated" if i % 2 else "idle",
                registered=True,
            )
            for i in range(total)
            if is_up(i)
        ]

    def list_pods(self) -> tuple[list[PodView], str]:
        return list(self.pods), "1"

    def __getattr__(self, name: str) -> Any:
        # Steady state: a pass that wants to change something is a broken bench, not a figure.
        raise AssertionError(f"steady state should not call pods.{name}")


class SlurmReadAsText:
    """The baseline: Slurm's listing read the way it was before issue 11 (stdout decoded to
    text, ``json.loads`` with the collector running), then parsed by today's parser."""

    def __init__(self, series: str, bin_dir: Path) -> None:
        self._argv = [str(bin_dir / LISTING_ARGV[series][0]), *LISTING_ARGV[series][1:]]

    def list_nodes(self, names: Sequence[str] | None = None) -> list[SlurmNode]:
        out = subprocess.run(self._argv, capture_output=True, text=True, check=True).stdout
        nodes = slurm_json.parse_nodes(json.loads(out), " ".join(self._argv))
        if names is None:
            return nodes
        wanted = set(names)  # the stub lists every node; a pass asks for the pool's, all of them
        return [n for n in nodes if n.name in wanted]

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"steady state should not call slurm.{name}")


def child(series: str, total: int, path: str, passes: int, bin_dir: Path) -> dict[str, Any]:
    config = config_for(total, bin_dir)
    slurm: Any = (
        SlurmCli(str(bin_dir), timeout_s=60.0)
        if path == "bridge"
        else SlurmReadAsText(series, bin_dir)
    )
    service = BridgeService(config, slurm, PodsFromMemory(total))
    setup_rss_kb = peak_rss_kb()
    actions = service.reconcile_once()  # warm-up; also probes the Slurm version
    assert actions == [], f"not a steady state: {actions[:3]}"
    samples = []
    for _ in range(passes):
        started = time.process_time()
        service.reconcile_once()
        samples.append(time.process_time() - started)
    return {
        "cpu_s": statistics.median(samples),
        "peak_rss_kb": peak_rss_kb(),
        "setup_rss_kb": setup_rss_kb,
        "nodes": len(slurm.list_nodes()),
    }


# --- The parent: one child per figure -----------------------------------------------------------


@dataclass(frozen=True)
class Sample:
    """One child's figures."""

    cpu_s: float
    peak_rss_mb: float
    setup_rss_mb: float


@dataclass(frozen=True)
class Row:
    """One size of one series: the bridge's pass and the baseline's, measured in the same run."""

    series: str
    nodes: int
    listing_mb: float
    bridge: Sample
    baseline: Sample


def measure(series: str, total: int, path: str, bin_dir: Path, passes: int) -> Sample:
    """Run one child (a fresh interpreter) and read its figures."""
    done = subprocess.run(
        [
            sys.executable,
            str(Path(__file__).resolve()),
            "--child",
            series,
            str(total),
            path,
            str(passes),
            str(bin_dir),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    if done.returncode != 0:
        raise RuntimeError(f"bench child {series} {total} {path} failed: {done.stderr}")
    figures = json.loads(done.stdout)
    if figures["nodes"] != total:
        raise RuntimeError(f"bench child {series} {total} {path} read {figures['nodes']} nodes")
    return Sample(
        cpu_s=figures["cpu_s"],
        peak_rss_mb=figures["peak_rss_kb"] / 1024,
        setup_rss_mb=figures["setup_rss_kb"] / 1024,
    )


def measure_rows(
    sizes: Sequence[int] = SIZES, series: Sequence[str] = ("22.05", "24.11")
) -> list[Row]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="skb-bench-reconcile-") as tmp:
        for version in series:
            for total in sizes:
                listing = Path(tmp) / f"{version}-{total}.json"
                size = write_listing(version, total, listing)
                bin_dir = Path(tmp) / f"bin-{version}-{total}"
                write_stub_bin(bin_dir, version, listing)
                passes = PASSES.get(total, 3)
                samples = {p: measure(version, total, p, bin_dir, passes) for p in PATHS}
                rows.append(Row(version, total, size / 1e6, samples["bridge"], samples["baseline"]))
                listing.unlink()
    return rows


def table_lines(rows: Sequence[Row]) -> list[tuple[str, str, str, str]]:
    """(what, figure, baseline, ratio) per row, for dev/bench/run.py's table."""
    lines = []
    for row in rows:
        size = f"{row.series} {row.nodes // 1000}k nodes"
        lines.append(
            (
                f"reconcile {size} ({row.listing_mb:.1f} MB JSON): CPU per pass",
                f"{row.bridge.cpu_s * 1000:.0f} ms",
                f"{row.baseline.cpu_s * 1000:.0f} ms",
                f"{row.bridge.cpu_s / row.baseline.cpu_s:.2f}x",
            )
        )
        lines.append(
            (
                f"reconcile {size}: peak RSS (RSS before the first pass)",
                f"{row.bridge.peak_rss_mb:.0f} MB ({row.bridge.setup_rss_mb:.0f})",
                f"{row.baseline.peak_rss_mb:.0f} MB ({row.baseline.setup_rss_mb:.0f})",
                f"{row.bridge.peak_rss_mb / row.baseline.peak_rss_mb:.2f}x",
            )
        )
    return lines + growth_lines(rows)


def growth_lines(rows: Sequence[Row]) -> list[tuple[str, str, str, str]]:
    """Linear growth shown as cost per node, largest size against the one before it (the
    smallest is dominated by fixed costs); the "baseline" column is the smaller size here."""
    lines = []
    for series in dict.fromkeys(row.series for row in rows):
        sized = sorted((r for r in rows if r.series == series), key=lambda r: r.nodes)
        if len(sized) < 2:
            continue
        small, large = sized[-2], sized[-1]
        cpu = [r.bridge.cpu_s / r.nodes * 1e6 for r in (large, small)]
        rss = [
            (r.bridge.peak_rss_mb - r.bridge.setup_rss_mb) / r.nodes * 1024 for r in (large, small)
        ]
        what = f"reconcile {series} growth {large.nodes // 1000}k vs {small.nodes // 1000}k"
        lines.append(
            (
                f"{what}: CPU per node",
                f"{cpu[0]:.1f} us",
                f"{cpu[1]:.1f} us",
                f"{cpu[0] / cpu[1]:.2f}x",
            )
        )
        lines.append(
            (
                f"{what}: peak RSS above start per node",
                f"{rss[0]:.1f} kB",
                f"{rss[1]:.1f} kB",
                f"{rss[0] / rss[1]:.2f}x",
            )
        )
    return lines


NOTE = (
    "reconcile: bridge = SlurmCli running a stub scontrol/sinfo that prints recorded-shape JSON "
    "(20 % of the nodes up), pods from memory (as the bridge's watch-fed cache holds them); "
    "baseline = the same pass with Slurm's output read as text and json.loads (the read before "
    "issue 11); "
    "CPU = median time.process_time of a pass; RSS = VmHWM of a child per size"
)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="1k nodes only (a smoke run)")
    parser.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        series, total, path, passes, bin_dir = args.child
        print(json.dumps(child(series, int(total), path, int(passes), Path(bin_dir))))
        return 0
    for line in table_lines(measure_rows(QUICK_SIZES if args.quick else SIZES)):
        print(" | ".join(line))
    print(NOTE)
    return 0


if __name__ == "__main__":
    sys.exit(main())
