"""Parsing of Slurm JSON recorded from real 22.05, 24.11 and 26.05 daemons
(tests/data/slurm/README.md)."""

from __future__ import annotations

import gc
import json
from pathlib import Path
from typing import Any

import pytest

from bridge.adapters.slurm import parse as slurm_json
from bridge.domain.job_failure import SlurmJob
from bridge.domain.nodes import SlurmNode
from bridge.errors import BackendError

DATA = Path(__file__).resolve().parents[1] / "data" / "slurm"

STATES_FILES = (
    "v22.05/sinfo-states.json",
    "v24.11/scontrol-states.json",
    "v26.05/scontrol-states.json",
)
AFTER_FILES = (
    "v22.05/sinfo-after-transitions.json",
    "v24.11/scontrol-after-transitions.json",
    "v26.05/scontrol-after-transitions.json",
)
DOWN_PU_FILES = (
    "v22.05/sinfo-down-on-powering-up.json",
    "v24.11/scontrol-down-on-powering-up.json",
    "v26.05/scontrol-down-on-powering-up.json",
)
ALL_NODE_FILES = STATES_FILES + AFTER_FILES + DOWN_PU_FILES

K8S_PULL = "k8s: ImagePullBackOff: Back-off pulling image localhost/slurmd:dev"
K8S_EVICT = "k8s: Evicted: node drained by kubectl"
HAND = "ResumeTimeout reached (set by hand)"
#: A job's state words in 24.11/26.05 while its nodes power up, and once it runs.
STARTING = frozenset({"RUNNING", "CONFIGURING", "POWER_UP_NODE"})
RUNNING = frozenset({"RUNNING"})

# (node, state, flags besides CLOUD, reason, address, what `sinfo -N` printed for it)
STATES = [
    ("cloud1", "IDLE", {"POWERED_DOWN"}, "", "cloud1", "idle~"),
    ("cloud2", "ALLOCATED", {"NOT_RESPONDING", "POWERING_UP"}, "", "cloud2", "alloc#"),
    ("cloud3", "ALLOCATED", set(), "", "127.0.0.1", "alloc"),
    ("cloud4", "IDLE", set(), "", "127.0.0.1", "idle"),
    ("cloud5", "IDLE", {"POWERING_DOWN"}, "", "127.0.0.1", "idle%"),
    ("cloud6", "DOWN", {"POWERED_DOWN"}, HAND, "cloud6", "down~"),
    ("cloud7", "IDLE", {"DRAIN", "POWERED_DOWN"}, "maintenance: disk check", "cloud7", "drain~"),
    ("cloud8", "DOWN", {"POWERED_DOWN"}, K8S_PULL, "cloud8", "down~"),
]

# After: down on alloc#, then power_down_force (cloud2); resume on down~ (cloud6);
# power_down_force on alloc# (cloud1); power_down on alloc (cloud3); drain on idle (cloud4).
AFTER_COMMON = [
    ("cloud1", "IDLE", {"POWERED_DOWN"}, "", "cloud1", "idle~"),
    # The reason of the earlier DOWN outlives it: an idle~ node can carry a stale reason.
    ("cloud2", "IDLE", {"POWERED_DOWN"}, "test down on powering up", "cloud2", "idle~"),
    ("cloud4", "IDLE", {"DRAIN"}, K8S_EVICT, "127.0.0.1", "drain"),
    ("cloud5", "IDLE", {"POWERED_DOWN"}, "", "cloud5", "idle~"),
    ("cloud7", "IDLE", {"DRAIN", "POWERED_DOWN"}, "maintenance: disk check", "cloud7", "drain~"),
    ("cloud8", "DOWN", {"POWERED_DOWN"}, K8S_PULL, "cloud8", "down~"),
]
# state=resume on down~ gives idle~; 22.05 clears the reason, 24.11 keeps it, 26.05 clears it
# again and no longer marks the powered-down node NOT_RESPONDING.
AFTER_RESUMED = {
    "v22.05": ("cloud6", "IDLE", {"NOT_RESPONDING", "POWERED_DOWN"}, "", "cloud6", "idle~"),
    "v24.11": ("cloud6", "IDLE", {"NOT_RESPONDING", "POWERED_DOWN"}, HAND, "cloud6", "idle~"),
    "v26.05": ("cloud6", "IDLE", {"POWERED_DOWN"}, "", "cloud6", "idle~"),
}
# state=power_down on a node running a job: queued power down, sinfo shows "alloc!".
POWER_DOWN_QUEUED = ("cloud3", "ALLOCATED", {"POWER_DOWN"}, "", "127.0.0.1", "alloc!")

DOWN_ON_POWERING_UP = (
    "cloud2",
    "DOWN",
    {"NOT_RESPONDING", "POWERING_UP"},
    "test down on powering up",
    "cloud2",
    "down#",
)


def _load(name: str) -> dict[str, Any]:
    doc = json.loads((DATA / name).read_text())
    assert isinstance(doc, dict)
    return doc


