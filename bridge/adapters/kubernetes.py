"""Kubernetes through the official client: list, watch, create and delete the bridge's pods.

The only module that imports ``kubernetes``. Library errors become ``bridge.errors`` here, with
``raise ... from e``; only the transient class (connection errors, 5xx, 429) is retried.
Manifests travel as plain JSON dicts (``_preload_content=False``) so the domain reads exactly
what the API server sent.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

import urllib3
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes import watch as k8s_watch
from kubernetes.client.exceptions import ApiException
from tenacity import (
    retry,
    retry_if_exception_type,
    stop_after_attempt,
    wait_exponential,
)

from bridge.domain.pods import LABEL_CLUSTER, LABEL_MANAGED_BY, MANAGED_BY, PodView, pod_view
from bridge.errors import (
    BackendError,
    Conflict,
    Forbidden,
    InvalidInput,
    NoCapacity,
    TransientBackendError,
)

log = logging.getLogger(__name__)
T = TypeVar("T")


class WatchExpired(BackendError):
    """The watch's resourceVersion is too old (410 Gone): list again and watch from there."""


@dataclass(frozen=True)
class PodEvent:
    """One watch event: ``kind`` is ADDED, MODIFIED or DELETED."""

    kind: str
    pod: PodView


def _translate(e: Exception, what: str) -> BackendError | InvalidInput:
    if isinstance(e, ApiException):
        status = int(e.status or 0)
        detail = _api_message(e)
        if "exceeded quota" in detail:  # ResourceQuota says no with a 403
            return NoCapacity(f"{what}: {detail}")
        if status == 403:
            return Forbidden(f"{what}: forbidden: {detail}")
        if status == 409:
            return Conflict(f"{what}: {detail}")
        if status == 410:
            return WatchExpired(f"{what}: {detail}")
        if status in (400, 422):
            return InvalidInput(f"{what}: rejected by the API server: {detail}")
        if status == 429 or status >= 500 or status == 0:
            return TransientBackendError(f"{what}: HTTP {status}: {detail}")
        return BackendError(f"{what}: HTTP {status}: {detail}")
    return TransientBackendError(f"{what}: {type(e).__name__}: {e}")


def _api_message(e: ApiException) -> str:
    try:
        body = json.loads(e.body or "{}")
    except ValueError:
        return str(e.reason)
    return str(body.get("message") or e.reason)


_TRANSPORT_ERRORS = (ApiException, urllib3.exceptions.HTTPError, OSError)

_retry_transient = retry(
    retry=retry_if_exception_type(TransientBackendError),
    stop=stop_after_attempt(4),
    wait=wait_exponential(multiplier=0.2, max=2),
    reraise=True,
)


def _call(what: str, fn: Callable[[], T]) -> T:
    @_retry_transient
    def attempt() -> T:
        try:
            return fn()
        except _TRANSPORT_ERRORS as e:
            raise _translate(e, what) from e

    return attempt()


