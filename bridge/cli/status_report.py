"""The ``status`` report: the table, the summary by pool and state, the stuck line, the JSON
document; pure functions of the rows, the options and the clock (:mod:`bridge.cli.status` runs
them)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from bridge.domain.results import NodeStatus
from bridge.domain.stuck import DEFAULT_AFTER, Sighting, Stuck, find_stuck

# The summary's words, in the order they are listed (busiest first, trouble last).
_SUMMARY_ORDER = (
    "allocated",
    "mixed",
    "completing",
    "idle",
    "powering up",
    "powering down",
    "powered down",
    "draining",
    "drained",
    "down",
    "not in Slurm",
)


@dataclass(frozen=True)
class StatusOptions:
    """What ``status`` was asked for, checked (states) and expanded (hostlists)."""

    pools: frozenset[str] = frozenset()
    states: tuple[str, ...] = ()
    #: None: every node.
    nodes: frozenset[str] | None = None
    hostlists: tuple[str, ...] = ()
    all: bool = False
    json: bool = False
    quiet: bool = False
    stuck_after: timedelta = DEFAULT_AFTER
    #: Seconds between redraws; None: once.
    watch: float | None = None


def _age_seconds(since: datetime | None, now: datetime) -> int | None:
    return None if since is None else max(0, int((now - since).total_seconds()))


def _age(since: datetime | None, now: datetime) -> str:
    seconds = _age_seconds(since, now)
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    return f"{seconds // 3600}h"


def iso_utc(moment: datetime) -> str:
    """``2026-12-03T12:00:00Z``."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def format_status(rows: Sequence[NodeStatus], now: datetime | None = None) -> str:
    """The ``status`` table: Slurm's and Kubernetes' views of each node side by side."""
    now = now or datetime.now(UTC)
    header = ("NODE", "POOL", "SLURM", "POD", "POD IP", "AGE", "REASON")
    table = [header] + [
        (
            r.node,
            r.pool,
            r.slurm_state or "-",
            r.pod_phase or "-",
            r.pod_ip or "-",
            _age(r.since, now),
            r.reason or "",
        )
        for r in rows
    ]
    widths = [max(len(row[i]) for row in table) for i in range(len(header) - 1)]
    # rstrip per line: an empty REASON must not leave trailing blanks (they break diffs and grep).
    return "\n".join(
        (
            "  ".join(cell.ljust(w) for cell, w in zip(row[:-1], widths, strict=True))
            + "  "
            + row[-1]
        ).rstrip()
        for row in table
    )


def state_word(row: NodeStatus) -> str:
    """The summary's word for a node's Slurm state: what it is doing, trouble first."""
    if not row.slurm_state:
        return "not in Slurm"
    node = row.slurm_view
    if node.is_down:
        return "down"
    if node.is_drained:
        return "draining" if node.is_busy else "drained"
    if node.is_powered_down:
        return "powered down"
    if node.is_powering_up:
        return "powering up"
    if node.is_powering_down:
        return "powering down"
    return node.state.lower()


def summary(rows: Iterable[NodeStatus]) -> dict[str, dict[str, int]]:
    """Node counts by pool (sorted) and state word (in :data:`_SUMMARY_ORDER`)."""
    counts: dict[str, Counter[str]] = {}
    for r in rows:
        counts.setdefault(r.pool, Counter())[state_word(r)] += 1
    rank = {w: i for i, w in enumerate(_SUMMARY_ORDER)}
    return {
        pool: dict(sorted(c.items(), key=lambda kv: (rank.get(kv[0], len(rank)), kv[0])))
        for pool, c in sorted(counts.items())
    }


def summary_lines(rows: Iterable[NodeStatus]) -> list[str]:
    """One line per pool: ``cpu: 2 allocated, 6 powered down``."""
    return [
        f"{pool or '(no pool)'}: " + ", ".join(f"{n} {word}" for word, n in words.items())
        for pool, words in summary(rows).items()
    ]


# Busy states: an older-template pod there waits for its jobs before Slurm powers it down.
_BUSY_WORDS = frozenset({"allocated", "mixed", "completing", "draining"})


@dataclass(frozen=True)
class Rollout:
    """One pool's rollout: its pods on the ``template`` it renders now and on older ones."""

    pool: str
    template: str
    pods: int
    current: int
    older: int
    waiting_for_jobs: int

    def as_dict(self) -> dict[str, Any]:
        return {
            "template": self.template,
            "pods": self.pods,
            "current": self.current,
            "older": self.older,
            "waiting_for_jobs": self.waiting_for_jobs,
        }


