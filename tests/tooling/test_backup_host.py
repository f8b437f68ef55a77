"""The proving ground's two-controller mode (``make up HA=1``, dev/proving_ground/backup_host.py)
without starting it: slurm.conf's controller lines, the backup host's /etc/hosts, each host's
bridge configuration, the mode's switch, and the launcher that puts a program on that host
(run for real in a namespace of its own: its host name and binds, and its exec)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import ROOT

from bridge.config.reader import config_from_dict  # isort: skip
from proving_ground import backup_host, host_namespace, slurm  # isort: skip
from proving_ground.layout import HA_PID_DIR, HOST_IP, Layout  # isort: skip
from proving_ground.processes import ProvingGroundError  # isort: skip


def _controller_lines(text: str) -> list[str]:
    keys = ("SlurmctldHost=", "SlurmctldTimeout=", "SlurmctldPidFile=", "SlurmctldLogFile=")
    return [line for line in text.splitlines() if line.startswith(keys)]


@pytest.mark.parametrize(
    ("ha", "expected"),
    [
        (
            False,
            [
                f"SlurmctldHost={backup_host.primary_host()}({HOST_IP})",
                "SlurmctldPidFile={root}/.local/slurm/state/slurmctld.pid",
                "SlurmctldLogFile={root}/.local/logs/slurmctld.log",
            ],
        ),
        (
            # The backup second; each host's pid file its own (in StateSaveLocation each would
            # find, and signal, the other's PID); both log to stderr, the ground keeps each.
            True,
            [
                f"SlurmctldHost={backup_host.primary_host()}({HOST_IP})",
                "SlurmctldHost=skb-ctl-b(10.213.0.2)",
                "SlurmctldTimeout=10",
                f"SlurmctldPidFile={HA_PID_DIR}/slurmctld.pid",
            ],
        ),
    ],
)
def test_slurm_conf_names_the_controllers(ha: bool, expected: list[str], tmp_path: Path) -> None:
    text = slurm.render_slurm_conf(Layout(root=ROOT, cache=tmp_path), ha=ha)
    assert _controller_lines(text) == [line.format(root=ROOT) for line in expected]


@pytest.mark.parametrize(
    ("hosts", "expected"),
    [
        # The primary's name leaves its loopback line (the other names stay), the cloud names
        # and comments stay, both controllers are added at their addresses.
        (
            "127.0.0.1 localhost\n127.0.0.1 vm\n# note\n127.0.0.1 cpu-0\n",
            "127.0.0.1 localhost\n# note\n127.0.0.1 cpu-0\n10.213.0.1 vm\n10.213.0.2 skb-ctl-b\n",
        ),
        (
            "127.0.0.1 localhost vm vm.example\n",
            "127.0.0.1 localhost vm.example\n10.213.0.1 vm\n10.213.0.2 skb-ctl-b\n",
        ),
        ("", "10.213.0.1 vm\n10.213.0.2 skb-ctl-b\n"),
    ],
)
def test_backup_hosts_file(hosts: str, expected: str) -> None:
    controllers = {"vm": "10.213.0.1", "skb-ctl-b": "10.213.0.2"}
    assert backup_host.hosts_text(hosts, controllers) == expected


def test_each_host_s_bridge_elects_and_forwards_over_mutual_tls(tmp_path: Path) -> None:
    base: dict[str, Any] = yaml.safe_load((ROOT / "dev" / "bridge.yaml").read_text())
    config = backup_host.bridge_config(base, tmp_path, "10.213.0.2")
    assert config["kubernetes"]["leader_election"] is True
    assert config["bridge"]["tcp_listen"] == "10.213.0.2:6831"
    assert config["bridge"]["tls_client_names"] == [backup_host.primary_host(), "skb-ctl-b"]
    assert config["slurm"]["conf_server"] == "10.213.0.1:6817,10.213.0.2:6817"
    assert "leader_election" not in base["kubernetes"]  # the base is not changed
    checked = config_from_dict(config, "ha.yaml", {})
    assert checked.bridge.forward_address() == "10.213.0.2:6831"


@pytest.mark.parametrize(
    ("value", "wanted"), [("", False), ("0", False), ("1", True), ("yes", None)]
)
def test_the_mode_comes_from_ha(value: str, wanted: bool | None) -> None:
    if wanted is None:
        with pytest.raises(ProvingGroundError, match="SKB_HA='yes'"):
            backup_host.wanted_from_env({"SKB_HA": value})
    else:
        assert backup_host.wanted_from_env({"SKB_HA": value}) is wanted


@pytest.mark.parametrize("bad", ["nocolon", ":/x", "/x:"])
def test_launcher_refuses_a_bind_without_both_paths(bad: str) -> None:
    with pytest.raises(SystemExit):
        host_namespace.main(["--hostname", "h", "--bind", bad, "--", "true"])


@pytest.mark.skipif(os.geteuid() != 0, reason="namespaces need root")
def test_launcher_names_the_host_binds_and_execs(tmp_path: Path) -> None:
    source, target = tmp_path / "source", tmp_path / "target"
    source.mkdir()
    target.mkdir()
    (source / "mine").write_text("the backup host's")
    # A private mount namespace of our own (as `ip netns exec` makes one) around the launcher.
    shown = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "--",
         sys.executable, "-m", "proving_ground.host_namespace", "--hostname", "skb-test-host",
         "--bind", f"{source}:{target}", "--",
         "sh", "-c", f"hostname; cat {target}/mine"],
        env={**os.environ, "PYTHONPATH": str(ROOT / "dev")},
        capture_output=True, text=True, timeout=30, check=True,
    )  # fmt: skip
    name, content = shown.stdout.splitlines()
    assert name == "skb-test-host"
    assert content == "the backup host's"
    assert not (target / "mine").exists()  # the bind was the namespace's only
    assert os.uname().nodename != "skb-test-host"
