"""Where a value sits in a nested document, as data: ``("pools", 1, "features", 0)``.

Domain errors carry one (a :class:`~bridge.domain.pools.PoolError` says which pool field is
wrong) so that the config reader can find the file line without parsing text back.
"""

from __future__ import annotations

FieldPath = tuple[str | int, ...]


def dotted(path: FieldPath) -> str:
    """``("pools", 1, "cpus")`` → ``pools[1].cpus``."""
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return text
