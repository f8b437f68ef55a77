"""An in-memory stand-in for the one ``CoreV1Api`` call the pod watch makes.

``PodGateway`` takes its API object in the constructor, so ``FakeCoreApi`` goes there: the real
adapter code parses the stream and translates the errors, with nothing patched. Each watch
request plays the next scripted session, as the client library would hand it over:

- an exception: the request itself fails (``ApiException`` for an HTTP status);
- a list of items: the response body's chunks (``bytes``), or an exception raised mid-stream
  (``urllib3.exceptions.ProtocolError`` for a dropped connection, or a client bug).

When the script runs out the next watch is quiet: it sets ``drained`` and blocks until
``release`` is set, then ends like a watch the server closed at its timeout.

Writes (creates, Events) go out on the client's own connection pool, not through a generated
method, so ``FakeApiServer`` serves them over HTTP on a loopback port instead.

``pod`` makes a pod manifest; ``labels`` (the bridge's, for a node) and ``create_id`` (the
annotation of a create the bridge sent) are what ``PodProvenance`` goes by.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from kubernetes import client as k8s

from bridge.adapters.kubernetes import PodGateway
from bridge.adapters.kubernetes.gateway import CONCURRENCY
from bridge.domain.pods import ANNOTATION_CREATE_ID, LABEL_CLUSTER, LABEL_MANAGED_BY, LABEL_NODE

Session = BaseException | Sequence[bytes | BaseException]

#: How often the server checks for shutdown(); the suite's teardowns wait this long.
SHUTDOWN_POLL_S = 0.01


def line(event: object) -> bytes:
    """One watch event as the API server writes it: JSON and a newline."""
    return json.dumps(event).encode() + b"\n"


def pod(
    name: str,
    version: str = "100",
    *,
    uid: str = "",
    labels: Mapping[str, str] | None = None,
    create_id: str = "",
) -> dict[str, Any]:
    """A pod as the API server has it (UID ``uid-<name>`` unless given); without ``labels``
    its node is its name (see ``pod_view``)."""
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": "slurm",
        "uid": uid or f"uid-{name}",
        "resourceVersion": version,
        "creationTimestamp": "2026-12-02T12:00:00Z",
    }
    if labels is not None:
        metadata["labels"] = dict(labels)
    if create_id:
        metadata["annotations"] = {ANNOTATION_CREATE_ID: create_id}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "status": {"phase": "Pending"}}


def ours(node: str) -> dict[str, str]:
    """The labels the bridge (cluster ``lab``) puts on the pod of ``node``."""
    return {LABEL_MANAGED_BY: "slurm-k8s-bridge", LABEL_CLUSTER: "lab", LABEL_NODE: node}


def event(kind: str, name: str, version: str = "100", **fields: Any) -> bytes:
    """A watch event of ``pod(name, version, **fields)``."""
    return line({"type": kind, "object": pod(name, version, **fields)})


def bookmark(version: str) -> bytes:
    """A BOOKMARK event: an object of the watched kind with only its resourceVersion."""
    return line(
        {"type": "BOOKMARK", "object": {"kind": "Pod", "metadata": {"resourceVersion": version}}}
    )


def status(code: int, reason: str, message: str) -> dict[str, Any]:
    """A ``Status`` object, what an ERROR event carries."""
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


def error_event(code: int, reason: str, message: str) -> bytes:
    return line({"type": "ERROR", "object": status(code, reason, message)})


class FakeResponse:
    """A ``urllib3.HTTPResponse`` as far as the watch reads it."""

    def __init__(self, items: Sequence[bytes | BaseException] = (), data: bytes = b"") -> None:
        self.items = list(items)
        self.data = data
        self.closed = False
        self.released = False
        self.journal: list[str] | None = None
        self.park: tuple[threading.Event, threading.Event] | None = None

    def stream(self, amt: int | None = None, decode_content: bool | None = None) -> Iterator[bytes]:
        assert amt is None
        assert decode_content is False
        if self.park is not None:
            drained, release = self.park
            drained.set()
            release.wait(5)
        for item in self.items:
            if isinstance(item, BaseException):
                raise item
            if self.journal is not None:
                self.journal.append(f"send {_describe(item)}")
            yield item

    def close(self) -> None:
        self.closed = True

    def release_conn(self) -> None:
        self.released = True


def _describe(chunk: bytes) -> str:
    try:
        doc = json.loads(chunk)
        if doc["type"] == "ERROR":
            return f"ERROR {doc['object'].get('code')}"
        if doc["type"] == "BOOKMARK":
            return f"BOOKMARK {doc['object']['metadata']['resourceVersion']}"
        return f"{doc['type']} {doc['object']['metadata']['name']}"
    except (ValueError, KeyError, TypeError):
        return f"{len(chunk)} bytes"


class FakeCoreApi:
    """``list_namespaced_pod``: a list answers ``resourceVersion`` 1, 2, 3 ... in turn with the
    pods in ``listed``, a page of ``limit`` at a time; a watch plays the next session of the
    script."""

    def __init__(self, sessions: Sequence[Session] = (), journal: list[str] | None = None) -> None:
        self.sessions: deque[Session] = deque(sessions)
        self.journal = journal if journal is not None else []
        self.watch_calls: list[dict[str, Any]] = []
        self.responses: list[FakeResponse] = []
        self.lists = 0
        #: What a list answers (pod manifests), and every list request's arguments.
        self.listed: list[dict[str, Any]] = []
        self.list_calls: list[dict[str, Any]] = []
        #: The pods each new list answers, in turn (then ``listed`` stays as the last one set).
        self.list_script: deque[list[dict[str, Any]]] = deque()
        #: Raised by the next list request that continues a paged list (an expired token).
        self.fail_continue: BaseException | None = None
        self.drained = threading.Event()
        self.release = threading.Event()

    def list_namespaced_pod(self, namespace: str, **kwargs: Any) -> FakeResponse:
        assert namespace == "slurm"
        assert kwargs["_preload_content"] is False
        if not kwargs.get("watch"):
            return self._list(kwargs)
        self.watch_calls.append(kwargs)
        self.journal.append(f"watch {kwargs['resource_version']}")
        if not self.sessions:
            response = FakeResponse()
            response.park = (self.drained, self.release)
        else:
            session = self.sessions.popleft()
            if isinstance(session, BaseException):
                raise session
            response = FakeResponse(session)
        response.journal = self.journal
        self.responses.append(response)
        return response

    def _list(self, kwargs: dict[str, Any]) -> FakeResponse:
        self.list_calls.append(kwargs)
        token = kwargs.get("_continue")
        if token:  # "<version>:<offset>", as this fake hands it out
            self.journal.append(f"page {token}")
            if self.fail_continue is not None:
                error, self.fail_continue = self.fail_continue, None
                raise error
            version, offset = token.split(":")
        else:
            self.lists += 1
            self.journal.append(f"list {self.lists}")
            if self.list_script:
                self.listed = self.list_script.popleft()
            version, offset = str(self.lists), "0"
        start = int(offset)
        end = start + int(kwargs.get("limit") or len(self.listed) or 1)
        metadata = {"resourceVersion": version}
        if end < len(self.listed):
            metadata["continue"] = f"{version}:{end}"
        body = {"kind": "PodList", "metadata": metadata, "items": self.listed[start:end]}
        return FakeResponse(data=json.dumps(body).encode())


# -- an API server on a loopback port, for the write paths -----------------------------------------


@dataclass(frozen=True)
class Request:
    """One request as the stub API server received it (header names in lower case)."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    at: float


