"""Reload the configuration file without a restart: on SIGHUP, and when the file changes.

A mounted ConfigMap changes by Kubernetes swapping a symlink, with no signal: the file's
identity (inode, size, mtime) is compared once per reconcile pass. A valid file's pools are
swapped into the service between two passes; an invalid file is logged and the old
configuration stays; a setting that needs a restart keeps its old value until then.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Mapping

from bridge.config import load_config
from bridge.config.changes import config_change
from bridge.errors import ConfigError
from bridge.service.use_cases import BridgeService
from bridge.settings import BridgeConfig

log = logging.getLogger(__name__)

#: What identifies one version of the file: (inode, size, mtime in ns); None when unreadable.
FileIdentity = tuple[int, int, int] | None


def file_identity(path: str) -> FileIdentity:
    """The identity of the file ``path`` leads to (symlinks followed), or None."""
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return (stat.st_ino, stat.st_size, stat.st_mtime_ns)


class ConfigReloader:
    """Reloads ``path`` into ``service`` when asked (:meth:`request`) or when the file changed;
    :meth:`reload_if_due` does it, on the reconcile thread, before a pass."""

    def __init__(
        self,
        service: BridgeService,
        path: str,
        *,
        environ: Mapping[str, str] | None = None,
        identity: Callable[[str], FileIdentity] = file_identity,
        on_pools_changed: Callable[[BridgeConfig], None] | None = None,
    ) -> None:
        self.service = service
        #: Called with the new configuration once its pools are in place (the pools'
        #: PodDisruptionBudgets follow a pool grown, added or given a budget by the reload).
        self.on_pools_changed = on_pools_changed
        self.path = path
        self.environ = environ
        self._identity = identity
        self._seen = identity(path)
        self._requested = threading.Event()

    def request(self) -> None:
        """Reload before the next pass (SIGHUP): safe in a signal handler, takes no lock."""
        self._requested.set()

    def reload_if_due(self) -> bool:
        """Reload if asked to or if the file changed; whether new pools were taken over."""
        seen = self._identity(self.path)
        if not self._requested.is_set() and seen == self._seen:
            return False
        self._requested.clear()
        self._seen = seen
        return self.reload()

    def reload(self) -> bool:
        """Read the file now and take over its pools; whether any changed."""
        try:
            new = load_config(self.path, self.environ)
        except ConfigError as e:
            log.error("config not reloaded, the old one stays: %s", e)
            return False
        change = config_change(self.service.config, new)
        for name in change.needs_restart:
            log.warning(
                "config reload: %s changed in %s; it takes effect after a restart, "
                "the old value stays until then",
                name,
                self.path,
            )
        if not change.pools:
            log.info("config reloaded from %s: no pool changed", self.path)
            return False
        hashes = self.service.replace_pools(new.pools)
        log.info("config reloaded from %s: pools changed: %s", self.path, ", ".join(change.pools))
        log.info(
            "template hashes now: %s",
            ", ".join(f"{pool}={digest}" for pool, digest in hashes.items()),
        )
        if self.on_pools_changed is not None:
            self.on_pools_changed(self.service.config)
        return True
