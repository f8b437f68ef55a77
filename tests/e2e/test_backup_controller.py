"""A primary and a backup slurmctld, a bridge beside each (issue 32 item 3): the ground with
``HA=1`` (dev/proving_ground/backup_host.py). The backup host is a network, UTS and mount
namespace on the pod bridge with its own host name, address, /etc/hosts, bridge socket and
slurmctld pid file; StateSaveLocation and the checkout are shared, as a site shares them.

The primary host's slurmctld and bridge are SIGKILLed while a 2-node job's pods are being
created and its nodes power up. The backup slurmctld takes over after SlurmctldTimeout, the
backup host's bridge after the Lease expires (it adopts the pods the dead leader made); the pods'
slurmd register with the backup, the job completes, and at SuspendTime the backup slurmctld's
SuspendProgram reaches its own bridge, which deletes the pods. Then fail back: the primary's
slurmctld and bridge start again, slurmctld takes control back, and a job resumed by the
primary's hook runs: its bridge, now the follower, forwards the call to the leader.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from tests.cluster import (
    job_finished,
    job_restarts,
    pods,
    submit_as_job_user,
    wait_for,
)
from tests.conftest import ProvingGround, Use

from bridge.domain.hostlist import expand  # isort: skip

from proving_ground import backup_host, bridge_daemon, ground, slurm  # isort: skip
from proving_ground.layout import BACKUP_HOST, BACKUP_SLURMCTLD_TIMEOUT_S, Layout  # isort: skip
from proving_ground.processes import State, stop_daemon  # isort: skip

pytestmark = pytest.mark.e2e

NODES = ["cpu-4", "cpu-5"]
#: The fail-back job's node.
AFTER = "cpu-9"
LEASE = "slurm-k8s-bridge-provingground"
#: The backup slurmctld's log line when it takes control, and the bridge's when it leads.
SLURMCTLD_TOOK = re.compile(r"^\[(\S+)\] Running as primary controller$", re.M)
BRIDGE_TOOK = re.compile(rf"^(\S+ \S+) INFO \S+ lease {LEASE}: taken by {BACKUP_HOST} ", re.M)
#: What a bridge logs when it serves (not forwards) a suspend.
SUSPEND_LINE = re.compile(r"SuspendNodes request_id=\S+ hostlist=(\S+) nodes=")


@pytest.fixture(scope="module")
def two_controllers(proving_ground: ProvingGround) -> Iterator[ProvingGround]:
    """The ground with a backup controller host for this module; one controller after it."""
    started = time.monotonic()
    layout = proving_ground.layout
    ground.up(layout, ha=True)
    print(f"switched the ground to two controllers in {time.monotonic() - started:.1f}s")
    primary = backup_host.primary_host()
    if _holder(proving_ground) != primary:
        # The test kills the leader with the primary host: the backup host's bridge (which
        # leads after an earlier failover) restarts, so the primary's takes the Lease.
        state = State(layout)
        stop_daemon(state, "bridge-backup")
        wait_for(f"{primary} to lead", lambda: _holder(proving_ground) == primary or None, 30)
        backup_host.start_bridge(layout, state, backup_host.host_dir(layout) / BACKUP_HOST
                                 / "bridge.yaml")  # fmt: skip
    yield proving_ground
    ground.up(layout, ha=False)
    # The backup host is gone with its mode: its daemons, namespace, veth and directories.
    left = ground.leftovers(layout)
    assert not set(backup_host.BACKUP_DAEMONS) & set(left["processes"]), left
    assert BACKUP_HOST not in left["netns"], left
    assert not backup_host.HOST_RUN.exists()
    assert not Path("/etc/netns", BACKUP_HOST).exists()


def _controllers(pg: ProvingGround) -> dict[str, str]:
    """``scontrol ping``: each controller's host → UP or DOWN."""
    states = {}
    for line in pg.slurm("scontrol", "ping", check=False).splitlines():
        # "Slurmctld(primary) at vm is UP"
        words = line.split()
        if len(words) >= 5 and words[1] == "at":
            states[words[2]] = words[-1]
    return states


def _node_states(pg: ProvingGround) -> dict[str, str]:
    shown = pg.slurm("scontrol", "show", "node", ",".join(NODES), "-o")
    return dict(re.findall(r"NodeName=(\S+).*? State=(\S+)", shown))


