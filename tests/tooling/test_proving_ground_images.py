"""The proving ground's image import into containerd: one ``ctr images ls`` per call serves the
import and the stale clean-up, the same images are imported, tagged and removed. ``ctr`` is a
shell script that records its arguments and prints a listing; the archives are cached files, so
nothing is built."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import ROOT

from proving_ground import images  # isort: skip (conftest sets the path)
from proving_ground.layout import Layout  # isort: skip

if not Path("/usr/bin/catatonit").exists():
    pytest.skip(
        "the pause recipe's digest reads /usr/bin/catatonit (make deps installs it)",
        allow_module_level=True,
    )

SERIES = "26.05"
LIST = "-n k8s.io images ls -q"
#: The current builds (their digests read the recipe files).
BUILD = {series: images.slurmd_recipe(series).reference() for series in images.SLURM_SUITES}
PAUSE = images.pause_recipe().reference()
#: Builds no series' recipe makes any more.
STALE_BUILD = f"{images.SLURMD_IMAGE}:0123456789ab"
OTHER_STALE_BUILD = f"{images.SLURMD_IMAGE}:ba9876543210"
SERIES_TAGS = [
    f"-n k8s.io images tag --force {BUILD[SERIES]} {images.slurmd_release_reference(SERIES)}",
    f"-n k8s.io images tag --force {BUILD[SERIES]} {images.slurmd_series_reference(SERIES)}",
]
DEV_TAG = (
    f"-n k8s.io images tag --force {images.slurmd_series_reference(SERIES)} "
    f"{images.SLURMD_IMAGE_DEV}"
)


@dataclass(frozen=True)
class FakeCtr:
    """``ctr`` as an argv prefix: a script that appends its arguments to a file, one call a
    line, and prints ``listing`` for ``images ls -q``."""

    script: Path

    @classmethod
    def make(cls, directory: Path, listing: list[str]) -> FakeCtr:
        script = directory / "ctr"
        (directory / "listing").write_text("".join(f"{ref}\n" for ref in listing))
        script.write_text(
            "#!/bin/sh\n"
            f'printf "%s\\n" "$*" >> "{directory / "calls"}"\n'
            f'if [ "$*" = "{LIST}" ]; then cat "{directory / "listing"}"; fi\n'
        )
        script.chmod(0o755)
        return cls(script)

    @property
    def argv(self) -> list[str]:
        return [str(self.script)]

    def calls(self) -> list[str]:
        recorded = self.script.parent / "calls"
        return recorded.read_text().splitlines() if recorded.exists() else []


def _layout(tmp_path: Path, series: str = SERIES) -> Layout:
    """A cache whose archives are there already (empty files: ctr is fake)."""
    layout = Layout(root=ROOT, cache=tmp_path / "cache")
    layout.images.mkdir(parents=True)
    for reference in (BUILD[series], PAUSE):
        _archive(layout, reference, series).touch()
    return layout


def _archive(layout: Layout, reference: str, series: str = SERIES) -> Path:
    """Where ensure_archives keeps ``reference``'s archive."""
    prefix = f"slurmd-{series}" if reference.startswith(f"{images.SLURMD_IMAGE}:") else "pause"
    return layout.images / f"{prefix}-{reference.rsplit(':', 1)[1]}.tar"


@pytest.mark.parametrize(
    ("listing", "imported", "removed"),
    [
        pytest.param([], [BUILD[SERIES], PAUSE], [], id="an empty containerd gets both"),
        pytest.param([PAUSE], [BUILD[SERIES]], [], id="what is there is not imported again"),
        pytest.param(
            # Tags, other images and every series' current build stay; old builds go.
            [
                *BUILD.values(),
                PAUSE,
                STALE_BUILD,
                images.SLURMD_IMAGE_DEV,
                images.slurmd_series_reference("24.11"),
                f"{images.PAUSE_IMAGE}:0123456789ab",
                "registry.k8s.io/pause:3.10",
                OTHER_STALE_BUILD,
            ],
            [],
            [STALE_BUILD, OTHER_STALE_BUILD],
            id="old slurmd builds are removed",
        ),
    ],
)
def test_import_images_lists_containerd_once(
    listing: list[str], imported: list[str], removed: list[str], tmp_path: Path
) -> None:
    layout = _layout(tmp_path)
    ctr = FakeCtr.make(tmp_path, listing)
    images.import_images(layout, ctr.argv, SERIES)
    assert ctr.calls() == [
        LIST,
        *(f"-n k8s.io images import {_archive(layout, ref)}" for ref in imported),
        *SERIES_TAGS,
        DEV_TAG,
        *([f"-n k8s.io images rm {' '.join(removed)}"] if removed else []),
    ]


@pytest.mark.parametrize(
    ("given", "lists"),
    [(None, [LIST]), ([BUILD[SERIES], PAUSE], [])],
    ids=["lists when not given", "uses the caller's listing"],
)
def test_import_series_image_lists_only_without_a_listing(
    given: list[str] | None, lists: list[str], tmp_path: Path
) -> None:
    layout = _layout(tmp_path)
    ctr = FakeCtr.make(tmp_path, [BUILD[SERIES], PAUSE])
    reference = images.import_series_image(layout, ctr.argv, SERIES, given)
    assert reference == images.slurmd_series_reference(SERIES)
    assert ctr.calls() == [*lists, *SERIES_TAGS]


@pytest.mark.parametrize(
    ("listed", "stale"),
    [
        ([], []),
        ([STALE_BUILD], [STALE_BUILD]),
        ([f"{images.SLURMD_IMAGE}:{SERIES}", images.SLURMD_IMAGE_DEV], []),
        # Not 12 hex digits: a tag, not a build.
        ([f"{images.SLURMD_IMAGE}:0123456789abc", f"{images.SLURMD_IMAGE}:0123456789aX"], []),
        ([f"docker.io/other/slurmd:{STALE_BUILD.rsplit(':', 1)[1]}"], []),
    ],
)
def test_stale_slurmd_builds(listed: list[str], stale: list[str]) -> None:
    assert images.stale_slurmd_builds(listed) == stale


def test_stale_slurmd_builds_keeps_every_series_current_build() -> None:
    assert images.stale_slurmd_builds([*BUILD.values(), STALE_BUILD]) == [STALE_BUILD]


def test_slurmd_recipe_digest_covers_every_file_the_containerfile_copies() -> None:
    """A file the Containerfile copies from the build context but the recipe does not hash
    would change the image without changing its cached build's name."""
    containerfile = images.slurmd_recipe_dir() / "Containerfile"
    copied: set[str] = set()
    for line in containerfile.read_text().splitlines():
        words = line.split()
        if not words or words[0] != "COPY" or any(w.startswith("--from=") for w in words):
            continue
        copied.update(w for w in words[1:-1] if not w.startswith("--"))
    hashed = {path.name for path in images.slurmd_recipe(SERIES).files}
    assert copied, "no COPY from the build context found"
    assert copied | {"Containerfile"} <= hashed, copied - hashed
