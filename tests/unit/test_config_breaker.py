"""The circuit breaker's configuration: defaults, a pool's override, and errors naming the field."""

from __future__ import annotations

import pytest

from bridge.config import parse_config
from bridge.config.reader import config_to_yaml
from bridge.domain.circuit import BreakerPolicy
from bridge.errors import ConfigError
from tests.unit.fakes import MINIMAL_CONFIG

GLOBAL = "bridge:\n  circuit_breaker:\n    failures: 5\n    window_s: 300\n    pause_s: 600\n"
POOL = "    circuit_breaker: {failures: 1, pause_s: 30}\n"


@pytest.mark.parametrize(
    ("text", "default", "pool"),
    [
        pytest.param(MINIMAL_CONFIG, None, None, id="off unless configured"),
        pytest.param(GLOBAL + MINIMAL_CONFIG, BreakerPolicy(5, 300, 600), None, id="global"),
        pytest.param(
            GLOBAL + MINIMAL_CONFIG + POOL,
            BreakerPolicy(5, 300, 600),
            BreakerPolicy(1, 300, 30),
            id="a pool's own",
        ),
        pytest.param("bridge:\n  circuit_breaker:\n" + MINIMAL_CONFIG, None, None, id="empty: off"),
    ],
)
def test_breaker_settings(text: str, default: BreakerPolicy | None, pool: BreakerPolicy) -> None:
    config = parse_config(text, "bridge.yaml")
    assert config.bridge.circuit_breaker == default
    assert config.pools.pools[0].circuit_breaker == pool
    assert parse_config(config_to_yaml(config)) == config


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "bridge:\n  circuit_breaker:\n    failures: -1\n",
            "bridge.yaml:3: bridge.circuit_breaker.failures: must be 0 (off) or a positive "
            "integer up to 2147483647, got -1",
        ),
        (
            "bridge:\n  circuit_breaker:\n    failure: 3\n",
            "bridge.yaml:3: bridge.circuit_breaker.failure: unknown key; known keys: failures, "
            "window_s, pause_s",
        ),
        (
            "bridge:\n  circuit_breaker:\n    window_s: 0\n",
            "bridge.yaml:3: bridge.circuit_breaker.window_s: must be a positive number up to "
            "3.1536e+07 (seconds), got 0",
        ),
        (
            "bridge:\n  circuit_breaker:\n    pause_s: soon\n",
            "bridge.yaml:3: bridge.circuit_breaker.pause_s: must be a positive number up to "
            "3.1536e+07 (seconds), got 'soon'",
        ),
        (
            "bridge:\n  circuit_breaker: 5\n",
            "bridge.yaml:2: bridge.circuit_breaker: must be a mapping, got 5",
        ),
    ],
)
def test_bridge_breaker_errors_name_the_field(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(text + MINIMAL_CONFIG, "bridge.yaml")
    assert str(caught.value) == message


def test_pool_breaker_errors_name_the_pool_field() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(MINIMAL_CONFIG + "    circuit_breaker:\n      failures: true\n", "bridge.yaml")
    assert str(caught.value) == (
        "bridge.yaml:11: pools[0].circuit_breaker.failures: must be 0 (off) or a positive "
        "integer up to 2147483647, got True"
    )
