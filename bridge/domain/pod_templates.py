"""What a pool's pod template may set: the checks the configuration runs on each template before
the bridge renders a pod from it (bridge.domain.pod_rendering). Fields the bridge owns are
refused instead of being overwritten silently, and so is anything that loosens the key: a
template's own volume of the key Secret, the key volume in another container, the key Secret in
env. Kubernetes validates the rest when the pod is created."""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping, Sequence
from typing import Any

from bridge.domain.pod_rendering import (
    AUTH_MUNGE,
    AUTH_SLURM,
    ENV_KEY_FILE,
    ENV_MUNGE_KEY_FILE,
    KEY_VOLUMES,
    MUNGE_VOLUME,
    OWN_ENV,
    SLURM_KEY_VOLUME,
)
from bridge.domain.pods import (
    ANNOTATION_CREATE_ID,
    LABEL_CLUSTER,
    LABEL_MANAGED_BY,
    LABEL_NODE,
    LABEL_POOL,
    LABEL_TEMPLATE_HASH,
    SLURMD_CONTAINER,
)

_OWN_LABELS = frozenset(
    {LABEL_MANAGED_BY, LABEL_POOL, LABEL_NODE, LABEL_CLUSTER, LABEL_TEMPLATE_HASH}
)
_TEMPLATE_KEYS = frozenset({"metadata", "spec"})
_TEMPLATE_METADATA_KEYS = frozenset({"labels", "annotations"})
# spec fields that carry the pod's identity or the fail-fast contract.
_OWN_SPEC_KEYS = {
    "hostname": "the bridge sets it to the node name",
    "subdomain": "the bridge sets it to kubernetes.node_service",
    "nodeName": "the scheduler places the pod; use nodeSelector or affinity",
    # One group for a whole pool would hold every node of it for the first job's gang.
    "schedulingGroup": "the bridge sets it: a job's nodes share the job's PodGroup "
    "(kubernetes.gang_scheduling)",
}
_KEY_MOUNTED = "mounts the key Secret {}; only the bridge mounts it, into slurmd alone"
_KEY_READ = "reads the key Secret {}; only the bridge mounts it, into slurmd alone"


Path = tuple[str | int, ...]


def template_problems(template: Mapping[str, Any]) -> list[tuple[Path, str]]:
    """What is wrong with a pool's pod template, as ``(path, message)`` pairs.

    Checks only what the bridge relies on or would override; Kubernetes validates the rest when
    the pod is created. Paths are relative to the template, e.g. ``("spec", "hostname")``.
    """
    problems: list[tuple[Path, str]] = [
        ((key,), "unknown key; a pod template has only 'metadata' and 'spec'")
        for key in template
        if key not in _TEMPLATE_KEYS
    ]
    # `metadata:` left empty in YAML is None: treat it as absent, like the API server does.
    metadata = template.get("metadata")
    problems.extend(_metadata_problems({} if metadata is None else metadata))
    spec = template.get("spec")
    if spec is None:
        spec = {}
    if not isinstance(spec, Mapping):
        return [*problems, (("spec",), "must be a mapping")]
    for key, why in _OWN_SPEC_KEYS.items():
        if key in spec:
            problems.append((("spec", key), why))
    if spec.get("restartPolicy", "Never") != "Never":
        problems.append(
            (
                ("spec", "restartPolicy"),
                "must be Never: a crashed slurmd has to surface as a failure, not restart",
            )
        )
    problems.extend(_containers_problems(spec.get("containers"), ("spec", "containers")))
    volumes = spec.get("volumes") or []
    if not isinstance(volumes, list):
        problems.append((("spec", "volumes"), "must be a list"))
    else:
        for i, volume in enumerate(volumes):
            if isinstance(volume, Mapping) and volume.get("name") == MUNGE_VOLUME:
                problems.append(
                    (("spec", "volumes", i, "name"), f"{MUNGE_VOLUME!r} is the bridge's volume")
                )
    return problems


