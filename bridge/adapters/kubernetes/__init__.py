"""Kubernetes through the official client: list, watch, create and delete the bridge's pods.

The only package that imports ``kubernetes``. Library errors become ``bridge.errors`` here, with
``raise ... from e``; only the transient class (connection errors, 5xx, 429) is retried.
Manifests travel as plain JSON dicts (``_preload_content=False``) so the domain reads exactly
what the API server sent; creates and Events go out as JSON bytes, no client models on the way.

* :mod:`.calls`: one API call: errors translated, transient ones retried (within a budget,
  honouring a 429's Retry-After);
* :mod:`.json_bytes`: a request whose body is bytes already serialised, on the client's pool
  and credentials;
* :mod:`.events`: :class:`EventRecorder`, Events sent in the background from a bounded queue;
* :mod:`.watch`: the pod watch stream read line by line into :class:`PodEvent`;
* :mod:`.scale_up`: a cluster autoscaler's Events as the verdict reads them;
* :mod:`.pod_groups`: the PodGroup API of gang scheduling: discovered, and the bridge's groups
  (JSON bytes on the client's pool; the client has no model of it);
* :mod:`.gateway`: :class:`PodGateway`, the operations the service and ``doctor`` use.
"""

from __future__ import annotations

from bridge.adapters.kubernetes.calls import WatchExpired
from bridge.adapters.kubernetes.gateway import DELETE_BUDGET_S, PodGateway
from bridge.adapters.kubernetes.scale_up import scale_up_event
from bridge.adapters.kubernetes.watch import PodEvent

__all__ = ["DELETE_BUDGET_S", "PodEvent", "PodGateway", "WatchExpired", "scale_up_event"]
