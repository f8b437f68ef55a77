"""``install-service``: put what a site installs besides the Python code where the system looks
for it, copied from the data files the wheel installed (``<prefix>/share/slurm-k8s-bridge``).

Two rules, by where a file goes:

* under ``/usr``, the package's files (the unit, sysusers.d and tmpfiles.d, the PrologSlurmctld
  and strigger scripts, the site guide) are replaced by every run, so an upgrade brings the new
  ones; a site changes them from ``/etc`` (a unit drop-in, a file of the same name in
  ``/etc/sysusers.d`` or ``/etc/tmpfiles.d``), which no upgrade touches;
* under ``/etc``, the site's files (the logrotate file, the examples) are written when absent and
  never overwritten.

``--root DIR`` writes under DIR instead of ``/`` (DESTDIR, for packagers and tests); links still
point at the installed system's paths. ``--dry-run`` prints what it would do and writes nothing.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sysconfig
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path, PurePosixPath
from typing import Any, TextIO

from bridge.errors import BridgeError

#: The data files' folder under the install's data prefix (pyproject's data-files).
DATA_SUBDIR = PurePosixPath("share/slurm-k8s-bridge")
#: Where the PrologSlurmctld (job_ready) and the strigger setup go: what ``render-slurm-conf
#: --job-ready-program`` and ``PrologSlurmctld`` name.
LIBEXEC_DIR = PurePosixPath("/usr/libexec/slurm-k8s-bridge")
#: Read by the pip-installed hooks (entry points); job_ready reads ``hooks.env`` next to itself,
#: so a link there makes one settings file serve both.
HOOKS_ENV = PurePosixPath("/etc/slurm-k8s-bridge/hooks.env")
UNIT_NAME = "slurm-k8s-bridge.service"
#: A unit here (the site guide's earlier manual install) hides the one installed in /usr/lib.
ADMIN_UNIT = PurePosixPath("/etc/systemd/system") / UNIT_NAME
#: Directories this creates with a mode other than 0755: the configuration's, as tmpfiles.d sets
#: it (tmpfiles then gives it to SlurmUser's group), so nothing put there later is world-readable.
DIRECTORY_MODES = {PurePosixPath("/etc/slurm-k8s-bridge"): 0o750}
#: The owner of /etc: a file there is the site's once it exists.
SITE_TREE = PurePosixPath("/etc")


@dataclass(frozen=True)
class ShippedFile:
    """A data file of the wheel (``source``, under the data folder) and its place on the
    installed system (``target``, absolute)."""

    source: PurePosixPath
    target: PurePosixPath
    mode: int

    @property
    def site_owned(self) -> bool:
        """Under /etc: written when absent, never overwritten."""
        return self.target.is_relative_to(SITE_TREE)


def _shipped(source: str, target: PurePosixPath | str, mode: int = 0o644) -> ShippedFile:
    return ShippedFile(PurePosixPath(source), PurePosixPath(target), mode)


#: Every data file and where it goes (pyproject's data-files list the same sources).
SHIPPED_FILES: tuple[ShippedFile, ...] = (
    _shipped(f"systemd/{UNIT_NAME}", f"/usr/lib/systemd/system/{UNIT_NAME}"),
    _shipped("sysusers.d/slurm-k8s-bridge.conf", "/usr/lib/sysusers.d/slurm-k8s-bridge.conf"),
    _shipped("tmpfiles.d/slurm-k8s-bridge.conf", "/usr/lib/tmpfiles.d/slurm-k8s-bridge.conf"),
    _shipped("logrotate.d/slurm-k8s-bridge-hooks", "/etc/logrotate.d/slurm-k8s-bridge-hooks"),
    _shipped("examples/bridge.yaml", "/etc/slurm-k8s-bridge/bridge.yaml.example"),
    _shipped("examples/hooks.env.example", "/etc/slurm-k8s-bridge/hooks.env.example"),
    _shipped("examples/slurm.conf.example", "/etc/slurm-k8s-bridge/slurm.conf.example"),
    # job_ready sources hook.sh, which sources job_ready.sh: the three stay side by side.
    # slurmctld refuses a group- or world-writable program.
    _shipped("libexec/job_ready", LIBEXEC_DIR / "job_ready", 0o755),
    _shipped("libexec/hook.sh", LIBEXEC_DIR / "hook.sh"),
    _shipped("libexec/job_ready.sh", LIBEXEC_DIR / "job_ready.sh"),
    _shipped("libexec/strigger-setup.sh", LIBEXEC_DIR / "strigger-setup.sh", 0o755),
    # The unit's Documentation= names the guide here.
    _shipped("doc/site-guide.md", "/usr/share/doc/slurm-k8s-bridge/site-guide.md"),
    _shipped("doc/CHANGELOG.md", "/usr/share/doc/slurm-k8s-bridge/CHANGELOG.md"),
)


class MissingDataFiles(BridgeError):
    """The package's data files are not where this install keeps them."""


