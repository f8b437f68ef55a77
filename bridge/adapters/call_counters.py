"""``CallCounters``: what the adapters report about their calls (``bridge.metrics.BridgeMetrics``
meets it structurally), so that no adapter imports the metrics library."""

from __future__ import annotations

from typing import Protocol

from bridge.errors import BridgeError


class CallCounters(Protocol):
    """Counts a backend's failed calls and retried attempts (``backend`` is kubernetes or
    slurm), and the pod writes that show Slurm's state (``part`` is label or condition)."""

    def backend_error(self, backend: str, kind: str) -> None: ...

    def backend_retry(self, backend: str) -> None: ...

    def pod_state_patched(self, part: str) -> None: ...


def error_kind(error: BridgeError) -> str:
    """A bounded label for an error: its class name (Forbidden, TransientBackendError, ...)."""
    return type(error).__name__
