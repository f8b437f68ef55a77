"""Slurm on the host: munged with a key of our own and slurmctld with CLOUD nodes whose power
saving calls the hooks in ``slurm_plugins/``; with ``AUTH=slurm`` (24.11 and 26.05) slurmctld
authenticates with auth/slurm and a slurm.key of our own instead (munged still runs, unused)."""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import shutil
import socket
from pathlib import Path
from typing import Any

from . import accounting, bridge_install, slurm_series
from .layout import (
    BACKUP_HOST,
    BACKUP_IP,
    BACKUP_SLURMCTLD_TIMEOUT_S,
    GROUND_RUN,
    HA_PID_DIR,
    HOST_IP,
    MUNGE_SOCKET,
    SLURM_USER,
    SLURMCTLD_PORT,
    SLURMDBD_PORT,
    Layout,
)
from .processes import ProvingGroundError, State, run, start_daemon, stop_daemon, wait_until

log = logging.getLogger(__name__)

#: Short timers so that tests and the demo see a whole cycle in well under a minute; the long
#: ResumeTimeout shows that failures are reported by the bridge, not by Slurm's timeout.
SUSPEND_TIME, SUSPEND_TIMEOUT, RESUME_TIMEOUT = 20, 10, 180
SLURMD_TIMEOUT = 30


# How the ground (and any whole 22.05 cluster of our own, e.g. dev/bench/chaos.py) asks the
# renderer for what a site's Include must not impose: PrivateData=cloud (22.05 hides CLOUD
# nodes without it), power saving timed globally too, config_overrides (slurmd in a pod sees the
# host's hardware), TreeWidth, rates, ReturnToService. power_save_min_interval=0 makes
# slurmctld's power work follow a node update within a second; power_save_interval=1 makes it
# pass every second without one too (an idle node reaching SuspendTime), not every 5 s.
def render_options(series: str) -> dict[str, Any]:
    """The renderer's options for a ground of Slurm ``series`` (PrivateData=cloud: 22.05 only)."""
    return {
        "slurm_version": series,
        "site_slurmctld_parameters": ("power_save_interval=1", "power_save_min_interval=0"),
        "suspend_time": SUSPEND_TIME,
        "suspend_timeout": SUSPEND_TIMEOUT,
        "resume_timeout": RESUME_TIMEOUT,
        "global_timeouts": True,
        "resume_rate": 0,
        "suspend_rate": 0,
        "config_overrides": True,
        "private_data_cloud": series == slurm_series.HOST_SERIES,
        "tree_width": 65533,
        "return_to_service": 2,
    }


STRAY_NODES = "stray-[0-1]"
#: The site's own node: a slurmd on this host (of the ground's series), not the bridge's.
STATIC_NODE = "static-0"
#: Its slurmd's port (not 6818: a slurmd of this machine's own may listen there).
STATIC_PORT = 6828
#: ClusterName (dev/bridge.yaml's cluster_name says the same).
CLUSTER = "provingground"


def slurm_env(layout: Layout) -> dict[str, str]:
    """The environment for Slurm's clients of the running ground: its slurm.conf and, for a
    series other than the host's, its clients (wrappers into its root) first on PATH."""
    env = {**os.environ, "SLURM_CONF": str(layout.slurm_conf)}
    programs = ground_programs(layout)
    if not programs.on_host:
        env["PATH"] = f"{programs.bin_dir}:{env.get('PATH', '/usr/bin:/bin')}"
    return env


def auth_lines(auth: str) -> list[str]:
    """slurm.conf's authentication: munge on our own socket, or auth/slurm, whose slurmctld
    reads slurm.key beside slurm.conf (:func:`slurm_key_path`) and serves the clients' tokens
    on its sack socket (so the clients need no key)."""
    if auth == slurm_series.AUTH_SLURM:
        return ["AuthType=auth/slurm", "CredType=cred/slurm"]
    return ["AuthType=auth/munge", "CredType=cred/munge", f"AuthInfo=socket={MUNGE_SOCKET}"]


