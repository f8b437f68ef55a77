"""Which node names the bridge accepts: valid as Slurm node names and as DNS labels at once.

A node's name is its pod's name and its DNS name under the headless Service, so it must be an
RFC 1123 label (``a-z``, ``0-9`` and ``-``, starting and ending with a letter or digit, at most
63 characters). Newer Slurm also reads ``{``, ``}`` and ``=`` as hostlist functions (``a{b}``),
which the label rule already refuses. Finally the name must read back as itself in a hostlist:
a numeric suffix of 2**64 or more would come back saturated, and one of more than
:data:`~bridge.domain.hostlist.MAX_DIGITS` digits is refused by :func:`expand`.
"""

from __future__ import annotations

from bridge.domain.hostlist import expand
from bridge.domain.pools import PoolSet, dns_label_problem
from bridge.domain.results import ErrorClass, NodeResult, Outcome
from bridge.errors import HostlistError, InvalidInput

MAX_NODE_NAME = 63  # RFC 1123 label
#: Trailing digits a name may have that Slurm surely reads back unchanged (10**19 - 1 < 2**64).
SAFE_DIGITS = 19


def check_node_name(name: str) -> None:
    """Raise :class:`InvalidInput` naming ``name`` unless it is a usable node name.

    Usable means a DNS-1123 label (the pod and its DNS name carry it) that Slurm reads as one
    plain host name, unchanged.
    """
    if not isinstance(name, str):
        raise InvalidInput(f"node name must be a string, got {type(name).__name__}")
    if len(name) > MAX_NODE_NAME:
        # Checked before anything quotes the whole name: it may be megabytes long.
        shown = repr(name[:40] + "...")
        raise InvalidInput(
            f"node name {shown} is {len(name)} characters long; the limit is {MAX_NODE_NAME}"
        )
    problem = dns_label_problem(name)
    if problem is not None:
        raise InvalidInput(f"node name {problem}")  # the problem quotes the name
    # A DNS label has no bracket and no comma, so only a too large number changes it: the
    # usual names need no hostlist expansion (which was most of a 1,000-node resume's check).
    if len(name) - len(name.rstrip("0123456789")) <= SAFE_DIGITS:
        return
    try:
        same = expand(name) == [name]
    except HostlistError as e:
        raise InvalidInput(f"node name {name!r}: {e}") from e
    if not same:
        raise InvalidInput(
            f"node name {name!r}: Slurm reads it as another name (its number exceeds 2**64-1)"
        )


def split_hostlist(
    hostlist: str, pools: PoolSet, source: str
) -> tuple[list[str], dict[str, list[str]], list[NodeResult]]:
    """The hostlist's distinct names in order, the usable ones grouped by pool, and one
    rejection per other name (``source``: the configuration's, named in the message). Rejected
    names never reach Slurm or Kubernetes: a name no pool owns may be a static node with
    running jobs."""
    names = list(dict.fromkeys(expand(hostlist)))
    rejected, usable = [], []
    for node in names:
        try:
            check_node_name(node)
        except InvalidInput as e:
            rejected.append(NodeResult(node, Outcome.REJECTED, ErrorClass.INVALID, str(e)))
        else:
            usable.append(node)
    groups, unknown = pools.group(usable)
    rejected += [
        NodeResult(
            node,
            Outcome.REJECTED,
            ErrorClass.UNKNOWN_NODE,
            f"node {node} is in no pool of the bridge ({source}); Slurm left alone",
        )
        for node in unknown
    ]
    return names, groups, rejected
