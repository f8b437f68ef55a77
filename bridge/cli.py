"""``slurm-k8s-bridge``: the bridge's one command line (serve, the hook calls, status, tools)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from bridge.config import DEFAULT_PATH, check_config, load_config
from bridge.domain.hostlist import expand
from bridge.domain.results import NodeResult, NodeStatus, Outcome
from bridge.errors import BridgeError
from bridge.settings import DEFAULT_TARGET

if TYPE_CHECKING:
    from bridge.domain.slurm_conf import GlobalChange


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


#: The hook executables of each kind: in a checkout (slurm_plugins/) and as installed entry points.
HOOK_PROGRAMS = {
    "resume": ("resume", "slurm-k8s-bridge-resume"),
    "suspend": ("suspend", "slurm-k8s-bridge-suspend"),
    "resume_fail": ("resume_fail", "slurm-k8s-bridge-resume-fail"),
}


def default_hook_programs() -> dict[str, Path]:
    """The hooks of the install this runs from: a checkout's ``slurm_plugins/``, else the
    console scripts pip put next to this interpreter (a venv's ``bin/``)."""
    import sysconfig

    checkout = Path(__file__).resolve().parent.parent / "slurm_plugins"
    if (checkout / "hook.sh").is_file():
        return {kind: checkout / names[0] for kind, names in HOOK_PROGRAMS.items()}
    scripts = Path(sysconfig.get_path("scripts"))
    return {kind: scripts / names[1] for kind, names in HOOK_PROGRAMS.items()}


def check_program(path: Path) -> str | None:
    """Why slurmctld could not run ``path`` (it refuses group/world-writable files), or None."""
    if not path.is_file():
        return f"{path} does not exist"
    if not os.access(path, os.X_OK):
        return f"{path} is not executable"
    if path.stat().st_mode & 0o022:
        return f"{path} is group- or world-writable (slurmctld refuses it)"
    return None


def _hook_programs(args: argparse.Namespace) -> dict[str, Path]:
    """The three programs the render names; refuses any slurmctld could not run."""
    programs = default_hook_programs()
    if args.hooks_dir:
        hooks = Path(args.hooks_dir).resolve()
        programs = {kind: hooks / names[0] for kind, names in HOOK_PROGRAMS.items()}
    for kind, given in (
        ("resume", args.resume_program),
        ("suspend", args.suspend_program),
        ("resume_fail", args.resume_fail_program),
    ):
        if given:
            programs[kind] = Path(given)
    for kind, path in programs.items():
        problem = check_program(path)
        if problem:
            raise BridgeError(
                f"{HOOK_PROGRAMS[kind][0]} program: {problem}; install the package's hooks "
                "or name them with --hooks-dir/--resume-program/--suspend-program/"
                "--resume-fail-program"
            )
    return programs


def cmd_render_slurm_conf(args: argparse.Namespace) -> int:
    from bridge.adapters.slurm_cli import SlurmCli
    from bridge.domain import slurm_conf as sc

    config = load_config(_config_path(args))
    slurm = config.slurm
    programs = _hook_programs(args)
    live: dict[str, str] | None = None
    if args.check or args.slurmctld_parameters is None or not args.slurm_version:
        cli = SlurmCli(slurm.bin_dir, slurm.command_timeout_s, slurm.conf, attempts=1)
        try:
            live = cli.show_config()
        except BridgeError as e:
            raise BridgeError(
                f"cannot read the running configuration ({e}); to render without a running "
                "slurmctld give --slurm-version and the site's SlurmctldParameters with "
                "--slurmctld-parameters (an empty string for none)"
            ) from e
    version = args.slurm_version or (live or {}).get("SLURM_VERSION", "")
    site = live or {}
    site_params = (
        args.slurmctld_parameters
        if args.slurmctld_parameters is not None
        else site.get("SlurmctldParameters", "")
    )
    text = sc.render_slurm_conf(
        config.pools,
        resume_program=str(programs["resume"]),
        suspend_program=str(programs["suspend"]),
        resume_fail_program=str(programs["resume_fail"]),
        slurm_version=version,
        site_slurmctld_parameters=sc.split_list(site_params),
        suspend_time=args.suspend_time,
        suspend_timeout=args.suspend_timeout,
        resume_timeout=args.resume_timeout,
        global_suspend_time_infinite=args.global_suspend_time_infinite,
        resume_rate=args.resume_rate,
        suspend_rate=args.suspend_rate,
        config_overrides=args.config_overrides,
        site_slurmd_parameters=sc.split_list(site.get("SlurmdParameters")),
        private_data_cloud=args.private_data_cloud,
        site_private_data=sc.split_list(site.get("PrivateData")),
        tree_width=args.tree_width,
        site_gres_types=sc.split_list(site.get("GresTypes")),
        default_partition=args.default_partition,
        return_to_service=args.return_to_service,
        source=config.source,
    )
    series = sc.series_of(version)
    if series == "22.05" and not args.private_data_cloud:
        hidden = "cloud" not in {w.lower() for w in sc.split_list(site.get("PrivateData"))}
        if live is None or hidden:
            print(
                "slurm-k8s-bridge render-slurm-conf: warning: Slurm 22.05 hides CLOUD nodes "
                "from sinfo/scontrol (the bridge's too) unless PrivateData has `cloud`; "
                "add --private-data-cloud if the site's PrivateData lacks it",
                file=sys.stderr,
            )
    if not args.check:
        print(text, end="")
        return 0
    return _report_check(sc.diff_globals(sc.rendered_globals(text), live or {}), args.allow_change)


def _report_check(changes: Sequence[GlobalChange], allow_change: Sequence[str]) -> int:
    allowed = {w.strip().lower() for item in allow_change for w in item.split(",") if w.strip()}
    not_listed = []
    for change in changes:
        listed = change.key.lower() in allowed
        if not listed:
            not_listed.append(change.key)
        print(
            f"{change.key}: {change.live or '(not set)'} -> {change.rendered}"
            f"{'' if listed else '  [not listed in --allow-change]'}"
        )
    if not changes:
        print("render-slurm-conf --check: no global would change")
        return 0
    print(
        f"render-slurm-conf --check: {len(changes)} global(s) would change"
        + (f"; not listed: {', '.join(not_listed)}" if not_listed else "")
    )
    return 3 if not_listed else 0


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


RENDER_DESCRIPTION = """\
The slurm.conf lines for the bridge's pools, safe to Include at the end of a live slurm.conf:
NodeName=... State=CLOUD per pool, a PartitionName per partition carrying SuspendTime,
SuspendTimeout and ResumeTimeout (so the site's own nodes keep the site's power saving), and
only these globals: ResumeProgram, SuspendProgram, ResumeFailProgram, SlurmctldParameters
(the site's list plus enable_configless, idle_on_node_suspend and, on 22.05, cloud_reg_addrs)
and GresTypes when a pool has Gres (the site's types plus the pools'). Every other global is
written only when its option is given. --check names every global the render would change.

Timeouts for pods behind a cluster autoscaler: a node must register before ResumeTimeout, so
  --resume-timeout > schedule_timeout_s (the pool's autoscaler patience)
                     + image pull (cold, on a new Kubernetes node) + slurmd start-up
e.g. 300 s + 120 s + 30 s = 450 s: the default 600 s leaves a margin. The render refuses a
ResumeTimeout not above every pool's schedule_timeout_s. When Kubernetes says no, the bridge
fails the node at once with its reason, so a generous ResumeTimeout costs nothing.
"""


def _add_render_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "render-slurm-conf",
        help="NodeName/PartitionName/power-save lines for slurm.conf (Include)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=RENDER_DESCRIPTION,
    )
    p.add_argument("-c", "--config", help="the bridge's YAML configuration")
    p.add_argument(
        "--hooks-dir",
        help="directory holding resume, suspend and resume_fail (default: this install's "
        "hooks: a checkout's slurm_plugins/, else the slurm-k8s-bridge-* entry points "
        "next to this Python)",
    )
    p.add_argument("--resume-program", help="ResumeProgram (overrides --hooks-dir)")
    p.add_argument("--suspend-program", help="SuspendProgram (overrides --hooks-dir)")
    p.add_argument("--resume-fail-program", help="ResumeFailProgram (overrides --hooks-dir)")
    p.add_argument(
        "--slurm-version",
        help="target series: 22.05, 24.11 or 26.05 (default: the running slurmctld's "
        "SLURM_VERSION in `scontrol show config`)",
    )
    p.add_argument(
        "--slurmctld-parameters",
        help="the site's SlurmctldParameters, comma-separated ('' for none); default: read "
        "from `scontrol show config`. The bridge's entries are added to them",
    )
    p.add_argument(
        "--suspend-time",
        type=int,
        default=300,
        help="SuspendTime of the bridge's partitions, s (default 300)",
    )
    p.add_argument(
        "--suspend-timeout",
        type=int,
        default=30,
        help="SuspendTimeout of the bridge's partitions, s (default 30)",
    )
    p.add_argument(
        "--resume-timeout",
        type=int,
        default=600,
        help="ResumeTimeout of the bridge's partitions, s (default 600; longer than every "
        "pool's schedule_timeout_s, see above)",
    )
    p.add_argument(
        "--global-suspend-time-infinite",
        action="store_true",
        help="also write global SuspendTime=INFINITE (no node outside the bridge's partitions "
        "is ever powered down)",
    )
    p.add_argument("--resume-rate", type=int, help="global ResumeRate, nodes/min (0: no limit)")
    p.add_argument("--suspend-rate", type=int, help="global SuspendRate, nodes/min (0: no limit)")
    p.add_argument(
        "--config-overrides",
        action="store_true",
        help="add config_overrides to the global SlurmdParameters (slurmd in a pod sees the "
        "host's hardware; this makes Slurm trust the configured CPUs/RealMemory)",
    )
    p.add_argument(
        "--private-data-cloud",
        action="store_true",
        help="add cloud to the global PrivateData (22.05 only: it hides CLOUD nodes without it)",
    )
    p.add_argument("--tree-width", type=int, help="global TreeWidth")
    p.add_argument("--default-partition", help="mark this bridge partition Default=YES")
    p.add_argument(
        "--return-to-service", type=int, choices=(0, 1, 2), help="global ReturnToService"
    )
    p.add_argument(
        "--check",
        action="store_true",
        help="print nothing to Include; compare the render's globals with the running "
        "`scontrol show config` and name each one it would change (exit 3 if one is not "
        "listed in --allow-change)",
    )
    p.add_argument(
        "--allow-change",
        action="append",
        default=[],
        metavar="KEYS",
        help="with --check: globals you mean to change, comma-separated (repeatable)",
    )
    p.set_defaults(func=cmd_render_slurm_conf)


def build_parser() -> argparse.ArgumentParser:
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

    _add_render_parser(sub)

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
