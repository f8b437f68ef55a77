"""Container images with no registry.

The slurmd image is built from ``deploy/images/slurmd/Containerfile`` — the same recipe a site
builds with ``podman build`` against a registry — on a Debian base made here: debootstrap a
minimal root of the suite that carries the wanted Slurm series, commit it with buildah as
``localhost/debian:<suite>``, ``buildah bud --pull=never`` on top of it (its RUN step fetches
Debian's packages from deb.debian.org), save it as a docker-archive and import that into
containerd. ``python -m proving_ground.images`` (``make image``) builds, tags and pushes it for any
series. The pause image is packed by hand from Debian's static ``catatonit``.

Everything is cached by recipe digest (Containerfile + entrypoint + packages + series + base): a
warm ``make up`` rebuilds nothing.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import logging
import platform
import re
import shutil
import sys
import tarfile
import tempfile
import time
import tomllib
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from pathlib import Path

from .layout import Layout, repo_root
from .processes import ProvingGroundError, run
from .slurm_series import DEFAULT_SERIES

log = logging.getLogger(__name__)

SLURMD_IMAGE = "localhost/slurm-k8s-bridge/slurmd"
#: What the proving ground's bridge config (dev/bridge.yaml) names; always the ground's
#: series, re-pointed at every import.
SLURMD_IMAGE_DEV = f"{SLURMD_IMAGE}:dev"
PAUSE_IMAGE = "localhost/slurm-k8s-bridge/pause"
DEBIAN_MIRROR = "http://deb.debian.org/debian"
DEBIAN_SECURITY_MIRROR = "http://deb.debian.org/debian-security"
#: Slurm series -> the Debian suite that packages it (``apt-cache policy slurmd`` per suite).
SLURM_SUITES = {"22.05": "bookworm", "24.11": "trixie", "26.05": "sid"}
#: The series the proving ground runs by default (``make image`` builds it without SLURM=).
GROUND_SLURM = DEFAULT_SERIES
#: Suites that get -updates and -security next to the release (sid has neither).
_STABLE_SUITES = {"bookworm", "trixie"}


def slurmd_recipe_dir() -> Path:
    return repo_root() / "deploy" / "images" / "slurmd"


def host_arch() -> str:
    """This machine's architecture as OCI names it (amd64, arm64, ...)."""
    machine = platform.machine().lower()
    return {
        "x86_64": "amd64",
        "aarch64": "arm64",
        "armv7l": "arm",
        "ppc64le": "ppc64le",
        "s390x": "s390x",
        "riscv64": "riscv64",
    }.get(machine, machine)


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


def suite_for(series: str) -> str:
    try:
        return SLURM_SUITES[series]
    except KeyError:
        known = ", ".join(f"{s} ({suite})" for s, suite in SLURM_SUITES.items())
        raise ProvingGroundError(
            f"no Debian suite packages Slurm {series}; known: {known}"
        ) from None


def base_reference(suite: str) -> str:
    """The local Debian base the offline build uses for ``suite``."""
    return f"localhost/debian:{suite}"


def slurmd_recipe(series: str = GROUND_SLURM, base: str | None = None) -> ImageRecipe:
    """The slurmd image of one Slurm series; ``base`` defaults to the local debootstrap base."""
    suite = suite_for(series)
    recipe_dir = slurmd_recipe_dir()
    return ImageRecipe(
        SLURMD_IMAGE,
        tuple(
            recipe_dir / name
            for name in ("Containerfile", "entrypoint.sh", "packages.txt", "build-nss-slurm.sh")
        ),
        f"slurm={series} suite={suite} base={base or base_reference(suite)}",
    )


def pause_recipe() -> ImageRecipe:
    return ImageRecipe(PAUSE_IMAGE, (Path("/usr/bin/catatonit"),), "pause")


def _packages(path: Path) -> list[str]:
    lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return [line for line in lines if line]


def debootstrap(root: Path, packages_file: Path | None, suite: str = "bookworm") -> None:
    """A minimal Debian root of ``suite`` at ``root``, with the packages listed in
    ``packages_file`` if given. debootstrap never reads the host's apt sources."""
    command = ["debootstrap", "--variant=minbase", f"--arch={_dpkg_arch()}"]
    if packages_file is not None:
        command.append(f"--include={','.join(_packages(packages_file))}")
    log.info("debootstrap %s (about a minute)", suite)
    started = time.monotonic()
    run([*command, suite, str(root), DEBIAN_MIRROR], timeout_s=1200)
    log.info("debootstrap %s done in %.0fs", suite, time.monotonic() - started)


def _dpkg_arch() -> str:
    return run(["dpkg", "--print-architecture"]).stdout.strip()


