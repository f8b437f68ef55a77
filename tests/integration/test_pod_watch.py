"""The pod watch against the proving ground's real kube-apiserver (issue 7 item 5).

A real ``PodGateway`` (the bridge's own ServiceAccount and RBAC) feeds a real ``PodWatcher``;
the reconciler is a stand-in that records pokes. The gateway reaches the API server through a
loopback TCP proxy in the test (TLS passes through untouched; the server certificate has
127.0.0.1 as an IP SAN), so a test can cut every connection the way a dying load balancer does.
Each test labels its pods with a cluster name of its own, so neither the bridge nor other tests
see them, and deletes them at the end.

An ERROR event other than 410 cannot be provoked from a healthy API server; the unit tests
(``tests/unit/test_pod_watch.py``) cover those.
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import struct
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config
from proving_ground.bridge_daemon import bridge_kubeconfig

from bridge.adapters.kubernetes import PodEvent, PodGateway, WatchExpired
from bridge.domain.pods import (
    ANNOTATION_CREATE_ID,
    LABEL_CLUSTER,
    LABEL_MANAGED_BY,
    MANAGED_BY,
    PodView,
)
from bridge.runtime.pod_watcher import PodWatcher
from tests.cluster import NAMESPACE, wait_for
from tests.conftest import ProvingGround

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]
Entry = tuple[str, str]


class CuttableProxy:
    """127.0.0.1:<port> → the API server, byte for byte; ``cut()`` drops every connection."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._links: list[_Link] = []
        self.connections = 0
        threading.Thread(target=self._accept, name="proxy-accept", daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:  # closed
                return
            try:
                server = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                client.close()
                continue
            server.settimeout(None)
            link = _Link(client, server)
            with self._lock:
                self._links.append(link)
                self.connections += 1
            for src, dst in ((client, server), (server, client)):
                threading.Thread(target=link.pump, args=(src, dst), daemon=True).start()

    def cut(self, *, reset: bool) -> int:
        """Drop every open connection: FIN both ways, or RST (``reset``). How many there were."""
        with self._lock:
            links, self._links = self._links, []
        for link in links:
            link.cut(reset=reset)
        return len(links)

    def close(self) -> None:
        self._listener.close()
        self.cut(reset=False)


@dataclass
class _Link:
    client: socket.socket
    server: socket.socket
    dropped: bool = False

    def pump(self, src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                dst.sendall(data)
        if not self.dropped:  # one side ended: pass the end on (and wake the other pump)
            for s in (self.client, self.server):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
        for s in (self.client, self.server):
            s.close()

    def cut(self, *, reset: bool) -> None:
        self.dropped = True
        for s in (self.client, self.server):
            with contextlib.suppress(OSError):
                if reset:
                    # Linger 0: the last close sends RST. SHUT_RD only wakes the pumps' recv
                    # (Linux sends nothing for it); they close the sockets.
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    s.shutdown(socket.SHUT_RD)
                else:
                    s.shutdown(socket.SHUT_RDWR)


class Tap:
    """The gateway as the watcher uses it, passing everything through and writing down what
    passed in ``seen`` (shared with the pokes), in order. The watcher loop drives it."""

    def __init__(self, gateway: PodGateway, seen: list[Entry], first_version: str = "") -> None:
        self.gateway = gateway
        self.seen = seen
        self.first_version = first_version

    def list_pods(self) -> tuple[list[PodView], str]:
        pods, version = self.gateway.list_pods()
        if self.first_version:
            version, self.first_version = self.first_version, ""
        self.seen.append(("list", version))
        return pods, version

    def watch(
        self,
        resource_version: str,
        timeout_s: int = 60,
        *,
        on_bookmark: Callable[[str], None] | None = None,
    ) -> Iterator[PodEvent]:
        self.seen.append(("watch", resource_version))
        try:
            for event in self.gateway.watch(resource_version, timeout_s, on_bookmark=on_bookmark):
                self.seen.append((event.kind, event.pod.name))
                yield event
        except Exception as e:
            self.seen.append(("raised", f"{type(e).__name__}: {e}"))
            raise


class Poker:
    def __init__(self, seen: list[Entry]) -> None:
        self.seen = seen

    def poke(self) -> None:
        self.seen.append(("poke", ""))


@dataclass
class Rig:
    pg: ProvingGround
    cluster: str
    gateway: PodGateway
    proxy: CuttableProxy
    seen: list[Entry]

    def watcher(self, first_version: str = "") -> PodWatcher:
        return PodWatcher(
            Tap(self.gateway, self.seen, first_version),
            Poker(self.seen),
            watch_timeout_s=60,
            backoff_s=0.2,
            max_backoff_s=2,
        )

    def create_pod(self, suffix: str) -> str:
        name = f"{self.cluster}-{suffix}"
        manifest = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": NAMESPACE,
                "labels": {LABEL_MANAGED_BY: MANAGED_BY, LABEL_CLUSTER: self.cluster},
                # Made by the admin (the admission guard admits no such image from the bridge's
                # account), as if by the gateway: with a create id it sent (see provenance).
                "annotations": {ANNOTATION_CREATE_ID: self.gateway.provenance.new_create_id(name)},
            },
            "spec": {
                # No node has this label: the pod stays Pending and nothing runs.
                "nodeSelector": {"slurm-k8s-bridge.io/none": "x"},
                "containers": [{"name": "idle", "image": "registry.invalid/none:0"}],
                "terminationGracePeriodSeconds": 0,
            },
        }
        self.pg.kubectl("-n", NAMESPACE, "create", "-f", "-", input_text=json.dumps(manifest))
        return name

    def wait_index(
        self, what: str, matches: Callable[[Entry], bool], after: int = -1, timeout: float = 30
    ) -> int:
        """Index of the first entry after ``after`` in ``seen`` that ``matches``, waiting."""

        def found() -> list[int]:
            return [i for i, e in enumerate(list(self.seen)) if i > after and matches(e)][:1]

        return wait_for(what, found, timeout, every=0.05)[0]


