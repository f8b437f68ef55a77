"""Leader election against the proving ground's API server (issue 32 item 1): two candidates,
each its own process with the bridge's Leadership, LeaseGateway and fence and the bridge's own
credentials (so the Role's lease rule is what lets them), sharing one Lease. The leader is
SIGSTOPped past its Lease: the other takes over, and the stopped one, resumed, writes nothing.

Needs the API server only; what a whole bridge does with the lead (the hooks, Slurm) is the
e2e's."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import ROOT, ProvingGround
from tests.integration.manifests import wait_for

pytestmark = pytest.mark.integration

NAMESPACE = "slurm"
LEASE = "skb-test-election"
DURATION_S = 6
RETRY_S = 1.0


class Candidate:
    def __init__(self, pg: ProvingGround, identity: str, out: Path) -> None:
        self.identity = identity
        self.out = out
        kubeconfig = pg.layout.local / "kubeconfigs" / "bridge.kubeconfig"
        self.log = out.open("w")
        self.process = subprocess.Popen(
            [
                sys.executable, "-m", "tests.integration.lease_candidate", str(kubeconfig),
                NAMESPACE, LEASE, identity, str(DURATION_S), str(RETRY_S),
            ],
            cwd=ROOT,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )  # fmt: skip

    def lines(self, kind: str) -> list[float]:
        return [
            float(line.split()[1])
            for line in self.out.read_text().splitlines()
            if line.startswith(f"{kind} ") and len(line.split()) == 2
        ]

    def stop(self) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGCONT)
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        self.log.close()


def holder(pg: ProvingGround) -> str:
    lease = json.loads(pg.kubectl("-n", NAMESPACE, "get", "lease", LEASE, "-o", "json"))
    return str(lease["spec"].get("holderIdentity") or "")


@pytest.fixture
def candidates(
    proving_ground: ProvingGround, tmp_path: Path
) -> Iterator[tuple[ProvingGround, Candidate, Candidate]]:
    proving_ground.kubectl("-n", NAMESPACE, "delete", "lease", LEASE, "--ignore-not-found")
    first = Candidate(proving_ground, "ctl-a", tmp_path / "a.log")
    wait_for("ctl-a to lead", lambda: bool(first.lines("lead")), timeout_s=30, interval_s=0.5)
    second = Candidate(proving_ground, "ctl-b", tmp_path / "b.log")
    try:
        yield proving_ground, first, second
    finally:
        for candidate in (first, second):
            candidate.stop()
        proving_ground.kubectl("-n", NAMESPACE, "delete", "lease", LEASE, "--ignore-not-found")
        proving_ground.kubectl(
            "-n", NAMESPACE, "delete", "events", "--field-selector=reason=LeaseProbe",
            "--ignore-not-found",
        )  # fmt: skip


def test_a_stopped_leader_is_replaced_and_writes_nothing_when_resumed(
    candidates: tuple[ProvingGround, Candidate, Candidate],
) -> None:
    pg, a, b = candidates
    assert holder(pg) == "ctl-a"
    time.sleep(3 * RETRY_S)  # b reads the Lease, follows, and is refused every write
    assert b.lines("refused") and not b.lines("write") and not b.lines("lead")
    assert a.lines("write")

    os.kill(a.process.pid, signal.SIGSTOP)
    stopped_at = time.clock_gettime(time.CLOCK_BOOTTIME)
    wait_for("ctl-b to lead", lambda: bool(b.lines("lead")), timeout_s=4 * DURATION_S)
    took_over = b.lines("lead")[0]
    takeover_s = took_over - stopped_at
    print(f"takeover {takeover_s:.1f}s after SIGSTOP (Lease {DURATION_S}s)")
    # From ctl-a's last renewal (up to a retry period before the stop) plus the whole Lease.
    assert DURATION_S - RETRY_S <= takeover_s <= DURATION_S + 4 * RETRY_S, takeover_s
    assert holder(pg) == "ctl-b"

    os.kill(a.process.pid, signal.SIGCONT)
    wait_for("ctl-a to hear it stopped leading", lambda: bool(a.lines("stop")), timeout_s=20)
    time.sleep(3 * RETRY_S)
    # Every write ctl-a's fence admitted was asked before ctl-b took over (in fact before its
    # own deadline, two thirds into the Lease); resumed, it is refused and leads no more.
    late = [t for t in a.lines("write") if t >= took_over]
    assert late == [], late
    assert max(a.lines("write")) < stopped_at + 0.5
    assert [t for t in a.lines("refused") if t > took_over], "resumed ctl-a never asked"
    assert a.lines("lead") == a.lines("lead")[:1]
    assert holder(pg) == "ctl-b"
    assert b.lines("write")


def test_a_leader_that_stops_hands_over_at_once(
    candidates: tuple[ProvingGround, Candidate, Candidate],
) -> None:
    """A clean stop releases the Lease: the other leads within a retry period or two, not a
    whole Lease later."""
    pg, a, b = candidates
    time.sleep(2 * RETRY_S)
    a.stop()
    released_at = time.clock_gettime(time.CLOCK_BOOTTIME)
    wait_for("ctl-b to lead", lambda: bool(b.lines("lead")), timeout_s=4 * DURATION_S)
    # ctl-a's own words (its log says "released" or why not) when it did not hand over.
    said = a.out.read_text()[-3000:]
    assert b.lines("lead")[0] - released_at <= 3 * RETRY_S, said
    assert holder(pg) == "ctl-b"
