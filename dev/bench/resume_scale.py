"""`make bench`, scale rows: N slurmd pods made to exist (resume) and to go (suspend) on the
proving ground's kwok nodes, by the bridge and by the baselines, in the same run.

Contenders, each on the same N pods (the bridge's own rendering of a kwok-backed pool, so every
pod is byte-for-byte what the bridge sends):

* ``bridge``: a second bridge (``slurm-k8s-bridge serve``, its own socket, ``cluster_name:
  bench``, one pool ``scale-[0-9999]`` on kwok nodes) called through the real ``resume`` and
  ``suspend`` hooks, as slurmctld calls them. Its clock starts when the hook is started.
* ``lean``: the API server's own pace: urllib3, pre-serialised JSON bytes, 64 threads, no model,
  with the bridge's ServiceAccount token (so the same admission policy runs).
* ``official``: the official Python client's ``create_namespaced_pod`` /
  ``delete_namespaced_pod`` from 64 threads, the same token.
* ``statefulset``: one StatefulSet, ``podManagementPolicy: Parallel``, created with N replicas
  (suspend: scaled to 0), the kube-controller-manager's defaults doing the work.

"All pods exist" / "all gone" is seen by a separate process watching the pods' metadata (a
``PartialObjectMetadata`` watch, so parsing costs nothing on the contenders' side), which prints
the CLOCK_MONOTONIC instant the count was reached; that clock is shared by every process here.

Cleanup between contenders deletes leftovers with the lean client and waits until none remain.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import urllib3
import yaml

ROOT = Path(__file__).resolve().parents[2]
#: A watch stream silent this long is stalled (the server closes each one after 10 s).
WATCH_READ_TIMEOUT_S = 30.0
NAMESPACE = "slurm"
CLUSTER = "bench"
POOL = "scale"
POOL_NODES = "scale-[0-9999]"
POOL_SIZE = 10000
CONCURRENCY = 64
LABEL_CLUSTER = "slurm-k8s-bridge.io/cluster"
LABEL_RUN = "slurm-k8s-bridge.io/bench-run"
PYTHON = str(ROOT / ".venv" / "bin" / "python")
BASELINE_CLUSTER = "bench-baseline"
METADATA = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
METADATA_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"


@dataclass(frozen=True)
class Credentials:
    server: str
    ca_pem: str  # the CA's certificates, PEM
    token: str | None = None
    cert_file: str | None = None
    key_file: str | None = None


def read_kubeconfig(path: Path) -> Credentials:
    """The current context's server and credentials (a token or certificate files; the CA as a
    file or inline, as the ground's two kubeconfigs write them)."""
    config = yaml.safe_load(path.read_text())
    context_name = config["current-context"]
    context = next(c["context"] for c in config["contexts"] if c["name"] == context_name)
    cluster = next(c["cluster"] for c in config["clusters"] if c["name"] == context["cluster"])
    user = next(u["user"] for u in config["users"] if u["name"] == context["user"])
    return Credentials(
        server=cluster["server"],
        ca_pem=(
            base64.b64decode(cluster["certificate-authority-data"]).decode()
            if "certificate-authority-data" in cluster
            else Path(cluster["certificate-authority"]).read_text()
        ),
        token=user.get("token"),
        cert_file=user.get("client-certificate"),
        key_file=user.get("client-key"),
    )


class LeanApi:
    """The baseline: urllib3 and bytes, nothing else."""

    def __init__(self, credentials: Credentials, maxsize: int = CONCURRENCY) -> None:
        context = ssl.create_default_context(cadata=credentials.ca_pem)
        if credentials.cert_file and credentials.key_file:
            context.load_cert_chain(credentials.cert_file, credentials.key_file)
        self.server = credentials.server
        self.auth = {"Authorization": f"Bearer {credentials.token}"} if credentials.token else {}
        self.pool = urllib3.PoolManager(
            maxsize=maxsize, block=True, ssl_context=context, retries=False
        )

    def request(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        *,
        accept: str = "application/json",
        content_type: str = "application/json",
    ) -> tuple[int, bytes]:
        headers = {**self.auth, "Accept": accept, "Content-Type": content_type}
        response = self.pool.request(
            method, self.server + path, body=body, headers=headers, timeout=60.0
        )
        return response.status, response.data

    def watch(self, path: str, accept: str) -> Generator[bytes, None, None]:
        """Open a watch (returns once the server answered) and give its events, one JSON line
        each."""
        response = self.pool.request(
            "GET",
            self.server + path,
            headers={**self.auth, "Accept": accept},
            preload_content=False,
            # The server ends each watch after timeoutSeconds (10 s) and sends bookmarks; a
            # stream silent for longer is stalled: the reader lists again (watch_main).
            timeout=urllib3.Timeout(connect=10.0, read=WATCH_READ_TIMEOUT_S),
        )
        return _lines(response)


def _lines(response: Any) -> Generator[bytes, None, None]:
    buffered = b""
    try:
        for chunk in response.read_chunked():
            buffered += chunk
            *complete, buffered = buffered.split(b"\n")
            yield from (line for line in complete if line)
    finally:
        # A watch left early (an ERROR event, a stall) must give its pool slot back: the pool
        # blocks at maxsize, and the next watch would wait for it forever.
        response.close()
        response.release_conn()


def pods_path(name: str = "", **params: str) -> str:
    path = f"/api/v1/namespaces/{NAMESPACE}/pods" + (f"/{name}" if name else "")
    query = urllib.parse.urlencode({k: v for k, v in params.items() if v})
    return path + (f"?{query}" if query else "")


