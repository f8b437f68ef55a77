"""Kubernetes cordons drain Slurm nodes: the adapter's list, the reader's 403 handling, and the
service carrying out ``PowerDownAsap``."""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import parse_qs, urlsplit

import pytest

from bridge.domain.nodes import SlurmNode
from bridge.domain.reconcile import PowerDownAsap
from bridge.errors import BackendError, Forbidden, TransientBackendError
from bridge.service.cordons import CordonedNodes
from tests.unit.fake_kube_api import Answer, FakeApiServer, gateway_to, status_answer
from tests.unit.fakes import Update
from tests.unit.harness import Harness

NOW = datetime(2026, 12, 2, 12, 0, 0, tzinfo=UTC)
NODES = "/api/v1/nodes"
REASON = "k8s: Cordoned: kubernetes node kn-1 is cordoned; powered down when its jobs end"


# -- the adapter's list ----------------------------------------------------------------------------


def test_the_cordon_list_asks_only_for_unschedulable_nodes(api_server: FakeApiServer) -> None:
    body = (
        b'{"kind":"NodeList","items":[{"metadata":{"name":"kn-1"}},{"metadata":{"name":"kn-4"}}]}'
    )
    api_server.answer(f"GET {NODES}", Answer(200, body))
    assert gateway_to(api_server, concurrency=2).list_cordoned_nodes() == frozenset(
        {"kn-1", "kn-4"}
    )
    (request,) = api_server.requests
    url = urlsplit(request.path)
    assert (request.method, url.path) == ("GET", NODES)
    assert parse_qs(url.query) == {"fieldSelector": ["spec.unschedulable=true"]}
    assert request.headers["authorization"] == "Bearer t0ken"


def test_a_forbidden_cordon_list_is_forbidden(api_server: FakeApiServer) -> None:
    message = 'nodes is forbidden: User "system:serviceaccount:slurm:slurm-k8s-bridge" cannot list'
    api_server.answer(f"GET {NODES}", status_answer(403, "Forbidden", message))
    with pytest.raises(Forbidden, match="list cordoned nodes: forbidden: nodes is forbidden"):
        gateway_to(api_server, concurrency=2).list_cordoned_nodes()
    assert len(api_server.requests) == 1  # a 403 is not retried


# -- the reader ------------------------------------------------------------------------------------


class ScriptedCordons:
    """Answers each list with the next scripted set or error."""

    def __init__(self, *answers: frozenset[str] | BackendError) -> None:
        self.answers = list(answers)
        self.calls = 0

    def list_cordoned_nodes(self) -> frozenset[str]:
        self.calls += 1
        answer = self.answers.pop(0)
        if isinstance(answer, BackendError):
            raise answer
        return answer


FORBIDDEN = Forbidden("list cordoned nodes: forbidden: nodes is forbidden")
KN_1 = frozenset({"kn-1"})


@dataclass(frozen=True)
class ReaderCase:
    id: str
    answers: list[frozenset[str] | BackendError]
    #: The reader's clock at each read.
    read_at: list[float]
    expected: list[frozenset[str]]
    #: How many lists reached the API server, and how many warnings were logged.
    calls: int
    warnings: int


READER_CASES = [
    ReaderCase("listed", [KN_1], [0], [KN_1], 1, 0),
    ReaderCase(
        "transient:empty-then-next-pass-asks-again",
        [TransientBackendError("HTTP 503"), KN_1],
        [0, 1],
        [frozenset(), KN_1],
        2,
        1,
    ),
    ReaderCase(
        "forbidden:warned-once-asked-again-after-300s",
        [FORBIDDEN, FORBIDDEN],
        [0, 1, 299, 300, 301],
        [frozenset()] * 5,
        2,
        1,
    ),
    ReaderCase(
        "forbidden-then-granted:every-pass-again",
        [FORBIDDEN, KN_1, KN_1],
        [0, 300, 301],
        [frozenset(), KN_1, KN_1],
        3,
        1,
    ),
]


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id) for c in READER_CASES])
def test_the_reader(case: ReaderCase, caplog: pytest.LogCaptureFixture) -> None:
    source = ScriptedCordons(*case.answers)
    moments = iter(case.read_at)
    reader = CordonedNodes(source, forbidden_retry_s=300, clock=lambda: next(moments))
    with caplog.at_level(logging.INFO, logger="bridge.service.cordons"):
        assert [reader.read() for _ in case.read_at] == case.expected
    assert source.calls == case.calls
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == case.warnings


def test_the_forbidden_warning_names_the_missing_rule(caplog: pytest.LogCaptureFixture) -> None:
    reader = CordonedNodes(ScriptedCordons(FORBIDDEN), clock=lambda: 0.0)
    with caplog.at_level(logging.WARNING, logger="bridge.service.cordons"):
        reader.read()
    (record,) = caplog.records
    assert "resources [nodes] verbs [list]" in record.getMessage()
    assert "ClusterRole slurm-k8s-bridge-nodes" in record.getMessage()
    assert "going on without draining" in record.getMessage()


# -- the service -----------------------------------------------------------------------------------


class World(Harness):
    """The service with a cordoned Kubernetes node kn-1 and cpu-0's pod on it."""

    def __init__(self, *nodes: SlurmNode, cordons: ScriptedCordons | None = None) -> None:
        self.cordons = cordons or ScriptedCordons(KN_1, KN_1)
        super().__init__(nodes, now=NOW, cordons=self.cordons)
        pod = self.pods.add("cpu-0", created_at=NOW)
        self.pods.pods["cpu-0"] = dataclasses.replace(pod, host="kn-1")


def busy(name: str, *flags: str, reason: str = "") -> SlurmNode:
    return SlurmNode(name, "ALLOCATED", frozenset({"CLOUD", *flags}), reason)


def test_a_pass_drains_the_node_of_a_cordoned_host_once() -> None:
    w = World(busy("cpu-0"))
    assert PowerDownAsap("cpu-0", REASON) in w.service.reconcile_once()
    assert [u for u in w.slurm.updates if u.state == "power_down_asap"] == [
        Update(("cpu-0",), "power_down_asap", REASON)
    ]
    assert w.slurm.nodes["cpu-0"].is_drained
    assert w.slurm.nodes["cpu-0"].power_down_queued
    # Asked already: the next pass leaves it to Slurm, and the pod stays for the job.
    assert not any(isinstance(a, PowerDownAsap) for a in w.service.reconcile_once())
    assert len(w.slurm.updates) == 1
    assert "cpu-0" in w.pods.pods
    assert w.cordons.calls == 2  # one list per pass


def test_a_failed_power_down_asap_is_a_warning_and_the_next_pass_retries(
    caplog: pytest.LogCaptureFixture,
) -> None:
    w = World(busy("cpu-0"))
    w.slurm.fail_next = TransientBackendError("scontrol: slurmctld not responding")
    with caplog.at_level(logging.WARNING, logger="bridge.service.use_cases"):
        w.service.reconcile_once()
    assert (
        "reconcile: power_down_asap cpu-0 failed: scontrol: slurmctld not responding" in caplog.text
    )
    w.service.reconcile_once()
    assert [u.state for u in w.slurm.updates] == ["power_down_asap", "power_down_asap"]
    assert w.slurm.nodes["cpu-0"].reason == REASON


def test_without_cordon_reading_the_service_drains_nothing() -> None:
    w = World(busy("cpu-0"), cordons=ScriptedCordons(FORBIDDEN))
    assert not any(isinstance(a, PowerDownAsap) for a in w.service.reconcile_once())
    assert w.slurm.updates == []
