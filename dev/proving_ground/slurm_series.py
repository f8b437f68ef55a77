"""Which Slurm series the proving ground runs, and how its programs are reached.

22.05 is the host's own (Debian bookworm's packages in /usr). 24.11 (trixie) and 26.05 (sid) come
from a cached root file system of the Debian suite that ships them: debootstrap with its own apt
sources, never the host's. Their daemons and clients run chrooted into that root, each process in
a private mount namespace that binds in what has to be the same path inside and out:

- the checkout (slurm.conf, state and logs under .local/, the hooks in slurm_plugins/);
- /run/slurm-k8s-bridge (munged's socket, the bridge's socket the hooks call);
- /etc/hosts (the CLOUD node names, see slurm.ensure_hosts_entries), /tmp, and a fresh /proc.

The mounts live only as long as the process that made them, so nothing is left mounted in the
cache after ``make down`` or a crash. Small wrappers in ``.local/slurm/bin`` (``scontrol``,
``sinfo`` ...) make the series' clients callable like the host's: the bridge's ``slurm.bin_dir``
and the tests' PATH point there. The hooks slurmctld starts run inside the root: they use the
static Go hook client (slurm_plugins/bin/skb-hook), since the root has no Python.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from .layout import GROUND_RUN, HOST_LOCAL_RUN, Layout
from .processes import ProvingGroundError

#: Slurm series -> the Debian suite that packages it.
SUITES = {"22.05": "bookworm", "24.11": "trixie", "26.05": "sid"}
#: The host's own series: no root, no wrappers.
HOST_SERIES = "22.05"
#: What ``make up`` (and ``make demo``/``make test``) run without SLURM=: the newest series that
#: passes the whole suite here (26.05, Debian sid's). 22.05 and 24.11 stay supported: the e2e
#: matrix (tests/e2e/test_series_matrix.py) runs the elastic cycle on them in every `make test`.
DEFAULT_SERIES = "26.05"
MIRROR = "http://deb.debian.org/debian"
#: The ground's authentication (``make up AUTH=slurm`` sets ``SKB_AUTH``): munge on every
#: series, or auth/slurm with a shared slurm.key (slurm.conf's AuthType and the bridge's
#: ``slurm.auth`` both follow it).
AUTH_MUNGE, AUTH_SLURM = "munge", "slurm"
AUTHS = (AUTH_MUNGE, AUTH_SLURM)
DEFAULT_AUTH = AUTH_MUNGE
#: Series without auth/slurm: the plugin came with Slurm 23.11 (Debian's 22.05 has no
#: auth_slurm.so).
WITHOUT_AUTH_SLURM = frozenset({"22.05"})
#: The clients wrapped in .local/slurm/bin (what the bridge, the tests and users call).
CLIENTS = (
    "scontrol", "sinfo", "squeue", "sbatch", "srun", "scancel", "sacct", "sacctmgr", "salloc",
)  # fmt: skip
#: Directories bound into the root at the same path (files: /etc/hosts, see _enter_script).
_SHARED_DIRS = (
    "/run/slurm-k8s-bridge", GROUND_RUN, HOST_LOCAL_RUN, "/tmp",  # noqa: S108
    "/var/lib/slurm-k8s-bridge/shared",
)  # fmt: skip
#: Files bound into the root: the CLOUD names, and the users and groups (SlurmUser, the bridge's
#: user and the job users are this host's; the root's own /etc/passwd does not know them).
_SHARED_FILES = ("/etc/hosts", "/etc/passwd", "/etc/group")


def series_from_env() -> str:
    """``SKB_SLURM`` (``make up SLURM=24.11`` sets it), else the default; refuses others."""
    series = os.environ.get("SKB_SLURM") or DEFAULT_SERIES
    if series not in SUITES:
        raise ProvingGroundError(
            f"SLURM={series}: not a series the proving ground runs "
            f"(choose one of {', '.join(SUITES)})"
        )
    return series


def auth_from_env(environ: Mapping[str, str] = os.environ) -> str:
    """``SKB_AUTH`` (``make up AUTH=slurm`` sets it), else munge; refuses others."""
    auth = environ.get("SKB_AUTH") or DEFAULT_AUTH
    if auth not in AUTHS:
        raise ProvingGroundError(f"AUTH={auth}: choose one of {', '.join(AUTHS)}")
    return auth


def check_auth(series: str, auth: str) -> None:
    """Refuse a (series, auth) pair the ground cannot run."""
    if auth == AUTH_SLURM and series in WITHOUT_AUTH_SLURM:
        raise ProvingGroundError(
            f"AUTH=slurm: Slurm {series} has no auth/slurm (the plugin came with 23.11); "
            f"use SLURM=24.11 or SLURM=26.05 with it, or AUTH=munge"
        )


def rootfs(cache: Path, series: str) -> Path:
    """The cached root of the Debian suite that ships ``series`` (shared with
    tests/data/slurm/record.py)."""
    return cache / f"rootfs-{SUITES[series]}-slurm"


#: Debian packages of the series in its root: the controller, accounting and the clients.
ROOT_PACKAGES = ("slurmctld", "slurmdbd", "slurmd", "slurm-client")
_APT_UPDATE = "apt-get -o Acquire::Check-Valid-Until=false update"


def ensure_rootfs(cache: Path, series: str) -> Path:
    """Create the cached root with that Slurm series unless it exists (~30 s cold); a root
    cached before slurmdbd was one of :data:`ROOT_PACKAGES` gets it added (~10 s, once)."""
    root = rootfs(cache, series)
    if (root / "usr/sbin/slurmctld").exists():
        if not (root / "usr/sbin/slurmdbd").exists():
            print(f"    adding slurmdbd to {root} (once)", flush=True)
            install = (
                f"{_APT_UPDATE} && DEBIAN_FRONTEND=noninteractive apt-get install -y "
                f"--no-install-recommends 'slurmdbd={series}.*' "
                "&& apt-get clean"
            )
            subprocess.run(["chroot", str(root), "sh", "-c", install], check=True)
        return root
    partial = root.with_name(root.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.parent.mkdir(parents=True, exist_ok=True)
    suite = SUITES[series]
    print(f"    debootstrap {suite} into {partial} (Slurm {series}; once, then cached)", flush=True)
    subprocess.run(["debootstrap", "--variant=minbase", suite, str(partial), MIRROR], check=True)
    policy = partial / "usr/sbin/policy-rc.d"  # never start services inside the root
    policy.write_text("#!/bin/sh\nexit 101\n")
    policy.chmod(0o755)
    install = (
        # The mirror may serve a sid snapshot whose Release has expired (seen: 27 days); apt
        # refuses it unless told the date does not matter.
        f"{_APT_UPDATE} && DEBIAN_FRONTEND=noninteractive apt-get install -y "
        f"--no-install-recommends {' '.join(ROOT_PACKAGES)} && apt-get clean"
    )
    subprocess.run(["chroot", str(partial), "sh", "-c", install], check=True)
    # A suite moves on (sid especially): refuse a root that does not carry the series named.
    shown = subprocess.run(
        ["chroot", str(partial), "slurmctld", "-V"], capture_output=True, text=True, check=True
    ).stdout.split()
    if len(shown) != 2 or not shown[1].startswith(series + "."):
        raise ProvingGroundError(f"{suite} carries {' '.join(shown)!r}, not Slurm {series}")
    partial.rename(root)
    return root


@dataclass(frozen=True)
class SlurmPrograms:
    """Where the proving ground's Slurm programs of one series are."""

    series: str
    bin_dir: Path  # scontrol, sinfo ... (the host's /usr/bin for 22.05, else our wrappers)
    slurmctld: tuple[str, ...]  # argv prefix that starts slurmctld
    slurmdbd: tuple[str, ...]  # argv prefix that starts slurmdbd
    slurmd: tuple[str, ...]  # argv prefix that starts slurmd (the site's static node)

    @property
    def on_host(self) -> bool:
        return self.series == HOST_SERIES

    def client(self, name: str) -> str:
        return str(self.bin_dir / name)


