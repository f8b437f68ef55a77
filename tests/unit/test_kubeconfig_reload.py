"""A rotated token is used without a restart (issue 28 item 6): the kubeconfig, the ``tokenFile``
it names or the in-cluster token is re-read when its stamp changes or after a 401.

The real ``PodGateway.connect`` and the real client library talk HTTP to ``FakeApiServer``; the
token each request carried is its ``authorization`` header.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from bridge.adapters.kubernetes import PodGateway
from bridge.adapters.kubernetes.calls import translate
from bridge.adapters.kubernetes.credentials import (
    LIBRARY_REFRESH_EVERY_S,
    UNAUTHORIZED_LOG_EVERY_S,
    KubeCredentials,
    token_file,
)
from bridge.errors import BackendError, Unauthorized
from bridge.metrics import BridgeMetrics
from tests.unit.fake_kube_api import Answer, FakeApiServer, status_answer

PODS = "/api/v1/namespaces/slurm/pods"
CREDENTIALS_LOGGER = "bridge.adapters.kubernetes.credentials"


@dataclass
class Kubeconfig:
    """The bridge's kubeconfig in ``tmp_path``, its token inline or in a ``tokenFile``."""

    path: Path
    server: str
    in_token_file: bool = False

    @property
    def token_path(self) -> Path:
        return self.path.with_name("token")

    def text(self, token: str) -> str:
        user = "tokenFile: token" if self.in_token_file else f"token: {token}"
        # make-kubeconfig.sh's order: current-context last, so a file cut short lacks it.
        return (
            "apiVersion: v1\nkind: Config\n"
            f"clusters:\n- name: lab\n  cluster:\n    server: {self.server}\n"
            f"users:\n- name: bridge\n  user:\n    {user}\n"
            "contexts:\n- name: bridge@lab\n  context: {cluster: lab, user: bridge}\n"
            "current-context: bridge@lab\n"
        )

    @property
    def holder(self) -> Path:
        """The file that holds the token."""
        return self.token_path if self.in_token_file else self.path

    def content(self, token: str) -> str:
        return token if self.in_token_file else self.text(token)

    def create(self, token: str) -> None:
        self.path.write_text(self.text(token))
        if self.in_token_file:
            self.token_path.write_text(token)


def replaced(token: str) -> Callable[[Kubeconfig], None]:
    """Written next to it and moved into place, as make-kubeconfig.sh does (a new inode)."""

    def step(k: Kubeconfig) -> None:
        temporary = k.holder.with_name(k.holder.name + ".tmp")
        temporary.write_text(k.content(token))
        os.replace(temporary, k.holder)

    return step


def rewritten(token: str) -> Callable[[Kubeconfig], None]:
    """Written over in place (same inode, new mtime)."""

    def step(k: Kubeconfig) -> None:
        before = k.holder.stat()
        k.holder.write_text(k.content(token))
        # Filesystems with coarse timestamps could keep the mtime within one test: move it on.
        os.utime(k.holder, ns=(before.st_atime_ns, before.st_mtime_ns + 1_000_000))

    return step


def same_stamp(token: str) -> Callable[[Kubeconfig], None]:
    """New bytes of the same length, the mtime put back: a stat cannot tell, so only a re-read
    that was not asked for by a stamp would see the new token."""

    def step(k: Kubeconfig) -> None:
        before = k.holder.stat()
        text = k.content(token)
        assert len(text) == before.st_size
        k.holder.write_text(text)
        os.utime(k.holder, ns=(before.st_atime_ns, before.st_mtime_ns))

    return step


