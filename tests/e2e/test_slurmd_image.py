"""The slurmd image per Slurm series, built from deploy/images/slurmd/Containerfile with buildah
on a local debootstrap base (no registry): it carries the series it is named for, honours the
contract the bridge renders pods against, and is what the proving ground's kubelet runs.

Fast on a warm cache: `make up` has built the ground's series (26.05 by default) already, so
nothing is rebuilt here. Other series are checked only when their image is cached (`make image
SLURM=24.11`, ~45 s cold) or when SKB_BUILD_ALL_SERIES=1 asks this test to build them; otherwise
they skip, so `make test` never pays for a base image of another suite. A cached non-default
series also joins a throwaway slurmctld of its own series (configless, munge) in a podman pod and
runs a step, and does the same with auth/slurm (no munge), configless and with a mounted
slurm.conf. Every cached series' image carries nss_slurm (unless its build could not get Slurm's
source, which the image records), and a user that only slurmctld's host knows resolves in a job.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from proving_ground import images, slurm_series

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
    series = proving_ground.series
    reference = images.build_slurmd_image(proving_ground.layout, series)
    assert reference == images.slurmd_recipe(series).reference()
    line = images.slurmd_version(reference)
    assert _series(line) == series, line
    # The same series as the ground's Slurm (its clients print slurmctld's package version),
    # whose slurmctld refuses slurmds of a newer protocol.
    ground = proving_ground.slurm("sinfo", "-V")
    assert _series(ground) == _series(line), (ground, line)


def test_proving_ground_runs_the_containerfile_build(proving_ground: ProvingGround) -> None:
    """containerd's ``slurmd:dev`` (what dev/bridge.yaml names) is the current recipe."""
    socket = str(proving_ground.layout.containerd_socket)
    listed = subprocess.run(
        ["ctr", "--address", socket, "-n", "k8s.io", "images", "ls"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.splitlines()
    targets = {line.split()[0]: line.split()[2] for line in listed[1:] if line.strip()}
    current = images.slurmd_recipe(proving_ground.series).reference()
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

#: What points the slurmctld container's clients at its config.
_CTL_ENV = ["-e", "SLURM_CONF=/cfg/slurm.conf"]


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


def _wait_for_idle(ctl: str, conf: list[str], timeout_s: float = 60) -> str:
    """The node's ``sinfo`` line ("idle 24.11.5") once it is idle, else the last one seen."""
    deadline = time.monotonic() + timeout_s
    state = ""
    while time.monotonic() < deadline:
        state = _podman("exec", *conf, ctl, "sinfo", "-h", "-N", "-o", "%T %v",
                        check=False).stdout.strip()  # fmt: skip
        if state.startswith("idle"):
            break
        time.sleep(1)
    return state


@contextlib.contextmanager
def _munge_pod(
    series: str, tmp_path: Path, name: str, slurm_conf: str = _SLURM_CONF,
    ctl_script: str = _CTL_SCRIPT,
) -> Iterator[str]:  # fmt: skip
    """A podman pod with a slurmctld of ``series`` (munge) and the series' slurmd image run as
    the bridge runs it (entrypoint, env, munge key file, configless), removed on exit; yields
    the pod's name once the node is idle. Skips when the image is not cached."""
    reference = images.slurmd_recipe(series).reference()
    if _podman("image", "exists", reference, check=False).returncode != 0:
        pytest.skip(f"slurmd {series} not cached: `make image SLURM={series}` builds it")
    controller = _slurmctld_image(series)
    (tmp_path / "slurm.conf").write_text(slurm_conf)
    (tmp_path / "ctl.sh").write_text(ctl_script)
    key = tmp_path / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    pod = f"skb-{name}-{series.replace('.', '')}-{os.getpid()}"
    # podman's default network, not none: Slurm resolves with AI_ADDRCONFIG, which finds no
    # address with loopback alone. All traffic stays on the pod's loopback.
    _podman("pod", "create", "--name", pod, "--hostname", "ctl")
    try:
        _podman("run", "-d", "--pod", pod, "--name", f"{pod}-ctl", "-v", f"{tmp_path}:/cfg:ro",
                *_CTL_ENV, controller, "sh", "/cfg/ctl.sh")  # fmt: skip
        _podman(
            "run", "-d", "--pod", pod, "--name", f"{pod}-slurmd", "--privileged",
            "-v", f"{key}:{pod_rendering.MUNGE_MOUNT_DIR}/{pod_rendering.MUNGE_SECRET_KEY}:ro",
            "-e", f"{pod_rendering.ENV_NODENAME}=n1",
            "-e", f"{pod_rendering.ENV_CONF_SERVER}=127.0.0.1:6817",
            reference,
        )  # fmt: skip
        state = _wait_for_idle(f"{pod}-ctl", _CTL_ENV)
        logs = _podman("logs", f"{pod}-slurmd", check=False)
        assert state.startswith("idle"), (state, logs.stdout, logs.stderr)
        assert state.split()[1].startswith(f"{series}."), state
        yield pod
    finally:
        _podman("pod", "rm", "--force", pod, check=False)


@pytest.mark.parametrize("series", OTHER_SERIES)
def test_other_series_image_registers_with_its_slurmctld(
    proving_ground: ProvingGround, series: str, tmp_path: Path
) -> None:
    """The image as the bridge runs it (entrypoint, env, munge key file, configless) joins a
    slurmctld of its series and runs a step: in a podman pod, over the pod's loopback."""
    del proving_ground
    with _munge_pod(series, tmp_path, "image-test") as pod:
        step = _podman("exec", *_CTL_ENV, f"{pod}-ctl", "srun", "-w", "n1", "-N1", "echo",
                       "step-ran")  # fmt: skip
        assert step.stdout.strip() == "step-ran"


#: What the image's nss stage (deploy/images/slurmd/build-nss-slurm.sh) records: `built ...`, or
#: `absent: <why>` when the build could not get Slurm's source.
NSS_STATUS = "/usr/local/share/slurm-k8s-bridge/nss-slurm.txt"
#: In the image: the module is found and links, passwd and group end with slurm after files,
#: and local lookups still work.
_NSS_CHECK = r"""
set -eu
module=$(find /usr/lib -name libnss_slurm.so.2)
test -n "$module"
echo "module: $module"
if ldd "$module" | grep 'not found'; then exit 1; fi
grep -E '^(passwd|group):' /etc/nsswitch.conf
test "$(grep -cE '^(passwd|group):[[:space:]]+files slurm$' /etc/nsswitch.conf)" = 2
getent passwd root
getent group root
"""


def _series_image(proving_ground: ProvingGround, series: str) -> str:
    """The series' current build: the ground's is built (warm after `make up`); another series'
    only when cached or when SKB_BUILD_ALL_SERIES=1, else the test skips."""
    reference = images.slurmd_recipe(series).reference()
    cached = _podman("image", "exists", reference, check=False).returncode == 0
    if (
        series != proving_ground.series
        and not cached
        and not os.environ.get("SKB_BUILD_ALL_SERIES")
    ):
        pytest.skip(f"slurmd {series} not cached: `make image SLURM={series}` builds it")
    return images.build_slurmd_image(proving_ground.layout, series)


def _nss_slurm_status(reference: str) -> str:
    """The image's nss line; skips the test when the build recorded the module as absent."""
    status = _podman("run", "--rm", "--network=none", "--entrypoint=/bin/cat", reference,
                     NSS_STATUS).stdout.strip()  # fmt: skip
    if status.startswith("absent:"):
        # NSS_SLURM=auto: e.g. a mirror that serves the series' binaries but not its source.
        pytest.skip(f"{reference} has no nss_slurm ({status}); see deploy/images/slurmd/README.md")
    assert status.startswith("built "), status
    return status


@pytest.mark.parametrize("series", sorted(images.SLURM_SUITES))
def test_image_carries_nss_slurm(proving_ground: ProvingGround, series: str) -> None:
    """libnss_slurm.so.2 of the image's Slurm version is installed, finds every library it
    links, and nsswitch.conf asks slurm after files for passwd and group."""
    reference = _series_image(proving_ground, series)
    status = _nss_slurm_status(reference)
    release = images.slurm_release(images.slurmd_version(reference))
    assert f"slurm-wlm {release}-" in status, (status, release)
    check = _podman("run", "--rm", "--network=none", "--entrypoint=/bin/sh", reference, "-c",
                    _NSS_CHECK, check=False)  # fmt: skip
    assert check.returncode == 0, (check.stdout, check.stderr)
    assert "root:x:0:0:" in check.stdout


#: A user and a group that exist only where the job is submitted (the slurmctld container).
_SUBMIT_HOST_USER = """groupadd -g 5001 projecta
useradd -u 5000 -U -G projecta -c "Submit Host Only" -d /home/alice -s /bin/sh alice
"""


@pytest.mark.parametrize("series", sorted(images.SLURM_SUITES))
def test_nss_slurm_resolves_the_job_user_only_the_submit_host_knows(
    proving_ground: ProvingGround, series: str, tmp_path: Path
) -> None:
    """With LaunchParameters=enable_nss_slurm, a job of a user missing from the pod's
    /etc/passwd resolves its user and groups (id -un, whoami, getent) inside the job step;
    outside any step the pod still does not know the user."""
    reference = _series_image(proving_ground, series)
    _nss_slurm_status(reference)
    tmp_path.chmod(0o755)  # mounted at /cfg: srun reads slurm.conf as the job's user
    slurm_conf = _SLURM_CONF.replace(
        "ReturnToService=2\n", "LaunchParameters=enable_nss_slurm\nReturnToService=2\n"
    )
    ctl_script = _CTL_SCRIPT.replace(
        "runuser -u munge -- munged\n", f"{_SUBMIT_HOST_USER}runuser -u munge -- munged\n"
    )
    with _munge_pod(series, tmp_path, "nss-test", slurm_conf, ctl_script) as pod:
        step = _podman(
            "exec", *_CTL_ENV, f"{pod}-ctl", "runuser", "-u", "alice", "--",
            "srun", "-w", "n1", "-N1", "sh", "-c",
            'id -un; whoami; getent passwd "$(id -u)" | cut -d: -f1,3,6; id -Gn',
            check=False,
        )  # fmt: skip
        assert step.returncode == 0, (step.stdout, step.stderr)
        user, whoami, passwd, groups = step.stdout.split("\n")[:4]
        assert (user, whoami, passwd) == ("alice", "alice", "alice:5000:/home/alice")
        assert set(groups.split()) == {"alice", "projecta"}, groups
        outside = _podman("exec", f"{pod}-slurmd", "getent", "passwd", "alice", check=False)
        assert outside.returncode == 2, outside.stdout


# auth/slurm (a shared slurm.key, no munge) came with Slurm 23.11: 22.05's packages have no
# auth_slurm.so. CredType=cred/slurm too, else job credentials still need munge.
AUTH_SLURM_SERIES = sorted(set(images.SLURM_SUITES) - slurm_series.WITHOUT_AUTH_SLURM)
_AUTH_SLURM_CONF = _SLURM_CONF.replace(
    "AuthType=auth/munge\n", "AuthType=auth/slurm\nCredType=cred/slurm\n"
)
# slurmctld reads slurm.key beside slurm.conf (/cfg); no munged anywhere in the pod.
_AUTH_SLURM_CTL_SCRIPT = """\
set -e
mkdir -p /var/spool/slurmctld
exec slurmctld -D -f /cfg/slurm.conf
"""
#: Where the pool's template mounts the Secret (the entrypoint's SLURM_KEY_FILE default).
_SLURM_KEY_MOUNT = "/etc/slurm-secret/slurm.key"
#: What a configless slurmd logs when it finds no slurm.key before it has a config: it falls
#: back to munge (Slurm 24.11.5 and 26.05.5).
CONFIGLESS_WITHOUT_KEY_ERROR = 'Munge encode failed: Failed to access "/run/munge/munge.socket.2"'


@contextlib.contextmanager
def _auth_slurm_pod(series: str, tmp_path: Path, name: str) -> Iterator[tuple[str, str, list[str]]]:
    """A podman pod running a slurmctld of ``series`` with auth/slurm, removed on exit: yields
    (pod, slurmctld container, the env that points its clients at the config). Skips when
    ``series``' slurmd image is not cached."""
    reference = images.slurmd_recipe(series).reference()
    if _podman("image", "exists", reference, check=False).returncode != 0:
        pytest.skip(f"slurmd {series} not cached: `make image SLURM={series}` builds it")
    controller = _slurmctld_image(series)
    (tmp_path / "slurm.conf").write_text(_AUTH_SLURM_CONF)
    (tmp_path / "ctl.sh").write_text(_AUTH_SLURM_CTL_SCRIPT)
    key = tmp_path / "slurm.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    pod = f"skb-auth-test-{series.replace('.', '')}-{name}-{os.getpid()}"
    conf = ["-e", "SLURM_CONF=/cfg/slurm.conf"]
    _podman("pod", "create", "--name", pod, "--hostname", "ctl")
    try:
        ctl = f"{pod}-ctl"
        _podman("run", "-d", "--pod", pod, "--name", ctl, "-v", f"{tmp_path}:/cfg:ro", *conf,
                controller, "sh", "/cfg/ctl.sh")  # fmt: skip
        yield pod, ctl, conf
    finally:
        _podman("pod", "rm", "--force", pod, check=False)


@pytest.mark.parametrize("mode", ["configless", "mounted-conf"])
@pytest.mark.parametrize("series", AUTH_SLURM_SERIES)
def test_auth_slurm_image_registers_with_its_slurmctld(
    proving_ground: ProvingGround, series: str, mode: str, tmp_path: Path
) -> None:
    """auth/slurm as a pool opts in: slurm.key from a Secret-like file, no munged; slurm.conf
    fetched from slurmctld (configless) or mounted (SLURM_CONF_FILE). Both register and run a
    step on 24.11 and 26.05, because the entrypoint names the key with SLURM_SACK_KEY."""
    del proving_ground
    source = (
        ["-e", f"{pod_rendering.ENV_CONF_SERVER}=127.0.0.1:6817"]
        if mode == "configless"
        else ["-v", f"{tmp_path}/slurm.conf:/etc/slurm-conf/slurm.conf:ro",
              "-e", "SLURM_CONF_FILE=/etc/slurm-conf/slurm.conf"]
    )  # fmt: skip
    with _auth_slurm_pod(series, tmp_path, mode) as (pod, ctl, conf):
        slurmd = f"{pod}-slurmd"
        _podman(
            "run", "-d", "--pod", pod, "--name", slurmd, "--privileged",
            "-v", f"{tmp_path}/slurm.key:{_SLURM_KEY_MOUNT}:ro",
            "-e", f"{pod_rendering.ENV_NODENAME}=n1", *source,
            images.slurmd_recipe(series).reference(),
        )  # fmt: skip
        state = _wait_for_idle(ctl, conf)
        logs = _podman("logs", slurmd, check=False)
        assert state.startswith("idle"), (state, logs.stdout, logs.stderr)
        assert state.split()[1].startswith(f"{series}."), state
        assert "auth/slurm" in logs.stderr, logs.stderr
        step = _podman("exec", *conf, ctl, "srun", "-w", "n1", "-N1", "echo", "step-ran")
        assert step.stdout.strip() == "step-ran"
        munged = _podman("exec", slurmd, "pgrep", "-x", "munged", check=False)
        assert munged.returncode == 1, f"munged runs in auth/slurm mode: {munged.stdout}"


@pytest.mark.parametrize("series", AUTH_SLURM_SERIES)
def test_configless_slurmd_without_the_key_falls_back_to_munge(
    proving_ground: ProvingGround, series: str, tmp_path: Path
) -> None:
    """Why the entrypoint sets SLURM_SACK_KEY: a configless slurmd picks its auth plugin before
    it has slurm.conf, and without slurm.key in /etc/slurm (or SLURM_SACK_KEY) it tries munge
    and never fetches the config. If a Slurm release fixes this, this test fails: update the
    image README's auth table."""
    del proving_ground
    with _auth_slurm_pod(series, tmp_path, "nokey") as (pod, ctl, conf):
        slurmd = f"{pod}-slurmd"
        # slurmd itself, not the entrypoint: the key stays where the Secret is mounted.
        _podman(
            "run", "-d", "--pod", pod, "--name", slurmd, "--privileged",
            "-v", f"{tmp_path}/slurm.key:{_SLURM_KEY_MOUNT}:ro",
            "--entrypoint", "/usr/sbin/slurmd", images.slurmd_recipe(series).reference(),
            "-D", "-b", "-N", "n1", "--conf-server", "127.0.0.1:6817",
        )  # fmt: skip
        deadline = time.monotonic() + 30
        logs = ""
        while time.monotonic() < deadline and CONFIGLESS_WITHOUT_KEY_ERROR not in logs:
            time.sleep(1)
            result = _podman("logs", slurmd, check=False)
            logs = result.stdout + result.stderr
        state = _podman("exec", *conf, ctl, "sinfo", "-h", "-N", "-o", "%T",
                        check=False).stdout.strip()  # fmt: skip
        assert not state.startswith("idle"), (
            f"Slurm {series}: a configless slurmd without SLURM_SACK_KEY registered with "
            f"auth/slurm; update deploy/images/slurmd/README.md ({state!r})"
        )
        assert CONFIGLESS_WITHOUT_KEY_ERROR in logs, logs
