"""The Slurm side of a reconcile plan, besides setting nodes DOWN: NodeAddr, comments, power
state changes. Each write that Slurm refuses is logged and left to the next pass, which plans
it again if it still applies.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Sequence

from bridge.domain.hostlist import compress
from bridge.domain.reconcile import (
    Action,
    PowerDown,
    PowerDownAsap,
    ResumeNode,
    SetAddress,
    SetComment,
)
from bridge.errors import BridgeError
from bridge.service.ports import SlurmPort

log = logging.getLogger(__name__)


class SlurmPlanWriter:
    """Carries out a plan's NodeAddr, comment and power actions through ``slurm``."""

    def __init__(self, slurm: SlurmPort) -> None:
        self.slurm = slurm

    def write(self, actions: Sequence[Action]) -> None:
        """NodeAddr and comments first, then power downs, drains and resumes."""
        self._set_addresses([a for a in actions if isinstance(a, SetAddress)])
        self._set_comments([a for a in actions if isinstance(a, SetComment)])
        self._update("power_down_force", [a for a in actions if isinstance(a, PowerDown)])
        self._power_down_asap([a for a in actions if isinstance(a, PowerDownAsap)])
        self._update("resume", [a for a in actions if isinstance(a, ResumeNode)])

    def _set_addresses(self, actions: Sequence[SetAddress]) -> None:
        if not actions:
            return
        try:
            self.slurm.set_node_addresses({a.node: a.address for a in actions})
            for action in actions:
                log.info("reconcile: NodeAddr %s=%s: %s", action.node, action.address, action.why)
        except BridgeError as e:
            log.warning(
                "reconcile: NodeAddr of %s not set (next pass retries): %s",
                compress(a.node for a in actions),
                e,
            )

    def _set_comments(self, actions: Sequence[SetComment]) -> None:
        by_text: dict[str, list[str]] = defaultdict(list)
        for action in actions:
            by_text[action.text].append(action.node)
        for text, nodes in by_text.items():
            try:
                self.slurm.set_node_comment(nodes, text)
                log.info("reconcile: comment %s: %r", compress(nodes), text)
            except BridgeError as e:
                log.warning("reconcile: comment of %s not set: %s", compress(nodes), e)

    def _update(self, state: str, actions: Sequence[PowerDown | ResumeNode]) -> None:
        if not actions:
            return
        nodes = [a.node for a in actions]
        try:
            self.slurm.update_nodes(nodes, state=state)
            log.info("reconcile: %s %s: %s", state, compress(nodes), actions[0].why)
        except BridgeError as e:
            # A node may have moved on since we looked (e.g. already powered down): next pass.
            log.warning("reconcile: %s %s failed: %s", state, compress(nodes), e)

    def _power_down_asap(self, actions: Sequence[PowerDownAsap]) -> None:
        """Drain the nodes with our reason, to be powered down once their jobs end."""
        by_reason: dict[str, list[str]] = defaultdict(list)
        for action in actions:
            by_reason[action.reason].append(action.node)
        for reason, nodes in by_reason.items():
            try:
                self.slurm.update_nodes(nodes, state="power_down_asap", reason=reason)
                log.info("reconcile: power_down_asap %s: %s", compress(nodes), reason)
            except BridgeError as e:
                # The node may have moved on since we looked: the next pass plans it again.
                log.warning("reconcile: power_down_asap %s failed: %s", compress(nodes), e)
