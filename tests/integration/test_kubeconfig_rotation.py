"""A rotated token against the proving ground's real kube-apiserver (issue 28 item 6): one
``PodGateway``, made by ``PodGateway.connect`` from a kubeconfig that holds a token the API server
rejects, answers :class:`Unauthorized` naming the file; once the file is replaced with a valid
token of the bridge's ServiceAccount, the same gateway lists pods, without a restart.

The gateway's selector names a cluster of its own, so the list is empty and touches nothing.
"""

from __future__ import annotations

import logging
import os
import uuid
from pathlib import Path

import pytest
from proving_ground.bridge_daemon import SERVICE_ACCOUNT
from proving_ground.layout import APISERVER_PORT

from bridge.adapters.kubernetes import PodGateway
from bridge.errors import Unauthorized
from bridge.metrics import BridgeMetrics
from tests.cluster import NAMESPACE
from tests.conftest import ProvingGround

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

#: Well formed, signed by nobody: the API server's authenticators all refuse it (401).
REJECTED = "skb-rotation-test-not-a-token"


def kubeconfig_text(pg: ProvingGround, user: str) -> str:
    """A kubeconfig as make-kubeconfig.sh writes it, the user's part given."""
    return f"""apiVersion: v1
kind: Config
clusters:
- name: proving-ground
  cluster:
    certificate-authority: {pg.layout.pki / "ca.crt"}
    server: https://127.0.0.1:{APISERVER_PORT}
users:
- name: {SERVICE_ACCOUNT}
  user:
    {user}
contexts:
- name: bridge
  context: {{cluster: proving-ground, user: {SERVICE_ACCOUNT}, namespace: {NAMESPACE}}}
current-context: bridge
"""


def replace(path: Path, text: str) -> None:
    """Written next to it and renamed over it, as make-kubeconfig.sh and the kubelet do."""
    temporary = path.with_name(path.name + ".new")
    temporary.write_text(text)
    temporary.chmod(0o400)
    os.replace(temporary, path)


@pytest.mark.parametrize("in_token_file", [False, True], ids=["inline-token", "token-file"])
def test_a_rejected_token_is_unauthorized_and_its_replacement_is_used_without_a_restart(
    proving_ground: ProvingGround,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    in_token_file: bool,
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    token_path = tmp_path / "token"
    holder = token_path if in_token_file else kubeconfig
    if in_token_file:
        replace(kubeconfig, kubeconfig_text(proving_ground, "tokenFile: token"))

    def holding(token: str) -> str:
        return token if in_token_file else kubeconfig_text(proving_ground, f"token: {token}")

    replace(holder, holding(REJECTED))
    metrics = BridgeMetrics()
    gateway = PodGateway.connect(
        kubeconfig=str(kubeconfig),
        context=None,
        namespace=NAMESPACE,
        cluster_name=f"skb-rotation-{uuid.uuid4().hex[:8]}",
        counters=metrics,
    )
    try:
        with (
            caplog.at_level(logging.WARNING, logger="bridge.adapters.kubernetes.credentials"),
            pytest.raises(Unauthorized) as rejected,
        ):
            gateway.list_pods()
        assert str(holder) in str(rejected.value)
        assert "the bridge re-reads it" in str(rejected.value)
        (line,) = [r.getMessage() for r in caplog.records if "401 Unauthorized" in r.getMessage()]
        assert str(holder) in line

        valid = proving_ground.kubectl(
            "-n", NAMESPACE, "create", "token", SERVICE_ACCOUNT, "--duration=10m"
        ).strip()
        replace(holder, holding(valid))

        pods, version = gateway.list_pods()  # the same gateway, its same ApiClient
        assert pods == []
        assert version
    finally:
        gateway.close(0)
    labels = {"backend": "kubernetes", "kind": "Unauthorized"}
    errors = metrics.registry.get_sample_value("slurm_k8s_bridge_backend_errors_total", labels)
    assert errors == 1.0
