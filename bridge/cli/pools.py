"""``pool list``, ``pool status [NAME]`` and ``pool resume NAME``: the pools' circuit breakers
through a running bridge (ListPools, ResumePool)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any, TextIO

from bridge.cli.status_report import iso_utc
from bridge.domain.circuit import PoolBreakerStatus

_HEADER = ("POOL", "BREAKER", "FAILS", "POLICY", "PAUSED UNTIL", "LAST REASON")


def add_pool_parser(sub: Any) -> argparse.ArgumentParser:
    """The ``pool`` subcommand's parser (``sub`` is the main parser's subparsers)."""
    p: argparse.ArgumentParser = sub.add_parser(
        "pool",
        help="the pools' circuit breakers: list them, or resume a paused pool",
        description="A pool whose pods keep failing is paused: its nodes get no pods and go "
        "DOWN with 'k8s: PoolPaused: ...' until the pause ends or 'pool resume NAME'.",
    )
    actions = p.add_subparsers(dest="pool_command", required=True, metavar="ACTION")
    for name, text in (
        ("list", "every pool's circuit breaker, one line each"),
        ("status", "one pool's circuit breaker in detail (every pool's without NAME)"),
        ("resume", "close a paused pool's circuit breaker: its nodes get pods again at once"),
    ):
        a = actions.add_parser(name, help=text)
        if name == "status":
            a.add_argument("pool", nargs="?", metavar="NAME", help="the pool")
        elif name == "resume":
            a.add_argument("pool", metavar="NAME", help="the pool")
        if name != "resume":
            a.add_argument("--json", action="store_true", help="one JSON document")
        a.add_argument("--socket", help="bridge address: unix:/path or host:port")
        a.add_argument("--timeout", type=float, default=10.0, help="seconds (default 10)")
    return p


def _when(moment: datetime | None) -> str:
    return iso_utc(moment) if moment is not None else "-"


def _policy(b: PoolBreakerStatus) -> str:
    if not b.policy.enabled:
        return "off"
    return f"{b.policy.failures} in {b.policy.window_s:g}s, pause {b.policy.pause_s:g}s"


def _fails(b: PoolBreakerStatus) -> str:
    return f"{b.recent_failures}/{b.policy.failures}" if b.policy.enabled else "-"


def pool_table(pools: Sequence[PoolBreakerStatus]) -> str:
    """``pool list``'s table: one line per pool, columns aligned."""
    rows = [_HEADER] + [
        (b.pool, b.state.value, _fails(b), _policy(b), _when(b.paused_until), b.last_reason or "-")
        for b in pools
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(_HEADER) - 1)]
    return "\n".join(
        "  ".join([*(cell.ljust(w) for cell, w in zip(row, widths, strict=False)), row[-1]])
        for row in rows
    )


def pool_details(b: PoolBreakerStatus) -> str:
    """``pool status NAME``: one pool's breaker, a field per line."""
    return "\n".join(
        [
            f"pool:          {b.pool}",
            f"breaker:       {b.state.value}",
            f"policy:        {_policy(b)}",
            f"recent fails:  {_fails(b)}",
            f"paused until:  {_when(b.paused_until)}",
            f"last reason:   {b.last_reason or '-'}",
        ]
    )


def pool_json(pools: Sequence[PoolBreakerStatus]) -> str:
    """The breakers as one JSON document (``--json``)."""
    return json.dumps(
        {
            "pools": [
                {
                    "pool": b.pool,
                    "state": b.state.value,
                    "failures": b.policy.failures,
                    "window_s": b.policy.window_s,
                    "pause_s": b.policy.pause_s,
                    "recent_failures": b.recent_failures,
                    "paused_until": _when(b.paused_until) if b.paused_until else None,
                    "last_reason": b.last_reason,
                }
                for b in pools
            ]
        }
    )


def call_pool(target: str, args: argparse.Namespace, out: TextIO) -> int:
    """``pool list|status|resume`` through the bridge at ``target``; the exit status."""
    from bridge.errors import InvalidInput
    from bridge.rpc.client import BridgeClient  # grpc: only for the commands that call the bridge

    with BridgeClient(target, timeout_s=args.timeout) as client:
        if args.pool_command == "resume":
            pool, was_paused = client.resume_pool(args.pool)
            if was_paused:
                print(f"pool {pool.pool} resumed: breaker {pool.state.value}", file=out)
            else:
                print(f"pool {pool.pool} was not paused: breaker {pool.state.value}", file=out)
            return 0
        pools = client.list_pools()
    if args.pool_command == "status" and args.pool:
        pools = [b for b in pools if b.pool == args.pool]
        if not pools:
            raise InvalidInput(f"pool: {args.pool!r} is not a configured pool")
    if args.json:
        print(pool_json(pools), file=out)
    elif args.pool_command == "status":
        print("\n\n".join(pool_details(b) for b in pools), file=out)
    else:
        print(pool_table(pools), file=out)
    return 0