class Action(Enum):
    """What one step does; the values are the words of its report line."""

    WRITE = "wrote"
    KEEP = "kept"
    LINK = "linked"


@dataclass(frozen=True)
class Step:
    """One file of the install: ``path`` is where it goes (under ``--root``), ``source`` the
    data file to copy or, for a link, what the link points to; a ``site_owned`` file is never
    overwritten."""

    action: Action
    path: Path
    source: Path
    mode: int = 0o644
    site_owned: bool = False

    def line(self, *, dry_run: bool) -> str:
        """The report line for this step, as done or (``dry_run``) as it would be done."""
        verb = {Action.WRITE: "write", Action.KEEP: "keep", Action.LINK: "link"}[self.action]
        done = f"would {verb}" if dry_run else self.action.value
        if self.action is Action.LINK:
            return f"{done} {self.path} -> {self.source}"
        if self.action is Action.KEEP:
            return f"{done} {self.path} (exists; not overwritten)"
        return f"{done} {self.path} (mode {self.mode:04o}, from {self.source})"


def default_data_dirs() -> list[Path]:
    """Where pip puts the data files: the install's prefix (a venv's), then the user's
    (``pip install --user``)."""
    prefix = Path(sysconfig.get_path("data")) / DATA_SUBDIR
    user = Path(sysconfig.get_path("data", f"{os.name}_user")) / DATA_SUBDIR
    return [prefix] if user == prefix else [prefix, user]


def find_data_dir(candidates: Sequence[Path]) -> Path:
    """The first of ``candidates`` that holds every shipped file; else an error naming the
    missing files of the first one that exists (or of the first candidate)."""
    for directory in candidates:
        if not _missing(directory):
            return directory
    directory = next((d for d in candidates if d.is_dir()), candidates[0])
    first, *others = _missing(directory)
    more = f" and {len(others)} more" if others else ""
    raise MissingDataFiles(
        f"the package's data files are not installed: no {first}{more}. An editable install "
        "or a source checkout has none: install the wheel (pip install "
        "slurm_k8s_bridge-<version>-py3-none-any.whl) or name the folder with --data-dir"
    )


def _missing(data_dir: Path) -> list[Path]:
    return [data_dir / f.source for f in SHIPPED_FILES if not (data_dir / f.source).is_file()]


def under_root(root: Path, path: PurePosixPath) -> Path:
    """``path`` of the installed system as written under ``root`` (DESTDIR)."""
    return root / path.relative_to("/")


def plan_install(data_dir: Path, root: Path) -> list[Step]:
    """The steps that install ``data_dir``'s files under ``root``: a site file (/etc) that
    exists already is kept, and so is a settings file a site put where the link goes."""
    steps = []
    for shipped in SHIPPED_FILES:
        path = under_root(root, shipped.target)
        source = data_dir / shipped.source
        # lexists: a dangling link there is the site's too.
        keep = shipped.site_owned and os.path.lexists(path)
        action = Action.KEEP if keep else Action.WRITE
        steps.append(Step(action, path, source, shipped.mode, shipped.site_owned))
    link = under_root(root, LIBEXEC_DIR / "hooks.env")
    keep_link = os.path.lexists(link) and not link.is_symlink()
    steps.append(Step(Action.KEEP if keep_link else Action.LINK, link, Path(HOOKS_ENV)))
    return steps


def apply_step(step: Step, root: Path) -> Step:
    """Carry out ``step``; returns what was done (a site file that appeared meanwhile is
    kept, not overwritten)."""
    if step.action is Action.KEEP:
        return step
    _make_parents(step.path, root)
    if step.action is Action.LINK:
        temporary = step.path.with_name(f".{step.path.name}.new")
        temporary.unlink(missing_ok=True)
        temporary.symlink_to(step.source)
        temporary.replace(step.path)
        return step
    descriptor, name = tempfile.mkstemp(dir=step.path.parent, prefix=f".{step.path.name}.")
    os.close(descriptor)
    temporary = Path(name)
    try:
        shutil.copyfile(step.source, temporary)
        temporary.chmod(step.mode)
        if step.site_owned:
            # A hard link fails if the name exists: never overwrite, even in a race.
            try:
                os.link(temporary, step.path)
            except FileExistsError:
                return Step(Action.KEEP, step.path, step.source, step.mode, step.site_owned)
        else:
            # Atomic: systemd or slurmctld never read a half-written file.
            temporary.replace(step.path)
    finally:
        temporary.unlink(missing_ok=True)
    return step