def half_written(token: str) -> Callable[[Kubeconfig], None]:
    """A writer that is not atomic, caught halfway."""

    def step(k: Kubeconfig) -> None:
        text = k.text(token)
        k.path.write_text(text[: len(text) // 2])

    return step


def not_yaml(k: Kubeconfig) -> None:
    k.path.write_text("apiVersion: v1\nclusters: [{{{\n")


def removed(k: Kubeconfig) -> None:
    k.holder.unlink()


def unchanged(k: Kubeconfig) -> None:
    pass


@pytest.fixture
def kubeconfig(tmp_path: Path, api_server: FakeApiServer) -> Kubeconfig:
    server = api_server.core_api().api_client.configuration.host
    config = Kubeconfig(tmp_path / "kubeconfig", server)
    config.create("t1")
    return config


def connect(k: Kubeconfig, metrics: BridgeMetrics | None = None) -> PodGateway:
    return PodGateway.connect(
        kubeconfig=str(k.path),
        context=None,
        namespace="slurm",
        cluster_name="lab",
        concurrency=4,
        counters=metrics,
    )


def tokens(api_server: FakeApiServer) -> list[str]:
    return [r.headers["authorization"] for r in api_server.requests]


# -- a changed file, an unchanged one, a broken one ---------------------------------------------

Step = Callable[[Kubeconfig], None]


@dataclass(frozen=True)
class Case:
    """Each step changes the files (or not), then one ``list_pods`` runs: the tokens it sent,
    and whether a warning named the file (once, however many calls followed)."""

    steps: list[Step]
    expected: list[str]
    warned: bool = False
    in_token_file: bool = False


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(Case([unchanged, unchanged], ["t1", "t1"]), id="unchanged"),
        pytest.param(Case([same_stamp("t2")], ["t1"]), id="same-stamp-not-read"),
        pytest.param(Case([replaced("t2")], ["t2"]), id="replaced-by-mv"),
        pytest.param(Case([rewritten("t2")], ["t2"]), id="rewritten-in-place"),
        pytest.param(Case([replaced("t2"), replaced("t3")], ["t2", "t3"]), id="rotated-twice"),
        pytest.param(
            Case([half_written("t2"), unchanged, replaced("t2")], ["t1", "t1", "t2"], True),
            id="half-written-then-whole",
        ),
        pytest.param(Case([not_yaml], ["t1"], True), id="not-yaml"),
        pytest.param(Case([removed, replaced("t2")], ["t1", "t2"], True), id="removed-then-back"),
        pytest.param(Case([unchanged], ["t1"], in_token_file=True), id="token-file-unchanged"),
        pytest.param(Case([replaced("t2")], ["t2"], in_token_file=True), id="token-file-replaced"),
        pytest.param(
            Case([same_stamp("t2")], ["t1"], in_token_file=True), id="token-file-same-stamp"
        ),
        pytest.param(Case([removed], ["t1"], True, in_token_file=True), id="token-file-removed"),
    ],
)
def test_each_call_uses_the_token_the_files_hold_now(
    api_server: FakeApiServer,
    kubeconfig: Kubeconfig,
    caplog: pytest.LogCaptureFixture,
    case: Case,
) -> None:
    kubeconfig.in_token_file = case.in_token_file
    kubeconfig.create("t1")
    gateway = connect(kubeconfig)
    try:
        gateway.list_pods()
        seen = []
        with caplog.at_level(logging.WARNING, logger=CREDENTIALS_LOGGER):
            for step in case.steps:
                step(kubeconfig)
                gateway.list_pods()
                seen.append(tokens(api_server)[-1])
    finally:
        gateway.close(0)
    assert tokens(api_server)[0] == "Bearer t1"
    assert seen == [f"Bearer {t}" for t in case.expected]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    if case.warned:
        # One line per change of the file, naming it; not one per call.
        assert len(warnings) == 1, warnings
        assert "keeping the token loaded before" in warnings[0]
        assert str(kubeconfig.holder) in warnings[0]
    else:
        assert warnings == []


def test_creates_on_their_own_route_send_the_token_the_files_hold_now(
    api_server: FakeApiServer, kubeconfig: Kubeconfig
) -> None:
    # Creates go out on a route looked up once per client (json_bytes), not through the
    # client's request building: the token must still be asked for at each one.
    api_server.answer(f"POST {PODS}", Answer(201), Answer(201), Answer(201))
    gateway = connect(kubeconfig)
    try:
        gateway.create_pod({"metadata": {"name": "cpu-0"}})
        gateway.create_pod({"metadata": {"name": "cpu-1"}})
        replaced("t2")(kubeconfig)
        gateway.create_pod({"metadata": {"name": "cpu-2"}})
    finally:
        gateway.close(0)
    assert tokens(api_server) == ["Bearer t1", "Bearer t1", "Bearer t2"]
    assert {r.headers["user-agent"] for r in api_server.requests} == {
        gateway._api.api_client.user_agent
    }


def test_the_first_load_failing_is_a_backend_error_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text("apiVersion: v1\nclusters: [{{{\n")
    with pytest.raises(BackendError, match=f"cannot load Kubernetes credentials from {path}"):
        PodGateway.connect(kubeconfig=str(path), context=None, namespace="slurm", cluster_name="x")


