"""Render the pod for one Slurm node: the pool's pod template with the bridge's overlay on top.

The user owns the template (scheduling, sidecars, volumes, extra env); the bridge owns the pod's
identity (name, namespace, labels it selects on, hostname) and the ``slurmd`` container's contract
with the image (``SLURM_NODENAME``, ``SLURM_CONF_SERVER``, the key mount and its variable). The
container runs the image's own ENTRYPOINT (:data:`ENTRYPOINT` in the bridge's image).
Fields the bridge owns are rejected in templates (bridge.domain.pod_templates) instead of being
overwritten silently; fields with a bridge default (resources, security context, grace period ...)
keep whatever the template sets.

The cluster's authentication is the bridge's (``slurm.auth``): with ``munge`` the pods mount the
munge key Secret and get ``MUNGE_KEY_FILE``; with ``slurm`` (auth/slurm, Slurm 23.11+) they mount
the ``slurm.key`` Secret instead and get ``SLURM_KEY_FILE`` (the entrypoint uses auth/slurm when
that file exists), so no munge Secret is needed. Job processes run in the slurmd container, so the
key is mounted below :data:`KEYS_DIR`, which only root may enter, and only into slurmd:
bridge.domain.pod_templates refuses templates that would put it anywhere else. A mounted
slurm.conf stays the pool's choice, made in its template: a ConfigMap volume and
``SLURM_CONF_FILE`` (run ``slurmd -f`` it instead of configless); see
deploy/images/slurmd/README.md.

The result is plain JSON (camelCase keys) as the API server accepts it.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from bridge.domain.pods import (
    CONDITION_REGISTERED,
    LABEL_CLUSTER,
    LABEL_MANAGED_BY,
    LABEL_NODE,
    LABEL_POOL,
    LABEL_TEMPLATE_HASH,
    MANAGED_BY,
    SLURMD_CONTAINER,
)
from bridge.domain.pools import NodePool

#: The ENTRYPOINT of the bridge's slurmd image; the pod does not set ``command``, so an image of
#: one's own runs its own (it must honour the same environment).
ENTRYPOINT = "/usr/local/bin/slurmd-entrypoint"
#: Where the key Secrets are mounted: below a directory only root may enter (the image makes it
#: root:root 0700 and the entrypoint sees to it), because job processes run in the slurmd
#: container and a Secret's files are group-readable by the pod's fsGroup.
KEYS_DIR = "/etc/slurm-k8s-bridge/keys"
MUNGE_VOLUME = "munge-key"
MUNGE_MOUNT_DIR = f"{KEYS_DIR}/munge"
#: The Secret key holding the munge key, also its file's name in :data:`MUNGE_MOUNT_DIR`.
MUNGE_SECRET_KEY = "munge.key"  # noqa: S105 (a key name, not a secret)
#: Where the entrypoint reads the munge key (set by the bridge under ``slurm.auth: munge``).
ENV_MUNGE_KEY_FILE = "MUNGE_KEY_FILE"
SLURM_KEY_VOLUME = "slurm-key"
SLURM_KEY_MOUNT_DIR = f"{KEYS_DIR}/slurm"
#: The Secret key holding auth/slurm's key, also its file's name in :data:`SLURM_KEY_MOUNT_DIR`.
SLURM_SECRET_KEY = "slurm.key"  # noqa: S105 (a key name, not a secret)
#: Where the entrypoint reads auth/slurm's key (set by the bridge under ``slurm.auth: slurm``).
ENV_KEY_FILE = "SLURM_KEY_FILE"
#: The bridge's key volumes, whichever the cluster's authentication: only slurmd mounts them.
KEY_VOLUMES = (MUNGE_VOLUME, SLURM_KEY_VOLUME)
#: What the slurmd container keeps of root's capabilities unless its template sets ``privileged``
#: or ``capabilities`` (all others are dropped, and no process in it may gain more):
#: CHOWN         the entrypoint gives the munge key to munge; slurmd gives job files in its
#:               spool to the job's user;
#: DAC_OVERRIDE  slurmd and slurmstepd (root) write its spool, where a job's files and
#:               directories belong to the job's user;
#: FOWNER        ... and set the modes of those files (the batch script, a step's sockets);
#: KILL          slurmd and slurmstepd signal and kill job processes, which run as other uids;
#: SETGID, SETUID  slurmstepd runs steps as the job's uid, gid and groups; runuser starts
#:               munged as munge.
SLURMD_CAPABILITIES = ("CHOWN", "DAC_OVERRIDE", "FOWNER", "KILL", "SETGID", "SETUID")
#: ``slurm.auth``: munge, or Slurm's own auth/slurm with a shared key.
AUTH_MUNGE, AUTH_SLURM = "munge", "slurm"
ENV_NODENAME = "SLURM_NODENAME"
ENV_CONF_SERVER = "SLURM_CONF_SERVER"
ENV_EXTRA_ARGS = "SLURMD_EXTRA_ARGS"
DEFAULT_GRACE_PERIOD_S = 10
_DEFAULT_CONTAINER_ANNOTATION = "kubectl.kubernetes.io/default-container"
# Only the secret's owner may read it; the entrypoint copies it with munge's owner and mode.
_SECRET_MODE = 0o400

#: Stands in for the node name when hashing a pool's pod: the hash is the same for every node.
_ANY_NODE = "any-node"
_TEMPLATE_HASH_LENGTH = 10
#: The environment variables the bridge sets in slurmd (templates may not).
OWN_ENV = frozenset({ENV_NODENAME, ENV_CONF_SERVER})


@dataclass(frozen=True)
class PodSettings:
    """The cluster-wide values a pod needs beyond its pool (taken from the bridge config)."""

    namespace: str
    cluster_name: str
    conf_server: str
    munge_key_secret: str = "slurm-munge-key"  # noqa: S105 (the Secret's name)
    #: :data:`AUTH_MUNGE` or :data:`AUTH_SLURM`: which key Secret the pods mount.
    auth: str = AUTH_MUNGE
    slurm_key_secret: str = "slurm-key"  # noqa: S105 (the Secret's name)
    #: The headless Service that gives every pod a DNS name; "" for none.
    node_service: str = "slurm-nodes"
    cluster_domain: str = "cluster.local"

    @property
    def node_domain(self) -> str:
        """Where the pods' names live: ``<node>.<node_domain>`` is a pod's DNS name."""
        return f"{self.node_service}.{self.namespace}.svc.{self.cluster_domain}"


def pod_labels(pool: NodePool, node: str, settings: PodSettings) -> dict[str, str]:
    """The labels the bridge selects its pods on."""
    return {
        LABEL_MANAGED_BY: MANAGED_BY,
        LABEL_CLUSTER: settings.cluster_name,
        LABEL_POOL: pool.name,
        LABEL_NODE: node,
    }


def render_pod(pool: NodePool, node: str, settings: PodSettings) -> dict[str, Any]:
    """The pod manifest for Slurm node ``node`` of ``pool`` (inputs are never modified)."""
    return render_pods(pool, [node], settings)[0]


def render_pods(
    pool: NodePool,
    nodes: Sequence[str],
    settings: PodSettings,
    *,
    pod_groups: Mapping[str, str] | None = None,
) -> list[dict[str, Any]]:
    """The pod manifests of ``nodes`` of ``pool``, in order (:func:`each_pod`'s, as a list)."""
    return list(each_pod(pool, nodes, settings, pod_groups=pod_groups))


def each_pod(
    pool: NodePool,
    nodes: Sequence[str],
    settings: PodSettings,
    *,
    pod_groups: Mapping[str, str] | None = None,
) -> Iterator[dict[str, Any]]:
    """The pod manifests of ``nodes`` of ``pool``, in order, each as soon as it is rendered (a
    resume's creates start with the first, not after the last: 58 ms for 1,000 pods); the same
    as :func:`render_pod` for each, and no two of them (nor the pool's template) share a dict
    or a list. Every node is checked before the first pod comes.

    The pool's pod is rendered once and kept as JSON bytes, an immutable template; each node's
    pod is decoded from them and gets the four places that name the node set. (A deep copy of
    the template per pod cost three times as much.)

    ``pod_groups`` (node → PodGroup name) puts a job's nodes in their gang
    (``spec.schedulingGroup``, see ``bridge.domain.gangs``); a node it does not name gets the
    pod it gets without it, byte for byte. The group is per node, so it is set after the
    shared template, like the name, and stays out of the template hash.
    """
    for node in nodes:
        if node not in pool:
            raise ValueError(f"node {node!r} is not in pool {pool.name!r}")
    if not nodes:
        return
    shared = _render_sharing_the_template(pool, nodes[0], settings)
    shared["metadata"]["labels"][LABEL_TEMPLATE_HASH] = pool_template_hash(pool, settings)
    frozen = _as_json(shared)
    slurmd_index = next(
        i for i, c in enumerate(shared["spec"]["containers"]) if c["name"] == SLURMD_CONTAINER
    )
    for node in nodes:
        pod = orjson.loads(frozen) if frozen is not None else copy.deepcopy(shared)
        pod["metadata"]["name"] = node
        pod["metadata"]["labels"][LABEL_NODE] = node
        pod["spec"]["hostname"] = node
        # The slurmd container's env starts with SLURM_NODENAME (see _slurmd_container).
        pod["spec"]["containers"][slurmd_index]["env"][0]["value"] = node
        group = pod_groups.get(node) if pod_groups else None
        if group:
            pod["spec"]["schedulingGroup"] = {"podGroupName": group}
        yield pod


def pool_template_hash(pool: NodePool, settings: PodSettings) -> str:
    """A short, stable hash of everything ``pool`` (and ``settings``) put into its pods: image,
    template, shape, env, volumes ...; not the node's name. Equal pools hash equally in every
    process (sha256 of canonical JSON, never Python's ``hash()``), so a change of it means a
    pod runs an older template."""
    pod = _render_sharing_the_template(pool, _ANY_NODE, settings)
    text = json.dumps(
        _canonical(pod), sort_keys=True, separators=(",", ":"), ensure_ascii=True, default=str
    )
    return hashlib.sha256(text.encode()).hexdigest()[:_TEMPLATE_HASH_LENGTH]


def _canonical(value: object) -> object:
    # The template sits behind read-only mappings and may hold tuples: make it plain JSON.
    if isinstance(value, Mapping):
        return {str(k): _canonical(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_canonical(item) for item in value]
    return value


def _as_json(pod: dict[str, Any]) -> bytes | None:
    """``pod`` as JSON that decodes to an equal value, or None when it holds anything else
    (a tuple or a date from YAML, a float JSON cannot write ...): such pods are deep-copied."""
    if not _plain_json(pod):
        return None
    try:
        return orjson.dumps(pod)
    except orjson.JSONEncodeError:  # e.g. an integer beyond 64 bits, a lone surrogate
        return None


def _plain_json(value: object) -> bool:
    # Exact types: orjson would write a subclass (an enum, a named tuple) as its base value.
    if type(value) is dict:
        return all(type(k) is str and _plain_json(v) for k, v in value.items())
    if type(value) is list:
        return all(_plain_json(item) for item in value)
    if type(value) is float:
        return math.isfinite(value)
    return value is None or type(value) in (str, int, bool)


def _render_sharing_the_template(
    pool: NodePool, node: str, settings: PodSettings
) -> dict[str, Any]:
    """The pod of ``node``; parts the bridge does not change are the template's own objects
    (so the result must be copied before it leaves this module)."""
    template = pool.pod_template
    metadata: Mapping[str, Any] = template.get("metadata") or {}
    # A copy: the keys below are set on it, never on the template.
    spec: dict[str, Any] = dict(template.get("spec") or {})

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
    # Ready only once slurmd registered: the reconciler sets the condition from Slurm's view.
    # (kwok's default pod stage sets every gate's condition True; the proving ground's kwok
    # leaves them alone, as a kubelet does: dev/proving_ground/kwok-pod-stages.yaml.)
    gates = [
        g
        for g in spec.get("readinessGates") or []
        if not (isinstance(g, Mapping) and g.get("conditionType") == CONDITION_REGISTERED)
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
        containers.insert(0, _slurmd_container(pool, node, settings, {}))
    else:
        containers[index] = _slurmd_container(pool, node, settings, containers[index])
    spec["containers"] = containers

    key_volume = _key_volume(settings)
    volumes: list[dict[str, Any]] = [
        v for v in spec.get("volumes") or [] if v.get("name") != key_volume["name"]
    ]
    volumes.append(key_volume)
    spec["volumes"] = volumes
    return {"apiVersion": "v1", "kind": "Pod", "metadata": manifest_metadata, "spec": spec}


def _key_volume(settings: PodSettings) -> dict[str, Any]:
    """The Secret volume with the key of the cluster's authentication (munge or auth/slurm)."""
    if settings.auth == AUTH_SLURM:
        name, secret, key = SLURM_KEY_VOLUME, settings.slurm_key_secret, SLURM_SECRET_KEY
    else:
        name, secret, key = MUNGE_VOLUME, settings.munge_key_secret, MUNGE_SECRET_KEY
    return {
        "name": name,
        "secret": {
            "secretName": secret,
            "items": [{"key": key, "path": key}],
            "defaultMode": _SECRET_MODE,
        },
    }


def _key_mount(settings: PodSettings) -> dict[str, Any]:
    if settings.auth == AUTH_SLURM:
        return {"name": SLURM_KEY_VOLUME, "mountPath": SLURM_KEY_MOUNT_DIR, "readOnly": True}
    return {"name": MUNGE_VOLUME, "mountPath": MUNGE_MOUNT_DIR, "readOnly": True}


def _key_file_env(auth: str) -> dict[str, str]:
    """The variable that tells the entrypoint where the key of ``auth`` is mounted."""
    if auth == AUTH_SLURM:
        # The entrypoint runs auth/slurm when this file exists (and munge otherwise).
        return {"name": ENV_KEY_FILE, "value": f"{SLURM_KEY_MOUNT_DIR}/{SLURM_SECRET_KEY}"}
    return {"name": ENV_MUNGE_KEY_FILE, "value": f"{MUNGE_MOUNT_DIR}/{MUNGE_SECRET_KEY}"}


def _slurmd_container(
    pool: NodePool, node: str, settings: PodSettings, template: dict[str, Any]
) -> dict[str, Any]:
    container = dict(template)
    container["name"] = SLURMD_CONTAINER
    container["image"] = container.get("image") or pool.image
    # No `command`: the image's ENTRYPOINT runs. A template's own command stays, for the
    # namespace's admission policy to allow or refuse.

    key_file = _key_file_env(settings.auth)
    own_env = [
        {"name": ENV_NODENAME, "value": node},
        {"name": ENV_CONF_SERVER, "value": settings.conf_server},
        key_file,
    ]
    own_names = OWN_ENV | {key_file["name"]}
    user_env = [e for e in container.get("env") or [] if e.get("name") not in own_names]
    if not any(e.get("name") == ENV_EXTRA_ARGS for e in user_env):
        own_env.append({"name": ENV_EXTRA_ARGS, "value": ""})
    container["env"] = own_env + user_env

    key_mount = _key_mount(settings)
    mounts = [m for m in container.get("volumeMounts") or [] if m.get("name") != key_mount["name"]]
    mounts.append(key_mount)
    container["volumeMounts"] = mounts

    resources: dict[str, Any] = dict(container.get("resources") or {})
    # The pool's Gres as extended resources (gpu:2 -> nvidia.com/gpu: 2), so the scheduler puts
    # the pod where the devices are and the device plugin hands them to it.
    shape = {"cpu": str(pool.cpus), "memory": f"{pool.real_memory_mb}Mi", **pool.gres_requests()}
    # Requests equal to limits: Guaranteed QoS, so the kubelet evicts slurmd pods last.
    for kind in ("requests", "limits"):
        resources[kind] = {**shape, **(resources.get(kind) or {})}
    container["resources"] = resources

    security: dict[str, Any] = dict(container.get("securityContext") or {})
    # Privileged is the pool's explicit choice (cgroup confinement on a cgroup v1 host needs it:
    # the container's cgroup mounts are read-only otherwise), and so are capabilities of its own.
    if security.get("privileged") is None and security.get("capabilities") is None:
        security.setdefault("allowPrivilegeEscalation", False)
        security["capabilities"] = {"drop": ["ALL"], "add": list(SLURMD_CAPABILITIES)}
    container["securityContext"] = security
    return container
