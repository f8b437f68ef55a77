"""The pod bridge of the real node. The host owns the gateway address: slurmctld and the API
server are reached there by pods, and pods' addresses on this bridge are reached from the host."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from .layout import BRIDGE_NAME, HOST_IP, POD_SUBNET
from .processes import State, run

log = logging.getLogger(__name__)


def bridge_exists() -> bool:
    return run(["ip", "link", "show", BRIDGE_NAME], check=False).returncode == 0


def ensure_bridge(state: State) -> None:
    """Create the bridge with the host's gateway address (CNI's bridge plugin then reuses it)."""
    if not bridge_exists():
        run(["ip", "link", "add", BRIDGE_NAME, "type", "bridge"])
        state.mark_created("interfaces", BRIDGE_NAME)
        prefix = POD_SUBNET.split("/")[1]
        run(["ip", "addr", "add", f"{HOST_IP}/{prefix}", "dev", BRIDGE_NAME])
        log.info("created bridge %s with %s/%s", BRIDGE_NAME, HOST_IP, prefix)
    run(["ip", "link", "set", BRIDGE_NAME, "up"])


def remove_bridge(state: State) -> None:
    if BRIDGE_NAME in state.created("interfaces") and bridge_exists():
        run(["ip", "link", "delete", BRIDGE_NAME])
        log.info("removed bridge %s", BRIDGE_NAME)
    state.unmark_created("interfaces", BRIDGE_NAME)


def write_cni_config(conf_dir: Path, ipam_dir: Path) -> None:
    """A bridge + host-local network; no masquerade: pods only ever talk to this host."""
    conf_dir.mkdir(parents=True, exist_ok=True)
    ipam_dir.mkdir(parents=True, exist_ok=True)
    first = POD_SUBNET.split("/")[0].rsplit(".", 1)[0]
    conflist = {
        "cniVersion": "1.0.0",
        "name": "slurm-k8s-bridge",
        "plugins": [
            {
                "type": "bridge",
                "bridge": BRIDGE_NAME,
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "dataDir": str(ipam_dir),
                    "ranges": [
                        [
                            {
                                "subnet": POD_SUBNET,
                                "gateway": HOST_IP,
                                "rangeStart": f"{first}.10",
                                "rangeEnd": f"{first}.250",
                            }
                        ]
                    ],
                    "routes": [{"dst": "0.0.0.0/0"}],
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }
    (conf_dir / "10-slurm-k8s-bridge.conflist").write_text(json.dumps(conflist, indent=2))


def mounts_under(*prefixes: Path) -> list[str]:
    """Mount points below any of ``prefixes``, deepest first (the order to unmount them)."""
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if any(point == str(p) or point.startswith(str(p) + "/") for p in prefixes):
            found.append(point)
    return sorted(set(found), key=lambda p: p.count("/"), reverse=True)


def unmount_all(*prefixes: Path) -> list[str]:
    """Unmount (lazily, as a last resort) everything below ``prefixes``; return what was mounted."""
    points = mounts_under(*prefixes)
    for point in points:
        # A point may hold several mounts stacked on each other: unmount until none is left.
        for _ in range(8):
            if point not in mounts_under(Path(point)):
                break
            if run(["umount", point], check=False).returncode != 0:
                run(["umount", "-l", point], check=False)
    return points


def kube_chains() -> list[str]:
    """KUBE-* chains present, as ``tool/table/chain``."""
    found = []
    for tool in ("iptables", "ip6tables"):
        for table in ("filter", "nat", "mangle"):
            listing = run([tool, "-t", table, "-S"], check=False).stdout.splitlines()
            found += [
                f"{tool}/{table}/{line.split()[1]}"
                for line in listing
                if line.startswith("-N KUBE-")
            ]
    return found


def remove_kube_chains() -> list[str]:
    """Remove the KUBE-* iptables chains our kubelet left (kube-proxy --cleanup removes its own).

    Only called by `down` after stopping the kubelet and kube-proxy that `up` started; returns
    what was removed, as ``tool/table/chain``.
    """
    removed = []
    for tool in ("iptables", "ip6tables"):
        for table in ("filter", "nat", "mangle"):
            listing = run([tool, "-t", table, "-S"], check=False).stdout.splitlines()
            chains = [line.split()[1] for line in listing if line.startswith("-N KUBE-")]
            for line in listing:  # rules that jump into those chains, from any chain
                parts = line.split()
                if parts[:1] == ["-A"] and "-j" in parts and parts[parts.index("-j") + 1] in chains:
                    run([tool, "-t", table, "-D", *parts[1:]], check=False)
            for chain in chains:
                run([tool, "-t", table, "-F", chain], check=False)
            for chain in chains:
                if run([tool, "-t", table, "-X", chain], check=False).returncode == 0:
                    removed.append(f"{tool}/{table}/{chain}")
    return removed
