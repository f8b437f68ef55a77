"""The one way unit tests wire a ``BridgeService``: to the fakes, sharing one journal, with a
clock the test moves. A test file that needs more (a gated pod fake, a reloader, helpers that
read the service) subclasses :class:`Harness` rather than building the service again."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from bridge.config import parse_config
from bridge.domain.gang_mode import GANG_MODE_OFF, GangMode
from bridge.domain.nodes import SlurmNode
from bridge.metrics import BridgeMetrics
from bridge.service.ports import CordonLister, PodLister
from bridge.service.use_cases import BridgeService
from bridge.settings import BridgeConfig
from tests.unit.fakes import MINIMAL_CONFIG, FakePods, FakeSlurm


class Harness:
    """``BridgeService`` on ``FakeSlurm`` and ``FakePods``; ``now`` is the service's clock."""

    def __init__(
        self,
        nodes: Iterable[SlurmNode] = (),
        *,
        now: datetime,
        config: BridgeConfig | str = MINIMAL_CONFIG,
        pods: FakePods | None = None,
        pod_views: PodLister | None = None,
        metrics: BridgeMetrics | None = None,
        cordons: CordonLister | None = None,
        gang: GangMode = GANG_MODE_OFF,
    ) -> None:
        self.now = now
        self.journal: list[str] = []
        self.slurm = FakeSlurm(nodes, now=now, journal=self.journal)
        self.pods = pods if pods is not None else FakePods(now=now, journal=self.journal)
        if isinstance(config, str):
            config = parse_config(config, "bridge.yaml")
        self.service = BridgeService(
            config,
            self.slurm,
            self.pods,
            pod_views=pod_views,
            clock=lambda: self.now,
            metrics=metrics,
            cordons=cordons,
            gang=gang,
        )
