"""An in-memory stand-in for the one ``CoreV1Api`` call the pod watch makes.

``PodGateway`` takes its API object in the constructor, so ``FakeCoreApi`` goes there: the real
adapter code parses the stream and translates the errors, with nothing patched. Each watch
request plays the next scripted session, as the client library would hand it over:

- an exception: the request itself fails (``ApiException`` for an HTTP status);
- a list of items: the response body's chunks (``bytes``), or an exception raised mid-stream
  (``urllib3.exceptions.ProtocolError`` for a dropped connection, or a client bug).

When the script runs out the next watch is quiet: it sets ``drained`` and blocks until
``release`` is set, then ends like a watch the server closed at its timeout.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Iterator, Sequence
from typing import Any

Session = BaseException | Sequence[bytes | BaseException]


def line(event: object) -> bytes:
    """One watch event as the API server writes it: JSON and a newline."""
    return json.dumps(event).encode() + b"\n"


def pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "slurm",
            "uid": f"uid-{name}",
            "resourceVersion": "100",
            "creationTimestamp": "2026-12-02T12:00:00Z",
        },
        "status": {"phase": "Pending"},
    }


def event(kind: str, name: str) -> bytes:
    return line({"type": kind, "object": pod(name)})


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
        return f"{doc['type']} {doc['object']['metadata']['name']}"
    except (ValueError, KeyError, TypeError):
        return f"{len(chunk)} bytes"


class FakeCoreApi:
    """``list_namespaced_pod``: a list answers ``resourceVersion`` 1, 2, 3 ... in turn;
    a watch plays the next session of the script."""

    def __init__(self, sessions: Sequence[Session] = (), journal: list[str] | None = None) -> None:
        self.sessions: deque[Session] = deque(sessions)
        self.journal = journal if journal is not None else []
        self.watch_calls: list[dict[str, Any]] = []
        self.responses: list[FakeResponse] = []
        self.lists = 0
        self.drained = threading.Event()
        self.release = threading.Event()

    def list_namespaced_pod(self, namespace: str, **kwargs: Any) -> FakeResponse:
        assert namespace == "slurm"
        assert kwargs["_preload_content"] is False
        if not kwargs.get("watch"):
            self.lists += 1
            self.journal.append(f"list {self.lists}")
            body = {"kind": "PodList", "metadata": {"resourceVersion": str(self.lists)}}
            return FakeResponse(data=json.dumps({**body, "items": []}).encode())
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
