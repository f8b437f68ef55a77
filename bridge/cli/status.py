"""``slurm-k8s-bridge status``: Slurm's and Kubernetes' views of each node, filtered, watched or
as JSON, with an exit status that says whether a node is stuck (see :mod:`bridge.domain.stuck`). The
report itself (table, summary, JSON) is :mod:`bridge.cli.status_report`.

The loop takes its clock, its sleep and its fetch as arguments, so that tests drive it without a
bridge or a terminal.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, TextIO

from bridge.cli.status_report import StatusOptions, iso_utc, render
from bridge.domain.circuit import BreakerState
from bridge.domain.gang_mode import GangMode
from bridge.domain.hostlist import expand
from bridge.domain.leadership import LeaderState
from bridge.domain.nodes import SUFFIX_FLAGS, SlurmNode
from bridge.domain.results import NodeStatus
from bridge.domain.stuck import DEFAULT_AFTER, POD_PHASES, Sighting, track
from bridge.errors import BridgeError, InvalidInput

if TYPE_CHECKING:
    from bridge.rpc.client import BridgeClient

EXIT_OK, EXIT_STUCK, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3

EPILOG = f"""\
--state matches a node's Slurm state or its pod's phase, case-insensitively: a sinfo state
(idle, alloc, down, drain, ... or with its suffix: idle~, alloc#), a Slurm flag (powered_down,
powering_up, powering_down, power_down, not_responding, drain) or a pod phase
({", ".join(POD_PHASES)}).

A node is stuck when Slurm and Kubernetes disagree for longer than --stuck-after: Slurm powering
it up with no pod, a pod Pending (or Running without slurmd registering), a pod left on a
powered-down node; at once when its pod Failed or is Unknown, or Slurm holds it DOWN or DRAIN
with a "k8s:" reason (or Slurm's "ResumeTimeout reached"). Cases without a clock of their own (no
pod, a pod on a powered-down node) are timed only under --watch, from when it first saw them.

exit status:
  {EXIT_OK}  no node stuck (under --watch: stopped with Ctrl-C)
  {EXIT_STUCK}  a node is stuck (listed in the last line, "stuck: N node(s): ...")
  {EXIT_USAGE}  usage: a bad option, an unknown pool or state, a hostlist naming no node
  {EXIT_UNREACHABLE}  no status: the bridge could not be reached or could not answer

examples:
  slurm-k8s-bridge status                    # the nodes that are doing something
  slurm-k8s-bridge status --pool gpu --state down --state pending
  slurm-k8s-bridge status --node 'cpu-[0-7]' --watch
  slurm-k8s-bridge status -q                 # cron: prints only stuck nodes, exit 1 if any
  slurm-k8s-bridge status --json             # one JSON document for scripts
