"""The external overlay applied to the proving ground's API server in a namespace of the test's
own, as a user moves it: its ServiceAccount (a kubeconfig made by make-kubeconfig.sh) can do
exactly the bridge's pod work and nothing else, and `kubectl delete -k` removes the bridge's
objects and leaves the Namespace and the admission guard.

Needs the kube-apiserver and a kwok node (the ServiceAccount's probe pod lands there; nothing
runs)."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import ProvingGround
from tests.integration.manifests import (
    KUSTOMIZE_DIR,
    admission_policy_cleanup,
    apply_namespace,
    delete_namespace,
    kustomize,
    policy_objects,
)

pytestmark = pytest.mark.integration

EXTERNAL_NS = "skb-e2e-external"
KEPT_NS = "skb-e2e-kept"


def test_delete_leaves_the_namespace(proving_ground: ProvingGround, tmp_path: Path) -> None:
    """Applied with `kubectl apply -k` into a Namespace the test made, `kubectl delete -k`
    removes the bridge's objects and leaves the Namespace (and the guard) alone."""
    wrapper = tmp_path / "wrapper"
    wrapper.mkdir()
    (wrapper / "kustomization.yaml").write_text(
        f"namespace: {KEPT_NS}\nresources:\n  - "
        f"{os.path.relpath(KUSTOMIZE_DIR / 'overlays' / 'external', wrapper)}\n"
    )
    guard = policy_objects(proving_ground)
    proving_ground.kubectl("create", "namespace", KEPT_NS)
    try:
        proving_ground.kubectl("apply", "-k", str(wrapper))
        assert (
            proving_ground.kubectl(
                "-n", KEPT_NS, "get", "serviceaccount", "slurm-k8s-bridge", "-o", "name"
            ).strip()
            == "serviceaccount/slurm-k8s-bridge"
        )
        proving_ground.kubectl("delete", "-k", str(wrapper), "--wait=true", timeout=120)
        phase = proving_ground.kubectl(
            "get", "namespace", KEPT_NS, "-o", "jsonpath={.status.phase}"
        )
        assert phase == "Active"
        left = proving_ground.kubectl(
            "-n", KEPT_NS, "get", "serviceaccount,role,rolebinding,service",
            "-l", "app.kubernetes.io/part-of=slurm-k8s-bridge", "-o", "name",
        )  # fmt: skip
        assert left.strip() == ""
        assert policy_objects(proving_ground) == guard
    finally:
        delete_namespace(proving_ground, KEPT_NS)


@pytest.fixture(scope="module")
def external(
    proving_ground: ProvingGround, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Path]:
    """The external overlay applied in a namespace of the test's own (the way a user moves it),
    and a kubeconfig for its ServiceAccount made by make-kubeconfig.sh."""
    tmp_path = tmp_path_factory.mktemp("external")
    wrapper = tmp_path / "wrapper"
    wrapper.mkdir()
    (wrapper / "kustomization.yaml").write_text(
        f"namespace: {EXTERNAL_NS}\nresources:\n  - "
        f"{os.path.relpath(KUSTOMIZE_DIR / 'overlays' / 'external', wrapper)}\n"
    )
    with admission_policy_cleanup(proving_ground):
        yield from _external(proving_ground, tmp_path, wrapper)


