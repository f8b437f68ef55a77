"""The proving ground's second controller host (``make up HA=1``), as a site runs a backup
slurmctld: slurm.conf lists ``SlurmctldHost`` twice, both controllers share StateSaveLocation,
and a bridge runs beside each, the two electing a leader on a Lease and forwarding the hooks'
calls to it over mutual TLS (docs/operations.md, "Two bridges").

The primary host is this machine (its name, :data:`~.layout.HOST_IP`). The backup host
:data:`BACKUP_HOST` is a network namespace on the pod bridge (:data:`BACKUP_IP`, so pods and
the primary reach it as they would another machine) with its own host name (a UTS namespace:
slurmctld finds its place in ``SlurmctldHost`` by it), ``/etc/hosts`` (``/etc/netns``) and, in a
mount namespace, its own copies of what a host keeps locally: the bridge's socket directory and
slurmctld's pid file directory (:mod:`.host_namespace`). Everything else, the checkout, the
Slurm state, munged's socket, is the same file system, as NFS gives a site. Both slurmctlds log
to stderr (.local/logs/slurmctld.log and slurmctld-backup.log); the hooks of both append to
.local/logs/hooks.log.

With munge only: auth/slurm's sack socket, in the Slurm root's /run, would be shared by both
controllers here.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import socket
import sys
from pathlib import Path
from typing import Any

from . import bridge_daemon, pki
from .layout import (
    APISERVER_PORT,
    BACKUP_HOST,
    BACKUP_IP,
    BRIDGE_NAME,
    BRIDGE_USER,
    GROUND_RUN,
    HA_PID_DIR,
    HOST_IP,
    HOST_LOCAL_RUN,
    POD_SUBNET,
    SLURM_USER,
    SLURMCTLD_PORT,
    Layout,
)
from .processes import ProvingGroundError, State, run, start_daemon, stop_daemon, wait_until

#: The host end of its veth pair, on the pod bridge.
BACKUP_VETH = "skb-ctl-b0"
#: Its daemons, started after (and stopped before) the primary's.
BACKUP_DAEMONS = ("slurmctld-backup", "bridge-backup")
#: The bridges' Lease: a dead leader's is taken over after this.
LEASE_DURATION_S = 10
LEASE_RETRY_S = 2
#: Each bridge's mutual-TLS listener (on its host's address), where a follower forwards.
FORWARD_PORT = 6831
PID_DIR = Path(HA_PID_DIR)
#: Where the backup host's own /run entries live on this machine.
HOST_RUN = Path(GROUND_RUN) / "hosts" / BACKUP_HOST
MODE_KEY = "controllers"


def wanted_from_env(environ: dict[str, str] | None = None) -> bool:
    """``make up HA=1`` (SKB_HA=1): a primary and a backup controller."""
    value = (environ if environ is not None else os.environ).get("SKB_HA", "")
    if value not in ("", "0", "1"):
        raise ProvingGroundError(f"SKB_HA={value!r}: use 1 (two controllers) or 0 (one)")
    return value == "1"


def running_ha(state: State) -> bool:
    """Whether the ground was last brought up with two controllers."""
    return bool(state.data.get(MODE_KEY, 1) == 2)


def primary_host() -> str:
    return socket.gethostname().split(".")[0]


def host_dir(layout: Layout) -> Path:
    """The bridges' HA configuration and certificates, a directory per host."""
    return layout.local / "hosts"


def conf_server() -> str:
    """The pods' ``slurmd --conf-server``: either controller answers."""
    return f"{HOST_IP}:{SLURMCTLD_PORT},{BACKUP_IP}:{SLURMCTLD_PORT}"


# --- the host ---------------------------------------------------------------------------------


def _netns_exists() -> bool:
    return Path("/run/netns", BACKUP_HOST).exists()


