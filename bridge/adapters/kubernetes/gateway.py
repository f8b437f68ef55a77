"""``PodGateway``: the bridge's pods in one namespace (list, watch, create, delete), the
autoscaler's Events about them, its PodGroups (gang scheduling), and the access checks
``doctor`` makes."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any, TypeVar
from urllib.parse import quote

import orjson
from kubernetes import client as k8s

from bridge.adapters.call_counters import CallCounters
from bridge.adapters.kubernetes.calls import call, call_within, is_not_found
from bridge.adapters.kubernetes.credentials import KubeCredentials
from bridge.adapters.kubernetes.drains import ensure_disruption_budget, list_cordoned_nodes
from bridge.adapters.kubernetes.events import EVENT_SENDERS, EventRecorder, QueuedEvent
from bridge.adapters.kubernetes.json_bytes import MERGE_PATCH, STRATEGIC_MERGE_PATCH, send_json
from bridge.adapters.kubernetes.lease import LeaseGateway
from bridge.adapters.kubernetes.pod_groups import PodGroupApi, discover_pod_group_api
from bridge.adapters.kubernetes.provenance import PodProvenance
from bridge.adapters.kubernetes.scale_up import scale_up_event
from bridge.adapters.kubernetes.watch import PodEvent, watch_pods
from bridge.domain.pod_groups import PodGroupView
from bridge.domain.pod_slurm_state import registered_condition
from bridge.domain.pods import (
    ANNOTATION_CREATE_ID,
    LABEL_CLUSTER,
    LABEL_MANAGED_BY,
    LABEL_SLURM_STATE,
    MANAGED_BY,
    PodView,
    pod_view,
)
from bridge.domain.reconcile import SetPodSlurmState
from bridge.domain.verdict import SCALE_UP_REASONS, ScaleUpEvent
from bridge.errors import BackendError, Conflict, InvalidInput, Unauthorized

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Default budget of one pod delete, retries included (see PodGateway.delete_budget_s).
DELETE_BUDGET_S = 5.0
#: Pods per page of a list (the API server's ``limit``).
LIST_PAGE_SIZE = 500
#: Default number of pod creates and deletes in flight. The API server, not the client, is the
#: limit once a create is bytes out and a status back (issue 11: 64 lean threads made 1,000 pods
#: in 2.0-2.4 s); settings.BridgeSettings.create_concurrency is the configured value.
CONCURRENCY = 64
#: Threads besides the create pool and the Event senders that may hold a connection at the same
#: time: the watch, the reconciler, the lease, the resume dispatcher's workers (4), the gRPC
#: handlers (8). At one slot for the watch only, a 1,000-pod burst left the pool full of the
#: others' connections, and every watch end after it logged urllib3's "Connection pool is full,
#: discarding connection" and opened a new TLS connection.
OTHER_CALLERS = 16


class PodGateway:
    """The bridge's pods in one namespace, selected by our labels."""

    def __init__(
        self,
        api: k8s.CoreV1Api,
        *,
        namespace: str,
        cluster_name: str,
        concurrency: int = CONCURRENCY,
        request_timeout_s: float = 10.0,
        delete_budget_s: float = DELETE_BUDGET_S,
        events: EventRecorder | None = None,
        counters: CallCounters | None = None,
        credentials: KubeCredentials | None = None,
    ) -> None:
        self._api = api
        #: The token behind ``api`` (re-read when its file changes), told of every 401; None:
        #: the caller's Configuration is fixed (tests).
        self.credentials = credentials
        #: Hears of every call's retries and final error (the bridge's metrics); None: nobody.
        self.counters = counters
        self.namespace = namespace
        self.cluster_name = cluster_name
        self.selector = f"{LABEL_MANAGED_BY}={MANAGED_BY},{LABEL_CLUSTER}={cluster_name}"
        self._pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="k8s")
        self._timeout = request_timeout_s
        self.list_page_size = LIST_PAGE_SIZE
        self.events = events or EventRecorder(self._send_event)
        #: A delete (all its retries) ends within this: a suspend must answer well inside
        #: SuspendTimeout, and a pod left behind is the reconciler's to remove next pass.
        self.delete_budget_s = delete_budget_s
        #: Which pods with our labels are ours (made by this bridge, or there when it started).
        self.provenance = PodProvenance()
        #: The PodGroup API's ``group/version`` once discovered ("" when the server serves none);
        #: None until asked (see :meth:`pod_group_api`).
        self._pod_group_api: str | None = None

    @classmethod
    def connect(
        cls,
        *,
        kubeconfig: str | None,
        context: str | None,
        namespace: str,
        cluster_name: str,
        concurrency: int = CONCURRENCY,
        counters: CallCounters | None = None,
    ) -> PodGateway:
        """Load credentials (a kubeconfig file, or the in-cluster service account); a token
        rotated in its file later is used without a restart (see :mod:`.credentials`)."""
        credentials = KubeCredentials(kubeconfig, context)
        configuration = k8s.Configuration()
        credentials.configure(configuration)
        # One connection per concurrent create and Event sender, and the other callers'; urllib3
        # otherwise discards the extras noisily.
        configuration.connection_pool_maxsize = max(concurrency, 4) + EVENT_SENDERS + OTHER_CALLERS
        # The one ApiClient: it keeps this Configuration (no copy), so every call made through
        # it, the watch's, Events' and drains' too, asks the credentials' hook for the token.
        api = k8s.CoreV1Api(k8s.ApiClient(configuration))
        return cls(
            api,
            namespace=namespace,
            cluster_name=cluster_name,
            concurrency=concurrency,
            counters=counters,
            credentials=credentials,
        )

    def close(self, events_grace_s: float = 2.0) -> None:
        """Send what Events are queued (up to ``events_grace_s``), then let go of everything."""
        self.events.flush(events_grace_s)
        self.events.close()
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._api.api_client.close()

    def _call(self, what: str, fn: Callable[[], T]) -> T:
        with self._unauthorized_told():
            return call(what, fn, self.counters)

    def _call_within(self, what: str, budget_s: float, fn: Callable[[float], T]) -> T:
        with self._unauthorized_told():
            return call_within(what, budget_s, fn, self.counters)

    @contextlib.contextmanager
    def _unauthorized_told(self) -> Iterator[None]:
        """A 401 inside: the credentials hear of it (the next call re-reads the token, one line
        per burst) and the error raised names the token's file and the fix."""
        try:
            yield
        except Unauthorized as e:
            if self.credentials is None:
                raise
            raise self.credentials.rejected(e) from e

    def _admitted(self, events: Iterator[PodEvent]) -> Iterator[PodEvent]:
        """``events`` with every pod that is not ours shown as gone: its name may be one of
        ours, and the cache must not keep our old pod of that name (see :mod:`.provenance`)."""
        with self._unauthorized_told():
            for event in events:
                ours = event.kind == "DELETED" or self.provenance.admits(event.pod)
                yield event if ours else dataclasses.replace(event, kind="DELETED")

    # -- reading ---------------------------------------------------------------------------------

    def list_pods(self) -> tuple[list[PodView], str]:
        """Our pods and the list's resourceVersion (to watch from). Pods with our labels that
        are not ours (see :mod:`.provenance`) are left out; the first list adopts its pods.

        Read in pages of ``list_page_size``: the API server serves each page from one snapshot,
        and no single answer holds ten thousand pods. A continue token that expired meanwhile
        raises :class:`WatchExpired` (410), like a watch: list again.
        """
        pods: list[PodView] = []
        version, token = "", ""
        while True:
            response = self._call(
                "list pods",
                functools.partial(
                    self._api.list_namespaced_pod,
                    self.namespace,
                    label_selector=self.selector,
                    limit=self.list_page_size,
                    _continue=token or None,
                    _preload_content=False,
                    _request_timeout=self._timeout,
                ),
            )
            body = orjson.loads(response.data)
            pods.extend(pod_view(item) for item in body.get("items") or [])
            metadata = body.get("metadata") or {}
            version = version or str(metadata.get("resourceVersion") or "")
            token = str(metadata.get("continue") or "")
            if not token:
                return self.provenance.adopt(pods), version

    def watch(
        self,
        resource_version: str,
        timeout_s: int = 60,
        *,
        on_bookmark: Callable[[str], None] | None = None,
    ) -> Iterator[PodEvent]:
        """Pod events after ``resource_version``; ends after ``timeout_s``. The API server's
        bookmarks go to ``on_bookmark`` (their resourceVersion), not into the events.

        Raises :class:`WatchExpired` when the version is too old (410, as an ERROR event in the
        stream or as the response's status) and another :class:`BackendError`, normally
        :class:`TransientBackendError`, for every other way the stream fails: an ERROR event, a
        dropped or stalled connection, a malformed event. The answer to all of them is the same:
        list again, then watch from the list's resourceVersion.
        """
        return self._admitted(
            watch_pods(
                self._api,
                namespace=self.namespace,
                selector=self.selector,
                resource_version=resource_version,
                timeout_s=timeout_s,
                request_timeout_s=self._timeout,
                on_bookmark=on_bookmark,
            )
        )

    def list_cordoned_nodes(self) -> frozenset[str]:
        """The Kubernetes nodes marked unschedulable (see :mod:`.drains`)."""
        with self._unauthorized_told():
            return list_cordoned_nodes(self._api.api_client, self._timeout, self.counters)

    # -- writing ---------------------------------------------------------------------------------

    def create_pod(self, manifest: Mapping[str, Any]) -> bool:
        """Create the pod; False when a pod of ours by that name exists already (idempotent).

        The manifest goes out as JSON bytes with a fresh create id (see :mod:`.provenance`) and
        the 201's body is not parsed: the service needs only "created", and the watch brings the
        pod as the API server stored it. A pod of that name that is not ours is a Conflict.
        """
        name = str(manifest["metadata"]["name"])
        metadata = dict(manifest["metadata"])
        metadata["annotations"] = {
            **(metadata.get("annotations") or {}),
            ANNOTATION_CREATE_ID: self.provenance.new_create_id(name),
        }
        # orjson: a fifth of the stdlib's CPU, in 64 threads sharing one GIL (issue 33)
        body = orjson.dumps({**manifest, "metadata": metadata})
        path = f"/api/v1/namespaces/{self.namespace}/pods"
        try:
            self._call(
                f"create pod {name}",
                lambda: send_json(self._api.api_client, "POST", path, body, self._timeout),
            )
        except Conflict:
            if self.read_pod(name) is not None:
                return False  # ours: made before (a retry whose first try got through, a restart)
            raise Conflict(
                f"pod {self.namespace}/{name} exists and this bridge did not create it"
            ) from None
        return True

    def delete_pod(self, name: str, uid: str = "", grace_period_s: int | None = None) -> bool:
        """Delete the pod; False when it was already gone (idempotent).

        With ``uid`` the delete applies only to that pod: a successor of the same name (a new
        Slurm cycle) answers 409 on the precondition and is left alone, which counts as gone.
        Without, it applies to our pod of that name (see :mod:`.provenance`); a pod of that
        name that is not ours is left alone too.
        """
        if not uid:
            self._ensure_adopted()
        uid = uid or self.provenance.uid_of(name) or self._live_uid(name)
        if not uid:
            return False
        options: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if grace_period_s is not None:
            options["gracePeriodSeconds"] = grace_period_s
        if uid:
            options["preconditions"] = {"uid": uid}
        body = json.dumps(options, separators=(",", ":")).encode()
        path = f"/api/v1/namespaces/{self.namespace}/pods/{quote(name, safe='')}"
        try:
            self._call_within(
                f"delete pod {name}",
                self.delete_budget_s,
                lambda timeout: send_json(
                    self._api.api_client, "DELETE", path, body, min(timeout, self._timeout)
                ),
            )
        except BackendError as e:
            if is_not_found(e):
                return False
            if uid and isinstance(e, Conflict):
                log.info("pod %s: not deleted, it is no longer UID %s (a successor)", name, uid)
                return False
            raise
        return True

    def _ensure_adopted(self) -> None:
        """Make the first list now if the watch has not yet: a call right after a restart (a
        resume meeting its node's pod) must know the pods the bridge had before."""
        if self.provenance.adopting:
            self.list_pods()

    def _live_uid(self, name: str) -> str:
        """The UID of our pod named ``name`` as read now; "" when there is none (or it is not
        ours: then it is named in the log)."""
        pod = self.read_pod(name)
        return pod.uid if pod is not None else ""

    def set_slurm_state(self, change: SetPodSlurmState) -> bool:
        """Show a node's Slurm state on its pod; False when the pod is gone.

        One merge patch for the label if it changed, one strategic merge patch of the status
        subresource for the ``registered`` condition if that changed: nothing else.
        """
        name = change.node
        path = f"/api/v1/namespaces/{self.namespace}/pods/{quote(name, safe='')}"
        patches: list[tuple[str, str, str, str, dict[str, Any]]] = []
        if change.label_changes:
            label = {"metadata": {"labels": {LABEL_SLURM_STATE: change.state}}}
            patches.append(("label", f"label pod {name}", path, MERGE_PATCH, label))
        if change.condition_changes:
            now = datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
            condition = registered_condition(name, change.state, change.registered, now)
            status = {"status": {"conditions": [condition]}}
            patches.append(
                (
                    "condition",
                    f"condition of pod {name}",
                    f"{path}/status",
                    STRATEGIC_MERGE_PATCH,
                    status,
                )
            )
        try:
            for part, what, where, kind, patch in patches:
                body = json.dumps(patch, separators=(",", ":")).encode()
                self._call(
                    what,
                    functools.partial(
                        send_json,
                        self._api.api_client,
                        "PATCH",
                        where,
                        body,
                        self._timeout,
                        content_type=kind,
                    ),
                )
                if self.counters is not None:
                    self.counters.pod_state_patched(part)
        except BackendError as e:
            if is_not_found(e):
                return False
            raise
        return True

    def set_slurm_states(
        self, changes: Sequence[SetPodSlurmState]
    ) -> dict[str, bool | BackendError | InvalidInput]:
        """:meth:`set_slurm_state` for many pods with bounded concurrency: node → done?, or
        the error."""
        return self._each([(c.node, c) for c in changes], self.set_slurm_state)

    def read_pod(self, name: str) -> PodView | None:
        """The pod of that name as the API server has it now (not the watch's view), if it is
        ours; None when there is none."""
        self._ensure_adopted()
        manifest = self._read_manifest(name)
        labels = ((manifest or {}).get("metadata") or {}).get("labels") or {}
        if (
            manifest is None
            or labels.get(LABEL_MANAGED_BY) != MANAGED_BY
            or labels.get(LABEL_CLUSTER) != self.cluster_name
        ):
            return None  # a pod of that name that is not ours is no pod of the node's
        pod = pod_view(manifest)
        return pod if self.provenance.admits(pod) else None

    def pod_exists(self, name: str) -> bool:
        """Whether a pod of ours by that name exists now (a read, not the watch's or a list's
        view)."""
        return self.read_pod(name) is not None

    def _read_manifest(self, name: str) -> dict[str, Any] | None:
        """The pod of that name as the API server has it now; None when there is none."""
        try:
            response = self._call(
                f"read pod {name}",
                lambda: self._api.read_namespaced_pod(
                    name, self.namespace, _preload_content=False, _request_timeout=self._timeout
                ),
            )
        except BackendError as e:
            if is_not_found(e):
                return None
            raise
        manifest: dict[str, Any] = json.loads(response.data)
        return manifest

    def list_scale_up_events(self) -> list[ScaleUpEvent]:
        """What a cluster autoscaler said about pods in the namespace (``NotTriggerScaleUp``,
        ``TriggeredScaleUp``); the verdict matches them to our pods by UID."""
        found: list[ScaleUpEvent] = []
        for reason in sorted(SCALE_UP_REASONS):
            selector = f"involvedObject.kind=Pod,reason={reason}"
            response = self._call(
                f"list {reason} events",
                functools.partial(
                    self._api.list_namespaced_event,
                    self.namespace,
                    field_selector=selector,
                    _preload_content=False,
                    _request_timeout=self._timeout,
                ),
            )
            for item in json.loads(response.data).get("items", []):
                event = scale_up_event(item)
                if event is not None:
                    found.append(event)
        return found

    def record_event(self, pod: str, reason: str, message: str, *, warning: bool = False) -> None:
        """An Event about ``pod`` (``kubectl describe pod`` / ``get events`` show it).

        Queued and sent in the background (see :class:`EventRecorder`): a lost or slow Event
        must never fail or delay the operation it describes.
        """
        now = datetime.now(UTC).isoformat().replace("+00:00", "Z")
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{pod}.", "namespace": self.namespace},
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": pod,
                "namespace": self.namespace,
            },
            "reason": reason,
            "message": message[:1024],
            "type": "Warning" if warning else "Normal",
            "source": {"component": MANAGED_BY},
            "reportingComponent": MANAGED_BY,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        body = json.dumps(event, separators=(",", ":")).encode()
        self.events.record(QueuedEvent(f"{reason} for pod {pod}", body))

    def _send_event(self, event: QueuedEvent) -> None:
        path = f"/api/v1/namespaces/{self.namespace}/events"
        try:
            self._call(
                f"event {event.label}",
                lambda: send_json(self._api.api_client, "POST", path, event.body, self._timeout),
            )
        except (BackendError, InvalidInput) as e:
            # A 401 has its line from the credentials, once per burst and with the fix, not
            # one per queued Event.
            if not (isinstance(e, Unauthorized) and self.credentials is not None):
                log.warning("event %s not recorded: %s", event.label, e)

    def lease(self, name: str) -> LeaseGateway:
        """The leader election's Lease ``name`` in this namespace, through these credentials."""
        return LeaseGateway(self._api.api_client, self.namespace, name, self._timeout)

    def ensure_disruption_budget(self, manifest: Mapping[str, Any]) -> bool:
        """Create or patch a pool's PodDisruptionBudget; True when created (see :mod:`.drains`)."""
        with self._unauthorized_told():
            return ensure_disruption_budget(
                self._api.api_client, manifest, self._timeout, self.counters
            )

    # -- PodGroups (gang scheduling, see bridge.domain.gangs) --------------------------------------

    def pod_group_api(self) -> str | None:
        """The PodGroup API the server serves (``scheduling.k8s.io/v1beta1``), or None; asked
        once (see :mod:`.pod_groups`): serving a new API takes an API server restart, which
        a bridge restart follows in the upgrade's order of things."""
        if self._pod_group_api is None:
            with self._unauthorized_told():
                found = discover_pod_group_api(self._api.api_client, self._timeout, self.counters)
            self._pod_group_api = found or ""
        return self._pod_group_api or None

    def _pod_groups(self, api: str | None = None) -> PodGroupApi:
        """The PodGroup API at ``api`` (a manifest's version), else the one served."""
        api = api or self.pod_group_api()
        if api is None:
            raise BackendError("the API server serves no PodGroup API (scheduling.k8s.io)")
        return PodGroupApi(self._api.api_client, api, self.namespace, self._timeout, self.counters)

    def create_pod_group(self, manifest: Mapping[str, Any]) -> bool:
        """Create the PodGroup; False when one of that name exists already."""
        with self._unauthorized_told():
            return self._pod_groups(str(manifest["apiVersion"])).create(manifest)

    def create_pod_groups(
        self, manifests: Sequence[Mapping[str, Any]]
    ) -> dict[str, bool | BackendError | InvalidInput]:
        """Create many PodGroups with bounded concurrency: name → created?, or the error."""
        return self._each(
            [(str(m["metadata"]["name"]), m) for m in manifests], self.create_pod_group
        )

    def list_pod_groups(self) -> list[PodGroupView]:
        """The bridge's PodGroups (by the pods' selector: ours, of this cluster); none when the
        server serves no PodGroup API."""
        if self.pod_group_api() is None:
            return []
        with self._unauthorized_told():
            return self._pod_groups().list(self.selector)

    def set_pod_group_min_count(self, name: str, min_count: int) -> None:
        """Set the gang's ``minCount`` (lowered when fewer of its pods were created)."""
        with self._unauthorized_told():
            self._pod_groups().set_min_count(name, min_count)

    def delete_pod_group(self, name: str) -> bool:
        """Delete the PodGroup; False when it was gone already."""
        with self._unauthorized_told():
            return self._pod_groups().delete(name)

    def create_pods(
        self, manifests: Iterable[Mapping[str, Any]]
    ) -> dict[str, bool | BackendError | InvalidInput]:
        """Create many pods with bounded concurrency: node → created?, or the error. Each
        create is queued as ``manifests`` yields its pod (a resume renders them meanwhile)."""
        return self._each(((str(m["metadata"]["name"]), m) for m in manifests), self.create_pod)

    def delete_pods(
        self,
        names: Sequence[str],
        *,
        uids: Mapping[str, str] | None = None,
        grace_period_s: int | None = None,
    ) -> dict[str, bool | BackendError | InvalidInput]:
        """Delete many pods with bounded concurrency: node → deleted?, or the error.

        ``uids`` (name → UID) makes each delete conditional on the pod being that one.
        """
        known = uids or {}
        return self._each(
            [(n, n) for n in names],
            lambda name: self.delete_pod(name, known.get(name, ""), grace_period_s),
        )

    def _each(
        self, items: Iterable[tuple[str, Any]], fn: Callable[[Any], bool]
    ) -> dict[str, bool | BackendError | InvalidInput]:
        futures = {name: self._pool.submit(fn, arg) for name, arg in items}
        results: dict[str, bool | BackendError | InvalidInput] = {}
        for name, future in futures.items():
            try:
                results[name] = future.result()
            except (BackendError, InvalidInput) as e:
                results[name] = e
        return results

    # -- preflight (``slurm-k8s-bridge doctor``) --------------------------------------------------

    def access_rules(self) -> tuple[list[dict[str, Any]], bool]:
        """What these credentials may do in the namespace, as the API server's authorizer says
        (SelfSubjectRulesReview, allowed for every authenticated user): the ``resourceRules``
        and whether the authorizer called the list incomplete (then ask :meth:`may`)."""
        api = k8s.AuthorizationV1Api(self._api.api_client)
        body = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectRulesReview",
            "spec": {"namespace": self.namespace},
        }
        response = self._call(
            "review own access rules",
            lambda: api.create_self_subject_rules_review(
                body, _preload_content=False, _request_timeout=self._timeout
            ),
        )
        status = json.loads(response.data).get("status") or {}
        return list(status.get("resourceRules") or []), bool(status.get("incomplete"))

    def may(self, verb: str, resource: str, name: str = "", *, group: str = "") -> bool:
        """Whether these credentials may ``verb`` the ``resource`` of API ``group`` ("" the
        core group; named ``name``) in the namespace (SelfSubjectAccessReview)."""
        api = k8s.AuthorizationV1Api(self._api.api_client)
        attributes = {"namespace": self.namespace, "verb": verb, "resource": resource}
        if name:
            attributes["name"] = name
        if group:
            attributes["group"] = group
        body = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": attributes},
        }
        response = self._call(
            f"review access to {verb} {resource}",
            lambda: api.create_self_subject_access_review(
                body, _preload_content=False, _request_timeout=self._timeout
            ),
        )
        return bool((json.loads(response.data).get("status") or {}).get("allowed"))

    def secret_exists(self, name: str) -> bool:
        """Whether the Secret exists in the namespace (its data is read and dropped at once).

        Raises :class:`Forbidden` when these credentials may not read it."""
        return self._exists(
            f"read secret {name}",
            lambda: self._api.read_namespaced_secret(
                name, self.namespace, _preload_content=False, _request_timeout=self._timeout
            ),
        )

    def service_exists(self, name: str) -> bool:
        """Whether the Service exists in the namespace; :class:`Forbidden` if it may not be read."""
        return self._exists(
            f"read service {name}",
            lambda: self._api.read_namespaced_service(
                name, self.namespace, _preload_content=False, _request_timeout=self._timeout
            ),
        )

    def _exists(self, what: str, read: Callable[[], Any]) -> bool:
        try:
            response = self._call(what, read)
        except BackendError as e:
            if is_not_found(e):
                return False
            raise
        response.release_conn()
        return True