def auth_template_problems(template: Mapping[str, Any], auth: str) -> list[tuple[Path, str]]:
    """What a pool's template sets that the bridge owns under ``slurm.auth``: ``MUNGE_KEY_FILE``
    under munge; the ``slurm-key`` volume and mount and ``SLURM_KEY_FILE`` under slurm. Paths as
    in :func:`template_problems` (run that first: this one skips what it reports)."""
    spec = template.get("spec")
    if not isinstance(spec, Mapping):
        return []
    owned = f"set by the bridge with slurm.auth: {AUTH_SLURM if auth == AUTH_SLURM else AUTH_MUNGE}"
    key_file = ENV_KEY_FILE if auth == AUTH_SLURM else ENV_MUNGE_KEY_FILE
    problems: list[tuple[Path, str]] = []
    if auth == AUTH_SLURM:
        for i, volume in enumerate(_list(spec.get("volumes"))):
            if isinstance(volume, Mapping) and volume.get("name") == SLURM_KEY_VOLUME:
                problems.append(
                    (("spec", "volumes", i, "name"), f"{SLURM_KEY_VOLUME!r} is {owned}")
                )
    for here, container in _containers(spec, ("containers",)):
        if container.get("name") != SLURMD_CONTAINER:
            continue
        for j, entry in enumerate(_list(container.get("env"))):
            if isinstance(entry, Mapping) and entry.get("name") == key_file:
                problems.append(((*here, "env", j, "name"), f"{key_file} is {owned}"))
        if auth != AUTH_SLURM:
            continue
        for j, mount in enumerate(_list(container.get("volumeMounts"))):
            if isinstance(mount, Mapping) and mount.get("name") == SLURM_KEY_VOLUME:
                problems.append(
                    ((*here, "volumeMounts", j, "name"), f"{SLURM_KEY_VOLUME!r} is {owned}")
                )
    return problems


def key_template_problems(
    template: Mapping[str, Any], key_secrets: Collection[str]
) -> list[tuple[Path, str]]:
    """Where a pool's template would put the cluster's key within reach of more than the
    bridge's mount in slurmd, whatever its fsGroup or modes: a volume of a key Secret
    (``key_secrets``: ``slurm.munge_key_secret`` and ``slurm.slurm_key_secret``, projected ones
    too), the bridge's key volumes (:data:`KEY_VOLUMES`) mounted in any other container, and a
    key Secret in any container's ``env`` or ``envFrom``. Paths as in :func:`template_problems`.
    """
    spec = template.get("spec")
    if not isinstance(spec, Mapping):
        return []
    secrets = frozenset(key_secrets)
    problems: list[tuple[Path, str]] = []
    for i, volume in enumerate(_list(spec.get("volumes"))):
        if isinstance(volume, Mapping):
            problems.extend(_key_volume_problems(("spec", "volumes", i), volume, secrets))
    for here, container in _containers(spec, ("initContainers", "containers")):
        slurmd = here[1] == "containers" and container.get("name") == SLURMD_CONTAINER
        problems.extend(_key_container_problems(here, container, secrets, slurmd=slurmd))
    return problems


def _key_volume_problems(
    here: Path, volume: Mapping[str, Any], secrets: frozenset[str]
) -> Iterator[tuple[Path, str]]:
    secret = volume.get("secret")
    if isinstance(secret, Mapping) and _named(secret.get("secretName"), secrets):
        yield (*here, "secret", "secretName"), _KEY_MOUNTED.format(secret["secretName"])
    projected = volume.get("projected")
    sources = projected.get("sources") if isinstance(projected, Mapping) else None
    for j, source in enumerate(_list(sources)):
        secret = source.get("secret") if isinstance(source, Mapping) else None
        if isinstance(secret, Mapping) and _named(secret.get("name"), secrets):
            path: Path = (*here, "projected", "sources", j, "secret", "name")
            yield path, _KEY_MOUNTED.format(secret["name"])


def _key_container_problems(
    here: Path, container: Mapping[str, Any], secrets: frozenset[str], *, slurmd: bool
) -> Iterator[tuple[Path, str]]:
    for j, mount in enumerate(_list(container.get("volumeMounts"))):
        name = mount.get("name") if isinstance(mount, Mapping) else None
        if not slurmd and isinstance(name, str) and name in KEY_VOLUMES:
            yield (
                (*here, "volumeMounts", j, "name"),
                f"{name!r} is the key's volume: only the slurmd container mounts it",
            )
    for j, entry in enumerate(_list(container.get("env"))):
        value_from = entry.get("valueFrom") if isinstance(entry, Mapping) else None
        ref = value_from.get("secretKeyRef") if isinstance(value_from, Mapping) else None
        if isinstance(ref, Mapping) and _named(ref.get("name"), secrets):
            path: Path = (*here, "env", j, "valueFrom", "secretKeyRef", "name")
            yield path, _KEY_READ.format(ref["name"])
    for j, source in enumerate(_list(container.get("envFrom"))):
        ref = source.get("secretRef") if isinstance(source, Mapping) else None
        if isinstance(ref, Mapping) and _named(ref.get("name"), secrets):
            yield (*here, "envFrom", j, "secretRef", "name"), _KEY_READ.format(ref["name"])