def pods_exist(api: LeanApi, selector: str) -> list[str]:
    """The names of the pods ``selector`` matches now (metadata only)."""
    status, data = api.request("GET", pods_path(labelSelector=selector), accept=METADATA_LIST)
    if status != 200:
        raise RuntimeError(f"list pods {selector}: {status} {data[:300]!r}")
    return [item["metadata"]["name"] for item in orjson.loads(data)["items"] or []]


# -- the watcher: its own process, so its parsing costs no contender CPU ------------------------


def trace(what: str) -> None:
    print(f"{time.monotonic():.3f} watcher: {what}", file=sys.stderr, flush=True)


def watch_main(kubeconfig: str, selector: str, target: int) -> int:
    """Print ``ready`` once watching, then ``reached <monotonic s>`` when exactly ``target`` pods
    match ``selector`` (N for a resume, 0 for a suspend).

    The API server ends a watch whose reader falls behind a burst (and any watch at its
    timeout); each end re-lists and watches again, so no event is lost for good.
    """
    api = LeanApi(read_kubeconfig(Path(kubeconfig)), maxsize=2)
    announced = False
    while True:
        status, data = api.request("GET", pods_path(labelSelector=selector), accept=METADATA_LIST)
        if status != 200:
            print(f"error: list {status} {data[:300]!r}", flush=True)
            return 1
        listing = orjson.loads(data)
        present = {item["metadata"]["name"] for item in listing["items"] or []}
        # On stderr (a test shows it when it fails): how far a watcher that never reports got.
        trace(f"listed {len(present)}/{target} at {listing['metadata']['resourceVersion']}")
        if len(present) == target:
            print(f"{'' if announced else 'ready' + chr(10)}reached {time.monotonic():.6f}")
            return 0
        path = pods_path(
            labelSelector=selector,
            watch="1",
            resourceVersion=listing["metadata"]["resourceVersion"],
            allowWatchBookmarks="true",
            timeoutSeconds="10",
        )
        events = api.watch(path, METADATA)
        if not announced:
            # Only now: a contender started earlier would share the CPU with our TLS handshake.
            print("ready", flush=True)
            announced = True
        try:
            for line in events:
                event = orjson.loads(line)
                if event["type"] == "ADDED":
                    present.add(event["object"]["metadata"]["name"])
                elif event["type"] == "DELETED":
                    present.discard(event["object"]["metadata"]["name"])
                elif event["type"] == "ERROR":
                    trace(f"watch ERROR {event['object'].get('message', '')!r}")
                    break  # e.g. 410 Gone: list again
                if len(present) == target:
                    print(f"reached {time.monotonic():.6f}", flush=True)
                    return 0
            trace(f"watch ended with {len(present)}/{target}")
        except urllib3.exceptions.HTTPError as e:
            # a stalled or broken stream (read timeout, reset): list again
            trace(f"watch broke with {len(present)}/{target}: {e}")
        finally:
            events.close()


class Watcher:
    """A watcher process for one selector and count, ready when constructed."""

    def __init__(self, kubeconfig: Path, selector: str, target: int) -> None:
        self.selector = selector
        # Its trace (stderr) goes into a timed-out count's error, not onto the terminal.
        self.trace = tempfile.TemporaryFile("w+")  # noqa: SIM115 (closed in __exit__)
        self.process = subprocess.Popen(
            [PYTHON, __file__, "--watch", str(kubeconfig), selector, str(target)],
            stdout=subprocess.PIPE,
            stderr=self.trace,
            text=True,
        )
        assert self.process.stdout is not None
        first = self.process.stdout.readline().strip()
        if first != "ready":
            self._kill()
            traced = self.traced()
            self.trace.close()
            raise RuntimeError(f"watcher for {selector}: {first or 'no output'}\n{traced}")

    def __enter__(self) -> Watcher:
        return self

    def __exit__(self, *_: object) -> None:
        if self.process.poll() is None:  # the contender failed: nobody waits for the count
            self._kill()
        self.trace.close()

    def _kill(self) -> None:
        self.process.kill()
        self.process.wait()
        if self.process.stdout is not None:  # else its ResourceWarning fails a later test
            self.process.stdout.close()

    def traced(self) -> str:
        """The watcher's last trace lines (what it listed and how its watches ended)."""
        self.trace.seek(0)
        return "".join(self.trace.readlines()[-20:])

    def reached(self, timeout_s: float) -> float:
        """The instant (time.monotonic, shared by all processes) the count was reached."""
        try:
            out, _ = self.process.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self._kill()
            raise RuntimeError(
                f"pods {self.selector}: count not reached within {timeout_s:.0f} s; "
                f"the watcher's trace ends:\n{self.traced()}"
            ) from None
        last = out.strip().splitlines()[-1] if out.strip() else "no output"
        if not last.startswith("reached "):
            raise RuntimeError(f"watcher for {self.selector}: {last}")
        return float(last.split()[1])


# -- the pods ----------------------------------------------------------------------------------