def drop_apt_caches(root: Path) -> None:
    for junk in ("var/cache/apt/archives", "var/lib/apt/lists"):
        shutil.rmtree(root / junk, ignore_errors=True)
    (root / "var/cache/apt/archives/partial").mkdir(parents=True, exist_ok=True)
    (root / "var/lib/apt/lists/partial").mkdir(parents=True, exist_ok=True)
    for cache in (root / "var/cache/apt").glob("*.bin"):
        cache.unlink()


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
        "architecture": host_arch(),
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


def _podman_has(reference: str) -> bool:
    return run(["podman", "image", "exists", reference], check=False).returncode == 0


def _sources_list(suite: str) -> str:
    lines = [f"deb {DEBIAN_MIRROR} {suite} main"]
    if suite in _STABLE_SUITES:
        lines.append(f"deb {DEBIAN_MIRROR} {suite}-updates main")
        lines.append(f"deb {DEBIAN_SECURITY_MIRROR} {suite}-security main")
    return "\n".join(lines) + "\n"


def ensure_base(suite: str, scratch: Path) -> str:
    """``localhost/debian:<suite>`` in containers-storage (podman's and buildah's), made from a
    debootstrap root unless it is there already; returns its reference."""
    reference = base_reference(suite)
    if _podman_has(reference):
        return reference
    with tempfile.TemporaryDirectory(prefix=f"skb-{suite}-", dir=scratch) as tmp:
        root = Path(tmp) / "root"
        debootstrap(root, None, suite)
        drop_apt_caches(root)
        # The image's own sources, like Debian's official images; the host's are never touched.
        (root / "etc/apt/sources.list").write_text(_sources_list(suite))
        if suite not in _STABLE_SUITES:
            # Unstable's Release file is valid for a week only: a mirror that serves an older
            # snapshot (as this workplace's does) is refused by apt-get update, not by debootstrap.
            (root / "etc/apt/apt.conf.d/99slurm-k8s-bridge-snapshot").write_text(
                'Acquire::Check-Valid-Until "false";\n'
            )
        # The runtime mounts /dev, /proc and /sys; debootstrap's device nodes do not belong in a
        # layer.
        for directory in ("dev", "proc", "sys"):
            for entry in (root / directory).iterdir():
                if entry.is_dir() and not entry.is_symlink():
                    shutil.rmtree(entry)
                else:
                    entry.unlink()
        container = run(["buildah", "from", "scratch"]).stdout.strip()
        try:
            mount = run(["buildah", "mount", container]).stdout.strip()
            run(
                [
                    "sh",
                    "-c",
                    'tar --numeric-owner -C "$1" -cf - . | tar --numeric-owner -C "$2" -xpf -',
                    "copy-tree",
                    str(root),
                    mount,
                ],
                timeout_s=600,
            )
            run(["buildah", "umount", container])
            run(
                [
                    "buildah",
                    "config",
                    f"--arch={host_arch()}",
                    "--os=linux",
                    "--env=PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                    "--cmd=/bin/bash",
                    f"--label=io.slurm-k8s-bridge.base=debootstrap --variant=minbase {suite}",
                    container,
                ]
            )
            run(["buildah", "commit", "--quiet", "--rm", container, reference], timeout_s=600)
        except BaseException:
            run(["buildah", "rm", container], check=False)
            raise
    log.info("base image %s committed", reference)
    return reference


def build_slurmd_image(layout: Layout, series: str = GROUND_SLURM, base: str | None = None) -> str:
    """The slurmd image of ``series`` in containers-storage, built from the Containerfile unless
    an image of the same recipe is there; returns ``localhost/slurm-k8s-bridge/slurmd:<digest>``.

    ``base`` None: the offline path (a local debootstrap base, nothing pulled). Otherwise the
    base is pulled if missing, as a site with a registry would.
    """
    recipe = slurmd_recipe(series, base)
    reference = recipe.reference()
    if _podman_has(reference):
        return reference
    layout.images.mkdir(parents=True, exist_ok=True)
    suite = suite_for(series)
    offline = base is None
    base = base or ensure_base(suite, layout.images)
    log.info("building %s (Slurm %s on %s)", reference, series, base)
    started = time.monotonic()
    run(
        [
            "buildah",
            "bud",
            "--layers",
            # The RUN step needs deb.debian.org only: the host's network, no CNI setup.
            "--network=host",
            f"--pull={'never' if offline else 'missing'}",
            f"--build-arg=SLURM={series}",
            f"--build-arg=SUITE={suite}",
            f"--build-arg=BASE={base}",
            f"--label=io.slurm-k8s-bridge.recipe={recipe.digest()}",
            "--file",
            str(slurmd_recipe_dir() / "Containerfile"),
            "--tag",
            reference,
            str(slurmd_recipe_dir()),
        ],
        timeout_s=1800,
    )
    log.info("built %s in %.0fs", reference, time.monotonic() - started)
    return reference


