"""Unit tests are hermetic: the caller's Slurm, Kubernetes and bridge settings never reach them."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.unit.fake_kube_api import FakeApiServer
from tests.unit.mutual_tls import write_pki

#: Read by the code under test (and by the fakes, which record the environment they are given).
CALLER_SETTINGS = ("SLURM_CONF", "KUBECONFIG")
CALLER_SETTINGS_PREFIX = "SKB_"


@pytest.fixture(autouse=True)
def _without_the_callers_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    # An admin's shell exports SLURM_CONF or KUBECONFIG; the bridge's SKB_* override its config.
    for name in list(os.environ):
        if name in CALLER_SETTINGS or name.startswith(CALLER_SETTINGS_PREFIX):
            monkeypatch.delenv(name)


@pytest.fixture
def api_server() -> Iterator[FakeApiServer]:
    """A stub Kubernetes API server on a loopback port, for the adapter's write paths."""
    fake = FakeApiServer()
    yield fake
    fake.close()


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The mutual-TLS certificates (see ``write_pki``), made once per test module."""
    d = tmp_path_factory.mktemp("pki")
    write_pki(d)
    return d
