"""The doctor's decisions about the pods a pool would get: whether the API server admits them
(a server-side dry run), whether their image references are names a kubelet can pull, and
whether the slurmd image's Slurm series can register with slurmctld's. Pure, tested as tables.

The series of an image is read from its tag only (``slurmd:24.11-0.1.0``, ``slurmd:24.11``, a
site's ``slurmd:24.11.5-rocky9``): a registry is not asked, since the kubelet's pull credentials
are not the doctor's, so a tag without a series is a warning that says how to look.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from bridge.doctor.checks import RBAC_FIX, Check, Status
from bridge.domain.pods import SLURMD_CONTAINER
from bridge.errors import BackendError, BridgeError, Forbidden, InvalidInput, NoCapacity

# ---------------------------------------------------------------------------------------------
# Image references: the grammar of github.com/distribution/reference, which the kubelet parses
# with (a name it cannot parse fails the pod with InvalidImageName, after the create).

_ALNUM: Final = r"[a-z0-9]+"
_SEPARATOR: Final = r"(?:[._]|__|[-]+)"
_PATH_COMPONENT: Final = rf"{_ALNUM}(?:{_SEPARATOR}{_ALNUM})*"
_DOMAIN_COMPONENT: Final = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_HOST: Final = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[a-fA-F0-9:]+\])"
_REFERENCE: Final = re.compile(
    rf"(?P<name>(?:{_HOST}(?::[0-9]+)?/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*)"
    r"(?::(?P<tag>[\w][\w.-]{0,127}))?"
    r"(?:@(?P<digest>[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}))?"
)
#: The longest repository name the reference library accepts.
_MAX_NAME: Final = 255


@dataclass(frozen=True)
class ImageReference:
    """An image reference split as a kubelet splits it; ``tag`` and ``digest`` may be empty."""

    name: str
    tag: str = ""
    digest: str = ""


def parse_image_reference(reference: str) -> ImageReference | None:
    """The parts of ``reference``, or None when it is no valid image reference (upper case in
    the repository, blanks, a bad tag or digest ...)."""
    match = _REFERENCE.fullmatch(reference)
    if match is None or len(match["name"]) > _MAX_NAME:
        return None
    return ImageReference(match["name"], match["tag"] or "", match["digest"] or "")


# ---------------------------------------------------------------------------------------------
# Slurm series and which slurmd a slurmctld accepts

#: Slurm's major releases of the nine-month cycle, in order; from 24.11 on one each May and
#: November (https://slurm.schedmd.com/upgrades.html, "Release Cycle").
_NINE_MONTH_RELEASES: Final = (
    "17.02",
    "17.11",
    "18.08",
    "19.05",
    "20.02",
    "20.11",
    "21.08",
    "22.05",
    "23.02",
    "23.11",
    "24.05",
)
#: The first release that accepts daemons of the three releases before it (earlier ones: two).
_THREE_RELEASE_WINDOW_SINCE: Final = "24.11"
#: ``YY.MM`` in a tag, not inside a longer number (``2024.11``, ``124.11``, ``24.115``).
_SERIES_IN_TAG: Final = re.compile(r"(?<![0-9.])([0-9]{2})\.([0-9]{2})(?![0-9])")


def release_index(series: str) -> int | None:
    """The position of Slurm release ``series`` (``24.11``) among all major releases, so that
    the difference of two is how many releases apart they are; None when no Slurm release has
    that number."""
    if series in _NINE_MONTH_RELEASES:
        return _NINE_MONTH_RELEASES.index(series)
    match = re.fullmatch(r"([0-9]{2})\.([0-9]{2})", series)
    if match is None:
        return None
    year, month = int(match[1]), int(match[2])
    if month not in (5, 11) or (year, month) < (24, 11):
        return None
    # 24.11 follows 24.05; then two a year.
    return len(_NINE_MONTH_RELEASES) + (year - 24) * 2 - (1 if month == 5 else 0)


def accepted_older_releases(controller: str) -> int:
    """How many releases older than itself slurmctld ``controller`` accepts a slurmd from:
    three from 24.11 on, two before (Slurm's upgrade guide, "Compatibility Window")."""
    index, since = release_index(controller), release_index(_THREE_RELEASE_WINDOW_SINCE)
    return 3 if index is not None and since is not None and index >= since else 2


def series_of_version(version: str) -> str:
    """``26.05`` of ``26.05.5`` (``scontrol show config``'s SLURM_VERSION); "" if not one."""
    match = re.match(r"([0-9]+)\.([0-9]+)", version.strip())
    return f"{int(match[1]):02d}.{int(match[2]):02d}" if match else ""


def image_series(reference: str) -> str:
    """The Slurm series an image's tag names (``24.11`` of ``slurmd:24.11-0.1.0``), or "" when
    the tag names none, or more than one."""
    parsed = parse_image_reference(reference)
    if parsed is None:
        return ""
    found = {
        f"{m[1]}.{m[2]}"
        for m in _SERIES_IN_TAG.finditer(parsed.tag)
        if release_index(f"{m[1]}.{m[2]}") is not None
    }
    return found.pop() if len(found) == 1 else ""


def check_slurmd_series(image: str, pools: Sequence[str], controller: str) -> Check:
    """Whether the slurmd of ``image`` (the slurmd container's, of ``pools``) can register with
    slurmctld of series ``controller`` ("" when unknown): never newer, at most
    :func:`accepted_older_releases` older."""
    name = f"slurmd series {image}"
    used_by = f"pool{'s' if len(pools) > 1 else ''} {', '.join(pools)}"
    series = image_series(image)
    if not controller:
        return Check(
            Status.WARN,
            name,
            f"{used_by}: cannot tell slurmctld's series (scontrol show config has no "
            "SLURM_VERSION)",
            "check that slurmd in the image is slurmctld's series or at most two or three "
            "releases older (Slurm's upgrade guide)",
        )
    window = accepted_older_releases(controller)
    how = (
        f"run `podman run --rm --entrypoint slurmd {image} -V` (or `kubectl exec <pod> -c slurmd "
        f"-- slurmd -V`): it must say {controller}, or one of the {window} releases before it; "
        "tag images <series>-<version> (as `make image` does) and doctor checks it"
    )
    if not series:
        return Check(
            Status.WARN,
            name,
            f"{used_by}: the image's tag names no Slurm series, so doctor cannot tell which "
            f"slurmd it holds; slurmctld runs {controller}",
            how,
        )
    rebuild = f"use a slurmd image of Slurm {controller} (`make image SLURM={controller}`)"
    if series == controller:
        return Check(Status.PASS, name, f"{used_by}: Slurm {series}, as slurmctld")
    mine, theirs = release_index(series), release_index(controller)
    if mine is None or theirs is None:  # the tag's is a release (image_series); this is not
        return Check(
            Status.WARN,
            name,
            f"{used_by}: the tag says Slurm {series}; slurmctld's {controller} is no release "
            "this doctor knows",
            how,
        )
    if mine > theirs:
        return Check(
            Status.FAIL,
            name,
            f"{used_by}: slurmd {series} is newer than slurmctld {controller}; Slurm refuses "
            "a slurmd newer than its slurmctld",
            rebuild,
        )
    behind = theirs - mine
    if behind > window:
        return Check(
            Status.FAIL,
            name,
            f"{used_by}: slurmd {series} is {behind} releases older than slurmctld "
            f"{controller}, which accepts slurmd of its own release and the {window} before it; "
            "the nodes would never register",
            rebuild,
        )
    return Check(
        Status.WARN,
        name,
        f"{used_by}: slurmd {series} is {behind} release{'s' if behind > 1 else ''} older than "
        f"slurmctld {controller} (Slurm accepts up to {window}), but a configless slurmd reads "
        f"{controller}'s slurm.conf, whose newer options it may not know",
        rebuild,
    )


# ---------------------------------------------------------------------------------------------
# The API server's answer to a dry-run create

#: The namespace annotations of the admission guard (deploy/kustomize/namespace).
ALLOWED_IMAGES: Final = "slurm-k8s-bridge.io/allowed-images"
ALLOWED_HOST_PATHS: Final = "slurm-k8s-bridge.io/allowed-host-paths"
NAMESPACE_FILE: Final = "deploy/kustomize/namespace/namespace.yaml"
#: Any other list of the guard a refusal names (secrets, tolerations, pod options ...).
_GUARD_LIST: Final = re.compile(r"slurm-k8s-bridge\.io/allowed-[a-z-]+")


def check_image_names(pool: str, images: Sequence[str]) -> Check | None:
    """A FAIL when an image of the pool's pod is no image reference (the API server accepts
    it; every pod then fails with InvalidImageName); None when all are valid."""
    bad = [image for image in images if parse_image_reference(image) is None]
    if not bad:
        return None
    return Check(
        Status.FAIL,
        f"pod {pool}",
        f"pool {pool}: {', '.join(repr(b) for b in bad)} is not a valid image reference; "
        "every pod would fail with InvalidImageName",
        "fix the pool's image (lower-case repository, [registry/]repository[:tag][@digest])",
    )


def check_pod_admission(
    pool: str, node: str, namespace: str, error: BridgeError | None, exists: bool = False
) -> Check:
    """The verdict on a server-side dry-run create of ``node``'s pod: ``error`` is what the
    API server answered (None: admitted); ``exists``: it answered that a pod of that name
    exists, which it checks only after admission and quota let the pod through."""
    name = f"pod {pool}"
    prefix = f"pool {pool}: the pod of {node}"
    if error is None:
        how = "passed admission (a pod of that name exists)" if exists else "would be created"
        return Check(
            Status.PASS,
            name,
            f"{prefix} {how} (server-side dry run: admission policies, Pod Security, "
            "ResourceQuota)",
        )
    message = str(error)
    if isinstance(error, NoCapacity) or "failed quota" in message:
        return Check(
            Status.FAIL,
            name,
            f"{prefix} is refused by a ResourceQuota: {message}",
            f"raise the ResourceQuota of namespace {namespace}, or fit the pool's requests and "
            "limits (pod_template) to it",
        )
    if isinstance(error, Forbidden):
        fix = _forbidden_fix(message, namespace)
        return Check(Status.FAIL, name, f"{prefix} is refused: {message}", fix)
    if isinstance(error, InvalidInput):
        return Check(
            Status.FAIL,
            name,
            f"{prefix} is rejected as invalid: {message}",
            "fix the pool's pod_template (check-config renders it; the API server validates it)",
        )
    if isinstance(error, BackendError):
        return Check(
            Status.WARN,
            name,
            f"{prefix}: the dry run did not get an answer: {message}",
            "check the API server and run doctor again",
        )
    return Check(Status.FAIL, name, f"{prefix} cannot be rendered: {message}", "fix the pool")


def _forbidden_fix(message: str, namespace: str) -> str:
    if ALLOWED_IMAGES in message:
        return (
            f"add the image (or a prefix ending in *) to the annotation {ALLOWED_IMAGES} of "
            f"namespace {namespace} ({NAMESPACE_FILE}), or give the pool an allowed image"
        )
    if ALLOWED_HOST_PATHS in message:
        return (
            f"add the path to the annotation {ALLOWED_HOST_PATHS} of namespace {namespace} "
            f"({NAMESPACE_FILE}), or change the pool's hostPath volumes"
        )
    guard_list = _GUARD_LIST.search(message)
    if guard_list is not None:
        return (
            f"add what it names to the annotation {guard_list.group(0)} of namespace "
            f"{namespace} ({NAMESPACE_FILE}; docs/security.md says what each guards), or "
            "change the pool's pod_template"
        )
    if "PodSecurity" in message:
        return (
            f"label namespace {namespace} pod-security.kubernetes.io/enforce=privileged "
            f"({NAMESPACE_FILE}), or make the pool's pod fit the namespace's level "
            "(slurmd runs unprivileged unless its template sets privileged: true, which only "
            "cgroup confinement on cgroup v1 needs)"
        )
    if "cannot create resource" in message:
        return f"grant create pods in {namespace} ({RBAC_FIX})"
    return (
        "an admission webhook or policy of the cluster refuses the pod: ask its owner, or change "
        "the pool's pod_template to fit it"
    )


def pod_images(manifest: Mapping[str, Any]) -> list[str]:
    """Every image of a rendered pod: its containers' and init containers'."""
    spec = manifest.get("spec") or {}
    return [
        str(container.get("image") or "")
        for key in ("initContainers", "containers")
        for container in spec.get(key) or []
    ]


def slurmd_image(manifest: Mapping[str, Any]) -> str:
    """The image of a rendered pod's slurmd container."""
    for container in (manifest.get("spec") or {}).get("containers") or []:
        if container.get("name") == SLURMD_CONTAINER:
            return str(container.get("image") or "")
    return ""
