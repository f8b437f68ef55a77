"""The admission guard of the administrator's kustomization (ValidatingAdmissionPolicy
slurm-k8s-bridge-pods, deploy/kustomize/namespace) on the proving ground's API server: with the
bridge's identity only pods shaped like the ones the bridge renders are admitted (its labels;
images, Secrets, hostPaths, tolerations, node selectors, capabilities and pod options from the
namespace's allow-lists), a pod's spec never changes and only the bridge's own label and
condition do; anyone else is not affected.

The hostile pods are tried with the bridge's username *and* the group system:masters, so RBAC
lets everything through and only the guard stands in the way: what a stolen token could do if
the Role were ever wider than it is.

Needs the kube-apiserver alone: admission is what is tested, so pods are created as server-side
dry runs or with a node selector no node matches, and none runs. What the guard's kustomizations
build is tests/integration/test_kustomize_build.py."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

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
#: Bridge configurations whose pools must pass the allow-lists of the Namespace kustomization
#: they are deployed with: the proving ground's, the in-cluster overlay's and docker-compose's.
CONFIGS = (
    (ROOT / "dev" / "bridge.yaml", ROOT / "dev" / "proving_ground" / "namespace"),
    (
        KUSTOMIZE_DIR / "overlays" / "in-cluster" / "bridge.yaml",
        KUSTOMIZE_DIR / "overlays" / "in-cluster" / "namespace",
    ),
    (ROOT / "deploy" / "compose" / "bridge.yaml", ROOT / "deploy" / "compose" / "namespace"),
)
#: The strict lists the hostile pods meet: the in-cluster overlay's (its pool runs unprivileged).
STRICT = KUSTOMIZE_DIR / "overlays" / "in-cluster" / "namespace"
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
    pg: ProvingGround,
    pod: dict[str, Any],
    *,
    as_bridge: bool = True,
    dry_run: bool = False,
    masters: bool = False,
) -> subprocess.CompletedProcess[str]:
    return kubectl_outcome(
        pg, "-n", NAMESPACE, *identity(as_bridge=as_bridge, masters=masters), "create",
        *(["--dry-run=server"] if dry_run else []), "-f", "-",
        input_text=json.dumps(pod),
    )  # fmt: skip


def identity(*, as_bridge: bool = True, masters: bool = False) -> list[str]:
    """kubectl's impersonation: the bridge's username, with system:masters when RBAC should let
    everything through to the guard."""
    if not as_bridge:
        return []
    return [f"--as={BRIDGE}", *(["--as-group=system:masters"] if masters else [])]


def use_lists(pg: ProvingGround, kustomization: Path) -> None:
    """Give the test's namespace the guard's annotations of ``kustomization``'s Namespace (as
    an administrator edits them), and wait until the guard reads them."""
    built = yaml.safe_load_all(kustomize(pg, kustomization))
    namespace = next(d for d in built if d and d.get("kind") == "Namespace")
    lists = {
        k: v for k, v in namespace["metadata"]["annotations"].items()
        if k.startswith("slurm-k8s-bridge.io/")
    }  # fmt: skip
    current = json.loads(pg.kubectl("get", "namespace", NAMESPACE, "-o", "json"))
    if all(current["metadata"].get("annotations", {}).get(k) == v for k, v in lists.items()):
        return  # already the lists in force (most tests use the strict ones)
    pg.kubectl(
        "annotate", "--overwrite", "namespace", NAMESPACE, *(f"{k}={v}" for k, v in lists.items())
    )
    # The guard reads the Namespace from the API server's cache: a moment behind.
    time.sleep(2)


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


def rendered_pods() -> list[tuple[str, Path, dict[str, Any]]]:
    """One pod per pool of every configuration, rendered by the bridge's own code into the
    test's namespace, with the Namespace kustomization whose lists it must pass."""
    pods = []
    for path, lists in CONFIGS:
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
            where = f"{path.parent.name}/{pool.name}"
            pods.append((where, lists, render_pod(pool, node, settings)))
    return pods


RENDERED = rendered_pods()
#: The in-cluster overlay's pool: the base every hostile pod below changes one thing of.
STRICT_POD = next(pod for where, lists, pod in RENDERED if lists == STRICT)


def refused_by_policy(result: subprocess.CompletedProcess[str], message: str) -> None:
    assert result.returncode != 0, result.stdout
    assert f"ValidatingAdmissionPolicy '{POLICY}'" in result.stderr, result.stderr
    assert message in result.stderr, result.stderr


@pytest.fixture
def strict(applied: ProvingGround) -> ProvingGround:
    use_lists(applied, STRICT)
    return applied


