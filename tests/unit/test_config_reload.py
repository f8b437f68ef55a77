"""Reloading the configuration without a restart (issue 14): what a reload takes over, what it
keeps, and the rollout it starts, with a temp config file and the in-memory fakes."""

from __future__ import annotations

import logging
import threading
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bridge.config import load_config, parse_config
from bridge.config.changes import ConfigChange, config_change
from bridge.domain.circuit import BreakerPolicy, CircuitBreakers
from bridge.domain.nodes import SlurmNode
from bridge.domain.reconcile import Action, PowerDownAsap
from bridge.errors import BridgeError
from bridge.runtime.config_reload import ConfigReloader, FileIdentity
from bridge.runtime.reconciler import Reconciler
from bridge.settings import BridgeConfig
from tests.unit.fakes import MINIMAL_CONFIG, Update
from tests.unit.harness import Harness

NOW = datetime(2026, 12, 2, 12, 0, 0, tzinfo=UTC)
MARKED = (
    MINIMAL_CONFIG
    + """\
    pod_template:
      spec:
        containers:
          - name: slurmd
            env:
              - {name: SKB_ROLLOUT_MARK, value: "2"}
"""
)
GPU = """\
  - name: gpu
    nodes: gpu-[0-1]
    cpus: 8
    real_memory_mb: 4096
    image: localhost/slurmd:dev
"""


@pytest.mark.parametrize(
    ("new_text", "change"),
    [
        (MINIMAL_CONFIG, ConfigChange((), ())),
        (MARKED, ConfigChange(("cpu",), ())),
        (MINIMAL_CONFIG.replace("slurmd:dev", "slurmd:next"), ConfigChange(("cpu",), ())),
        (
            MINIMAL_CONFIG.replace("cpu-[0-3]", "cpu-[0-3]\n    image_pull_timeout_s: 60"),
            ConfigChange(("cpu",), ()),
        ),
        (MINIMAL_CONFIG + GPU, ConfigChange(("gpu",), ())),
        (
            "bridge:\n  socket: /run/other.sock\n" + MINIMAL_CONFIG,
            ConfigChange((), ("bridge.socket",)),
        ),
        (
            "kubernetes:\n  namespace: other\n" + MARKED,
            ConfigChange(("cpu",), ("kubernetes.namespace",)),
        ),
        (
            MINIMAL_CONFIG.replace("cluster_name: lab", "cluster_name: other"),
            ConfigChange((), ("cluster_name",)),
        ),
    ],
    ids=["same", "template", "image", "patience", "pool added", "socket", "both", "cluster"],
)
def test_config_change(new_text: str, change: ConfigChange) -> None:
    old = parse_config(MINIMAL_CONFIG)
    assert config_change(old, parse_config(new_text)) == change


def test_a_removed_pool_is_a_changed_pool() -> None:
    old, new = parse_config(MINIMAL_CONFIG + GPU), parse_config(MINIMAL_CONFIG)
    assert config_change(old, new) == ConfigChange(("gpu",), ())


class Setup:
    """A service started from a config file in ``tmp_path``, with one idle node on a pod."""

    def __init__(self, tmp_path: Path) -> None:
        self.path = tmp_path / "bridge.yaml"
        self.path.write_text(MINIMAL_CONFIG)
        node = SlurmNode("cpu-0", "IDLE", frozenset({"CLOUD"}))
        harness = Harness([node], now=NOW, config=load_config(self.path, environ={}))
        self.slurm, self.pods, self.service = harness.slurm, harness.pods, harness.service
        #: The file's identity as the reloader sees it; tests bump it to say "the file changed".
        self.version = 1
        #: The configurations the reloader handed on after a pool change (budgets follow).
        self.handed_on: list[BridgeConfig] = []
        self.reloader = ConfigReloader(
            self.service,
            str(self.path),
            environ={},
            identity=self._identity,
            on_pools_changed=self.handed_on.append,
        )

    def _identity(self, _path: str) -> FileIdentity:
        return (1, 1, self.version)

    def change_file(self, text: str) -> None:
        self.path.write_text(text)
        self.version += 1


