"""Node pools: validation and lookups."""

from __future__ import annotations

from typing import Any

import pytest

from bridge.domain.pools import NodePool, PoolError, PoolSet
from bridge.errors import ConfigError


def make_pool(**overrides: Any) -> NodePool:
    args: dict[str, Any] = {
        "name": "cpu",
        "nodes": "cpu-[0-3]",
        "cpus": 2,
        "real_memory_mb": 1024,
        "image": "localhost/slurmd:dev",
    }
    args.update(overrides)
    return NodePool.create(**args)


def test_create_expands_the_hostlist_and_defaults_partition_to_the_name() -> None:
    pool = make_pool()
    assert pool.node_names == ("cpu-0", "cpu-1", "cpu-2", "cpu-3")
    assert pool.partition == "cpu"
    assert "cpu-2" in pool
    assert "cpu-4" not in pool


@pytest.mark.parametrize(
    ("overrides", "field", "fragment"),
    [
        ({"name": "CPU"}, "name", "not a DNS-1123 label"),
        ({"name": ""}, "name", "must not be empty"),
        ({"nodes": "Cpu-[0-1]"}, "nodes", "node 'Cpu-0' cannot be a pod name"),
        ({"nodes": "cpu_[0-1]"}, "nodes", "node 'cpu_0' cannot be a pod name"),
        ({"nodes": "a" * 64}, "nodes", "more than 63"),
        ({"nodes": "default"}, "nodes", "reserves"),
        ({"cpus": 0}, "cpus", "must be a positive integer, got 0"),
        ({"cpus": True}, "cpus", "must be a positive integer, got True"),
        ({"real_memory_mb": -1}, "real_memory_mb", "got -1"),
        ({"partition": "a b"}, "partition", "not a Slurm partition name"),
        ({"partition": "DEFAULT"}, "partition", "reserves"),
        ({"features": ("ok", "a,b")}, "features[1]", "not a single Slurm word"),
        ({"gres": ("gpu:1 x",)}, "gres[0]", "not a single Slurm word"),
        ({"weight": -1}, "weight", "from 0 to"),
        ({"image": "a b"}, "image", "blanks"),
    ],
)
def test_invalid_pools_name_the_field(overrides: dict[str, Any], field: str, fragment: str) -> None:
    with pytest.raises(PoolError) as caught:
        make_pool(**overrides)
    assert caught.value.field == field
    assert fragment in str(caught.value)
    assert isinstance(caught.value, ConfigError)


def test_duplicate_node_in_one_pool() -> None:
    with pytest.raises(PoolError, match="node 'cpu-0' is listed twice"):
        NodePool("cpu", "cpu-0,cpu-0", ("cpu-0", "cpu-0"), 1, 1, "cpu")


def test_pool_keeps_its_own_copy_of_the_template() -> None:
    template: dict[str, Any] = {"metadata": {"labels": {"a": "1"}}}
    pool = make_pool(pod_template=template)
    template["metadata"]["labels"]["a"] = "2"
    assert pool.pod_template["metadata"]["labels"] == {"a": "1"}
    assert hash(pool) == hash(make_pool(pod_template={"metadata": {"labels": {"a": "1"}}}))


def test_pool_set_lookups() -> None:
    cpu = make_pool()
    big = make_pool(name="big", nodes="big-[0-1]", partition="cpu")
    pools = PoolSet((cpu, big))
    assert pools.pool_for("big-1") is big
    assert pools.pool_for("gpu-0") is None
    assert pools.owns("cpu-0")
    assert not pools.owns("cpu-9")
    assert pools.all_nodes() == ("cpu-0", "cpu-1", "cpu-2", "cpu-3", "big-0", "big-1")
    assert pools.by_name("big") is big
    assert pools.partitions() == {"cpu": (cpu, big)}
    assert pools.group(["big-0", "x-1", "cpu-3", "big-1"]) == (
        {"big": ["big-0", "big-1"], "cpu": ["cpu-3"]},
        ["x-1"],
    )
    assert list(pools) == [cpu, big]
    assert len(pools) == 2


@pytest.mark.parametrize(
    ("second", "field", "message"),
    [
        (
            {"name": "other", "nodes": "cpu-[3-5]"},
            "nodes",
            "pool 'other': nodes: node 'cpu-3' is also in pool 'cpu'; a node belongs to one pool",
        ),
        (
            {"nodes": "gpu-0"},
            "name",
            "pool 'cpu': name: pools[0] already uses this name",
        ),
    ],
)
def test_pool_set_rejects_overlaps(second: dict[str, Any], field: str, message: str) -> None:
    with pytest.raises(PoolError) as caught:
        PoolSet((make_pool(), make_pool(**second)))
    assert str(caught.value) == message
    assert caught.value.field == field
    assert caught.value.pool_index == 1


