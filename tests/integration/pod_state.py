"""Slurm's state on the bridge's pods as the integration and e2e tests read it: the label, how
soon a change shows, and the SlurmStateChanged Events."""

from __future__ import annotations

import json

from tests.cluster import NAMESPACE
from tests.conftest import ProvingGround

STATE_LABEL = "slurm-k8s-bridge.io/slurm-state"
#: The bridge reconciles every 5 s on the proving ground: a change shows within two passes.
SHOWN_WITHIN_S = 20


def state_events(pg: ProvingGround, involved: str) -> list[str]:
    """The messages of the SlurmStateChanged Events on the object ``involved`` names
    (``name=cpu-0``, ``uid=...``)."""
    out = pg.kubectl(
        "-n",
        NAMESPACE,
        "get",
        "events",
        "--field-selector",
        f"involvedObject.{involved},reason=SlurmStateChanged",
        "-o",
        "json",
    )
    return [str(e.get("message") or "") for e in json.loads(out)["items"]]