def controller_lines(
    header: str,
    *,
    cluster: str,
    port: int,
    state_dir: Path,
    log_dir: Path | None,
    slurmd_timeout: int,
    auth: str = slurm_series.AUTH_MUNGE,
    slurm_user: str = "root",
    accounting_port: int | None = None,
    cgroups: bool = False,
    backup: str | None = None,
    slurmctld_timeout: int | None = None,
    pid_file: Path | None = None,
) -> list[str]:
    """The site part of a slurm.conf for a slurmctld of ours on this host (the ground's, and any
    other whole 22.05 cluster of ours such as dev/bench/chaos.py's): ``auth`` (munge on our own
    socket by default), state and logs where given, Slurm's simplest plugins; slurmctld drops to
    ``slurm_user``, and with ``accounting_port`` records jobs in the slurmdbd listening there;
    ``cgroups`` confines jobs as sites do (cgroup.conf: :func:`render_cgroup_conf`), else
    Slurm's simplest plugins track them. Without ``log_dir``, slurmctld logs to its stderr.
    ``backup`` (``name(address)``) is a second SlurmctldHost, taking over after
    ``slurmctld_timeout``; ``pid_file`` then is host-local (default: in the state directory)."""
    host = socket.gethostname().split(".")[0]
    accounting = (
        [
            "AccountingStorageType=accounting_storage/slurmdbd",
            f"AccountingStorageHost={host}",
            f"AccountingStoragePort={accounting_port}",
            # slurmdbd's connections take munge's socket from here, not from AuthInfo.
            *([f"AccountingStoragePass={MUNGE_SOCKET}"] if auth == slurm_series.AUTH_MUNGE else []),
        ]
        if accounting_port is not None
        else []
    )
    return [
        header,
        f"ClusterName={cluster}",
        f"SlurmctldHost={host}({HOST_IP})",
        *([f"SlurmctldHost={backup}"] if backup else []),
        *([f"SlurmctldTimeout={slurmctld_timeout}"] if slurmctld_timeout else []),
        f"SlurmctldPort={port}",
        "SlurmdPort=6818",
        f"SlurmUser={slurm_user}",
        *auth_lines(auth),
        *accounting,
        f"StateSaveLocation={state_dir / 'state'}",
        "SlurmdSpoolDir=/var/spool/slurmd",
        # In the state directory: the one SlurmUser may write.
        f"SlurmctldPidFile={pid_file or state_dir / 'state' / 'slurmctld.pid'}",
        *([f"SlurmctldLogFile={log_dir / 'slurmctld.log'}"] if log_dir is not None else []),
        "SlurmctldDebug=info",
        *(
            [
                "ProctrackType=proctrack/cgroup",
                "TaskPlugin=task/cgroup,task/affinity",
                "JobAcctGatherType=jobacct_gather/cgroup",
            ]
            if cgroups
            else [
                "ProctrackType=proctrack/linuxproc",
                "TaskPlugin=task/none",
                "JobAcctGatherType=jobacct_gather/none",
            ]
        ),
        "SelectType=select/cons_tres",
        # With cgroups, memory is a resource too (as sites run it): task/cgroup then limits each
        # job to what it was given, --mem or DefMemPerCPU (small: the ground's nodes are).
        *(
            ["SelectTypeParameters=CR_CPU_Memory", "DefMemPerCPU=128"]
            if cgroups
            else ["SelectTypeParameters=CR_CPU"]
        ),
        "MpiDefault=none",
        "KillWait=5",
        "MinJobAge=300",
        "InactiveLimit=0",
        f"SlurmdTimeout={slurmd_timeout}",
    ]


def fragment_path(layout: Layout) -> Path:
    """The bridge's part of slurm.conf, Included at its end (the site guide's k8s-bridge.conf)."""
    return layout.slurm_conf.parent / "k8s-bridge.conf"


