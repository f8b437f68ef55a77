"""The slurmd image per Slurm series, built from deploy/images/slurmd/Containerfile with buildah
on a local debootstrap base (no registry): it carries the series it is named for, honours the
contract the bridge renders pods against, and is what the proving ground's kubelet runs.

Fast on a warm cache: `make up` has built the ground's series (22.05) already, so nothing is
rebuilt here. Other series are checked only when their image is cached (`make image SLURM=24.11`,
~45 s cold) or when SKB_BUILD_ALL_SERIES=1 asks this test to build them; otherwise they skip,
so `make test` never pays for a debootstrap of trixie or sid.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from proving_ground import images

from bridge.domain import pod_rendering
from tests.conftest import ProvingGround

pytestmark = pytest.mark.e2e

OTHER_SERIES = sorted(set(images.SLURM_SUITES) - {images.GROUND_SLURM})


def _podman(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        ["podman", *argv], capture_output=True, text=True, timeout=300, check=False
    )
    if check and result.returncode != 0:
        raise AssertionError(f"podman {argv} failed: {result.stderr}")
    return result


def _series(version_line: str) -> str:
    return images.slurm_release(version_line).rsplit(".", 1)[0]


def test_ground_series_image_reports_the_ground_slurm(proving_ground: ProvingGround) -> None:
    reference = images.build_slurmd_image(proving_ground.layout, images.GROUND_SLURM)
    assert reference == images.slurmd_recipe(images.GROUND_SLURM).reference()
    line = images.slurmd_version(reference)
    assert _series(line) == "22.05", line
    # The same series as the ground's slurmctld, which refuses slurmds of a newer protocol.
    host = proving_ground.slurm("slurmctld", "-V")
    assert _series(host) == _series(line), (host, line)


def test_proving_ground_runs_the_containerfile_build(proving_ground: ProvingGround) -> None:
    """containerd's ``slurmd:dev`` (what deploy/local/bridge.yaml names) is the current recipe."""
    socket = str(proving_ground.layout.containerd_socket)
    listed = subprocess.run(
        ["ctr", "--address", socket, "-n", "k8s.io", "images", "ls"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.splitlines()
    targets = {line.split()[0]: line.split()[2] for line in listed[1:] if line.strip()}
    current = images.slurmd_recipe(images.GROUND_SLURM).reference()
    assert current in targets, f"{current} not imported; run `make up`"
    assert targets.get(images.SLURMD_IMAGE_DEV) == targets[current]


def test_image_honours_the_bridge_contract(proving_ground: ProvingGround) -> None:
    reference = images.build_slurmd_image(proving_ground.layout, images.GROUND_SLURM)
    config = json.loads(_podman("image", "inspect", reference).stdout)[0]["Config"]
    assert config["Entrypoint"] == [pod_rendering.ENTRYPOINT]
    assert config["Labels"]["io.slurm-k8s-bridge.slurm-series"] == images.GROUND_SLURM
    # Everything the entrypoint calls is in the image, and the spool directory exists.
    _podman(
        "run",
        "--rm",
        "--network=none",
        "--entrypoint=/bin/sh",
        reference,
        "-c",
        "command -v slurmd munged runuser install srun >/dev/null && test -d /var/spool/slurmd",
    )
    # Without the bridge's environment the entrypoint refuses to start, naming what is missing.
    refused = _podman("run", "--rm", "--network=none", reference, check=False)
    assert refused.returncode != 0
    assert pod_rendering.ENV_NODENAME in refused.stderr
    refused = _podman(
        "run",
        "--rm",
        "--network=none",
        "-e",
        f"{pod_rendering.ENV_NODENAME}=x",
        reference,
        check=False,
    )
    assert refused.returncode != 0
    assert pod_rendering.ENV_CONF_SERVER in refused.stderr


@pytest.mark.parametrize("series", OTHER_SERIES)
def test_other_series_image_reports_its_series(proving_ground: ProvingGround, series: str) -> None:
    reference = images.slurmd_recipe(series).reference()
    cached = _podman("image", "exists", reference, check=False).returncode == 0
    if not cached and not os.environ.get("SKB_BUILD_ALL_SERIES"):
        pytest.skip(
            f"slurmd {series} not cached: `make image SLURM={series}` builds it (~45 s cold), "
            "or SKB_BUILD_ALL_SERIES=1 builds it here"
        )
    assert images.build_slurmd_image(proving_ground.layout, series) == reference
    line = images.slurmd_version(reference)
    assert _series(line) == series, line
