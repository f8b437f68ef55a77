"""Which Slurm release the bridge talks to, from what ``scontrol --version`` prints.

Recorded from real daemons (``tests/data/slurm/v*/scontrol-version.txt``): Debian's packages print
``slurm-wlm 22.05.8``, ``slurm-wlm 24.11.5``, ``slurm-wlm 26.05.5``; SchedMD's own builds print
``slurm 24.11.5``. A release series (``24.11``) fixes the JSON the CLI prints and the commands it
knows; the patch level does not.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from bridge.errors import BackendError

# Package name (Debian renames it slurm-wlm), then major.minor.patch; a pre-release tail such as
# "-0rc1" is allowed and ignored. Slurm writes the minor with two digits (24.05, 26.05).
_VERSION: Final = re.compile(r"(slurm[\w-]*) (\d+)\.(\d+)\.(\d+)(?:[-.+~]\S*)?")


class SlurmVersionError(BackendError):
    """``scontrol --version`` printed something that is not a Slurm version."""


@dataclass(frozen=True, order=True)
class SlurmVersion:
    """A Slurm release; ordered, so ``version >= SlurmVersion(23, 2, 0)`` reads as it says."""

    major: int
    minor: int
    patch: int

    def __str__(self) -> str:
        return f"{self.major}.{self.minor:02d}.{self.patch}"

    @property
    def series(self) -> str:
        """The release series, as Slurm names it: ``24.11``."""
        return f"{self.major}.{self.minor:02d}"

    @property
    def scontrol_lists_nodes_as_json(self) -> bool:
        """``scontrol show nodes --json`` exists (23.02 on); 22.05's scontrol rejects ``--json``
        and its ``sinfo --json`` is the per-node listing instead."""
        return self >= SCONTROL_JSON_SINCE


#: The first series whose scontrol prints JSON (and whose sinfo --json groups nodes).
SCONTROL_JSON_SINCE: Final = SlurmVersion(23, 2, 0)


def parse_slurm_version(text: str) -> SlurmVersion:
    """The version in ``scontrol --version``'s output (``slurm-wlm 24.11.5``).

    Raises :class:`SlurmVersionError` quoting the text (shortened) when it is not one.
    """
    line = text.strip()
    match = _VERSION.fullmatch(line)
    if match is None:
        shown = line if len(line) <= 80 else line[:77] + "..."
        raise SlurmVersionError(
            f"scontrol --version: expected 'slurm <major>.<minor>.<patch>', got {shown!r}"
        )
    return SlurmVersion(int(match[2]), int(match[3]), int(match[4]))