def slurmd_version(reference: str) -> str:
    """What ``slurmd -V`` prints inside the image, e.g. ``slurm-wlm 22.05.8``."""
    result = run(
        [
            "podman",
            "run",
            "--rm",
            "--network=none",
            "--entrypoint=/usr/sbin/slurmd",
            reference,
            "-V",
        ],
        timeout_s=120,
    )
    return result.stdout.strip()


def slurm_release(version_line: str) -> str:
    """``slurm-wlm 24.11.5`` -> ``24.11.5``."""
    found = re.search(r"\b(\d+\.\d+\.\d+)\b", version_line)
    if not found:
        raise ProvingGroundError(f"no Slurm version in {version_line!r}")
    return found.group(1)


def _save(reference: str, out: Path) -> None:
    out.unlink(missing_ok=True)
    run(
        ["podman", "save", "--format", "docker-archive", "--output", str(out), reference],
        timeout_s=900,
    )


def _slurmd_archive_builder(series: str) -> Callable[[Layout, ImageRecipe, Path], None]:
    def build(layout: Layout, recipe: ImageRecipe, out: Path) -> None:
        _build_slurmd_archive(layout, recipe, out, series)

    return build


def _build_slurmd_archive(layout: Layout, recipe: ImageRecipe, out: Path, series: str) -> None:
    reference = build_slurmd_image(layout, series)
    if reference != recipe.reference():
        raise ProvingGroundError(f"built {reference}, expected {recipe.reference()}")
    _save(reference, out)


def _build_pause_archive(layout: Layout, recipe: ImageRecipe, out: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="skb-pause-", dir=layout.images) as tmp:
        layer = Path(tmp) / "layer.tar"
        _layer_with_pause(layer)
        config: dict[str, object] = {"Entrypoint": ["/pause", "-P"], "User": "65535:65535"}
        _write_docker_archive(layer, [recipe.reference()], config, out)


def ensure_archives(layout: Layout, series: str = GROUND_SLURM) -> dict[str, Path]:
    """Build the image archives that are missing from the cache (slurmd of ``series``, pause);
    return reference → archive. One slurmd archive per series is kept, so switching the
    ground's series back and forth rebuilds nothing."""
    layout.images.mkdir(parents=True, exist_ok=True)
    result: dict[str, Path] = {}
    recipes: tuple[tuple[ImageRecipe, str, Callable[[Layout, ImageRecipe, Path], None]], ...] = (
        (slurmd_recipe(series), f"slurmd-{series}", _slurmd_archive_builder(series)),
        (pause_recipe(), "pause", _build_pause_archive),
    )
    for recipe, prefix, builder in recipes:
        archive = layout.images / f"{prefix}-{recipe.digest()}.tar"
        if not archive.exists():
            log.info("building image %s", recipe.reference())
            partial = archive.with_suffix(".partial")
            builder(layout, recipe, partial)
            partial.replace(archive)
            for stale in layout.images.glob(f"{prefix}-*.tar"):
                if stale != archive:
                    stale.unlink()
        result[recipe.reference()] = archive
    return result


def _containerd_images(ctr: list[str]) -> list[str]:
    """The references in containerd's k8s.io namespace."""
    return run([*ctr, "-n", "k8s.io", "images", "ls", "-q"]).stdout.split()


def _import_archives(ctr: list[str], archives: dict[str, Path], listed: Collection[str]) -> str:
    """Import into containerd's k8s.io namespace what ``listed`` (its images) lacks; returns the
    slurmd build's reference."""
    slurmd = ""
    for reference, archive in archives.items():
        if reference.startswith(f"{SLURMD_IMAGE}:"):
            slurmd = reference
        if reference in listed:
            continue
        log.info("importing %s into containerd", reference)
        result = run(
            [*ctr, "-n", "k8s.io", "images", "import", str(archive)], check=False, timeout_s=600
        )
        if result.returncode != 0:
            raise ProvingGroundError(f"ctr import {archive} failed: {result.stderr.strip()}")
    return slurmd


def _tag_series(ctr: list[str], slurmd: str, series: str) -> None:
    """The tags `make image` gives a series' build: ``<series>-<version>`` (what the in-cluster
    overlay names) and ``<series>`` (what the compose pool names)."""
    for tag in (slurmd_release_reference(series), slurmd_series_reference(series)):
        run([*ctr, "-n", "k8s.io", "images", "tag", "--force", slurmd, tag])


def import_series_image(
    layout: Layout, ctr: list[str], series: str, listed: Collection[str] | None = None
) -> str:
    """The slurmd build of ``series`` in containerd under its series tags, whatever series the
    ground runs (the compose setup's slurmctld is the bridge image's series, and a slurmd may
    not be newer than its slurmctld); returns ``slurmd:<series>``. ``listed``: containerd's
    images, when the caller has listed them already (None: listed here)."""
    archives = ensure_archives(layout, series)
    if listed is None:
        listed = _containerd_images(ctr)
    _tag_series(ctr, _import_archives(ctr, archives, listed), series)
    return slurmd_series_reference(series)