def _list(value: object) -> list[Any]:
    # What the template holds where a list belongs; anything else is template_problems' to tell.
    return value if isinstance(value, list) else []


def _named(name: object, names: frozenset[str]) -> bool:
    return isinstance(name, str) and name in names


def _containers(
    spec: Mapping[str, Any], kinds: Sequence[str]
) -> Iterator[tuple[Path, Mapping[str, Any]]]:
    """The containers of ``spec`` of each kind (``containers``, ``initContainers``) with their
    paths, skipping what is not a mapping."""
    for kind in kinds:
        for i, container in enumerate(_list(spec.get(kind))):
            if isinstance(container, Mapping):
                yield ("spec", kind, i), container


def _metadata_problems(metadata: object) -> list[tuple[Path, str]]:
    if not isinstance(metadata, Mapping):
        return [(("metadata",), "must be a mapping")]
    problems: list[tuple[Path, str]] = [
        (
            ("metadata", key),
            "the bridge sets the pod's identity; only labels and annotations may be given",
        )
        for key in metadata
        if key not in _TEMPLATE_METADATA_KEYS
    ]
    for key in ("labels", "annotations"):
        problems.extend(_string_map_problems(metadata.get(key), ("metadata", key)))
    labels = metadata.get("labels")
    for key in labels if isinstance(labels, Mapping) else ():
        if key in _OWN_LABELS:
            problems.append((("metadata", "labels", key), "the bridge sets this label"))
    annotations = metadata.get("annotations")
    if isinstance(annotations, Mapping) and ANNOTATION_CREATE_ID in annotations:
        problems.append(
            (("metadata", "annotations", ANNOTATION_CREATE_ID), "the bridge sets this annotation")
        )
    return problems


def template_image(template: Mapping[str, Any]) -> str:
    """The image the template gives its slurmd container, or ``""``."""
    spec = template.get("spec")
    containers = spec.get("containers") if isinstance(spec, Mapping) else None
    for container in containers if isinstance(containers, list) else ():
        if isinstance(container, Mapping) and container.get("name") == SLURMD_CONTAINER:
            image = container.get("image")
            return image if isinstance(image, str) else ""
    return ""


def _string_map_problems(value: object, path: Path) -> list[tuple[Path, str]]:
    if value is None:
        return []
    if not isinstance(value, Mapping):
        return [(path, "must be a mapping of strings")]
    # YAML turns `gpu: true` into a boolean, which the API server rejects only at create time.
    return [
        ((*path, key), f"must be a string, got {item!r} (quote it)")
        for key, item in value.items()
        if not isinstance(item, str)
    ]


def _containers_problems(value: object, path: Path) -> list[tuple[Path, str]]:
    if value is None:
        return []
    if not isinstance(value, list):
        return [(path, "must be a list of containers")]
    problems: list[tuple[Path, str]] = []
    for i, container in enumerate(value):
        here = (*path, i)
        if not isinstance(container, Mapping) or not isinstance(container.get("name"), str):
            problems.append((here, "must be a container with a name"))
            continue
        if container["name"] != SLURMD_CONTAINER:
            continue
        env = container.get("env") or []
        if not isinstance(env, list):
            problems.append(((*here, "env"), "must be a list"))
            continue
        for j, entry in enumerate(env):
            # A name that is not a string (a list, a mapping) cannot be looked up in a set.
            name = entry.get("name") if isinstance(entry, Mapping) else None
            if isinstance(name, str) and name in OWN_ENV:
                problems.append(
                    ((*here, "env", j, "name"), f"{entry['name']} is set by the bridge")
                )
        mounts = container.get("volumeMounts") or []
        for j, mount in enumerate(mounts if isinstance(mounts, list) else ()):
            if isinstance(mount, Mapping) and mount.get("name") == MUNGE_VOLUME:
                problems.append(
                    ((*here, "volumeMounts", j, "name"), f"{MUNGE_VOLUME!r} is the bridge's volume")
                )
    return problems
