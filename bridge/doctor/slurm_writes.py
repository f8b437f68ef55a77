"""The doctor's decision on the bridge's Slurm write rights. Pure, tested as tables.

The bridge writes nodes (``scontrol update nodename=... state=|reason=|nodeaddr=|comment=``),
which slurmctld allows root, SlurmUser and users of AdminLevel=Admin only. Reading works for
everyone, so only a write tells: the probe sets one pool node's Comment to what it already is,
which slurmctld authorizes exactly as the bridge's own updates (the same UPDATE_NODE RPC) and
which changes nothing anyone sees.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from bridge.doctor.checks import Check, Status
from bridge.domain.nodes import SlurmNode
from bridge.errors import BridgeError, TransientBackendError

#: What scontrol prints when slurmctld refuses the caller: "Invalid user id" for UPDATE_NODE
#: (ESLURM_USER_ID_MISSING, seen from 26.05 as uid 65534, and the same code in 22.05 and 24.11's
#: source), "Access/permission denied" (ESLURM_ACCESS_DENIED) for other writes.
REFUSALS: Final = ("Invalid user id", "Access/permission denied", "Security violation")


def write_probe_node(nodes: Sequence[SlurmNode], pool_nodes: Sequence[str]) -> SlurmNode | None:
    """The pool node to write to: one Slurm knows, preferably powered down with no job and no
    comment (the bridge then has nothing to write there itself, so the read and the write of
    its Comment race with nobody); None when Slurm knows no pool node."""
    wanted = set(pool_nodes)
    known = [n for n in nodes if n.name in wanted]

    def rank(node: SlurmNode) -> tuple[bool, bool, bool]:
        return (not node.is_powered_down, node.is_busy, bool(node.comment))

    return min(known, key=rank) if known else None


def is_refusal(error: BridgeError) -> bool:
    """Whether slurmctld refused the write because of who asked."""
    return any(marker in str(error) for marker in REFUSALS)


def check_slurm_write(
    node: SlurmNode | None, user: str, slurm_user: str, error: BridgeError | None
) -> Check:
    """The verdict on the no-op write to ``node`` made as ``user`` (doctor's own user, which is
    the bridge's when doctor runs as the site guide says)."""
    name = "slurm writes"
    if node is None:
        return Check(Status.SKIP, name, "no pool node known to Slurm to try a write on")
    what = f"a no-op `scontrol update nodename={node.name} comment=<its comment>`"
    if error is None:
        return Check(Status.PASS, name, f"user {user} may update nodes ({what} was accepted)")
    if is_refusal(error):
        return Check(
            Status.FAIL,
            name,
            f"the bridge's user {user} may not update nodes: slurmctld refused {what}: {error}",
            f"grant it AdminLevel=Admin with `sacctmgr modify user {user} set adminlevel=Admin` "
            f"(needs slurmdbd), or run the bridge as SlurmUser {slurm_user}",
        )
    if isinstance(error, TransientBackendError):
        return Check(
            Status.WARN,
            name,
            f"cannot tell whether user {user} may update nodes: {what} got no answer: {error}",
            "check slurmctld and run doctor again",
        )
    return Check(
        Status.WARN,
        name,
        f"cannot tell whether user {user} may update nodes: {what} failed: {error}",
        "run the same scontrol update by hand as the bridge's user to see why",
    )