def _took_control(layout: Layout, log: str = "slurmctld-backup.log") -> int:
    """How often a slurmctld has taken control (its log says so each time)."""
    return len(SLURMCTLD_TOOK.findall((layout.logs / log).read_text(errors="replace")))


def _saved_since(path: Path, since: float) -> bool:
    """Whether slurmctld replaced its state file ``path`` after ``since`` (missing for a moment
    while it does: two renames)."""
    try:
        return path.stat().st_mtime > since
    except FileNotFoundError:
        return False


def _logged_at(log: Path, line: re.Pattern[str]) -> float:
    """The time of the last ``line`` in ``log`` (Slurm's and the bridge's timestamp forms)."""
    stamps = line.findall(log.read_text(errors="replace"))
    assert stamps, f"{log}: no line matches {line.pattern}"
    stamp = stamps[-1].replace(",", ".").replace(" ", "T")
    return datetime.fromisoformat(stamp).timestamp()  # both log local time


def _holder(pg: ProvingGround) -> str:
    out = pg.kubectl("-n", "slurm", "get", "lease", LEASE, "-o", "json", check=False)
    return str(json.loads(out)["spec"].get("holderIdentity", "")) if out else ""


def _uids(pg: ProvingGround, names: list[str]) -> dict[str, str]:
    current = pods(pg)
    return {n: current[n]["metadata"]["uid"] for n in names if n in current}