def render_slurm_conf(
    layout: Layout,
    series: str = slurm_series.HOST_SERIES,
    auth: str = slurm_series.AUTH_MUNGE,
    ha: bool = False,
) -> str:
    """The site's own slurm.conf, as it exists before the bridge: its controller, accounting,
    a static node that a real slurmd serves (:data:`STATIC_NODE`, not the bridge's), the stray
    CLOUD nodes the tests use, and at its end the ``Include`` of the bridge's fragment
    (:func:`render_fragment`); with ``ha``, the backup controller host's slurmctld too
    (proving_ground.backup_host)."""
    options = render_options(series)
    timing = {
        "SuspendTime": options["suspend_time"],
        "SuspendTimeout": options["suspend_timeout"],
        "ResumeTimeout": options["resume_timeout"],
    }
    lines = [
        *controller_lines(
            "# Written by the proving ground (dev/proving_ground/slurm.py); edits are lost.",
            cluster=CLUSTER,
            port=SLURMCTLD_PORT,
            state_dir=layout.slurm,
            # Two controllers share this slurm.conf: each logs to its stderr, which the ground
            # keeps per daemon (.local/logs/slurmctld.log, slurmctld-backup.log).
            log_dir=None if ha else layout.logs,
            slurmd_timeout=SLURMD_TIMEOUT,
            auth=auth,
            slurm_user=SLURM_USER,
            accounting_port=SLURMDBD_PORT,
            cgroups=True,
            backup=f"{BACKUP_HOST}({BACKUP_IP})" if ha else None,
            slurmctld_timeout=BACKUP_SLURMCTLD_TIMEOUT_S if ha else None,
            pid_file=Path(HA_PID_DIR) / "slurmctld.pid" if ha else None,
        ),
        # Job users exist only on this host: slurmstepd answers the pods' NSS lookups for them
        # (the slurmd image carries libnss_slurm; deploy/images/slurmd/README.md).
        "LaunchParameters=enable_nss_slurm",
        # The site's slurmd pid files: by node name, so a static node's slurmd on this host
        # never takes /run/slurmd.pid from a slurmd of the machine's own.
        "SlurmdPidFile=/var/spool/slurmd/slurmd-%n.pid",
        # Power saving timed globally too (short, for tests and the demo); the static node is
        # kept out of it, as a site keeps its own nodes.
        *(f"{key}={value}" for key, value in timing.items()),
        f"SuspendExcNodes={STATIC_NODE}",
        # The bridge's entries in the site's own list-valued lines: the fragment names them
        # and does not set them, so an edit here is in force after a reconfigure.
        *site_list_lines(layout, series),
        # On the pod bridge's gateway: either controller host reaches it there.
        f"NodeName={STATIC_NODE} NodeAddr={HOST_IP} Port={STATIC_PORT} CPUs=1 RealMemory=512 "
        "State=UNKNOWN",
        f"PartitionName=static Nodes={STATIC_NODE} MaxTime=INFINITE State=UP",
        # CLOUD nodes no bridge pool owns: the bridge must refuse them, loudly (tests use them).
        f"NodeName={STRAY_NODES} CPUs=1 RealMemory=256 State=CLOUD",
        f"PartitionName=stray Nodes={STRAY_NODES} MaxTime=INFINITE State=UP",
        "",
        "# The bridge's nodes, partitions and power saving: rendered by",
        "# `slurm-k8s-bridge render-slurm-conf` (the site guide's command) from dev/bridge.yaml.",
        # By name, no directory: only such an Include reaches configless slurmds (the pods).
        f"Include {fragment_path(layout).name}",
    ]
    return "\n".join(lines) + "\n"


def site_list_lines(layout: Layout, series: str) -> list[str]:
    """SlurmctldParameters and the other list globals as the site's slurm.conf holds them:
    the ground's own entries plus those ``render-slurm-conf`` names as the bridge's."""
    from bridge.config import load_config
    from bridge.domain.slurm_conf import merge_list, required_list_entries

    options = render_options(series)
    config = load_config(str(bridge_config_path(layout)), environ={})
    required = required_list_entries(
        config.pools,
        slurm_version=series,
        config_overrides=options["config_overrides"],
        private_data_cloud=options["private_data_cloud"],
    )
    own = {"SlurmctldParameters": options["site_slurmctld_parameters"]}
    return [
        f"{key}={','.join(merge_list(own.get(key, ()), entries))}"
        for key, entries in required.items()
    ]