@dataclass(frozen=True)
class Answer:
    """What the stub answers: a status, extra headers, and the body's bytes."""

    status: int
    body: bytes = b"{}"
    headers: tuple[tuple[str, str], ...] = ()


def status_answer(code: int, reason: str, message: str, *headers: tuple[str, str]) -> Answer:
    return Answer(code, json.dumps(status(code, reason, message)).encode(), headers)


def json_answer(doc: object) -> Answer:
    """200 with ``doc`` as its JSON body (a pod read, a list)."""
    return Answer(200, json.dumps(doc).encode())


def pod_list(*pods: dict[str, Any], version: str = "1") -> Answer:
    """A list's answer (one page): ``pods`` at ``resourceVersion`` ``version``."""
    return json_answer({"kind": "PodList", "metadata": {"resourceVersion": version}, "items": pods})


def watch_answer(*events: bytes) -> Answer:
    """A watch's answer: the event lines, then the end of the stream (the server's timeout)."""
    return Answer(200, b"".join(events))


#: An answer made when its request comes, from the requests so far (that request last).
Answering = Callable[[Sequence[Request]], Answer]


def stored(requests: Sequence[Request], name: str, uid: str) -> dict[str, Any] | None:
    """The pod the last create of ``name`` in ``requests`` (a ``POST``) sent, as the API server
    stores it: the manifest sent, create id and all, with ``uid``; None when none was sent."""
    for request in reversed(requests):
        if request.method != "POST" or not request.path.endswith("/pods"):
            continue
        sent = json.loads(request.body)
        if sent["metadata"]["name"] == name:
            metadata = pod(name, uid=uid)["metadata"]
            metadata.update(sent["metadata"], uid=uid)
            return {**sent, "metadata": metadata, "status": {"phase": "Pending"}}
    return None


