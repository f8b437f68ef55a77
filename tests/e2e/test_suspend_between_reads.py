"""A suspend that lands between the reconcile pass's Slurm read and its pod read (issue 29 item
6). The pass reads Slurm first (the node idle and up), then the pods; Slurm suspending the node in
between deletes its pod, so the pass saw a node that wants its slurmd and a pod gone or going.
Before, that became a DOWN of ours (`k8s: PodMissing` or `k8s: Deleted`) on an idle node Slurm
had just powered down. The window is widened here for real: the bridge's scontrol answers the
pass's read of the pools' nodes as Slurm was when the read started, 8 s later; the test suspends
the node as soon as such a read started. Now the DOWN is read again by name first, and
dropped."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from proving_ground import slurm

from tests.cluster import (
    job_finished,
    restart_bridge,
    slurm_node,
    submit,
    wait_for,
    wait_idle_powered_down,
)
from tests.conftest import ProvingGround, Use

pytestmark = pytest.mark.e2e

NODE = "cpu-13"
#: Longer than Slurm's power-save interval (5 s on the ground) and the suspend's pod delete.
STALE_S = 8


def _stale_listing_bin(directory: Path, real: Path) -> Path:
    """The ground's clients, but the pass's read, ``scontrol show nodes <pools' hostlist>
    --json`` (several pools: a comma in the hostlist; a read again by name has one node),
    prints its answer ``STALE_S`` after it read it, and notes each such start in ``started``."""
    directory.mkdir(parents=True, exist_ok=True)
    # The bridge runs as its own user: the wrapper it runs must be able to append here.
    (directory / "started").touch()
    (directory / "started").chmod(0o666)
    for command in ("sinfo", "squeue"):
        (directory / command).symlink_to(real / command)
    scontrol = directory / "scontrol"
    scontrol.write_text(
        "#!/bin/sh\n"
        'case "$1 $2 $3 $4" in "show nodes "*,*" --json")\n'
        f'    out=$({real / "scontrol"} "$@") || exit $?\n'
        f"    date +%s.%N >> {directory / 'started'}\n"
        f"    sleep {STALE_S}\n"
        '    printf "%s\\n" "$out"\n'
        "    exit 0 ;;\n"
        "esac\n"
        f'exec {real / "scontrol"} "$@"\n'
    )
    scontrol.chmod(0o755)
    return directory


def _listings(directory: Path) -> int:
    started = directory / "started"
    return len(started.read_text().split()) if started.exists() else 0


def test_a_suspend_between_the_slurm_read_and_the_pod_read_downs_nothing(
    proving_ground: ProvingGround, use: Use, bridge_tmp: Path
) -> None:
    pg = proving_ground
    use(NODE)
    real = slurm.ground_programs(pg.layout).bin_dir
    stale = _stale_listing_bin(bridge_tmp / "stale-bin", real)
    restart_bridge(pg, env_overrides={"SKB_SLURM_BIN_DIR": str(stale)})
    try:
        job = submit(
            pg, "-p", "cpu", "-N1", "-w", NODE, "--output=/dev/null", "--chdir=/tmp",
            "--wrap", "true",
        )  # fmt: skip
        wait_for(f"job {job} to finish", lambda: job_finished(pg, job), 240, every=1)
        up = slurm_node(pg, NODE)
        assert up.state == "IDLE" and not up.is_powered_down, up
        # Suspend the node right after a full listing read it idle and up.
        seen = _listings(stale)
        wait_for("a read of the pools' nodes to start", lambda: _listings(stale) > seen or None,
                 30, 0.1)  # fmt: skip
        pg.slurm("scontrol", "update", f"nodename={NODE}", "state=power_down_force")
        reasons: set[str] = set()
        deadline = time.monotonic() + STALE_S + 20
        while time.monotonic() < deadline:
            reason = slurm_node(pg, NODE).reason
            if reason:
                reasons.add(reason)
            time.sleep(0.5)
        assert not any(r.startswith("k8s:") for r in reasons), (
            f"{NODE} set DOWN by the bridge after Slurm suspended it: {reasons}"
        )
    finally:
        restart_bridge(pg)
    wait_idle_powered_down(pg, NODE, 60)
