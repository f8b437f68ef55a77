"""``SlurmCli.list_nodes(names)`` against the proving ground's real slurmctld (issue 33).

A reconcile pass reads the nodes the pools own by name. A pool may name nodes slurm.conf lacks
(pool ``cpu-[0-99]``, slurm.conf ``cpu-[0-49]``): what Slurm does with such a name decides
whether the bridge still sees the others. Slurm's source says scontrol ``show nodes <list>
--json`` skips an unknown name with exit status 0 (``src/scontrol/info_node.c``,
``scontrol_print_node_list``; 23.02, 24.11, 26.05) and 22.05's ``sinfo --json`` ignores
``--nodes`` (it lists every node): this pins it on the series the ground runs. Read-only.
"""

from __future__ import annotations

import pytest
from proving_ground import slurm
from proving_ground.slurm import ground_programs

from bridge.adapters.slurm.cli import SlurmCli
from bridge.config import load_config
from tests.conftest import ProvingGround

pytestmark = pytest.mark.integration

#: Names the ground's slurm.conf does not define: beyond a pool, and of no pool.
UNKNOWN = ["cpu-9999", "nosuch-0", "nosuch-1"]
#: Names that do not compress, more than one command-line argument's worth (64 kB) of them.
MANY_UNKNOWN = [f"nosuch-{chr(97 + i % 26)}{i}-x" for i in range(5000)]
#: Nodes the ground's slurm.conf defines outside every pool: never listed unless asked for.
NOT_ASKED = {"static-0", "stray-0", "stray-1"}


@pytest.fixture(scope="module")
def cli(proving_ground: ProvingGround) -> SlurmCli:
    """The ground's Slurm clients, of the series it runs, as the bridge calls them."""
    programs = ground_programs(proving_ground.layout)
    return SlurmCli(str(programs.bin_dir), conf=str(proving_ground.layout.slurm_conf))


@pytest.fixture(scope="module")
def pool_nodes(proving_ground: ProvingGround) -> list[str]:
    """Every node of the ground's pools: its slurm.conf is rendered from the same file."""
    config = load_config(str(slurm.bridge_config_path(proving_ground.layout)), environ={})
    return list(config.pools.all_nodes())


@pytest.mark.parametrize(
    ("known", "unknown"),
    [
        (True, []),
        (True, UNKNOWN),
        (False, UNKNOWN),
        (True, MANY_UNKNOWN),
    ],
    ids=["known", "known-and-unknown", "only-unknown", "known-and-many-unknown"],
)
def test_list_nodes_by_name_lists_the_known_ones_and_skips_the_rest(
    cli: SlurmCli, pool_nodes: list[str], known: bool, unknown: list[str]
) -> None:
    asked = [*(pool_nodes if known else []), *unknown]
    listed = cli.list_nodes(asked)
    names = [n.name for n in listed]
    assert len(names) == len(set(names)), names
    assert sorted(names) == sorted(pool_nodes if known else [])
    assert all(n.is_cloud for n in listed), [n.name for n in listed if not n.is_cloud]
    assert not NOT_ASKED & set(names)


def test_list_nodes_by_name_agrees_with_the_full_listing(
    cli: SlurmCli, pool_nodes: list[str]
) -> None:
    """The same nodes as a full listing kept to the pools' (states may move in between: the
    names are compared, and the static node is in the full listing only)."""
    every = {n.name for n in cli.list_nodes()}
    assert "static-0" in every
    assert {n.name for n in cli.list_nodes([*pool_nodes, *UNKNOWN])} == every & set(pool_nodes)
