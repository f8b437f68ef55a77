"""Container images with no registry: a Debian root filesystem (debootstrap) packed as a
docker-archive by hand and imported into containerd. Rebuilt only when the recipe changes."""

from __future__ import annotations

import hashlib
import io
import json
import logging
import shutil
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from .layout import Layout, repo_root
from .processes import ProvingGroundError, run

log = logging.getLogger(__name__)

SLURMD_IMAGE = "localhost/slurm-k8s-bridge/slurmd"
PAUSE_IMAGE = "localhost/slurm-k8s-bridge/pause"
DEBIAN_MIRROR = "http://deb.debian.org/debian"


@dataclass(frozen=True)
class ImageRecipe:
    """What an image is made of; its hash names the cached build."""

    name: str
    files: tuple[Path, ...]
    extra: str

    def digest(self) -> str:
        h = hashlib.sha256(self.extra.encode())
        for path in self.files:
            h.update(path.name.encode())
            h.update(path.read_bytes())
        return h.hexdigest()[:12]

    def reference(self) -> str:
        return f"{self.name}:{self.digest()}"


def slurmd_recipe() -> ImageRecipe:
    recipe_dir = repo_root() / "deploy" / "images" / "slurmd"
    return ImageRecipe(
        SLURMD_IMAGE,
        (recipe_dir / "packages.txt", recipe_dir / "entrypoint.sh"),
        "bookworm",
    )


def pause_recipe() -> ImageRecipe:
    return ImageRecipe(PAUSE_IMAGE, (Path("/usr/bin/catatonit"),), "pause")


def _packages(path: Path) -> list[str]:
    lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return [line for line in lines if line]


def debootstrap(root: Path, packages_file: Path) -> None:
    """A minimal Debian bookworm root at ``root`` with the packages listed in ``packages_file``."""
    packages = ",".join(_packages(packages_file))
    log.info("debootstrap bookworm with %s (about a minute)", packages)
    started = time.monotonic()
    run(
        [
            "debootstrap",
            "--variant=minbase",
            f"--include={packages}",
            "bookworm",
            str(root),
            DEBIAN_MIRROR,
        ],
        timeout_s=1200,
    )
    log.info("debootstrap done in %.0fs", time.monotonic() - started)


def drop_apt_caches(root: Path) -> None:
    for junk in ("var/cache/apt/archives", "var/lib/apt/lists"):
        shutil.rmtree(root / junk, ignore_errors=True)


def _layer_from_tree(root: Path, out: Path) -> None:
    # GNU tar keeps device nodes, hard links and numeric owners exactly as debootstrap made them.
    run(["tar", "--numeric-owner", "-C", str(root), "-cf", str(out), "."], timeout_s=600)


def _layer_with_pause(out: Path) -> None:
    with tarfile.open(out, "w") as tar:
        info = tar.gettarinfo("/usr/bin/catatonit", arcname="pause")
        info.mode, info.uid, info.gid, info.uname, info.gname = 0o755, 0, 0, "", ""
        with open("/usr/bin/catatonit", "rb") as f:
            tar.addfile(info, f)


def _write_docker_archive(
    layer: Path, references: list[str], config: dict[str, object], out: Path
) -> None:
    layer_digest = hashlib.sha256()
    with layer.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            layer_digest.update(chunk)
    diff_id = "sha256:" + layer_digest.hexdigest()
    image_config = {
        "architecture": "amd64",
        "os": "linux",
        "config": config,
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created_by": "slurm-k8s-bridge proving ground"}],
    }
    config_bytes = json.dumps(image_config, sort_keys=True).encode()
    config_name = hashlib.sha256(config_bytes).hexdigest() + ".json"
    layer_name = layer_digest.hexdigest() + "/layer.tar"
    manifest = [{"Config": config_name, "RepoTags": references, "Layers": [layer_name]}]
    with tarfile.open(out, "w") as tar:
        for name, data in (
            (config_name, config_bytes),
            ("manifest.json", json.dumps(manifest).encode()),
        ):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        tar.add(str(layer), arcname=layer_name)


def _build_slurmd_archive(layout: Layout, recipe: ImageRecipe, out: Path) -> None:
    recipe_dir = repo_root() / "deploy" / "images" / "slurmd"
    with tempfile.TemporaryDirectory(prefix="skb-rootfs-", dir=layout.images) as tmp:
        root = Path(tmp) / "root"
        debootstrap(root, recipe_dir / "packages.txt")
        drop_apt_caches(root)
        (root / "var/spool/slurmd").mkdir(parents=True, exist_ok=True)
        entry = root / "usr/local/bin/slurmd-entrypoint"
        shutil.copy(recipe_dir / "entrypoint.sh", entry)
        entry.chmod(0o755)
        layer = Path(tmp) / "layer.tar"
        _layer_from_tree(root, layer)
        config: dict[str, object] = {
            "Entrypoint": ["/usr/local/bin/slurmd-entrypoint"],
            "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
            "Labels": {"io.slurm-k8s-bridge.recipe": recipe.digest()},
        }
        _write_docker_archive(layer, [recipe.reference(), f"{recipe.name}:dev"], config, out)


def _build_pause_archive(layout: Layout, recipe: ImageRecipe, out: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="skb-pause-", dir=layout.images) as tmp:
        layer = Path(tmp) / "layer.tar"
        _layer_with_pause(layer)
        config: dict[str, object] = {"Entrypoint": ["/pause", "-P"], "User": "65535:65535"}
        _write_docker_archive(layer, [recipe.reference()], config, out)


def ensure_archives(layout: Layout) -> dict[str, Path]:
    """Build the image archives that are missing from the cache; return reference → archive."""
    layout.images.mkdir(parents=True, exist_ok=True)
    result: dict[str, Path] = {}
    for recipe, builder in (
        (slurmd_recipe(), _build_slurmd_archive),
        (pause_recipe(), _build_pause_archive),
    ):
        archive = layout.images / f"{recipe.name.rsplit('/', 1)[1]}-{recipe.digest()}.tar"
        if not archive.exists():
            log.info("building image %s", recipe.reference())
            partial = archive.with_suffix(".partial")
            builder(layout, recipe, partial)
            partial.replace(archive)
        result[recipe.reference()] = archive
    return result


def import_images(layout: Layout, ctr: list[str]) -> None:
    """Import each archive into containerd's k8s.io namespace unless it is there already."""
    listed = run([*ctr, "-n", "k8s.io", "images", "ls", "-q"]).stdout.split()
    for reference, archive in ensure_archives(layout).items():
        if reference in listed:
            continue
        log.info("importing %s into containerd", reference)
        result = run(
            [*ctr, "-n", "k8s.io", "images", "import", str(archive)], check=False, timeout_s=600
        )
        if result.returncode != 0:
            raise ProvingGroundError(f"ctr import {archive} failed: {result.stderr.strip()}")
