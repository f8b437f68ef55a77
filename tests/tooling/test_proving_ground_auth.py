"""The proving ground's authentication (``make up AUTH=slurm``): slurm.conf's lines per series and
auth, the pairs it refuses, when a change restarts Slurm, and auth/slurm's key."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import ROOT

from proving_ground import slurm, slurm_series  # isort: skip (conftest sets the path)
from proving_ground.layout import Layout  # isort: skip
from proving_ground.processes import ProvingGroundError, State  # isort: skip

MUNGE_LINES = [
    "AuthType=auth/munge",
    "CredType=cred/munge",
    "AuthInfo=socket=/run/skb-ground/munge/munge.socket.2",
]
SLURM_LINES = ["AuthType=auth/slurm", "CredType=cred/slurm"]


@pytest.mark.parametrize(
    ("series", "auth", "lines"),
    [
        ("22.05", "munge", MUNGE_LINES),
        ("24.11", "munge", MUNGE_LINES),
        ("26.05", "munge", MUNGE_LINES),
        # No AuthInfo: slurmctld finds slurm.key beside slurm.conf and serves clients on sack.
        ("24.11", "slurm", SLURM_LINES),
        ("26.05", "slurm", SLURM_LINES),
    ],
)
def test_slurm_conf_authenticates_as_asked(
    series: str, auth: str, lines: list[str], tmp_path: Path
) -> None:
    text = slurm.render_slurm_conf(Layout(root=ROOT, cache=tmp_path), series, auth)
    auth_keys = ("AuthType=", "CredType=", "AuthInfo=", "AuthAltTypes=")
    assert [line for line in text.splitlines() if line.startswith(auth_keys)] == lines


@pytest.mark.parametrize(
    ("series", "auth", "refusal"),
    [
        ("22.05", "munge", None),
        (
            "22.05",
            "slurm",
            "AUTH=slurm: Slurm 22.05 has no auth/slurm (the plugin came with 23.11)",
        ),
        ("24.11", "munge", None),
        ("24.11", "slurm", None),
        ("26.05", "slurm", None),
    ],
)
def test_check_auth(series: str, auth: str, refusal: str | None) -> None:
    if refusal is None:
        slurm_series.check_auth(series, auth)
        return
    with pytest.raises(ProvingGroundError, match=refusal.replace("(", r"\(").replace(")", r"\)")):
        slurm_series.check_auth(series, auth)


@pytest.mark.parametrize(
    ("environ", "auth"),
    [({}, "munge"), ({"SKB_AUTH": ""}, "munge"), ({"SKB_AUTH": "slurm"}, "slurm")],
)
def test_auth_from_env(environ: dict[str, str], auth: str) -> None:
    assert slurm_series.auth_from_env(environ) == auth


def test_auth_from_env_refuses_others() -> None:
    with pytest.raises(ProvingGroundError, match="AUTH=kerberos: choose one of munge, slurm"):
        slurm_series.auth_from_env({"SKB_AUTH": "kerberos"})


@pytest.mark.parametrize(
    ("recorded", "series", "auth", "switching"),
    [
        ({}, "22.05", None, False),  # a fresh ground runs 22.05 with munge
        ({}, "22.05", "munge", False),
        ({}, "24.11", None, True),
        ({"slurm_series": "26.05"}, "26.05", "slurm", True),
        ({"slurm_series": "26.05", "slurm_auth": "slurm"}, "26.05", "slurm", False),
        ({"slurm_series": "26.05", "slurm_auth": "slurm"}, "26.05", None, False),
        ({"slurm_series": "26.05", "slurm_auth": "slurm"}, "26.05", "munge", True),
        ({"slurm_series": "26.05", "slurm_auth": "slurm"}, "24.11", "slurm", True),
    ],
)
def test_switching_series_or_auth(
    recorded: dict[str, str], series: str, auth: str | None, switching: bool, tmp_path: Path
) -> None:
    layout = Layout(root=tmp_path, cache=tmp_path / "cache")
    state = State(layout)
    state.data.update(recorded)
    state.save()
    assert slurm.switching_series(State(layout), series, auth) is switching
    assert slurm.running_auth(layout) == recorded.get("slurm_auth", "munge")


def test_slurm_key_is_made_once_and_private(tmp_path: Path) -> None:
    layout = Layout(root=tmp_path, cache=tmp_path / "cache")
    key = slurm.ensure_slurm_key(layout)
    assert key == layout.slurm_conf.parent / "slurm.key"
    first = key.read_bytes()
    assert len(first) >= 32
    assert key.stat().st_mode & 0o777 == 0o600
    assert slurm.ensure_slurm_key(layout).read_bytes() == first
