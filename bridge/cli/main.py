"""``slurm-k8s-bridge``: the bridge's one command line (serve, the hook calls, status, tools).

The parser and the small commands are here; the hook calls to a running bridge are in
:mod:`bridge.cli.calls`, ``status`` is in :mod:`bridge.cli.status`, ``pool`` is in
:mod:`bridge.cli.pools`, ``render-slurm-conf`` is in :mod:`bridge.cli.slurm_conf`,
``install-service`` is in :mod:`bridge.cli.install_service`.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any

from bridge import __version__
from bridge.cli import calls, install_service, pools, slurm_conf, status
from bridge.domain.hostlist import expand
from bridge.errors import BridgeError
from bridge.settings import DEFAULT_CONFIG_PATH as DEFAULT_PATH
from bridge.settings import DEFAULT_TARGET, BridgeConfig


def package_version() -> str:
    """The installed distribution's version; in a source checkout with no package metadata,
    the one the source carries (``bridge.__version__``, kept equal to pyproject's by a test)."""
    # Imported here: reading the metadata is for --version only, not every command's start.
    from importlib import metadata

    try:
        return metadata.version("slurm-k8s-bridge")
    except metadata.PackageNotFoundError:
        return __version__


class _PrintVersion(argparse.Action):
    """``--version``: ``slurm-k8s-bridge <version>``, looked up only when asked."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        kwargs.setdefault("help", "print the version and exit")
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        print(f"slurm-k8s-bridge {package_version()}")
        parser.exit()


def _config_path(args: argparse.Namespace) -> str:
    return str(args.config or os.environ.get("SKB_CONFIG") or DEFAULT_PATH)


def _load_config(args: argparse.Namespace) -> BridgeConfig:
    # Imported here: the reader loads pydantic, which the RPC commands (resume, status) never need.
    from bridge.config import load_config

    return load_config(_config_path(args))


def _target(args: argparse.Namespace) -> str:
    return str(args.socket or os.environ.get("SKB_SOCKET") or DEFAULT_TARGET)


def cmd_hook(args: argparse.Namespace) -> int:
    return calls.call_hook(_target(args), args)


def cmd_status(args: argparse.Namespace) -> int:
    return status.show_status(_target(args), args)


def cmd_pool(args: argparse.Namespace) -> int:
    return pools.call_pool(_target(args), args, sys.stdout)


def cmd_render_slurm_conf(args: argparse.Namespace) -> int:
    return slurm_conf.render_slurm_conf(args, _load_config(args))


def cmd_install_service(args: argparse.Namespace) -> int:
    return install_service.install_service(args, sys.stdout)


def cmd_serve(args: argparse.Namespace) -> int:
    # grpc server and Kubernetes client: only for serve
    from bridge.runtime import log_format, serve

    config = _load_config(args)
    log_format.configure_logging(args.log_format or config.bridge.log_format)
    return serve.serve(config)


def cmd_check_config(args: argparse.Namespace) -> int:
    # Imported here: the reader loads pydantic, which the RPC commands (resume, status) never need.
    from bridge.config import check_config

    print(check_config(_config_path(args)))
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    from bridge import doctor  # Kubernetes client and Slurm CLI: only for the preflight

    try:
        config = _load_config(args)
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
    parser = argparse.ArgumentParser(
        prog="slurm-k8s-bridge",
        description="Slurm power saving backed by Kubernetes: ResumeProgram/SuspendProgram calls "
        "become slurmd pods named after the nodes.",
        epilog="Configuration: --config, else $SKB_CONFIG, else " + DEFAULT_PATH + ". "
        "Socket: --socket, else $SKB_SOCKET, else " + DEFAULT_TARGET + ".",
    )
    parser.add_argument("--version", action=_PrintVersion)
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
            p.add_argument(
                "--wait",
                action="store_true",
                help="answer after every pod create ended, ok or failed per node (default: "
                "answer once the bridge took the nodes, 'accepted' per node, as the hook does; "
                "nodes Kubernetes refuses are then set DOWN in Slurm by the bridge)",
            )
        with_socket(p)
        p.set_defaults(func=cmd_hook)

    status.add_status_parser(sub).set_defaults(func=cmd_status)

    pools.add_pool_parser(sub).set_defaults(func=cmd_pool)

    slurm_conf.add_render_parser(sub).set_defaults(func=cmd_render_slurm_conf)

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

    install_service.add_install_parser(sub).set_defaults(func=cmd_install_service)

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
