"""ListPools/ResumePool and ``slurm-k8s-bridge pool``/``status``: a real gRPC server on a Unix
socket in front of a real BridgeService on the fakes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from bridge.api import build_server
from bridge.cli.main import main
from bridge.domain.circuit import BreakerState
from bridge.errors import Forbidden, InvalidInput
from bridge.rpc.client import BridgeClient
from tests.unit.test_service_breaker import NOW, PAUSED, World

UNTIL = (NOW + timedelta(seconds=600)).strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.fixture
def world() -> World:
    return World()


@pytest.fixture
def target(world: World, tmp_path: Path) -> Iterator[str]:
    sock = tmp_path / "b.sock"
    server = build_server(world.service, unix_socket=str(sock), socket_mode=0o600, max_workers=2)
    server.start()
    yield f"unix:{sock}"
    server.stop(None)


def test_list_pools_shows_each_pool_breaker(world: World, target: str) -> None:
    world.pause_cpu()
    with BridgeClient(target, timeout_s=5) as client:
        cpu, gpu = client.list_pools()
    assert (cpu.pool, cpu.state, cpu.paused_until) == (
        "cpu",
        BreakerState.OPEN,
        NOW + timedelta(seconds=600),
    )
    assert cpu.last_reason == "k8s: Forbidden: full"
    assert (cpu.policy.failures, cpu.policy.window_s, cpu.policy.pause_s) == (2, 60, 600)
    assert (gpu.pool, gpu.state, gpu.recent_failures, gpu.paused_until) == (
        "gpu",
        BreakerState.CLOSED,
        0,
        None,
    )


@pytest.mark.parametrize(("pause", "was_paused"), [(True, True), (False, False)])
def test_resume_pool_closes_the_breaker(
    world: World, target: str, pause: bool, was_paused: bool
) -> None:
    if pause:
        world.pause_cpu()
    with BridgeClient(target, timeout_s=5) as client:
        pool, paused = client.resume_pool("cpu", "r1")
    assert (pool.pool, pool.state, paused) == ("cpu", BreakerState.CLOSED, was_paused)
    world.pods.create_calls.clear()
    world.service.resume("cpu-2", "", "r2")
    assert world.pods.create_calls == ["cpu-2"]


@pytest.mark.parametrize(
    ("pool", "message"),
    [
        ("tpu", "pool: 'tpu' is not a configured pool (pools: cpu, gpu)"),
        ("", "pool: required, got an empty string"),
    ],
)
def test_resume_pool_rejects_a_pool_it_does_not_have(target: str, pool: str, message: str) -> None:
    with BridgeClient(target, timeout_s=5) as client, pytest.raises(InvalidInput) as caught:
        client.resume_pool(pool)
    assert message in str(caught.value)  # INVALID_ARGUMENT, naming it


def test_cli_pool_list_status_and_resume(
    world: World, target: str, capsys: pytest.CaptureFixture[str]
) -> None:
    world.pause_cpu()
    assert main(["pool", "list", "--socket", target]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == [
        "POOL",
        "BREAKER",
        "FAILS",
        "POLICY",
        "PAUSED",
        "UNTIL",
        "LAST",
        "REASON",
    ]
    assert lines[1].split()[:3] == ["cpu", "open", "0/2"]
    assert lines[1].endswith(f"{UNTIL}  k8s: Forbidden: full")
    assert lines[2].split()[:3] == ["gpu", "closed", "0/2"]
    assert main(["pool", "status", "cpu", "--socket", target]) == 0
    out = capsys.readouterr().out
    assert "breaker:       open\n" in out
    assert f"paused until:  {UNTIL}\n" in out
    assert "policy:        2 in 60s, pause 600s\n" in out
    assert main(["pool", "status", "nope", "--socket", target]) == 1
    assert "slurm-k8s-bridge pool: pool: 'nope' is not a configured pool" in capsys.readouterr().err
    assert main(["pool", "resume", "cpu", "--socket", target]) == 0
    assert capsys.readouterr().out == "pool cpu resumed: breaker closed\n"
    assert main(["pool", "resume", "cpu", "--socket", target]) == 0
    assert capsys.readouterr().out == "pool cpu was not paused: breaker closed\n"
    assert main(["pool", "resume", "tpu", "--socket", target]) == 1
    assert "'tpu' is not a configured pool (pools: cpu, gpu)" in capsys.readouterr().err


def test_cli_pool_list_json(world: World, target: str, capsys: pytest.CaptureFixture[str]) -> None:
    world.pause_cpu()
    assert main(["pool", "list", "--json", "--socket", target]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["pools"][0] == {
        "pool": "cpu",
        "state": "open",
        "failures": 2,
        "window_s": 60.0,
        "pause_s": 600.0,
        "recent_failures": 0,
        "paused_until": UNTIL,
        "last_reason": "k8s: Forbidden: full",
    }


def test_status_names_the_paused_pools(
    world: World, target: str, capsys: pytest.CaptureFixture[str]
) -> None:
    world.pause_cpu()
    world.pods.create_errors["gpu-0"] = Forbidden("full")  # gpu: 1 of 2, still closed
    world.service.resume("gpu-0", "", "r2")
    main(["status", "--socket", target])
    out = capsys.readouterr().out
    assert f"pool cpu paused until {UNTIL}: k8s: Forbidden: full\n" in out
    assert "pool gpu paused" not in out
    main(["status", "--socket", target, "--json"])
    assert "paused until" not in capsys.readouterr().out
    assert PAUSED.startswith("k8s: PoolPaused: pool cpu paused until " + UNTIL)
