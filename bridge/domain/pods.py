"""Kubernetes' view of a slurmd pod, reduced to what the bridge decides on.

``pod_view`` reads a pod manifest as plain JSON (what the API server sends), so it stays pure and
is tested on recorded manifests.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY = "slurm-k8s-bridge"
LABEL_POOL = "slurm-k8s-bridge.io/pool"
LABEL_NODE = "slurm-k8s-bridge.io/node"
LABEL_CLUSTER = "slurm-k8s-bridge.io/cluster"
#: The node's Slurm state as one word (``allocated``, ``idle``, ...; see ``pod_slurm_state``),
#: so ``kubectl get pods -l slurm-k8s-bridge.io/slurm-state=allocated`` finds the busy nodes.
LABEL_SLURM_STATE = "slurm-k8s-bridge.io/slurm-state"
#: A short hash of everything the pool put into the pod (see ``pool_template_hash``). A label,
#: not an annotation, for the same reason Deployments label ``pod-template-hash``: ``kubectl get
#: pods -L`` shows it and ``-l`` finds the pods still on an older template during a rollout.
LABEL_TEMPLATE_HASH = "slurm-k8s-bridge.io/template-hash"
#: A random id each create of the bridge carries (``bridge.adapters.kubernetes.provenance``): the
#: pod that shows the id last sent for its name is the one this bridge created.
ANNOTATION_CREATE_ID = "slurm-k8s-bridge.io/create-id"
#: The pod condition (and readiness gate) that is True once the node's slurmd registered.
CONDITION_REGISTERED = "slurm-k8s-bridge.io/registered"
#: The container the bridge renders into every pod; only its end ends the node (sidecars may end).
SLURMD_CONTAINER = "slurmd"

# Waiting reasons that will not fix themselves in time for a job: fail fast on them.
FATAL_WAITING_REASONS = frozenset(
    {
        "InvalidImageName",
        "ErrImageNeverPull",
        "CreateContainerConfigError",
        "CreateContainerError",
        "CrashLoopBackOff",
        "RunContainerError",
    }
)
# A pull that failed may succeed on the kubelet's next try (a registry hiccup, a node that just
# got credentials): a hold-up with a clock (the pool's image_pull_timeout_s), not a verdict.
RETRYING_PULL_REASONS = frozenset({"ErrImagePull", "ImagePullBackOff"})
UNSCHEDULABLE = "Unschedulable"


@dataclass(frozen=True)
class PodFailure:
    """Why Kubernetes cannot (or will no longer) run a pod; ``reason`` is one CamelCase word."""

    reason: str
    message: str


@dataclass(frozen=True)
class PodHoldup:
    """Why a pod is not running yet while waiting may still help, and since when.

    ``reason`` is ``Unschedulable`` (the scheduler found no node; an autoscaler may add one) or a
    retrying image pull (``ErrImagePull``, ``ImagePullBackOff``). ``since`` is when the clock
    started: the ``PodScheduled=False`` transition, or the pod's scheduling for a pull.
    """

    reason: str
    message: str
    since: datetime


@dataclass(frozen=True)
class PodView:
    """One slurmd pod the bridge owns."""

    name: str
    node: str
    pool: str
    phase: str
    ip: str
    created_at: datetime
    deleting: bool
    failure: PodFailure | None
    host: str = ""
    uid: str = ""
    holdup: PodHoldup | None = None
    #: ``metadata.deletionTimestamp``: when the kubelet's grace period for the pod ends.
    deletion_deadline: datetime | None = None
    #: ``metadata.deletionGracePeriodSeconds``; 0 once a force delete was made (by us or anyone).
    deletion_grace_s: int | None = None
    namespace: str = ""
    #: What the pod shows of its node's Slurm state: the :data:`LABEL_SLURM_STATE` label ("" when
    #: absent) and the :data:`CONDITION_REGISTERED` condition (None when absent).
    slurm_state: str = ""
    registered: bool | None = None
    #: The :data:`LABEL_TEMPLATE_HASH` of the template the pod was rendered from; "" for pods of
    #: a bridge older than that label: unknown, never rolled (upgrading the bridge rolls nothing).
    template_hash: str = ""
    #: When this bridge first saw the pod, by its own clock (the watch's cache sets it; None:
    #: read directly). ``created_at`` is the API server's clock.
    first_seen: datetime | None = None
    #: The :data:`ANNOTATION_CREATE_ID` it was created with ("" when none).
    create_id: str = ""
    #: The PodGroup it was created in (``spec.schedulingGroup.podGroupName``, immutable), the
    #: gang of its job's nodes (``bridge.domain.gangs``); None for a pod scheduled on its own.
    pod_group: str | None = None

    @property
    def is_running(self) -> bool:
        return self.phase == "Running" and not self.deleting

    @property
    def known_since(self) -> datetime:
        """Since when the pod is old enough for the age guards: its creation, or, when later,
        when this bridge first saw it. A bridge clock ahead of the API server's (seen: 25-30 s)
        made every new pod look that much older, and orphans were deleted before the guard;
        the first sighting is on the bridge's own clock (after a restart it is the restart:
        deletes wait one guard longer, nothing worse)."""
        if self.first_seen is None or self.first_seen < self.created_at:
            return self.created_at
        return self.first_seen


#: A pod on its way out for no reason Kubernetes gave (deleted by someone, or by us earlier).
TERMINATING = PodFailure("Deleted", "the pod is being deleted")


def parse_time(value: str) -> datetime:
    """An API server timestamp (RFC 3339, ``Z`` for UTC) as an aware datetime."""
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def pod_failure(status: Mapping[str, Any]) -> PodFailure | None:
    """Derive a fail-fast reason from a pod's ``status`` or ``None`` while it may still run."""
    phase = status.get("phase", "")
    if phase in ("Failed", "Succeeded"):
        reason = status.get("reason") or ("Completed" if phase == "Succeeded" else "Failed")
        message = status.get("message") or f"pod phase is {phase}"
        return PodFailure(reason, message)
    for condition in status.get("conditions") or []:
        if condition.get("type") == "DisruptionTarget" and condition.get("status") == "True":
            return PodFailure(
                condition.get("reason") or "DisruptionTarget",
                condition.get("message") or "Kubernetes is disrupting the pod",
            )
    # An init container stuck on its image keeps the pod Pending for good, just as slurmd would.
    for container in status.get("initContainerStatuses") or []:
        waiting = (container.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in FATAL_WAITING_REASONS:
            return PodFailure(waiting["reason"], waiting.get("message") or waiting["reason"])
    for container in status.get("containerStatuses") or []:
        waiting = (container.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in FATAL_WAITING_REASONS:
            return PodFailure(waiting["reason"], waiting.get("message") or waiting["reason"])
        terminated = (container.get("state") or {}).get("terminated")
        # A sidecar that ends (a log shipper done, a one-shot helper) leaves slurmd and its
        # jobs running, and Kubernetes keeps the pod Running: so does the bridge. Only slurmd's
        # own end fails the node.
        if terminated and phase == "Running" and container.get("name") == SLURMD_CONTAINER:
            return PodFailure(
                terminated.get("reason") or "Terminated",
                f"slurmd exited with code {terminated.get('exitCode')}",
            )
    return None


def _condition(status: Mapping[str, Any], kind: str) -> Mapping[str, Any]:
    for condition in status.get("conditions") or []:
        if isinstance(condition, Mapping) and condition.get("type") == kind:
            return condition
    return {}


def pod_holdup(status: Mapping[str, Any], created_at: datetime) -> PodHoldup | None:
    """What keeps a pod from running while waiting may still help (see :class:`PodHoldup`)."""
    scheduled = _condition(status, "PodScheduled")
    since_text = scheduled.get("lastTransitionTime")
    since = parse_time(since_text) if isinstance(since_text, str) else created_at
    if scheduled.get("status") == "False" and scheduled.get("reason") == UNSCHEDULABLE:
        return PodHoldup(UNSCHEDULABLE, scheduled.get("message") or "no node fits", since)
    for key in ("initContainerStatuses", "containerStatuses"):
        for container in status.get(key) or []:
            waiting = (container.get("state") or {}).get("waiting") or {}
            if waiting.get("reason") in RETRYING_PULL_REASONS:
                return PodHoldup(waiting["reason"], waiting.get("message") or "", since)
    return None


def _registered(status: Mapping[str, Any]) -> bool | None:
    condition = _condition(status, CONDITION_REGISTERED)
    value = condition.get("status")
    return None if value not in ("True", "False") else value == "True"


def _grace(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def pod_view(manifest: Mapping[str, Any]) -> PodView:
    """Build a :class:`PodView` from a pod manifest (API JSON, camelCase keys)."""
    metadata = manifest.get("metadata") or {}
    labels = metadata.get("labels") or {}
    annotations = metadata.get("annotations") or {}
    status = manifest.get("status") or {}
    spec = manifest.get("spec") or {}
    deletion = metadata.get("deletionTimestamp")
    deleting = bool(deletion)
    failure = pod_failure(status)
    if deleting and failure is None:
        failure = TERMINATING
    created_at = parse_time(metadata["creationTimestamp"])
    return PodView(
        name=metadata["name"],
        node=labels.get(LABEL_NODE, metadata["name"]),
        pool=labels.get(LABEL_POOL, ""),
        phase=status.get("phase", "Pending"),
        ip=status.get("podIP", ""),
        created_at=created_at,
        deleting=deleting,
        failure=failure,
        host=spec.get("nodeName", ""),
        uid=str(metadata.get("uid") or ""),
        holdup=None if failure is not None else pod_holdup(status, created_at),
        deletion_deadline=parse_time(deletion) if isinstance(deletion, str) else None,
        deletion_grace_s=_grace(metadata.get("deletionGracePeriodSeconds")),
        namespace=str(metadata.get("namespace") or ""),
        slurm_state=str(labels.get(LABEL_SLURM_STATE) or ""),
        registered=_registered(status),
        template_hash=str(labels.get(LABEL_TEMPLATE_HASH) or ""),
        create_id=str(annotations.get(ANNOTATION_CREATE_ID) or ""),
        pod_group=_pod_group(spec),
    )


def _pod_group(spec: Mapping[str, Any]) -> str | None:
    group = spec.get("schedulingGroup")
    name = group.get("podGroupName") if isinstance(group, Mapping) else None
    return name if isinstance(name, str) and name else None
