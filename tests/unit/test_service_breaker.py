"""The per-pool circuit breaker wired into BridgeService: fakes at the ports, a clock we move."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

import pytest

from bridge.domain.circuit import BreakerState
from bridge.domain.nodes import SlurmNode
from bridge.domain.pods import PodFailure
from bridge.domain.reason import Reason
from bridge.domain.reconcile import MarkDown
from bridge.domain.results import ErrorClass, NodeResult, Outcome
from bridge.errors import Forbidden, InvalidInput, TransientBackendError
from tests.unit.fakes import MINIMAL_CONFIG, Update
from tests.unit.harness import Harness

NOW = datetime(2026, 12, 3, 12, 0, 0, tzinfo=UTC)
PAUSED = "k8s: PoolPaused: pool cpu paused until 2026-12-03T12:10:00Z: Forbidden: full"

CONFIG = (
    """\
bridge:
  circuit_breaker:
    failures: 2
    window_s: 60
    pause_s: 600
"""
    + MINIMAL_CONFIG
    + """\
  - name: gpu
    nodes: gpu-[0-3]
    cpus: 8
    real_memory_mb: 4096
    image: localhost/slurmd:dev
"""
)


def powering_up(*names: str) -> list[SlurmNode]:
    return [SlurmNode(n, "ALLOCATED", frozenset({"CLOUD", "POWERING_UP"})) for n in names]


class World(Harness):
    """The service on fakes, with a clock the test moves."""

    def __init__(self, config: str = CONFIG) -> None:
        nodes = powering_up(*(f"cpu-{i}" for i in range(4)), *(f"gpu-{i}" for i in range(4)))
        super().__init__(nodes, now=NOW, config=config)

    def state(self, pool: str) -> BreakerState:
        return next(r.state for r in self.service.pool_status() if r.pool == pool)

    def pause_cpu(self) -> None:
        """Two refusals of cpu pods for good: the cpu pool pauses."""
        self.pods.create_errors.update({"cpu-0": Forbidden("full"), "cpu-1": Forbidden("full")})
        self.service.resume("cpu-[0-1]", "", "r1")
        assert self.state("cpu") is BreakerState.OPEN


@pytest.mark.parametrize("wait", [True, False], ids=["resume --wait", "accept_resume"])
def test_a_paused_pool_creates_nothing_and_its_nodes_go_down_with_pool_paused(wait: bool) -> None:
    w = World()
    w.pause_cpu()
    w.pods.create_calls.clear()
    w.slurm.updates.clear()
    if wait:
        results = w.service.resume("cpu-2,gpu-0", "", "r2")
        assert results == [
            NodeResult("cpu-2", Outcome.FAILED, ErrorClass.NO_CAPACITY, PAUSED),
            NodeResult("gpu-0", Outcome.OK),
        ]
    else:
        w.service.accept_resume("cpu-2,gpu-0", "", "r2")
        w.service.close(timeout_s=5)
    assert w.pods.create_calls == ["gpu-0"]  # the other pool keeps working
    assert w.slurm.updates == [Update(("cpu-2",), "down", PAUSED)]
    assert w.state("gpu") is BreakerState.CLOSED


def test_the_reconciler_creates_no_pod_for_a_paused_pool_either() -> None:
    w = World()
    w.pause_cpu()
    w.pods.create_calls.clear()
    w.slurm.updates.clear()
    w.service.reconcile_once()  # cpu-2, cpu-3, gpu-* are powering up without pods
    assert sorted(w.pods.create_calls) == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]
    assert Update(("cpu-2", "cpu-3"), "down", PAUSED) in w.slurm.updates


@pytest.mark.parametrize(
    ("reason", "opens"),
    [
        pytest.param("k8s: ErrImagePull: pull access denied", True, id="pod cannot run"),
        pytest.param("k8s: PodMissing: no pod for node", False, id="pod missing"),
        pytest.param(PAUSED, False, id="PoolPaused itself"),
    ],
)
def test_which_downs_of_the_reconciler_count(reason: str, opens: bool) -> None:
    w = World()
    ours = Reason.parse(reason)
    assert ours is not None
    if ours.kind == "ErrImagePull":  # the evidence a DOWN is checked against, read live
        for name in ("cpu-0", "cpu-1"):
            w.pods.add(name, phase="Pending", failure=PodFailure(ours.kind, ours.message))
    w.service.execute([MarkDown("cpu-0", ours), MarkDown("cpu-1", ours)])
    assert (w.state("cpu") is BreakerState.OPEN) is opens


def test_a_failing_pod_seen_by_the_reconciler_counts() -> None:
    w = World()
    old = NOW - timedelta(minutes=5)
    image = PodFailure("ErrImagePull", "pull access denied")
    w.pods.add("cpu-0", phase="Pending", failure=image, created_at=old)
    w.pods.add("cpu-1", phase="Pending", failure=image, created_at=old)
    w.service.reconcile_once()
    assert w.state("cpu") is BreakerState.OPEN
    assert w.state("gpu") is BreakerState.CLOSED


@pytest.mark.parametrize(
    ("error", "opens"),
    [
        pytest.param(Forbidden("admission webhook denied"), True, id="refused for good"),
        pytest.param(TransientBackendError("apiserver down"), False, id="transient"),
    ],
)
def test_which_refusals_of_the_resume_path_count(error: Exception, opens: bool) -> None:
    w = World()
    w.pods.create_errors.update({"cpu-0": error, "cpu-1": error})  # type: ignore[dict-item]
    w.service.resume("cpu-[0-1]", "", "r1")
    assert (w.state("cpu") is BreakerState.OPEN) is opens


def test_the_pause_ends_by_itself_and_half_open_reopens_at_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "bridge.service.use_cases")
    w = World()
    w.pause_cpu()
    assert "pool cpu paused until 2026-12-03T12:10:00+00:00" in caplog.text
    w.now = NOW + timedelta(seconds=600)
    w.service.reconcile_once()  # the pass logs the end of the pause, once
    assert caplog.text.count("pool cpu resumed: pause ended") == 1
    w.pods.create_calls.clear()
    w.service.resume("cpu-2", "", "r2")
    assert w.pods.create_calls == ["cpu-2"]  # half-open: creates go ahead
    assert caplog.text.count("pool cpu resumed: pause ended") == 1
    w.pods.create_errors["cpu-3"] = Forbidden("full")
    w.service.resume("cpu-3", "", "r3")  # one fail-fast while half-open
    assert w.state("cpu") is BreakerState.OPEN


def test_pool_resume_by_hand_closes_the_breaker(caplog: pytest.LogCaptureFixture) -> None:
    w = World()
    w.pause_cpu()
    row, was_paused = w.service.resume_pool("cpu", "r9")
    assert was_paused
    assert (row.pool, row.state, row.paused_until) == ("cpu", BreakerState.CLOSED, None)
    assert "pool cpu resumed: resumed by hand" in caplog.text
    w.pods.create_calls.clear()
    w.service.resume("cpu-2", "", "r10")
    assert w.pods.create_calls == ["cpu-2"]


def test_pool_resume_of_an_unknown_pool_names_it() -> None:
    with pytest.raises(
        InvalidInput, match=r"pool: 'tpu' is not a configured pool \(pools: cpu, gpu\)"
    ):
        World().service.resume_pool("tpu", "r1")


def test_a_pool_can_turn_its_breaker_off() -> None:
    w = World(
        CONFIG.replace(
            "    image: localhost/slurmd:dev\n",
            "    image: localhost/slurmd:dev\n    circuit_breaker: {failures: 0}\n",
            1,
        )
    )
    w.pods.create_errors.update({f"cpu-{i}": Forbidden("full") for i in range(4)})
    w.service.resume("cpu-[0-3]", "", "r1")
    assert w.state("cpu") is BreakerState.OFF
    assert w.state("gpu") is BreakerState.CLOSED


def test_off_by_default() -> None:
    w = World(MINIMAL_CONFIG)
    w.pods.create_errors.update({f"cpu-{i}": Forbidden("full") for i in range(4)})
    w.service.resume("cpu-[0-3]", "", "r1")
    assert w.state("cpu") is BreakerState.OFF
