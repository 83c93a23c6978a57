"""`--engine dask` (issue 11): on a LocalCluster of 2 worker processes, the statistics of every
pass equal the local engine's bit for bit, and a seeded synthesis gives the same output."""

from __future__ import annotations

from functools import partial

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dpsynth_cli.domain import ColumnSpec
from dpsynth_cli.engine import dask as dask_engine
from dpsynth_cli.mechanisms import grid
from dpsynth_cli.mechanisms.moments import MomentSums
from dpsynth_cli.privacy.noise import RandomSource
from dpsynth_cli.synth import SynthOptions, synthesize, value_rows

SPECS = [ColumnSpec("a", "float", 0.0, 10.0), ColumnSpec("b", "integer", 0, 20)]


@pytest.fixture(scope="module")
def client():
    with dask_engine.client(None, workers=2) as c:
        yield c


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """Three Parquet files (a dataset directory) of 4,000 rows with some missing cells, and the
    same rows as one table."""
    rng = np.random.default_rng(3)
    a = np.clip(rng.normal(5, 2, 12_000), -1, 11)
    a[rng.random(a.size) < 0.02] = np.nan
    b = rng.poisson(8, 12_000)
    table = pa.table({"a": a, "b": b})
    root = tmp_path_factory.mktemp("ds")
    for i in range(3):
        part = table.slice(4000 * i, 4000)
        pq.write_table(part, root / f"part-{i}.parquet", row_group_size=1500)
    return root, table


def test_dask_statistics_equal_local(client, dataset):
    root, table = dataset
    parts = dask_engine.parquet_partitions(str(root), ["a", "b"], batch_rows=700)
    assert len(parts) == 3
    remote = dask_engine.dask_rows(client, parts, SPECS)
    local = value_rows(table, SPECS)
    for make in (partial(grid.GridCounts, 9, 2), partial(MomentSums.empty, 2)):
        r = remote.map(_unit, 2).collect(make)
        loc = local.map(_unit, 2).collect(make)
        for name in ("counts", "first", "second"):
            if hasattr(loc, name):
                assert np.array_equal(getattr(r, name), getattr(loc, name))


def _unit(X: np.ndarray) -> np.ndarray:
    return np.clip((X - [0.0, -0.5]) / [10.0, 21.0], 0.0, 1.0)


@pytest.mark.parametrize("dim", ["full", "1"])
def test_dask_seeded_output_equals_local(client, dataset, dim):
    root, table = dataset
    one_file = root / "all.parquet"
    if not one_file.exists():
        pq.write_table(table, one_file, row_group_size=1000)
    options = SynthOptions(1.0, dim=dim)
    local = synthesize(table, SPECS, options, RandomSource.seeded(11))
    parts = dask_engine.parquet_partitions(str(one_file), ["a", "b"], batch_rows=500)
    assert len(parts) > 1
    rows = dask_engine.dask_rows(client, parts, SPECS)
    remote = synthesize(None, SPECS, options, RandomSource.seeded(11), rows=rows)
    assert remote.noisy_rows == local.noisy_rows
    assert remote.table.equals(local.table)
