"""The subcommands that call a running bridge over its socket: ``resume``, ``suspend``,
``resume-fail`` (what the hooks do, by hand) and ``status``."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from bridge.domain.results import NodeResult, NodeStatus, Outcome


def _age(since: datetime | None) -> str:
    if since is None:
        return "-"
    seconds = int((datetime.now(UTC) - since).total_seconds())
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    return f"{seconds // 3600}h"


def format_status(rows: Sequence[NodeStatus]) -> str:
    """The ``status`` table: Slurm's and Kubernetes' views of each node side by side."""
    header = ("NODE", "POOL", "SLURM", "POD", "POD IP", "AGE", "REASON")
    table = [header] + [
        (
            r.node,
            r.pool,
            r.slurm_state or "-",
            r.pod_phase or "-",
            r.pod_ip or "-",
            _age(r.since),
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


def _print_results(results: Sequence[NodeResult]) -> int:
    failed = 0
    for r in results:
        if r.outcome in (Outcome.OK, Outcome.ACCEPTED):
            print(f"{r.node}: {r.outcome.value}")
        else:
            failed += 1
            print(f"{r.node}: {r.outcome.value} ({r.error_class.value}): {r.message}")
    return 1 if failed else 0


def call_hook(target: str, args: argparse.Namespace) -> int:
    """``resume``, ``suspend`` or ``resume-fail`` HOSTLIST through the bridge at ``target``."""
    from bridge.client import BridgeClient

    with BridgeClient(target, timeout_s=args.timeout) as client:
        if args.command == "resume":
            resume_file = Path(args.resume_file).read_text() if args.resume_file else ""
            results = client.resume_nodes(args.hostlist, resume_file, wait=args.wait)
            return _print_results(results)
        if args.command == "suspend":
            return _print_results(client.suspend_nodes(args.hostlist))
        return _print_results(client.resume_failed(args.hostlist))


def show_status(target: str, args: argparse.Namespace) -> int:
    """``status``: the bridge at ``target`` lists its nodes; idle~ ones without a pod are
    summed up unless ``--all``."""
    from bridge.client import BridgeClient

    with BridgeClient(target, timeout_s=args.timeout) as client:
        rows = client.list_nodes(args.hostlist or "")
    if args.all:
        print(format_status(rows))
    else:
        active = [r for r in rows if r.pod_phase or r.reason or not r.slurm_state.endswith("~")]
        print(format_status(active))
        idle = len(rows) - len(active)
        if idle:
            print(f"({idle} more node(s) powered down with no pod; --all lists them)")
    return 0