@pytest.mark.parametrize(
    ("new_text", "handed_on"),
    [
        pytest.param(MINIMAL_CONFIG.replace("cpu-[0-3]", "cpu-[0-7]"), True, id="pool grown"),
        pytest.param(MINIMAL_CONFIG + "    disruption_budget: true\n", True, id="budget asked for"),
        pytest.param(MINIMAL_CONFIG, False, id="no pool changed"),
        pytest.param("pools: [", False, id="invalid file"),
    ],
)
def test_a_pool_change_is_handed_on_so_budgets_follow_it(
    tmp_path: Path, new_text: str, handed_on: bool
) -> None:
    setup = Setup(tmp_path)
    setup.change_file(new_text)
    setup.reloader.reload_if_due()
    assert setup.handed_on == ([setup.service.config] if handed_on else [])
    if handed_on:
        assert setup.handed_on[0].pools == setup.service.config.pools


def test_an_unchanged_file_is_not_read(tmp_path: Path) -> None:
    setup = Setup(tmp_path)
    setup.path.write_text("not: [valid")  # would log an error if it were read
    assert setup.reloader.reload_if_due() is False


def test_a_changed_file_swaps_the_pools_in_and_logs_the_new_hashes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    setup = Setup(tmp_path)
    before = setup.service.template_hashes["cpu"]
    setup.change_file(MARKED)
    with caplog.at_level(logging.INFO, logger="bridge.runtime.config_reload"):
        assert setup.reloader.reload_if_due() is True
    after = setup.service.template_hashes["cpu"]
    assert after != before
    assert f"config reloaded from {setup.path}: pools changed: cpu" in caplog.messages
    assert f"template hashes now: cpu={after}" in caplog.messages
    pool = setup.service.config.pools.by_name("cpu")
    assert pool is not None
    assert pool.pod_template["spec"]["containers"][0]["env"][0]["name"] == "SKB_ROLLOUT_MARK"
    # Once: the same file again is no change.
    assert setup.reloader.reload_if_due() is False


