"""What changed between two configurations, and what of it a running bridge can take over.

Pools (templates, images, shapes, patience, breakers) are swapped in by a reload; everything
else (socket, listeners, TLS, Kubernetes and Slurm connections, pacing) is wired into threads,
sockets and clients at start-up and needs a restart.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from bridge.settings import SECTIONS, BridgeConfig


@dataclass(frozen=True)
class ConfigChange:
    """``pools``: names of the pools added, removed or changed, in the new file's order (removed
    ones last); ``needs_restart``: the dotted names of the other settings that changed."""

    pools: tuple[str, ...]
    needs_restart: tuple[str, ...]


def config_change(old: BridgeConfig, new: BridgeConfig) -> ConfigChange:
    """How ``new`` differs from ``old`` (see :class:`ConfigChange`)."""
    before = {pool.name: pool for pool in old.pools}
    after = {pool.name: pool for pool in new.pools}
    pools = [name for name, pool in after.items() if before.get(name) != pool]
    pools += [name for name in before if name not in after]
    restart = ["cluster_name"] if old.cluster_name != new.cluster_name else []
    for section in SECTIONS:
        was, now = getattr(old, section), getattr(new, section)
        restart += [
            f"{section}.{f.name}"
            for f in fields(was)
            if getattr(was, f.name) != getattr(now, f.name)
        ]
    return ConfigChange(tuple(pools), tuple(restart))