def bench_config(socket_path: str) -> dict[str, Any]:
    """The second bridge's configuration: the proving ground's, with one kwok pool and guards
    that keep its reconciler off the benchmark's pods (Slurm knows no scale-* node)."""
    config: dict[str, Any] = yaml.safe_load((ROOT / "dev" / "bridge.yaml").read_text())
    sim = next(p for p in config["pools"] if p["name"] == "sim")
    config["cluster_name"] = CLUSTER
    config["bridge"].update(
        {
            "socket": socket_path,
            "reconcile_interval_s": 3600,
            "pod_age_guard_s": 3600,
            "create_concurrency": CONCURRENCY,
            "log_format": "text",
            # The proving ground's bridge serves 127.0.0.1:9464 already.
            "metrics_address": "",
        }
    )
    pool = {**sim, "name": POOL, "nodes": POOL_NODES, "partition": POOL, "features": [POOL]}
    template = json.loads(json.dumps(pool["pod_template"]))
    for container in template["spec"]["containers"]:
        # 10 kwok nodes of 1,000 pods each: the pod count must be what runs out first.
        container["resources"] = {"requests": {"cpu": "10m", "memory": "16Mi"}}
    pool["pod_template"] = template
    config["pools"] = [pool]
    return config


def render(config_path: Path, names: Sequence[str], run: str) -> list[dict[str, Any]]:
    """The bridge's own pods for ``names``, labelled for a baseline ``run`` (another cluster
    label, so the second bridge's pod watch does not see them)."""
    from bridge.config import load_config
    from bridge.domain.pod_rendering import render_pods

    config = load_config(str(config_path))
    pool = config.pools.by_name(POOL)
    if pool is None:
        raise RuntimeError(f"{config_path}: no pool {POOL}")
    pods = render_pods(pool, names, config.pod_settings())
    for pod in pods:
        pod["metadata"]["labels"][LABEL_CLUSTER] = BASELINE_CLUSTER
        pod["metadata"]["labels"][LABEL_RUN] = run
    return pods


def names_for(count: int, offset: int = 0) -> list[str]:
    return [f"scale-{i}" for i in range(offset, offset + count)]


def hostlist_of(count: int, offset: int = 0) -> str:
    return f"scale-[{offset}-{offset + count - 1}]" if count > 1 else f"scale-{offset}"


def resume_file_of(hostlist: str) -> dict[str, Any]:
    """SLURM_RESUME_FILE for one one-node job per node (an array of N tasks): the pods are then
    exactly the baselines' (a job of N nodes would make them one gang, a PodGroup the scheduler
    places whole, which no baseline does)."""
    from bridge.domain.hostlist import expand

    jobs = [{"job_id": i + 1, "nodes": name} for i, name in enumerate(expand(hostlist))]
    return {"jobs": jobs, "all_nodes": hostlist}


# -- the contenders ----------------------------------------------------------------------------


def in_parallel(work: Callable[[Any], None], items: Sequence[Any]) -> None:
    with ThreadPoolExecutor(CONCURRENCY) as pool:
        list(pool.map(work, items))


def lean_create(api: LeanApi, pods: Sequence[dict[str, Any]]) -> None:
    bodies = [orjson.dumps(p) for p in pods]  # pre-serialised: the apiserver's pace, not ours

    def post(body: bytes) -> None:
        status, data = api.request("POST", pods_path(), body)
        if status != 201:
            raise RuntimeError(f"lean create: {status} {data[:300]!r}")

    in_parallel(post, bodies)


def lean_delete(api: LeanApi, names: Sequence[str]) -> None:
    def delete(name: str) -> None:
        status, data = api.request("DELETE", pods_path(name))
        if status not in (200, 202, 404):
            raise RuntimeError(f"lean delete {name}: {status} {data[:300]!r}")

    in_parallel(delete, names)


def official_core(kubeconfig: Path) -> Any:
    from kubernetes import client, config

    configuration = client.Configuration()
    config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    configuration.connection_pool_maxsize = CONCURRENCY
    return client.CoreV1Api(client.ApiClient(configuration))


def official_create(core: Any, pods: Sequence[dict[str, Any]]) -> None:
    in_parallel(lambda pod: core.create_namespaced_pod(NAMESPACE, pod), pods)


def official_delete(core: Any, names: Sequence[str]) -> None:
    in_parallel(lambda name: core.delete_namespaced_pod(name, NAMESPACE), names)


STS_NAME = "bench-scale"
STS_PATH = f"/apis/apps/v1/namespaces/{NAMESPACE}/statefulsets"


def sts_create(admin: LeanApi, pod: dict[str, Any], replicas: int) -> None:
    labels = {LABEL_RUN: "statefulset"}
    # A StatefulSet's pods must restart in place (the API refuses restartPolicy Never).
    spec = {**{k: v for k, v in pod["spec"].items() if k != "hostname"}, "restartPolicy": "Always"}
    manifest = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": STS_NAME, "namespace": NAMESPACE},
        "spec": {
            "replicas": replicas,
            "podManagementPolicy": "Parallel",
            "serviceName": STS_NAME,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": spec},
        },
    }
    status, data = admin.request("POST", STS_PATH, orjson.dumps(manifest))
    if status != 201:
        raise RuntimeError(f"statefulset create: {status} {data[:300]!r}")


def sts_scale(admin: LeanApi, replicas: int) -> None:
    status, data = admin.request(
        "PATCH",
        f"{STS_PATH}/{STS_NAME}",
        orjson.dumps({"spec": {"replicas": replicas}}),
        content_type="application/merge-patch+json",
    )
    if status != 200:
        raise RuntimeError(f"statefulset scale: {status} {data[:300]!r}")


def sts_delete(admin: LeanApi) -> None:
    # Orphan what is left: cleanup deletes pods with the lean client, not at the garbage
    # collector's client rate.
    body = orjson.dumps({"propagationPolicy": "Orphan"})
    status, data = admin.request("DELETE", f"{STS_PATH}/{STS_NAME}", body)
    if status not in (200, 202, 404):
        raise RuntimeError(f"statefulset delete: {status} {data[:300]!r}")