def programs(layout: Layout, series: str) -> SlurmPrograms:
    """The programs of ``series``; for a series of a root, writes the wrappers (the root must
    exist: :func:`ensure_rootfs`)."""
    if series == HOST_SERIES:
        return SlurmPrograms(
            series,
            Path("/usr/bin"),
            ("/usr/sbin/slurmctld",),
            ("/usr/sbin/slurmdbd",),
            ("/usr/sbin/slurmd",),
        )
    root = reachable_root(layout.cache, series)
    bin_dir = layout.slurm / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    enter = bin_dir / "enter-root"
    _write_executable(enter, _enter_script(layout, root, series))
    for name in CLIENTS:
        _write_executable(
            bin_dir / name,
            f"#!/bin/sh\n# Slurm {series}'s {name}, run inside {root} (written by the proving "
            f'ground).\nexec {shlex.quote(str(enter))} /usr/bin/{name} "$@"\n',
        )
    return SlurmPrograms(
        series,
        bin_dir,
        (str(enter), "/usr/sbin/slurmctld"),
        (str(enter), "/usr/sbin/slurmdbd"),
        (str(enter), "/usr/sbin/slurmd"),
    )


#: Where the cached roots are bound for every user: the cache is root's (~/.cache under /root,
#: 0700), and the bridge's user and the job users run the series' clients too.
ROOTS_MOUNT = Path(GROUND_RUN) / "roots"


