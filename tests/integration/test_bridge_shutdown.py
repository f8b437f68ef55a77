"""The proving ground's bridge stopped with SIGTERM: it exits gracefully, logging that it shuts
down, and is started again. Needs only the ground's bridge daemon."""

from __future__ import annotations

import os
import signal

import pytest

from tests.cluster import bridge_pid, restart_bridge, wait_for
from tests.conftest import ProvingGround

pytestmark = pytest.mark.integration


def test_bridge_survives_sigterm_gracefully(proving_ground: ProvingGround) -> None:
    pg = proving_ground
    pid = bridge_pid(pg)
    assert pid is not None
    os.kill(pid, signal.SIGTERM)
    wait_for("bridge exit", lambda: bridge_pid(pg) is None or None, 20)
    log = (pg.layout.logs / "bridge.log").read_text()
    assert "shutting down" in log
    restart_bridge(pg)
