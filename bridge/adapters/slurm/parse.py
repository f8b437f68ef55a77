"""Parse Slurm's JSON CLI output into domain values. Pure: no subprocess, no I/O.

Two shapes are understood, both recorded from real daemons under ``tests/data/slurm/``:

* Slurm 22.05 ``sinfo --json`` (openapi v0.0.38): ``nodes[].state`` is a lower-case string
  (``"idle"``), the flags are in ``nodes[].state_flags``.
* Slurm 24.11 and 26.05 ``scontrol show nodes --json`` (``meta.plugin.data_parser`` v0.0.42 and
  v0.0.45): ``nodes[].state`` is one list, base state first, then the flags (``["IDLE", "CLOUD",
  "POWERED_DOWN"]``). The fields read here are the same in both; 26.05 adds ``cert_flags``,
  ``suspend_time``, ``tls_cert_last_renewal`` and ``topology`` to a node and drops
  ``external_sensors``, ``power`` and ``tres_weighted``, none of which we read.

Slurm >= 23.02's ``sinfo --json`` is a different document (``sinfo[]`` grouped by partition and
state, without per-node reasons); it is rejected with a message pointing at ``scontrol show nodes
--json``.

Slurm reports some failures *inside* the document with exit status 0: 22.05 ``sinfo --json`` with
slurmctld unreachable prints ``"errors": [{"error": "Unspecified error", "errno": -1}]`` and no
nodes. :func:`reported_errors` exposes them so the caller can decide how to classify them; the
parsers refuse such a document rather than return an empty, misleading node list.

Listings are big (about 2.4 kB per node in 24.11, 24 MB at 10,000 nodes, 60 values a node of
which the parsers read seven). :func:`load_node_listing` therefore reduces each node to the fields
the parsers read as soon as it is decoded (the rest never accumulates), and the cyclic garbage
collector is paused meanwhile: every dict decoded would otherwise count towards collections that
walk the whole, still growing, document again and again. The caller may hold the pause
(:data:`collector_paused`) until the document is freed, so that no collection walks it at all.
(orjson was measured too: no faster here, and its peak memory is the stdlib's plus a copy of the
whole document in its own tree, since it takes no hook.)
"""

from __future__ import annotations

import gc
import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any, Final, NotRequired, TypedDict, TypeGuard

from bridge.domain.job_failure import SlurmJob
from bridge.domain.nodes import SlurmNode
from bridge.errors import BackendError

# --- Raw JSON, as Slurm prints it (only the fields we read) -----------------------------------


class SlurmErrorV0038(TypedDict, total=False):
    """One entry of ``errors``; 22.05 and 24.11 fill different subsets."""

    error: str
    errno: int
    error_number: int
    description: str
    source: str


class NodeV0038(TypedDict):
    """A node in Slurm 22.05 ``sinfo --json``."""

    name: str
    state: str
    state_flags: list[str]
    reason: str
    address: str
    comment: str
    partitions: NotRequired[list[str]]


class SinfoV0038(TypedDict):
    """Slurm 22.05 ``sinfo --json``."""

    meta: dict[str, Any]
    errors: list[SlurmErrorV0038]
    nodes: list[NodeV0038]


class NodeV0042(TypedDict):
    """A node in Slurm 24.11 (v0.0.42) and 26.05 (v0.0.45) ``scontrol show nodes --json``."""

    name: str
    state: list[str]
    reason: str
    address: str
    comment: str
    partitions: NotRequired[list[str]]


class ScontrolNodesV0042(TypedDict):
    """Slurm 24.11 and 26.05 ``scontrol show nodes --json``."""

    meta: dict[str, Any]
    errors: list[SlurmErrorV0038]
    warnings: list[dict[str, Any]]
    nodes: list[NodeV0042]


# --- Public functions ---------------------------------------------------------------------------


def load_document(output: bytes | str, what: str) -> dict[str, Any]:
    """Decode Slurm's JSON output (the command's bytes, or text); ``what`` names the command for
    the error message."""
    return _decode(output, what, None)


def load_node_listing(output: bytes | str, what: str) -> dict[str, Any]:
    """:func:`load_document` for ``sinfo --json`` or ``scontrol show nodes --json``, each node
    reduced to the fields the parsers read (:data:`NODE_FIELDS`) as it is decoded.

    A node is an object with a ``name`` and a ``state``; no other object of these documents has
    both (the parsers of a reduced and of a whole document give the same nodes and errors).
    """
    return _decode(output, what, _node_fields_only)


#: What the node parsers read of a node (both series); the rest of its 60 or so values is dropped.
NODE_FIELDS: Final = (
    "name",
    "state",
    "state_flags",
    "reason",
    "reason_changed_at",
    "address",
    "comment",
)


def _node_fields_only(obj: dict[str, Any]) -> dict[str, Any]:
    if "state" in obj and "name" in obj:
        return {key: obj[key] for key in NODE_FIELDS if key in obj}
    return obj