def _proxied_kubeconfig(source: Path, target: Path) -> tuple[tuple[str, int], CuttableProxy]:
    config = yaml.safe_load(source.read_text())
    (cluster,) = config["clusters"]
    server = urlsplit(cluster["cluster"]["server"])
    assert server.hostname == "127.0.0.1", "the proxy listens on 127.0.0.1, the cert's IP SAN"
    upstream = (server.hostname, server.port or 443)
    proxy = CuttableProxy(upstream)
    cluster["cluster"]["server"] = f"https://127.0.0.1:{proxy.port}"
    target.write_text(yaml.safe_dump(config))
    target.chmod(0o600)
    return upstream, proxy


@pytest.fixture
def rig(proving_ground: ProvingGround, tmp_path: Path) -> Iterator[Rig]:
    pg = proving_ground
    source = bridge_kubeconfig(pg.layout)
    if not source.exists():  # the bridge's ServiceAccount is set up with the bridge daemon
        source = pg.layout.kubeconfig
    _, proxy = _proxied_kubeconfig(source, tmp_path / "kubeconfig")
    cluster = f"watch-{uuid.uuid4().hex[:8]}"
    gateway = PodGateway.connect(
        kubeconfig=str(tmp_path / "kubeconfig"),
        context=None,
        namespace=NAMESPACE,
        cluster_name=cluster,
    )
    try:
        yield Rig(pg, cluster, gateway, proxy, [])
    finally:
        pg.kubectl(
            "-n",
            NAMESPACE,
            "delete",
            "pod",
            "-l",
            f"{LABEL_CLUSTER}={cluster}",
            "--ignore-not-found",
            "--wait=false",
        )
        proxy.close()
        gateway.close()


@contextlib.contextmanager
def running(rig: Rig, watcher: PodWatcher) -> Iterator[PodWatcher]:
    watcher.start()
    try:
        yield watcher
    finally:
        watcher.stop()
        rig.proxy.cut(reset=False)  # the watch blocks in a read: end it now
        assert watcher.stop(wait_s=10), "the watcher did not end on stop()"


def _print_seen(seen: list[Entry]) -> None:
    print("\n".join(f"  {kind} {detail}" for kind, detail in seen))


