"""Slurm on the host: munged with a key of our own and slurmctld with CLOUD nodes whose power
saving calls the hooks in ``slurm_plugins/``."""

from __future__ import annotations

import logging
import os
import secrets
import socket
from collections.abc import Mapping

from .layout import HOST_IP, MUNGE_SOCKET, SLURMCTLD_PORT, Layout
from .processes import State, run, start_daemon, wait_until

log = logging.getLogger(__name__)

#: name → (nodes, CPUs, RealMemory MB, partition). Kept equal to the bridge's proving-ground pools.
POOLS: Mapping[str, tuple[str, int, int, str]] = {
    "cpu": ("cpu-[0-15]", 2, 1024, "cpu"),
    "big": ("big-[0-3]", 4, 4096, "big"),
    "sim": ("sim-[0-63]", 8, 8192, "sim"),
}

#: Short timers so that tests and the demo see a whole cycle in well under a minute.
TIMERS = {"SuspendTime": 20, "SuspendTimeout": 10, "ResumeTimeout": 180, "SlurmdTimeout": 30}


def slurm_env(layout: Layout) -> dict[str, str]:
    return {**os.environ, "SLURM_CONF": str(layout.slurm_conf)}


def render_slurm_conf(layout: Layout) -> str:
    plugins = layout.root / "slurm_plugins"
    host = socket.gethostname().split(".")[0]
    lines = [
        "# Written by the proving ground (deploy/local/proving_ground/slurm.py); edits are lost.",
        "ClusterName=provingground",
        f"SlurmctldHost={host}({HOST_IP})",
        f"SlurmctldPort={SLURMCTLD_PORT}",
        "SlurmdPort=6818",
        "SlurmUser=root",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={MUNGE_SOCKET}",
        f"StateSaveLocation={layout.slurm / 'state'}",
        "SlurmdSpoolDir=/var/spool/slurmd",
        f"SlurmctldPidFile={layout.slurm / 'slurmctld.pid'}",
        f"SlurmctldLogFile={layout.logs / 'slurmctld.log'}",
        "SlurmctldDebug=info",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_CPU",
        "MpiDefault=none",
        "ReturnToService=2",
        "KillWait=5",
        "MinJobAge=300",
        "InactiveLimit=0",
        # A pod's slurmd has the container's view of the hardware; trust the configured values.
        "SlurmdParameters=config_overrides",
        "PrivateData=cloud",
        "TreeWidth=65533",
        "SlurmctldParameters=cloud_reg_addrs,idle_on_node_suspend,enable_configless,"
        "power_save_interval=5,power_save_min_interval=0",
        f"ResumeProgram={plugins / 'resume'}",
        f"SuspendProgram={plugins / 'suspend'}",
        f"ResumeFailProgram={plugins / 'resume_fail'}",
        "ResumeRate=0",
        "SuspendRate=0",
        *(f"{key}={value}" for key, value in TIMERS.items()),
    ]
    for name, (nodes, cpus, memory, _) in POOLS.items():
        lines.append(f"NodeName={nodes} CPUs={cpus} RealMemory={memory} Features={name} State=CLOUD")
    for index, (nodes, _, _, partition) in enumerate(POOLS.values()):
        default = " Default=YES" if index == 0 else ""
        lines.append(f"PartitionName={partition} Nodes={nodes}{default} MaxTime=INFINITE State=UP")
    return "\n".join(lines) + "\n"


def ensure_munge_key(layout: Layout) -> None:
    key = layout.munge_key
    if not key.exists():
        key.parent.mkdir(parents=True, exist_ok=True)
        key.parent.chmod(0o700)
        key.write_bytes(secrets.token_bytes(1024))
        key.chmod(0o400)


def start_slurm(layout: Layout, state: State) -> None:
    ensure_munge_key(layout)
    munge_dir = layout.local / "munge"
    os.makedirs(os.path.dirname(MUNGE_SOCKET), mode=0o755, exist_ok=True)
    start_daemon(state, "munged", [
        "/usr/sbin/munged", "--foreground", "--force", f"--socket={MUNGE_SOCKET}",
        f"--key-file={layout.munge_key}", f"--pid-file={munge_dir / 'munged.pid'}",
        f"--seed-file={munge_dir / 'munged.seed'}", f"--log-file={layout.logs / 'munged.log'}",
    ], log_dir=layout.logs)
    wait_until("munged", lambda: os.path.exists(MUNGE_SOCKET), timeout_s=15,
               log_path=layout.logs / "munged.log")
    (layout.slurm / "state").mkdir(parents=True, exist_ok=True)
    layout.slurm_conf.write_text(render_slurm_conf(layout))
    env = slurm_env(layout)
    start_daemon(state, "slurmctld", ["/usr/sbin/slurmctld", "-D", "-f", str(layout.slurm_conf)],
                 log_dir=layout.logs, env=env)
    wait_until("slurmctld answering", lambda: run(["/usr/bin/scontrol", "ping"], env=env,
               check=False).stdout.count("UP") > 0, timeout_s=60,
               log_path=layout.logs / "slurmctld.log")