def ensure_host(layout: Layout, state: State) -> None:
    """The network namespace on the pod bridge and the host-local directories (idempotent)."""
    if not _netns_exists():
        run(["ip", "netns", "add", BACKUP_HOST])
        state.mark_created("netns", BACKUP_HOST)
    if run(["ip", "link", "show", BACKUP_VETH], check=False).returncode != 0:
        run(["ip", "link", "add", BACKUP_VETH, "type", "veth", "peer", "name", "eth0",
             "netns", BACKUP_HOST])  # fmt: skip
        state.mark_created("interfaces", BACKUP_VETH)
    run(["ip", "link", "set", BACKUP_VETH, "master", BRIDGE_NAME, "up"])
    inside = ["ip", "-n", BACKUP_HOST]
    prefix = POD_SUBNET.split("/")[1]
    addresses = run([*inside, "-o", "addr", "show", "dev", "eth0"]).stdout
    if f"{BACKUP_IP}/{prefix}" not in addresses:
        run([*inside, "addr", "add", f"{BACKUP_IP}/{prefix}", "dev", "eth0"])
    run([*inside, "link", "set", "lo", "up"])
    run([*inside, "link", "set", "eth0", "up"])
    run([*inside, "route", "replace", "default", "via", HOST_IP])
    state.save()
    slurm_user = pwd.getpwnam(SLURM_USER)
    for directory in (PID_DIR, HOST_RUN / "host" / PID_DIR.name):  # slurmctld writes there
        directory.mkdir(parents=True, exist_ok=True)
        os.chown(directory, slurm_user.pw_uid, slurm_user.pw_gid)
    # The bridges' RuntimeDirectory on each host: made here if missing (the backup's bind needs
    # the primary's to exist), left as they are otherwise; each unit sets its owner and mode.
    for directory in (HOST_RUN / "bridge", Path(bridge_daemon.BRIDGE_SOCKET).parent):
        directory.mkdir(parents=True, exist_ok=True)


def hosts_text(host_hosts: str, controllers: dict[str, str]) -> str:
    """The backup host's /etc/hosts from this machine's (``host_hosts``): every line kept but
    the controllers' names, which go to their addresses (``controllers``: name → address; the
    primary's name is loopback here, which from the backup host is itself)."""
    lines = []
    for line in host_hosts.splitlines():
        fields = line.split("#", 1)[0].split()
        if len(fields) < 2 or not controllers.keys() & set(fields[1:]):
            lines.append(line)
            continue
        kept = [name for name in fields[1:] if name not in controllers]
        if kept:
            lines.append(" ".join([fields[0], *kept]))
    lines += [f"{address} {name}" for name, address in controllers.items()]
    return "\n".join(lines) + "\n"


def write_hosts_file() -> Path:
    """The backup host's /etc/hosts, where ``ip netns exec`` binds it (/etc/netns/<netns>/hosts):
    :func:`hosts_text` of this machine's, the CLOUD node names included."""
    path = Path("/etc/netns") / BACKUP_HOST / "hosts"
    path.parent.mkdir(parents=True, exist_ok=True)
    controllers = {primary_host(): HOST_IP, BACKUP_HOST: BACKUP_IP}
    path.write_text(hosts_text(Path("/etc/hosts").read_text(), controllers))
    return path


def remove_host(state: State) -> None:
    """Stop the backup host's daemons and remove what :func:`ensure_host` made."""
    for name in reversed(BACKUP_DAEMONS):
        stop_daemon(state, name)
    if BACKUP_VETH in state.created("interfaces"):
        run(["ip", "link", "delete", BACKUP_VETH], check=False)
        state.unmark_created("interfaces", BACKUP_VETH)
    if BACKUP_HOST in state.created("netns"):
        run(["ip", "netns", "delete", BACKUP_HOST], check=False)
        state.unmark_created("netns", BACKUP_HOST)
    shutil.rmtree(Path("/etc/netns") / BACKUP_HOST, ignore_errors=True)
    with_children = Path("/etc/netns")
    if with_children.is_dir() and not any(with_children.iterdir()):
        with_children.rmdir()
    shutil.rmtree(HOST_RUN.parent, ignore_errors=True)
    shutil.rmtree(HOST_LOCAL_RUN, ignore_errors=True)
    state.data.pop(MODE_KEY, None)
    state.save()


def on_host(layout: Layout, argv: list[str]) -> list[str]:
    """``argv`` run on the backup host: its network, host name and host-local directories."""
    binds = [
        (HOST_RUN / "bridge", Path(bridge_daemon.BRIDGE_SOCKET).parent),
        (HOST_RUN / "host", Path(HOST_LOCAL_RUN)),
    ]
    return [
        "ip", "netns", "exec", BACKUP_HOST,
        sys.executable, "-m", "proving_ground.host_namespace", "--hostname", BACKUP_HOST,
        *(arg for source, target in binds for arg in ("--bind", f"{source}:{target}")),
        "--", *argv,
    ]  # fmt: skip


# --- the backup's daemons ---------------------------------------------------------------------


def _launcher_env(env: dict[str, str], layout: Layout) -> dict[str, str]:
    return {**env, "PYTHONPATH": str(layout.root / "dev")}