def _nodes(name: str) -> dict[str, SlurmNode]:
    nodes = slurm_json.parse_nodes(_load(name), name)
    assert len(nodes) == len({n.name for n in nodes})
    return {n.name: n for n in nodes}


def _cases() -> list[Any]:
    cases = [(f, row) for f in STATES_FILES for row in STATES]
    for f in AFTER_FILES:
        cases += [(f, row) for row in AFTER_COMMON]
        cases.append((f, AFTER_RESUMED[f.split("/")[0]]))
        cases.append((f, POWER_DOWN_QUEUED))
    cases += [(f, DOWN_ON_POWERING_UP) for f in DOWN_PU_FILES]
    return [pytest.param(f, row, id=f"{f}:{row[0]}:{row[5]}") for f, row in cases]


@pytest.mark.parametrize(("file", "row"), _cases())
def test_recorded_node_states(file: str, row: tuple[Any, ...]) -> None:
    name, state, flags, reason, address, _sinfo = row
    node = _nodes(file)[name]
    assert node.state == state
    assert node.flags == frozenset({"CLOUD", *flags})
    assert node.reason == reason
    assert node.address == address


@pytest.mark.parametrize(
    ("file", "row"),
    [
        pytest.param(
            f,
            row,
            id=f"{f}:{row[0]}:{row[5]}",
        )
        for f, row in [(f, row) for f in STATES_FILES for row in STATES]
        + [(f, row) for f in AFTER_FILES for row in [*AFTER_COMMON, POWER_DOWN_QUEUED]]
        + [(f, DOWN_ON_POWERING_UP) for f in DOWN_PU_FILES]
    ],
)
def test_display_state_matches_sinfo(file: str, row: tuple[Any, ...]) -> None:
    assert _nodes(file)[row[0]].display_state == row[5]


@pytest.mark.parametrize("file", ALL_NODE_FILES)
def test_our_reason_is_recognised(file: str) -> None:
    ours = {n.name for n in _nodes(file).values() if n.has_our_reason}
    expected = {"cloud8"} | ({"cloud4"} if file in AFTER_FILES else set())
    assert ours == expected


def test_sinfo_lists_a_node_once_per_partition_is_deduplicated() -> None:
    doc = _load("v22.05/sinfo-states.json")
    doc["nodes"] = [*doc["nodes"], *doc["nodes"][:3]]
    nodes = slurm_json.parse_sinfo_v0038(doc)
    assert [n.name for n in nodes] == [f"cloud{i}" for i in range(1, 9)]


def test_unreachable_slurmctld_inside_document_is_an_error() -> None:
    # 22.05 sinfo --json exits 0 with this document when slurmctld is down.
    doc = _load("v22.05/sinfo-unreachable.json")
    assert slurm_json.reported_errors(doc) == ["Unspecified error (errno -1)"]
    with pytest.raises(BackendError, match="Unspecified error"):
        slurm_json.parse_nodes(doc)


@pytest.mark.parametrize("series", ["v24.11", "v26.05"])
def test_sinfo_of_newer_series_is_refused_with_a_pointer(series: str) -> None:
    with pytest.raises(BackendError, match="scontrol show nodes --json"):
        slurm_json.parse_nodes(_load(f"{series}/sinfo-states.json"))


@pytest.mark.parametrize(
    ("file", "data_parser", "release"),
    [
        ("v24.11/scontrol-states.json", "data_parser/v0.0.42", "24.11.5"),
        ("v24.11/squeue-states.json", "data_parser/v0.0.42", "24.11.5"),
        ("v26.05/scontrol-states.json", "data_parser/v0.0.45", "26.05.5"),
        ("v26.05/squeue-states.json", "data_parser/v0.0.45", "26.05.5"),
    ],
)
def test_recorded_series_and_data_parser(file: str, data_parser: str, release: str) -> None:
    # Which document each series printed: the parser above reads both data_parser versions.
    meta = _load(file)["meta"]
    assert (meta["plugin"]["data_parser"], meta["slurm"]["release"]) == (data_parser, release)


def _v38(**node: Any) -> dict[str, Any]:
    base = {"name": "n1", "state": "idle", "state_flags": [], "reason": "", "address": "n1"}
    return {"errors": [], "nodes": [{**base, **node}]}


def _v42(**node: Any) -> dict[str, Any]:
    base = {"name": "n1", "state": ["IDLE"], "reason": "", "address": "n1"}
    return {"errors": [], "nodes": [{**base, **node}]}


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"errors": []}, "no 'nodes'"),
        ({"nodes": {}}, "'nodes' should be a list"),
        ({"nodes": ["n1"]}, r"nodes\[0\] is not an object"),
        (_v38(name=""), "'name' missing"),
        (_v38(state=None), r"\(n1\): 'state' missing"),
        (_v38(state_flags="CLOUD"), "'state_flags' missing or not a list"),
        (_v38(reason=3), "'reason' should be a string"),
        (_v42(state=[]), "'state' is an empty list"),
        (_v42(state=["IDLE", 5]), "'state' missing or not a list"),
        ({"errors": "boom", "nodes": []}, "'errors' should be a list"),
        (
            {"errors": [{"error": "Invalid", "error_number": 9000, "source": "x"}], "nodes": []},
            r"x: Invalid \(errno 9000\)",
        ),
    ],
)
def test_malformed_node_documents(doc: dict[str, Any], message: str) -> None:
    with pytest.raises(BackendError, match=message):
        slurm_json.parse_nodes(doc)


