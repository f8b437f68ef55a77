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

from .layout import Layout
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
CLIENTS = ("scontrol", "sinfo", "squeue", "sbatch", "srun", "scancel", "sacct", "salloc")
#: Directories bound into the root at the same path (files: /etc/hosts, see _enter_script).
_SHARED_DIRS = ("/run/slurm-k8s-bridge", "/tmp", "/var/lib/slurm-k8s-bridge/shared")  # noqa: S108


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


def ensure_rootfs(cache: Path, series: str) -> Path:
    """Create the cached root with that Slurm series unless it exists (~30 s cold)."""
    root = rootfs(cache, series)
    if (root / "usr/sbin/slurmctld").exists():
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
        "apt-get -o Acquire::Check-Valid-Until=false update && "
        "DEBIAN_FRONTEND=noninteractive apt-get install -y "
        "--no-install-recommends slurmctld slurmd slurm-client && apt-get clean"
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

    @property
    def on_host(self) -> bool:
        return self.series == HOST_SERIES

    def client(self, name: str) -> str:
        return str(self.bin_dir / name)


def programs(layout: Layout, series: str) -> SlurmPrograms:
    """The programs of ``series``; for a series of a root, writes the wrappers (the root must
    exist: :func:`ensure_rootfs`)."""
    if series == HOST_SERIES:
        return SlurmPrograms(series, Path("/usr/bin"), ("/usr/sbin/slurmctld",))
    root = rootfs(layout.cache, series)
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
    return SlurmPrograms(series, bin_dir, (str(enter), "/usr/sbin/slurmctld"))


def _enter_script(layout: Layout, root: Path, series: str) -> str:
    binds = [str(layout.root), *_SHARED_DIRS]
    for path in binds:  # mount points must exist in the root (empty directories, harmless)
        Path(path).mkdir(parents=True, exist_ok=True)
        (root / path.lstrip("/")).mkdir(parents=True, exist_ok=True)
    (root / "etc" / "hosts").touch()  # minbase has none; a file bind needs one to cover
    mounts = " && ".join(
        [
            'mount -t proc proc "$r/proc"',
            *(f'mount --bind {shlex.quote(p)} "$r"{shlex.quote(p)}' for p in binds),
            'mount --bind /etc/hosts "$r/etc/hosts"',
            'mkdir -p "$r/run/slurm"',
            'exec /usr/sbin/chroot "$r" "$@"',
        ]
    )
    return (
        "#!/bin/sh\n"
        f"# Runs a program of Slurm {series} inside {root}, in a private mount namespace that\n"
        "# binds in the checkout, /run/slurm-k8s-bridge, /tmp, the shared directory, /etc/hosts\n"
        "# and a fresh /proc (see dev/proving_ground/slurm_series.py). Written by the\n"
        "# proving ground; edits are lost.\n"
        "exec /usr/bin/unshare --mount --propagation private /bin/sh -c "
        + shlex.quote(f"r={shlex.quote(str(root))} && {mounts}")
        + ' skb-enter-root "$@"\n'
    )


def _write_executable(path: Path, text: str) -> None:
    if not path.exists() or path.read_text() != text:
        path.write_text(text)
    path.chmod(0o755)
