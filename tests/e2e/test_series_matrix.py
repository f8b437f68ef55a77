"""The elastic cycle on the Slurm series other than the ground's default (issue 12's matrix).

The same scenarios as tests/e2e/test_elastic_cycle.py (which runs them on the default series):
a 2-node job on two pods; a pod that cannot run → ``k8s:`` reason → requeue → recovery; an
eviction. For each series the ground switches its Slurm side (slurmctld from that series' cached
Debian root, slurmd pods of that series' image, the bridge restarted on its clients); Kubernetes
keeps running. At the end the ground goes back to the series it ran before.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import ProvingGround, Use
from tests.e2e.test_elastic_cycle import broken_pool_cycle, eviction_cycle, two_node_job_cycle
from tests.e2e.test_site_layout import JOB_USER, job_user_cycle

from proving_ground import ground, slurm, slurm_series  # isort: skip (conftest sets the path)

pytestmark = pytest.mark.e2e

MATRIX = tuple(s for s in slurm_series.SUITES if s != slurm_series.DEFAULT_SERIES)


def _switch(pg: ProvingGround, series: str) -> None:
    if slurm.running_series(pg.layout) == series:
        return
    started = time.monotonic()
    ground.up(pg.layout, series)
    print(f"switched the ground to Slurm {series} in {time.monotonic() - started:.1f}s")


@pytest.fixture(scope="module")
def default_series_after(proving_ground: ProvingGround) -> Iterator[str]:
    """The series the ground ran before this module; restored after it."""
    before = slurm.running_series(proving_ground.layout)
    yield before
    _switch(proving_ground, before)


@pytest.fixture(scope="module", params=MATRIX)
def series(
    request: pytest.FixtureRequest, proving_ground: ProvingGround, default_series_after: str
) -> str:
    del default_series_after
    wanted: str = request.param
    _switch(proving_ground, wanted)
    shown = proving_ground.slurm("sinfo", "-V").split()
    assert shown[-1].startswith(f"{wanted}."), shown
    return wanted


def test_two_node_job(proving_ground: ProvingGround, series: str, use: Use) -> None:
    del series  # the cycle checks that the pods' slurmd registered with the ground's series
    two_node_job_cycle(proving_ground, use)


def test_failure_reason_requeue_recovery(
    proving_ground: ProvingGround, series: str, use: Use, bridge_tmp: Path
) -> None:
    del series
    broken_pool_cycle(proving_ground, use, bridge_tmp)


def test_eviction(proving_ground: ProvingGround, series: str, use: Use) -> None:
    del series
    eviction_cycle(proving_ground, use)


def test_a_host_only_user_s_name_resolves_in_the_pod(
    proving_ground: ProvingGround, series: str, use: Use
) -> None:
    """On these series Debian serves the source, so the image carries nss_slurm: the job's user,
    known only to the host, resolves inside its pod (26.05's image says why it cannot yet)."""
    use("cpu-12")
    lines = job_user_cycle(proving_ground, "cpu-12")
    assert lines[2].startswith("built"), f"Slurm {series}'s image: {lines[2]}"
    assert lines[1] == f"name={JOB_USER}", lines
