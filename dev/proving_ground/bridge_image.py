"""The bridge's own image, ``localhost/slurm-k8s-bridge/bridge:dev``: slurmctld, munge and Slurm's
clients of the ground's default series (Debian's packages of its suite), and this package in a
venv, for the in-cluster and compose deployments; laid out as deploy/images/bridge/Containerfile
lays out what a site builds (``/opt/slurm-k8s-bridge/venv``, the ``slurm-k8s-bridge`` user,
SlurmUser's directories).

No network inside the image build: the host builds the package's wheel and fetches its
dependencies' wheels for the image's own Python (``pip download --python-version``: the suite's
Python is not the host's), and the image's venv installs them offline in a chroot. Rebuilt only
when the recipe, the package or the hooks change; the archive is cached next to the other images
and serves containerd and podman.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

from . import bridge_install
from .images import (
    ImageRecipe,
    _layer_from_tree,
    _write_docker_archive,
    bridge_version,
    debootstrap,
    drop_apt_caches,
    host_arch,
    suite_for,
)
from .layout import Layout, repo_root
from .processes import ProvingGroundError, run
from .slurm_series import DEFAULT_SERIES

log = logging.getLogger(__name__)

BRIDGE_IMAGE = "localhost/slurm-k8s-bridge/bridge"
BRIDGE_IMAGE_DEV = f"{BRIDGE_IMAGE}:dev"
#: The Slurm series of the image's slurmctld and clients: the ground's default, so the compose
#: and in-cluster setups' slurmd pods run the slurmd image the rest of the ground runs.
SLURM_SERIES = DEFAULT_SERIES
#: Where the hooks live in the image; slurm.conf's ResumeProgram and friends point here.
PLUGINS_IN_IMAGE = "opt/slurm-k8s-bridge/slurm_plugins"
#: The bridge's venv in the image (the Containerfile's), its console scripts linked into
#: /usr/local/bin.
VENV_IN_IMAGE = "opt/slurm-k8s-bridge/venv"
#: The manylinux tags of binary wheels the image's Python takes (glibc 2.5 up to 2.36).
_MANYLINUX_TAGS = (
    "manylinux1",
    "manylinux_2_5",
    "manylinux2014",
    "manylinux_2_17",
    "manylinux_2_24",
    "manylinux_2_27",
    "manylinux_2_28",
    "manylinux_2_31",
    "manylinux_2_34",
    "manylinux_2_36",
)
#: Debian's static uid of SlurmUser ``slurm`` (the slurm packages' base-passwd entry): the
#: in-cluster overlay's runAsUser/fsGroup.
SLURM_UID = 64030
#: Machine-local files that must not reach the image (nor change its digest).
_LOCAL_ONLY = {"hooks.env"}


def _recipe_dir() -> Path:
    return repo_root() / "deploy" / "images" / "bridge"


def _package_files(root: Path) -> list[Path]:
    """What goes into the image from the checkout: the wheel's files (as the ground's own
    install digests them) and the hooks copied beside it."""
    files = [root / relative for relative in bridge_install.wheel_sources(root)]
    files += sorted(
        p for p in (root / "slurm_plugins").iterdir() if p.is_file() and p.name not in _LOCAL_ONLY
    )
    return sorted(set(files))


def bridge_recipe() -> ImageRecipe:
    """Packages, entrypoint, hooks settings, and every file that goes into the wheel."""
    recipe_dir = _recipe_dir()
    own = tuple(recipe_dir / name for name in ("packages.txt", "entrypoint.sh", "hooks.env"))
    return ImageRecipe(
        BRIDGE_IMAGE,
        (*own, *_package_files(repo_root())),
        f"slurm={SLURM_SERIES} suite={suite_for(SLURM_SERIES)} venv",
    )


def archive_path(layout: Layout, digest: str | None = None) -> Path:
    """The cached docker-archive of the bridge image (it may not exist yet)."""
    return layout.images / f"bridge-{digest or bridge_recipe().digest()}.tar"


def _build_wheels(out: Path, python_version: str) -> None:
    """The package's wheel, built on the host as the ground's own install builds it, and its
    dependencies' wheels for the image's CPython ``python_version`` (``3.14``), fetched on the
    host (which has PyPI)."""
    out.mkdir(parents=True, exist_ok=True)
    wheel = bridge_install.build_wheel(repo_root(), out)
    pip = [sys.executable, "-m", "pip"]
    # With --platform pip takes exactly the tags given (no older glibc's): the manylinux
    # generations that wheels carry, all older than any suite's glibc here.
    machine = {"amd64": "x86_64", "arm64": "aarch64"}.get(host_arch(), host_arch())
    platforms = [arg for tag in _MANYLINUX_TAGS for arg in ("--platform", f"{tag}_{machine}")]
    run(
        [
            *pip,
            "download",
            "--quiet",
            "--dest",
            str(out),
            "--only-binary=:all:",
            "--python-version",
            python_version,
            "--implementation",
            "cp",
            *platforms,
            str(wheel),
        ],
        timeout_s=900,
    )


def _image_python_version(root: Path) -> str:
    """``3.13``: the Python of the debootstrapped root (its suite's, not the host's)."""
    printed = run(
        ["chroot", str(root), "/usr/bin/python3", "-c", "import sys; print(*sys.version_info[:2])"]
    ).stdout.split()
    return ".".join(printed)


def _install_offline(root: Path, wheels: Path) -> None:
    """The Containerfile's venv: ``python3 -m venv``, the wheels installed with no index, the
    console scripts linked into /usr/local/bin."""
    # A path inside the image's root being built, not the host's /tmp.
    inside = root / "tmp" / "wheels"
    shutil.copytree(wheels, inside)
    venv = f"/{VENV_IN_IMAGE}"
    try:
        run(["chroot", str(root), "/usr/bin/python3", "-m", "venv", venv], timeout_s=300)
        run(
            [
                "chroot",
                str(root),
                f"{venv}/bin/pip",
                "install",
                "--no-index",
                "--find-links",
                "/tmp/wheels",  # noqa: S108 (inside the image's root)
                "--no-cache-dir",
                "--disable-pip-version-check",
                "slurm-k8s-bridge",
            ],
            timeout_s=600,
        )
    finally:
        shutil.rmtree(inside, ignore_errors=True)
    scripts = sorted((root / VENV_IN_IMAGE / "bin").glob("slurm-k8s-bridge*"))
    if not scripts:
        raise ProvingGroundError(f"pip left no slurm-k8s-bridge in /{VENV_IN_IMAGE}/bin")
    for script in scripts:
        (root / "usr/local/bin" / script.name).symlink_to(f"{venv}/bin/{script.name}")


def _add_users_and_directories(root: Path) -> None:
    """What the Containerfile's RUN makes: the bridge's user (SlurmUser's group ``slurm`` its
    primary group) and the directories SlurmUser and the bridge write."""
    run(
        [
            "chroot",
            str(root),
            "useradd",
            "--system",
            "--gid",
            "slurm",
            "--home-dir",
            "/nonexistent",
            "--no-create-home",
            "--shell",
            "/usr/sbin/nologin",
            "--comment",
            "slurm-k8s-bridge service",
            "slurm-k8s-bridge",
        ]
    )
    owned = {
        "var/spool/slurmctld": "slurm:slurm",
        "var/log/slurm": "slurm:slurm",
        "run/slurm": "slurm:slurm",
        "run/slurm-k8s-bridge": "slurm-k8s-bridge:slurm",
        "etc/slurm": "slurm-k8s-bridge:slurm",
        "etc/slurm-k8s-bridge": "root:root",
    }
    for directory, owner in owned.items():
        (root / directory).mkdir(parents=True, exist_ok=True)
        run(["chroot", str(root), "chown", owner, f"/{directory}"])


def _copy_plugins(root: Path) -> None:
    target = root / PLUGINS_IN_IMAGE
    target.mkdir(parents=True)
    for path in (repo_root() / "slurm_plugins").iterdir():
        if path.is_file() and path.name not in _LOCAL_ONLY:
            shutil.copy2(path, target / path.name)
    # The hooks run the venv's Python (it has grpc), as the Containerfile's sed sets.
    hooks_env = (_recipe_dir() / "hooks.env").read_text()
    python = f"SKB_PYTHON=/{VENV_IN_IMAGE}/bin/python"
    (target / "hooks.env").write_text(re.sub(r"(?m)^SKB_PYTHON=.*$", python, hooks_env))
    for path in target.iterdir():
        # slurmctld refuses a group- or world-writable program; hook.sh is sourced.
        executable = path.name not in {"hook.sh", "job_ready.sh", "hooks.env"} and os.access(
            path, os.X_OK
        )
        path.chmod(0o755 if executable else 0o644)


def _build_bridge_archive(layout: Layout, reference: str, out: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="skb-bridge-", dir=layout.images) as tmp:
        scratch = Path(tmp)
        wheels = scratch / "wheels"
        root = scratch / "root"
        debootstrap(root, _recipe_dir() / "packages.txt", suite_for(SLURM_SERIES))
        python_version = _image_python_version(root)
        log.info("building wheels of the bridge and its dependencies for Python %s", python_version)
        _build_wheels(wheels, python_version)
        _install_offline(root, wheels)
        drop_apt_caches(root)
        _add_users_and_directories(root)
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
