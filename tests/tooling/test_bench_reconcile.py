"""Smoke test of `make bench`'s reconcile rows: the bench runs at 1k nodes and gives sane figures.

Sane, not expected: the numbers depend on the machine, so only their kind and order of magnitude
are checked (a pass takes some CPU and not seconds; the peak is above the start and far from a
gigabyte; the bridge read the nodes the listing holds, which the bench itself verifies).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "dev" / "bench"))

import reconcile_pass
from reconcile_pass import Row, Sample


@pytest.fixture(scope="module")
def rows() -> list[Row]:
    return reconcile_pass.measure_rows(sizes=(1_000,))


@pytest.mark.parametrize(("series", "least_mb"), [("22.05", 1.0), ("24.11", 2.0)])
def test_reconcile_rows_at_1k_nodes_are_sane(rows: list[Row], series: str, least_mb: float) -> None:
    (row,) = [r for r in rows if r.series == series]
    assert row.nodes == 1_000
    assert least_mb < row.listing_mb < 10 * least_mb
    for sample in (row.bridge, row.baseline):
        assert 0 < sample.cpu_s < 2.0
        assert 5 < sample.setup_rss_mb <= sample.peak_rss_mb < 1024


def test_reconcile_table_has_a_line_per_figure(rows: list[Row]) -> None:
    lines = reconcile_pass.table_lines(rows)
    assert len(lines) == 2 * len(rows)
    for what, figure, baseline, ratio in lines:
        assert what.startswith("reconcile ")
        assert figure and baseline
        assert ratio.endswith("x")
        float(ratio.removesuffix("x"))


def test_growth_is_cost_per_node_of_the_two_largest_sizes() -> None:
    def row(nodes: int, cpu_s: float, peak_mb: float) -> Row:
        sample = Sample(cpu_s=cpu_s, peak_rss_mb=peak_mb, setup_rss_mb=20.0)
        return Row("24.11", nodes, nodes * 0.0024, sample, sample)

    rows = [row(1_000, 0.05, 30.0), row(10_000, 0.2, 100.0), row(50_000, 1.0, 420.0)]
    assert reconcile_pass.growth_lines(rows) == [
        ("reconcile 24.11 growth 50k vs 10k: CPU per node", "20.0 us", "20.0 us", "1.00x"),
        (
            "reconcile 24.11 growth 50k vs 10k: peak RSS above start per node",
            "8.2 kB",
            "8.2 kB",
            "1.00x",
        ),
    ]