def stale_slurmd_builds(listed: Iterable[str]) -> list[str]:
    """The slurmd builds in ``listed`` that are no series' current recipe."""
    # The current build of every series stays: switching series then imports nothing.
    current = {slurmd_recipe(s).reference() for s in SLURM_SUITES}
    build = re.compile(re.escape(SLURMD_IMAGE) + r":[0-9a-f]{12}")
    return [ref for ref in listed if build.fullmatch(ref) and ref not in current]


def import_images(layout: Layout, ctr: list[str], series: str = GROUND_SLURM) -> None:
    """Import each archive into containerd's k8s.io namespace unless it is there already, point
    ``slurmd:dev`` (what the ground's bridge config names) and the series tags at the slurmd
    build of ``series``, and remove the slurmd builds no series uses any more."""
    # One listing serves the import and the clean-up. It is taken before the archives are built:
    # an image another process imports meanwhile is only imported once more.
    listed = _containerd_images(ctr)
    series_reference = import_series_image(layout, ctr, series, listed)
    run([*ctr, "-n", "k8s.io", "images", "tag", "--force", series_reference, SLURMD_IMAGE_DEV])
    stale = stale_slurmd_builds(listed)
    if stale:
        # Each build is ~150 MB; running containers keep their snapshots regardless.
        run([*ctr, "-n", "k8s.io", "images", "rm", *stale], check=False)


def bridge_version() -> str:
    """The package's version (pyproject.toml), part of its images' release tags."""
    with (repo_root() / "pyproject.toml").open("rb") as f:
        version: str = tomllib.load(f)["project"]["version"]
    return version


def slurmd_release_reference(series: str = GROUND_SLURM) -> str:
    """``slurmd:<series>-<bridge version>``, the tag ``make image`` gives a series' build."""
    return f"{SLURMD_IMAGE}:{series}-{bridge_version()}"


def slurmd_series_reference(series: str) -> str:
    """``slurmd:<series>``, the other tag ``make image`` gives a series' build."""
    return f"{SLURMD_IMAGE}:{series}"


def make_image(
    layout: Layout, series: str, registry: str = "", push: bool = False, base: str | None = None
) -> list[str]:
    """``make image``: build the series' image, tag it ``<repo>:<series>-<bridge version>`` and
    ``<repo>:<series>`` (repo: ``$REGISTRY/slurmd`` or ``localhost/slurm-k8s-bridge/slurmd``),
    push those with ``push``; returns the tags."""
    if push and not registry:
        raise ProvingGroundError("PUSH=1 needs REGISTRY=host[:port]/path to push to")
    started = time.monotonic()
    reference = build_slurmd_image(layout, series, base)
    version_line = slurmd_version(reference)
    if slurm_release(version_line).rsplit(".", 1)[0] != series:
        raise ProvingGroundError(f"{reference} runs {version_line!r}, not Slurm {series}")
    repository = f"{registry.rstrip('/')}/slurmd" if registry else SLURMD_IMAGE
    tags = [f"{repository}:{series}-{bridge_version()}", f"{repository}:{series}"]
    run(["podman", "tag", reference, *tags])
    for tag in tags if push else ():
        log.info("pushing %s", tag)
        run(["podman", "push", tag], timeout_s=1800)
    print(f"{reference}: {version_line} ({time.monotonic() - started:.0f}s)")
    for tag in tags:
        print(f"  {'pushed' if push else 'tagged'} {tag}")
    return tags


def main(argv: list[str] | None = None) -> int:
    """``python -m proving_ground.images --slurm 24.11 [--registry R] [--push] [--base B]``
    from dev (what ``make image`` runs)."""
    parser = argparse.ArgumentParser(
        prog="python -m proving_ground.images",
        description="Build the slurmd image of a Slurm series from "
        "deploy/images/slurmd/Containerfile with buildah (root).",
    )
    parser.add_argument(
        "--slurm", default=GROUND_SLURM, choices=sorted(SLURM_SUITES), help="Slurm series"
    )
    parser.add_argument(
        "--registry", default="", help="tag REGISTRY/slurmd:<series>-<version> (host/path)"
    )
    parser.add_argument("--push", action="store_true", help="podman push the tags")
    parser.add_argument(
        "--base",
        default=None,
        help="base image to pull, e.g. docker.io/library/debian:trixie-slim "
        "(default: a local debootstrap base, nothing pulled)",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log every step")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        make_image(Layout.default(), args.slurm, args.registry, args.push, args.base)
    except ProvingGroundError as e:
        print(f"make image: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
