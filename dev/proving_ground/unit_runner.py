"""Start a service as its systemd unit file says, on a machine whose PID 1 is not systemd.

The proving ground runs the bridge under the unit that ships (deploy/systemd/), so the user, the
group, the runtime directory, the umask and the privilege drops a site gets are the ones our tests
get. ``parse_unit`` reads a unit (pure); ``apply`` turns the calling process into the service and
execs it. What it does not enforce (ProtectSystem=, PrivateTmp=, SystemCallFilter=, ...) it names in
its log line, so nobody believes those are tested here.

    python -m proving_ground.unit_runner --unit deploy/systemd/slurm-k8s-bridge.service \\
        --replace /opt/slurm-k8s-bridge/venv=/work/main/.local/bridge-venv --setenv K=V
"""

from __future__ import annotations

import argparse
import ctypes
import grp
import logging
import math
import os
import pwd
import re
import shlex
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

log = logging.getLogger("unit_runner")

PR_SET_NO_NEW_PRIVS = 38
PR_CAPBSET_DROP = 24
#: systemd's search path and the PATH it gives a system service (merged /usr).
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin"
#: systemd's DefaultTimeoutStartSec, for each ExecStartPre (TimeoutStartSec= is not read).
START_TIMEOUT_S = 90.0

_VAR = r"[A-Za-z_][A-Za-z0-9_]*"
_TRUE, _FALSE = ("1", "yes", "true", "on"), ("0", "no", "false", "off")
_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v", "s": " "}
_USER_GROUP = "(the primary group of User=)"
_SECONDS = {"us": 1e-6, "ms": 1e-3, "": 1, "s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600}


class UnitError(ValueError):
    """The unit cannot be parsed or applied as written; the message names the key and line."""


@dataclass(frozen=True)
class ExecCommand:
    """One Exec line: its argv (quotes removed, ``$`` not yet expanded) and its ``-`` prefix."""

    argv: tuple[str, ...]
    ignore_failure: bool = False


@dataclass(frozen=True)
class EnvironmentFile:
    path: str
    optional: bool = False  # the '-' prefix: a missing file is no error


@dataclass(frozen=True)
class ServiceUnit:
    """The [Service] section as this runner reads it; defaults are systemd's."""

    exec_start: ExecCommand
    exec_start_pre: tuple[ExecCommand, ...] = ()
    user: str | None = None
    group: str | None = None
    environment: tuple[tuple[str, str], ...] = ()
    environment_files: tuple[EnvironmentFile, ...] = ()
    runtime_directory: tuple[str, ...] = ()
    runtime_directory_mode: int = 0o755
    umask: int = 0o022
    working_directory: str | None = None
    no_new_privileges: bool = False
    #: None: not set (the bounding set is left alone); (): empty, every capability dropped.
    capability_bounding_set: tuple[str, ...] | None = None
    ambient_capabilities: tuple[str, ...] = ()
    #: Not applied here (the runner execs away): for whoever stops the service.
    kill_signal: signal.Signals = signal.SIGTERM
    timeout_stop_sec: float = 90.0
    #: Every other [Service] assignment, in order: read, not applied.
    others: tuple[tuple[str, str], ...] = ()


def split_words(value: str) -> list[str]:
    """Split as systemd splits Exec and Environment lines: at whitespace, with '...' and "..."
    (also inside a word) and C escapes in and out of quotes; no shell, no globbing."""
    words: list[str] = []
    word: list[str] = []
    in_word, quote, i = False, "", 0
    while i < len(value):
        c, i = value[i], i + 1
        if c == "\\":
            c, i = _unescape(value, i)
        elif c == quote:
            quote = ""
            continue
        elif not quote and c in "'\"":
            quote, in_word = c, True
            continue
        elif not quote and c.isspace():
            if in_word:
                words.append("".join(word))
            word, in_word = [], False
            continue
        word.append(c)
        in_word = True
    if quote:
        raise UnitError(f"unterminated {quote} quote")
    if in_word:
        words.append("".join(word))
    return words


def _unescape(value: str, i: int) -> tuple[str, int]:
    # value[i] follows a backslash: the character it stands for, and where the word goes on.
    e = value[i : i + 1]
    if e in _ESCAPES:
        return _ESCAPES[e], i + 1
    if e in ("\\", '"', "'", " "):
        return e, i + 1
    if e == "x" and re.fullmatch(r"[0-9a-fA-F]{2}", value[i + 1 : i + 3]):
        return chr(int(value[i + 1 : i + 3], 16)), i + 3
    if re.fullmatch(r"[0-7]{3}", value[i : i + 3]):
        return chr(int(value[i : i + 3], 8)), i + 3
    raise UnitError(f"unknown escape \\{e}" if e else "a backslash at the end")


def _logical_lines(text: str) -> list[tuple[int, str]]:
    # Continuations join with a space, and comment lines inside them are skipped, as systemd does.
    lines: list[tuple[int, str]] = []
    pending: tuple[int, str] | None = None
    for number, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.strip()
        if stripped.startswith(("#", ";")) or (not stripped and pending is None):
            continue
        start, head = pending or (number, "")
        if stripped.endswith("\\"):
            pending = (start, head + stripped[:-1] + " ")
            continue
        pending = None
        lines.append((start, head + stripped))
    if pending is not None:
        lines.append(pending)
    return lines


def _exec(value: str) -> ExecCommand | None:
    if not value:
        return None  # an empty assignment resets the list
    flags = value[: len(value) - len(value.lstrip("-@:+!"))]
    if flags.strip("-"):
        raise UnitError(f"prefix {flags!r}: only '-' (ignore failure) is supported here")
    argv = split_words(value[len(flags) :])
    if not argv:
        raise UnitError("no command")
    return ExecCommand(tuple(argv), ignore_failure=bool(flags))


def _boolean(value: str) -> bool:
    if value.lower() not in _TRUE + _FALSE:
        raise UnitError(f"not a boolean: {value!r}")
    return value.lower() in _TRUE


def _octal(value: str) -> int:
    if not re.fullmatch(r"[0-7]{1,4}", value):
        raise UnitError(f"not an octal mode: {value!r}")
    return int(value, 8)


def _seconds(value: str) -> float:
    if value == "infinity":
        return math.inf
    spans = re.findall(r"(\d+(?:\.\d+)?)\s*([a-z]*)", value)
    if not re.fullmatch(r"(\s*\d+(\.\d+)?\s*[a-z]*)+\s*", value) or any(
        unit not in _SECONDS for _, unit in spans
    ):
        raise UnitError(f"not a time span: {value!r} (units: {' '.join(_SECONDS).strip()})")
    return sum(float(number) * _SECONDS[unit] for number, unit in spans)


def _signal(value: str) -> signal.Signals:
    name = value if value.startswith("SIG") else f"SIG{value}"
    if name not in signal.Signals.__members__:
        raise UnitError(f"not a signal: {value!r}")
    return signal.Signals[name]


def _specifiers(value: str) -> str:
    # systemd resolves %-specifiers when it loads the unit; only the escaped % is handled here.
    unknown = re.search(r"%(.|$)", value.replace("%%", ""))
    if unknown:
        raise UnitError(f"specifier {unknown.group()!r}: only %% is supported here")
    return value.replace("%%", "%")


def _runtime_names(value: str) -> tuple[str, ...]:
    names = tuple(_specifiers(value).split())
    for name in names:
        if name.startswith("/") or {"", ".", ".."} & set(name.split("/")):
            raise UnitError(f"{name!r}: a name under /run, without . or ..")
    return names


def _no_capabilities(value: str) -> tuple[str, ...]:
    if value:
        raise UnitError(f"{value!r}: only the empty value (no capabilities) is applied here")
    return ()


def _service_type(value: str) -> None:
    if value not in ("simple", "exec"):
        raise UnitError(f"{value!r}: only simple and exec are one exec")


#: Settings that one line sets whole: the field and how its value is read.
_SCALARS: dict[str, tuple[str, Callable[[str], object]]] = {
    "User": ("user", lambda value: _specifiers(value) or None),
    "Group": ("group", lambda value: _specifiers(value) or None),
    "RuntimeDirectory": ("runtime_directory", _runtime_names),
    "RuntimeDirectoryMode": ("runtime_directory_mode", _octal),
    "UMask": ("umask", _octal),
    "WorkingDirectory": ("working_directory", lambda value: _specifiers(value) or None),
    "NoNewPrivileges": ("no_new_privileges", _boolean),
    # Refused at their line unless empty, so the flags these two set are all apply() needs.
    "CapabilityBoundingSet": ("capability_bounding_set", _no_capabilities),
    "AmbientCapabilities": ("ambient_capabilities", _no_capabilities),
    "KillSignal": ("kill_signal", _signal),
    "TimeoutStopSec": ("timeout_stop_sec", _seconds),
}


def _environment_words(value: str) -> dict[str, str]:
    env: dict[str, str] = {}
    for word in split_words(_specifiers(value)):
        name, eq, setting = word.partition("=")
        if not eq or not re.fullmatch(_VAR, name):
            raise UnitError(f"{word!r} is not NAME=VALUE")
        env[name] = setting
    return env


def _environment_file(value: str) -> EnvironmentFile:
    path = _specifiers(value)
    if not path.removeprefix("-").startswith("/"):
        raise UnitError(f"{path!r} is not an absolute path")
    return EnvironmentFile(path.removeprefix("-"), optional=path.startswith("-"))


@dataclass
class _Reading:
    """The [Service] section read so far; list settings grow line by line, and an empty
    assignment empties them, as in systemd."""

    # Any: each _SCALARS reader returns its field's type, which a dict of fields cannot say.
    fields: dict[str, Any] = field(default_factory=dict)
    start: ExecCommand | None = None
    pre: list[ExecCommand] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    env_files: list[EnvironmentFile] = field(default_factory=list)
    others: list[tuple[str, str]] = field(default_factory=list)

    def assign(self, key: str, value: str) -> None:
        if key in _SCALARS:
            name, read = _SCALARS[key]
            self.fields[name] = read(value)
        elif key == "ExecStartPre":
            command = _exec(_specifiers(value))
            self.pre = [*self.pre, command] if command else []
        elif key == "ExecStart":
            command = _exec(_specifiers(value))
            if command and self.start:
                raise UnitError("a second command (only Type=oneshot takes several)")
            self.start = command
        elif key == "Environment":
            self.env = {**self.env, **_environment_words(value)} if value else {}
        elif key == "EnvironmentFile":
            self.env_files = [*self.env_files, _environment_file(value)] if value else []
        elif key == "Type":
            _service_type(value)
        else:
            self.others.append((key, value))


def parse_unit(text: str) -> ServiceUnit:
    """Read a unit file's [Service] section; a bad line raises UnitError naming line and key."""
    reading = _Reading()
    section = ""
    for number, line in _logical_lines(text):
        if line.startswith("["):
            if not line.endswith("]"):
                raise UnitError(f"line {number}: bad section header {line!r}")
            section = line[1:-1]
            continue
        key, eq, value = (part.strip() for part in line.partition("="))
        if not eq or not key:
            raise UnitError(f"line {number}: not an assignment: {line!r}")
        if not section:
            raise UnitError(f"line {number}: {key}= before any section")
        if section == "Service":
            try:
                reading.assign(key, value)
            except UnitError as e:
                raise UnitError(f"line {number}: {key}=: {e}") from e
    if reading.start is None:
        raise UnitError("[Service] has no ExecStart=")
    return ServiceUnit(
        exec_start=reading.start,
        exec_start_pre=tuple(reading.pre),
        environment=tuple(reading.env.items()),
        environment_files=tuple(reading.env_files),
        others=tuple(reading.others),
        **reading.fields,
    )


def summary(unit: ServiceUnit, exec_start: Sequence[str] | None = None) -> str:
    """One line: the settings applied (with ExecStart's argv as run, once paths are replaced),
    those left to whoever stops the service, and the [Service] settings NOT applied (by name,
    so nobody believes they are enforced)."""
    applied = [
        f"User={unit.user or '(root)'}",
        f"Group={unit.group or _USER_GROUP}",
        f"RuntimeDirectory={' '.join(unit.runtime_directory)}",
        f"RuntimeDirectoryMode={unit.runtime_directory_mode:04o}",
        f"UMask={unit.umask:04o}",
        f"WorkingDirectory={unit.working_directory or '/'}",
        f"NoNewPrivileges={'yes' if unit.no_new_privileges else 'no'}",
        "CapabilityBoundingSet="
        + ("(unchanged)" if unit.capability_bounding_set is None else "(empty: all dropped)"),
        "AmbientCapabilities=(none)",
        f"Environment=({len(unit.environment)})",
        f"EnvironmentFile=({len(unit.environment_files)})",
        f"ExecStartPre=({len(unit.exec_start_pre)})",
        f"ExecStart={shlex.join(exec_start or unit.exec_start.argv)}",
    ]
    stopper = f"KillSignal={unit.kill_signal.name} TimeoutStopSec={unit.timeout_stop_sec:g}"
    not_applied = " ".join(dict.fromkeys(key for key, _ in unit.others)) or "(none)"
    return (
        f"applied: {' '.join(applied)}; left to whoever stops it: {stopper}; "
        f"NOT applied: {not_applied}"
    )


def replace_paths(argv: Sequence[str], replacements: Sequence[tuple[str, str]]) -> list[str]:
    """Each word that is OLD or starts with OLD/ gets NEW in its place (the longest OLD wins)."""
    longest_first = sorted(replacements, key=lambda pair: len(pair[0]), reverse=True)
    out = []
    for word in argv:
        for old, new in longest_first:
            if word == old or word.startswith(old.rstrip("/") + "/"):
                out.append(new + word[len(old) :])
                break
        else:
            out.append(word)
    return out


def expand_variables(argv: Sequence[str], env: Mapping[str, str]) -> list[str]:
    """systemd's expansion in Exec lines: the word "$NAME" becomes the value's words, "${NAME}"
    anywhere becomes the value, "$$" a dollar sign; any other $ stays (for a shell's -c)."""
    out: list[str] = []
    for word in argv:
        whole = re.fullmatch(rf"\$({_VAR})", word)
        if whole:
            out.extend(env.get(whole.group(1), "").split())
            continue
        out.append(
            re.sub(
                rf"\$\$|\$\{{({_VAR})\}}",
                lambda match: "$" if match.group() == "$$" else env.get(match.group(1), ""),
                word,
            )
        )
    return out


def read_environment_file(text: str) -> dict[str, str]:
    """NAME=VALUE lines ('#' and ';' comments, a value may be quoted), as EnvironmentFile= reads."""
    env: dict[str, str] = {}
    for number, line in _logical_lines(text):
        name, eq, value = (part.strip() for part in line.partition("="))
        if not eq or not re.fullmatch(_VAR, name):
            raise UnitError(f"line {number}: {line!r} is not NAME=VALUE")
        if len(value) >= 2 and value[0] == value[-1] == "'":
            value = value[1:-1]
        elif len(value) >= 2 and value[0] == value[-1] == '"':
            value = re.sub(r'\\([\\"$`])', r"\1", value[1:-1])
        env[name] = value
    return env


def privilege_problem(unit: ServiceUnit, uid: int, gid: int, euid: int, egid: int) -> str | None:
    """Why a process with euid/egid cannot become the unit's uid/gid, or None."""
    if euid == 0 or (uid, gid) == (euid, egid):
        return None
    return (
        f"must run as root: User={unit.user or '(root)'} Group={unit.group or _USER_GROUP} "
        f"is uid {uid} gid {gid}, this process is uid {euid} gid {egid}"
    )


def _identity(unit: ServiceUnit) -> tuple[pwd.struct_passwd | None, int, int]:
    # User= and Group= take a name or a number, as in systemd; without User= a system service
    # runs as root, and Group= defaults to the user's primary group.
    try:
        entry = pwd.getpwnam(unit.user or "root") if not (unit.user or "").isdigit() else None
        uid = entry.pw_uid if entry else int(unit.user or 0)
        if unit.group:
            gid = int(unit.group) if unit.group.isdigit() else grp.getgrnam(unit.group).gr_gid
        else:
            gid = entry.pw_gid if entry else 0
    except KeyError as e:
        raise UnitError(f"User={unit.user} Group={unit.group}: no such user or group") from e
    return entry, uid, gid


def _prctl(option: int, arg: int, setting: str) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(ctypes.c_int(option), ctypes.c_ulong(arg), 0, 0, 0) != 0:
        reason = os.strerror(ctypes.get_errno())
        raise UnitError(f"{setting}: prctl({option}, {arg}): {reason}")


def _make_runtime_directories(paths: Sequence[str], mode: int, uid: int, gid: int) -> None:
    for path in map(Path, paths):
        # Kept when it exists, emptied of what the last run left: systemd removes it at stop,
        # which we never see, but a new directory would not reach a program that bound the old
        # one into its own mount namespace (the proving ground's slurmctld of a Slurm root,
        # whose hooks call the socket in it).
        if path.is_symlink():
            path.unlink()
        if path.is_dir():
            for entry in path.iterdir():
                if entry.is_dir() and not entry.is_symlink():
                    shutil.rmtree(entry)
                else:
                    entry.unlink()
        else:
            path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
            path.mkdir()
        os.chown(path, uid, gid)
        os.chmod(path, mode)  # mkdir's mode passes through the umask


def _environment(
    unit: ServiceUnit,
    entry: pwd.struct_passwd | None,
    runtime: Sequence[str],
    extra_env: Mapping[str, str],
) -> dict[str, str]:
    # systemd's order, the later winning: its own variables, Environment=, EnvironmentFile=;
    # then the caller's. Nothing comes from the runner's environment, as nothing comes from
    # the shell of whoever typed `systemctl start`.
    env = {"PATH": DEFAULT_PATH}
    if entry is not None:
        env |= {"USER": entry.pw_name, "LOGNAME": entry.pw_name}
        env |= {"HOME": entry.pw_dir, "SHELL": entry.pw_shell}
    if runtime:
        env["RUNTIME_DIRECTORY"] = ":".join(runtime)
    env |= dict(unit.environment)
    for file in unit.environment_files:
        try:
            env |= read_environment_file(Path(file.path).read_text())
        except FileNotFoundError:
            if not file.optional:
                raise UnitError(f"EnvironmentFile={file.path}: no such file") from None
        except UnitError as e:
            raise UnitError(f"EnvironmentFile={file.path}: {e}") from e
    return env | dict(extra_env)


def _working_directory(unit: ServiceUnit, env: Mapping[str, str]) -> str:
    # systemd's default for a system service is /; "-" makes a missing directory no error.
    setting = unit.working_directory or "/"
    directory = setting.removeprefix("-")
    if directory == "~":
        directory = env.get("HOME", "/")
    if setting.startswith("-") and not Path(directory).is_dir():
        return "/"
    return directory


def _argv(
    command: ExecCommand, env: Mapping[str, str], replacements: Sequence[tuple[str, str]]
) -> list[str]:
    argv = replace_paths(expand_variables(command.argv, env), replacements)
    if not argv:
        raise UnitError(f"{' '.join(command.argv)}: empty once variables are expanded")
    if not argv[0].startswith("/"):
        argv[0] = shutil.which(argv[0], path=DEFAULT_PATH) or argv[0]
    # A missing program of a '-' line is skipped, as systemd skips it.
    if not command.ignore_failure and not Path(argv[0]).is_file():
        raise UnitError(f"{argv[0]}: no such program")
    return argv


def apply(
    unit: ServiceUnit,
    *,
    replacements: Sequence[tuple[str, str]] = (),
    extra_env: Mapping[str, str] | None = None,
) -> NoReturn:
    """Become the unit's service: set up the calling process (a launcher's child) as the unit
    says, run each ExecStartPre, then exec ExecStart. Raises UnitError (or OSError) when a step
    fails; the user, the environment files and the programs are checked before any change."""
    entry, uid, gid = _identity(unit)
    problem = privilege_problem(unit, uid, gid, os.geteuid(), os.getegid())
    if problem:
        raise UnitError(problem)
    runtime = [str(Path("/run", name)) for name in unit.runtime_directory]
    # USER, HOME and the like only with User=, as systemd sets them.
    env = _environment(unit, entry if unit.user else None, runtime, extra_env or {})
    pre = [(command, _argv(command, env, replacements)) for command in unit.exec_start_pre]
    start = _argv(unit.exec_start, env, replacements)
    log.info("%s", summary(unit, start))

    _make_runtime_directories(runtime, unit.runtime_directory_mode, uid, gid)
    os.umask(unit.umask)
    if unit.capability_bounding_set is not None:  # set means empty: parse_unit allows no other
        last = int(Path("/proc/sys/kernel/cap_last_cap").read_text())
        for cap in range(last + 1):
            _prctl(PR_CAPBSET_DROP, cap, "CapabilityBoundingSet=")
    if os.geteuid() == 0:  # else privilege_problem made sure we already are uid:gid
        if entry is not None:
            os.initgroups(entry.pw_name, gid)
        else:
            os.setgroups([])
        os.setgid(gid)
        os.setuid(uid)
    if unit.no_new_privileges:
        _prctl(PR_SET_NO_NEW_PRIVS, 1, "NoNewPrivileges=")
    os.chdir(_working_directory(unit, env))
    for command, argv in pre:
        try:
            status = subprocess.run(argv, env=env, timeout=START_TIMEOUT_S, check=False).returncode
            reason = f"exit status {status}"
        except (OSError, subprocess.TimeoutExpired) as e:
            status, reason = -1, str(e)
        if status != 0 and not command.ignore_failure:
            raise UnitError(f"ExecStartPre={shlex.join(argv)}: {reason}")
        if status != 0:
            log.warning("ExecStartPre=-%s: %s (ignored: '-')", shlex.join(argv), reason)
    os.execve(start[0], start, env)  # noqa: S606  # argv, no shell: as systemd runs it


def _pair(text: str) -> tuple[str, str]:
    old, eq, new = text.partition("=")
    if not eq or not old:
        raise argparse.ArgumentTypeError(f"{text!r}: expected OLD=NEW")
    return old, new


def main(argv: Sequence[str] | None = None) -> int:
    """The command line. It returns (an exit status) only when the service was not started."""
    parser = argparse.ArgumentParser(
        prog="python -m proving_ground.unit_runner",
        description=(
            "Start the service of a systemd unit file as systemd would, where PID 1 is not "
            "systemd. Applied: User=, Group=, RuntimeDirectory= (emptied, with "
            "RuntimeDirectoryMode=), UMask=, WorkingDirectory=, NoNewPrivileges=, an empty "
            "CapabilityBoundingSet= and AmbientCapabilities=, Environment=, EnvironmentFile=, "
            "ExecStartPre=, ExecStart=. Every other [Service] setting is named in the log line "
            "as NOT applied. Runs as root (or as the unit's User= and Group=); the service "
            "replaces this process (exec), so its PID is the service's."
        ),
        epilog=(
            "example: python -m proving_ground.unit_runner "
            "--unit deploy/systemd/slurm-k8s-bridge.service "
            "--replace /opt/slurm-k8s-bridge/venv=/work/main/.local/bridge-venv "
            "--replace /etc/slurm-k8s-bridge/bridge.yaml=/work/main/dev/bridge.yaml"
        ),
    )
    parser.add_argument("--unit", required=True, type=Path, metavar="FILE", help="a .service file")
    parser.add_argument(
        "--replace",
        metavar="OLD=NEW",
        type=_pair,
        action="append",
        default=[],
        help="in Exec lines' words only: OLD, or OLD/..., becomes NEW, or NEW/... (repeatable)",
    )
    parser.add_argument(
        "--setenv",
        metavar="K=V",
        type=_pair,
        action="append",
        default=[],
        help="an environment variable for the service, winning over the unit's (repeatable)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(
        stream=sys.stderr, level=logging.INFO, format=f"unit_runner: {args.unit.name}: %(message)s"
    )
    try:
        apply(
            parse_unit(args.unit.read_text()),
            replacements=args.replace,
            extra_env=dict(args.setenv),
        )
    except (UnitError, OSError) as e:
        log.error("%s", e)
        return 1


if __name__ == "__main__":
    sys.exit(main())