def start_slurmctld(
    layout: Layout, state: State, slurmctld: list[str], scontrol: str, env: dict[str, str]
) -> None:
    """The backup slurmctld on its host, in standby once the primary answers its pings."""
    write_hosts_file()
    start_daemon(
        state,
        "slurmctld-backup",
        on_host(layout, [*slurmctld, "-D", "-f", str(layout.slurm_conf)]),
        log_dir=layout.logs,
        env=_launcher_env(env, layout),
    )

    def both_answer() -> bool:
        out = run([scontrol, "ping"], env=env, check=False).stdout
        return out.count("is UP") == 2

    wait_until(
        f"backup slurmctld on {BACKUP_HOST} answering",
        both_answer,
        timeout_s=60,
        log_path=layout.logs / "slurmctld-backup.log",
    )


def _issue_bridge_certificate(layout: Layout, host: str, address: str) -> Path:
    """A serving and client certificate of the cluster CA for the bridge on ``host``, copied
    where the bridge's user reads it (the CA's directory is root's)."""
    name = f"bridge-{host}"
    if not (layout.pki / f"{name}.crt").exists():
        pki.issue(
            layout.pki, name, f"/CN={host}",
            f"subjectAltName=DNS:{host},IP:{address}\nextendedKeyUsage=serverAuth,clientAuth\n",
        )  # fmt: skip
    target = host_dir(layout) / host
    target.mkdir(parents=True, exist_ok=True)
    user = pwd.getpwnam(BRIDGE_USER)
    for source, copy in (
        (layout.pki / f"{name}.crt", "tls.crt"),
        (layout.pki / f"{name}.key", "tls.key"),
        (layout.pki / "ca.crt", "ca.crt"),
    ):
        shutil.copyfile(source, target / copy)
        os.chown(target / copy, user.pw_uid, user.pw_gid)
        (target / copy).chmod(0o400 if copy == "tls.key" else 0o444)
    for directory in (target.parent, target):
        directory.chmod(0o755)
    return target


def bridge_config(base: dict[str, Any], tls_dir: Path, address: str) -> dict[str, Any]:
    """dev/bridge.yaml for the bridge at ``address``: leader election, the mutual-TLS listener
    its follower forwards to (advertised on the Lease), and both controllers for the pods."""
    config: dict[str, Any] = json.loads(json.dumps(base))  # a deep copy of plain data
    config["slurm"]["conf_server"] = conf_server()
    config["kubernetes"].update(
        leader_election=True, lease_duration_s=LEASE_DURATION_S, lease_retry_s=LEASE_RETRY_S
    )
    config["bridge"].update(
        tcp_listen=f"{address}:{FORWARD_PORT}",
        tls_cert=str(tls_dir / "tls.crt"),
        tls_key=str(tls_dir / "tls.key"),
        tls_client_ca=str(tls_dir / "ca.crt"),
        # The other bridge's certificate names (a follower presents its own when forwarding).
        tls_client_names=[primary_host(), BACKUP_HOST],
    )
    return config


def write_bridge_configs(layout: Layout, base: dict[str, Any]) -> dict[str, Path]:
    """Each host's bridge configuration and certificate: host name → config path."""
    paths = {}
    for host, address in ((primary_host(), HOST_IP), (BACKUP_HOST, BACKUP_IP)):
        tls_dir = _issue_bridge_certificate(layout, host, address)
        path = tls_dir / "bridge.yaml"
        path.write_text(json.dumps(bridge_config(base, tls_dir, address), indent=1) + "\n")
        path.chmod(0o644)
        paths[host] = path
    return paths


def backup_kubeconfig(layout: Layout) -> Path:
    """The bridge's kubeconfig with the API server at the primary host's pod-bridge address
    (loopback is the backup host's own)."""
    source = bridge_daemon.bridge_kubeconfig(layout)
    target = source.with_name(f"bridge-{BACKUP_HOST}.kubeconfig")
    text = source.read_text().replace(
        f"server: https://127.0.0.1:{APISERVER_PORT}", f"server: https://{HOST_IP}:{APISERVER_PORT}"
    )
    target.unlink(missing_ok=True)
    target.write_text(text)
    user = pwd.getpwnam(BRIDGE_USER)
    os.chown(target, user.pw_uid, user.pw_gid)
    target.chmod(0o400)
    return target


def start_bridge(layout: Layout, state: State, config: Path) -> None:
    """The backup host's bridge: the shipped unit as the bridge's user, as on the primary."""
    bridge_daemon.start_bridge(
        layout,
        state,
        config,
        {"SKB_KUBERNETES_KUBECONFIG": str(backup_kubeconfig(layout))},
        name="bridge-backup",
        launch=lambda argv: on_host(layout, argv),
    )