def _decode(
    output: bytes | str, what: str, object_hook: Callable[[dict[str, Any]], Any] | None
) -> dict[str, Any]:
    try:
        with collector_paused():
            doc = json.loads(output, object_hook=object_hook)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise BackendError(f"{what}: output is not JSON ({e}): {_short(output)!r}") from e
    if not isinstance(doc, dict):
        raise BackendError(f"{what}: expected a JSON object, got {type(doc).__name__}")
    return doc


def reported_errors(doc: dict[str, Any]) -> list[str]:
    """Error messages Slurm put inside the document (empty when there are none)."""
    errors = doc.get("errors", [])
    if not isinstance(errors, list):
        raise BackendError(f"'errors' should be a list, got {type(errors).__name__}")
    messages = []
    for entry in errors:
        if isinstance(entry, dict):
            parts = [
                str(entry[key])
                for key in ("source", "description", "error")
                if entry.get(key) not in (None, "")
            ]
            code = entry.get("error_number", entry.get("errno"))
            text = ": ".join(parts) or "error"
            messages.append(f"{text} (errno {code})" if code is not None else text)
        else:
            messages.append(str(entry))
    return messages


def parse_nodes(doc: dict[str, Any], what: str = "slurm json") -> list[SlurmNode]:
    """Parse either supported node document, chosen by its shape (see the module docstring)."""
    _refuse_reported_errors(doc, what)
    if "sinfo" in doc and "nodes" not in doc:
        raise BackendError(
            f"{what}: this is Slurm >= 23.02 'sinfo --json' (grouped, no per-node reasons); "
            "use 'scontrol show nodes --json'"
        )
    nodes = _list(doc, "nodes", what)
    if nodes and isinstance(nodes[0], dict) and isinstance(nodes[0].get("state"), list):
        return parse_scontrol_nodes_v0042(doc, what)
    return parse_sinfo_v0038(doc, what)


def parse_sinfo_v0038(doc: dict[str, Any], what: str = "sinfo --json") -> list[SlurmNode]:
    """Parse Slurm 22.05 ``sinfo --json``; a node listed more than once is kept once."""
    _refuse_reported_errors(doc, what)
    with collector_paused():
        return list(_sinfo_v0038_nodes(_list(doc, "nodes", what), what).values())


def _sinfo_v0038_nodes(items: list[Any], what: str) -> dict[str, SlurmNode]:
    result: dict[str, SlurmNode] = {}
    for index, item in enumerate(items):
        raw = _node_v0038(item, f"{what}: nodes[{index}]")
        # Older sinfo prints a node once per partition; the entries are the same node record.
        result.setdefault(
            raw["name"],
            SlurmNode(
                name=raw["name"],
                state=raw["state"].upper(),
                flags=frozenset(flag.upper() for flag in raw["state_flags"]),
                reason=raw["reason"],
                address=raw["address"],
                comment=raw["comment"],
                reason_since=_epoch(item.get("reason_changed_at")) if raw["reason"] else None,
            ),
        )
    return result


def _epoch(value: object) -> datetime | None:
    """Seconds since the epoch (22.05) or ``{"set": bool, "number": s}`` (24.11); 0 is unset."""
    if isinstance(value, dict):
        value = value.get("number") if value.get("set") else None
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        return None
    return datetime.fromtimestamp(value, UTC)


def parse_scontrol_nodes_v0042(
    doc: dict[str, Any], what: str = "scontrol show nodes --json"
) -> list[SlurmNode]:
    """Parse Slurm 24.11 / 26.05 ``scontrol show nodes --json`` (``state`` is a list, base state
    first)."""
    _refuse_reported_errors(doc, what)
    with collector_paused():
        return list(_scontrol_v0042_nodes(_list(doc, "nodes", what), what).values())


def _scontrol_v0042_nodes(items: list[Any], what: str) -> dict[str, SlurmNode]:
    result: dict[str, SlurmNode] = {}
    for index, item in enumerate(items):
        raw = _node_v0042(item, f"{what}: nodes[{index}]")
        # data_parser writes the base state first, then every flag.
        base, *flags = raw["state"]
        result.setdefault(
            raw["name"],
            SlurmNode(
                name=raw["name"],
                state=base.upper(),
                flags=frozenset(flag.upper() for flag in flags),
                reason=raw["reason"],
                address=raw["address"],
                comment=raw["comment"],
                reason_since=_epoch(item.get("reason_changed_at")) if raw["reason"] else None,
            ),
        )
    return result


#: ``squeue --Format`` of :func:`parse_job_lines`: the job id, its state, its nodes, its
#: AdminComment, each unpadded (size 0) and ``|``-separated, the comment last (it may hold ``|``).
JOB_FORMAT: Final = "JobId:0|,State:0|,NodeList:0|,admin_comment:0"
#: What squeue prints (glibc's printf of a NULL string) for a field a job does not have.
_UNSET: Final = "(null)"


