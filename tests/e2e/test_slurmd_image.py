"""The slurmd image per Slurm series, built from deploy/images/slurmd/Containerfile with buildah
on a local debootstrap base (no registry): it carries the series it is named for, honours the
contract the bridge renders pods against, and is what the proving ground's kubelet runs.

Fast on a warm cache: `make up` has built the ground's series (22.05) already, so nothing is
rebuilt here. Other series are checked only when their image is cached (`make image SLURM=24.11`,
~45 s cold) or when SKB_BUILD_ALL_SERIES=1 asks this test to build them; otherwise they skip,
so `make test` never pays for a debootstrap of trixie or sid. A cached non-default series also
joins a throwaway slurmctld of its own series (configless, munge) in a podman pod and runs a step.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

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


_SLURM_CONF = """\
ClusterName=imagetest
SlurmctldHost=ctl(127.0.0.1)
SlurmUser=root
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldParameters=enable_configless
ReturnToService=2
NodeName=n1 NodeAddr=127.0.0.1 CPUs=1 State=UNKNOWN
PartitionName=p Nodes=n1 Default=YES State=UP
"""
_CTL_SCRIPT = """\
set -e
install -o munge -g munge -m 0400 /cfg/munge.key /etc/munge/munge.key
install -d -o munge -g munge /run/munge
mkdir -p /var/spool/slurmctld
runuser -u munge -- munged
exec slurmctld -D -f /cfg/slurm.conf
"""


def _slurmctld_image(series: str) -> str:
    """A throwaway slurmctld of ``series`` on the same local Debian base (cached)."""
    reference = f"localhost/slurm-k8s-bridge/test-slurmctld:{series}"
    if _podman("image", "exists", reference, check=False).returncode == 0:
        return reference
    base = images.base_reference(images.suite_for(series))
    container = subprocess.run(
        ["buildah", "from", "--pull=never", base], capture_output=True, text=True, check=True
    ).stdout.strip()
    install = (
        "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "
        f"--no-install-recommends slurmctld={series}.* slurm-client={series}.* munge >/dev/null"
    )
    subprocess.run(
        ["buildah", "run", "--network=host", container, "--", "sh", "-c", install],
        capture_output=True,
        timeout=600,
        check=True,
    )
    subprocess.run(
        ["buildah", "commit", "-q", "--rm", container, reference], capture_output=True, check=True
    )
    return reference


@pytest.mark.parametrize("series", OTHER_SERIES)
def test_other_series_image_registers_with_its_slurmctld(
    proving_ground: ProvingGround, series: str, tmp_path: Path
) -> None:
    """The image as the bridge runs it (entrypoint, env, munge key file, configless) joins a
    slurmctld of its series and runs a step: in a podman pod, over the pod's loopback."""
    del proving_ground
    reference = images.slurmd_recipe(series).reference()
    if _podman("image", "exists", reference, check=False).returncode != 0:
        pytest.skip(f"slurmd {series} not cached: `make image SLURM={series}` builds it")
    controller = _slurmctld_image(series)
    (tmp_path / "slurm.conf").write_text(_SLURM_CONF)
    (tmp_path / "ctl.sh").write_text(_CTL_SCRIPT)
    key = tmp_path / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    pod = f"skb-image-test-{series.replace('.', '')}-{os.getpid()}"
    conf = ["-e", "SLURM_CONF=/cfg/slurm.conf"]
    # podman's default network, not none: Slurm resolves with AI_ADDRCONFIG, which finds no
    # address with loopback alone. All traffic stays on the pod's loopback.
    _podman("pod", "create", "--name", pod, "--hostname", "ctl")
    try:
        ctl = f"{pod}-ctl"
        _podman("run", "-d", "--pod", pod, "--name", ctl, "-v", f"{tmp_path}:/cfg:ro", *conf,
                controller, "sh", "/cfg/ctl.sh")  # fmt: skip
        _podman(
            "run", "-d", "--pod", pod, "--name", f"{pod}-slurmd", "--privileged",
            "-v", f"{key}:{pod_rendering.MUNGE_MOUNT_DIR}/{pod_rendering.MUNGE_SECRET_KEY}:ro",
            "-e", f"{pod_rendering.ENV_NODENAME}=n1",
            "-e", f"{pod_rendering.ENV_CONF_SERVER}=127.0.0.1:6817",
            reference,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        state = ""
        while time.monotonic() < deadline:
            state = _podman("exec", *conf, ctl, "sinfo", "-h", "-N", "-o", "%T %v",
                            check=False).stdout.strip()  # fmt: skip
            if state.startswith("idle"):
                break
            time.sleep(1)
        logs = _podman("logs", f"{pod}-slurmd", check=False)
        assert state.startswith("idle"), (state, logs.stdout, logs.stderr)
        assert state.split()[1].startswith(f"{series}."), state
        step = _podman("exec", *conf, ctl, "srun", "-w", "n1", "-N1", "echo", "step-ran")
        assert step.stdout.strip() == "step-ran"
    finally:
        _podman("pod", "rm", "--force", pod, check=False)
