"""``PodCache``: the bridge's pods as the watch last saw them, for reconcile and status to read.

Every reconcile pass used to list all pods although the watch already saw every change (0.44 s
at 10,000 pods, each pass). The watcher (``bridge.runtime.pod_watcher.PodWatcher``) now fills
this cache: a list replaces it whole, then each watch event updates one pod, so a DELETED pod
leaves the cache with its event. Until the first list has arrived the cache is not synced, and
reading it raises instead of answering "no pods": an empty view would make the reconciler
recreate or fail nodes.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Iterable
from datetime import UTC, datetime

from bridge.domain.pods import PodView
from bridge.errors import TransientBackendError

#: How long a read waits for the first list before it gives up (a reconcile pass then skips).
SYNC_WAIT_S = 1.0


class NotSynced(TransientBackendError):
    """The cache has not had its first list yet: nothing is known about the pods."""


class PodCache:
    """Pods by name and the resourceVersion they are current to; safe across threads."""

    def __init__(
        self,
        *,
        sync_wait_s: float = SYNC_WAIT_S,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.sync_wait_s = sync_wait_s
        #: The bridge's clock, for each pod's ``first_seen`` (the age guards' other clock).
        self.clock = clock
        self._lock = threading.Lock()
        self._synced = threading.Event()
        self._pods: dict[str, PodView] = {}
        self._version = ""

    @property
    def synced(self) -> bool:
        return self._synced.is_set()

    @property
    def version(self) -> str:
        """The resourceVersion to watch from: the last list's, event's or bookmark's."""
        with self._lock:
            return self._version

    def replace(self, pods: Iterable[PodView], version: str) -> None:
        """What a list returned, in place of everything before it, all at once."""
        now = self.clock()
        with self._lock:
            fresh = {pod.name: self._seen(pod, now) for pod in pods}
            self._pods, self._version = fresh, version
        self._synced.set()

    def apply(self, kind: str, pod: PodView, version: str) -> None:
        """One watch event: ADDED and MODIFIED store the pod, DELETED removes it."""
        now = self.clock()
        with self._lock:
            if kind == "DELETED":
                self._pods.pop(pod.name, None)
            else:
                self._pods[pod.name] = self._seen(pod, now)
            self._version = version or self._version

    def _seen(self, pod: PodView, now: datetime) -> PodView:
        """``pod`` with its first sighting: the one stored for the same pod (by UID), else now.
        Called under the lock."""
        known = self._pods.get(pod.name)
        first = known.first_seen if known is not None and known.uid == pod.uid else None
        return dataclasses.replace(pod, first_seen=first or now)

    def bookmark(self, version: str) -> None:
        """The API server's word that nothing of ours changed up to ``version``."""
        with self._lock:
            self._version = version or self._version

    def list_pods(self) -> tuple[list[PodView], str]:
        """The cached pods and their resourceVersion, as ``PodGateway.list_pods`` answers.

        Waits up to ``sync_wait_s`` for the first list, then raises :class:`NotSynced`.
        """
        if not self._synced.wait(self.sync_wait_s):
            raise NotSynced(
                f"pod cache: no pod list yet after {self.sync_wait_s:g} s (the watcher is "
                "listing or retrying); not deciding on an empty view"
            )
        with self._lock:
            return list(self._pods.values()), self._version