def _make_parents(path: Path, root: Path) -> None:
    """Create ``path``'s missing parent folders, 0755 (or DIRECTORY_MODES'), whatever the
    umask: slurmctld runs job_ready as SlurmUser, who must reach it."""
    missing = []
    parent = path.parent
    while not parent.exists():
        missing.append(parent)
        parent = parent.parent
    for directory in reversed(missing):
        directory.mkdir()
        target = PurePosixPath("/", directory.relative_to(root))
        directory.chmod(DIRECTORY_MODES.get(target, 0o755))


def unit_program_note(unit_text: str, program: Path) -> str | None:
    """A note when the unit's ExecStart= runs another slurm-k8s-bridge than ``program`` (this
    install's): the unit names /opt/slurm-k8s-bridge/venv, the site guide's venv."""
    for line in unit_text.splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "ExecStart" and value.split():
            runs = value.split()[0]
            if Path(runs) == program:
                return None
            return (
                f"note: the unit runs {runs}, this install's is {program}: install into "
                f"{Path(runs).parent.parent}, or set ExecStartPre= and ExecStart= in a drop-in "
                "(systemctl edit slurm-k8s-bridge)"
            )
    return None


def install_service(args: argparse.Namespace, out: TextIO) -> int:
    """``install-service``: plan, then carry out (or with ``--dry-run`` only print) each step,
    one line each, then what is left to run."""
    candidates = [Path(args.data_dir)] if args.data_dir else default_data_dirs()
    data_dir = find_data_dir(candidates)
    root = Path(args.root).resolve()
    if not root.is_dir():
        raise BridgeError(f"--root {args.root}: not a directory")
    for step in plan_install(data_dir, root):
        done = step if args.dry_run else apply_step(step, root)
        print(done.line(dry_run=args.dry_run), file=out)
    unit = (data_dir / "systemd" / UNIT_NAME).read_text()
    program = Path(sysconfig.get_path("scripts")) / "slurm-k8s-bridge"
    notes = [unit_program_note(unit, program)]
    admin_unit = under_root(root, ADMIN_UNIT)
    if admin_unit.exists():
        notes.append(
            f"note: {admin_unit} overrides the unit in /usr/lib/systemd/system (an earlier "
            "manual install?): remove it unless the site keeps its own there"
        )
    for note in notes:
        if note:
            print(note, file=out)
    print(
        "next: systemd-sysusers; systemd-tmpfiles --create slurm-k8s-bridge.conf; "
        "systemctl daemon-reload (/usr/share/doc/slurm-k8s-bridge/site-guide.md, 2. Install)",
        file=out,
    )
    return 0


def add_install_parser(sub: Any) -> argparse.ArgumentParser:
    """The ``install-service`` subcommand's parser (``sub`` is the main parser's subparsers)."""
    p: argparse.ArgumentParser = sub.add_parser(
        "install-service",
        help="install the systemd unit, sysusers/tmpfiles/logrotate files, examples and "
        "PrologSlurmctld from this package",
        description="Copy what the wheel ships besides the Python code to its places: the unit "
        "to /usr/lib/systemd/system, sysusers.d and tmpfiles.d to /usr/lib, the logrotate file "
        "to /etc/logrotate.d, the examples to /etc/slurm-k8s-bridge/, job_ready and "
        f"strigger-setup.sh to {LIBEXEC_DIR}, the site guide to "
        "/usr/share/doc/slurm-k8s-bridge. Files under /usr are replaced (an upgrade brings "
        "the new ones); a file under /etc that exists is kept. One line per file.",
    )
    p.add_argument(
        "--root",
        default="/",
        metavar="DIR",
        help="install under DIR instead of / (like DESTDIR, for packages and tests)",
    )
    p.add_argument("--dry-run", action="store_true", help="print what it would do, write nothing")
    p.add_argument(
        "--data-dir",
        metavar="DIR",
        help="the shipped files' folder (default: this install's share/slurm-k8s-bridge)",
    )
    return p
