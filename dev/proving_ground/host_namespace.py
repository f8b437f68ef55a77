"""Run a program as if on another host: ``ip netns exec <netns> python -m
proving_ground.host_namespace --hostname H --bind SRC:DST ... -- argv``.

``ip netns exec`` gives the network namespace and a mount namespace of its own (with the netns'
``/etc/netns/<netns>/hosts`` over ``/etc/hosts``); this adds a UTS namespace named ``H`` (slurmctld
finds its place in ``SlurmctldHost`` by its host name) and binds each ``SRC`` over ``DST`` in that
mount namespace only: the host-local paths a site's second controller has of its own (the
bridge's socket directory, slurmctld's pid file, the logs) while StateSaveLocation stays shared.
Then it execs ``argv``: the PID the proving ground recorded is the program's.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import socket
import sys
from pathlib import Path

#: <sched.h> and <sys/mount.h>.
CLONE_NEWUTS = 0x04000000
MS_BIND = 0x1000
MS_REC = 0x4000


def _fail_unless_zero(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def enter(hostname: str, binds: list[tuple[Path, Path]]) -> None:
    """A UTS namespace named ``hostname``, and ``binds`` in the current mount namespace (which
    must be private to this process: ``ip netns exec`` makes one)."""
    libc = ctypes.CDLL(None, use_errno=True)
    _fail_unless_zero(libc.unshare(CLONE_NEWUTS), "unshare(CLONE_NEWUTS)")
    socket.sethostname(hostname)
    for source, target in binds:
        if not source.exists():
            raise FileNotFoundError(f"--bind {source}:{target}: {source} does not exist")
        if not target.exists():
            raise FileNotFoundError(f"--bind {source}:{target}: {target} does not exist")
        result = libc.mount(
            str(source).encode(), str(target).encode(), None, MS_BIND | MS_REC, None
        )
        _fail_unless_zero(result, f"mount --rbind {source} {target}")


def _bind(text: str) -> tuple[Path, Path]:
    source, sep, target = text.partition(":")
    if not sep or not source or not target:
        raise argparse.ArgumentTypeError(f"{text!r}: expected SRC:DST")
    return Path(source), Path(target)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="proving_ground.host_namespace",
        description="Inside `ip netns exec`: a host name of its own and host-local binds, then "
        "exec the program (the proving ground's second controller host).",
    )
    parser.add_argument("--hostname", required=True, help="the host name the program sees")
    parser.add_argument(
        "--bind", type=_bind, action="append", default=[], metavar="SRC:DST",
        help="bind SRC over DST (both must exist); repeatable, applied in order",
    )  # fmt: skip
    parser.add_argument("program", nargs=argparse.REMAINDER, help="-- the program and its args")
    args = parser.parse_args(argv)
    program = args.program[1:] if args.program[:1] == ["--"] else args.program
    if not program:
        parser.error("no program given (after --)")
    try:
        enter(args.hostname, args.bind)
    except OSError as e:
        print(f"host_namespace: {e}", file=sys.stderr)
        return 1
    os.execvp(program[0], program)  # noqa: S606 (argv as given, no shell)
    return 1  # not reached: execvp replaces this process or raises


if __name__ == "__main__":
    sys.exit(main())
