"""The proving ground runs the layout the site guide documents (issue 28 item 1): slurmctld as a
non-root SlurmUser with slurmdbd accounting, the bridge installed from the wheel and started from
the shipped unit as its own user with AdminLevel=Admin, the site's slurm.conf with a static node
a real slurmd serves and the bridge's fragment by Include, jobs confined by cgroups, and a job of
a user known only to this host runs on a slurmd pod as that user and is accounted to that user."""

from __future__ import annotations

import os
import pwd
import subprocess
from pathlib import Path

import pytest
from proving_ground import bridge_install
from proving_ground.accounting import ACCOUNT
from proving_ground.bridge_daemon import SHARED_DIR
from proving_ground.layout import BRIDGE_USER, JOB_USER, SLURM_USER
from proving_ground.slurm import STATIC_NODE, fragment_path

from tests.cluster import bridge_pid, job_finished, submit_as_job_user, wait_for
from tests.conftest import ProvingGround, Use

pytestmark = [pytest.mark.e2e]

NODE = "cpu-12"


def _config(pg: ProvingGround) -> dict[str, str]:
    lines = pg.slurm("scontrol", "show", "config").splitlines()
    return {k.strip(): v.strip() for k, _, v in (line.partition("=") for line in lines) if v}


def test_slurmctld_runs_as_a_non_root_slurm_user_with_slurmdbd_accounting(
    proving_ground: ProvingGround,
) -> None:
    config = _config(proving_ground)
    slurm_uid = pwd.getpwnam(SLURM_USER).pw_uid
    assert config["SlurmUser"] == f"{SLURM_USER}({slurm_uid})", config["SlurmUser"]
    assert slurm_uid != 0
    assert config["AccountingStorageType"] == "accounting_storage/slurmdbd"
    clusters = proving_ground.slurm("sacctmgr", "-n", "-P", "show", "cluster", "format=cluster")
    assert config["ClusterName"] in clusters.split(), clusters


def test_the_site_slurm_conf_includes_the_rendered_fragment_and_serves_a_static_node(
    proving_ground: ProvingGround,
) -> None:
    pg = proving_ground
    site = pg.layout.slurm_conf.read_text().splitlines()
    assert site[-1] == f"Include {fragment_path(pg.layout).name}", site[-3:]
    fragment = fragment_path(pg.layout).read_text()
    assert "render-slurm-conf" in fragment.splitlines()[0] or "slurm-k8s-bridge" in fragment
    assert "NodeName=cpu-[0-15]" in fragment, fragment
    node = pg.slurm("scontrol", "show", "node", STATIC_NODE)
    assert "State=IDLE" in node and "CLOUD" not in node, node
    config = _config(pg)
    assert config["ProctrackType"] == "proctrack/cgroup"
    assert config["TaskPlugin"].startswith("task/cgroup"), config["TaskPlugin"]


def test_a_job_user_s_job_runs_on_the_static_node_too(proving_ground: ProvingGround) -> None:
    pg = proving_ground
    out = SHARED_DIR / f"site-static-{os.getpid()}.out"
    out.unlink(missing_ok=True)
    job = submit_as_job_user(
        pg, "-p", "static", "-N1", f"--output={out}", "--chdir=/tmp", "--wrap", "id -u; hostname"
    )
    assert wait_for(f"job {job} to finish", lambda: job_finished(pg, job), 120, every=1) == (
        "COMPLETED"
    )
    assert out.read_text().split()[0] == str(pwd.getpwnam(JOB_USER).pw_uid), out.read_text()


def test_the_bridge_runs_as_its_own_user_from_the_wheel_with_admin_rights(
    proving_ground: ProvingGround,
) -> None:
    pg = proving_ground
    pid = bridge_pid(pg)
    assert pid is not None, "the bridge is not running"
    status = Path(f"/proc/{pid}/status").read_text()
    uids = next(line.split()[1:] for line in status.splitlines() if line.startswith("Uid:"))
    assert set(uids) == {str(pwd.getpwnam(BRIDGE_USER).pw_uid)}, status
    assert "NoNewPrivs:\t1" in status
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    venv = bridge_install.venv_dir(pg.layout)
    assert argv[1].decode() == str(venv / "bin" / "slurm-k8s-bridge"), argv
    # Installed, not the checkout: the package it imports lives in the venv's site-packages.
    where = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import bridge; print(bridge.__file__)"],
        capture_output=True, text=True, check=True, cwd="/",
    ).stdout.strip()  # fmt: skip
    assert where.startswith(str(venv / "lib")) and "site-packages" in where, where
    users = pg.slurm("sacctmgr", "-n", "-P", "show", "user", BRIDGE_USER, "format=user,adminlevel")
    assert users.strip() == f"{BRIDGE_USER}|Administrator", users


