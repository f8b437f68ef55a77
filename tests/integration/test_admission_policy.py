"""The admission guard of the administrator's kustomization (ValidatingAdmissionPolicy
slurm-k8s-bridge-pods, deploy/kustomize/namespace) on the proving ground's API server: with the
bridge's identity only pods rendered like the bridge renders them are admitted (its labels, images
and hostPaths from the allow-lists); anyone else is not affected.

Needs the kube-apiserver alone: admission is what is tested, so pods are created as server-side
dry runs or with a node selector no node matches, and none runs. What the guard's kustomizations
build is tests/integration/test_kustomize_build.py."""

from __future__ import annotations

import copy
import json
import os
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from bridge.config import load_config
from bridge.domain.pod_rendering import PodSettings, render_pod
from tests.cluster import kubectl_outcome
from tests.conftest import ROOT, ProvingGround
from tests.integration.manifests import (
    ALLOW_LISTS,
    KUSTOMIZE_DIR,
    POLICY,
    admission_policy_cleanup,
    apply_namespace,
    delete_namespace,
    kustomize,
    wait_for,
)

pytestmark = pytest.mark.integration

NAMESPACE = "skb-e2e-admission"
BRIDGE = f"system:serviceaccount:{NAMESPACE}:slurm-k8s-bridge"
#: Bridge configurations whose pools must pass the default allow-lists (namespace/): the
#: proving ground's (it applies them), the in-cluster overlay's and docker-compose's.
CONFIGS = (
    ROOT / "dev" / "bridge.yaml",
    KUSTOMIZE_DIR / "overlays" / "in-cluster" / "bridge.yaml",
    ROOT / "deploy" / "compose" / "bridge.yaml",
)
BRIDGE_LABELS = {
    "app.kubernetes.io/managed-by": "slurm-k8s-bridge",
    "slurm-k8s-bridge.io/cluster": "admission",
    "slurm-k8s-bridge.io/pool": "probe",
}


@pytest.fixture(scope="module")
def applied(
    proving_ground: ProvingGround, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ProvingGround]:
    """The Namespace and external overlay in a namespace of the test's own (as a user moves
    them); everything removed afterwards, the cluster-scoped policy objects too unless they were
    there before."""
    scratch = tmp_path_factory.mktemp("admission")
    wrapper = scratch / "wrapper"
    wrapper.mkdir()
    (wrapper / "kustomization.yaml").write_text(
        f"namespace: {NAMESPACE}\nresources:\n  - "
        f"{os.path.relpath(KUSTOMIZE_DIR / 'overlays' / 'external', wrapper)}\n"
    )
    with admission_policy_cleanup(proving_ground):
        try:
            apply_namespace(proving_ground, "namespace", NAMESPACE, scratch / "namespace")
            proving_ground.kubectl(
                "apply", "-f", "-", input_text=kustomize(proving_ground, wrapper)
            )
            # The API server takes a moment to load a new policy.
            wait_for(
                "the admission policy in force",
                lambda: create(proving_ground, hand_made_pod(), dry_run=True).returncode != 0,
                timeout_s=60,
                interval_s=1,
            )
            yield proving_ground
        finally:
            delete_namespace(proving_ground, NAMESPACE)


def create(
    pg: ProvingGround, pod: dict[str, Any], *, as_bridge: bool = True, dry_run: bool = False
) -> subprocess.CompletedProcess[str]:
    return kubectl_outcome(
        pg,
        "-n",
        NAMESPACE,
        *([f"--as={BRIDGE}"] if as_bridge else []),
        "create",
        *(["--dry-run=server"] if dry_run else []),
        "-f",
        "-",
        input_text=json.dumps(pod),
    )


def hand_made_pod() -> dict[str, Any]:
    """What a stolen token would be used for: the node's root file system, privileged."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "escape"},
        "spec": {
            "nodeSelector": {"slurm-k8s-bridge.io/none": "x"},
            "containers": [
                {
                    "name": "c",
                    "image": "localhost/slurm-k8s-bridge/slurmd:dev",
                    "command": ["sleep", "infinity"],
                    "securityContext": {"privileged": True},
                    "volumeMounts": [{"name": "host", "mountPath": "/host"}],
                }
            ],
            "volumes": [{"name": "host", "hostPath": {"path": "/"}}],
        },
    }


def labelled(pod: dict[str, Any], name: str) -> dict[str, Any]:
    pod = copy.deepcopy(pod)
    pod["metadata"] = {
        "name": name,
        "labels": {**BRIDGE_LABELS, "slurm-k8s-bridge.io/node": name},
    }
    return pod


def rendered_pods() -> list[tuple[str, dict[str, Any]]]:
    """One pod per pool of every configuration, rendered by the bridge's own code into the
    test's namespace."""
    pods = []
    for path in CONFIGS:
        config = load_config(path, environ={})
        settings = PodSettings(
            namespace=NAMESPACE,
            cluster_name=config.cluster_name,
            conf_server=config.slurm.conf_server,
            munge_key_secret=config.slurm.munge_key_secret,
            node_service=config.kubernetes.node_service,
            cluster_domain=config.kubernetes.cluster_domain,
        )
        for pool in config.pools:
            node = pool.node_names[0]
            pods.append((f"{path.parent.name}/{pool.name}", render_pod(pool, node, settings)))
    return pods


