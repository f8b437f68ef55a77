"""Last (file order): `down` leaves nothing of ours behind, and a second `up` is warm.

Runs after every other test because it takes the whole proving ground down. It brings it back
up on the Kubernetes matrix's other control plane (1.34; every other test ran on the default,
1.37) and runs the elastic cycle there, so that both cells are proven in every `make test`
without a third start; the session fixture's own teardown finds a ground up as it expects.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from proving_ground import ground, kube
from proving_ground.layout import DEFAULT_KUBERNETES, KUBERNETES_VERSIONS
from proving_ground.processes import State

from tests.conftest import ProvingGround, Use
from tests.e2e.test_elastic_cycle import two_node_job_cycle

pytestmark = pytest.mark.e2e


#: The matrix's other cell: the control plane this test comes back up with.
OTHER_KUBERNETES = next(m for m in KUBERNETES_VERSIONS if m != DEFAULT_KUBERNETES)


def _server_version(pg: ProvingGround) -> str:
    version: str = json.loads(pg.kubectl("version", "-o", "json"))["serverVersion"]["gitVersion"]
    return version


def test_down_leaves_nothing_and_up_again_is_warm_on_the_other_kubernetes(
    proving_ground: ProvingGround, use: Use
) -> None:
    pg = proving_ground
    assert _server_version(pg) == KUBERNETES_VERSIONS[DEFAULT_KUBERNETES]
    started = time.monotonic()
    ground.down(pg.layout)
    down_s = time.monotonic() - started
    left = ground.leftovers(pg.layout)
    assert left == {"processes": [], "mounts": [], "interfaces": [], "netns": [], "iptables": []}, (
        left
    )
    assert not os.path.exists("/run/slurm-k8s-bridge")
    assert "slurm-k8s-bridge proving ground" not in Path("/etc/hosts").read_text()

    started = time.monotonic()
    ground.up(pg.layout, kubernetes=OTHER_KUBERNETES)
    up_s = time.monotonic() - started
    print(f"make down: {down_s:.1f}s; warm make up K8S={OTHER_KUBERNETES}: {up_s:.1f}s")
    assert ground.healthy(pg.layout)
    # Warm: nothing is built again (binaries and images come from the cache).
    assert up_s < 180, "generous bound; a warm up takes well under a minute here"
    assert kube.running_kubernetes(State(pg.layout)) == OTHER_KUBERNETES
    assert _server_version(pg) == KUBERNETES_VERSIONS[OTHER_KUBERNETES]
    # The elastic cycle on the other control plane (the bridge finds no PodGroup API there).
    two_node_job_cycle(pg, use)