def test_primary_host_killed_while_nodes_power_up_then_fail_back(
    two_controllers: ProvingGround, use: Use
) -> None:
    pg = two_controllers
    layout = pg.layout
    primary = backup_host.primary_host()
    assert _controllers(pg) == {primary: "UP", BACKUP_HOST: "UP"}
    assert _holder(pg) == primary
    use(f"cpu-[{NODES[0][4:]}-{NODES[1][4:]}]")
    use(AFTER)

    # The kubelet is paused (SIGSTOP) from before the sbatch until the backup has control: the
    # pods exist in the API but cannot start, so the nodes are still powering up when the
    # primary host dies, however fast this machine starts containers. (Resumed at the kill, the
    # pods' slurmd asked for slurm.conf while the backup was in standby and waited 60 s more:
    # docs/operations.md, "Seen with two controllers".) slurmctld has by then saved the job and
    # the nodes' resume in StateSaveLocation: a SIGKILLed slurmctld loses what it had not saved
    # (it saves at most every 5 s), and the backup then recovers no job (seen: "Recovered
    # information about 0 jobs", the job gone).
    state = State(layout)
    kubelet = state.running("kubelet")
    assert kubelet is not None
    os.kill(kubelet, signal.SIGSTOP)
    try:
        job = submit_as_job_user(
            pg, "-p", "cpu", "-N2", "-w", ",".join(NODES), "--output=/dev/null",
            "--chdir=/tmp", "--wrap", "srun hostname",
        )  # fmt: skip
        submitted, submitted_at = time.monotonic(), time.time()
        first = wait_for("both pods created", lambda: _uids(pg, NODES) if len(_uids(pg, NODES))
                         == 2 else None, 60, every=0.1)  # fmt: skip
        # The nodes are powering up (and stay so: no kubelet runs their pods). A no-op update
        # of theirs makes slurmctld save the nodes, within SAVE_MAX_WAIT (5 s,
        # src/slurmctld/state_save.c), as they are now; the job was saved at its submission.
        # (Without it, a save from before the resume was seen on disk: the backup recovered
        # the nodes powered down and resumed them again.)
        assert all("POWERING_UP" in words for words in _node_states(pg).values())
        touched = time.time()
        (weight,) = set(
            re.findall(r" Weight=(\d+)", pg.slurm("scontrol", "show", "node", ",".join(NODES)))
        )
        pg.slurm("scontrol", "update", f"nodename={','.join(NODES)}", f"weight={weight}")
        saved = layout.slurm / "state"
        wait_for(
            "slurmctld to save the job and the nodes",
            lambda: (
                (
                    _saved_since(saved / "job_state", submitted_at)
                    and _saved_since(saved / "node_state", touched)
                )
                or None
            ),
            30,
            every=0.1,
        )
        # Not during the save itself: each state file is replaced by two renames (file ->
        # .old, .new -> file, src/common/state_save.c), and a SIGKILL between them left no
        # assoc_usage; the backup then stopped at its takeover ("fatal: No Assoc usage file
        # ... to recover"). The save of every file takes milliseconds.
        time.sleep(1)
        controlled = _took_control(layout)
        victims = {name: state.running(name) for name in ("slurmctld", "bridge")}
        at_kill = _node_states(pg)
        assert all(victims.values()), victims
        for pid in victims.values():
            assert pid is not None
            os.kill(pid, signal.SIGKILL)
        killed, killed_at = time.monotonic(), time.time()
        wait_for(
            "the backup slurmctld to take control",
            lambda: _took_control(layout) > controlled or None,
            60,
            every=0.2,
        )
    finally:
        os.kill(kubelet, signal.SIGCONT)
    print(f"killed the primary host's slurmctld and bridge {killed - submitted:.1f}s after sbatch")
    print(f"nodes then: {at_kill}")
    assert all("POWERING_UP" in words for words in at_kill.values()), at_kill

    seen = {name: {uid} for name, uid in first.items()}

    def finished() -> str | None:
        for name, uid in _uids(pg, NODES).items():
            seen[name].add(uid)
        return job_finished(pg, job)

    final = wait_for(f"job {job} to finish on the backup", finished, 240, every=0.5)
    done = time.monotonic()
    assert final == "COMPLETED", final
    # When each half took over, from the daemons' own logs (a client's view is coarse: with
    # the primary dead and the backup in standby, Slurm's clients sleep SlurmctldTimeout/2).
    slurmctld_took = _logged_at(layout.logs / "slurmctld-backup.log", SLURMCTLD_TOOK)
    bridge_took = _logged_at(layout.logs / "bridge-backup.log", BRIDGE_TOOK)
    assert slurmctld_took > killed_at and bridge_took > killed_at, (slurmctld_took, bridge_took)
    print(
        f"takeover after SIGKILL: slurmctld {slurmctld_took - killed_at:.1f}s (SlurmctldTimeout "
        f"{BACKUP_SLURMCTLD_TIMEOUT_S}s), bridge {bridge_took - killed_at:.1f}s (Lease "
        f"{backup_host.LEASE_DURATION_S}s); job {final} {done - submitted:.1f}s after sbatch"
    )
    # One pod per node from its create to the job's end: none deleted under the job, none
    # made twice; the job ran once.
    assert {name: len(uids) for name, uids in seen.items()} == {n: 1 for n in NODES}, seen
    assert job_restarts(pg, job) == 0
    assert "PodMissing" not in (layout.logs / "bridge-backup.log").read_text()

    # SuspendTime later, the backup slurmctld's SuspendProgram reaches the backup host's
    # bridge (its own socket), the leader: the pods go, nothing is left behind.
    wait_for("pods deleted", lambda: not (set(NODES) & set(pods(pg))) or None, 120, every=1)
    suspended = {
        name
        for hostlist in SUSPEND_LINE.findall((layout.logs / "bridge-backup.log").read_text())
        for name in expand(hostlist)
    }
    assert set(NODES) <= suspended, f"the backup host's bridge served no suspend of {NODES}"

    # Fail back: the primary's slurmctld takes control back from the backup, its bridge
    # follows the backup host's (which keeps the Lease), and the primary's hooks reach the
    # leader through it.
    back = time.monotonic()
    before = _took_control(layout, "slurmctld.log")
    slurm.start_slurm(layout, state, ha=True)
    wait_for(
        "the primary in control again",
        lambda: _took_control(layout, "slurmctld.log") > before or None,
        120,
        every=0.5,
    )
    print(f"fail back: slurmctld in control {time.monotonic() - back:.1f}s after its start")
    bridge_daemon.start_bridge(
        layout, state, backup_host.host_dir(layout) / primary / "bridge.yaml"
    )
    assert _holder(pg) == BACKUP_HOST
    again = submit_as_job_user(
        pg, "-p", "cpu", "-N1", "-w", AFTER, "--output=/dev/null", "--chdir=/tmp",
        "--wrap", "srun hostname",
    )  # fmt: skip
    final = wait_for(f"job {again} after fail back", lambda: job_finished(pg, again), 180, 1)
    assert final == "COMPLETED", final
    primary_log = (layout.logs / "bridge.log").read_text()
    assert f"hostlist={AFTER} forwarded_to={BACKUP_HOST}" in primary_log, primary_log[-3000:]
