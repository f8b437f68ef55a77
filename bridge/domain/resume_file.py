"""``$SLURM_RESUME_FILE``: which jobs wait for which resumed node, read defensively.

slurmctld writes this JSON for ResumeProgram. Its shape changed across releases; all of these
are read (recorded from real daemons: ``tests/data/slurm/v*/resume-file-*.json``), and fields we
do not know are ignored, so a newer Slurm adding some does not break us::

    22.05  {"jobs": [{"job_id": 3, "nodes": "c[1-2]"}], "all_nodes": "c[1-2]"}
    24.11  {"jobs": [{"job_id": 4, "nodes_alloc": "c[1-2]", "nodes_resume": "c[1-2]",
                      "partition": "debug", "features": "big", "oversubscribe": "OK",
                      "extra": null, "reservation": null}], "all_nodes_resume": "c[1-2]"}
    26.05  as 24.11, plus "exclusive": "NO" | "NODE" | ... and "priority": 1

A job's nodes are its first non-null field of ``nodes_resume``, ``nodes``, ``nodes_alloc``: the
nodes it waits for to power up, where Slurm says so. Of the rest, :class:`ResumeJob` keeps what
could shape a pod (partition, features, whole node or not); ``priority`` is left out (the bridge
creates every pod of a call at once, so an order among jobs would change nothing), and so are
``oversubscribe`` (24.11 wrote "OK" for a shared and "NO" for an exclusive job, 26.05 "NO" for
both: not a reliable signal), ``extra`` and ``reservation``.

The file reaches the bridge through a hook and a gRPC field, so it is treated as hostile: its
size (:data:`MAX_SIZE`), JSON nesting (:data:`MAX_DEPTH`, checked before parsing, without
recursion), job count (:data:`MAX_JOBS`, counted before parsing too) and total node count
(:data:`MAX_NODES`) are bounded, and only
:class:`~bridge.errors.InvalidInput` (or its :class:`~bridge.errors.HostlistError`) escapes,
naming the field (``resume_file: jobs[3].job_id: ...``).
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from bridge.domain.hostlist import MAX_HOSTS, expand
from bridge.errors import HostlistError, InvalidInput

MAX_SIZE = 16 * 1024 * 1024  # characters
MAX_DEPTH = 64  # Slurm writes 3 levels; json.loads recurses and fails near 1000
MAX_NODES = MAX_HOSTS  # over all jobs together
#: Jobs in one file: ten times Slurm's default MaxJobCount. Jobs that list no node (or the same
#: few) escape MAX_NODES; 400,000 of them took 1.7 s and 42 MiB to parse.
MAX_JOBS = 100_000
MAX_JOB_ID = 2**32 - 1  # Slurm's job ids are uint32_t
NODE_FIELDS = ("nodes_resume", "nodes", "nodes_alloc")  # 24.11, 22.05, 24.11: first wins

# Each pattern is one C-speed pass; one regex for strings with escapes took 4 s on 16 MiB.
_ESCAPE = re.compile(r"\\.", re.DOTALL)  # a backslash outside a string is invalid JSON anyway
_STRING = re.compile(r'"[^"]*"')  # once escapes are gone, a string has no '"' inside
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")


@dataclass(frozen=True)
class ResumeJob:
    """One job of the resume file: the nodes it waits for, and what it asked of them.

    A field the series does not write is ``None`` (22.05 writes none of them, 24.11 no
    ``exclusive``); ``features`` is Slurm's constraint expression as written (``big&ssd``).
    """

    job_id: int
    nodes: tuple[str, ...]
    partition: str | None = None
    features: str | None = None
    exclusive: bool | None = None  # whole nodes (26.05: any "exclusive" but "NO")


def resume_jobs(contents: str, *, max_nodes: int = MAX_NODES) -> list[ResumeJob]:
    """The jobs of the resume file's text, in Slurm's order.

    Blank text gives ``[]`` (Slurm before 22.05 writes no file). Raises :class:`InvalidInput`
    naming the field that is wrong or too big; the file only feeds logs and Events, so callers
    keep resuming the hostlist.
    """
    jobs = []
    total = 0
    # A job array's tasks name the same few hostlists: each is expanded once (a 6 MiB file of
    # 50,000 tasks took 1.0 s expanding each, past the hooks' 2 s deadline on a busy host).
    expanded: dict[str, tuple[str, ...]] = {}
    for index, job in enumerate(_jobs(contents)):
        where = f"resume_file: jobs[{index}]"
        job_id, field, hostlist = _job(job, where)
        nodes = expanded.get(hostlist)
        if nodes is None:
            try:
                nodes = expanded[hostlist] = tuple(expand(hostlist, max_hosts=max_nodes))
            except HostlistError as e:
                raise HostlistError(f"{where}.{field}: {e}") from e
        total += len(nodes)
        if total > max_nodes:
            raise InvalidInput(f"{where}.{field}: the jobs list more than {max_nodes} nodes in all")
        exclusive = _optional_str(job, "exclusive")
        jobs.append(
            ResumeJob(
                job_id=job_id,
                nodes=nodes,
                partition=_optional_str(job, "partition"),
                features=_optional_str(job, "features"),
                exclusive=None if exclusive is None else exclusive.upper() != "NO",
            )
        )
    return jobs


def jobs_by_node(contents: str, *, max_nodes: int = MAX_NODES) -> dict[str, list[int]]:
    """Node → ids of the jobs that wait for it, from the resume file's text (see
    :func:`resume_jobs`, whose errors it raises). A node listed twice for one job carries that
    job once."""
    return job_ids_by_node(resume_jobs(contents, max_nodes=max_nodes))


def job_ids_by_node(jobs: Iterable[ResumeJob]) -> dict[str, list[int]]:
    """Node → ids of the jobs (of :func:`resume_jobs`) that wait for it, in their order."""
    by_node: dict[str, list[int]] = {}
    for job in jobs:
        for node in job.nodes:
            ids = by_node.setdefault(node, [])
            if not ids or ids[-1] != job.job_id:
                ids.append(job.job_id)
    return by_node


def _jobs(contents: str) -> list[Any]:
    """The ``jobs`` list of the file, after the checks that bound parsing it."""
    if len(contents) > MAX_SIZE:
        raise InvalidInput(
            f"resume_file: {len(contents)} characters, more than the limit of {MAX_SIZE}"
        )
    if not contents.strip():
        return []
    depth = json_depth(contents)
    if depth > MAX_DEPTH:
        raise InvalidInput(f"resume_file: JSON nested {depth} levels deep, more than {MAX_DEPTH}")
    # One C-speed count before json.loads builds an object per job (a bogus file that says
    # "job_id" inside strings is refused too: it is no file of Slurm's).
    count = contents.count('"job_id"')
    if count > MAX_JOBS:
        raise InvalidInput(f"resume_file: {count} jobs, more than the limit of {MAX_JOBS}")
    try:
        doc = json.loads(contents)
    except (ValueError, RecursionError) as e:
        # ValueError covers JSONDecodeError and numbers past Python's 4300-digit limit.
        # RecursionError cannot happen below MAX_DEPTH; kept so that nothing else escapes.
        raise InvalidInput(f"resume_file: not JSON: {e}") from e
    if not isinstance(doc, dict):
        raise InvalidInput(f"resume_file: must be a JSON object, got {_kind(doc)}")
    jobs = doc.get("jobs")
    if not isinstance(jobs, list):
        raise InvalidInput(f"resume_file: jobs: must be a list, got {_kind(jobs)}")
    if len(jobs) > MAX_JOBS:  # entries without a job_id (refused below anyway)
        raise InvalidInput(f"resume_file: {len(jobs)} jobs, more than the limit of {MAX_JOBS}")
    return jobs


def _job(job: Any, where: str) -> tuple[int, str, str]:
    """``(job_id, name of the nodes field, hostlist)`` of one entry of ``jobs``."""
    if not isinstance(job, dict):
        raise InvalidInput(f"{where}: must be an object, got {_kind(job)}")
    job_id = job.get("job_id")
    if isinstance(job_id, bool) or not isinstance(job_id, int) or not 0 < job_id <= MAX_JOB_ID:
        raise InvalidInput(
            f"{where}.job_id: must be a job id (1 to {MAX_JOB_ID}), got {_kind(job_id)}"
        )
    for field in NODE_FIELDS:
        value = job.get(field)
        if value is None:
            continue
        if not isinstance(value, str):
            raise InvalidInput(f"{where}.{field}: must be a hostlist string, got {_kind(value)}")
        return job_id, field, value
    return job_id, NODE_FIELDS[0], ""  # no nodes field: the job names no node we resume


def _optional_str(job: dict[str, Any], field: str) -> str | None:
    """A descriptive string field; left out, ``null`` or of another type it is absent. Not an
    error: a later series changing its type must not cost the job ids and nodes around it."""
    value = job.get(field)
    return value if isinstance(value, str) else None


def json_depth(text: str) -> int:
    """Deepest nesting of ``[`` and ``{`` outside JSON strings, counted without recursion.

    Exact for valid JSON, and for any text up to where a JSON parser would stop on an error;
    so refusing beyond a depth here keeps the parser from recursing beyond it.
    """
    outside = _STRING.sub("", _ESCAPE.sub("", text) if "\\" in text else text)
    brackets = _NOT_BRACKET.sub("", outside)
    steps = (1 if bracket in "[{" else -1 for bracket in brackets)
    return max(itertools.accumulate(steps, initial=0))


def _kind(value: Any) -> str:
    """A JSON value for an error message: short, and never its whole text."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int) and value.bit_length() > 64:
        return f"an integer of {value.bit_length()} bits"
    if isinstance(value, dict | list):
        return "an object" if isinstance(value, dict) else "a list"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
