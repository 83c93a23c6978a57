"""The whole command is the mechanism: files that differ in one row must be indistinguishable
except through the ledgered releases.

Each case drives the real CLI (files in; output file, report, messages and exit code out) on a
table and on the same table plus one adversarial row: a text cell, a fraction in an integer
column, numbers beyond the int64 and float ranges, inf and NaN, a missing cell, an all-missing
column, one complete row against none. The released values are forced equal on both sides: the
runs are seeded alike, and the data that the noisy count, the DP bounds estimate and the mechanism
measure are replaced by the same fixed inputs. Whatever still differs between the two runs
(output bytes and schema, report, messages, exit code) would be a leak outside the ledger: a type,
column or error decided by a value.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyarrow import csv as pa_csv

from dpsynth_cli import synth
from dpsynth_cli.cli import app
from dpsynth_cli.engine.rows import as_rows

BASE_ROWS = [("3", "0.25"), ("7", "-0.5"), ("10", "0.75"), ("0", "")]
# The row added to the base table: (a, b) as CSV text.
CSV_ROWS = {
    "text cell": ("abc", "0.5"),
    "fraction in integer column": ("5.5", "0.5"),
    "beyond int64": ("99999999999999999999", "0.5"),
    "beyond float range": ("4", "1e400"),
    "negative beyond float range": ("-1e999", "0.1"),
    "inf and nan": ("inf", "nan"),
    "NA marker": ("NA", "0.2"),
    "empty cell": ("", "0.3"),
    "quoted number": ('"4"', '" 0.5 "'),
}
SCHEMA = {"columns": {"a": {"type": "integer", "lower": 0, "upper": 10}, "b": {"type": "float"}}}
# Declarations with and without a schema; without bounds on b, the DP bounds estimate runs.
DECLARATIONS = {
    "schema": ["--schema", "schema.json"],
    "flags": ["--bounds", "a=0:10", "--bounds", "b=-1:1", "--integer", "a"],
    "header only": [],
}


def fix_releases(monkeypatch) -> None:
    """Feed every ledgered step the same fixed data on both sides (seeded runs do the rest)."""
    count, bounds, mechanisms = synth.noisy_tally, synth.estimate_bounds, dict(synth.MECHANISMS)
    # the row count and the rows dropped at each column: one histogram, fixed on both sides
    monkeypatch.setattr(synth, "noisy_tally", lambda n, drops, *a: count(777, [5] * len(drops), *a))
    fixed_column = np.full(3000, 0.3)  # enough rows in one bin for any bounds budget here
    monkeypatch.setattr(synth, "estimate_bounds", lambda v, *a: bounds(fixed_column, *a))

    def fixed_input(mechanism):
        def run(X, **kwargs):
            fixed = as_rows(np.random.default_rng(0).random((300, X.d)))
            # the public facts of the cube too: level columns first, missing flags, codes
            facts = {"flagged": X.flagged, "codes": X.codes, "coded_missing": X.coded_missing}
            facts |= {"clocks": X.clocks, "determines": X.determines}
            return mechanism(replace(fixed, lead=X.lead, **facts), **kwargs)

        return run

    monkeypatch.setattr(synth, "MECHANISMS", {k: fixed_input(m) for k, m in mechanisms.items()})


def run_cli(runner, workdir: Path, monkeypatch, args: list[str]) -> dict:
    """One run in `workdir` with relative paths, so both sides' commands are identical."""
    monkeypatch.chdir(workdir)
    result = runner.invoke(app, ["synth", *args, "--eps", "1", "--seed", "3"])
    files = sorted(p.name for p in workdir.iterdir())
    outputs = {p: (workdir / p).read_bytes() for p in files if p.startswith("out")}
    return {"exit": result.exit_code, "messages": result.output, "outputs": outputs}


def write_csv(path: Path, rows: list[tuple[str, str]]) -> None:
    path.write_text("a,b\n" + "".join(f"{a},{b}\n" for a, b in rows))


def compare(
    runner, tmp_path, monkeypatch, write, rows, extra_row, args, out_name, schema=SCHEMA
) -> dict:
    sides = []
    for side, table in (("without", rows), ("with", [*rows, extra_row])):
        workdir = tmp_path / side
        workdir.mkdir()
        (workdir / "schema.json").write_text(json.dumps(schema))
        write(workdir, table)
        sides.append(run_cli(runner, workdir, monkeypatch, [*args, "-o", out_name]))
    assert sides[0] == sides[1]
    return sides[0]


def compare_csv(runner, tmp_path, monkeypatch, row, args, out_name, schema=SCHEMA) -> dict:
    """`compare` on BASE_ROWS as CSV, plus CSV_ROWS[row]."""
    write = lambda d, rows: write_csv(d / "in.csv", rows)  # noqa: E731
    return compare(
        runner, tmp_path, monkeypatch, write, BASE_ROWS, CSV_ROWS[row], args, out_name, schema
    )


@pytest.mark.parametrize("declared", DECLARATIONS)
@pytest.mark.parametrize("row", CSV_ROWS)
def test_csv_neighbours_are_indistinguishable(runner, tmp_path, monkeypatch, row, declared):
    fix_releases(monkeypatch)
    args = ["in.csv", *DECLARATIONS[declared]]
    seen = compare_csv(runner, tmp_path, monkeypatch, row, args, "out.csv")
    assert seen["exit"] == 0, seen["messages"]
    report = json.loads(seen["outputs"]["out.csv.report.json"])
    assert report["domain"]["a"]["type"] == ("float" if declared == "header only" else "integer")


