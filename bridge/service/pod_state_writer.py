"""The pods' Slurm state (label, ``registered`` condition), patched once per change.

The watch-fed cache lags behind our own patches: a pass that a patch's own watch event pokes
may read the cache before that event arrives. So the writer remembers what it sent, for a
while, and does not send (and record an Event for) the same state twice.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from bridge.domain.hostlist import compress
from bridge.domain.reconcile import SetPodSlurmState
from bridge.errors import BridgeError
from bridge.service.ports import PodPort

log = logging.getLogger(__name__)

#: See ``PodStateWriter.memory_s``: far beyond a watch event's lag, well below the time a node
#: spends in most states.
STATE_SENT_MEMORY_S = 30.0


class PodStateWriter:
    """Patches the pods' Slurm state through ``pods``, skipping what it sent lately."""

    def __init__(self, pods: PodPort) -> None:
        self.pods = pods
        #: Pod states patched, by node: (pod UID, state, registered, when), until the watch
        #: shows them.
        self._states_sent: dict[str, tuple[str, str, bool, float]] = {}
        #: How long a sent state stands in for the watch's view of it.
        self.memory_s = STATE_SENT_MEMORY_S

    def write(self, actions: Sequence[SetPodSlurmState]) -> None:
        """Patch each pod's state label and ``registered`` condition (only what changed), and
        record a ``SlurmStateChanged`` Event per state transition."""
        now = time.monotonic()
        sent = self._states_sent
        for node in [n for n, (*_, at) in sent.items() if now - at >= self.memory_s]:
            del sent[node]
        actions = [a for a in actions if not self._state_sent(a)]
        if not actions:
            return
        outcome = self.pods.set_slurm_states(actions)
        failed = []
        for action in actions:
            result = outcome.get(action.node)
            if isinstance(result, BridgeError):
                failed.append(action.node)
                continue
            if result:
                sent[action.node] = (action.uid, action.state, action.registered, now)
            if result and action.label_changes and action.was_state:
                # A pod's first label is no transition: its SlurmResume Event said as much.
                self.pods.record_event(
                    action.node, "SlurmStateChanged", f"{action.was_state} → {action.state}"
                )
        if failed:
            log.warning(
                "reconcile: Slurm state of pod(s) %s not shown (next pass retries): %s",
                compress(failed),
                outcome[failed[0]],
            )

    def _state_sent(self, action: SetPodSlurmState) -> bool:
        """Whether this very state went to this very pod lately (the watch lags behind)."""
        sent = self._states_sent.get(action.node)
        return sent is not None and sent[:3] == (action.uid, action.state, action.registered)
