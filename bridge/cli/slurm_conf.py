"""``render-slurm-conf``: the slurm.conf lines for the bridge's pools, and ``--check`` against
the running slurmctld; the hook programs those lines name are found and vetted here."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from bridge.errors import BridgeError

if TYPE_CHECKING:
    from bridge.domain.site_names import SiteNames
    from bridge.domain.slurm_conf import GlobalChange, MissingEntries
    from bridge.settings import BridgeConfig


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

    checkout = Path(__file__).resolve().parents[2] / "slurm_plugins"
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


def _job_ready_program(args: argparse.Namespace) -> str | None:
    """PrologSlurmctld for ``--job-ready-prolog``: job_ready next to the resume hook."""
    if not args.job_ready_prolog:
        return None
    path = Path(args.job_ready_program or "")
    if not args.job_ready_program:
        resume = _hook_programs(args)["resume"]
        if resume.name != "resume":
            raise BridgeError(
                "--job-ready-prolog: the installed entry points have no job_ready; give "
                "--job-ready-program (slurm_plugins/job_ready of a checkout, with its hook.sh)"
            )
        path = resume.with_name("job_ready")
    problem = check_program(path)
    if problem:
        raise BridgeError(f"PrologSlurmctld program: {problem}")
    return str(path)


def render_slurm_conf(args: argparse.Namespace, config: BridgeConfig) -> int:
    """``render-slurm-conf`` for ``config``: print the lines to Include, or with ``--check``
    compare the render's globals with the running slurmctld's."""
    from bridge.adapters.slurm.cli import SlurmCli
    from bridge.domain import slurm_conf as sc

    slurm = config.slurm
    site_files = _refuse_clashes(args, config)
    programs = _hook_programs(args)
    if site_files is not None:
        _refuse_taking_over_site_programs(site_files, programs)
    live: dict[str, str] | None = None
    if args.check or not args.slurm_version:
        cli = SlurmCli(slurm.bin_dir, slurm.command_timeout_s, slurm.conf, attempts=1)
        try:
            live = cli.show_config()
        except BridgeError as e:
            raise BridgeError(
                f"cannot read the running configuration ({e}); to render without a running "
                "slurmctld give --slurm-version"
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
        suspend_time=args.suspend_time,
        suspend_timeout=args.suspend_timeout,
        resume_timeout=args.resume_timeout,
        global_suspend_time_infinite=args.global_suspend_time_infinite,
        resume_rate=args.resume_rate,
        suspend_rate=args.suspend_rate,
        config_overrides=args.config_overrides,
        private_data_cloud=args.private_data_cloud,
        tree_width=args.tree_width,
        default_partition=args.default_partition,
        return_to_service=args.return_to_service,
        job_ready_program=_job_ready_program(args),
        site_prolog_slurmctld=site.get("PrologSlurmctld", "") or "",
        write_list_globals=args.write_list_globals,
        site_slurmctld_parameters=sc.split_list(site_params),
        site_slurmd_parameters=sc.split_list(site.get("SlurmdParameters")),
        site_private_data=sc.split_list(site.get("PrivateData")),
        site_gres_types=sc.split_list(site.get("GresTypes")),
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
    required = sc.required_list_entries(
        config.pools,
        slurm_version=series,
        config_overrides=args.config_overrides,
        private_data_cloud=args.private_data_cloud,
    )
    missing = sc.missing_list_entries(required, live) if live is not None else []
    if not args.check:
        if not args.write_list_globals:
            _say_required(required, missing, known=live is not None)
        if args.output:
            write_atomically(Path(args.output), text)
        else:
            print(text, end="")
        return 0
    for entry in missing:
        print(entry)
    code = _report_check(sc.diff_globals(sc.rendered_globals(text), live or {}), args.allow_change)
    if missing:
        print(
            f"render-slurm-conf --check: {len(missing)} list global(s) lack the bridge's "
            "entries; add them to the site's own lines, then `scontrol reconfigure`"
        )
        return 4
    return code


def _say_required(
    required: dict[str, tuple[str, ...]], missing: Sequence[MissingEntries], *, known: bool
) -> None:
    """On stderr: what the site's own list-valued lines must hold, which the render does not
    write (a copy would override the site's later edits); each one the running slurmctld
    lacks, when it is known."""
    say = "slurm-k8s-bridge render-slurm-conf"
    if not known:
        for key, entries in required.items():
            print(
                f"{say}: note: the site's own {key} line must hold {','.join(entries)} "
                "(this render does not set it)",
                file=sys.stderr,
            )
    for entry in missing:
        print(f"{say}: warning: {entry}, then `scontrol reconfigure`", file=sys.stderr)


def _refuse_clashes(args: argparse.Namespace, config: BridgeConfig) -> dict[str, SiteNames] | None:
    """Refuse pools whose partition or node names the site's slurm.conf (or a file it
    Includes, the bridge's fragment aside) defines already: slurmctld would not start.
    Returns what the site's files define (None: there is no slurm.conf to read)."""
    from bridge.adapters.slurm.conf_files import read_site_names, slurm_conf_path
    from bridge.domain.site_names import clashes

    path = slurm_conf_path(args.site_conf or config.slurm.conf)
    if not args.site_conf and not args.check and not path.exists():
        print(
            f"slurm-k8s-bridge render-slurm-conf: warning: {path} does not exist, so the pools' "
            "names are not compared with the site's; give the site's slurm.conf with --site-conf",
            file=sys.stderr,
        )
        return None
    site = read_site_names(path)
    found = clashes(config.pools, site)
    if found:
        raise BridgeError(
            "the pools reuse names the site defines, and slurmctld refuses a name defined "
            "twice:\n  "
            + "\n  ".join(map(str, found))
            + "\ngive each pool a partition and nodes of its own (users may ask for both: "
            "sbatch -p site,k8s)"
        )
    return site


#: Bytes in the head of each of the bridge's hook programs (hook.sh's executables, skb-hook,
#: the pip entry points): a program of an earlier install is the bridge's, not the site's.
HOOK_MARKS = (b"hook.sh", b"bridge.hooks", b"skb-hook")


def _is_a_bridge_hook(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError:
        return False
    return any(mark in head for mark in HOOK_MARKS)


def _refuse_taking_over_site_programs(
    site: dict[str, SiteNames], programs: dict[str, Path]
) -> None:
    """Refuse to replace a power-saving program of the site's own (IPMI scripts for its static
    nodes, say) unless hooks.env hands the nodes no pool owns to it: the render's programs are
    global, and without the hand-off the site's nodes would sit POWERING_UP until
    ResumeTimeout."""
    from bridge.domain.site_names import POWER_PROGRAMS, site_programs
    from bridge.settings import hooks_env_path, hooks_env_values

    env_path = hooks_env_path(programs["resume"], os.environ)
    try:
        handoff = hooks_env_values(env_path.read_text(errors="replace"), POWER_PROGRAMS.values())
    except OSError:
        handoff = {}
    rendered = {
        "ResumeProgram": programs["resume"],
        "SuspendProgram": programs["suspend"],
        "ResumeFailProgram": programs["resume_fail"],
    }
    taken = []
    for key, path in site_programs(site).items():
        if path == str(rendered[key]) or _is_a_bridge_hook(path):
            continue
        if handoff.get(POWER_PROGRAMS[key]) != path:
            taken.append(f"{POWER_PROGRAMS[key]}={path}")
    if taken:
        raise BridgeError(
            "the site's slurm.conf has power-saving programs of its own, which the render's "
            "would replace for every node (the site's would sit POWERING_UP until "
            "ResumeTimeout); hand the nodes no pool owns to them: add\n  "
            + "\n  ".join(taken)
            + f"\nto {env_path} (the hooks run them for those nodes), or remove the site's lines"
        )


def write_atomically(path: Path, text: str) -> None:
    """``text`` into ``path`` through a temporary file beside it, renamed over it: slurmctld
    (or a crash) never sees a partial or empty file, and a failed render leaves the old one.
    The old file's mode is kept (0644 for a new one)."""
    import tempfile

    try:
        mode = path.stat().st_mode & 0o7777
    except FileNotFoundError:
        mode = 0o644
    try:
        fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    except OSError as e:
        raise BridgeError(f"--output {path}: cannot write beside it: {e.strerror}") from e
    try:
        with os.fdopen(fd, "w") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except OSError as e:
        Path(temporary).unlink(missing_ok=True)
        raise BridgeError(f"--output {path}: {e.strerror}") from e


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


RENDER_DESCRIPTION = """\
The slurm.conf lines for the bridge's pools, safe to Include at the end of a live slurm.conf:
NodeName=... State=CLOUD per pool, a PartitionName per partition carrying SuspendTime,
SuspendTimeout and ResumeTimeout (so the site's own nodes keep the site's timing), and only
these globals: ResumeProgram, SuspendProgram, ResumeFailProgram. Every other global is written
only when its option is given (PrologSlurmctld with --job-ready-prolog: recommended).

List-valued globals are the site's: an Included line would replace the site's whole line and
undo its later edits, so the render does not write them. It names (in its comments, and on
stderr) the entries the site's own lines must hold: SlurmctldParameters enable_configless,
idle_on_node_suspend (and cloud_reg_addrs on 22.05); GresTypes for pools with Gres;
SlurmdParameters config_overrides with --config-overrides; PrivateData cloud with
--private-data-cloud. --check names every global the render would change and every entry the
running lists lack (exit 3 and 4). A pool whose partition or node name the site's slurm.conf
already defines is refused (slurmctld would stop on the duplicate).

Timeouts for pods behind a cluster autoscaler: a node must register before ResumeTimeout, so
  --resume-timeout > schedule_timeout_s (the pool's autoscaler patience)
                     + image pull (cold, on a new Kubernetes node) + slurmd start-up
e.g. 300 s + 120 s + 30 s = 450 s: the default 600 s leaves a margin. The render refuses a
ResumeTimeout not above every pool's schedule_timeout_s. When Kubernetes says no, the bridge
fails the node at once with its reason, so a generous ResumeTimeout costs nothing.
"""


def add_render_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
) -> argparse.ArgumentParser:
    """The ``render-slurm-conf`` subcommand and its options; the caller sets its ``func``."""
    p = sub.add_parser(
        "render-slurm-conf",
        help="NodeName/PartitionName/power-save lines for slurm.conf (Include)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=RENDER_DESCRIPTION,
    )
    p.add_argument("-c", "--config", help="the bridge's YAML configuration")
    p.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        help="write the lines to FILE (through a temporary file renamed over it: never partial "
        "or empty, and left as it was when the render fails) instead of printing them",
    )
    p.add_argument(
        "--site-conf",
        metavar="SLURM_CONF",
        help="the site's slurm.conf, whose NodeName/PartitionName entries (and its Includes', "
        "the bridge's fragment aside) the pools must not reuse (default: the configuration's "
        "slurm.conf, else $SLURM_CONF, else /etc/slurm/slurm.conf)",
    )
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
        "--write-list-globals",
        action="store_true",
        help="also write SlurmctldParameters, GresTypes, SlurmdParameters and PrivateData, each "
        "the site's list plus the bridge's entries: only for a slurm.conf generated whole "
        "every time (the in-cluster image); an Include into a site's slurm.conf must not",
    )
    p.add_argument(
        "--slurmctld-parameters",
        help="with --write-list-globals: the site's SlurmctldParameters, comma-separated ('' "
        "for none; default: read from `scontrol show config`)",
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
        help="require config_overrides in the site's SlurmdParameters (slurmd in a pod sees "
        "the host's hardware; this makes Slurm trust the configured CPUs/RealMemory)",
    )
    p.add_argument(
        "--private-data-cloud",
        action="store_true",
        help="require cloud in the site's PrivateData (22.05 only: it hides CLOUD nodes "
        "without it)",
    )
    p.add_argument(
        "--job-ready-prolog",
        action="store_true",
        help="global PrologSlurmctld=slurm_plugins/job_ready: it returns once a job's nodes "
        "are up, so a job that waited for pods starts then, not at slurmctld's next periodic "
        "check (~25 s later; see docs/operations.md, Job start). Refused when the site has a "
        "PrologSlurmctld of its own",
    )
    p.add_argument("--job-ready-program", help="PrologSlurmctld for --job-ready-prolog")
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
        "listed in --allow-change) and each entry the bridge needs that a list global "
        "lacks (exit 4)",
    )
    p.add_argument(
        "--allow-change",
        action="append",
        default=[],
        metavar="KEYS",
        help="with --check: globals you mean to change, comma-separated (repeatable)",
    )
    return p