def test_a_job_of_a_user_only_this_host_knows_runs_as_that_user_and_is_accounted(
    proving_ground: ProvingGround, use: Use
) -> None:
    use(NODE)
    lines = job_user_cycle(proving_ground, NODE)
    nss = lines[2]
    if nss.startswith("built"):
        # nss_slurm in the image: the name resolves inside the pod.
        assert lines[1] == f"name={JOB_USER}", lines
    else:
        # Debian did not serve this series' source (deploy/images/slurmd/README.md): the image
        # says why it has no nss_slurm, and the job still ran as the right uid (job_user_cycle).
        assert nss.startswith("absent:") and len(nss) > len("absent: "), lines


#: sacct states of a job whose end slurmdbd has not recorded yet.
_NOT_ENDED = frozenset({"PENDING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED"})


def job_user_cycle(pg: ProvingGround, node: str) -> list[str]:
    """A job of the host-only user on ``node``'s pod: it runs as that uid, writes its output
    there as that user, is confined to its --mem by its own cgroup, and sacct lists it under
    that user. Returns the job's lines (uid, name, the image's nss_slurm status, cgroup, limit)."""
    alice = pwd.getpwnam(JOB_USER)
    out = SHARED_DIR / f"site-layout-{os.getpid()}.out"
    out.unlink(missing_ok=True)
    script = (
        'echo "uid=$(id -u) job_user=$SLURM_JOB_USER host=$(hostname)"; '
        'echo "name=$(id -un 2>/dev/null)"; '
        "cat /usr/local/share/slurm-k8s-bridge/nss-slurm.txt 2>/dev/null || echo nss: unknown; "
        # Confined as sites confine: the job's own memory cgroup, limited to its --mem.
        "cg=$(sed -n 's/^[0-9]*:memory://p' /proc/self/cgroup); echo \"cgroup=$cg\"; "
        'echo "limit=$(cat "/sys/fs/cgroup/memory${cg%%/step_*}/memory.limit_in_bytes")"'
    )
    job = submit_as_job_user(
        pg, "-p", "cpu", "-N1", "-w", node, "--mem=100M", f"--output={out}", "--chdir=/tmp",
        "--wrap", script,
    )  # fmt: skip
    assert wait_for(f"job {job} to finish", lambda: job_finished(pg, job), 240, every=1) == (
        "COMPLETED"
    )
    assert out.stat().st_uid == alice.pw_uid  # written in the pod as that user
    lines = out.read_text().splitlines()
    assert lines[0] == f"uid={alice.pw_uid} job_user={JOB_USER} host={node}", lines
    cgroup = lines[3].removeprefix("cgroup=")
    # slurmd's own cgroup namespace (the entrypoint's unshare): the path starts at its slurm_<node>.
    assert cgroup.startswith(f"/slurm_{node}/uid_{alice.pw_uid}/job_{job}/step_batch"), lines
    assert lines[4] == f"limit={100 * 1024 * 1024}", lines

    def accounted_as_ended() -> str | None:
        # slurmctld sends slurmdbd the start and the end as separate records: seen in CI, sacct
        # still said RUNNING a moment after squeue's COMPLETED.
        row = pg.slurm("sacct", "-X", "-n", "-P", "-j", str(job), "-o", "user,account,state")
        row = row.strip()
        return row if row and row.rsplit("|", 1)[-1] not in _NOT_ENDED else None

    accounted = wait_for(f"sacct to list job {job} ended", accounted_as_ended, 60, every=1)
    assert accounted == f"{JOB_USER}|{ACCOUNT}|COMPLETED", accounted
    return lines
