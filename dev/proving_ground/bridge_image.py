"""The bridge's own image, ``localhost/slurm-k8s-bridge/bridge:dev``: slurmctld, munge, Slurm's
clients, Python 3.11 and this package, for the in-cluster and compose deployments.

No network inside the image build: the host builds wheels of the package and its dependencies
(PyPI is reachable from the host), and bookworm's own pip installs them offline in a chroot, so
the console script's shebang and the site directory are the image's (``/usr/bin/python3``,
``/usr/local/lib/python3.11/dist-packages``). Rebuilt only when the recipe, the package or the
hooks change; the archive is cached next to the other images and serves containerd and podman.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
import tempfile
from pathlib import Path

from .images import (
    ImageRecipe,
    _layer_from_tree,
    _write_docker_archive,
    bridge_version,
    debootstrap,
    drop_apt_caches,
)
from .layout import Layout, repo_root
from .processes import ProvingGroundError, run

log = logging.getLogger(__name__)

BRIDGE_IMAGE = "localhost/slurm-k8s-bridge/bridge"
BRIDGE_IMAGE_DEV = f"{BRIDGE_IMAGE}:dev"
#: The Slurm series of the image's slurmctld and clients (Debian bookworm's): the compose
#: setup's slurmd pods run this series' slurmd image (``slurmd:22.05``), whatever the ground runs.
SLURM_SERIES = "22.05"
#: Where the hooks live in the image; slurm.conf's ResumeProgram and friends point here.
PLUGINS_IN_IMAGE = "opt/slurm-k8s-bridge/slurm_plugins"
#: Machine-local files that must not reach the image (nor change its digest).
_LOCAL_ONLY = {"hooks.env"}


def _recipe_dir() -> Path:
    return repo_root() / "deploy" / "images" / "bridge"


def _package_files(root: Path) -> list[Path]:
    files = [root / "pyproject.toml"]
    files += sorted(p for p in (root / "bridge").rglob("*") if p.is_file() and _source(p))
    files += sorted(
        p for p in (root / "slurm_plugins").iterdir() if p.is_file() and p.name not in _LOCAL_ONLY
    )
    return files


def _source(path: Path) -> bool:
    return "__pycache__" not in path.parts and path.suffix in {".py", ".pyi", ".typed"}


def bridge_recipe() -> ImageRecipe:
    """Packages, entrypoint, hooks settings, and every file that goes into the wheel."""
    recipe_dir = _recipe_dir()
    own = tuple(recipe_dir / name for name in ("packages.txt", "entrypoint.sh", "hooks.env"))
    return ImageRecipe(BRIDGE_IMAGE, (*own, *_package_files(repo_root())), "bookworm")


def archive_path(layout: Layout, digest: str | None = None) -> Path:
    """The cached docker-archive of the bridge image (it may not exist yet)."""
    return layout.images / f"bridge-{digest or bridge_recipe().digest()}.tar"


def _build_wheels(out: Path, scratch: Path) -> None:
    """Wheels of the package and all its dependencies, built on the host (which has PyPI)."""
    source = scratch / "source"
    source.mkdir()
    root = repo_root()
    # A copy, so that setuptools' build/ and egg-info never land in the checkout.
    shutil.copy(root / "pyproject.toml", source)
    if (root / "README.md").exists():
        shutil.copy(root / "README.md", source)
    shutil.copytree(
        root / "bridge", source / "bridge", ignore=shutil.ignore_patterns("__pycache__")
    )
    run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--wheel-dir", str(out), str(source)],
        timeout_s=900,
    )


def _install_offline(root: Path, wheels: Path) -> None:
    # A path inside the image's root being built, not the host's /tmp.
    inside = root / "tmp" / "wheels"
    shutil.copytree(wheels, inside)
    try:
        run(
            [
                "chroot",
                str(root),
                "/usr/bin/python3",
                "-m",
                "pip",
                "install",
                "--no-index",
                "--find-links",
                "/tmp/wheels",  # noqa: S108
                "--no-cache-dir",
                "--break-system-packages",
                "--root-user-action=ignore",
                "--disable-pip-version-check",
                "slurm-k8s-bridge",
            ],
            timeout_s=600,
        )
    finally:
        shutil.rmtree(inside, ignore_errors=True)
    if not (root / "usr/local/bin/slurm-k8s-bridge").exists():
        raise ProvingGroundError("pip left no /usr/local/bin/slurm-k8s-bridge in the image")


def _copy_plugins(root: Path) -> None:
    target = root / PLUGINS_IN_IMAGE
    target.mkdir(parents=True)
    for path in (repo_root() / "slurm_plugins").iterdir():
        if path.is_file() and path.name not in _LOCAL_ONLY:
            shutil.copy2(path, target / path.name)
    shutil.copy(_recipe_dir() / "hooks.env", target / "hooks.env")


def _build_bridge_archive(layout: Layout, reference: str, out: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="skb-bridge-", dir=layout.images) as tmp:
        scratch = Path(tmp)
        wheels = scratch / "wheels"
        log.info("building wheels of the bridge and its dependencies")
        _build_wheels(wheels, scratch)
        root = scratch / "root"
        debootstrap(root, _recipe_dir() / "packages.txt")
        _install_offline(root, wheels)
        drop_apt_caches(root)
        for directory in (
            "var/spool/slurmctld",
            "var/log/slurm",
            "run/slurm-k8s-bridge",
            "etc/slurm-k8s-bridge",
        ):
            (root / directory).mkdir(parents=True, exist_ok=True)
        _copy_plugins(root)
        entry = root / "usr/local/bin/skb-entrypoint"
        shutil.copy(_recipe_dir() / "entrypoint.sh", entry)
        entry.chmod(0o755)
        layer = scratch / "layer.tar"
        _layer_from_tree(root, layer)
        config: dict[str, object] = {
            "Entrypoint": ["/usr/local/bin/skb-entrypoint"],
            "Cmd": ["all"],
            "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
            "Labels": {"io.slurm-k8s-bridge.recipe": reference.rsplit(":", 1)[1]},
        }
        _write_docker_archive(layer, [reference, BRIDGE_IMAGE_DEV], config, out)


def ensure_bridge_archive(layout: Layout) -> tuple[str, Path]:
    """Build the bridge image's archive unless the cache has it; return (reference, archive)."""
    layout.images.mkdir(parents=True, exist_ok=True)
    # One digest for the whole build: the sources may change while it runs (the next call then
    # sees a new digest and builds again).
    digest = bridge_recipe().digest()
    reference = f"{BRIDGE_IMAGE}:{digest}"
    archive = archive_path(layout, digest)
    if not archive.exists():
        log.info("building image %s", reference)
        partial = archive.with_suffix(".partial")
        _build_bridge_archive(layout, reference, partial)
        partial.replace(archive)
        for stale in layout.images.glob("bridge-*.tar"):
            # Each archive is ~400 MB; only the current one is ever used again.
            if stale != archive:
                stale.unlink()
    return reference, archive