def cgroup_version() -> int:
    """This host's cgroup version: 2 when /sys/fs/cgroup is the unified hierarchy."""
    return 2 if Path("/sys/fs/cgroup/cgroup.controllers").exists() else 1


def render_cgroup_conf(version: int) -> str:
    """cgroup.conf beside slurm.conf: slurmctld serves it to the configless slurmds (the pods)
    with slurm.conf. On v2 no systemd runs in a pod (deploy/images/slurmd/README.md)."""
    plugin = ["CgroupPlugin=cgroup/v2", "IgnoreSystemd=yes"] if version == 2 else [
        "CgroupPlugin=cgroup/v1"
    ]  # fmt: skip
    return "\n".join(
        [
            "# Written by the proving ground (dev/proving_ground/slurm.py); edits are lost.",
            *plugin,
            "ConstrainCores=yes",
            "ConstrainRAMSpace=yes",
            "",
        ]
    )


def cgroup_conf_path(layout: Layout) -> Path:
    return layout.slurm_conf.parent / "cgroup.conf"


def render_fragment_argv(layout: Layout, series: str, venv: Path) -> list[str]:
    """The site guide's ``render-slurm-conf`` for the ground, as the installed bridge runs it:
    the checkout's hooks, the job_ready PrologSlurmctld, the ground's short timers."""
    from bridge.config import load_config

    options = render_options(series)
    plugins = layout.root / "slurm_plugins"
    config = load_config(str(bridge_config_path(layout)), environ={})
    argv = [
        str(venv / "bin" / "slurm-k8s-bridge"), "render-slurm-conf",
        "-c", str(bridge_config_path(layout)),
        "--hooks-dir", str(plugins),
        # Jobs start as soon as their pods' slurmd registered, not ~25 s later.
        "--job-ready-prolog", "--job-ready-program", str(plugins / "job_ready"),
        "--slurm-version", series,
        "--suspend-time", str(options["suspend_time"]),
        "--suspend-timeout", str(options["suspend_timeout"]),
        "--resume-timeout", str(options["resume_timeout"]),
        "--resume-rate", str(options["resume_rate"]),
        "--suspend-rate", str(options["suspend_rate"]),
        "--tree-width", str(options["tree_width"]),
        "--return-to-service", str(options["return_to_service"]),
        "--default-partition", next(iter(config.pools.partitions())),
        "--config-overrides",
    ]  # fmt: skip
    if options["private_data_cloud"]:
        argv.append("--private-data-cloud")
    return argv


def render_fragment(layout: Layout, series: str) -> str:
    """The bridge's fragment, printed by the installed bridge's ``render-slurm-conf``."""
    venv = bridge_install.ensure_installed(layout)
    # Not the ground's SKB_* settings: only dev/bridge.yaml's pools matter to the render.
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKB_")}
    return run(render_fragment_argv(layout, series, venv), env=env, timeout_s=60).stdout


def bridge_config_path(layout: Layout) -> Path:
    return layout.root / "dev" / "bridge.yaml"


HOSTS_FILE = Path("/etc/hosts")
HOSTS_BEGIN = "# >>> slurm-k8s-bridge proving ground (removed by `make down`)"
HOSTS_END = "# <<< slurm-k8s-bridge proving ground"


def _without_our_block(text: str) -> list[str]:
    lines, skipping = [], False
    for line in text.splitlines():
        if line == HOSTS_BEGIN:
            skipping = True
        elif line == HOSTS_END:
            skipping = False
        elif not skipping:
            lines.append(line)
    return lines