def reachable_root(cache: Path, series: str) -> Path:
    """Where the root of ``series`` is reached by every user once :func:`bind_root` ran."""
    return ROOTS_MOUNT / rootfs(cache, series).name


def _mounted(path: Path) -> bool:
    # Not os.path.ismount: a bind of a directory of the same file system looks like none.
    mounts = Path("/proc/self/mountinfo").read_text().splitlines()
    return any(line.split()[4] == str(path) for line in mounts)


def bind_root(cache: Path, series: str) -> Path:
    """Bind the cached root of ``series`` at :func:`reachable_root` unless it is (root only;
    ``make down`` unmounts it). Read-write: slurmctld's sack socket (auth/slurm) in the root's
    /run/slurm must be the one the clients reach; other users cannot write the root's files."""
    cached, target = rootfs(cache, series), reachable_root(cache, series)
    if not _mounted(target):
        Path(GROUND_RUN).mkdir(mode=0o755, parents=True, exist_ok=True)
        os.chmod(GROUND_RUN, 0o755)  # noqa: S103 (job users run the clients)
        target.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "--bind", str(cached), str(target)], check=True)
    return target


#: chroot, then back to the caller's directory when the root has it (the checkout, /tmp, the
#: shared directory): chroot alone starts in /, and sbatch records its directory as the job's
#: (a job submitted from the shared directory then ran in / and could not write its output).
_CHROOT = (
    'exec /usr/sbin/chroot "$r" /bin/sh -c \'cd "$0" 2>/dev/null || cd /; exec "$@"\' "$PWD" "$@"'
)


def _enter_script(layout: Layout, root: Path, series: str) -> str:
    cached = rootfs(layout.cache, series)
    binds = [str(layout.root), *_SHARED_DIRS]
    for path in binds:  # mount points must exist in the root (empty directories, harmless)
        Path(path).mkdir(parents=True, exist_ok=True)
        (cached / path.lstrip("/")).mkdir(parents=True, exist_ok=True)
    for path in _SHARED_FILES:  # minbase has no /etc/hosts; a file bind needs one to cover
        (cached / path.lstrip("/")).touch()
    (cached / "run" / "slurm").mkdir(parents=True, exist_ok=True)
    (cached / "sys").mkdir(exist_ok=True)

    # A directory the caller cannot read (the bridge's socket directory, for a job user) is
    # not bound: "|| true" for directories, not for the files every program needs.
    def dir_binds(how: str) -> list[str]:
        return [
            f'{{ mount {how} {shlex.quote(p)} "$r"{shlex.quote(p)} 2>/dev/null || true; }}'
            for p in binds
        ]

    file_binds = [f'mount --bind {p} "$r"{p}' for p in _SHARED_FILES]
    # /sys for root's daemons: the site's static slurmd makes its jobs' cgroups there.
    root_mounts = " && ".join(
        ['mount -t proc proc "$r/proc"', 'mount --rbind /sys "$r/sys"', *dir_binds("--bind"),
         *file_binds, _CHROOT]
    )  # fmt: skip
    # Not root (the bridge's user, a job user): a user namespace that maps the caller to
    # itself (Slurm sees the same uid through munge) and keeps the namespace's capabilities
    # for the mounts and chroot; /proc is bound, not mounted (that needs a PID namespace), and
    # directories recursively (the kernel refuses a user namespace a plain bind of a directory
    # with mounts below it, e.g. the checkout's kubelet volumes: it would uncover them).
    user_mounts = " && ".join(
        ['mount --rbind /proc "$r/proc"', *dir_binds("--rbind"), *file_binds,
         _CHROOT]
    )  # fmt: skip
    quoted_root = shlex.quote(str(root))
    return (
        "#!/bin/sh\n"
        f"# Runs a program of Slurm {series} inside {root} (a bind of {cached}),\n"
        "# in a private mount namespace that binds in the checkout, /run/slurm-k8s-bridge,\n"
        f"# {GROUND_RUN}, /tmp, the shared directory, /etc/hosts, /etc/passwd, /etc/group\n"
        "# and /proc (see dev/proving_ground/slurm_series.py). Written by the proving ground;\n"
        "# edits are lost.\n"
        'if [ "$(id -u)" = 0 ]; then\n'
        "  exec /usr/bin/unshare --mount --propagation private /bin/sh -c "
        + shlex.quote(f"r={quoted_root} && {root_mounts}")
        + ' skb-enter-root "$@"\n'
        "fi\n"
        "exec /usr/bin/unshare --map-current-user --keep-caps --mount --propagation private "
        "/bin/sh -c " + shlex.quote(f"r={quoted_root} && {user_mounts}") + ' skb-enter-root "$@"\n'
    )


def _write_executable(path: Path, text: str) -> None:
    if not path.exists() or path.read_text() != text:
        path.write_text(text)
    path.chmod(0o755)
