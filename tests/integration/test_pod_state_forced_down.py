"""Issue 13 against the proving ground's real slurmctld, kube-apiserver and bridge, on a kwok node
(no slurmd): a node forced down while it powers up is not patched on its way out, neither by a
plan made from what slurmctld shows in that second nor by the bridge's own passes."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from proving_ground import slurm

from bridge.config import load_config
from bridge.domain.pod_slurm_state import slurm_state_word
from bridge.domain.pods import pod_view
from bridge.domain.reconcile import Guards, SetPodSlurmState, plan
from tests.cluster import pods, slurm_node, wait_for, wait_idle_powered_down
from tests.conftest import ProvingGround, Use
from tests.integration.pod_state import SHOWN_WITHIN_S, STATE_LABEL
from tests.integration.pod_state import state_events as _state_events

pytestmark = pytest.mark.integration


def test_a_node_forced_down_while_powering_up_is_not_patched_on_its_way_out(
    proving_ground: ProvingGround, use: Use
) -> None:
    """``power_down_force`` on a node still powering up (a kwok pod: no slurmd) clears
    POWERING_UP and queues the power down; Slurm's power-save thread suspends it about a second
    later. A reconcile pass in that second read a new word (``not-responding``) and patched the
    pod just before deleting it: 50 wasted patches in the CI run of the 50-pod bench smoke. The
    test reads that very state from slurmctld as the bridge does and plans with it."""
    pg = proving_ground
    name = "sim-58"
    use(name)
    pools = load_config(slurm.bridge_config_path(pg.layout), environ={}).pools
    pg.slurm("scontrol", "update", f"nodename={name}", "state=power_up")

    def labelled_powering_up() -> dict[str, Any] | None:
        pod = pods(pg).get(name)
        shows = pod["metadata"]["labels"].get(STATE_LABEL) if pod else None
        return pod if shows == "powering-up" else None

    labelled = wait_for(
        f"{name}'s pod labelled powering-up", labelled_powering_up, SHOWN_WITHIN_S + 10, every=0.5
    )
    uid = labelled["metadata"]["uid"]
    pg.slurm("scontrol", "update", f"nodename={name}", "state=drain", "reason=e2e")
    pg.slurm("scontrol", "update", f"nodename={name}", "state=power_down_force")
    seen = slurm_node(pg, name)
    assert seen.power_down_queued and not seen.is_powering_down, (
        f"read after the power-save thread moved on (test too slow?): {seen}"
    )
    assert slurm_state_word(seen) != "powering-up", f"the word must have changed: {seen}"
    # The pod as the bridge last labelled it; a fresh read can miss it (seen in CI: Slurm
    # suspended the node and the bridge deleted the pod between the two reads). A patch made
    # since would show below as a SlurmStateChanged Event.
    actions = plan([seen], [pod_view(labelled)], pools, datetime.now(UTC), Guards())
    assert not [a for a in actions if isinstance(a, SetPodSlurmState)], actions

    # And the bridge's own passes: the pod goes with no SlurmStateChanged Event on it.
    wait_idle_powered_down(pg, name, timeout=90)
    assert _state_events(pg, f"uid={uid}") == []
