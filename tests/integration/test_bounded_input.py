"""Hostile sizes against the proving ground's real bridge and slurmctld: a 6 MiB resume file (a
big job array) and a 200,000-name hostlist. Either the call is served, or it fails with an error
naming the limit; nothing is set DOWN wrongly, and the bridge's memory stays bounded."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from proving_ground.bridge_daemon import BRIDGE_SOCKET

from bridge.errors import InvalidInput
from bridge.rpc.client import BridgeClient
from tests.cluster import bridge_pid, node, pods, run_hook, wait_for
from tests.conftest import ProvingGround, Use

pytestmark = pytest.mark.integration


def memory_kib(pid: int) -> dict[str, int]:
    """VmRSS (now) and VmHWM (peak since start) of a process, in KiB."""
    status = Path(f"/proc/{pid}/status").read_text()
    return {k: int(v) for k, v in re.findall(r"^(VmRSS|VmHWM):\s+(\d+) kB", status, re.M)}


def job_array_resume_file(size: int, hostlist: str) -> str:
    jobs, total, i = [], 0, 0
    while total < size:
        job = f'{{"job_id":{i + 1},"nodes_resume":"{hostlist}","partition":"sim"}}'
        jobs.append(job)
        total += len(job) + 1
        i += 1
    return '{"jobs":[' + ",".join(jobs) + f'],"all_nodes_resume":"{hostlist}"}}'


def test_six_mib_resume_file_resumes_its_nodes(
    proving_ground: ProvingGround, use: Use, tmp_path: Path
) -> None:
    pg = proving_ground
    use("sim-[60-61]")
    pid = bridge_pid(pg)
    assert pid is not None
    before = memory_kib(pid)
    path = tmp_path / "resume.json"
    path.write_text(job_array_resume_file(6 * 1024 * 1024, "sim-[60-61]"))
    started = time.monotonic()
    assert run_hook(pg, "resume", "sim-[60-61]", resume_file=str(path)) == 0
    wait_for("both pods", lambda: {"sim-60", "sim-61"} <= set(pods(pg)) or None, 20)
    elapsed = time.monotonic() - started
    after = memory_kib(pid)
    print(
        f"6 MiB resume file: pods in {elapsed:.2f}s; bridge RSS {before['VmRSS'] // 1024} MiB "
        f"-> {after['VmRSS'] // 1024} MiB, peak {after['VmHWM'] // 1024} MiB"
    )
    for name in ("sim-60", "sim-61"):
        assert not node(pg, name)["State"].startswith("DOWN")
    assert after["VmHWM"] < before["VmRSS"] + 512 * 1024, "peak grew by more than 512 MiB"


def test_huge_hostlist_is_refused_naming_the_limit_and_downs_nothing(
    proving_ground: ProvingGround, use: Use
) -> None:
    pg = proving_ground
    use("sim-[0-63]")
    pid = bridge_pid(pg)
    assert pid is not None
    before = memory_kib(pid)
    started = time.monotonic()
    with (
        BridgeClient(f"unix:{BRIDGE_SOCKET}", timeout_s=30) as client,
        pytest.raises(InvalidInput, match="more than 100000 hosts"),
    ):
        # Four ranges: one range alone stops at Slurm's own 65,536 (hostlist.c).
        client.resume_nodes(
            "sim-[0-49999],sim-[50000-99999],sim-[100000-149999],sim-[150000-199999]",
            "",
            "test-huge",
        )
    elapsed = time.monotonic() - started
    after = memory_kib(pid)
    print(
        f"200,000-name hostlist refused in {elapsed * 1000:.0f} ms; bridge RSS "
        f"{before['VmRSS'] // 1024} -> {after['VmRSS'] // 1024} MiB, peak {after['VmHWM'] // 1024}"
    )
    assert not [n for n in pods(pg) if n.startswith("sim-")]
    out = pg.slurm("sinfo", "-h", "-N", "-p", "sim", "-o", "%N %T")
    assert "down" not in out, out
    # The bridge still serves.
    with BridgeClient(f"unix:{BRIDGE_SOCKET}", timeout_s=10) as client:
        assert client.list_nodes("sim-0")[0].node == "sim-0"
    assert after["VmHWM"] < before["VmRSS"] + 256 * 1024