def ensure_hosts_entries(names: list[str]) -> None:
    """Make CLOUD node names resolvable.

    Until a slurmd registers (cloud_reg_addrs), slurmctld addresses a node by its name; an
    unresolvable name costs ~5 s of retries *per message* and stalls slurmctld's RPC threads
    (sbatch then times out). Loopback answers at once with "connection refused". A site needs
    the same: DNS or hosts entries for its cloud node names.
    """
    lines = _without_our_block(HOSTS_FILE.read_text())
    block = [HOSTS_BEGIN, *(f"127.0.0.1 {name}" for name in names), HOSTS_END]
    HOSTS_FILE.write_text("\n".join([*lines, *block]) + "\n")


def remove_hosts_entries() -> None:
    text = HOSTS_FILE.read_text()
    if HOSTS_BEGIN in text:
        HOSTS_FILE.write_text("\n".join(_without_our_block(text)) + "\n")


def ensure_munge_key(layout: Layout) -> None:
    key = layout.munge_key
    if not key.exists():
        key.parent.mkdir(parents=True, exist_ok=True)
        key.parent.chmod(0o700)
        key.write_bytes(secrets.token_bytes(1024))
        key.chmod(0o400)


def slurm_key_path(layout: Layout) -> Path:
    """auth/slurm's key: beside slurm.conf, where slurmctld looks for it unless told otherwise."""
    return layout.slurm_conf.parent / "slurm.key"


def ensure_slurm_key(layout: Layout) -> Path:
    """auth/slurm's shared key, generated once: readable by its owner only (Slurm refuses a key
    others may read), owned by SlurmUser, whose slurmctld and slurmdbd read it (root's daemons,
    slurmd, read any file)."""
    key = slurm_key_path(layout)
    if not key.exists():
        key.parent.mkdir(parents=True, exist_ok=True)
        key.touch(mode=0o600)
        key.write_bytes(secrets.token_bytes(1024))
    key.chmod(0o600)
    accounting.ensure_users()
    accounting.chown_to(key, SLURM_USER)
    return key


def _recorded_series(state: State) -> str:
    return str(state.data.get("slurm_series", slurm_series.HOST_SERIES))


def _recorded_auth(state: State) -> str:
    return str(state.data.get("slurm_auth", slurm_series.DEFAULT_AUTH))


def running_auth(layout: Layout) -> str:
    """The authentication the ground's slurmctld was last started with (munge before any)."""
    return _recorded_auth(State(layout))


def running_series(layout: Layout) -> str:
    """The series the ground's slurmctld was last started with (the host's before any)."""
    return _recorded_series(State(layout))


def ground_programs(layout: Layout) -> slurm_series.SlurmPrograms:
    """The running ground's Slurm programs (clients on the host, or wrappers into its root)."""
    return slurm_series.programs(layout, running_series(layout))


def switching_series(state: State, series: str, auth: str | None = None) -> bool:
    """Whether ``series`` (or ``auth``, when given) differs from what the ground last ran
    (slurmctld's state of one series is not read by another, and the slurmd pods must be of the
    controller's series and hold the key of its authentication)."""
    return _recorded_series(state) != series or (auth is not None and _recorded_auth(state) != auth)


