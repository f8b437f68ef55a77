"""Whether the bridge gang-schedules a multi-node job's pods (``bridge.domain.gangs``): the
setting, the PodGroup API the API server serves, and the line that says so.

Apart from the rest of the gang rules, and on the standard library alone: the RPC client (and so
the hooks' start-up) reads a bridge's mode from ListPools.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

#: ``kubernetes.gang_scheduling``: ``auto`` uses PodGroups when the API server serves them.
GANG_AUTO, GANG_OFF = "auto", "off"
POD_GROUP_API_GROUP = "scheduling.k8s.io"
POD_GROUP_RESOURCE = "podgroups"
#: The PodGroup API's versions the bridge speaks, preferred first (1.37 serves v1beta1; 1.35 and
#: 1.36 served alphas, all behind the GenericWorkload feature gate).
POD_GROUP_VERSIONS = ("v1", "v1beta1", "v1alpha3")
_ONE_BY_ONE = "a multi-node job's pods are placed one by one (job-aware failure)"


@dataclass(frozen=True)
class GangMode:
    """Whether the bridge puts a multi-node job's pods in a PodGroup, and why it does not."""

    #: The PodGroup API in use (``scheduling.k8s.io/v1beta1``); "" when off.
    api_version: str = ""
    #: Why it is off (not read when on).
    why_off: str = "kubernetes.gang_scheduling is off"

    @property
    def on(self) -> bool:
        return bool(self.api_version)

    def describe(self) -> str:
        """One line for the log, ``status`` and ``doctor``."""
        if self.on:
            return f"on ({self.api_version} PodGroup)"
        return f"off: {self.why_off}; {_ONE_BY_ONE}"


#: Gang scheduling off by configuration (and the default of a service built without one).
GANG_MODE_OFF = GangMode()


def gang_mode(setting: str, served_api: str | None, *, unknown: str = "") -> GangMode:
    """The mode for ``kubernetes.gang_scheduling`` (``setting``) and the PodGroup API the API
    server serves (:func:`choose_pod_group_api`; None: none). ``unknown``: why discovery
    failed (then it is off: a group the bridge cannot create would only cost a warning per
    call)."""
    if setting == GANG_OFF:
        return GANG_MODE_OFF
    if unknown:
        return GangMode(why_off=f"the PodGroup API could not be discovered ({unknown})")
    if served_api is None:
        return GangMode(why_off="the API server serves no PodGroup API")
    return GangMode(api_version=served_api)


def choose_pod_group_api(resources: Mapping[str, Collection[str]]) -> str | None:
    """``scheduling.k8s.io/<version>`` of the preferred version (:data:`POD_GROUP_VERSIONS`)
    whose resources include ``podgroups``; ``resources`` maps each served version of the
    group to the resource names it lists. None when no version serves PodGroups (the group's
    v1 serves PriorityClasses on every cluster)."""
    for version in POD_GROUP_VERSIONS:
        if POD_GROUP_RESOURCE in resources.get(version, ()):
            return f"{POD_GROUP_API_GROUP}/{version}"
    return None
