"""bridge.domain.slurm_version: ``scontrol --version`` of each series, and what is refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from bridge.domain.slurm_version import SlurmVersion, SlurmVersionError, parse_slurm_version
from bridge.errors import BackendError

DATA = Path(__file__).resolve().parents[1] / "data" / "slurm"


@pytest.mark.parametrize(
    ("series", "expected"),
    [
        ("22.05", SlurmVersion(22, 5, 8)),
        ("24.11", SlurmVersion(24, 11, 5)),
        ("26.05", SlurmVersion(26, 5, 5)),
    ],
)
def test_recorded_versions(series: str, expected: SlurmVersion) -> None:
    version = parse_slurm_version((DATA / f"v{series}" / "scontrol-version.txt").read_text())
    assert version == expected
    assert version.series == series
    assert version.scontrol_lists_nodes_as_json is (series != "22.05")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("slurm 24.11.5\n", SlurmVersion(24, 11, 5)),  # SchedMD's own build
        ("slurm-wlm 26.05.5", SlurmVersion(26, 5, 5)),  # Debian's
        ("slurm 25.11.0-0rc1", SlurmVersion(25, 11, 0)),
        ("slurm 23.02.0", SlurmVersion(23, 2, 0)),
    ],
)
def test_version_strings(text: str, expected: SlurmVersion) -> None:
    assert parse_slurm_version(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "",
        "24.11.5",
        "slurm 24.11",
        "slurm 24.x.5",
        "torque 24.11.5",
        "slurm 24.11.5 extra words",
        "scontrol: fatal: Could not establish a configuration source",
    ],
)
def test_not_a_version_is_named(text: str) -> None:
    with pytest.raises(SlurmVersionError, match=r"^scontrol --version: expected 'slurm") as e:
        parse_slurm_version(text)
    assert isinstance(e.value, BackendError)


def test_long_output_is_shortened_in_the_error() -> None:
    with pytest.raises(SlurmVersionError) as e:
        parse_slurm_version("x" * 500)
    assert len(str(e.value)) < 200


@pytest.mark.parametrize(
    ("version", "shown", "series", "json"),
    [
        (SlurmVersion(22, 5, 8), "22.05.8", "22.05", False),
        (SlurmVersion(23, 2, 0), "23.02.0", "23.02", True),
        (SlurmVersion(24, 11, 5), "24.11.5", "24.11", True),
        (SlurmVersion(26, 5, 5), "26.05.5", "26.05", True),
    ],
)
def test_properties(version: SlurmVersion, shown: str, series: str, json: bool) -> None:
    assert str(version) == shown
    assert version.series == series
    assert version.scontrol_lists_nodes_as_json is json


def test_versions_order_by_release() -> None:
    assert SlurmVersion(22, 5, 8) < SlurmVersion(23, 2, 0) < SlurmVersion(24, 11, 5)
    assert SlurmVersion(24, 11, 5) < SlurmVersion(26, 5, 0)