def make_too_old(rig: Rig, version: str) -> str:
    """Make ``version`` too old for the API server's watch cache; what a watch from it says.

    A fresh API server's cache still holds every pod event since it started (it has evicted
    none), so it serves a watch from any old version, "1" included, by replaying. The cache
    evicts once it is full (100 events or more) and its oldest event is older than 75 s: change
    a pod of ours until that has happened. On a proving ground that has run tests it has.
    """
    churned, changes = "", 0
    admin = k8s_config.new_client_from_config(config_file=str(rig.pg.layout.kubeconfig))
    try:
        core = k8s_client.CoreV1Api(admin)
        for _ in range(60):
            try:
                list(rig.gateway.watch(version, timeout_s=1))
            except WatchExpired as e:
                return f"{e} (after {changes} pod change(s) here)"
            churned = churned or rig.create_pod("churn")
            for i in range(50):
                patch = {"metadata": {"annotations": {"slurm-k8s-bridge.io/churn": str(i)}}}
                core.patch_namespaced_pod(churned, NAMESPACE, patch)
                changes += 1
    finally:
        admin.close()
    raise AssertionError(f"resourceVersion {version} never became too old")


def test_a_too_old_resource_version_relists_and_watches_on(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    print(f"\nwatch from resourceVersion 1, by hand: {make_too_old(rig, '1')}")
    caplog.set_level(logging.INFO, logger="bridge.runtime.pod_watcher")
    with running(rig, rig.watcher(first_version="1")):
        relisted = rig.wait_index("a relist after the 410", lambda e: e[0] == "list", after=0)
        watching = rig.wait_index("a watch after it", lambda e: e[0] == "watch", after=relisted)
        name = rig.create_pod("after-410")
        added = rig.wait_index("ADDED for the pod created after it", lambda e: e == ("ADDED", name))
        rig.wait_index("a poke for it", lambda e: e[0] == "poke", after=added)
    _print_seen(rig.seen)

    assert rig.seen[:3] == [("list", "1"), ("poke", ""), ("watch", "1")]
    kind, detail = rig.seen[3]
    assert kind == "raised"
    assert detail.startswith(
        "WatchExpired: watch pods: ERROR event 410 Expired: too old resource version: 1 ("
    ), detail
    assert rig.seen[relisted + 1] == ("poke", ""), "the relist pokes the reconciler"
    assert rig.seen[watching] == ("watch", rig.seen[relisted][1])
    messages = [r.getMessage() for r in caplog.records if r.name == "bridge.runtime.pod_watcher"]
    assert any(m.startswith("pod watch expired at resourceVersion 1, ") for m in messages)
    assert any(m.startswith("pod watch recovered: listed ") for m in messages)


@pytest.mark.parametrize("reset", [False, True], ids=["fin", "rst"])
def test_a_dropped_connection_relists_and_watches_on(
    rig: Rig, caplog: pytest.LogCaptureFixture, reset: bool
) -> None:
    caplog.set_level(logging.INFO, logger="bridge.runtime.pod_watcher")
    with running(rig, rig.watcher()):
        rig.wait_index("the first watch", lambda e: e[0] == "watch")
        before = rig.create_pod("before-cut")
        rig.wait_index("ADDED before the cut (the stream is live)", lambda e: e[1] == before)
        cut_at = len(rig.seen) - 1
        assert rig.proxy.cut(reset=reset) >= 1
        failed = rig.wait_index("the watch to fail", lambda e: e[0] == "raised", after=cut_at)
        watching = rig.wait_index("a watch after it", lambda e: e[0] == "watch", after=failed)
        after = rig.create_pod("after-cut")
        added = rig.wait_index(
            "ADDED for the pod created after it", lambda e: e == ("ADDED", after)
        )
        rig.wait_index("a poke for it", lambda e: e[0] == "poke", after=added)
    _print_seen(rig.seen)

    _, detail = rig.seen[failed]
    assert detail.startswith("TransientBackendError: watch pods: ProtocolError: "), detail
    assert rig.seen[failed + 1][0] == "list" and rig.seen[failed + 2] == ("poke", "")
    assert rig.seen[watching] == ("watch", rig.seen[failed + 1][1])
    messages = [r.getMessage() for r in caplog.records if r.name == "bridge.runtime.pod_watcher"]
    assert any(
        m.startswith("pod watch failed (TransientBackendError), listing again in 0.20s: ")
        for m in messages
    ), messages
    assert any(m.startswith("pod watch recovered: listed 1 pod(s)") for m in messages)