def import_bridge_image(layout: Layout, ctr: list[str]) -> str:
    """Import the bridge image into containerd's k8s.io namespace unless it is there; returns
    the digest-tagged reference (``:dev`` names the same image)."""
    reference, archive = ensure_bridge_archive(layout)
    listed = run([*ctr, "-n", "k8s.io", "images", "ls", "-q"]).stdout.split()
    if reference not in listed or BRIDGE_IMAGE_DEV not in listed:
        log.info("importing %s into containerd", reference)
        result = run(
            [*ctr, "-n", "k8s.io", "images", "import", str(archive)], check=False, timeout_s=600
        )
        if result.returncode != 0:
            raise ProvingGroundError(f"ctr import {archive} failed: {result.stderr.strip()}")
    # The release tag the in-cluster overlay names (the package version), this build's here.
    run([*ctr, "-n", "k8s.io", "images", "tag", "--force", reference, release_reference()])
    stale = [ref for ref in listed if _is_stale(ref, reference)]
    if stale:
        # Each build is ~400 MB of its own layer; running containers keep theirs regardless.
        run([*ctr, "-n", "k8s.io", "images", "rm", *stale], check=False)
    return reference


def release_reference() -> str:
    """``bridge:<package version>``: the tag deployments name instead of ``:dev``."""
    return f"{BRIDGE_IMAGE}:{bridge_version()}"


def _is_stale(listed: str, current: str) -> bool:
    return listed.startswith(f"{BRIDGE_IMAGE}:") and listed not in {
        current,
        BRIDGE_IMAGE_DEV,
        release_reference(),
    }


def load_into_podman(layout: Layout) -> str:
    """``podman load`` the same archive (for docker-compose.yml under podman-compose) unless
    podman has this build already; returns the digest-tagged reference."""
    reference, archive = ensure_bridge_archive(layout)
    if run(["podman", "image", "exists", reference], check=False).returncode != 0:
        log.info("loading %s into podman", reference)
        run(["podman", "load", "--input", str(archive)], timeout_s=600)
    # podman load of a docker-archive keeps both RepoTags; retag in case :dev pointed elsewhere.
    run(["podman", "tag", reference, BRIDGE_IMAGE_DEV])
    listed = run(["podman", "images", "--format", "{{.Repository}}:{{.Tag}}"]).stdout.split()
    stale = [ref for ref in listed if _is_stale(ref, reference)]
    if stale:
        run(["podman", "rmi", *stale], check=False)
    return reference


def main(argv: list[str] | None = None) -> None:
    """``python -m proving_ground.bridge_image [--containerd] [--podman]`` from dev:
    build the image if needed and import it (default: into the proving ground's containerd)."""
    parser = argparse.ArgumentParser(prog="python -m proving_ground.bridge_image")
    parser.add_argument("--containerd", action="store_true", help="import into containerd")
    parser.add_argument("--podman", action="store_true", help="podman load it")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    layout = Layout.default()
    if args.containerd or not args.podman:
        ctr = ["ctr", "--address", str(layout.containerd_socket)]
        print(import_bridge_image(layout, ctr))
    if args.podman:
        print(load_into_podman(layout))


if __name__ == "__main__":
    main()
