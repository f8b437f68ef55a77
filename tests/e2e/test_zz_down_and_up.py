"""Last (file order): `down` leaves nothing of ours behind, and a second `up` is warm.

Runs after every other test because it takes the whole proving ground down; it brings it back
up so that the session fixture's own teardown finds what it expects.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from proving_ground import ground

from tests.conftest import ProvingGround

pytestmark = pytest.mark.e2e


def test_down_leaves_nothing_and_up_again_is_warm(proving_ground: ProvingGround) -> None:
    pg = proving_ground
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
    ground.up(pg.layout)
    up_s = time.monotonic() - started
    print(f"make down: {down_s:.1f}s; warm make up: {up_s:.1f}s")
    assert ground.healthy(pg.layout)
    # Warm: nothing is built again (binaries and images come from the cache).
    assert up_s < 180, "generous bound; a warm up takes well under a minute here"
