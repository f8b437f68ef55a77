"""The deployment's kustomizations as the integration and e2e tests build and apply them: where
they are, ``kustomize build`` with the build cache's kustomize, a Namespace kustomization moved to
a namespace of the test's own, and the admission guard's cluster-scoped objects (removed
afterwards unless they were there before)."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.conftest import ROOT, ProvingGround

KUSTOMIZE_DIR = ROOT / "deploy" / "kustomize"
INCLUSTER_NS = "slurm-incluster"
#: The admission guard (namespace/admission-policy.yaml): cluster-scoped, one for every bridge.
POLICY = "slurm-k8s-bridge-pods"
POLICY_KINDS = ("validatingadmissionpolicybinding", "validatingadmissionpolicy")
#: Each overlay and the kustomization of its Namespace.
NAMESPACE_OF = {
    "base": "namespace",
    "overlays/external": "namespace",
    "overlays/in-cluster": "overlays/in-cluster/namespace",
}
#: The Namespace annotations holding the guard's identity and allow-lists (namespace.yaml sets
#: each; allowed-service-accounts and allowed-volume-types have defaults and are left out).
ALLOW_LISTS = (
    "slurm-k8s-bridge.io/allowed-images",
    "slurm-k8s-bridge.io/allowed-host-paths",
    "slurm-k8s-bridge.io/allowed-secrets",
    "slurm-k8s-bridge.io/allowed-node-selectors",
    "slurm-k8s-bridge.io/allowed-tolerations",
    "slurm-k8s-bridge.io/allowed-capabilities",
    "slurm-k8s-bridge.io/allowed-pod-options",
    "slurm-k8s-bridge.io/bridge-identities",
)


def kustomize(proving_ground: ProvingGround, path: Path) -> str:
    result = subprocess.run(
        [str(proving_ground.layout.kustomize_bin), "build", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def apply_namespace(
    proving_ground: ProvingGround, kustomization: str, namespace: str, scratch: Path
) -> None:
    """The administrator's part of ``kustomization`` moved to ``namespace`` (as a site would)."""
    scratch.mkdir(parents=True, exist_ok=True)
    (scratch / "kustomization.yaml").write_text(
        f"namespace: {namespace}\nresources:\n  - "
        f"{os.path.relpath(KUSTOMIZE_DIR / kustomization, scratch)}\n"
    )
    proving_ground.kubectl("apply", "-f", "-", input_text=kustomize(proving_ground, scratch))


def wait_for(what: str, probe: Callable[[], bool], timeout_s: float, interval_s: float = 2) -> None:
    deadline = time.monotonic() + timeout_s
    while not probe():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}")
        time.sleep(interval_s)


def delete_namespace(proving_ground: ProvingGround, namespace: str) -> None:
    proving_ground.kubectl(
        "delete",
        "namespace",
        namespace,
        "--ignore-not-found",
        "--wait=true",
        "--timeout=180s",
        timeout=200,
    )


def policy_objects(proving_ground: ProvingGround) -> set[str]:
    """The admission guard's cluster-scoped objects that exist now (kind/name)."""
    found = set()
    for kind in POLICY_KINDS:
        if proving_ground.kubectl("get", kind, POLICY, "--ignore-not-found", "-o", "name").strip():
            found.add(f"{kind}/{POLICY}")
    return found


@contextmanager
def admission_policy_cleanup(proving_ground: ProvingGround) -> Iterator[None]:
    """Applying any Namespace kustomization creates the admission guard's policy and binding
    (shared by every bridge namespace); afterwards delete those that did not exist before."""
    before = policy_objects(proving_ground)
    try:
        yield
    finally:
        for name in sorted(policy_objects(proving_ground) - before):
            proving_ground.kubectl("delete", name, "--ignore-not-found")
