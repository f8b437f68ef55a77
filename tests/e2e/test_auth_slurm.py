"""auth/slurm on the live elastic cycle (issue 12): the ground switched to a series that has it
with ``AUTH=slurm`` (slurmctld with ``AuthType=auth/slurm``, the bridge with ``slurm.auth: slurm``),
a 2-node job on two pods whose slurmd authenticates with the mounted ``slurm.key``, no munge key in
the pods. At the end the ground goes back to the series and authentication it ran before.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from tests.cluster import pods
from tests.conftest import ProvingGround, Use
from tests.e2e.test_elastic_cycle import two_node_job_cycle

from proving_ground import ground, slurm_series  # isort: skip (conftest sets the path)
from proving_ground.layout import NAMESPACE  # isort: skip

pytestmark = pytest.mark.e2e

AUTH_SLURM_SERIES = tuple(
    s for s in slurm_series.SUITES if s not in slurm_series.WITHOUT_AUTH_SLURM
)
NODES = ("cpu-0", "cpu-1")


def _switch(pg: ProvingGround, series: str, auth: str) -> None:
    if (pg.series, pg.auth) == (series, auth):
        return
    started = time.monotonic()
    ground.up(pg.layout, series, auth)
    print(f"switched the ground to Slurm {series} ({auth}) in {time.monotonic() - started:.1f}s")


@pytest.fixture(scope="module")
def ground_after(proving_ground: ProvingGround) -> Iterator[tuple[str, str]]:
    """The series and authentication the ground ran before this module; restored after it."""
    before = (proving_ground.series, proving_ground.auth)
    yield before
    _switch(proving_ground, *before)


@pytest.fixture(scope="module", params=AUTH_SLURM_SERIES)
def series(
    request: pytest.FixtureRequest, proving_ground: ProvingGround, ground_after: tuple[str, str]
) -> str:
    del ground_after
    wanted: str = request.param
    _switch(proving_ground, wanted, slurm_series.AUTH_SLURM)
    shown = proving_ground.slurm("sinfo", "-V").split()
    assert shown[-1].startswith(f"{wanted}."), shown
    return wanted


class _PodWatch:
    """Records, while the cycle runs, what the bridge's pods of ``NODES`` mount and what their
    slurmd logged (the pods are gone once the cycle ends)."""

    def __init__(self, pg: ProvingGround) -> None:
        self.pg = pg
        self.volumes: dict[str, set[str]] = {}
        self.env: dict[str, set[str]] = {}
        self.logs: dict[str, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def __enter__(self) -> _PodWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _poll(self) -> None:
        while not self._stop.is_set():
            try:
                self._look()
            except AssertionError as e:  # a kubectl call failed: look again in a second
                print(f"pod watch: {e}")
            self._stop.wait(1)

    def _look(self) -> None:
        for name, pod in pods(self.pg).items():
            if name not in NODES:
                continue
            self.volumes[name] = {v["name"] for v in pod["spec"].get("volumes") or []}
            slurmd = next(c for c in pod["spec"]["containers"] if c["name"] == "slurmd")
            self.env[name] = {e["name"] for e in slurmd.get("env") or []}
            if pod["status"].get("phase") == "Running" and name not in self.logs:
                logs = self.pg.kubectl("-n", NAMESPACE, "logs", name, "-c", "slurmd", check=False)
                if "slurmd-entrypoint:" in logs:
                    self.logs[name] = logs


def test_two_node_job_with_auth_slurm(proving_ground: ProvingGround, series: str, use: Use) -> None:
    pg = proving_ground
    config = pg.slurm("scontrol", "show", "config")
    auth_type = [line for line in config.splitlines() if line.startswith("AuthType")]
    assert auth_type and auth_type[0].split("=", 1)[1].strip() == "auth/slurm", auth_type
    with _PodWatch(pg) as watch:
        two_node_job_cycle(pg, use)
    for name in NODES:
        assert watch.volumes.get(name), f"Slurm {series}: pod {name} never seen"
        assert "slurm-key" in watch.volumes[name], watch.volumes[name]
        assert "munge-key" not in watch.volumes[name], watch.volumes[name]
        assert "SLURM_KEY_FILE" in watch.env[name], watch.env[name]
        # The entrypoint says which authentication it set up (and started no munged).
        assert "auth/slurm key=" in watch.logs.get(name, ""), watch.logs.get(name)