def _external(proving_ground: ProvingGround, tmp_path: Path, wrapper: Path) -> Iterator[Path]:
    try:
        # The ground's allow-lists (kwok's node selector and toleration, below).
        apply_namespace(
            proving_ground,
            "../../dev/proving_ground/namespace",
            EXTERNAL_NS,
            tmp_path / "namespace",
        )
        proving_ground.kubectl("apply", "-f", "-", input_text=kustomize(proving_ground, wrapper))
        kubeconfig = tmp_path / "bridge.kubeconfig"
        script = KUSTOMIZE_DIR / "overlays" / "external" / "make-kubeconfig.sh"
        env = {
            **proving_ground.env,
            "PATH": f"{proving_ground.layout.kubernetes_bin}:{os.environ.get('PATH', '')}",
        }
        result = subprocess.run(
            [str(script), "-n", EXTERNAL_NS, "-d", "1h", str(kubeconfig)],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert result.returncode == 0, result.stderr
        yield kubeconfig
    finally:
        delete_namespace(proving_ground, EXTERNAL_NS)


def as_bridge(
    proving_ground: ProvingGround, kubeconfig: Path, *argv: str, input_text: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            str(proving_ground.layout.kubernetes_bin / "kubectl"),
            f"--kubeconfig={kubeconfig}",
            *argv,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        input=input_text,
        check=False,
    )


SIM_POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    # The bridge's labels: the admission guard admits nothing else from its ServiceAccount.
    "metadata": {
        "name": "rbac-probe",
        "labels": {
            "app.kubernetes.io/managed-by": "slurm-k8s-bridge",
            "slurm-k8s-bridge.io/cluster": "probe",
            "slurm-k8s-bridge.io/pool": "probe",
            "slurm-k8s-bridge.io/node": "rbac-probe",
        },
    },
    "spec": {
        # A kwok node: nothing real runs, the API calls are what is tested.
        "nodeSelector": {"type": "kwok"},
        "tolerations": [
            {"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}
        ],
        "containers": [{"name": "c", "image": "localhost/slurm-k8s-bridge/slurmd:dev"}],
        # As the bridge renders its pods: the guard admits no ServiceAccount token.
        "automountServiceAccountToken": False,
    },
}


@pytest.mark.parametrize(
    ("verb", "resource", "namespace", "allowed"),
    [
        ("create", "pods", EXTERNAL_NS, True),
        ("watch", "pods", EXTERNAL_NS, True),
        ("delete", "pods", EXTERNAL_NS, True),
        ("create", "events", EXTERNAL_NS, True),
        # cluster-autoscaler's NotTriggerScaleUp on a pod fails its node fast
        ("list", "events", EXTERNAL_NS, True),
        ("get", "secrets", EXTERNAL_NS, False),
        ("update", "pods", EXTERNAL_NS, False),
        ("list", "pods", "kube-system", False),
        ("list", "pods", "slurm", False),
        ("list", "nodes", None, False),
    ],
)
def test_external_service_account_can_i(
    proving_ground: ProvingGround,
    external: Path,
    *,
    verb: str,
    resource: str,
    namespace: str | None,
    allowed: bool,
) -> None:
    where = ["-n", namespace] if namespace else []
    answer = as_bridge(proving_ground, external, "auth", "can-i", verb, resource, *where)
    assert answer.stdout.strip() == ("yes" if allowed else "no"), answer.stderr


def test_external_service_account_real_requests(
    proving_ground: ProvingGround, external: Path
) -> None:
    ns = ["-n", EXTERNAL_NS]
    created = as_bridge(
        proving_ground, external, *ns, "create", "-f", "-", input_text=json.dumps(SIM_POD)
    )
    assert created.returncode == 0, created.stderr
    watched = as_bridge(
        proving_ground,
        external,
        *ns,
        "get",
        "pods",
        "--watch",
        "-o",
        "name",
        "--request-timeout=3s",
    )
    assert "pod/rbac-probe" in watched.stdout, watched.stderr
    deleted = as_bridge(
        proving_ground, external, *ns, "delete", "pod", "rbac-probe", "--grace-period=0", "--force"
    )
    assert deleted.returncode == 0, deleted.stderr
    for argv in (
        (*ns, "get", "secrets"),
        ("-n", "slurm", "get", "pods"),
        ("get", "nodes"),
    ):
        denied = as_bridge(proving_ground, external, *argv)
        assert denied.returncode != 0
        assert "Forbidden" in denied.stderr, (argv, denied.stderr)
