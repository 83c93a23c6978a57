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


def test_cli_dask_engine_writes_the_local_output(dataset, tmp_path):
    """The real CLI on a Parquet directory: --engine dask (its own LocalCluster) and the local
    engine write byte-identical outputs and reports (up to the command line) for one seed."""
    from typer.testing import CliRunner

    from dpsynth_cli.cli import app

    root, _ = dataset
    runner = CliRunner()
    outs = {}
    for engine in ("local", "dask"):
        out = tmp_path / f"{engine}.csv"
        args = ["synth", str(root), "--input-format", "parquet", "--eps", "1", "--seed", "5"]
        args += ["--bounds", "a=0:10", "--bounds", "b=0:20", "--integer", "b", "-o", str(out)]
        result = runner.invoke(app, [*args, "--engine", engine, "--batch-rows", "2500"])
        assert result.exit_code == 0, result.output
        outs[engine] = out.read_bytes()
    assert outs["local"] == outs["dask"]


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--batch-rows", "0"], "--batch-rows"),
        (["--scheduler", "tcp://127.0.0.1:1"], "--scheduler is for --engine dask"),
        (["--engine", "spark"], "--engine must be local or dask"),
    ],
)
def test_cli_engine_flags_are_checked(tmp_path, flags, message):
    from typer.testing import CliRunner

    from dpsynth_cli.cli import app

    data = tmp_path / "in.csv"
    data.write_text("a\n1\n2\n")
    result = CliRunner().invoke(
        app, ["synth", str(data), "--eps", "1", "--bounds", "a=0:3", *flags]
    )
    assert result.exit_code == 2 and message in result.output
    assert len(result.output.strip().splitlines()) == 1
