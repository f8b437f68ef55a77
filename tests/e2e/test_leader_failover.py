"""Two real bridges in a leader election (issue 32), both the ground's install and user
(tests/e2e/test_two_bridges.py's TwinBridge) for a cluster of their own (``twin``, the stray
node), each with a Unix socket and a mutual-TLS listener on loopback, electing on one Lease:

- the hooks call the follower (the bridge beside the controller that happens to be primary) and
  the leader acts: a resume and a suspend sent to the follower's socket reach the leader, whose
  log has the caller's request id; the pod appears and goes; the follower wrote nothing;
- the leader is SIGKILLed under a running job: the other takes over within the Lease's
  duration, adopts the pod the dead one created, and leaves the job alone; the killed one,
  restarted, follows; the new leader stops cleanly and the first leads again (fail back), the
  job still running on the same pod. Before adoption on taking the lead, the new leader did not
  own that pod (it was created after its first list), saw a busy node without a pod and failed
  it (``k8s: PodMissing``) under the job.

The ground's own bridge answers UNKNOWN_NODE for the stray node (no pool of its) when
slurmctld's hook calls it; the twins' reconcilers create its pod.
"""

from __future__ import annotations

import json
import os
import pwd
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster import pods, reset_nodes, submit_as_job_user, wait_for
from tests.conftest import ProvingGround
from tests.e2e.test_two_bridges import B_NODE, WATCH_S, TwinBridge, assert_untouched, running
from tests.unit.mutual_tls import write_pki

from bridge.domain.results import Outcome  # isort: skip
from bridge.rpc.client import BridgeClient  # isort: skip

from proving_ground import layout  # isort: skip (conftest sets the path)

pytestmark = pytest.mark.e2e

LEASE = "skb-test-forwarding"
DURATION_S = 6


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _elector(pg: ProvingGround, directory: Path, identity: str, pki: Path) -> TwinBridge:
    directory.mkdir(mode=0o755)
    user = pwd.getpwnam(layout.BRIDGE_USER)
    os.chown(directory, user.pw_uid, user.pw_gid)  # its socket goes there
    bridge = TwinBridge(pg, directory)
    config = json.loads(bridge.config.read_text())
    config["kubernetes"].update(
        leader_election=True,
        lease_name=LEASE,
        leader_identity=identity,
        lease_duration_s=DURATION_S,
        lease_retry_s=1,
    )
    port = _free_port()
    config["bridge"].update(
        tcp_listen=f"127.0.0.1:{port}",
        tls_cert=str(pki / "server.pem"),
        tls_key=str(pki / "server.key"),
        tls_client_ca=str(pki / "ca.pem"),
        # The other bridge's certificate (the same one here: DNS SAN localhost).
        tls_client_names=["localhost"],
    )
    bridge.config.write_text(json.dumps(config, indent=1))
    return bridge


def _holder(pg: ProvingGround) -> str:
    out = pg.kubectl("-n", "slurm", "get", "lease", LEASE, "-o", "json", check=False)
    return str(json.loads(out)["spec"].get("holderIdentity", "")) if out else ""


@pytest.fixture
def electors(proving_ground: ProvingGround, bridge_tmp: Path) -> Iterator[dict[str, TwinBridge]]:
    pg = proving_ground
    pki = bridge_tmp / "pki"
    pki.mkdir(mode=0o750)
    write_pki(pki)
    bridge_user = pwd.getpwnam(layout.BRIDGE_USER)
    for path in (pki, *pki.iterdir()):
        os.chown(path, bridge_user.pw_uid, bridge_user.pw_gid)
    reset_nodes(pg, B_NODE)
    # Short directories: a Unix socket's path has room for 107 bytes.
    bridges = {name: _elector(pg, bridge_tmp / name[-1], name, pki) for name in ("ctl-a", "ctl-b")}
    try:
        bridges["ctl-a"].start()
        wait_for("ctl-a to lead", lambda: _holder(pg) == "ctl-a" or None, 30)
        bridges["ctl-b"].start()
        yield bridges
    finally:
        # The leader removes its pod once Slurm powers the node down (the ground's bridge
        # refuses that suspend: not its node).
        reset_nodes(pg, B_NODE)
        try:
            wait_for(f"the pod {B_NODE} deleted", lambda: B_NODE not in pods(pg) or None, 40, 1)
        finally:
            for bridge in bridges.values():
                bridge.stop()
            pg.kubectl("-n", "slurm", "delete", "lease", LEASE, "--ignore-not-found", check=False)
            pg.kubectl(
                "-n", "slurm", "delete", "pod", B_NODE, "--ignore-not-found", "--grace-period=0",
                "--force", "--wait=false", check=False,
            )  # fmt: skip


def test_hook_calls_to_the_follower_reach_the_leader(
    proving_ground: ProvingGround, electors: dict[str, TwinBridge], bridge_tmp: Path
) -> None:
    pg = proving_ground
    leader, follower = electors["ctl-a"], electors["ctl-b"]
    with BridgeClient(f"unix:{bridge_tmp / 'b' / 'twin.sock'}", timeout_s=20.0) as hook:
        results = hook.resume_nodes(B_NODE, "", "resume-fwd-1", wait=True)
        assert [(r.node, r.outcome) for r in results] == [(B_NODE, Outcome.OK)], results
        assert B_NODE in pods(pg)
        results = hook.suspend_nodes(B_NODE, "suspend-fwd-1")
        assert [(r.node, r.outcome) for r in results] == [(B_NODE, Outcome.OK)], results
    wait_for("the pod deleted", lambda: B_NODE not in pods(pg) or None, 60)
    for rid in ("resume-fwd-1", "suspend-fwd-1"):
        assert f"request_id={rid} hostlist={B_NODE} nodes=1" in leader.text(), leader.text()
        assert f"request_id={rid} hostlist={B_NODE} forwarded_to=ctl-a" in follower.text()
    assert _holder(pg) == "ctl-a"


def test_leader_killed_under_a_job_then_fail_back(
    proving_ground: ProvingGround, electors: dict[str, TwinBridge]
) -> None:
    pg = proving_ground
    first, second = electors["ctl-a"], electors["ctl-b"]
    job = submit_as_job_user(
        pg, "-p", "stray", "-w", B_NODE, "--output=/dev/null", "--wrap", "sleep 300"
    )
    uid = wait_for(f"job {job} on {B_NODE}", running(pg, job, B_NODE), 90, every=1)
    assert first.process is not None
    killed = time.monotonic()
    os.kill(first.process.pid, signal.SIGKILL)
    first.process.wait(10)  # reaped, before start() below replaces it
    wait_for("ctl-b to lead", lambda: _holder(pg) == "ctl-b" or None, 4 * DURATION_S, every=0.5)
    print(f"takeover after SIGKILL of the leader: {time.monotonic() - killed:.1f}s")
    time.sleep(WATCH_S)  # the new leader's passes (every 2 s) over the busy node
    assert_untouched(pg, {B_NODE: job}, {B_NODE: uid})

    first.start()  # restarted: ctl-b holds the Lease, so it follows
    time.sleep(2 * DURATION_S)
    assert _holder(pg) == "ctl-b"
    back = time.monotonic()
    second.stop()  # a clean stop releases the Lease: ctl-a leads within a retry period
    wait_for("ctl-a to lead again", lambda: _holder(pg) == "ctl-a" or None, 4 * DURATION_S)
    print(f"fail back after ctl-b stopped: {time.monotonic() - back:.1f}s")
    time.sleep(WATCH_S)
    assert_untouched(pg, {B_NODE: job}, {B_NODE: uid})
    assert "PodMissing" not in first.text() + second.text()