def test_hand_made_pod_is_refused(strict: ProvingGround) -> None:
    refused_by_policy(
        create(strict, hand_made_pod()),
        "slurm-k8s-bridge-pods: the bridge creates only its own slurmd pods",
    )


def _slurmd(pod: dict[str, Any]) -> dict[str, Any]:
    container: dict[str, Any] = pod["spec"]["containers"][0]
    return container


def _add_volume(pod: dict[str, Any], volume: dict[str, Any]) -> None:
    pod["spec"]["volumes"].append(volume)
    _slurmd(pod)["volumeMounts"].append({"name": volume["name"], "mountPath": "/x"})


Change = Callable[[dict[str, Any]], None]
#: What a stolen token would try, one change each to a pod the guard admits; the refusal each
#: must get (part of the message, which names the annotation to extend or the thing refused).
HOSTILE: list[tuple[str, Change, str]] = [
    ("own command", lambda p: _slurmd(p).update(command=["sleep", "infinity"]),
     "pod option(s) not allowed (annotation slurm-k8s-bridge.io/allowed-pod-options of "
     f"namespace {NAMESPACE}): command"),
    ("own args", lambda p: _slurmd(p).update(args=["--", "sh"]), "not allowed (annotation"),
    ("hostPID", lambda p: p["spec"].update(hostPID=True), "): hostPID"),
    ("hostNetwork", lambda p: p["spec"].update(hostNetwork=True), "): hostNetwork"),
    ("hostIPC", lambda p: p["spec"].update(hostIPC=True), "): hostIPC"),
    ("nodeName of a control-plane node", lambda p: p["spec"].update(nodeName="control-plane-0"),
     "): nodeName"),
    ("node-name affinity", lambda p: p["spec"].update(affinity={"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": ["control-plane-0"]}]}]}}}),
     "): nodeName"),
    ("privileged", lambda p: _slurmd(p).update(securityContext={"privileged": True}),
     "): privileged"),
    ("SYS_ADMIN", lambda p: _slurmd(p).update(
        securityContext={"capabilities": {"add": ["SETUID", "SYS_ADMIN"]}}),
     "allowed-capabilities of namespace skb-e2e-admission): SYS_ADMIN (slurmd)"),
    # Running as the bridge's own ServiceAccount would hand its token to the pod.
    ("the bridge's ServiceAccount", lambda p: p["spec"].update(
        serviceAccountName="slurm-k8s-bridge"),
     "allowed-service-accounts of namespace skb-e2e-admission): slurm-k8s-bridge"),
    # Kubernetes then adds the token's projected volume, which is refused first.
    ("the ServiceAccount's token", lambda p: p["spec"].update(automountServiceAccountToken=True),
     "(projected: only configMap, downwardAPI and secret sources)"),
    ("a foreign Secret volume", lambda p: _add_volume(
        p, {"name": "loot", "secret": {"secretName": "cluster-admin-token"}}),
     "allowed-secrets of namespace skb-e2e-admission): cluster-admin-token (volume loot)"),
    ("a foreign Secret in env", lambda p: _slurmd(p)["env"].append({"name": "T", "valueFrom": {
        "secretKeyRef": {"name": "cluster-admin-token", "key": "token"}}}),
     "cluster-admin-token (env of slurmd)"),
    ("a foreign Secret in envFrom", lambda p: _slurmd(p).update(
        envFrom=[{"secretRef": {"name": "cluster-admin-token"}}]),
     "cluster-admin-token (envFrom of slurmd)"),
    ("a foreign Secret projected", lambda p: _add_volume(p, {"name": "loot", "projected": {
        "sources": [{"secret": {"name": "cluster-admin-token"}}]}}),
     "cluster-admin-token (volume loot)"),
    ("a projected token", lambda p: _add_volume(p, {"name": "tok", "projected": {
        "sources": [{"serviceAccountToken": {"path": "t"}}]}}),
     "tok (projected: only configMap, downwardAPI and secret sources)"),
    ("a symlinked hostPath below the allowed one", lambda p: _add_volume(p, {"name": "up",
        "hostPath": {"path": "/var/lib/slurm-k8s-bridge/incluster/link-to-root",
                     "type": "DirectoryOrCreate"}}),
     "/var/lib/slurm-k8s-bridge/incluster/link-to-root:DirectoryOrCreate"),
    ("the allowed hostPath with no type", lambda p: p["spec"]["volumes"][0]["hostPath"].pop("type"),
     "the volume must give a type): /var/lib/slurm-k8s-bridge/incluster:"),
    ("the allowed hostPath as a socket", lambda p: p["spec"]["volumes"][0]["hostPath"].update(
        type="Socket"), "/var/lib/slurm-k8s-bridge/incluster:Socket"),
    ("the host's root", lambda p: _add_volume(
        p, {"name": "root", "hostPath": {"path": "/", "type": "Directory"}}),
     "exact paths, and the volume must give a type): /:Directory"),
    ("a CSI volume", lambda p: _add_volume(
        p, {"name": "csi", "csi": {"driver": "secrets-store.csi.k8s.io"}}),
     "allowed-volume-types of namespace skb-e2e-admission): csi (csi)"),
    ("the control plane's taint", lambda p: p["spec"].update(tolerations=[{
        "key": "node-role.kubernetes.io/control-plane", "operator": "Exists",
        "effect": "NoSchedule"}]),
     "): node-role.kubernetes.io/control-plane:NoSchedule"),
    ("every taint", lambda p: p["spec"].update(tolerations=[{"operator": "Exists"}]),
     "allowed-tolerations of namespace skb-e2e-admission): *"),
    ("a node picked by hostname", lambda p: p["spec"]["nodeSelector"].update(
        {"kubernetes.io/hostname": "control-plane-0"}),
     "): kubernetes.io/hostname=control-plane-0"),
    ("an image outside the list", lambda p: _slurmd(p).update(
        image="docker.io/library/debian:bookworm"), "): docker.io/library/debian:bookworm"),
    ("a sidecar outside the list", lambda p: p["spec"].update(
        initContainers=[{"name": "init", "image": "busybox:latest"}]), "): busybox:latest"),
]  # fmt: skip