def start_slurm(
    layout: Layout,
    state: State,
    series: str | None = None,
    auth: str | None = None,
    ha: bool = False,
) -> None:
    """munged and slurmctld of Slurm ``series`` with ``auth`` (default: what the ground last ran);
    with ``ha``, the backup host's slurmctld too (proving_ground.backup_host).

    munged runs with auth/slurm too (unused there, harmless): the ground's health is every
    daemon of :data:`ground.DAEMONS` running, whatever the authentication."""
    series = series or _recorded_series(state)
    auth = auth or _recorded_auth(state)
    slurm_series.check_auth(series, auth)
    if series != slurm_series.HOST_SERIES:
        slurm_series.ensure_rootfs(layout.cache, series)
        slurm_series.bind_root(layout.cache, series)
        if not (layout.root / "slurm_plugins" / "bin" / "skb-hook").exists():
            raise ProvingGroundError(
                f"Slurm {series} runs inside its own root, which has no Python: its hooks need "
                "the Go hook client (`make hook-client` builds slurm_plugins/bin/skb-hook)"
            )
    programs = slurm_series.programs(layout, series)
    fresh_accounting = switching_series(state, series, auth)
    if fresh_accounting:
        stop_daemon(state, "slurmd-static")
        stop_daemon(state, "slurmctld-backup")
        stop_daemon(state, "slurmctld")
        # slurmdbd of the old series or authentication goes too; its database follows below.
        stop_daemon(state, "slurmdbd")
        # Saved state of another series is refused (or misread): start from none. A switch of
        # authentication starts fresh too: nodes registered with the other one are gone.
        shutil.rmtree(layout.slurm / "state", ignore_errors=True)
        state.data["slurm_series"] = series
        state.data["slurm_auth"] = auth
        state.save()
    ensure_munge_key(layout)
    if auth == slurm_series.AUTH_SLURM:
        ensure_slurm_key(layout)
    start_munged(layout, state)
    (layout.slurm / "state").mkdir(parents=True, exist_ok=True)
    _slurm_user_owns(layout, programs)
    from bridge.config import load_config
    from bridge.domain.hostlist import expand

    pools = load_config(str(bridge_config_path(layout))).pools
    ensure_hosts_entries([*pools.all_nodes(), *expand(STRAY_NODES)])
    files = {
        layout.slurm_conf: render_slurm_conf(layout, series, auth, ha),
        fragment_path(layout): render_fragment(layout, series),
        cgroup_conf_path(layout): render_cgroup_conf(cgroup_version()),
    }
    if any(path.exists() and path.read_text() != text for path, text in files.items()):
        # Power saving and node lines are read at start-up: restart rather than reconfigure.
        stop_daemon(state, "slurmd-static")
        stop_daemon(state, "slurmctld-backup")
        stop_daemon(state, "slurmctld")
    for path, text in files.items():
        path.write_text(text)
    # Accounting before slurmctld, as a site starts them; sacctmgr reads slurm.conf first.
    env = slurm_env(layout)
    accounting.start_mariadb(layout, state)
    if fresh_accounting:
        # A database a newer slurmdbd converted is refused by an older one: start from none.
        accounting.drop_database()
    accounting.start_slurmdbd(layout, state, programs, auth, env)
    accounting.ensure_associations(programs, env, CLUSTER)
    _start_slurmctld(layout, state, programs, env)
    if ha:
        _start_backup(layout, state, programs, env)
    start_static_node(layout, state, programs, env)


def _start_backup(
    layout: Layout, state: State, programs: slurm_series.SlurmPrograms, env: dict[str, str]
) -> None:
    """The backup host's slurmctld, once the primary's state on disk is whole."""
    # A backup recovers what the primary saved; a slurmctld that never saved in full (the
    # first periodic save comes minutes after a start from no state) leaves no
    # assoc_usage, and the backup stops at its takeover ("fatal: No Assoc usage file ...
    # to recover", seen). A site's primary has saved long ago; ours, fresh, stops once
    # (SIGTERM saves everything) and starts again.
    if not (layout.slurm / "state" / "assoc_usage").exists():
        stop_daemon(state, "slurmctld")
        _start_slurmctld(layout, state, programs, env)
    # Imported here: it imports the bridge's module, which imports this one.
    from . import backup_host

    scontrol = programs.client("scontrol")
    backup_host.start_slurmctld(layout, state, list(programs.slurmctld), scontrol, env)


def _start_slurmctld(
    layout: Layout, state: State, programs: slurm_series.SlurmPrograms, env: dict[str, str]
) -> None:
    start_daemon(
        state,
        "slurmctld",
        [*programs.slurmctld, "-D", "-f", str(layout.slurm_conf)],
        log_dir=layout.logs,
        env=env,
    )
    wait_until(
        "slurmctld answering",
        lambda: (
            run([programs.client("scontrol"), "ping"], env=env, check=False).stdout.count("UP") > 0
        ),
        timeout_s=60,
        log_path=layout.logs / "slurmctld.log",
    )