@pytest.mark.parametrize(
    ("overrides", "path"),
    [
        ({"name": "CPU"}, ("name",)),
        ({"nodes": "cpu-[0-"}, ("nodes",)),
        ({"features": ("ok", "a,b")}, ("features", 1)),
        ({"gres": ("gpu:1 x",)}, ("gres", 0)),
        ({"schedule_timeout_s": 0}, ("schedule_timeout_s",)),
        ({"schedule_timeout_s": float("nan")}, ("schedule_timeout_s",)),
        ({"image_pull_timeout_s": 1e300}, ("image_pull_timeout_s",)),
        ({"image_pull_timeout_s": 10**400}, ("image_pull_timeout_s",)),
        ({"image_pull_timeout_s": True}, ("image_pull_timeout_s",)),
    ],
)
def test_pool_errors_carry_the_field_path_as_data(
    overrides: dict[str, Any], path: tuple[str | int, ...]
) -> None:
    with pytest.raises(PoolError) as caught:
        make_pool(**overrides)
    assert caught.value.path == path


def test_pool_set_errors_carry_the_field_path_as_data() -> None:
    with pytest.raises(PoolError) as caught:
        PoolSet((make_pool(), make_pool(nodes="gpu-0")))
    assert (caught.value.path, caught.value.pool_index) == (("name",), 1)


# -- issue 30 item 5: topology, partition options, Gres as extended resources -------------------


@pytest.mark.parametrize(
    ("overrides", "field", "fragment"),
    [
        ({"sockets": 2}, "cores_per_socket", "required with sockets (all three or none)"),
        (
            {"sockets": 2, "cores_per_socket": 2, "threads_per_core": 2},
            "cpus",
            "2 is not sockets x cores_per_socket x threads_per_core (2 x 2 x 2 = 8)",
        ),
        ({"sockets": 0, "cores_per_socket": 2, "threads_per_core": 1}, "sockets", "at least 1"),
        ({"tmp_disk_mb": -1}, "tmp_disk_mb", "at least 0"),
        ({"partition_options": {"Nodes": "x"}}, "partition_options.Nodes", "not a partition"),
        ({"partition_options": {"SuspendTime": 5}}, "partition_options.SuspendTime", "timing"),
        ({"partition_options": {"MaxTime": "1 day"}}, "partition_options.MaxTime", "one slurm"),
        ({"partition_options": {"QOS": "a#b"}}, "partition_options.QOS", "one slurm.conf word"),
        ({"gres_resources": {"gpu": "gpu"}}, "gres_resources.gpu", "not an extended resource"),
        ({"gres_resources": {"gpu:a100": "x.io/gpu"}}, "gres_resources", "not a Gres name"),
    ],
)
def test_invalid_pass_through_names_the_field(
    overrides: dict[str, Any], field: str, fragment: str
) -> None:
    with pytest.raises(PoolError) as caught:
        make_pool(**overrides)
    assert caught.value.field == field
    assert fragment in str(caught.value)


def test_partition_options_take_slurm_conf_s_spelling_and_words() -> None:
    pool = make_pool(
        partition_options={"allowaccounts": "hpc,bio", "DefMemPerCPU": 512, "ExclusiveUser": True}
    )
    assert pool.partition_options == (
        ("AllowAccounts", "hpc,bio"),
        ("DefMemPerCPU", "512"),
        ("ExclusiveUser", "YES"),
    )


def test_pools_of_one_partition_give_the_same_options() -> None:
    a = make_pool(partition="k8s", partition_options={"QOS": "cloud"})
    b = make_pool(name="big", nodes="big-[0-1]", partition="k8s", partition_options={"QOS": "x"})
    with pytest.raises(PoolError, match="shares partition 'k8s' with other partition_options"):
        PoolSet((a, b))
    same = make_pool(
        name="big", nodes="big-[0-1]", partition="k8s", partition_options={"QOS": "cloud"}
    )
    assert len(PoolSet((a, same))) == 2


@pytest.mark.parametrize(
    ("gres", "resources", "requests"),
    [
        ((), None, {}),
        (("gpu:2",), None, {"nvidia.com/gpu": "2"}),
        (("gpu:a100:2", "gpu:1"), None, {"nvidia.com/gpu": "3"}),
        (("gpu",), None, {"nvidia.com/gpu": "1"}),
        (("gpu:a100",), None, {"nvidia.com/gpu": "1"}),
        (("mps:100",), None, {}),  # not mapped: Slurm's alone
        (("gpu:2",), {}, {}),  # the site turned the mapping off
        (("gpu:4", "nic:1"), {"gpu": "amd.com/gpu", "nic": "example.org/rdma"},
         {"amd.com/gpu": "4", "example.org/rdma": "1"}),
    ],
)  # fmt: skip
def test_gres_is_requested_as_extended_resources(
    gres: tuple[str, ...], resources: dict[str, str] | None, requests: dict[str, str]
) -> None:
    assert make_pool(gres=gres, gres_resources=resources).gres_requests() == requests
