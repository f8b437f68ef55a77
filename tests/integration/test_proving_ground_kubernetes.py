"""The proving ground's Kubernetes side alone (kube-apiserver and kwok; no Slurm, no slurmd): kwok
nodes carry a few hundred pods and let them go, kwok leaves a custom readiness gate to its
owner, and the API server enforces RBAC for a namespaced ServiceAccount."""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from tests.cluster import wait_for
from tests.conftest import ProvingGround

pytestmark = pytest.mark.integration

#: Enough pods to show kwok runs them in bulk; the site-sized counts (1,000 pods and more) are
#: ``make bench``'s, minutes each, not ``make test``'s.
KWOK_PODS = 200


def test_hundreds_of_pods_on_kwok_nodes_run_and_go(proving_ground: ProvingGround) -> None:
    pg = proving_ground
    namespace = "pg-scale"
    pg.kubectl("create", "namespace", namespace, check=False)
    template = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"namespace": namespace, "labels": {"app": "scale"}},
        "spec": {
            "nodeSelector": {"type": "kwok"},
            "tolerations": [{"key": "kwok.x-k8s.io/node", "operator": "Exists"}],
            "containers": [{"name": "c", "image": "localhost/fake:1"}],
        },
    }
    items = []
    for i in range(KWOK_PODS):
        pod = json.loads(json.dumps(template))
        pod["metadata"]["name"] = f"scale-{i:03d}"
        items.append(pod)
    started = time.monotonic()
    try:
        pg.kubectl(
            "apply",
            "-f",
            "-",
            input_text=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}),
            timeout=300,
        )

        def running() -> int | None:
            out = pg.kubectl(
                "-n",
                namespace,
                "get",
                "pods",
                "--field-selector=status.phase=Running",
                "-o",
                "name",
                timeout=60,
            )
            count = len(out.split())
            return count if count == KWOK_PODS else None

        wait_for(f"{KWOK_PODS} pods Running", running, 300, every=2)
        ran = time.monotonic() - started
        pg.kubectl(
            "-n", namespace, "delete", "pods", "--all", "--wait=true", "--timeout=300s", timeout=320
        )
        gone = time.monotonic() - started - ran
        left = pg.kubectl("-n", namespace, "get", "pods", "-o", "name").split()
        assert left == []
        print(f"{KWOK_PODS} kwok pods: Running after {ran:.1f}s, deleted in {gone:.1f}s")
    finally:
        pg.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def test_kwok_leaves_a_readiness_gate_to_its_owner(proving_ground: ProvingGround) -> None:
    """A kubelet never writes a custom readiness gate's condition; the ground's kwok must not
    either (kwok's default pod stage sets it True), or the bridge's ``registered`` condition has
    two writers on kwok and the patch count at scale measures their fight."""
    pg = proving_ground
    namespace = "pg-gate"
    gate = "example.com/owned-by-the-test"
    pg.kubectl("create", "namespace", namespace, check=False)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "gated", "namespace": namespace},
        "spec": {
            "nodeSelector": {"type": "kwok"},
            "tolerations": [{"key": "kwok.x-k8s.io/node", "operator": "Exists"}],
            "readinessGates": [{"conditionType": gate}],
            "containers": [{"name": "c", "image": "localhost/fake:1"}],
        },
    }

    def status() -> dict[str, object]:
        raw = pg.kubectl("-n", namespace, "get", "pod", "gated", "-o", "json")
        found: dict[str, object] = json.loads(raw).get("status") or {}
        return found

    def conditions() -> dict[str, str]:
        listed = status().get("conditions") or []
        assert isinstance(listed, list)
        return {c["type"]: c["status"] for c in listed}

    try:
        pg.kubectl("apply", "-f", "-", input_text=json.dumps(pod))
        wait_for("the gated pod Running on kwok", lambda: status().get("phase") == "Running", 60)
        assert gate not in conditions(), conditions()
        # Its owner writes it; kwok's later passes keep it as written.
        owned = {"status": {"conditions": [{"type": gate, "status": "False"}]}}
        pg.kubectl(
            "-n", namespace, "patch", "pod", "gated", "--subresource=status",
            "--type=strategic", "-p", json.dumps(owned),
        )  # fmt: skip
        time.sleep(5)
        assert conditions()[gate] == "False", conditions()
        assert conditions()["ContainersReady"] == "True", "kwok still runs the pod"
    finally:
        pg.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def test_rbac_is_enforced_for_a_namespaced_service_account(proving_ground: ProvingGround) -> None:
    pg = proving_ground
    namespace = "pg-rbac"
    manifests = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": "pods-only", "namespace": namespace},
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "pods-only", "namespace": namespace},
            "rules": [
                {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "pods-only", "namespace": namespace},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "pods-only",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "pods-only", "namespace": namespace}],
        },
    ]
    pg.kubectl(
        "apply",
        "-f",
        "-",
        input_text=json.dumps({"apiVersion": "v1", "kind": "List", "items": manifests}),
    )
    try:
        token = pg.kubectl("-n", namespace, "create", "token", "pods-only").strip()
        as_sa = [
            str(pg.layout.kubernetes_bin / "kubectl"),
            "--kubeconfig=/dev/null",
            "--server=https://127.0.0.1:6443",
            f"--certificate-authority={pg.layout.pki / 'ca.crt'}",
            f"--token={token}",
        ]

        def attempt(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [*as_sa, *args], capture_output=True, text=True, timeout=30, check=False
            )

        allowed = attempt("-n", namespace, "get", "pods")
        assert allowed.returncode == 0, allowed.stderr
        for args in (("-n", namespace, "get", "secrets"), ("-n", "slurm", "get", "pods")):
            denied = attempt(*args)
            assert denied.returncode != 0
            assert "Forbidden" in denied.stderr and "(403)" not in denied.stdout, denied.stderr
            assert "system:serviceaccount:pg-rbac:pods-only" in denied.stderr
    finally:
        pg.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