def test_sighup_reloads_even_when_the_file_looks_the_same(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    setup = Setup(tmp_path)
    setup.path.write_text(MARKED)  # identity unchanged: only the request makes it read
    setup.reloader.request()
    assert setup.reloader.reload_if_due() is True
    assert setup.reloader.reload_if_due() is False


def test_an_invalid_file_keeps_the_old_config_and_names_the_field(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    setup = Setup(tmp_path)
    old = setup.service.config
    setup.change_file(MINIMAL_CONFIG.replace("cpus: 2", "cpus: four"))
    with caplog.at_level(logging.ERROR, logger="bridge.runtime.config_reload"):
        assert setup.reloader.reload_if_due() is False
    assert setup.service.config is old
    (error,) = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert "pools[0].cpus" in error.getMessage()
    assert "the old one stays" in error.getMessage()


def test_a_setting_that_needs_a_restart_keeps_its_old_value(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    setup = Setup(tmp_path)
    setup.change_file("bridge:\n  socket: /run/elsewhere.sock\n" + MARKED)
    with caplog.at_level(logging.WARNING, logger="bridge.runtime.config_reload"):
        assert setup.reloader.reload_if_due() is True
    assert setup.service.config.bridge.socket != "/run/elsewhere.sock"
    assert any("bridge.socket changed" in m and "restart" in m for m in caplog.messages)
    pool = setup.service.config.pools.by_name("cpu")
    assert pool is not None and "SKB_ROLLOUT_MARK" in str(dict(pool.pod_template))


def test_a_reload_rolls_the_idle_node_through_slurm(tmp_path: Path) -> None:
    setup = Setup(tmp_path)
    setup.service.resume("cpu-0", "", "r1")  # its pod, rendered from the old template
    old_hash = setup.service.template_hashes["cpu"]
    assert setup.pods.pods["cpu-0"].template_hash == old_hash
    assert not any(
        isinstance(a, PowerDownAsap) for a in setup.service.reconcile_once()
    )  # nothing to roll yet
    setup.change_file(MARKED)
    setup.reloader.reload_if_due()
    new_hash = setup.service.template_hashes["cpu"]
    actions = setup.service.reconcile_once()
    reason = f"k8s: Rollout: pool cpu template {old_hash} -> {new_hash}"
    assert PowerDownAsap("cpu-0", reason) in actions
    assert Update(("cpu-0",), "power_down_asap", reason) in setup.slurm.updates
    # The pod stays: Slurm powers the node down and the suspend deletes it.
    assert "cpu-0" in setup.pods.pods
    assert not any(isinstance(a, PowerDownAsap) for a in setup.service.reconcile_once())


def test_breakers_keep_their_count_across_a_reload() -> None:
    policy = BreakerPolicy(failures=2, window_s=60, pause_s=60)
    breakers = CircuitBreakers({"cpu": policy})
    breakers.record_fail_fast("cpu", "k8s: ErrImagePull: x", NOW)
    reloaded = breakers.reconfigured({"cpu": policy, "gpu": policy})
    assert reloaded.status(NOW, ["cpu"])[0].recent_failures == 1
    assert reloaded.status(NOW, ["gpu"])[0].recent_failures == 0
    change = reloaded.record_fail_fast("cpu", "k8s: ErrImagePull: x", NOW)
    assert change is not None and change.paused


def test_a_refused_power_down_asap_is_retried_on_the_next_pass(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    setup = Setup(tmp_path)
    setup.service.resume("cpu-0", "", "r1")
    setup.change_file(MARKED)
    setup.reloader.reload_if_due()
    setup.slurm.fail_next = BridgeError("scontrol: Invalid node state specified")
    with caplog.at_level(logging.WARNING, logger="bridge.service.use_cases"):
        setup.service.reconcile_once()
    assert any("power_down_asap cpu-0 failed" in m for m in caplog.messages)
    assert any(isinstance(a, PowerDownAsap) for a in setup.service.reconcile_once())
    assert setup.slurm.nodes["cpu-0"].power_down_queued


def test_the_reconciler_reloads_before_a_pass(tmp_path: Path) -> None:
    setup = Setup(tmp_path)
    calls: list[str] = []
    passed = threading.Event()

    def before() -> None:
        calls.append("reload")

    original = setup.service.reconcile_once

    def reconcile_once() -> list[Action]:
        calls.append("pass")
        passed.set()
        return original()

    setup.service.reconcile_once = reconcile_once  # type: ignore[method-assign]
    reconciler = Reconciler(setup.service, interval_s=60, min_gap_s=0.01, before_pass=before)
    reconciler.start()
    reconciler.poke()
    assert passed.wait(5)
    reconciler.stop()
    assert calls[:2] == ["reload", "pass"]


def test_a_reload_that_drops_a_node_with_a_pod_drains_it_and_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 29 item 1: the pod of a node no pool owns any more is not deleted as an orphan
    under its jobs; the node is drained through Slurm and the reload warns, naming it."""
    setup = Setup(tmp_path)
    setup.service.resume("cpu-0", "", "r1")
    setup.slurm.nodes["cpu-0"] = SlurmNode("cpu-0", "ALLOCATED", frozenset({"CLOUD"}))
    setup.change_file(MINIMAL_CONFIG.replace("cpu-[0-3]", "cpu-[1-3]"))
    with caplog.at_level(logging.WARNING, logger="bridge.service.use_cases"):
        assert setup.reloader.reload_if_due() is True
    (warning,) = [m for m in caplog.messages if "in no pool now" in m]
    assert "1 node(s) with pods are in no pool now: cpu-0" in warning
    actions = setup.service.reconcile_once()
    assert [type(a).__name__ for a in actions] == ["PowerDownAsap"], actions
    assert "cpu-0" in setup.pods.pods, "the busy node's pod must stay until Slurm powers it down"