def refused_by_policy(result: subprocess.CompletedProcess[str], message: str) -> None:
    assert result.returncode != 0, result.stdout
    assert f"ValidatingAdmissionPolicy '{POLICY}'" in result.stderr, result.stderr
    assert message in result.stderr, result.stderr


def test_hand_made_pod_is_refused(applied: ProvingGround) -> None:
    refused_by_policy(
        create(applied, hand_made_pod()),
        "slurm-k8s-bridge-pods: the bridge creates only its own slurmd pods",
    )


def test_bridge_labels_alone_do_not_admit_a_root_host_path(applied: ProvingGround) -> None:
    refused_by_policy(
        create(applied, labelled(hand_made_pod(), "escape-1")),
        "hostPath volume(s) not in the allow-list (annotation "
        f"slurm-k8s-bridge.io/allowed-host-paths of namespace {NAMESPACE}): /",
    )


def test_image_outside_the_allow_list_is_refused(applied: ProvingGround) -> None:
    pod = copy.deepcopy(RENDERED[0][1])
    pod["spec"]["containers"][0]["image"] = "docker.io/library/debian:bookworm"
    refused_by_policy(
        create(applied, pod),
        "image(s) not in the allow-list (annotation slurm-k8s-bridge.io/allowed-images of "
        f"namespace {NAMESPACE}): docker.io/library/debian:bookworm",
    )
    # A sidecar counts as much as slurmd.
    pod["spec"]["containers"][0]["image"] = "localhost/slurm-k8s-bridge/slurmd:dev"
    pod["spec"]["initContainers"] = [{"name": "init", "image": "busybox:latest"}]
    refused_by_policy(create(applied, pod), f"of namespace {NAMESPACE}): busybox:latest")


RENDERED = rendered_pods()


def test_extending_the_allow_list_takes_effect_at_once(applied: ProvingGround) -> None:
    """An administrator adds an image to the namespace's annotation: admitted, no restart."""
    pod = copy.deepcopy(RENDERED[0][1])
    pod["spec"]["containers"][0]["image"] = "registry.example.org/hpc/slurmd:24.11"
    assert create(applied, pod, dry_run=True).returncode != 0
    key = ALLOW_LISTS[0]
    before = json.loads(applied.kubectl("get", "namespace", NAMESPACE, "-o", "json"))
    listed = before["metadata"]["annotations"][key]
    try:
        applied.kubectl(
            "annotate", "--overwrite", "namespace", NAMESPACE,
            f"{key}={listed}\nregistry.example.org/hpc/slurmd:*",
        )  # fmt: skip
        wait_for(
            "the extended allow-list",
            lambda: create(applied, pod, dry_run=True).returncode == 0,
            timeout_s=30,
            interval_s=1,
        )
    finally:
        applied.kubectl("annotate", "--overwrite", "namespace", NAMESPACE, f"{key}={listed}")


@pytest.mark.parametrize(("where", "pod"), RENDERED, ids=[where for where, _ in RENDERED])
def test_pods_the_bridge_renders_are_admitted(
    applied: ProvingGround, where: str, pod: dict[str, Any]
) -> None:
    """Every pool of the shipped configurations, privileged slurmd and shared hostPaths
    included (a server-side dry run goes through admission)."""
    result = create(applied, pod, dry_run=True)
    assert result.returncode == 0, (where, result.stderr)


def test_a_rendered_pod_is_really_created(applied: ProvingGround) -> None:
    """Not only in a dry run: created, then deleted (it never runs: no node matches)."""
    where, pod = RENDERED[0]
    pod = copy.deepcopy(pod)
    pod["spec"]["nodeSelector"] = {"slurm-k8s-bridge.io/none": "x"}
    result = create(applied, pod)
    assert result.returncode == 0, (where, result.stderr)
    applied.kubectl(
        "-n", NAMESPACE, "delete", "pod", pod["metadata"]["name"], "--grace-period=0", "--force"
    )


def test_everyone_else_is_not_affected(applied: ProvingGround) -> None:
    """The cluster administrator (and any other identity) creates what RBAC lets it."""
    result = create(applied, hand_made_pod(), as_bridge=False, dry_run=True)
    assert result.returncode == 0, result.stderr