@pytest.mark.parametrize("declared", DECLARATIONS)
@pytest.mark.parametrize(
    "rows, extra",
    [([], ("3", "0.5")), ([("1", ""), ("2", "")], ("3", "0.5"))],
    ids=["zero vs one row", "all-missing column vs one value"],
)
def test_no_complete_rows_is_a_release_like_any_other(
    runner, tmp_path, monkeypatch, rows, extra, declared
):
    fix_releases(monkeypatch)
    seen = compare(
        runner,
        tmp_path,
        monkeypatch,
        lambda d, table: write_csv(d / "in.csv", table),
        rows,
        extra,
        ["in.csv", *DECLARATIONS[declared]],
        "out.parquet",
    )
    assert seen["exit"] == 0, seen["messages"]


def parquet_table(rows: list[tuple]) -> pa.Table:
    """Columns declared by the file: a int64, b float64, u uint64, t text (left out by default)."""
    a, b, u, t = zip(*rows, strict=True) if rows else ([], [], [], [])
    return pa.table(
        {
            "a": pa.array(a, pa.int64()),
            "b": pa.array(b, pa.float64()),
            "u": pa.array(u, pa.uint64()),
            "t": pa.array(t, pa.string()),
        }
    )


PARQUET_BASE = [(3, 0.25, 1, "x"), (7, -0.5, 2, "y"), (10, 0.75, 3, None)]
PARQUET_ROWS = {
    "uint64 beyond int64": (4, 0.5, 2**64 - 1, "z"),
    "int64 extreme": (2**63 - 1, 0.5, 0, "z"),
    "inf": (4, float("inf"), 0, "z"),
    "nan": (4, float("nan"), 0, "z"),
    "null": (None, 0.5, None, None),
    "huge float": (4, -1.7e308, 0, "z"),
    "text that is a number": (4, 0.5, 0, "12.5"),
}
PARQUET_DECLARATIONS = {
    "schema": ["--schema", "schema.json"],
    "flags with text column": ["--columns", "a,b,u,t", "--bounds", "a=0:10", "--bounds", "u=0:5"],
    "file types only": [],
}


@pytest.mark.parametrize("declared", PARQUET_DECLARATIONS)
@pytest.mark.parametrize("row", PARQUET_ROWS)
def test_parquet_neighbours_are_indistinguishable(runner, tmp_path, monkeypatch, row, declared):
    fix_releases(monkeypatch)
    seen = compare(
        runner,
        tmp_path,
        monkeypatch,
        lambda d, rows: pq.write_table(parquet_table(rows), d / "in.parquet"),
        PARQUET_BASE,
        PARQUET_ROWS[row],
        ["in.parquet", *PARQUET_DECLARATIONS[declared]],
        "out.parquet",
    )
    assert seen["exit"] == 0, seen["messages"]
    out = pq.read_table(pa.BufferReader(seen["outputs"]["out.parquet"]))
    assert out.schema.field("a").type == pa.int64()  # the file declares a as integer
    assert out.schema.metadata[b"dpsynth.release"].startswith(b"NOT FOR RELEASE")


def test_parquet_all_null_column_vs_one_value(runner, tmp_path, monkeypatch):
    fix_releases(monkeypatch)
    seen = compare(
        runner,
        tmp_path,
        monkeypatch,
        lambda d, rows: pq.write_table(parquet_table(rows), d / "in.parquet"),
        [(1, None, 0, None), (2, None, 0, None)],
        (3, 0.5, 0, None),
        ["in.parquet"],
        "out.csv",
    )
    assert seen["exit"] == 0, seen["messages"]
    assert seen["outputs"]["out.csv"].startswith(b'"a","b","u"\n')
    assert (
        "1 column left out (type string in the file's schema is not numeric): 't'"
        in seen["messages"]
    )


@pytest.mark.parametrize("row", CSV_ROWS)
def test_marginals_neighbours_are_indistinguishable(runner, tmp_path, monkeypatch, row):
    """The same adversarial rows through --mechanism marginals (auto's choice for wider tables)."""
    fix_releases(monkeypatch)
    args = ["in.csv", *DECLARATIONS["schema"], "--mechanism", "marginals"]
    seen = compare_csv(runner, tmp_path, monkeypatch, row, args, "out.csv")
    assert seen["exit"] == 0, seen["messages"]
    assert "marginals-two-way" in seen["outputs"]["out.csv.report.json"].decode()


@pytest.mark.parametrize("row", ["text cell", "beyond float range", "inf and nan", "empty cell"])
def test_derived_column_neighbours_are_indistinguishable(runner, tmp_path, monkeypatch, row):
    """A derived column and a conditioning constraint (issue 23) on the DP bounds estimate's
    path: post-processing of the release, so the neighbours' outputs stay identical."""
    fix_releases(monkeypatch)
    # b's DP bounds here are about 0.297:0.301: a lands in 4..12 (bounds 0..10), b >= 0.298
    schema = {**SCHEMA, "constraints": ["a == 2000 * b - 590", "b >= 0.298"]}
    args = ["in.csv", "--schema", "schema.json"]
    seen = compare_csv(runner, tmp_path, monkeypatch, row, args, "out.csv", schema)
    assert seen["exit"] == 0, seen["messages"]
    out = pa_csv.read_csv(pa.BufferReader(seen["outputs"]["out.csv"]))
    a, b = out.column("a").to_numpy(), out.column("b").to_numpy()
    assert out.num_rows > 100 and (b >= 0.298).all() and (a <= 10).all()
    assert np.array_equal(a, np.floor(2000 * b - 590 + 0.5))  # derived: the nearest integer
    block = json.loads(seen["outputs"]["out.csv.report.json"])["constraints"]
    assert 0.2 < block["first_batch"]["acceptance_rate"] < 0.8  # rejection at work