def _slurm_user_owns(layout: Layout, programs: slurm_series.SlurmPrograms) -> None:
    """slurmctld and slurmdbd drop to SlurmUser: it writes their state and logs, and the hooks'
    log (they run as SlurmUser too)."""
    accounting.ensure_users()
    accounting.chown_to(layout.slurm / "state", SLURM_USER)
    if not programs.on_host:
        # With auth/slurm, slurmctld and slurmdbd make their sack sockets' directories in the
        # root's /run once they run as SlurmUser (seen: "_prepare_run_dir: failed to create
        # /run/slurmdbd"): made here, SlurmUser's, as a site's packages or tmpfiles do.
        for daemon in ("slurmctld", "slurmdbd"):
            run_dir = slurm_series.rootfs(layout.cache, programs.series) / "run" / daemon
            run_dir.mkdir(parents=True, exist_ok=True)
            accounting.chown_to(run_dir, SLURM_USER)
    layout.logs.mkdir(parents=True, exist_ok=True)
    for name in ("slurmctld.log", "hooks.log"):
        (layout.logs / name).touch()
        accounting.chown_to(layout.logs / name, SLURM_USER)


def start_munged(layout: Layout, state: State) -> None:
    """munged on our own socket with our own key (a site's munged, if any, is never touched)."""
    munge_dir = layout.local / "munge"
    os.makedirs(GROUND_RUN, mode=0o755, exist_ok=True)
    os.chmod(GROUND_RUN, 0o755)  # noqa: S103 (every user reaches munged: job users too)
    os.makedirs(os.path.dirname(MUNGE_SOCKET), mode=0o755, exist_ok=True)
    start_daemon(
        state,
        "munged",
        [
            "/usr/sbin/munged",
            "--foreground",
            "--force",
            f"--socket={MUNGE_SOCKET}",
            f"--key-file={layout.munge_key}",
            f"--pid-file={munge_dir / 'munged.pid'}",
            f"--seed-file={munge_dir / 'munged.seed'}",
            f"--log-file={layout.logs / 'munged.log'}",
        ],
        log_dir=layout.logs,
    )
    wait_until(
        "munged",
        lambda: os.path.exists(MUNGE_SOCKET),
        timeout_s=15,
        log_path=layout.logs / "munged.log",
    )


def remove_static_cgroups() -> list[str]:
    """The cgroups the static node's slurmd made on this host (``slurm_<node>`` under each
    controller: Debian builds Slurm with multiple slurmds per host), emptied ones only, deepest
    first; returns what was removed. ``make down`` calls it once slurmd has stopped."""
    removed = []
    for top in Path("/sys/fs/cgroup").glob(f"*/slurm_{STATIC_NODE}"):
        for directory in sorted(
            (p for p in top.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True
        ):
            with contextlib.suppress(OSError):
                directory.rmdir()
        with contextlib.suppress(OSError):
            top.rmdir()
            removed.append(str(top))
    return removed


def start_static_node(
    layout: Layout, state: State, programs: slurm_series.SlurmPrograms, env: dict[str, str]
) -> None:
    """The site's static node: slurmd of the ground's series on this host (as root, as slurmd
    runs), registered with slurmctld before the bridge starts."""
    start_daemon(
        state,
        "slurmd-static",
        [*programs.slurmd, "-D", "-N", STATIC_NODE, "-f", str(layout.slurm_conf)],
        log_dir=layout.logs,
        env=env,
    )
    scontrol = programs.client("scontrol")

    def registered() -> bool:
        shown = run([scontrol, "show", "node", STATIC_NODE], env=env, check=False).stdout
        return "State=IDLE" in shown or "State=MIXED" in shown or "State=ALLOCATED" in shown

    wait_until(
        f"static node {STATIC_NODE} registered",
        registered,
        timeout_s=60,
        log_path=layout.logs / "slurmd-static.log",
    )