def rollouts(rows: Iterable[NodeStatus]) -> list[Rollout]:
    """The pools with a pod on an older template (a rollout in progress), sorted by pool."""
    by_pool: dict[str, list[NodeStatus]] = {}
    for r in rows:
        if r.pod_phase and r.pool_template_hash:
            by_pool.setdefault(r.pool, []).append(r)
    found = []
    for pool, pods in sorted(by_pool.items()):
        older = [r for r in pods if r.on_older_template]
        if not older:
            continue
        found.append(
            Rollout(
                pool=pool,
                template=pods[0].pool_template_hash,
                pods=len(pods),
                current=sum(r.template_hash == r.pool_template_hash for r in pods),
                older=len(older),
                waiting_for_jobs=sum(state_word(r) in _BUSY_WORDS for r in older),
            )
        )
    return found


def rollout_lines(rows: Iterable[NodeStatus]) -> list[str]:
    """``rollout cpu: 3/5 pods on template ab12cd34ef; 2 waiting for their jobs``, per pool."""
    return [
        f"rollout {r.pool}: {r.current}/{r.pods} pods on template {r.template}; "
        f"{r.waiting_for_jobs} waiting for their jobs"
        for r in rollouts(rows)
    ]


def stuck_line(stuck: Sequence[Stuck]) -> str:
    """The last line: ``stuck: N node(s): a (why); b (why)`` or ``stuck: none``."""
    if not stuck:
        return "stuck: none"
    return f"stuck: {len(stuck)} node(s): " + "; ".join(f"{s.node} ({s.why})" for s in stuck)


def as_json(
    rows: Sequence[NodeStatus], stuck: Sequence[Stuck], now: datetime, opts: StatusOptions
) -> dict[str, Any]:
    """The ``--json`` document; keys in a fixed order, absent values ``null``."""
    return {
        "time": iso_utc(now),
        "stuck_after_s": int(opts.stuck_after.total_seconds()),
        "nodes": [
            {
                "node": r.node,
                "pool": r.pool or None,
                "slurm_state": r.slurm_state or None,
                "pod_phase": r.pod_phase or None,
                "pod_ip": r.pod_ip or None,
                "age_s": _age_seconds(r.since, now),
                "since": iso_utc(r.since) if r.since else None,
                "reason": r.reason or None,
                "template_hash": r.template_hash or None,
            }
            for r in rows
        ],
        "summary": summary(rows),
        "stuck": [{"node": s.node, "pool": s.pool or None, "why": s.why} for s in stuck],
        "rollouts": {r.pool: r.as_dict() for r in rollouts(rows)},
    }


def judged_stuck(
    rows: Sequence[NodeStatus],
    now: datetime,
    opts: StatusOptions,
    seen: Mapping[str, Sighting] | None = None,
) -> list[Stuck]:
    """The stuck nodes among ``rows``: as the bridge judged them (it times each node over its
    calls), or, for an older bridge's answer, judged here from the rows and ``seen``."""
    if rows and all(r.stuck is not None for r in rows):
        return [Stuck(r.node, r.pool, r.stuck) for r in rows if r.stuck]
    return find_stuck(rows, now, opts.stuck_after, seen)


def render(
    rows: Sequence[NodeStatus],
    opts: StatusOptions,
    now: datetime,
    seen: Mapping[str, Sighting] | None = None,
) -> tuple[str, list[Stuck]]:
    """One frame of output for the selected ``rows`` and the stuck nodes among them."""
    stuck = judged_stuck(rows, now, opts, seen)
    if opts.json:
        indent = None if opts.watch is not None else 2  # watch: one document per line
        return json.dumps(as_json(rows, stuck, now, opts), indent=indent), stuck
    if opts.quiet:
        return "\n".join(f"{s.node}  {s.why}" for s in stuck), stuck
    stuck_nodes = {s.node for s in stuck}
    if opts.all or opts.states:
        shown = list(rows)
    else:
        # An idle~ node with no pod is the resting state of most nodes: only counted.
        shown = [
            r
            for r in rows
            if r.pod_phase or r.reason or not r.slurm_state.endswith("~") or r.node in stuck_nodes
        ]
    lines = [format_status(shown, now)]
    hidden = len(rows) - len(shown)
    if hidden:
        lines.append(f"({hidden} more node(s) powered down with no pod; --all lists them)")
    lines += summary_lines(rows)
    lines += rollout_lines(rows)
    lines.append(stuck_line(stuck))
    return "\n".join(lines), stuck
