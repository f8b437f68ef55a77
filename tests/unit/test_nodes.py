"""SlurmNode predicates and sinfo-style display states, as a table."""

from __future__ import annotations

import pytest

from bridge.domain.nodes import REASON_PREFIX, SlurmNode
from bridge.domain.reason import our_reason


def n(state: str, *flags: str, reason: str = "") -> SlurmNode:
    return SlurmNode("cpu-0", state, frozenset({"CLOUD", *flags}), reason)


# display, powered_down, powering_up, powering_down, down, drained, wants_pod
@pytest.mark.parametrize(
    ("node", "display", "predicates"),
    [
        (n("IDLE", "POWERED_DOWN"), "idle~", (1, 0, 0, 0, 0, 0)),
        (n("ALLOCATED", "POWERED_DOWN"), "alloc~", (1, 0, 0, 0, 0, 0)),
        (n("ALLOCATED", "POWERING_UP"), "alloc#", (0, 1, 0, 0, 0, 1)),
        (n("IDLE", "POWERING_UP"), "idle#", (0, 1, 0, 0, 0, 1)),
        (n("IDLE", "POWERING_DOWN"), "idle%", (0, 0, 1, 0, 0, 0)),
        (n("ALLOCATED", "POWER_DOWN"), "alloc!", (0, 0, 0, 0, 0, 1)),
        (n("DOWN", "POWERED_DOWN"), "down~", (1, 0, 0, 1, 0, 0)),
        (n("DOWN", "POWERING_UP", "NOT_RESPONDING"), "down#", (0, 1, 0, 1, 0, 0)),
        (n("DOWN"), "down", (0, 0, 0, 1, 0, 0)),
        (n("DOWN", "NOT_RESPONDING"), "down*", (0, 0, 0, 1, 0, 0)),
        (n("IDLE", "DRAIN"), "drain", (0, 0, 0, 0, 1, 1)),
        (n("IDLE", "DRAIN", "POWERED_DOWN"), "drain~", (1, 0, 0, 0, 1, 0)),
        (n("ALLOCATED", "DRAIN"), "drng", (0, 0, 0, 0, 1, 1)),
        (n("MIXED", "DRAIN"), "drng", (0, 0, 0, 0, 1, 1)),
        (n("DOWN", "DRAIN"), "drain", (0, 0, 0, 1, 1, 0)),
        (n("MIXED"), "mix", (0, 0, 0, 0, 0, 1)),
        (n("ALLOCATED"), "alloc", (0, 0, 0, 0, 0, 1)),
        (n("IDLE"), "idle", (0, 0, 0, 0, 0, 1)),
        (n("IDLE", "NOT_RESPONDING"), "idle*", (0, 0, 0, 0, 0, 1)),
        (n("COMPLETING"), "comp", (0, 0, 0, 0, 0, 1)),
        (n("FUTURE"), "futr", (0, 0, 0, 0, 0, 1)),
        (n("UNKNOWN"), "unk", (0, 0, 0, 0, 0, 1)),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_predicates_and_display_state(
    node: SlurmNode, display: str, predicates: tuple[int, ...]
) -> None:
    assert node.display_state == display
    assert (
        node.is_powered_down,
        node.is_powering_up,
        node.is_powering_down,
        node.is_down,
        node.is_drained,
        node.wants_pod,
    ) == tuple(bool(p) for p in predicates)


# What ``status`` reads back off the wire: the same display and the same predicates, except
# where sinfo's compact form is lossy (DOWN+DRAIN prints as ``drain``, read back as IDLE+DRAIN).
@pytest.mark.parametrize(
    "display",
    [
        "idle~",
        "alloc~",
        "alloc#",
        "idle#",
        "idle%",
        "alloc!",
        "down~",
        "down#",
        "down",
        "down*",
        "drain",
        "drain~",
        "drng",
        "mix",
        "alloc",
        "idle",
        "idle*",
        "comp",
        "futr",
        "unk",
    ],
)
def test_from_display_state_reads_display_state_back(display: str) -> None:
    node = SlurmNode.from_display_state("cpu-0", display, "k8s: x")
    assert node.display_state == display
    assert node.name == "cpu-0"
    assert node.has_our_reason
    suffix_flags = {"~": "POWERED_DOWN", "#": "POWERING_UP", "%": "POWERING_DOWN"}
    for suffix, flag in suffix_flags.items():
        assert (flag in node.flags) is display.endswith(suffix)


@pytest.mark.parametrize(
    ("display", "state", "flags"),
    [
        ("alloc#", "ALLOCATED", {"POWERING_UP"}),
        ("down~", "DOWN", {"POWERED_DOWN"}),
        ("drng", "ALLOCATED", {"DRAIN"}),
        ("drain~", "IDLE", {"DRAIN", "POWERED_DOWN"}),
        ("comp", "COMPLETING", set()),
        ("allocated", "ALLOCATED", set()),  # the long name reads too (``--state allocated``)
        ("", "", set()),  # Slurm does not know the node
    ],
)
def test_from_display_state_fields(display: str, state: str, flags: set[str]) -> None:
    node = SlurmNode.from_display_state("cpu-0", display)
    assert (node.state, set(node.flags)) == (state, flags)


@pytest.mark.parametrize(
    ("reason", "ours"),
    [
        ("k8s: ErrImagePull: denied", True),
        (REASON_PREFIX + "PodMissing: x", True),
        ("", False),
        ("maintenance: disk check", False),
        ("ResumeTimeout reached", False),
        ("K8S: shouting", False),
        (" k8s: leading blank", False),
        # Slurm (23.02+) appended its own DOWN to a reason of ours: Slurm's now.
        ("k8s: Rollout: x : Not responding", False),
    ],
)
def test_has_our_reason(reason: str, ours: bool) -> None:
    assert n("DOWN", reason=reason).has_our_reason is ours


@pytest.mark.parametrize(
    ("kind", "message", "expected"),
    [
        ("ErrImagePull", "denied", "k8s: ErrImagePull: denied"),
        ("Evicted", "line one\nline two\n", "k8s: Evicted: line one line two"),
        ("Unschedulable", "x" * 300, "k8s: Unschedulable: " + "x" * 177 + "..."),
    ],
    ids=["plain", "newlines", "truncated"],
)
def test_our_reason(kind: str, message: str, expected: str) -> None:
    reason = our_reason(kind, message)
    assert reason == expected
    assert len(reason) <= 200
    assert n("DOWN", reason=reason).has_our_reason