# -- the second bridge and its hooks -----------------------------------------------------------


class BenchBridge:
    """``slurm-k8s-bridge serve`` with :func:`bench_config`, and copies of the real hooks that
    talk to it."""

    def __init__(self, work: Path, settings: Mapping[str, str]) -> None:
        """``settings``: the ``SKB_*`` environment the ground gives its own bridge (its
        kubeconfig, slurm.conf, the series' Slurm clients, the auth) less the socket, which the
        file sets. Without the ground's clients it called the host's 22.05 ``sinfo``, which
        failed and was retried on every reconcile pass: three processes per 0.3 s of a burst."""
        self.work = work
        self.socket = str(work / "bridge.sock")
        self.config_path = work / "bridge.yaml"
        self.config_path.write_text(yaml.safe_dump(bench_config(self.socket), sort_keys=False))
        self.log_path = work / "bridge.log"
        self.hooks = work / "slurm_plugins"
        self.hooks.mkdir()
        for name in ("resume", "suspend", "hook.sh", "bin/skb-hook"):
            source = ROOT / "slurm_plugins" / name
            if not source.exists():  # the Go client is built by `make hook-client`
                continue
            (self.hooks / name).parent.mkdir(exist_ok=True)
            (self.hooks / name).write_bytes(source.read_bytes())
            (self.hooks / name).chmod(0o755)
        (self.hooks / "hooks.env").write_text(
            f"SKB_PYTHON={PYTHON}\nSKB_SOCKET=unix:{self.socket}\n"
            f"SKB_HOOK_LOG={work / 'hooks.log'}\nSKB_SLURM_BIN=/usr/bin\n"
        )
        env = {**os.environ, **{k: v for k, v in settings.items() if k != "SKB_BRIDGE_SOCKET"}}
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                [str(ROOT / ".venv" / "bin" / "slurm-k8s-bridge"), "serve", "--config",
                 str(self.config_path)],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
            )  # fmt: skip
        deadline = time.monotonic() + 60
        while not self._answers():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"bench bridge did not start: see {self.log_path}")
            time.sleep(0.2)

    def _answers(self) -> bool:
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(1)
            try:
                s.connect(self.socket)
            except OSError:
                return False
        return True

    def hook(self, kind: str, hostlist: str, client: str = "go") -> tuple[float, str]:
        """Run the real ``kind`` hook as slurmctld does (no PATH; SLURM_RESUME_FILE for a resume)
        with hook.sh's ``client`` (go: slurm_plugins/bin/skb-hook; python: bridge.hooks);
        returns (seconds, its log line)."""
        env = {"PWD": "/", "SHLVL": "1", "PYTHONPATH": str(ROOT), "SKB_HOOK_CLIENT": client}
        if kind == "resume":
            resume_file = self.work / "resume.json"
            resume_file.write_text(json.dumps(resume_file_of(hostlist)))
            env["SLURM_RESUME_FILE"] = str(resume_file)
        log = self.work / "hooks.log"
        before = log.stat().st_size if log.exists() else 0
        started = time.monotonic()
        subprocess.run(
            [str(self.hooks / kind), hostlist],
            env=env,
            check=False,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        elapsed = time.monotonic() - started
        with log.open("rb") as f:
            f.seek(before)
            line = f.read().decode(errors="replace").strip().splitlines()
        return elapsed, line[-1] if line else "(no hook log line)"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


# -- the runs ----------------------------------------------------------------------------------

CONTENDERS = ("lean", "bridge", "official")  # repeated, in a rotating order
#: Above this a StatefulSet's scale-down (at the controller-manager's default 20 requests/s, as
#: slow as its scale-up) is not timed: cleanup removes its pods instead.
STS_SUSPEND_MAX = 1000


def repetitions(count: int) -> int:
    """Rounds of the three clients at ``count`` nodes (min / median / max reported). Five at
    1,000: on 2 cores the scheduler binding the pods takes 0.2-3.5 s of CPU inside one 2-4 s
    window, for every contender alike, and three rounds left a median at its mercy."""
    return 5 if count <= 1000 else 1


SELECTORS = {
    "lean": f"{LABEL_RUN}=lean",
    "official": f"{LABEL_RUN}=official",
    "bridge": f"{LABEL_CLUSTER}={CLUSTER}",
    "statefulset": f"{LABEL_RUN}=statefulset",
}
DESCRIPTIONS = {
    "lean": "lean client (urllib3, bytes, 64 threads): the apiserver's pace",
    "official": "official Python client, 64 threads",
    "statefulset": "StatefulSet, podManagementPolicy Parallel",
}


@dataclass(frozen=True)
class Timing:
    contender: str
    count: int
    create_s: float  # the call started → all N pods exist
    delete_s: float | None  # the call started → all N pods are gone (None: not measured)
    call_s: float | None = None  # the bridge: the resume hook's own run time


@dataclass
class Ground:
    """The proving ground as the benchmark uses it."""

    bridge_kubeconfig: Path  # the bridge's ServiceAccount token: lean and official use it too
    admin_kubeconfig: Path  # watchers, StatefulSet, cleanup
    lean: LeanApi
    admin: LeanApi
    core: Any
    bridge: BenchBridge
    #: The first name (``scale-<n>``) no creation of this run has used yet: see :meth:`fresh`.
    unused: int = 0

    def fresh(self, count: int) -> int:
        """The offset of ``count`` names no earlier creation of this run used. A name is never
        reused while a late delete may still come for it: seen in CI, 122 of the bridge's 200
        new pods vanished right after the lean baseline had created and deleted pods of the
        same names (kwok's delete stage, or another delete by name, acting on the old pod)."""
        if self.unused + count > POOL_SIZE:
            self.unused = 0  # names that old are long gone
        offset, self.unused = self.unused, self.unused + count
        return offset

    @classmethod
    @contextmanager
    def open(cls) -> Iterator[Ground]:
        sys.path.insert(0, str(ROOT / "dev"))
        from proving_ground import ground
        from proving_ground.bridge_daemon import bridge_kubeconfig, bridge_settings
        from proving_ground.layout import Layout

        layout = Layout.default()
        if not ground.healthy(layout):
            print("starting the proving ground (make up) ...", file=sys.stderr, flush=True)
            ground.up(layout)
        # Kept when SKB_BENCH_KEEP is set: the second bridge's log and the hooks' log.
        tmp = tempfile.mkdtemp(prefix="skb-bench-scale-")
        kubeconfig = bridge_kubeconfig(layout)
        admin_kubeconfig = layout.local / "kubeconfig"
        # The clients first: a failure there must not leave the second bridge running (seen: a
        # kubeconfig the reader did not understand left it serving for hours).
        lean = LeanApi(read_kubeconfig(kubeconfig))
        admin = LeanApi(read_kubeconfig(admin_kubeconfig))
        core = official_core(kubeconfig)
        bridge = BenchBridge(Path(tmp), bridge_settings(layout))
        found = cls(
            bridge_kubeconfig=kubeconfig,
            admin_kubeconfig=admin_kubeconfig,
            lean=lean,
            admin=admin,
            core=core,
            bridge=bridge,
        )
        try:
            found.cleanup()
            yield found
        finally:
            try:
                found.cleanup()
            finally:
                bridge.stop()
                if os.environ.get("SKB_BENCH_KEEP"):
                    print(f"kept {tmp}", file=sys.stderr)
                else:
                    shutil.rmtree(tmp, ignore_errors=True)

    def cleanup(self) -> None:
        """No benchmark pod or StatefulSet left (waits until the last pod is gone)."""
        sts_delete(self.admin)
        for selector in (
            f"{LABEL_CLUSTER}={CLUSTER}",
            f"{LABEL_CLUSTER}={BASELINE_CLUSTER}",
            f"{LABEL_RUN}=statefulset",
        ):
            names = pods_exist(self.admin, selector)
            if names:
                with Watcher(self.admin_kubeconfig, selector, 0) as gone:
                    lean_delete(self.admin, names)
                    gone.reached(timeout_s=max(120.0, len(names) * 0.1))

    def measure(self, contender: str, count: int) -> Timing:
        """Create ``count`` pods with ``contender``, then delete them; both timed until the
        watcher saw the last one."""
        self.cleanup()
        # Each contender starts on a quiet machine: the previous one's pods are still being
        # bound, started or collected for seconds after its count was reached, and on 2 cores
        # that work would be charged to whoever runs next (seen: a lean 5,000 at 43 s, 18 s
        # the next time).
        wait_until_quiet()
        selector = SELECTORS[contender]
        timeout_s = max(300.0, count * 0.25)
        offset = self.fresh(count)
        names = names_for(count, offset)
        pods = render(self.bridge.config_path, names, contender)
        call_s = None
        with Watcher(self.admin_kubeconfig, selector, count) as exist:
            started = time.monotonic()
            if contender == "lean":
                lean_create(self.lean, pods)
            elif contender == "official":
                official_create(self.core, pods)
            elif contender == "bridge":
                call_s, line = self.bridge.hook("resume", hostlist_of(count, offset))
                if "result=ok" not in line:
                    raise RuntimeError(f"resume hook: {line}")
            else:
                sts_create(self.admin, pods[0], count)
            try:
                create_s = exist.reached(timeout_s) - started
            except RuntimeError as e:
                raise RuntimeError(f"{e}; {self.shortfall(selector, contender)}") from None
        if contender == "statefulset" and count > STS_SUSPEND_MAX:
            return Timing(contender, count, create_s, None, call_s)
        with Watcher(self.admin_kubeconfig, selector, 0) as gone:
            started = time.monotonic()
            if contender == "lean":
                lean_delete(self.lean, names)
            elif contender == "official":
                official_delete(self.core, names)
            elif contender == "bridge":
                self.bridge.hook("suspend", hostlist_of(count, offset))
            else:
                sts_scale(self.admin, 0)
            delete_s = gone.reached(timeout_s) - started
        return Timing(contender, count, create_s, delete_s, call_s)

    def shortfall(self, selector: str, contender: str) -> str:
        """What a timed-out count saw: the pods present, and the bench bridge's last words."""
        found = f"{len(pods_exist(self.admin, selector))} pods present"
        if contender != "bridge":
            return found
        lines = self.bridge.log_path.read_text(errors="replace").splitlines()
        return found + "; the bench bridge's log ends:\n" + "\n".join(lines[-40:])

    def hook_samples(self, count: int, samples: int, client: str = "go") -> list[float]:
        """The resume hook's run time (hook.sh with ``client``) for ``samples`` resumes of
        ``count`` fresh nodes each.

        Each sample starts on a quiet machine: the previous sample's pods exist and the CPUs
        are below :data:`QUIET_BUSY` (the scheduler, kwok and the apiserver finished binding and
        starting them). On 2 cores that burst otherwise takes the CPU the hook's Python start
        needs, which measures the machine, not the hook.
        """
        self.cleanup()
        wait_until_quiet()
        selector = SELECTORS["bridge"]
        times = []
        for k in range(samples):
            with Watcher(self.admin_kubeconfig, selector, (k + 1) * count) as exist:
                hostlist = hostlist_of(count, offset=self.fresh(count))
                elapsed, line = self.bridge.hook("resume", hostlist, client=client)
                if "result=ok" not in line:
                    raise RuntimeError(f"resume hook: {line}")
                times.append(elapsed)
                exist.reached(timeout_s=max(120.0, count * 0.25))
            wait_until_quiet()
        self.cleanup()
        return times


#: The machine is quiet when less than this share of its CPU time was busy over one second.
QUIET_BUSY = 0.25


def cpu_busy(interval_s: float = 1.0) -> float:
    """The busy share of all CPUs over ``interval_s`` (from /proc/stat)."""

    def sample() -> tuple[int, int]:
        values = [int(v) for v in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
        idle = values[3] + values[4]  # idle + iowait
        return sum(values), idle

    total0, idle0 = sample()
    time.sleep(interval_s)
    total1, idle1 = sample()
    return 1.0 - (idle1 - idle0) / max(1, total1 - total0)


def wait_until_quiet(timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while (busy := cpu_busy()) > QUIET_BUSY:
        if time.monotonic() > deadline:
            progress(f"still {busy:.0%} busy after {timeout_s:.0f} s; sampling anyway")
            return


#: hook.sh's clients (SKB_HOOK_CLIENT): the static Go one it prefers, and the Python fallback.
HOOK_CLIENTS = ("go", "python")


@dataclass(frozen=True)
class Results:
    timings: tuple[Timing, ...]
    hooks: tuple[tuple[str, int, tuple[float, ...]], ...]  # (client, nodes, samples)


def run(sizes: Sequence[int], hook_samples: Sequence[tuple[int, int]]) -> Results:
    timings = []
    hooks = []
    with Ground.open() as ground:
        # Hook samples first: after 10,000 pods came and went the apiserver and controllers stay
        # busy for minutes (Events, garbage collection), which a 2-core machine's Python start
        # feels; Slurm's hook runs on a cluster in its steady state.
        for count, samples in hook_samples:
            for client in HOOK_CLIENTS:
                progress(f"resume hook ({client} client) x {samples} at {count:,} nodes")
                hooks.append((client, count, tuple(ground.hook_samples(count, samples, client))))
        for count in sizes:
            rounds = repetitions(count)
            for round_ in range(rounds):
                # Rotate the order so no client always runs right after a cleanup or another.
                order = CONTENDERS[round_ % 3 :] + CONTENDERS[: round_ % 3]
                for contender in order:
                    progress(f"{contender} x {count:,} (round {round_ + 1}/{rounds})")
                    timings.append(ground.measure(contender, count))
            progress(f"statefulset x {count:,}")
            timings.append(ground.measure("statefulset", count))
    return Results(tuple(timings), tuple(hooks))


# -- where the time goes (--explain) ------------------------------------------------------------

#: The ground's daemons whose CPU a breakdown reports (process names as /proc shows them).
DAEMONS = ("kube-apiserver", "kube-scheduler", "etcd")
#: Variants of one 1,000-pod create, each changing one thing against ``lean`` (see EXPLAIN_NOTE).
VARIANTS = (
    "lean",
    "lean-poll",
    "lean-admin",
    "lean-unscheduled",
    "lean-pod-watch",
    "bridge",
    "bridge-poll",
)
EXPLAIN_NOTE = """Where the time of N pod creates goes: each variant changes one thing against lean
(the bench's baseline, clocked by the metadata watcher). lean-poll: the end seen by polling
`kubectl get pods` instead (the method of the figures in issue 33). lean-admin: the ground's admin
certificate (system:masters: exempt from API Priority and Fairness, outside the admission policy)
instead of the bridge's ServiceAccount token. lean-unscheduled: pods no scheduler takes
(schedulerName nobody): the scheduler's and kwok's share of 2 cores. lean-pod-watch: lean with one
full-object watch of the pods open, as the bridge's own watch is. bridge: the real resume hook and
the second bridge; bridge-poll: the same, its end seen by polling kubectl. "last 201": when the
creator's last create returned (for the bridge, its last 'created' log line). CPU: seconds each
process used from the start until the end seen."""


def process_cpu_s(pid: int, *, children: bool = False) -> float:
    """User + system CPU seconds of ``pid`` so far (every thread); ``children``: instead, those
    of its children it has waited for (the bridge's Slurm commands)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    first = 13 if children else 11
    return (int(fields[first]) + int(fields[first + 1])) / os.sysconf("SC_CLK_TCK")


def cpu_of(pids: Mapping[str, int]) -> dict[str, float]:
    """:func:`process_cpu_s` of each of ``pids``, and of the bridge's waited-for children."""
    spent = {name: process_cpu_s(pid) for name, pid in pids.items()}
    spent["the bridge's Slurm commands"] = process_cpu_s(pids["bridge"], children=True)
    return spent


def daemon_pids() -> dict[str, int]:
    """The PIDs of :data:`DAEMONS` as the proving ground recorded starting them (never another
    process of the same name on the machine)."""
    from proving_ground.layout import Layout
    from proving_ground.processes import State

    state = State(Layout.default())
    return {name: pid for name in DAEMONS if (pid := state.running(name)) is not None}


def poll_until(kubectl: list[str], selector: str, target: int, timeout_s: float) -> float:
    """Run ``kubectl get pods -l selector`` until it counts ``target``; the instant it did.
    Raises after ``timeout_s`` (a contender that failed leaves no poller behind)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        listed = subprocess.run(
            [*kubectl, "get", "pods", "-n", NAMESPACE, "-l", selector, "-o", "name"],
            capture_output=True,
            text=True,
            check=False,
        )
        if listed.returncode == 0 and len(listed.stdout.split()) == target:
            return time.monotonic()
    raise RuntimeError(f"pods {selector}: kubectl did not count {target} within {timeout_s:.0f} s")


@dataclass(frozen=True)
class Breakdown:
    variant: str
    seen_s: float  # the start → the end as the variant's clock saw it
    last_create_s: float  # the start → the creator's last create returned
    cpu_s: dict[str, float]  # process → CPU seconds in that time


def created_log_instants(log_path: Path, offset: int) -> list[float]:
    """time.monotonic() instants of the bench bridge's "pod ... created" lines after ``offset``
    (its text log's timestamps are wall-clock milliseconds)."""
    wall_minus_monotonic = time.time() - time.monotonic()
    with log_path.open("rb") as f:
        f.seek(offset)
        lines = f.read().decode(errors="replace").splitlines()
    return [
        time.mktime(time.strptime(line[:19], "%Y-%m-%d %H:%M:%S"))
        + int(line[20:23]) / 1000
        - wall_minus_monotonic
        for line in lines
        if " created (jobs " in line
    ]


def explain_one(
    ground: Ground, variant: str, count: int, kubectl: list[str], daemons: dict[str, int]
) -> Breakdown:
    ground.cleanup()
    wait_until_quiet()
    contender = "bridge" if variant.startswith("bridge") else "lean"
    selector = SELECTORS[contender]
    offset = ground.fresh(count)
    pods = render(ground.bridge.config_path, names_for(count, offset), contender)
    if variant == "lean-unscheduled":
        for pod in pods:
            pod["spec"]["schedulerName"] = "nobody"
    api = ground.admin if variant == "lean-admin" else ground.lean
    pids = {**daemons, "bridge": ground.bridge.process.pid}
    side_watch = None
    if variant == "lean-pod-watch":
        side_watch = subprocess.Popen(
            [*kubectl, "get", "pods", "-n", NAMESPACE, "-l", selector, "-w", "-o", "json"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(2)  # the watch is open
        pids["the pod watch"] = side_watch.pid
    before = cpu_of(pids)
    own_cpu = time.process_time()
    polled = variant.endswith("-poll")
    watcher = None if polled else Watcher(ground.admin_kubeconfig, selector, count)
    log_offset = ground.bridge.log_path.stat().st_size
    timeout_s = max(300.0, count * 0.25)
    polling = ThreadPoolExecutor(1)
    try:
        started = time.monotonic()
        poller = polling.submit(poll_until, kubectl, selector, count, timeout_s) if polled else None
        if contender == "lean":
            lean_create(api, pods)
            last_create = time.monotonic()
        else:
            _, line = ground.bridge.hook("resume", hostlist_of(count, offset))
            if "result=ok" not in line:
                raise RuntimeError(f"resume hook: {line}")
        seen = poller.result() if poller is not None else None
        if watcher is not None:
            seen = watcher.reached(timeout_s)
        assert seen is not None
        cpu = {name: spent - before[name] for name, spent in cpu_of(pids).items()}
        if contender == "lean":
            cpu["the creator"] = time.process_time() - own_cpu
        if contender == "bridge":
            time.sleep(1)  # its log lines of the last creates
            last_create = max(created_log_instants(ground.bridge.log_path, log_offset))
    finally:
        polling.shutdown(wait=False)
        if watcher is not None:
            watcher.__exit__()
        if side_watch is not None:
            side_watch.kill()
            side_watch.wait()
    return Breakdown(variant, seen - started, last_create - started, cpu)


def explain(count: int, rounds: int, variants: Sequence[str] = VARIANTS) -> list[Breakdown]:
    """Every variant of ``variants`` ``rounds`` times, in a rotating order, on one ground."""
    from proving_ground.layout import Layout

    layout = Layout.default()
    kubectl = [str(layout.kubernetes_bin / "kubectl"), f"--kubeconfig={layout.kubeconfig}"]
    found = []
    with Ground.open() as ground:
        daemons = daemon_pids()  # once the ground is up: Ground.open starts it if need be
        for round_ in range(rounds):
            shift = round_ % len(variants)
            for variant in [*variants[shift:], *variants[:shift]]:
                progress(f"explain: {variant} x {count:,} (round {round_ + 1}/{rounds})")
                found.append(explain_one(ground, variant, count, kubectl, daemons))
    return found


def explain_lines(found: Sequence[Breakdown]) -> list[str]:
    def spread(values: Sequence[float]) -> str:
        return f"{min(values):.2f} / {statistics.median(values):.2f} / {max(values):.2f}"

    lines = ["variant | end seen, s (min / median / max) | last 201, s | CPU s (medians)"]
    for variant in VARIANTS:
        mine = [b for b in found if b.variant == variant]
        if not mine:
            continue
        names = sorted({n for b in mine for n in b.cpu_s}, key=lambda n: (n not in DAEMONS, n))
        cpu = ", ".join(
            f"{n} {statistics.median(b.cpu_s.get(n, 0.0) for b in mine):.2f}" for n in names
        )
        lines.append(
            f"{variant} | {spread([b.seen_s for b in mine])} | "
            f"{spread([b.last_create_s for b in mine])} | {cpu}"
        )
    return lines


def progress(what: str) -> None:
    print(f"  scale: {what} ...", file=sys.stderr, flush=True)


def percentile(samples: Sequence[float], fraction: float) -> float:
    ordered = sorted(samples)
    index = min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))
    return ordered[index]


Line = tuple[str, str, str, str]


def figures_of(results: Results, contender: str, count: int, figure: str) -> list[float]:
    return [
        getattr(t, figure)
        for t in results.timings
        if t.contender == contender and t.count == count and getattr(t, figure) is not None
    ]


def spread(values: Sequence[float]) -> str:
    """One run's figure, or min / median / max of several."""
    if len(values) == 1:
        return f"{values[0]:.2f} s"
    return (
        f"{min(values):.2f} / {statistics.median(values):.2f} / {max(values):.2f} s "
        f"(min / median / max of {len(values)})"
    )


def ratio_cell(ours: Sequence[float], theirs: Sequence[float]) -> str:
    """The ratio of the medians, and with several rounds each round's own ratio (the rounds are
    interleaved: the k-th figures of two contenders were measured minutes apart, on the same
    machine's mood), so that one slow round shows as one."""
    cell = f"{statistics.median(ours) / statistics.median(theirs):.2f}x"
    if len(ours) == 1 or len(ours) != len(theirs):
        return cell
    rounds = " / ".join(f"{a / b:.2f}" for a, b in zip(ours, theirs, strict=True))
    return f"{cell} (each round: {rounds})"


def table_lines(results: Results) -> list[Line]:
    lines: list[Line] = []
    for count in sorted({t.count for t in results.timings}):
        for phase, figure in (("resume", "create_s"), ("suspend", "delete_s")):
            ours = figures_of(results, "bridge", count, figure)
            assert ours
            what = "all pods exist" if phase == "resume" else "all pods gone"
            for contender in ("lean", "official", "statefulset"):
                theirs = figures_of(results, contender, count, figure)
                if not theirs:
                    continue
                lines.append(
                    (
                        f"{phase} {count:,} nodes via the hook → {what}",
                        spread(ours),
                        f"{spread(theirs)}, {DESCRIPTIONS[contender]}",
                        ratio_cell(ours, theirs),
                    )
                )
    for client, count, samples in results.hooks:
        p50, p95 = statistics.median(samples), percentile(samples, 0.95)
        lines.append(
            (
                f"resume hook ({client} client) at {count:,} node{'s' if count > 1 else ''} "
                f"(p50 / p95 of {len(samples)})",
                f"{p50 * 1000:.0f} / {p95 * 1000:.0f} ms",
                "150 ms (the issue's p50 budget)",
                f"{p50 / 0.150:.2f}x",
            )
        )
    return lines


NOTE = """Scale rows: kwok-backed pods on the proving ground (10 kwok nodes x 1,000 pods). "via the
hook" = the real resume/suspend hook started against a second bridge (cluster_name bench, one kwok
pool), timed from the hook's start until a separate watcher saw the last pod exist (or go); the
resume hook answers before the pods exist (ACCEPTED). Baselines create/delete the bridge's own pod
manifests: lean = urllib3 + pre-serialised bytes + 64 threads; official = the kubernetes client, 64
threads (both with the bridge's ServiceAccount token); StatefulSet = Parallel, N replicas (its
scale-down timed up to 1,000). Several rounds: min / median / max, the ratio of the medians and
each round's own ratio. Hook
rows: the real resume hook's wall time against that bridge (hook.sh with its Go client, the
default, and with SKB_HOOK_CLIENT=python), fresh nodes each run, each started when the machine is
quiet (< 25 % CPU busy over 1 s; see Ground.hook_samples)."""


def main(argv: Sequence[str]) -> int:
    if argv[:1] == ["--watch"]:
        return watch_main(argv[1], argv[2], int(argv[3]))
    import argparse

    parser = argparse.ArgumentParser(
        description="scale rows of `make bench` alone: resume/suspend N kwok-backed nodes"
    )
    parser.add_argument("--sizes", default="1000", help="comma-separated node counts")
    parser.add_argument(
        "--hooks", default="1x10,1000x5", help="resume hook samples: NODESxRUNS,... ('' for none)"
    )
    parser.add_argument(
        "--explain",
        type=int,
        metavar="ROUNDS",
        help="instead: where the time of --sizes' first count goes, ROUNDS rounds of each "
        "variant (lean against its variants and the bridge; see EXPLAIN_NOTE)",
    )
    parser.add_argument(
        "--variants",
        default=",".join(VARIANTS),
        help=f"with --explain: which, comma-separated (default: all: {','.join(VARIANTS)})",
    )
    args = parser.parse_args(argv)
    if args.explain:
        variants = [v for v in args.variants.split(",") if v]
        unknown = sorted(set(variants) - set(VARIANTS))
        if unknown or not variants:
            parser.error(f"--variants: unknown {unknown or 'none given'}; choose from {VARIANTS}")
        sys.path.insert(0, str(ROOT / "dev"))
        count = int(args.sizes.split(",")[0])
        print("\n".join(explain_lines(explain(count, args.explain, variants))))
        print(EXPLAIN_NOTE)
        return 0
    sizes = [int(s) for s in args.sizes.split(",") if s]
    hooks = [(int(n), int(r)) for n, r in (h.split("x") for h in args.hooks.split(",") if h)]
    results = run(sizes, hooks)
    width = max(len(line[0]) for line in table_lines(results))
    for line in table_lines(results):
        print(line[0].ljust(width), *line[1:], sep="  ")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main(sys.argv[1:]))