class PodGateway:
    """The bridge's pods in one namespace, selected by our labels."""

    def __init__(
        self,
        api: k8s.CoreV1Api,
        *,
        namespace: str,
        cluster_name: str,
        concurrency: int = 16,
        request_timeout_s: float = 10.0,
    ) -> None:
        self._api = api
        self.namespace = namespace
        self.selector = f"{LABEL_MANAGED_BY}={MANAGED_BY},{LABEL_CLUSTER}={cluster_name}"
        self._pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="k8s")
        self._timeout = request_timeout_s

    @classmethod
    def connect(
        cls,
        *,
        kubeconfig: str | None,
        context: str | None,
        namespace: str,
        cluster_name: str,
        concurrency: int = 16,
    ) -> PodGateway:
        """Load credentials (a kubeconfig file, or the in-cluster service account)."""
        configuration = k8s.Configuration()
        try:
            if kubeconfig:
                k8s_config.load_kube_config(
                    config_file=kubeconfig, context=context, client_configuration=configuration
                )
            else:
                k8s_config.load_incluster_config(client_configuration=configuration)
        except (k8s_config.ConfigException, OSError) as e:
            where = kubeconfig or "the in-cluster service account"
            raise BackendError(f"cannot load Kubernetes credentials from {where}: {e}") from e
        # One connection per concurrent create; urllib3 otherwise discards the extras noisily.
        configuration.connection_pool_maxsize = max(concurrency, 4)
        api = k8s.CoreV1Api(k8s.ApiClient(configuration))
        return cls(api, namespace=namespace, cluster_name=cluster_name, concurrency=concurrency)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._api.api_client.close()

    # -- reading ---------------------------------------------------------------------------------

    def list_pods(self) -> tuple[list[PodView], str]:
        """Our pods and the list's resourceVersion (to watch from)."""
        response = _call(
            "list pods",
            lambda: self._api.list_namespaced_pod(
                self.namespace,
                label_selector=self.selector,
                _preload_content=False,
                _request_timeout=self._timeout,
            ),
        )
        body = json.loads(response.data)
        return [pod_view(item) for item in body.get("items", [])], str(
            body["metadata"].get("resourceVersion", "")
        )

    def watch(self, resource_version: str, timeout_s: int = 60) -> Iterator[PodEvent]:
        """Pod events after ``resource_version``; ends after ``timeout_s``.

        Raises :class:`WatchExpired` when the version is too old: list again, then watch.
        """
        watcher = k8s_watch.Watch()
        try:
            for event in watcher.stream(
                self._api.list_namespaced_pod,
                self.namespace,
                label_selector=self.selector,
                resource_version=resource_version,
                timeout_seconds=timeout_s,
                allow_watch_bookmarks=False,
                deserialize=False,
            ):
                raw = event["raw_object"] if "raw_object" in event else event["object"]
                if event["type"] == "ERROR":
                    code = int(raw.get("code", 0))
                    if code == 410:
                        raise WatchExpired(f"watch pods: {raw.get('message', 'expired')}")
                    raise TransientBackendError(f"watch pods: {raw.get('message', raw)}")
                yield PodEvent(str(event["type"]), pod_view(raw))
        except _TRANSPORT_ERRORS as e:
            raise _translate(e, "watch pods") from e
        finally:
            watcher.stop()

    # -- writing ---------------------------------------------------------------------------------

    def create_pod(self, manifest: Mapping[str, Any]) -> bool:
        """Create the pod; False when a pod of ours by that name exists already (idempotent)."""
        name = str(manifest["metadata"]["name"])
        try:
            _call(
                f"create pod {name}",
                lambda: self._api.create_namespaced_pod(
                    self.namespace, dict(manifest), _request_timeout=self._timeout
                ),
            )
        except Conflict:
            if self._is_ours(name):
                return False
            raise Conflict(
                f"pod {self.namespace}/{name} exists and is not managed by the bridge "
                f"(labels do not match {self.selector})"
            ) from None
        return True

    def _is_ours(self, name: str) -> bool:
        response = _call(
            f"read pod {name}",
            lambda: self._api.read_namespaced_pod(
                name, self.namespace, _preload_content=False, _request_timeout=self._timeout
            ),
        )
        labels = json.loads(response.data).get("metadata", {}).get("labels") or {}
        wanted = dict(part.split("=", 1) for part in self.selector.split(","))
        return all(labels.get(k) == v for k, v in wanted.items())

    def delete_pod(self, name: str, grace_period_s: int | None = None) -> bool:
        """Delete the pod; False when it was already gone (idempotent)."""
        try:
            _call(
                f"delete pod {name}",
                lambda: self._api.delete_namespaced_pod(
                    name,
                    self.namespace,
                    grace_period_seconds=grace_period_s,
                    _request_timeout=self._timeout,
                ),
            )
        except BackendError as e:
            if isinstance(e.__cause__, ApiException) and e.__cause__.status == 404:
                return False
            raise
        return True

    def record_event(self, pod: str, reason: str, message: str, *, warning: bool = False) -> None:
        """An Event about ``pod`` (``kubectl describe pod`` / ``get events`` show it).

        Best effort: a lost Event must never fail the operation it describes.
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
        try:
            self._api.create_namespaced_event(self.namespace, event, _request_timeout=self._timeout)
        except _TRANSPORT_ERRORS as e:
            log.warning("event %s for pod %s not recorded: %s", reason, pod, _translate(e, "event"))

    def create_pods(
        self, manifests: Sequence[Mapping[str, Any]]
    ) -> dict[str, bool | BackendError | InvalidInput]:
        """Create many pods with bounded concurrency: node → created?, or the error."""
        return self._each([(str(m["metadata"]["name"]), m) for m in manifests], self.create_pod)

    def delete_pods(self, names: Sequence[str]) -> dict[str, bool | BackendError | InvalidInput]:
        """Delete many pods with bounded concurrency: node → deleted?, or the error."""
        return self._each([(n, n) for n in names], self.delete_pod)

    def _each(
        self, items: Sequence[tuple[str, Any]], fn: Callable[[Any], bool]
    ) -> dict[str, bool | BackendError | InvalidInput]:
        futures = {name: self._pool.submit(fn, arg) for name, arg in items}
        results: dict[str, bool | BackendError | InvalidInput] = {}
        for name, future in futures.items():
            try:
                results[name] = future.result()
            except (BackendError, InvalidInput) as e:
                results[name] = e
        return results
