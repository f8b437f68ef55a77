"""The site's slurm.conf and the files it Includes, read for the names they define (see
``bridge.domain.site_names``); the bridge's own rendered fragment is left out."""

from __future__ import annotations

import glob
import os
from pathlib import Path

from bridge.domain.site_names import SiteNames, is_our_render, site_names
from bridge.errors import BridgeError

#: Where Slurm looks when SLURM_CONF is not set (Debian's and SchedMD's builds).
DEFAULT_SLURM_CONF = "/etc/slurm/slurm.conf"
#: Include depth at which a loop is assumed (Slurm itself allows nesting).
MAX_DEPTH = 16


def slurm_conf_path(configured: str | None) -> Path:
    """The slurm.conf the site's slurmctld reads: the bridge's ``slurm.conf`` setting, else
    $SLURM_CONF, else Slurm's default."""
    return Path(configured or os.environ.get("SLURM_CONF") or DEFAULT_SLURM_CONF)


def read_site_names(path: Path) -> dict[str, SiteNames]:
    """Each site file (slurm.conf first, then its Includes, depth first) → what it defines.
    An Include that is relative is relative to slurm.conf's directory, as Slurm reads it."""
    found: dict[str, SiteNames] = {}
    base = path.parent

    def read(file: Path, depth: int) -> None:
        if depth > MAX_DEPTH:
            raise BridgeError(f"{file}: Include nested deeper than {MAX_DEPTH} (a loop?)")
        try:
            text = file.read_text(errors="replace")
        except FileNotFoundError:
            if depth == 0:
                raise BridgeError(
                    f"{file} does not exist; give the site's slurm.conf with --site-conf"
                ) from None
            return  # an Include of a file not written yet (the fragment, before a first render)
        except OSError as e:
            raise BridgeError(
                f"cannot read {file} ({e.strerror}) for the names the site defines; give the "
                "site's slurm.conf with --site-conf"
            ) from e
        if is_our_render(text) or str(file) in found:
            return
        names = site_names(text)
        found[str(file)] = names
        for include in names.includes:
            pattern = include if os.path.isabs(include) else str(base / include)
            matches = sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]
            for match in matches:
                read(Path(match), depth + 1)

    read(path, 0)
    return found
