"""render_pod against the rendering it replaced (a deep copy of the template per pod), on every
pool of the shipped configurations and the unit tests' full template: the output must be equal
and serialise to the same JSON, key order included."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from bridge.config import load_config
from bridge.domain.pod_rendering import (
    DEFAULT_GRACE_PERIOD_S,
    ENTRYPOINT,
    ENV_CONF_SERVER,
    ENV_EXTRA_ARGS,
    ENV_NODENAME,
    MUNGE_MOUNT_DIR,
    MUNGE_SECRET_KEY,
    MUNGE_VOLUME,
    SLURMD_CONTAINER,
    PodSettings,
    pod_labels,
    pool_template_hash,
    render_pod,
    render_pods,
)
from bridge.domain.pods import CONDITION_REGISTERED, LABEL_TEMPLATE_HASH
from bridge.domain.pools import NodePool

from .test_pod_rendering import FULL_TEMPLATE, SETTINGS, pool_with

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = [
    "deploy/examples/bridge.yaml",
    "deploy/compose/bridge.yaml",
    "dev/bridge.yaml",
    "deploy/kustomize/overlays/in-cluster/bridge.yaml",
]
_DEFAULT_CONTAINER_ANNOTATION = "kubectl.kubernetes.io/default-container"
_SECRET_MODE = 0o400
_OWN_ENV = frozenset({ENV_NODENAME, ENV_CONF_SERVER})


# --- The rendering before issue 11, verbatim but for its names: the oracle --------------------


def render_pod_before_issue_11(pool: NodePool, node: str, settings: PodSettings) -> dict[str, Any]:
    """The pod manifest for Slurm node ``node`` of ``pool`` (inputs are never modified)."""
    if node not in pool:
        raise ValueError(f"node {node!r} is not in pool {pool.name!r}")
    template: dict[str, Any] = copy.deepcopy(dict(pool.pod_template))
    metadata: dict[str, Any] = template.get("metadata") or {}
    spec: dict[str, Any] = template.get("spec") or {}

    annotations: dict[str, str] = dict(metadata.get("annotations") or {})
    annotations.setdefault(_DEFAULT_CONTAINER_ANNOTATION, SLURMD_CONTAINER)
    manifest_metadata: dict[str, Any] = {
        "name": node,
        "namespace": settings.namespace,
        "labels": {**(metadata.get("labels") or {}), **pod_labels(pool, node, settings)},
        "annotations": annotations,
    }

    spec["hostname"] = node
    if settings.node_service:
        # Slurm addresses nodes by name when it has no address list for a job (22.05 loses it
        # across a slurmctld restart): with the headless Service's domain searched, "big-1"
        # resolves inside every pod, whatever slurmctld remembers.
        spec["subdomain"] = settings.node_service
        dns: dict[str, Any] = dict(spec.get("dnsConfig") or {})
        searches = [d for d in dns.get("searches") or [] if d != settings.node_domain]
        dns["searches"] = [settings.node_domain, *searches]
        spec["dnsConfig"] = dns
    # Since issue 13 (after this oracle was taken): the readiness gate, as render_pods adds it.
    gates = [
        g
        for g in spec.get("readinessGates") or []
        if g.get("conditionType") != CONDITION_REGISTERED
    ]
    spec["readinessGates"] = [*gates, {"conditionType": CONDITION_REGISTERED}]
    # A crashed slurmd must surface as a failed pod (and a DOWN node), not restart behind Slurm.
    spec["restartPolicy"] = "Never"
    spec.setdefault("enableServiceLinks", False)
    spec.setdefault("automountServiceAccountToken", False)
    spec.setdefault("terminationGracePeriodSeconds", DEFAULT_GRACE_PERIOD_S)

    containers: list[dict[str, Any]] = list(spec.get("containers") or [])
    index = next((i for i, c in enumerate(containers) if c.get("name") == SLURMD_CONTAINER), None)
    if index is None:
        # First, so tools that pick "the" container (kubectl logs/exec) find slurmd.
        containers.insert(0, _slurmd_container_before_issue_11(pool, node, settings, {}))
    else:
        containers[index] = _slurmd_container_before_issue_11(
            pool, node, settings, containers[index]
        )
    spec["containers"] = containers

    volumes: list[dict[str, Any]] = [
        v for v in spec.get("volumes") or [] if v.get("name") != MUNGE_VOLUME
    ]
    volumes.append(
        {
            "name": MUNGE_VOLUME,
            "secret": {
                "secretName": settings.munge_key_secret,
                "items": [{"key": MUNGE_SECRET_KEY, "path": MUNGE_SECRET_KEY}],
                "defaultMode": _SECRET_MODE,
            },
        }
    )
    spec["volumes"] = volumes
    return {"apiVersion": "v1", "kind": "Pod", "metadata": manifest_metadata, "spec": spec}


def _slurmd_container_before_issue_11(
    pool: NodePool, node: str, settings: PodSettings, template: dict[str, Any]
) -> dict[str, Any]:
    container = dict(template)
    container["name"] = SLURMD_CONTAINER
    container["image"] = container.get("image") or pool.image
    # A custom image may ship its own entrypoint as long as it honours the same environment.
    container.setdefault("command", [ENTRYPOINT])

    own_env = [
        {"name": ENV_NODENAME, "value": node},
        {"name": ENV_CONF_SERVER, "value": settings.conf_server},
    ]
    user_env = [e for e in container.get("env") or [] if e.get("name") not in _OWN_ENV]
    if not any(e.get("name") == ENV_EXTRA_ARGS for e in user_env):
        own_env.append({"name": ENV_EXTRA_ARGS, "value": ""})
    container["env"] = own_env + user_env

    mounts = [m for m in container.get("volumeMounts") or [] if m.get("name") != MUNGE_VOLUME]
    mounts.append({"name": MUNGE_VOLUME, "mountPath": MUNGE_MOUNT_DIR, "readOnly": True})
    container["volumeMounts"] = mounts

    resources: dict[str, Any] = dict(container.get("resources") or {})
    shape = {"cpu": str(pool.cpus), "memory": f"{pool.real_memory_mb}Mi"}
    # Requests equal to limits: Guaranteed QoS, so the kubelet evicts slurmd pods last.
    for kind in ("requests", "limits"):
        resources[kind] = {**shape, **(resources.get(kind) or {})}
    container["resources"] = resources

    security: dict[str, Any] = dict(container.get("securityContext") or {})
    # slurmd creates job cgroups and namespaces; without privilege its jobs cannot be confined.
    security.setdefault("privileged", True)
    container["securityContext"] = security
    return container


# --- The comparison ---------------------------------------------------------------------------


def _pools() -> list[tuple[str, NodePool, PodSettings]]:
    cases = [("unit: full template", pool_with(copy.deepcopy(FULL_TEMPLATE)), SETTINGS)]
    cases.append(("unit: empty template", pool_with({}), SETTINGS))
    # Values JSON cannot carry as they are (YAML gives dates; Python callers tuples): deep copies.
    odd = {
        "metadata": {"annotations": {"since": "x"}},
        "spec": {
            "tolerations": ({"key": "a", "operator": "Exists"},),
            "x-scheduled": datetime(2026, 12, 3, tzinfo=UTC),
            "x-ratio": float("inf"),
        },
    }
    cases.append(("unit: template JSON cannot carry", pool_with(odd), SETTINGS))
    beyond_64_bits = {"spec": {"activeDeadlineSeconds": 2**70}}
    cases.append(("unit: integer orjson cannot write", pool_with(beyond_64_bits), SETTINGS))
    for path in CONFIGS:
        config = load_config(ROOT / path, environ={})
        cases += [(f"{path}: {pool.name}", pool, config.pod_settings()) for pool in config.pools]
    return cases


@pytest.mark.parametrize(
    ("pool", "settings"), [c[1:] for c in _pools()], ids=[c[0] for c in _pools()]
)
def test_rendering_equals_the_deep_copying_one(pool: NodePool, settings: PodSettings) -> None:
    template_before = copy.deepcopy(dict(pool.pod_template))
    nodes = list(pool.node_names)
    together = render_pods(pool, nodes, settings)
    for node, pod in zip(nodes, together, strict=True):
        expected = render_pod_before_issue_11(pool, node, settings)
        # The one thing added since (issue 14): the template hash, the labels' last key.
        expected["metadata"]["labels"][LABEL_TEMPLATE_HASH] = pool_template_hash(pool, settings)
        for rendered in (pod, render_pod(pool, node, settings)):
            assert rendered == expected
            assert json.dumps(rendered, default=repr) == json.dumps(expected, default=repr)
    assert dict(pool.pod_template) == template_before


def test_pods_rendered_together_share_nothing() -> None:
    pool = pool_with(copy.deepcopy(FULL_TEMPLATE))
    first, second = render_pods(pool, ["cpu-0", "cpu-1"], SETTINGS)
    first["spec"]["containers"][0]["image"] = "changed"
    first["spec"]["tolerations"][0]["key"] = "changed"
    first["spec"]["volumes"][0]["emptyDir"]["medium"] = "Memory"
    again = render_pod(pool, "cpu-0", SETTINGS)
    for pod in (second, again):
        assert pod["spec"]["containers"][0]["image"] == "busybox"
        assert pod["spec"]["tolerations"][0]["key"] == "dedicated"
        assert pod["spec"]["volumes"][0]["emptyDir"] == {}


def test_no_nodes_render_no_pods_and_a_stranger_is_refused() -> None:
    assert render_pods(pool_with({}), [], SETTINGS) == []
    with pytest.raises(ValueError, match="'gpu-0' is not in pool 'cpu'"):
        render_pods(pool_with({}), ["cpu-0", "gpu-0"], SETTINGS)
