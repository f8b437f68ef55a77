"""``slurm-k8s-bridge``: the bridge's one command line (serve, the hook calls, status, tools)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from bridge.config import DEFAULT_PATH, check_config, load_config
from bridge.domain.hostlist import expand
from bridge.domain.results import NodeResult, NodeStatus, Outcome
from bridge.errors import BridgeError

DEFAULT_TARGET = "unix:/run/slurm-k8s-bridge/bridge.sock"


def _config_path(args: argparse.Namespace) -> str:
    return str(args.config or os.environ.get("SKB_CONFIG") or DEFAULT_PATH)


def _target(args: argparse.Namespace) -> str:
    return str(args.socket or os.environ.get("SKB_SOCKET") or DEFAULT_TARGET)


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
        if r.outcome is Outcome.OK:
            print(f"{r.node}: ok")
        else:
            failed += 1
            print(f"{r.node}: {r.outcome.value} ({r.error_class.value}): {r.message}")
    return 1 if failed else 0


def cmd_serve(args: argparse.Namespace) -> int:
    from bridge import app  # grpc server and Kubernetes client: only for serve

    config = load_config(_config_path(args))
    app.configure_logging(args.log_format or config.bridge.log_format)
    return app.serve(config)


def cmd_hook(args: argparse.Namespace) -> int:
    from bridge.client import BridgeClient

    with BridgeClient(_target(args), timeout_s=args.timeout) as client:
        if args.command == "resume":
            resume_file = Path(args.resume_file).read_text() if args.resume_file else ""
            return _print_results(client.resume_nodes(args.hostlist, resume_file))
        if args.command == "suspend":
            return _print_results(client.suspend_nodes(args.hostlist))
        return _print_results(client.resume_failed(args.hostlist))


def cmd_status(args: argparse.Namespace) -> int:
    from bridge.client import BridgeClient

    with BridgeClient(_target(args), timeout_s=args.timeout) as client:
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


def cmd_render_slurm_conf(args: argparse.Namespace) -> int:
    from bridge.domain.slurm_conf import render_slurm_conf

    config = load_config(_config_path(args))
    hooks = Path(args.hooks_dir).resolve()
    print(
        render_slurm_conf(
            config.pools,
            resume_program=str(hooks / "resume"),
            suspend_program=str(hooks / "suspend"),
            resume_fail_program=str(hooks / "resume_fail"),
            suspend_time=args.suspend_time,
            suspend_timeout=args.suspend_timeout,
            resume_timeout=args.resume_timeout,
            source=config.source,
        ),
        end="",
    )
    return 0


def cmd_check_config(args: argparse.Namespace) -> int:
    print(check_config(_config_path(args)))
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    from bridge import doctor  # Kubernetes client and Slurm CLI: only for the preflight

    try:
        config = load_config(_config_path(args))
    except BridgeError as e:
        checks = [doctor.Check(doctor.Status.FAIL, "config", str(e), "fix the configuration")]
    else:
        checks = [doctor.Check(doctor.Status.PASS, "config", f"{config.source} loads")]
        checks += doctor.run_checks(config)
    for check in checks:
        print(check.line(), flush=True)
    print(f"doctor: {doctor.summary(checks)}")
    return 1 if doctor.failed(checks) else 0


def cmd_hostnames(args: argparse.Namespace) -> int:
    for name in expand(args.hostlist):
        print(name)
    return 0


def build_parser() -> argparse.ArgumentParser:
    default_hooks = Path(__file__).resolve().parent.parent / "slurm_plugins"
    parser = argparse.ArgumentParser(
        prog="slurm-k8s-bridge",
        description="Slurm power saving backed by Kubernetes: ResumeProgram/SuspendProgram calls "
        "become slurmd pods named after the nodes.",
        epilog="Configuration: --config, else $SKB_CONFIG, else " + DEFAULT_PATH + ". "
        "Socket: --socket, else $SKB_SOCKET, else " + DEFAULT_TARGET + ".",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def with_config(p: argparse.ArgumentParser) -> None:
        p.add_argument("-c", "--config", help="the bridge's YAML configuration")

    def with_socket(p: argparse.ArgumentParser) -> None:
        p.add_argument("--socket", help="bridge address: unix:/path or host:port")
        p.add_argument("--timeout", type=float, default=10.0, help="seconds (default 10)")

    p = sub.add_parser("serve", help="run the bridge next to slurmctld")
    with_config(p)
    p.add_argument("--log-format", choices=("text", "json"), help="override bridge.log_format")
    p.set_defaults(func=cmd_serve)

    for name, text in (
        ("resume", "create pods for HOSTLIST (what ResumeProgram does)"),
        ("suspend", "delete the pods of HOSTLIST (what SuspendProgram does)"),
        ("resume-fail", "Slurm gave up on HOSTLIST (ResumeFailProgram)"),
    ):
        p = sub.add_parser(name, help=text)
        p.add_argument("hostlist", help="Slurm hostlist, e.g. cpu-[0-3]")
        if name == "resume":
            p.add_argument("--resume-file", help="a $SLURM_RESUME_FILE to pass along")
        with_socket(p)
        p.set_defaults(func=cmd_hook)

    p = sub.add_parser("status", help="Slurm state and pod state of each node, side by side")
    p.add_argument("hostlist", nargs="?", help="only these nodes")
    p.add_argument("-a", "--all", action="store_true", help="include idle~ nodes with no pod")
    with_socket(p)
    p.set_defaults(func=cmd_status)

    p = sub.add_parser(
        "render-slurm-conf", help="NodeName/PartitionName/power-save lines for slurm.conf (Include)"
    )
    with_config(p)
    p.add_argument(
        "--hooks-dir",
        default=str(default_hooks),
        help=f"where the hooks are (default {default_hooks})",
    )
    p.add_argument("--suspend-time", type=int, default=300, help="SuspendTime, s (default 300)")
    p.add_argument("--suspend-timeout", type=int, default=30, help="SuspendTimeout, s (default 30)")
    p.add_argument(
        "--resume-timeout",
        type=int,
        default=600,
        help="ResumeTimeout, s (default 600; longer than every pool's schedule_timeout_s)",
    )
    p.set_defaults(func=cmd_render_slurm_conf)

    p = sub.add_parser("check-config", help="validate the configuration and summarise it")
    with_config(p)
    p.set_defaults(func=cmd_check_config)

    p = sub.add_parser(
        "doctor",
        help="preflight: credentials, RBAC, Secret, Slurm, hooks, socket, DNS, routes",
        description="Check this installation; one PASS/WARN/FAIL/SKIP line per check with its "
        "cause and what to do. Exits 1 if any check FAILs.",
    )
    with_config(p)
    p.set_defaults(func=cmd_doctor)

    p = sub.add_parser("hostnames", help="expand a hostlist, one name per line")
    p.add_argument("hostlist")
    p.set_defaults(func=cmd_hostnames)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code: int = args.func(args)
    except BridgeError as e:
        print(f"slurm-k8s-bridge {args.command}: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"slurm-k8s-bridge {args.command}: {e}", file=sys.stderr)
        return 1
    return code


if __name__ == "__main__":
    sys.exit(main())
