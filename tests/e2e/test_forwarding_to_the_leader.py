"""Two real bridges in a leader election: the hooks call the follower (the bridge beside the
controller that happens to be primary) and the leader acts (issue 32 item 2).

Both are the ground's install and user (tests/e2e/test_two_bridges.py's TwinBridge), for a
cluster of their own (``twin``, the stray node), each with a Unix socket and a mutual-TLS
listener on loopback, electing on one Lease. A resume and a suspend sent to the follower's
socket reach the leader: its log has the caller's request id, the pod appears and goes, and
the follower wrote nothing. The same two bridges with ``advertise_address`` unset and no TCP
listener would answer UNAVAILABLE (tests/unit/test_forwarding.py).
"""

from __future__ import annotations

import json
import os
import pwd
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster import pods, reset_nodes, wait_for
from tests.conftest import ProvingGround
from tests.e2e.test_two_bridges import B_NODE, TwinBridge
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
    bridges = {name: _elector(pg, bridge_tmp / name, name, pki) for name in ("ctl-a", "ctl-b")}
    try:
        bridges["ctl-a"].start()
        wait_for("ctl-a to lead", lambda: _holder(pg) == "ctl-a" or None, 30)
        bridges["ctl-b"].start()
        yield bridges
    finally:
        for bridge in bridges.values():
            bridge.stop()
        pg.kubectl("-n", "slurm", "delete", "lease", LEASE, "--ignore-not-found", check=False)
        reset_nodes(pg, B_NODE)


def test_the_follower_s_hook_calls_are_the_leader_s_work(
    proving_ground: ProvingGround, electors: dict[str, TwinBridge], bridge_tmp: Path
) -> None:
    pg = proving_ground
    leader, follower = electors["ctl-a"], electors["ctl-b"]
    with BridgeClient(f"unix:{bridge_tmp / 'ctl-b' / 'twin.sock'}", timeout_s=20.0) as hook:
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