def parse_job_lines(text: str, what: str = "squeue") -> list[SlurmJob]:
    """Parse ``squeue --noheader --Format=`` :data:`JOB_FORMAT`: one job per line, the same in
    every series (22.05's ``--json`` ignores every filter and lists all jobs of the cluster,
    252 MiB at 10,000 large jobs; these lines carry four fields of only the jobs asked for).
    A line that does not start with a job id continues the previous job's AdminComment (an
    admin may have written a newline into it)."""
    jobs: list[SlurmJob] = []
    for number, line in enumerate(text.splitlines(), start=1):
        head, sep, rest = line.partition("|")
        if not (sep and head.isdigit()):
            if not jobs:
                raise BackendError(f"{what}: line {number} is not a job: {line[:80]!r}")
            last = jobs[-1]
            jobs[-1] = SlurmJob(
                last.job_id, last.states, last.nodes, f"{last.admin_comment}\n{line}"
            )
            continue
        fields = rest.split("|", 2)
        if len(fields) != 3 or not fields[0]:
            raise BackendError(f"{what}: line {number} (job {head}) has no state: {line[:80]!r}")
        state, nodes, comment = fields
        jobs.append(
            SlurmJob(
                job_id=int(head),
                states=frozenset({state.upper()}),
                nodes="" if nodes == _UNSET else nodes,
                admin_comment="" if comment == _UNSET else comment,
            )
        )
    return jobs


# --- Field access with errors that say what was missing -----------------------------------------


def _refuse_reported_errors(doc: dict[str, Any], what: str) -> None:
    errors = reported_errors(doc)
    if errors:
        raise BackendError(f"{what}: Slurm reported errors: {'; '.join(errors)}")


def _node_v0038(item: object, where: str) -> NodeV0038:
    if not isinstance(item, dict):
        raise BackendError(f"{where} is not an object")
    name = _str(item, "name", where)
    where = f"{where} ({name})"
    return NodeV0038(
        name=name,
        state=_str(item, "state", where),
        state_flags=_str_list(item, "state_flags", where),
        reason=_optional_str(item, "reason", where),
        address=_optional_str(item, "address", where),
        comment=_optional_str(item, "comment", where),
    )


def _node_v0042(item: object, where: str) -> NodeV0042:
    if not isinstance(item, dict):
        raise BackendError(f"{where} is not an object")
    name = _str(item, "name", where)
    where = f"{where} ({name})"
    state = _str_list(item, "state", where)
    if not state:
        raise BackendError(f"{where}: 'state' is an empty list")
    return NodeV0042(
        name=name,
        state=state,
        reason=_optional_str(item, "reason", where),
        address=_optional_str(item, "address", where),
        comment=_optional_str(item, "comment", where),
    )


def _list(doc: dict[str, Any], key: str, what: str) -> list[Any]:
    if key not in doc:
        raise BackendError(f"{what}: no '{key}' in the document")
    value = doc[key]
    if not isinstance(value, list):
        raise BackendError(f"{what}: '{key}' should be a list, got {type(value).__name__}")
    return value


def _str(raw: dict[str, Any], key: str, where: str) -> str:
    value = raw.get(key)
    if not isinstance(value, str) or not value:
        raise BackendError(f"{where}: '{key}' missing or not a non-empty string")
    return value


def _optional_str(raw: dict[str, Any], key: str, where: str) -> str:
    value = raw.get(key, "")
    if value is None:
        return ""
    if not isinstance(value, str):
        raise BackendError(f"{where}: '{key}' should be a string, got {type(value).__name__}")
    return value


def _is_str_list(value: object) -> TypeGuard[list[str]]:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def _str_list(raw: dict[str, Any], key: str, where: str) -> list[str]:
    value = raw.get(key)
    if not _is_str_list(value):
        raise BackendError(f"{where}: '{key}' missing or not a list of strings")
    return value


def _short(output: bytes | str, limit: int = 120) -> str:
    text = output.decode(errors="replace") if isinstance(output, bytes) else output
    return text if len(text) <= limit else text[:limit] + "..."


# --- The collector's pause ------------------------------------------------------------------------


class _CollectorPause:
    """Holds off the cyclic garbage collector (process-wide) while a large acyclic structure is
    built, and best until it is freed again: objects freed during the pause are taken off the
    collector's count, those still alive at its end make the next collection walk them all.
    Threads may parse at once: the collector runs again when the last overlapping pause ends,
    and only if it was running before the first one began."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._depth = 0
        self._was_enabled = False

    @contextmanager
    def __call__(self) -> Iterator[None]:
        with self._lock:
            if self._depth == 0:
                self._was_enabled = gc.isenabled()
                gc.disable()
            self._depth += 1
        try:
            yield
        finally:
            with self._lock:
                self._depth -= 1
                if self._depth == 0 and self._was_enabled:
                    gc.enable()


#: ``with collector_paused(): ...``
collector_paused = _CollectorPause()