# -- a 401 ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("route", "make_call"),
    [
        pytest.param(f"GET {PODS}", lambda g: g.list_pods(), id="list"),
        pytest.param(
            f"POST {PODS}", lambda g: g.create_pod({"metadata": {"name": "cpu-0"}}), id="create"
        ),
        pytest.param(f"DELETE {PODS}/cpu-0", lambda g: g.delete_pod("cpu-0", "uid-0"), id="delete"),
        pytest.param("GET /api/v1/nodes", lambda g: g.list_cordoned_nodes(), id="cordoned-nodes"),
    ],
)
def test_a_401_is_unauthorized_not_retried_counted_and_the_next_call_reads_again(
    api_server: FakeApiServer,
    kubeconfig: Kubeconfig,
    caplog: pytest.LogCaptureFixture,
    route: str,
    make_call: Callable[[PodGateway], Any],
) -> None:
    metrics = BridgeMetrics()
    gateway = connect(kubeconfig, metrics)
    try:
        # The token is rotated but the file's stamp does not show it: only the 401 can.
        same_stamp("t2")(kubeconfig)
        api_server.answer(route, status_answer(401, "Unauthorized", "Unauthorized"))
        with (
            caplog.at_level(logging.WARNING, logger=CREDENTIALS_LOGGER),
            pytest.raises(Unauthorized) as raised,
        ):
            make_call(gateway)
        assert tokens(api_server) == ["Bearer t1"]  # one attempt: a 401 is not transient
        gateway.list_pods()
    finally:
        gateway.close(0)
    assert tokens(api_server)[-1] == "Bearer t2"
    message = str(raised.value)
    assert str(kubeconfig.path) in message
    assert "make-kubeconfig.sh" in message
    labels = {"backend": "kubernetes", "kind": "Unauthorized"}
    errors = metrics.registry.get_sample_value("slurm_k8s_bridge_backend_errors_total", labels)
    retries = metrics.registry.get_sample_value(
        "slurm_k8s_bridge_backend_retries_total", {"backend": "kubernetes"}
    )
    assert (errors, retries) == (1.0, None)
    (line,) = [r.getMessage() for r in caplog.records if "401 Unauthorized" in r.getMessage()]
    assert str(kubeconfig.path) in line
    assert "the bridge re-reads it" in line


def test_a_401_in_the_watch_is_unauthorized_naming_the_file(
    api_server: FakeApiServer, kubeconfig: Kubeconfig
) -> None:
    gateway = connect(kubeconfig)
    api_server.answer(f"GET {PODS}", status_answer(401, "Unauthorized", "Unauthorized"))
    try:
        with pytest.raises(Unauthorized, match=str(kubeconfig.path)):
            next(gateway.watch("1", timeout_s=1))
    finally:
        gateway.close(0)


def test_the_unauthorized_series_reads_zero_before_any_401() -> None:
    labels = {"backend": "kubernetes", "kind": "Unauthorized"}
    registry = BridgeMetrics().registry
    assert registry.get_sample_value("slurm_k8s_bridge_backend_errors_total", labels) == 0.0


def test_a_401_translates_to_unauthorized() -> None:
    body = '{"kind": "Status", "message": "Unauthorized"}'
    error = translate(ApiException(status=401, reason="Unauthorized", body=body), "list pods")
    assert isinstance(error, Unauthorized)
    assert str(error) == "list pods: unauthorized: Unauthorized"


# -- one line per burst of 401s ------------------------------------------------------------------

Event = tuple[float, str]  # (clock, "401" or "rotate")
LATER = UNAUTHORIZED_LOG_EVERY_S


@pytest.mark.parametrize(
    ("events", "lines"),
    [
        pytest.param([(0, "401")], ["(1 since"], id="one"),
        pytest.param([(0, "401"), (1, "401"), (2, "401")], ["(1 since"], id="a-burst"),
        pytest.param(
            [(0, "401"), (1, "401"), (LATER, "401")],
            ["(1 since", "(2 since"],
            id="still-failing-a-minute-later",
        ),
        pytest.param(
            [(0, "401"), (1, "rotate"), (2, "401")],
            ["(1 since", "(1 since"],
            id="the-new-token-rejected-too",
        ),
        pytest.param(
            [(0, "401"), (1, "read-again"), (2, "401")],
            ["(1 since"],
            id="read-again-same-token",
        ),
    ],
)
def test_a_burst_of_401s_is_one_line(
    kubeconfig: Kubeconfig,
    caplog: pytest.LogCaptureFixture,
    events: list[Event],
    lines: list[str],
) -> None:
    now = [0.0]
    credentials = KubeCredentials(str(kubeconfig.path), clock=lambda: now[0])
    configuration = k8s.Configuration()
    credentials.configure(configuration)
    rejected = Unauthorized("list pods: unauthorized: Unauthorized")
    with caplog.at_level(logging.WARNING, logger=CREDENTIALS_LOGGER):
        for at, what in events:
            now[0] = at
            if what == "401":
                credentials.rejected(rejected)
            else:
                if what == "rotate":
                    replaced("t2")(kubeconfig)
                configuration.get_api_key_with_prefix("BearerToken")  # the next request
    logged = [r.getMessage() for r in caplog.records if "401 Unauthorized" in r.getMessage()]
    assert len(logged) == len(lines), logged
    for line, count in zip(logged, lines, strict=True):
        assert count in line


