"""The bridge's own error hierarchy.

    BridgeError
    ├── ConfigError            bad configuration; names the file, line and field
    ├── InvalidInput           bad data from a caller (hostlist, resume file, request field)
    │   └── HostlistError      a hostlist Slurm would also reject
    ├── CallerNotAllowed       the caller's uid or certificate is not on the allow-list
    ├── BridgeStopping         the bridge is shutting down and takes no new work (UNAVAILABLE)
    └── BackendError           a Slurm or Kubernetes call failed
        ├── TransientBackendError   worth retrying (connection, 5xx, 429, timeouts)
        │   └── NotLeader           another bridge holds the Lease: this one writes nothing
        ├── NoCapacity              Kubernetes cannot place the pod (quota, unschedulable)
        ├── Conflict                the object exists and is not ours
        ├── Forbidden               RBAC said no
        └── Unauthorized            the API server did not accept the token (401): rotate it

Adapters translate library errors into these with ``raise ... from e`` so callers never import
``kubernetes`` or ``subprocess`` error types.
"""

from __future__ import annotations


class BridgeError(Exception):
    """Base of every error the bridge raises on purpose."""


class ConfigError(BridgeError):
    """The configuration is invalid; the message names the field (and file/line when known)."""


class InvalidInput(BridgeError):
    """A caller sent data we cannot use; the message names the field or node."""


class HostlistError(InvalidInput):
    """A hostlist expression Slurm would reject."""


class CallerNotAllowed(BridgeError):
    """The caller may not use the bridge (peer uid or client certificate not allowed)."""


class BridgeStopping(BridgeError):
    """The bridge is shutting down: the call was not taken; a restarted bridge takes a retry."""


class BackendError(BridgeError):
    """A call to Slurm or Kubernetes failed."""


class TransientBackendError(BackendError):
    """A failure that may succeed when retried (connection refused, 5xx, 429, timeout)."""


class NotLeader(TransientBackendError):
    """Leader election is on and this bridge does not hold the Lease (or could not renew it in
    time): it writes nothing to Kubernetes or Slurm; a caller retries, reaching the leader."""


class NoCapacity(BackendError):
    """Kubernetes has no room for the pod."""


class Conflict(BackendError):
    """An object with that name exists and does not belong to the bridge."""


class Forbidden(BackendError):
    """The credentials lack permission for the call."""


class Unauthorized(BackendError):
    """The API server did not accept the credentials (401): an expired or revoked token.

    Not transient: the same token fails the same way until it is rotated, and the Kubernetes
    adapter re-reads the token's file at its next call after one."""
