"""The hooks' hand-off of the nodes no pool owns to the site's own power-saving programs.

slurmctld has one ResumeProgram (SuspendProgram, ResumeFailProgram) for all nodes; a site that
powers its own nodes names its previous programs in hooks.env (``SKB_SITE_*_PROGRAM``). After
the bridge answered, :mod:`bridge.hooks` execs the kind's program in its own place for the nodes
the bridge answered UNKNOWN_NODE for (the Go client, slurm_plugins/hookclient/handoff.go, does
the same). Only ``os`` is imported: a hook's start-up time matters.
"""

from __future__ import annotations

import os
from collections.abc import Mapping


def site_env(env: Mapping[str, str]) -> dict[str, str]:
    """The site program's environment: the hook's, without our ``SKB_*`` settings."""
    return {k: v for k, v in env.items() if not k.startswith("SKB_")}


def initial_environ() -> dict[str, str] | None:
    """The environment this process was started with, or None when /proc cannot tell.

    Not ``os.environ``: Python's start-up adds ``LC_CTYPE=C.UTF-8`` to it when slurmctld passes
    no locale (PEP 538), and the hook sets GRPC_VERBOSITY. /proc/self/environ still holds what
    slurmctld passed, as the Go client's ``os.Environ()`` does.
    """
    try:
        with open("/proc/self/environ", "rb") as f:
            data = f.read()
    except OSError:
        return None
    found: dict[str, str] = {}
    for entry in data.split(b"\0"):
        key, sep, value = os.fsdecode(entry).partition("=")
        if sep and key:  # execve refuses an empty name
            found.setdefault(key, value)  # the first of a repeated name, as os.environ has it
    return found


def hand_off(program: str, nodes: str, env: dict[str, str], resume_file: bytes | None) -> str:
    """Exec ``program nodes`` in place of this process, as slurmctld would have run it; returns
    why not only when that failed. ``resume_file`` (the bytes slurmctld passed, None when they
    were not read) goes in a memfd without close-on-exec that ``SLURM_RESUME_FILE`` names."""
    if not os.path.isabs(program):
        return "not an absolute path"
    if resume_file is not None:
        fd = _memfd_holding(resume_file)
        if fd >= 0:  # else as when the file was not read: slurmctld's SLURM_RESUME_FILE stays
            env = {**env, "SLURM_RESUME_FILE": f"/proc/{os.getpid()}/fd/{fd}"}
    import signal  # noqa: PLC0415 (only a hand-off pays for it)

    # Python ignores these at start-up, and an ignored signal stays ignored across exec; the
    # site's program expects them at their defaults (subprocess's restore_signals does the same).
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
    try:
        os.execve(program, [program, nodes], env)  # noqa: S606 (an argv list: no shell wanted)
    except OSError as e:
        return e.strerror or str(e)


def _memfd_holding(data: bytes) -> int:
    """A memfd holding ``data`` that an exec'd program inherits (-1 when one cannot be made)."""
    try:
        fd = os.memfd_create("slurm_resume_file", 0)  # 0: no MFD_CLOEXEC
    except OSError:
        return -1
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.set_inheritable(fd, True)
    except OSError:
        os.close(fd)
        return -1
    return fd