# -- in the cluster, and many threads at once ----------------------------------------------------


def test_the_in_cluster_token_is_reread_when_the_kubelet_swaps_it(tmp_path: Path) -> None:
    # The kubelet's atomic writer: token -> ..data/token, ..data -> a timestamped directory.
    def project(version: str, token: str) -> None:
        (tmp_path / version).mkdir()
        (tmp_path / version / "token").write_text(token)
        link = tmp_path / "..data.tmp"
        link.symlink_to(version)
        os.replace(link, tmp_path / "..data")

    project("v1", "t1")
    (tmp_path / "token").symlink_to("..data/token")
    (tmp_path / "ca.crt").write_text("not read by these tests")
    credentials = KubeCredentials(
        None,
        service_token=str(tmp_path / "token"),
        service_ca=str(tmp_path / "ca.crt"),
        environ={"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"},
    )
    configuration = k8s.Configuration()
    credentials.configure(configuration)
    assert configuration.host == "https://10.0.0.1:443"
    assert configuration.get_api_key_with_prefix("BearerToken") == "bearer t1"
    project("v2", "t2")
    assert configuration.get_api_key_with_prefix("BearerToken") == "bearer t2"
    assert str(tmp_path / "token") in credentials.source


def test_many_threads_asking_while_the_file_rotates_see_whole_tokens(
    kubeconfig: Kubeconfig,
) -> None:
    configuration = k8s.Configuration()
    KubeCredentials(str(kubeconfig.path)).configure(configuration)
    seen: set[str | None] = set()
    failures: list[BaseException] = []
    stop = threading.Event()

    def ask() -> None:
        try:
            while not stop.is_set():
                seen.add(configuration.get_api_key_with_prefix("BearerToken"))
        except BaseException as e:  # reported below
            failures.append(e)

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for thread in threads:
        thread.start()
    for n in range(2, 30):
        replaced(f"t{n}")(kubeconfig)
    stop.set()
    for thread in threads:
        thread.join(5)
    assert failures == []
    assert seen <= {f"Bearer t{n}" for n in range(1, 30)}
    assert configuration.get_api_key_with_prefix("BearerToken") == "Bearer t29"


def test_the_librarys_own_refresh_runs_at_most_once_a_second_and_after_each_load(
    kubeconfig: Kubeconfig,
) -> None:
    # The loader's hook (an exec plugin's expiry check) re-sets the server on a Configuration,
    # which reads the whole environment: per request it was half a pod create's client CPU.
    now = [100.0]
    credentials = KubeCredentials(str(kubeconfig.path), clock=lambda: now[0])
    configuration = k8s.Configuration()
    credentials.configure(configuration)
    calls: list[float] = []
    credentials._library_hook = lambda _loaded: calls.append(now[0])
    for advance in (0.0, 0.1, 0.5, LIBRARY_REFRESH_EVERY_S, 0.2, 0.3):
        now[0] += advance
        configuration.get_api_key_with_prefix("BearerToken")
    # 100.0 and 101.6 ran; 100.1 and 100.6 were within the second after 100.0, 101.8 and 102.1
    # within the second after 101.6
    assert calls == [100.0, 100.0 + 0.6 + LIBRARY_REFRESH_EVERY_S]
    replaced("t2")(kubeconfig)  # a load: the new loader's hook runs at the next request
    assert configuration.get_api_key_with_prefix("BearerToken") == "Bearer t2"
    assert credentials._library_refreshed_at == now[0]


@pytest.mark.parametrize(
    ("text", "context", "expected"),
    [
        pytest.param("users: [{name: u, user: {token: x}}]", None, None, id="inline"),
        pytest.param(
            "current-context: c\ncontexts: [{name: c, context: {user: u}}]\n"
            "users: [{name: u, user: {tokenFile: tok}}]",
            None,
            "DIR/tok",
            id="relative",
        ),
        pytest.param(
            "current-context: c\ncontexts: [{name: c, context: {user: u}}, "
            "{name: d, context: {user: v}}]\n"
            "users: [{name: u, user: {tokenFile: tok}}, {name: v, user: {tokenFile: /abs}}]",
            "d",
            "/abs",
            id="the-named-context",
        ),
        pytest.param("{{{", None, None, id="not-yaml"),
    ],
)
def test_the_token_file_a_kubeconfig_names(
    tmp_path: Path, text: str, context: str | None, expected: str | None
) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(text)
    found = token_file([str(path)], context)
    assert found == (expected.replace("DIR", str(tmp_path)) if expected else None)
