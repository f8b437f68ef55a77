"""How each scalar setting is read: its type and range, from YAML and from an environment variable.

A rule is a :class:`Rule` inside the field's ``Annotated`` type; pydantic runs it before its own
(lax) type check, so the messages are ours (``must be a positive integer up to 1024, got 0``).
Problems are :class:`FieldProblem`, which the reader turns into a ConfigError naming the line.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BeforeValidator

from bridge.config.yaml_lines import show
from bridge.domain.field_path import FieldPath
from bridge.domain.gang_mode import GANG_AUTO, GANG_OFF
from bridge.domain.pod_rendering import AUTH_MUNGE, AUTH_SLURM
from bridge.domain.pools import MAX_PATIENCE_S, dns_label_problem

MAX_SECONDS = MAX_PATIENCE_S  # beyond a year a pause is a typo; timedelta/wait overflow later
MAX_COUNT = 2**31 - 1  # integer settings (Slurm's CPUs and MB fit; Python's repr stays cheap)
MAX_CONCURRENCY = 1024

Check = Callable[[Any], "str | None"]
_HOST_PORT = re.compile(r"(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.\-]+)(:(?P<port>\d{1,5}))?")
_LOOPBACK_NAMES = frozenset({"localhost"})


class FieldProblem(ValueError):
    """A value is wrong; ``path`` leads from where pydantic found it to the value at fault."""

    def __init__(self, message: str, path: FieldPath = ()) -> None:
        super().__init__(message)
        self.message = message
        self.path = path


@dataclass(frozen=True)
class Rule:
    """Reads one setting: ``read`` checks the YAML value, ``from_env`` turns a variable's text
    into the value the YAML would have held (it checks nothing: ``read`` runs on it later)."""

    read: Callable[[Any], Any]
    from_env: Callable[[str], Any]

    def __call__(self, value: Any) -> Any:
        return self.read(value)


def _text(text: str) -> str:
    return text


def _optional(read: Callable[[Any], Any]) -> Rule:
    # An empty variable unsets an optional setting (SKB_SLURM_CONF="" = Slurm's default).
    return Rule(
        read=lambda value: None if value is None else read(value),
        from_env=lambda text: None if text == "" else text,
    )


def _not_null(value: Any) -> None:
    if value is None:
        raise FieldProblem("must be set (null is not allowed here)")


def _checked(value: Any, check: Check | None) -> Any:
    problem = check(value) if check is not None else None
    if problem:
        raise FieldProblem(problem)
    return value


def string(check: Check | None = None, *, optional: bool = False) -> BeforeValidator:
    """A string, passing ``check`` (which returns a problem or None)."""

    def read(value: Any) -> str:
        _not_null(value)
        if not isinstance(value, str):
            raise FieldProblem(f"must be a string, got {show(value)}")
        return str(_checked(value, check))

    rule = _optional(read) if optional else Rule(read, _text)
    return BeforeValidator(rule)


def count(maximum: int = MAX_COUNT) -> BeforeValidator:
    """A positive integer up to ``maximum``."""

    def read(value: Any) -> int:
        _not_null(value)
        if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= maximum:
            raise FieldProblem(f"must be a positive integer up to {maximum}, got {show(value)}")
        return value

    def from_env(text: str) -> int:
        try:
            return int(text)  # the range is checked with the file's values
        except ValueError:
            raise FieldProblem(f"must be a positive integer, got {show(text)}") from None

    return BeforeValidator(Rule(read, from_env))


def failure_count() -> BeforeValidator:
    """A number of failures: 0 (off) or a positive integer."""

    def read(value: Any) -> int:
        _not_null(value)
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_COUNT:
            raise FieldProblem(
                f"must be 0 (off) or a positive integer up to {MAX_COUNT}, got {show(value)}"
            )
        return value

    def from_env(text: str) -> int:
        try:
            return int(text)
        except ValueError:
            raise FieldProblem(f"must be an integer, got {show(text)}") from None

    return BeforeValidator(Rule(read, from_env))


def seconds(*, positive: bool) -> BeforeValidator:
    """A finite number of seconds up to a year; above zero when ``positive``."""
    what = (
        f"a positive number up to {MAX_SECONDS:g}"
        if positive
        else (f"a number from 0 to {MAX_SECONDS:g}")
    )

    def read(value: Any) -> float:
        _not_null(value)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise FieldProblem(f"must be {what} (seconds), got {show(value)}")
        # NaN fails every comparison; a huge int is compared as an int (float() would overflow).
        if not (0 <= value <= MAX_SECONDS) or (positive and value == 0):
            raise FieldProblem(f"must be {what} (seconds), got {show(value)}")
        return float(value)

    def from_env(text: str) -> float:
        try:
            return float(text)  # the range is checked with the file's values
        except ValueError:
            raise FieldProblem(f"must be a number (seconds), got {show(text)}") from None

    return BeforeValidator(Rule(read, from_env))


_TRUE = frozenset({"true", "yes", "on", "1"})
_FALSE = frozenset({"false", "no", "off", "0"})


def flag() -> BeforeValidator:
    """true or false; from the environment also yes/no, on/off, 1/0."""

    def read(value: Any) -> bool:
        _not_null(value)
        if not isinstance(value, bool):
            raise FieldProblem(f"must be true or false, got {show(value)}")
        return value

    def from_env(text: str) -> Any:
        lowered = text.strip().lower()
        if lowered in _TRUE:
            return True
        if lowered in _FALSE:
            return False
        return text  # read() names it

    return BeforeValidator(Rule(read, from_env))


def gang_setting() -> BeforeValidator:
    """``auto`` or ``off``. YAML reads an unquoted ``off`` as false: that is ``off`` too."""

    def read(value: Any) -> str:
        _not_null(value)
        if value is False:
            return GANG_OFF
        if value not in (GANG_AUTO, GANG_OFF):
            raise FieldProblem(
                f"must be {GANG_AUTO} (PodGroups when the API server serves them) or "
                f"{GANG_OFF}, got {show(value)}"
            )
        return str(value)

    return BeforeValidator(Rule(read, _text))


def octal_mode() -> BeforeValidator:
    """A file mode: an integer up to 0o777, or its octal spelling (``0660``, ``0o660``)."""

    def read(value: Any) -> int:
        _not_null(value)
        if isinstance(value, str):
            try:
                value = int(value.removeprefix("0o"), 8)
            except ValueError:
                raise FieldProblem(f"must be an octal mode like 0660, got {show(value)}") from None
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 0o777:
            # YAML reads 660 as decimal; 0660 is the octal the user meant.
            raise FieldProblem(f"must be an octal mode like 0660, got {show(value)}")
        return value

    return BeforeValidator(Rule(read, _text))


def names(check: Check | None = None) -> BeforeValidator:
    """A list of names (or a comma-separated string, as an environment variable gives it)."""

    def read(value: Any) -> tuple[str, ...]:
        _not_null(value)
        if isinstance(value, str):
            words = tuple(word.strip() for word in value.split(",") if word.strip())
        elif isinstance(value, list) and all(
            isinstance(v, str | int) and not isinstance(v, bool) for v in value
        ):
            words = tuple(str(v) for v in value)
        else:
            raise FieldProblem(f"must be a list of names, got {show(value)}")
        return tuple(_checked(words, check))

    return BeforeValidator(Rule(read, _text))


# ---- checks: each returns a problem or None ----


def optional_dns_label(value: str) -> str | None:
    return None if value == "" else dns_label_problem(value)


def abs_path(value: str) -> str | None:
    return None if value.startswith("/") else f"must be an absolute path, got {show(value)}"


def _host_port(value: str, *, port_required: bool) -> str | None:
    match = _HOST_PORT.fullmatch(value)
    if not match or (port_required and match["port"] is None):
        form = "host:port" if port_required else "host[:port]"
        return f"must be {form}, got {show(value)}"
    if match["port"] is not None and int(match["port"]) > 65535:
        return f"port {match['port']} is out of range in {show(value)}"
    return None


def conf_server(value: str) -> str | None:
    # slurmd accepts a comma-separated list: the primary controller, then backups.
    for entry in value.split(","):
        problem = _host_port(entry.strip(), port_required=False)
        if problem:
            return problem + " (e.g. 10.213.0.1:6817)"
    return None


def tcp_listen(value: str) -> str | None:
    return _host_port(value, port_required=True)


def advertise_address(value: str) -> str | None:
    # "": the default (tcp_listen when it names a host).
    return None if value == "" else _host_port(value, port_required=True)


def metrics_address(value: str) -> str | None:
    # "" is off: several bridges on one machine must not fight over a default port.
    return None if value == "" else _host_port(value, port_required=True)


def log_format(value: str) -> str | None:
    return None if value in ("text", "json") else f"must be text or json, got {show(value)}"


def slurm_auth(value: str) -> str | None:
    if value in (AUTH_MUNGE, AUTH_SLURM):
        return None
    return f"must be {AUTH_MUNGE} or {AUTH_SLURM} (auth/slurm, Slurm 23.11+), got {show(value)}"


def optional_subdomain(value: str) -> str | None:
    return None if value == "" else subdomain(value)


def subdomain(value: str) -> str | None:
    if len(value) <= 253 and all(dns_label_problem(part) is None for part in value.split(".")):
        return None
    return f"{show(value)} is not a valid Kubernetes object name (DNS-1123 subdomain)"


def caller_names(value: tuple[str, ...]) -> str | None:
    for word in value:
        if not word.isdigit() and not re.fullmatch(r"[a-z_][a-z0-9_.-]*\$?", word):
            return f"{word!r} is neither a user name nor a uid"
    return None


def non_empty(value: str) -> str | None:
    return None if value else "must not be empty"


def is_loopback(host_port: str) -> bool:
    """Whether a ``host:port`` listens on loopback only (by name or address)."""
    host = host_port.rsplit(":", 1)[0].strip("[]")
    if host in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
