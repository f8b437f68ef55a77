"""Pod-state patches at scale (issue 13): at most one patch per pod per transition, counted.

``make bench`` runs it as a row; alone: ``sudo .venv/bin/python dev/bench/pod_state_patches.py
--nodes 1000`` (root, the proving ground; started when absent).

It brings up dev/bench/chaos.py's second Slurm cluster (its own slurmctld with ``chaos-[0-N]``
CLOUD nodes backed by kwok pods, its own bridge serving metrics on a free port, namespace
``skb-chaos``), no faults, no jobs, then runs four phases, each ended once the counts stopped
changing for at least 3 reconcile passes:

1. power up all N (``state=power_up``): pods are created and run on kwok; the nodes stay
   POWERING_UP (no slurmd): label and condition appear;
2. ``state=drain reason=bench`` on all N (a POWERING_UP node stays ``powering-up``: power
   transitions win in bridge/domain/pod_slurm_state.py, so no label should change). No Slurm
   22.05 transition changes the word of a POWERING_UP node while its pod stays: that takes a
   slurmd registering (node_mgr.c clears POWERING_UP only then, or on a power down), and kwok
   pods run none (``down`` keeps the flag too);
3. quiet: nothing done; no patch expected;
4. power down (``power_down_force``): pods deleted; no patch expected. Slurm first clears
   POWERING_UP and queues the power down (IDLE+DRAIN+NOT_RESPONDING+POWER_DOWN, about a second,
   until its power-save thread suspends the node): the word changes there, but the pod is on its
   way out, so the bridge leaves it (a pass in that second patched all 50 pods of a CI smoke).

Counted per phase (the delta of two scrapes): the second bridge's own patches,
``pod_state_patches_total{part="label"|"condition"}`` (each one the apiserver accepted), beside
the kube-apiserver's ``apiserver_request_total`` for PATCH of pods and pods/status (every client,
every response code), the bridge's ``reconcile_actions_total{action="SetPodSlurmState"}`` and its
reconcile passes. "Transitions" are the pods whose label (or ``registered`` condition) differs
between the phase's first and last look; a pod that did not exist before counts as one
(``none → powering-up``).

The verdict reads the bridge's own counts: the apiserver counts every client (kwok patches
pods/status when it marks a pod Running; the main ground's bridge patches its own pods when a job
runs there). The apiserver's count checks the bridge's: a bridge that claims more patches than
the apiserver answered fails the phase. The ground's kwok leaves readiness-gate conditions alone
(dev/proving_ground/kwok-pod-stages.yaml), so the condition has one writer, as on a
kubelet's node.

Exit status: 0 when every ratio is at most 1, every phase without transitions saw no patch and
the apiserver saw at least the bridge's patches; 1 otherwise, 2 when the harness failed.
Everything is removed at the end (as chaos does).
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import socket
import sys
import time
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "dev" / "bench"))

from bridge.domain.pods import CONDITION_REGISTERED, LABEL_SLURM_STATE

CHUNK = 100
QUIET_PASSES = 3
APISERVER_METRIC = "apiserver_request_total"
BRIDGE_ACTIONS = "slurm_k8s_bridge_reconcile_actions_total"
BRIDGE_PASSES = "slurm_k8s_bridge_reconcile_pass_seconds_count"
BRIDGE_PATCHES = "slurm_k8s_bridge_pod_state_patches_total"
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')

#: A pod's shown state: (label word or None, registered condition status or None).
Shown = tuple[str | None, str | None]


def progress(message: str) -> None:
    print(f"[pod-state-patches {time.strftime('%H:%M:%S')}] {message}", flush=True)


# ------------------------------------------------------------------ pure helpers (unit-tested)
def sample_sum(text: str, name: str, labels: Mapping[str, str]) -> float:
    """The sum of the samples of metric ``name`` (Prometheus text format) whose labels include
    ``labels`` (a missing label counts as ``""``, as Prometheus reads it)."""
    total = 0.0
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if match is None or match.group(1) != name:
            continue
        found = {
            k: v.replace('\\"', '"').replace("\\\\", "\\")
            for k, v in _LABEL.findall(match.group(2) or "")
        }
        if all(found.get(k, "") == v for k, v in labels.items()):
            total += float(match.group(3))
    return total


def shown_states(pods: Sequence[Mapping[str, Any]]) -> dict[str, Shown]:
    """Pod name → what it shows of Slurm, for pods not being deleted."""
    shown: dict[str, Shown] = {}
    for pod in pods:
        meta = pod["metadata"]
        if meta.get("deletionTimestamp"):
            continue
        conditions = (pod.get("status") or {}).get("conditions") or []
        registered = next(
            (c.get("status") for c in conditions if c.get("type") == CONDITION_REGISTERED), None
        )
        shown[meta["name"]] = ((meta.get("labels") or {}).get(LABEL_SLURM_STATE), registered)
    return shown


def transitions(before: Mapping[str, Shown], after: Mapping[str, Shown]) -> tuple[int, int]:
    """(label, condition) transitions: pods whose label / condition differs from before (a pod
    new since then counts from nothing)."""
    labels = conditions = 0
    for name, (word, registered) in after.items():
        was_word, was_registered = before.get(name, (None, None))
        labels += word != was_word
        conditions += registered != was_registered
    return labels, conditions


def per_transition(patches: float, transitions_seen: int) -> float | None:
    """Patches per pod per transition; None when nothing changed (then any patch is too many)."""
    return patches / transitions_seen if transitions_seen else None


def within_budget(patches: float, transitions_seen: int) -> bool:
    """At most one patch per pod per transition; none at all without a transition."""
    ratio = per_transition(patches, transitions_seen)
    return patches == 0 if ratio is None else ratio <= 1


@dataclass(frozen=True)
class Counters:
    """One scrape: PATCH requests the apiserver answered (every client), the bridge's own
    label and condition patches, its SetPodSlurmState actions and its passes."""

    label_patches: float
    status_patches: float
    bridge_label_patches: float
    bridge_condition_patches: float
    state_actions: float
    passes: float

    def minus(self, earlier: Counters) -> Counters:
        return Counters(
            self.label_patches - earlier.label_patches,
            self.status_patches - earlier.status_patches,
            self.bridge_label_patches - earlier.bridge_label_patches,
            self.bridge_condition_patches - earlier.bridge_condition_patches,
            self.state_actions - earlier.state_actions,
            self.passes - earlier.passes,
        )

    def writes(self) -> tuple[float, ...]:
        """Every write count (a phase settles once none of them moves)."""
        return (
            self.label_patches,
            self.status_patches,
            self.bridge_label_patches,
            self.bridge_condition_patches,
            self.state_actions,
        )


def counters(apiserver_text: str, bridge_text: str) -> Counters:
    """The counters of one apiserver scrape and one bridge scrape."""
    patch = {"verb": "PATCH", "resource": "pods"}
    return Counters(
        sample_sum(apiserver_text, APISERVER_METRIC, {**patch, "subresource": ""}),
        sample_sum(apiserver_text, APISERVER_METRIC, {**patch, "subresource": "status"}),
        sample_sum(bridge_text, BRIDGE_PATCHES, {"part": "label"}),
        sample_sum(bridge_text, BRIDGE_PATCHES, {"part": "condition"}),
        sample_sum(bridge_text, BRIDGE_ACTIONS, {"action": "SetPodSlurmState"}),
        sample_sum(bridge_text, BRIDGE_PASSES, {}),
    )


@dataclass(frozen=True)
class Phase:
    """What one phase saw."""

    name: str
    pods: int
    label_transitions: int
    condition_transitions: int
    counted: Counters

    @property
    def bridge_counts_seen(self) -> bool:
        """Whether the apiserver answered at least the patches the bridge counted (a bridge
        metric that overcounted, or a bench reading the wrong series, fails here)."""
        c = self.counted
        return (
            c.bridge_label_patches <= c.label_patches
            and c.bridge_condition_patches <= c.status_patches
        )

    @property
    def ok(self) -> bool:
        c = self.counted
        return (
            self.bridge_counts_seen
            and within_budget(c.bridge_label_patches, self.label_transitions)
            and within_budget(c.bridge_condition_patches, self.condition_transitions)
        )


def _ratio(patches: float, seen: int) -> str:
    ratio = per_transition(patches, seen)
    return f"{patches:.0f} (no transition)" if ratio is None else f"{ratio:.2f}"


def table(phases: Sequence[Phase]) -> str:
    header = (
        "phase",
        "pods",
        "transitions (label/cond.)",
        "bridge patches (label/cond.)",
        "apiserver PATCH pods, pods/status",
        "SetPodSlurmState",
        "per pod per transition (label/cond.)",
        "reconcile passes",
        "ok",
    )
    rows = [
        (
            p.name,
            str(p.pods),
            f"{p.label_transitions}/{p.condition_transitions}",
            f"{p.counted.bridge_label_patches:.0f}/{p.counted.bridge_condition_patches:.0f}",
            f"{p.counted.label_patches:.0f}, {p.counted.status_patches:.0f}",
            f"{p.counted.state_actions:.0f}",
            f"{_ratio(p.counted.bridge_label_patches, p.label_transitions)} / "
            f"{_ratio(p.counted.bridge_condition_patches, p.condition_transitions)}",
            f"{p.counted.passes:.0f}",
            "yes" if p.ok else ("NO" if p.bridge_counts_seen else "NO (apiserver saw fewer)"),
        )
        for p in phases
    ]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True))
        for row in [header, tuple("-" * w for w in widths), *rows]
    )


def table_lines(phases: Sequence[Phase], nodes: int) -> list[tuple[str, str, str, str]]:
    """``make bench`` rows (what, figure, baseline, ratio): one per phase."""
    lines = []
    for p in phases:
        c = p.counted
        label = _ratio(c.bridge_label_patches, p.label_transitions)
        condition = _ratio(c.bridge_condition_patches, p.condition_transitions)
        lines.append(
            (
                f"pod-state patches at {nodes:,} kwok nodes: {p.name}",
                f"bridge {c.bridge_label_patches:.0f} label + {c.bridge_condition_patches:.0f} "
                f"condition (apiserver {c.label_patches:.0f} + {c.status_patches:.0f}), "
                f"{p.label_transitions}/{p.condition_transitions} transitions",
                "<= 1 patch per pod per transition (issue 13)",
                f"{label} / {condition}{'' if p.ok else ' OVER'}",
            )
        )
    return lines


NOTE = """Pod-state patch rows (dev/bench/pod_state_patches.py): chaos.py's second cluster without
faults; the bridge's own label and condition patches (pod_state_patches_total), delta per phase,
checked against the kube-apiserver's PATCH count of pods and pods/status (every client, kwok
included); ratio = the bridge's patches per pod per transition, label / condition; "(no
transition)" shows the patches of a phase where nothing changed."""