"""

# Slurm's base node states (what sinfo abbreviates; DRAIN is a flag but reads as a state).
_BASE_STATES = frozenset(
    {"IDLE", "ALLOCATED", "MIXED", "COMPLETING", "DOWN", "FUTURE", "UNKNOWN", "ERROR"}
)
_FLAG_WORDS = frozenset({*SUFFIX_FLAGS.values(), "DRAIN"})


def add_status_parser(sub: Any) -> argparse.ArgumentParser:
    """The ``status`` subcommand's parser (``sub`` is the main parser's subparsers)."""
    p: argparse.ArgumentParser = sub.add_parser(
        "status",
        help="Slurm state and pod state of each node, side by side; exit 1 if one is stuck",
        description="Slurm's and Kubernetes' views of each node of the bridge's pools, with "
        "ages; a summary by pool and Slurm state; the nodes that are stuck.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("hostlist", nargs="?", help="only these nodes (same as --node)")
    p.add_argument(
        "--node",
        action="append",
        default=[],
        metavar="HOSTLIST",
        help="only these nodes (repeatable)",
    )
    p.add_argument(
        "--pool", action="append", default=[], metavar="NAME", help="only this pool (repeatable)"
    )
    p.add_argument(
        "--state",
        action="append",
        default=[],
        metavar="STATE",
        help="only nodes in this Slurm state or pod phase (repeatable; see below)",
    )
    p.add_argument(
        "-a", "--all", action="store_true", help="include idle~ nodes with no pod in the table"
    )
    p.add_argument(
        "--stuck-after",
        type=_positive,
        default=DEFAULT_AFTER.total_seconds(),
        metavar="SECONDS",
        help="how long the two views may disagree before a node is stuck (default %(default)g)",
    )
    out = p.add_mutually_exclusive_group()
    out.add_argument(
        "--json",
        action="store_true",
        help="one JSON document (nodes, summary, stuck); under --watch one per line",
    )
    out.add_argument(
        "-q", "--quiet", action="store_true", help="print only the stuck nodes, one per line"
    )
    p.add_argument(
        "-w",
        "--watch",
        nargs="?",
        const=2.0,
        type=_positive,
        metavar="SECONDS",
        help="redraw every SECONDS (default 2) until Ctrl-C",
    )
    p.add_argument("--socket", help="bridge address: unix:/path or host:port")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds (default 10)")
    return p


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from e
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be more than 0 seconds: {text!r}")
    return value


# --- Options and filters -----------------------------------------------------------------------


def options_from_args(args: argparse.Namespace) -> StatusOptions:
    """Check and expand the command line; :class:`InvalidInput` names what is wrong."""
    hostlists = tuple(h for h in ([args.hostlist] if args.hostlist else []) + args.node if h)
    for word in args.state:
        if not known_state(word):
            raise InvalidInput(
                f"unknown state {word!r}: not a Slurm state, Slurm flag or pod phase (see --help)"
            )
    names = frozenset(n for h in hostlists for n in expand(h)) if hostlists else None
    return StatusOptions(
        pools=frozenset(args.pool),
        states=tuple(args.state),
        nodes=names,
        hostlists=hostlists,
        all=args.all,
        json=args.json,
        quiet=args.quiet,
        stuck_after=timedelta(seconds=args.stuck_after),
        watch=args.watch,
    )


def _word(text: str) -> str:
    return text.strip().replace("-", "_").replace(" ", "_").upper()


def known_state(word: str) -> bool:
    """Whether ``--state word`` names a Slurm state, Slurm flag or pod phase."""
    w = _word(word)
    if w in _FLAG_WORDS or w in (p.upper() for p in POD_PHASES):
        return True
    node = SlurmNode.from_display_state("", word.strip().lower())
    return node.state in _BASE_STATES


def state_matches(row: NodeStatus, word: str) -> bool:
    """Whether ``row`` is in state ``word`` (see :func:`known_state`): its pod phase, a flag
    its Slurm state carries, or its Slurm state with or without the suffix asked for."""
    w = _word(word)
    if w == row.pod_phase.upper():
        return True
    if not row.slurm_state:
        return False
    node = row.slurm_view
    if w in _FLAG_WORDS:
        return w in node.flags
    want = SlurmNode.from_display_state("", word.strip().lower())
    return (
        want.state == node.state and want.flags <= node.flags and want.is_drained == node.is_drained
    )


def select(rows: Sequence[NodeStatus], opts: StatusOptions) -> list[NodeStatus]:
    """The rows the filters keep; :class:`InvalidInput` for a pool or hostlist the bridge does
    not have (a typo would otherwise look like a healthy, empty pool)."""
    known_pools = {r.pool for r in rows}
    unknown = sorted(opts.pools - known_pools)
    if unknown:
        pools = ", ".join(sorted(p for p in known_pools if p)) or "none"
        raise InvalidInput(f"unknown pool {', '.join(map(repr, unknown))} (pools: {pools})")
    if opts.nodes is not None and not opts.nodes & {r.node for r in rows}:
        raise InvalidInput(f"no node of the bridge in {' '.join(opts.hostlists)}")
    return [
        r
        for r in rows
        if (not opts.pools or r.pool in opts.pools)
        and (opts.nodes is None or r.node in opts.nodes)
        and (not opts.states or any(state_matches(r, s) for s in opts.states))
    ]


# --- Running -------------------------------------------------------------------------------------

Fetch = Callable[[], Sequence[NodeStatus]]


def _print(out: TextIO, text: str) -> None:
    if text:
        print(text, file=out)
    out.flush()


def status_once(opts: StatusOptions, fetch: Fetch, out: TextIO, err: TextIO, now: datetime) -> int:
    """One ``status``: 0, 1 (stuck), 2 (usage) or 3 (no answer)."""
    try:
        rows = fetch()
    except BridgeError as e:
        print(f"slurm-k8s-bridge status: {e}", file=err)
        return EXIT_UNREACHABLE
    try:
        selected = select(rows, opts)
    except InvalidInput as e:
        print(f"slurm-k8s-bridge status: {e}", file=err)
        return EXIT_USAGE
    text, stuck = render(selected, opts, now)
    _print(out, text)
    return EXIT_STUCK if stuck else EXIT_OK


def status_watch(
    opts: StatusOptions,
    fetch: Fetch,
    out: TextIO,
    err: TextIO,
    *,
    clock: Callable[[], datetime],
    sleep: Callable[[float], None],
    is_tty: bool,
) -> int:
    """Redraw every ``opts.watch`` seconds until Ctrl-C (then 0); a bridge that does not
    answer is reported and asked again next time. Nodes are timed from when they were first
    seen as they are, so cases without a clock of their own are judged too."""
    interval = opts.watch or 2.0
    seen: dict[str, Sighting] = {}
    try:
        while True:
            now = clock()
            if is_tty:
                # Home and clear, as watch(1) does; only a terminal wants the escape codes.
                out.write("\x1b[H\x1b[2J")
                if not opts.json:
                    out.write(f"every {interval:g}s  {iso_utc(now)}  (Ctrl-C to stop)\n\n")
            elif not opts.json:
                out.write(f"--- {iso_utc(now)} ---\n")
            try:
                rows = fetch()
            except BridgeError as e:
                out.flush()
                print(f"slurm-k8s-bridge status: {e} (trying again in {interval:g}s)", file=err)
                err.flush()
            else:
                try:
                    selected = select(rows, opts)
                except InvalidInput as e:
                    print(f"slurm-k8s-bridge status: {e}", file=err)
                    return EXIT_USAGE
                seen = track(seen, selected, now)
                _print(out, render(selected, opts, now, seen)[0])
            sleep(interval)
    except KeyboardInterrupt:
        return EXIT_OK


def paused_pools_note(client: BridgeClient) -> str:
    """One line per paused pool (``pool NAME paused until ...: reason``), with leader election
    on one saying who leads, and one saying whether the bridge gang-schedules; "" when there is
    nothing to say. A bridge that cannot tell (older, no ListPools) is left out silently: the
    table is the answer."""
    try:
        pools, leadership, gang = client.pools_report()
    except BridgeError:
        return ""
    lines = [
        f"pool {b.pool} paused until {iso_utc(b.paused_until)}: {b.last_reason or '-'}"
        for b in pools
        if b.state is BreakerState.OPEN and b.paused_until is not None
    ]
    notes = [*lines, leadership_note(leadership), gang_note(gang)]
    return "\n".join(n for n in notes if n)


def gang_note(mode: GangMode | None) -> str:
    """``gang scheduling: on (scheduling.k8s.io/v1beta1 PodGroup)``, or off and why; "" from a
    bridge that does not say."""
    return "" if mode is None else f"gang scheduling: {mode.describe()}"


def leadership_note(state: LeaderState) -> str:
    """``leader: b-host since 2026-...Z (this bridge, a-host, follows; lease NAME, 1
    failover)``; "" when leader election is off."""
    if not state.enabled:
        return ""
    since = f" since {iso_utc(state.since)}" if state.since is not None else ""
    role = "leads" if state.leading else "follows and writes nothing"
    failovers = f"{state.transitions} failover{'' if state.transitions == 1 else 's'}"
    return (
        f"leader: {state.leader or 'none'}{since} (this bridge, {state.identity}, {role}; "
        f"lease {state.lease}, {failovers})"
    )


def show_status(target: str, args: argparse.Namespace) -> int:
    """``status`` against the bridge at ``target``."""
    from bridge.rpc.client import BridgeClient  # grpc: only for the commands that call the bridge

    try:
        opts = options_from_args(args)
    except InvalidInput as e:
        print(f"slurm-k8s-bridge status: {e}", file=sys.stderr)
        return EXIT_USAGE
    with BridgeClient(target, timeout_s=args.timeout) as client:

        def fetch() -> list[NodeStatus]:
            # Every node, filtered here: an unknown pool is then told from an empty one.
            # Whole seconds on the wire, never 0 (the bridge's "default").
            after_s = max(1, math.ceil(opts.stuck_after.total_seconds()))
            return client.list_nodes("", after_s)

        if opts.watch is None:
            code = status_once(opts, fetch, sys.stdout, sys.stderr, datetime.now(UTC))
            if not (opts.json or opts.quiet) and code in (EXIT_OK, EXIT_STUCK):
                _print(sys.stdout, paused_pools_note(client))
            return code
        return status_watch(
            opts,
            fetch,
            sys.stdout,
            sys.stderr,
            clock=lambda: datetime.now(UTC),
            sleep=time.sleep,
            is_tty=sys.stdout.isatty(),
        )
