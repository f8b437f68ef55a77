"""What each side shows of the other: Slurm's state on the pod, the pod's facts in Slurm.

On the pod: the label ``slurm-k8s-bridge.io/slurm-state`` (one word, for ``kubectl get pods -l``)
and the condition ``slurm-k8s-bridge.io/registered`` (a readiness gate: the pod is Ready only once
its slurmd registered). In Slurm: the node's Comment names the pod, its Kubernetes node and IP.
Pure functions of :class:`SlurmNode` and :class:`PodView`; the reconcile plan compares their
answers with what each side shows and acts only on a difference.
"""

from __future__ import annotations

from typing import Any

from .nodes import REASON_PREFIX, SlurmNode
from .pods import CONDITION_REGISTERED, PodView

#: Every word the state label can carry (a valid label value each).
SLURM_STATE_WORDS = frozenset(
    {
        "powering-up",
        "powering-down",
        "powered-down",
        "down",
        "not-responding",
        "drain",
        "completing",
        "allocated",
        "mixed",
        "idle",
        "future",
        "unknown",
    }
)
_BASE_WORDS = {
    "ALLOCATED": "allocated",
    "MIXED": "mixed",
    "IDLE": "idle",
    "COMPLETING": "completing",
    "FUTURE": "future",
    "DOWN": "down",
}


def slurm_state_word(node: SlurmNode) -> str:
    """The node's state as one word of :data:`SLURM_STATE_WORDS`.

    Derived from the parsed state and flags, never from Slurm's text, so the label stays
    bounded. Power transitions win (they say why the node cannot work yet), then health
    (``down``, ``not-responding``, ``drain``), then what the node is doing.
    """
    if node.is_powering_up:
        return "powering-up"
    if node.is_powering_down:
        return "powering-down"
    if node.is_powered_down:
        return "powered-down"
    if node.is_down:
        return "down"
    if "NOT_RESPONDING" in node.flags:
        return "not-responding"
    if node.is_drained:
        return "drain"
    if "COMPLETING" in node.flags:
        return "completing"
    return _BASE_WORDS.get(node.state, "unknown")


def is_registered(node: SlurmNode) -> bool:
    """Whether the node's slurmd registered and responds: Slurm can run jobs there.

    False while it powers up (slurmd has not registered yet), once it stops responding, and
    while it is DOWN or powered (or powering) down.
    """
    if node.is_powering_up or node.is_powering_down or node.is_powered_down or node.is_down:
        return False
    if "NOT_RESPONDING" in node.flags:
        return False
    return node.state not in ("UNKNOWN", "FUTURE")


def pod_comment(pod: PodView) -> str:
    """The Comment that names the running pod, its Kubernetes node and IP; ``""`` until the pod
    runs with both known (``k8s: pod slurm/cpu-0 on skb-real-0 ip 10.213.0.10``)."""
    if not pod.is_running or not pod.ip or not pod.host:
        return ""
    name = f"{pod.namespace}/{pod.name}" if pod.namespace else pod.name
    return f"{REASON_PREFIX}pod {name} on {pod.host} ip {pod.ip}"


def registered_condition(node: str, state: str, registered: bool, now: str) -> dict[str, Any]:
    """The pod condition :data:`CONDITION_REGISTERED` as a status patch carries it (``now`` is
    the transition time, RFC 3339)."""
    return {
        "type": CONDITION_REGISTERED,
        "status": "True" if registered else "False",
        "reason": "SlurmdRegistered" if registered else "SlurmdNotRegistered",
        "message": f"Slurm node {node} is {state}",
        "lastTransitionTime": now,
    }
