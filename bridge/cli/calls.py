"""The subcommands that call a running bridge over its socket: ``resume``, ``suspend`` and
``resume-fail`` (what the hooks do, by hand). ``status`` is in :mod:`bridge.cli.status`."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from bridge.domain.results import NodeResult, Outcome


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
    from bridge.rpc.client import BridgeClient

    with BridgeClient(target, timeout_s=args.timeout) as client:
        if args.command == "resume":
            resume_file = Path(args.resume_file).read_text() if args.resume_file else ""
            results = client.resume_nodes(args.hostlist, resume_file, wait=args.wait)
            return _print_results(results)
        if args.command == "suspend":
            return _print_results(client.suspend_nodes(args.hostlist))
        return _print_results(client.resume_failed(args.hostlist))
