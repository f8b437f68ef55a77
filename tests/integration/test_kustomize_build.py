"""`kustomize build` of every kustomization under deploy/kustomize, read as YAML: every overlay
builds, holds no key, no credentials, no fixed cluster IP and no cluster-scoped object (the
Namespace and the admission guard are the administrator's part, so `kubectl delete -k` leaves the
Namespace); the in-cluster overlay's images carry the release tag and slurmctld's state is on a
volume claim; every Namespace kustomization ships the guard, the same everywhere.

Needs only the kustomize binary of the build cache (the ``build_cache`` fixture): no API server,
no Slurm; nothing is started."""

from __future__ import annotations

import re
import tomllib
from typing import Any

import pytest
import yaml
from proving_ground import bridge_image

from tests.conftest import ROOT, ProvingGround
from tests.integration.manifests import (
    ALLOW_LISTS,
    INCLUSTER_NS,
    KUSTOMIZE_DIR,
    NAMESPACE_OF,
    POLICY,
    kustomize,
)

pytestmark = pytest.mark.integration

#: The administrator's part next to each overlay: the Namespace and the admission guard (its
#: allow-lists are annotations of the Namespace).
ADMISSION_KINDS = {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
OVERLAYS = ("base", "overlays/external", "overlays/in-cluster")
#: The administrator's kustomizations: the Namespace (its allow-lists) and the guard.
NAMESPACES = ("namespace", "overlays/in-cluster/namespace")
#: What no build may contain: service account tokens (JWTs), private keys, kubeconfig users.
CREDENTIALS = re.compile(
    r"eyJhbGciOi|PRIVATE KEY|client-key-data|client-certificate-data|kind: Config\b"
    r"|kubernetes\.io/service-account-token"
)


def build(build_cache: ProvingGround, kustomization: str) -> list[dict[str, Any]]:
    return [
        d for d in yaml.safe_load_all(kustomize(build_cache, KUSTOMIZE_DIR / kustomization)) if d
    ]


@pytest.mark.parametrize(
    ("overlay", "namespace", "kinds"),
    [
        (
            "base",
            "slurm",
            # Service: slurm-nodes, the headless Service that gives every pod a DNS name.
            {"ServiceAccount", "Role", "RoleBinding", "ConfigMap", "Service"},
        ),
        (
            "overlays/external",
            "slurm",
            {"ServiceAccount", "Role", "RoleBinding", "Service"},
        ),
        (
            "overlays/in-cluster",
            INCLUSTER_NS,
            {
                "ServiceAccount",
                "Role",
                "RoleBinding",
                "ConfigMap",
                "Service",
                "StatefulSet",
                "NetworkPolicy",
            },
        ),
    ],
)
def test_overlay_builds(
    build_cache: ProvingGround, overlay: str, namespace: str, kinds: set[str]
) -> None:
    """Namespaced objects only, all in the overlay's namespace: no Namespace, no guard, no
    Secret (the site's, by name)."""
    docs = build(build_cache, overlay)
    assert {d["kind"] for d in docs} == kinds
    for doc in docs:
        assert doc["metadata"].get("namespace") == namespace, doc["metadata"]
    binding = next(d for d in docs if d["kind"] == "RoleBinding")
    assert binding["subjects"][0]["namespace"] == namespace


@pytest.mark.parametrize(
    ("kustomization", "namespace"),
    [("namespace", "slurm"), ("overlays/in-cluster/namespace", INCLUSTER_NS)],
)
def test_namespace_builds(build_cache: ProvingGround, kustomization: str, namespace: str) -> None:
    """The administrator's part: the Namespace with Pod Security labels (privileged enforced:
    hostPath volumes, and pools that confine jobs with cgroups; audited against baseline) and
    the guard's allow-lists, the guard, and the cluster-scoped read of nodes (which are
    cordoned) bound to this namespace's bridge."""
    docs = build(build_cache, kustomization)
    assert {d["kind"] for d in docs} == {
        "Namespace",
        "ClusterRole",
        "ClusterRoleBinding",
        *ADMISSION_KINDS,
    }
    reader = next(d for d in docs if d["kind"] == "ClusterRole")
    assert reader["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["list"]}]
    binding = next(d for d in docs if d["kind"] == "ClusterRoleBinding")
    assert binding["roleRef"]["name"] == reader["metadata"]["name"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "slurm-k8s-bridge", "namespace": namespace}
    ]
    ns = next(d for d in docs if d["kind"] == "Namespace")
    assert ns["metadata"]["name"] == namespace
    labels = ns["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "privileged"
    assert labels["pod-security.kubernetes.io/audit"] == "baseline"


@pytest.mark.parametrize(
    "kustomization",
    [
        "base",
        "overlays/external",
        "overlays/in-cluster",
        "namespace",
        "overlays/in-cluster/namespace",
    ],
)
def test_no_build_holds_key_material(build_cache: ProvingGround, kustomization: str) -> None:
    """No Secret at all, and no ConfigMap carries a key: the munge key stays the site's."""
    docs = build(build_cache, kustomization)
    assert [d["metadata"]["name"] for d in docs if d["kind"] == "Secret"] == []
    for doc in docs:
        assert "binaryData" not in doc, doc["metadata"]
        for name in (doc.get("data") or {}) if doc["kind"] == "ConfigMap" else ():
            assert "key" not in name, (doc["metadata"]["name"], name)


@pytest.mark.parametrize("overlay", ["base", "overlays/external", "overlays/in-cluster"])
def test_no_fixed_cluster_ip(build_cache: ProvingGround, overlay: str) -> None:
    """Services are found by name; only headless ones say clusterIP (None)."""
    for doc in build(build_cache, overlay):
        if doc["kind"] == "Service":
            assert doc["spec"].get("clusterIP", "None") == "None", doc["metadata"]["name"]


def test_in_cluster_images_carry_the_release_tag(build_cache: ProvingGround) -> None:
    """The bridge's image at the package version, the pool's slurmd at <series>-<version> (what
    the proving ground tags its builds with), the allow-list naming exactly that; no :dev, no
    imagePullPolicy Never."""
    docs = build(build_cache, "overlays/in-cluster")
    statefulset = next(d for d in docs if d["kind"] == "StatefulSet")
    pod = statefulset["spec"]["template"]["spec"]
    containers = pod["initContainers"] + pod["containers"]
    assert {c["image"] for c in containers} == {f"{bridge_image.BRIDGE_IMAGE}:{VERSION}"}
    assert all("imagePullPolicy" not in c for c in containers)
    config = yaml.safe_load(
        next(d for d in docs if d["metadata"]["name"].startswith("slurm-k8s-bridge-config"))[
            "data"
        ]["bridge.yaml"]
    )
    slurmd = {pool["image"] for pool in config["pools"]}
    assert all(re.fullmatch(r"[^:]+:\d+\.\d+-" + re.escape(VERSION), i) for i in slurmd), slurmd
    ns = next(
        d
        for d in build(build_cache, NAMESPACE_OF["overlays/in-cluster"])
        if d["kind"] == "Namespace"
    )
    allowed = ns["metadata"]["annotations"]["slurm-k8s-bridge.io/allowed-images"]
    assert set(allowed.split(",")) == slurmd


def test_in_cluster_state_is_on_a_volume_claim(build_cache: ProvingGround) -> None:
    docs = build(build_cache, "overlays/in-cluster")
    statefulset = next(d for d in docs if d["kind"] == "StatefulSet")
    claims = {c["metadata"]["name"] for c in statefulset["spec"]["volumeClaimTemplates"]}
    volumes = {v["name"] for v in statefulset["spec"]["template"]["spec"]["volumes"]}
    assert "state" in claims
    assert "state" not in volumes
    slurmctld = next(
        c for c in statefulset["spec"]["template"]["spec"]["containers"] if c["name"] == "slurmctld"
    )
    mount = next(m for m in slurmctld["volumeMounts"] if m["name"] == "state")
    head = (KUSTOMIZE_DIR / "overlays" / "in-cluster" / "slurm.conf.head").read_text()
    assert f"StateSaveLocation={mount['mountPath']}\n" in head


@pytest.mark.parametrize("kustomization", NAMESPACES)
def test_every_namespace_ships_the_guard(build_cache: ProvingGround, kustomization: str) -> None:
    docs = [
        d for d in yaml.safe_load_all(kustomize(build_cache, KUSTOMIZE_DIR / kustomization)) if d
    ]
    kinds = {(d["kind"], d["metadata"]["name"]) for d in docs}
    assert ("ValidatingAdmissionPolicy", POLICY) in kinds
    assert ("ValidatingAdmissionPolicyBinding", POLICY) in kinds
    namespace = next(d for d in docs if d["kind"] == "Namespace")
    assert set(ALLOW_LISTS) <= set(namespace["metadata"]["annotations"])


@pytest.mark.parametrize("kustomization", OVERLAYS + NAMESPACES)
def test_no_build_holds_credentials(build_cache: ProvingGround, kustomization: str) -> None:
    """No token, private key or kubeconfig, and no Secret at all (the munge key Secret is the
    site's, named in the bridge's configuration)."""
    text = kustomize(build_cache, KUSTOMIZE_DIR / kustomization)
    assert not CREDENTIALS.search(text), CREDENTIALS.search(text)
    docs = [d for d in yaml.safe_load_all(text) if d]
    assert [d["metadata"]["name"] for d in docs if d["kind"] == "Secret"] == []


def test_the_guard_is_the_same_in_every_namespace(build_cache: ProvingGround) -> None:
    """Cluster-scoped objects shared by every bridge namespace: applying one Namespace's
    kustomization after another must not change them (only their namespace, which the API server
    ignores, differs)."""

    def guard(kustomization: str) -> list[dict[str, Any]]:
        docs = yaml.safe_load_all(kustomize(build_cache, KUSTOMIZE_DIR / kustomization))
        found = [d for d in docs if d and d["kind"].startswith("ValidatingAdmissionPolicy")]
        for doc in found:
            doc["metadata"].pop("namespace", None)
        return found

    first = guard(NAMESPACES[0])
    for kustomization in NAMESPACES[1:]:
        assert guard(kustomization) == first, kustomization
    # No paramKind: its lists are those of the namespace of each request (see the policy).
    assert all("paramKind" not in d["spec"] and "paramRef" not in d["spec"] for d in first)


def test_in_cluster_metrics_are_not_open_to_slurmd_pods(build_cache: ProvingGround) -> None:
    """The network policies: slurmd pods reachable from the namespace; slurmctld's pod only on
    slurmctld's port from the namespace, and on the metrics port only from the monitoring
    namespace (the endpoint has no authentication)."""
    policies = {
        d["metadata"]["name"]: d["spec"]
        for d in build(build_cache, "overlays/in-cluster")
        if d["kind"] == "NetworkPolicy"
    }
    assert policies["slurmd-pods"]["ingress"] == [{"from": [{"podSelector": {}}]}]
    ctld = policies["slurmctld"]
    assert ctld["podSelector"] == {"matchLabels": {"app.kubernetes.io/name": "slurmctld"}}
    by_port = {rule["ports"][0]["port"]: rule["from"] for rule in ctld["ingress"]}
    assert by_port == {
        6817: [{"podSelector": {}}],
        "metrics": [
            {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
        ],
    }
