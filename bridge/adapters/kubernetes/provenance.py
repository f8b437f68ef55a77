"""``PodProvenance``: which of the pods carrying our labels this bridge made.

Labels are no proof: anyone allowed to create pods in the namespace can label one for a node, and
the bridge used to take it for the node's pod, pointing the node's NodeAddr at it (where Slurm
sends job steps) and failing the node when it failed (issue 29 item 11). A pod is now the
bridge's when

- its name is its node's (the bridge names every pod after its node), and
- this bridge created it: each create carries a fresh random create id (an annotation), and the
  first pod seen with an id sent for that name is bound to the node by its UID, which the
  API server assigns and nobody can choose; or
- it was there when this bridge started (its first list): the pods of the bridge before a
  restart or an upgrade. A pod that squats a powered-down node's name while the bridge is down
  is taken too, and then deleted as the stray pod of a node Slurm has not resumed; or
- it was there when this bridge took the lead (leader election): the pods the previous leader
  created are the cluster's, under running jobs. A bridge taking over is a restart for them.

Everything else is left alone (never deleted, never used) and named once in the log. Kept in
memory only: a restart re-adopts what is there, which is why the first list adopts.
"""

from __future__ import annotations

import logging
import secrets
import threading

from bridge.domain.pods import PodView

log = logging.getLogger(__name__)

#: Create ids remembered per pod name until one of them is seen on a pod.
KEPT_IDS = 8


class PodProvenance:
    """Thread-safe: the pod watch, reconcile passes and resume threads all ask."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: Pod name → the UID of the pod of that name that is ours.
        self._ours: dict[str, str] = {}
        #: Pod name → the create ids sent in creates of that name since a pod of it was seen
        #: (a second create may find the first's pod: a repeated resume, a pass on a stale
        #: cache), the last :data:`KEPT_IDS` of them.
        self._sent: dict[str, list[str]] = {}
        self._adopting = True
        self._told: set[str] = set()

    def new_create_id(self, name: str) -> str:
        """A create id for the next create of pod ``name`` (unguessable, never reused)."""
        create_id = secrets.token_hex(16)
        with self._lock:
            kept = self._sent.setdefault(name, [])
            kept.append(create_id)
            del kept[:-KEPT_IDS]
        return create_id

    @property
    def adopting(self) -> bool:
        """Whether the first list is still to come (until then, no pod found is known)."""
        with self._lock:
            return self._adopting

    def adopt_again(self) -> None:
        """The next list adopts, as the first did: this bridge takes over from another whose
        pods it did not create (leader election)."""
        with self._lock:
            self._adopting = True

    def adopt(self, pods: list[PodView]) -> list[PodView]:
        """The first list since the bridge started: every pod named after its node is ours.
        Later calls are :meth:`admitted`."""
        with self._lock:
            if self._adopting:
                self._adopting = False
                for pod in pods:
                    if pod.name == pod.node and pod.uid:
                        self._ours[pod.name] = pod.uid
        return self.admitted(pods)

    def admitted(self, pods: list[PodView]) -> list[PodView]:
        return [p for p in pods if self.admits(p)]

    def admits(self, pod: PodView) -> bool:
        """Whether ``pod`` is ours (see the module's doc); a pod that is not is logged once."""
        with self._lock:
            if pod.name == pod.node and pod.uid:
                if self._ours.get(pod.name) == pod.uid:
                    return True
                if pod.create_id and pod.create_id in self._sent.get(pod.name, ()):
                    self._ours[pod.name] = pod.uid
                    del self._sent[pod.name]  # spent: a replay of any of them is not ours
                    return True
            first = pod.uid not in self._told
            self._told.add(pod.uid)
        if first:
            log.warning(
                "pod %s (UID %s) carries the bridge's labels for node %s, but %s: "
                "not the node's pod, left alone",
                pod.name,
                pod.uid,
                pod.node,
                "its name is not the node's"
                if pod.name != pod.node
                else "this bridge did not create it, nor find it when it started",
            )
        return False

    def uid_of(self, name: str) -> str:
        """The UID of our pod named ``name`` as last known; "" when none is known."""
        with self._lock:
            return self._ours.get(name, "")
