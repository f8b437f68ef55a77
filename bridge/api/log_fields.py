"""Text a caller chose, made safe for one log line: the bridge's log is read by people and
parsed by tools, and a newline or an escape sequence in a caller's field would forge a line."""

from __future__ import annotations


def printable(text: str, limit: int = 64) -> str:
    """``text`` for one log line: printable ASCII kept, anything else (a newline, an escape
    sequence, a backslash) written as Python writes it escaped (``\\n``, ``\\x1b``,
    ``\\u2028``), cut at ``limit`` characters with ``...``."""
    cut = text[:limit]
    shown = "".join(c if " " <= c <= "~" and c != "\\" else ascii(c)[1:-1] for c in cut)
    return shown + ("..." if len(text) > limit else "")