@pytest.mark.parametrize(("what", "change", "message"), HOSTILE, ids=[h[0] for h in HOSTILE])
def test_hostile_pods_are_refused(
    strict: ProvingGround, what: str, change: Change, message: str
) -> None:
    """Each with the bridge's name and system:masters: refused by the guard alone."""
    pod = copy.deepcopy(STRICT_POD)
    assert create(strict, pod, dry_run=True, masters=True).returncode == 0, what
    change(pod)
    refused_by_policy(create(strict, pod, dry_run=True, masters=True), message)


def test_extending_the_allow_list_takes_effect_at_once(strict: ProvingGround) -> None:
    """An administrator adds an image to the namespace's annotation: admitted, no restart."""
    pod = copy.deepcopy(STRICT_POD)
    _slurmd(pod)["image"] = "registry.example.org/hpc/slurmd:24.11"
    assert create(strict, pod, dry_run=True).returncode != 0
    key = ALLOW_LISTS[0]
    listed = json.loads(strict.kubectl("get", "namespace", NAMESPACE, "-o", "json"))["metadata"][
        "annotations"
    ][key]
    strict.kubectl(
        "annotate", "--overwrite", "namespace", NAMESPACE,
        f"{key}={listed}\nregistry.example.org/hpc/slurmd:*",
    )  # fmt: skip
    wait_for(
        "the extended allow-list",
        lambda: create(strict, pod, dry_run=True).returncode == 0,
        timeout_s=30,
        interval_s=1,
    )


def test_the_identity_is_the_namespace_s_parameter(strict: ProvingGround) -> None:
    """bridge-identities names whom the guard applies to: another ServiceAccount's hostile pod
    is refused once it is listed, and the default name is then free of the guard."""
    other = f"system:serviceaccount:{NAMESPACE}:hpc-bridge"

    def as_other(pod: dict[str, Any]) -> subprocess.CompletedProcess[str]:
        return kubectl_outcome(
            strict, "-n", NAMESPACE, f"--as={other}", "--as-group=system:masters", "create",
            "--dry-run=server", "-f", "-", input_text=json.dumps(pod),
        )  # fmt: skip

    assert as_other(hand_made_pod()).returncode == 0
    strict.kubectl(
        "annotate", "--overwrite", "namespace", NAMESPACE,
        "slurm-k8s-bridge.io/bridge-identities=hpc-bridge",
    )  # fmt: skip
    wait_for(
        "the guard on hpc-bridge",
        lambda: as_other(hand_made_pod()).returncode != 0,
        timeout_s=30,
        interval_s=1,
    )
    refused_by_policy(as_other(hand_made_pod()), "the bridge creates only its own slurmd pods")
    assert create(strict, hand_made_pod(), dry_run=True, masters=True).returncode == 0


@pytest.mark.parametrize(
    ("where", "lists", "pod"), RENDERED, ids=[where for where, _, _ in RENDERED]
)
def test_pods_the_bridge_renders_are_admitted(
    applied: ProvingGround, where: str, lists: Path, pod: dict[str, Any]
) -> None:
    """Every pool of the shipped configurations, with the allow-lists it is deployed with (a
    server-side dry run goes through admission)."""
    use_lists(applied, lists)
    result = create(applied, pod, dry_run=True)
    assert result.returncode == 0, (where, result.stderr)