# ------------------------------------------------------------------ the run (proving ground)
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class PatchCount:
    """chaos.py's Harness without faults, plus the scrapes and the phases."""

    def __init__(self, args: argparse.Namespace) -> None:
        import chaos

        self.chaos = chaos
        # No storm: ResumeTimeout (window + 90 s) must outlast every phase while nodes stay up.
        harness_args = argparse.Namespace(
            seed=1,
            nodes=args.nodes,
            storm_seconds=4 * args.phase_timeout,
            faults_per_round=0,
            fault_seconds=0,
        )
        self.harness = chaos.Harness(harness_args)
        self.port = free_port()
        self.harness.bridge_settings = {"metrics_address": f"127.0.0.1:{self.port}"}
        self.names = self.harness.kwok_nodes[: args.nodes]
        self.timeout = args.phase_timeout

    def scrape(self) -> Counters:
        apiserver = self.harness.kubectl("get", "--raw", "/metrics", timeout=30)
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=10) as r:
            bridge = r.read().decode()
        return counters(apiserver, bridge)

    def shown(self) -> dict[str, Shown]:
        while (pods := self.harness.pods()) is None:
            time.sleep(1)
        return shown_states(pods)

    def scontrol(self, *state: str) -> None:
        for start in range(0, len(self.names), CHUNK):
            names = ",".join(self.names[start : start + CHUNK])
            done = self.harness.slurm("/usr/bin/scontrol", "update", f"nodename={names}", *state)
            if done.returncode != 0:
                progress(f"scontrol update {' '.join(state)}: {done.stderr.strip()}")

    def settle(self, ready: Any) -> Counters:
        """Wait until ``ready(shown)`` and no counter moved for QUIET_PASSES reconcile passes."""
        deadline = time.monotonic() + self.timeout
        last = self.scrape()
        quiet_since = last.passes
        while time.monotonic() < deadline:
            time.sleep(self.chaos.RECONCILE_S)
            now = self.scrape()
            moved = now.writes() != last.writes()
            shown = self.shown()
            if moved or not ready(shown):
                quiet_since = now.passes
                progress(
                    f"  {len(shown)} pods; so far the bridge patched "
                    f"{now.bridge_label_patches:.0f} labels and "
                    f"{now.bridge_condition_patches:.0f} conditions (apiserver, all clients: "
                    f"{now.label_patches:.0f} pods, {now.status_patches:.0f} pods/status PATCH)"
                )
            last = now
            if now.passes - quiet_since >= QUIET_PASSES:
                return now
        raise RuntimeError(f"not settled within {self.timeout:.0f}s")

    def phase(self, name: str, act: Any, ready: Any) -> Phase:
        progress(f"phase {name}: starting")
        before_shown, before = self.shown(), self.scrape()
        act()
        after = self.settle(ready)
        after_shown = self.shown()
        labels, conditions = transitions(before_shown, after_shown)
        phase = Phase(
            name, max(len(before_shown), len(after_shown)), labels, conditions, after.minus(before)
        )
        progress(f"phase {name}: done: {phase}")
        return phase

    def run(self) -> list[Phase]:
        self.harness.setup()
        count = len(self.names)
        return [
            self.phase(
                "1 power_up",
                lambda: self.scontrol("state=power_up"),
                lambda shown: len(shown) == count,
            ),
            self.phase(
                "2 drain", lambda: self.scontrol("state=drain", "reason=bench"), lambda _: True
            ),
            self.phase("3 quiet", lambda: None, lambda _: True),
            self.phase(
                "4 power_down_force",
                lambda: self.scontrol("state=power_down_force"),
                lambda shown: not shown,
            ),
        ]


class HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """The module's description as written, and every option's default."""


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="dev/bench/pod_state_patches.py",
        description=__doc__,
        epilog="Needs root and the proving ground (started when absent); shares it with "
        "dev/bench/chaos.py's namespace and ports: do not run both at once.",
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--nodes", type=int, default=1000, help="kwok-backed CLOUD nodes")
    parser.add_argument(
        "--phase-timeout", type=float, default=900, help="longest wait for a phase to settle (s)"
    )
    args = parser.parse_args(argv)
    if args.nodes < 1:
        parser.error("--nodes must be >= 1")
    return args


def measure(args: argparse.Namespace) -> list[Phase]:
    """The four phases on a fresh second cluster, removed again afterwards."""
    count = PatchCount(args)
    try:
        return count.run()
    finally:
        count.harness.cleanup(keep_logs=False)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if os.geteuid() != 0:
        print("pod_state_patches: run as root (slurmctld, /etc/hosts)", file=sys.stderr)
        return 2

    def interrupted(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, interrupted)
    try:
        phases = measure(args)
    except (Exception, KeyboardInterrupt) as e:
        progress(f"harness failed: {e!r}")
        return 2
    print(table(phases), flush=True)
    return 0 if all(p.ok for p in phases) else 1


if __name__ == "__main__":
    sys.exit(main())