def as_created(uid: str) -> Answering:
    """A read (``GET .../pods/<name>``) answered with the pod the last create of that name
    sent, as the API server stored it with ``uid`` (see :func:`stored`); 404 when no create
    of that name came."""

    def answer(requests: Sequence[Request]) -> Answer:
        name = requests[-1].path.split("?", maxsplit=1)[0].rsplit("/", maxsplit=1)[-1]
        manifest = stored(requests[:-1], name, uid)
        if manifest is None:
            return status_answer(404, "NotFound", f'pods "{name}" not found')
        return json_answer(manifest)

    return answer


class FakeApiServer:
    """A real HTTP server on 127.0.0.1 that the real client library talks to.

    Each request takes the next scripted :class:`Answer` for its method and path (``"POST
    /api/v1/namespaces/slurm/pods"``) or, once those run out, ``default`` (201 ``{}``); a
    scripted :data:`Answering` makes its answer when the request comes.
    ``hold`` (when set) keeps every answer waiting until it is released: a slow API server.
    """

    def __init__(self) -> None:
        self.requests: list[Request] = []
        self.script: dict[str, deque[Answer | Answering]] = {}
        self.default = Answer(201)
        self.hold: threading.Event | None = None
        self._lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                headers = {k.lower(): v for k, v in self.headers.items()}
                answer = fake._next(self.command, self.path, headers, body)
                self.send_response(answer.status)
                for name, value in answer.headers:
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer.body)))
                self.end_headers()
                self.wfile.write(answer.body)

            def do_GET(self) -> None:
                self._answer()

            def do_POST(self) -> None:
                self._answer()

            def do_DELETE(self) -> None:
                self._answer()

            def do_PATCH(self) -> None:
                self._answer()

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        # serve_forever's default 0.5 s poll is how long shutdown() waits: ~13 s over the suite.
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": SHUTDOWN_POLL_S},
            daemon=True,
        )
        self._thread.start()

    def _next(self, method: str, path: str, headers: dict[str, str], body: bytes) -> Answer:
        with self._lock:
            self.requests.append(Request(method, path, headers, body, time.monotonic()))
            queued = self.script.get(f"{method} {path.split('?', maxsplit=1)[0]}")
            scripted = queued.popleft() if queued else self.default
            answer = scripted if isinstance(scripted, Answer) else scripted(list(self.requests))
        if self.hold is not None:
            self.hold.wait(10)
        return answer

    def answer(self, method_and_path: str, *answers: Answer | Answering) -> None:
        """Script the next answers to ``method_and_path`` (``"POST /api/v1/..."``)."""
        self.script.setdefault(method_and_path, deque()).extend(answers)

    def core_api(self) -> k8s.CoreV1Api:
        """A real ``CoreV1Api`` with a bearer token, pointed at this server."""
        configuration = k8s.Configuration()
        configuration.host = f"http://127.0.0.1:{self._server.server_address[1]}"
        configuration.api_key = {"BearerToken": "t0ken"}
        configuration.api_key_prefix = {"BearerToken": "Bearer"}
        return k8s.CoreV1Api(k8s.ApiClient(configuration))

    def close(self) -> None:
        if self.hold is not None:
            self.hold.set()
        self._server.shutdown()
        self._server.server_close()


def gateway_to(server: FakeApiServer, *, concurrency: int = CONCURRENCY) -> PodGateway:
    """The real ``PodGateway`` (cluster ``lab``, namespace ``slurm``) talking HTTP to ``server``."""
    return PodGateway(
        server.core_api(), namespace="slurm", cluster_name="lab", concurrency=concurrency
    )
