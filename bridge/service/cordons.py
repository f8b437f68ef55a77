"""Which Kubernetes nodes are cordoned, read once per reconcile pass.

The read needs a cluster-scoped right (``list`` on nodes) that a namespaced install may lack:
then the bridge says so once, names the missing rule, and goes on without cordon handling,
asking again only every few minutes (an operator may add the ClusterRole meanwhile).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from bridge.errors import BridgeError, Forbidden
from bridge.service.ports import CordonLister

log = logging.getLogger(__name__)

#: How long after a 403 the list is not asked for again.
FORBIDDEN_RETRY_S = 300.0
#: What the ClusterRole must allow (deploy/kustomize/base/cluster-rbac.yaml).
NEEDED_RULE = 'apiGroups [""] resources [nodes] verbs [list] (ClusterRole slurm-k8s-bridge-nodes)'


class CordonedNodes:
    """The cordoned Kubernetes nodes per pass; an empty set when they cannot be read (a pass
    without them only misses a drain it makes one pass later)."""

    def __init__(
        self,
        source: CordonLister,
        *,
        forbidden_retry_s: float = FORBIDDEN_RETRY_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.source = source
        self.forbidden_retry_s = forbidden_retry_s
        self.clock = clock
        #: When (``clock``) the list may be asked for again after a 403; None: not forbidden.
        self._forbidden_until: float | None = None
        self._warned = False

    def read(self) -> frozenset[str]:
        now = self.clock()
        if self._forbidden_until is not None and now < self._forbidden_until:
            return frozenset()
        try:
            cordoned = self.source.list_cordoned_nodes()
        except Forbidden as e:
            self._forbidden_until = now + self.forbidden_retry_s
            if not self._warned:
                self._warned = True
                log.warning(
                    "cordoned Kubernetes nodes not readable, going on without draining their "
                    "Slurm nodes (asking again every %.0fs); grant %s: %s",
                    self.forbidden_retry_s,
                    NEEDED_RULE,
                    e,
                )
            return frozenset()
        except BridgeError as e:
            log.warning("reconcile: cordoned Kubernetes nodes not read (next pass retries): %s", e)
            return frozenset()
        if self._forbidden_until is not None:
            log.info("cordoned Kubernetes nodes readable again: cordon handling on")
            self._forbidden_until = None
            self._warned = False
        return cordoned