def test_missing_reason_and_address_are_empty() -> None:
    doc = {"nodes": [{"name": "n1", "state": ["DOWN", "CLOUD"]}]}
    assert slurm_json.parse_nodes(doc) == [
        SlurmNode(name="n1", state="DOWN", flags=frozenset({"CLOUD"}))
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "not JSON"),
        ("slurm_load_node error", "not JSON"),
        ("[]", "expected a JSON object"),
        (b"slurm_load_node error", "not JSON"),
        (b'{"nodes": "\xff"}', "not JSON"),
    ],
)
def test_load_document_rejects_non_objects(text: str | bytes, message: str) -> None:
    with pytest.raises(BackendError, match=message):
        slurm_json.load_document(text, "sinfo --json")


@pytest.mark.parametrize("file", AFTER_FILES)
def test_queued_power_down_still_needs_its_slurmd(file: str) -> None:
    # `state=power_down` on a busy node: Slurm waits for the job, so the pod must stay.
    node = _nodes(file)["cloud3"]
    assert node.flags == {"CLOUD", "POWER_DOWN"}
    assert node.wants_pod


@pytest.mark.parametrize("collector_was_enabled", [True, False])
def test_parsing_bytes_gives_what_text_gives_and_leaves_the_collector_as_it_was(
    collector_was_enabled: bool,
) -> None:
    path = DATA / "v24.11" / "scontrol-states.json"
    was = gc.isenabled()
    try:
        gc.enable() if collector_was_enabled else gc.disable()
        from_bytes = slurm_json.parse_nodes(slurm_json.load_document(path.read_bytes(), "x"))
        from_text = slurm_json.parse_nodes(slurm_json.load_document(path.read_text(), "x"))
        assert gc.isenabled() is collector_was_enabled
    finally:
        gc.enable() if was else gc.disable()
    assert from_bytes == from_text
    assert len(from_bytes) == 8


def _outcome(load: Any, path: Path) -> object:
    try:
        return slurm_json.parse_nodes(load(path), path.name)
    except BackendError as e:
        return f"{type(e).__name__}: {e}"


@pytest.mark.parametrize(
    "path",
    sorted(p for p in DATA.glob("v*/*.json") if "squeue" not in p.name),
    ids=lambda p: f"{p.parent.name}/{p.name}",
)
def test_a_listing_reduced_while_decoded_parses_like_the_whole_document(path: Path) -> None:
    whole = _outcome(lambda p: json.loads(p.read_text()), path)
    reduced = _outcome(lambda p: slurm_json.load_node_listing(p.read_bytes(), p.name), path)
    assert reduced == whole
    doc = slurm_json.load_node_listing(path.read_bytes(), path.name)
    for node in doc.get("nodes", []):
        assert set(node) <= set(slurm_json.NODE_FIELDS)


# --- squeue --noheader --Format (the jobs on failing nodes) -------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # As every series prints JOB_FORMAT (22.05, 24.11, 26.05: the same four fields).
        (
            "4|CONFIGURING|cloud[1-2]|(null)\n2|RUNNING|cloud3|ticket 42: keep this node\n",
            [
                SlurmJob(4, frozenset({"CONFIGURING"}), "cloud[1-2]"),
                SlurmJob(2, RUNNING, "cloud3", "ticket 42: keep this node"),
            ],
        ),
        ("", []),
        ("7|running|cloud1|a|b|c\n", [SlurmJob(7, RUNNING, "cloud1", "a|b|c")]),
        (
            "7|RUNNING|cloud1|line one\nline two\n",
            [SlurmJob(7, RUNNING, "cloud1", "line one\nline two")],
        ),
        ("8|COMPLETING|(null)|\n", [SlurmJob(8, frozenset({"COMPLETING"}), "", "")]),
    ],
    ids=["two-jobs", "none", "bars-in-the-comment", "newline-in-the-comment", "unset-fields"],
)
def test_job_lines(text: str, expected: list[SlurmJob]) -> None:
    assert slurm_json.parse_job_lines(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("slurm_load_jobs error: nonsense\n", "line 1 is not a job"),
        ("7|\n", r"line 1 \(job 7\) has no state"),
        ("7|RUNNING\n", r"line 1 \(job 7\) has no state"),
    ],
)
def test_malformed_job_lines(text: str, message: str) -> None:
    with pytest.raises(BackendError, match=message):
        slurm_json.parse_job_lines(text)
