"""Property tests over everything that reads outside input: only our own errors may escape.

``SKB_FUZZ_EXAMPLES`` sets the examples per test (default 300, so ``make test`` stays fast); the
chaos run raises it so that the whole file checks 100,000 cases or more.
"""

from __future__ import annotations

import contextlib
import json
import os
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bridge.config import config_from_dict, parse_config
from bridge.domain.gangs import job_gangs
from bridge.domain.hostlist import compress, expand
from bridge.domain.node_names import check_node_name
from bridge.domain.resume_file import jobs_by_node, resume_jobs
from bridge.errors import BridgeError, HostlistError

EXAMPLES = int(os.environ.get("SKB_FUZZ_EXAMPLES", "300"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# Text biased towards what the parsers care about, plus anything at all.
HOSTLIST_ALPHABET = st.sampled_from([*"ab-09[],  \t+x\ud800\udc80{}=", "0" * 25])
hostlists = st.one_of(st.text(), st.lists(HOSTLIST_ALPHABET, max_size=40).map("".join))
names = st.one_of(
    st.text(max_size=30),
    st.builds(
        lambda prefix, number, width: f"{prefix}{number:0{width}d}",
        st.sampled_from(["n", "gpu-", "rack1-node", "a", "x.y", ""]),
        st.integers(min_value=0, max_value=2**64 + 5),
        st.integers(min_value=0, max_value=24),
    ),
)


@FUZZ
@given(hostlists)
def test_expand_raises_only_hostlist_errors(expression: str) -> None:
    with contextlib.suppress(HostlistError):
        expand(expression)


@FUZZ
@given(st.lists(names, max_size=30))
def test_compress_round_trips_or_refuses(given_names: list[str]) -> None:
    try:
        compressed = compress(given_names)
    except HostlistError:
        return
    expanded = expand(compressed)
    # compress() deduplicates and sorts as Slurm sorts: the same set, each name once.
    assert sorted(expanded) == sorted(set(given_names))
    assert len(expanded) == len(set(given_names))
    assert compress(expanded) == compressed


@FUZZ
@given(names)
def test_check_node_name_raises_only_our_errors(name: str) -> None:
    try:
        check_node_name(name)
    except BridgeError:
        return
    # An accepted name is one plain host that reads back as itself.
    assert expand(name) == [name]
    assert compress([name]) == name


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=20,
)
jobs = st.fixed_dictionaries(
    {},
    optional={
        "job_id": st.one_of(st.integers(), json_values),
        "nodes": st.one_of(hostlists, json_values),
        "nodes_resume": st.one_of(hostlists, json_values),
        "nodes_alloc": st.one_of(hostlists, json_values),
        "partition": json_values,
    },
)
resume_docs = st.one_of(
    json_values,
    st.fixed_dictionaries({"jobs": st.lists(jobs, max_size=4)}, optional={"x": json_values}),
)


@FUZZ
@given(st.one_of(resume_docs.map(json.dumps), st.text()))
def test_resume_file_raises_only_our_errors(contents: str) -> None:
    with contextlib.suppress(BridgeError):
        jobs_by_node(contents)


@FUZZ
@given(resume_docs.map(json.dumps), st.sampled_from([1, 2, 3]))
def test_gangs_claim_each_node_once_in_its_own_pool(contents: str, pools: int) -> None:
    try:
        jobs = resume_jobs(contents)
    except BridgeError:
        return
    # Some of the file's nodes, spread over a few pools: the call resumes those.
    names = sorted({n for job in jobs for n in job.nodes})
    pool_of = {n: f"p{i % pools}" for i, n in enumerate(names) if i % 4 != 3}
    gangs = job_gangs(jobs, pool_of, "3f2a1c")
    members = [n for g in gangs for n in g.nodes]
    assert len(members) == len(set(members))
    assert len({g.name for g in gangs}) == len(gangs)
    for g in gangs:
        assert len(g.nodes) >= 2
        assert all(pool_of[n] == g.pool for n in g.nodes)


SECTIONS = ["kubernetes", "slurm", "bridge"]
KEYS = [
    "namespace",
    "kubeconfig",
    "node_service",
    "cluster_domain",
    "conf_server",
    "command_timeout_s",
    "socket_mode",
    "reconcile_interval_s",
    "failed_node_hold_s",
    "create_concurrency",
    "tcp_listen",
    "tls_cert",
    "log_format",
    "allowed_callers",
    "gang_scheduling",
]
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),
    st.text(max_size=20),
    st.sampled_from(["10.0.0.1:6817", "/abs", "0660", "cpu-[0-3]", "x", "json"]),
)
values: Any = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3)
    ),
    max_leaves=10,
)
pools = st.lists(
    st.fixed_dictionaries(
        {"name": st.sampled_from(["cpu", "gpu", "Bad"]), "nodes": hostlists},
        optional={
            "cpus": st.one_of(st.integers(), values),
            "real_memory_mb": st.one_of(st.integers(), values),
            "image": values,
            "partition": values,
            "features": values,
            "gres": values,
            "weight": values,
            "schedule_timeout_s": values,
            "image_pull_timeout_s": values,
            "pod_template": values,
        },
    ),
    max_size=3,
)
configs = st.fixed_dictionaries(
    {},
    optional={
        "cluster_name": values,
        "pools": st.one_of(pools, values),
        **{
            section: st.one_of(st.dictionaries(st.sampled_from(KEYS), values, max_size=4), values)
            for section in SECTIONS
        },
    },
)
environments = st.dictionaries(
    st.sampled_from(
        [
            "SKB_BRIDGE_RECONCILE_INTERVAL_S",
            "SKB_BRIDGE_CREATE_CONCURRENCY",
            "SKB_BRIDGE_SOCKET_MODE",
            "SKB_SLURM_COMMAND_TIMEOUT_S",
            "SKB_KUBERNETES_NAMESPACE",
            "SKB_BRIDGE_TYPO",
        ]
    ),
    st.text(max_size=12),
    max_size=2,
)


@FUZZ
@given(st.one_of(configs, values), environments)
def test_config_from_dict_raises_only_our_errors(data: Any, environ: dict[str, str]) -> None:
    with contextlib.suppress(BridgeError):
        config_from_dict(data, "fuzz.yaml", environ)


YAML_ALPHABET = st.sampled_from(
    [*"ab:-[]{}&*!|>'\"#%@`,?\n ", "  ", "\n  ", "&x ", "*x", "- ", "!!int ", "1e9", ".inf"]
)


@FUZZ
@given(st.one_of(st.text(), st.lists(YAML_ALPHABET, max_size=60).map("".join)))
def test_parse_config_raises_only_our_errors(text: str) -> None:
    with contextlib.suppress(BridgeError):
        parse_config(text, "fuzz.yaml")