@pytest.fixture
def created(strict: ProvingGround) -> Iterator[tuple[ProvingGround, str]]:
    """The strict pod really created by the bridge's identity (it never runs: no node matches
    its selector), deleted afterwards."""
    pod = copy.deepcopy(STRICT_POD)
    name = pod["metadata"]["name"]
    # Never scheduled: the gate is nobody's to remove.
    pod["spec"]["schedulingGates"] = [{"name": "skb-test/never"}]
    result = create(strict, pod)
    assert result.returncode == 0, result.stderr
    try:
        yield strict, name
    finally:
        strict.kubectl("-n", NAMESPACE, "delete", "pod", name, "--grace-period=0", "--force")


def patch(
    pg: ProvingGround,
    name: str,
    body: dict[str, Any],
    *,
    subresource: str = "",
    kind: str = "merge",
) -> subprocess.CompletedProcess[str]:
    return kubectl_outcome(
        pg, "-n", NAMESPACE, *identity(masters=True), "patch", "pod", name, f"--type={kind}",
        *([f"--subresource={subresource}"] if subresource else []), "-p", json.dumps(body),
    )  # fmt: skip


CHANGES: list[tuple[str, dict[str, Any], str, str, str]] = [
    ("an image patch", {"spec": {"containers": [
        {"name": "slurmd", "image": "localhost/slurm-k8s-bridge/slurmd:26.05-0.1.0-evil"}]}},
     "", "strategic", "does not change a pod's spec"),
    ("another pool label", {"metadata": {"labels": {"slurm-k8s-bridge.io/pool": "other"}}}, "",
     "merge", "changes only its label slurm-k8s-bridge.io/slurm-state"),
    ("an annotation", {"metadata": {"annotations": {"x": "y"}}}, "", "merge",
     "changes only its label"),
    ("a finalizer", {"metadata": {"finalizers": ["example.org/hold"]}}, "", "merge",
     "changes only its label"),
    ("the pod's address", {"status": {"podIP": "10.0.0.66", "podIPs": [{"ip": "10.0.0.66"}]}},
     "status", "merge", "changes only its condition slurm-k8s-bridge.io/registered"),
    ("the pod's phase", {"status": {"phase": "Failed"}}, "status", "merge",
     "changes only its condition"),
    ("a label through status", {"metadata": {"labels": {"slurm-k8s-bridge.io/slurm-state": "x"}}},
     "status", "merge", "changes only its label"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("what", "body", "subresource", "kind", "message"), CHANGES, ids=[c[0] for c in CHANGES]
)
def test_changes_the_bridge_never_makes_are_refused(
    created: tuple[ProvingGround, str],
    *,
    what: str,
    body: dict[str, Any],
    subresource: str,
    kind: str,
    message: str,
) -> None:
    pg, name = created
    refused_by_policy(patch(pg, name, body, subresource=subresource, kind=kind), message)


def test_the_changes_the_bridge_makes_are_admitted(created: tuple[ProvingGround, str]) -> None:
    """Its Slurm state label, and its condition in the status (the calls of
    PodGateway.set_slurm_state)."""
    pg, name = created
    label = {"metadata": {"labels": {"slurm-k8s-bridge.io/slurm-state": "idle"}}}
    result = patch(pg, name, label)
    assert result.returncode == 0, result.stderr
    condition = {"status": {"conditions": [{
        "type": "slurm-k8s-bridge.io/registered", "status": "True", "reason": "Idle",
        "message": "slurmd registered"}]}}  # fmt: skip
    result = patch(pg, name, condition, subresource="status", kind="strategic")
    assert result.returncode == 0, result.stderr


def test_an_ephemeral_container_is_refused(created: tuple[ProvingGround, str]) -> None:
    pg, name = created
    debug = {"spec": {"ephemeralContainers": [{
        "name": "debug", "image": "localhost/slurm-k8s-bridge/slurmd:26.05-0.1.0",
        "command": ["sh"]}]}}  # fmt: skip
    refused_by_policy(
        patch(pg, name, debug, subresource="ephemeralcontainers", kind="strategic"),
        "the bridge adds no ephemeral containers",
    )


def test_everyone_else_is_not_affected(strict: ProvingGround) -> None:
    """The cluster administrator (and any other identity) creates what RBAC lets it."""
    result = create(strict, hand_made_pod(), as_bridge=False, dry_run=True)
    assert result.returncode == 0, result.stderr
