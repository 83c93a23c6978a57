"""The whole command is the mechanism, on mixed tables (issue 15): the real CLI on a table and on
the same table plus one adversarial row (an undeclared level, a null in a non-nullable category, a
bad date, a text cell in a boolean column, ...) must give identical output bytes and schema,
report, messages and exit code once the ledgered releases are forced equal (`fix_releases`, as in
tests/test_neighbours.py). A difference would be a type, level, column or error decided by a
value.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests import test_neighbours as neighbours
from tests.test_neighbours import fix_releases

SCHEMA = {
    "columns": {
        "sex": {"type": "category", "levels": ["F", "M"]},
        "ward": {"type": "category", "levels": ["A", "B", "other"], "other": "other"},
        "day": {"type": "date", "lower": "2021-01-01", "upper": "2021-12-31", "nullable": True},
        "smoker": {"type": "boolean"},
        "n": {"type": "integer", "lower": 0, "upper": 9, "nullable": True},
        "at": {
            "type": "datetime",
            "lower": "2021-01-01T00:00:00",
            "upper": "2022-01-01T00:00:00",
            "timezone": "Europe/Paris",
            "nullable": True,  # a hidden missing flag in the cube (issue 15)
        },
    }
}
HEADER = "sex,ward,day,smoker,n,at"
BASE = [
    "F,A,2021-03-01,true,1,2021-03-01T10:00:00",
    "M,B,2021-06-01,false,,2021-06-01T10:00:00+02:00",
    "M,C,,no,5,2021-09-01 08:30:00",
]
ROWS = {
    "undeclared level": "X,A,2021-03-01,true,1,2021-03-01T10:00:00",
    "undeclared level to other": "F,Q,2021-03-01,true,1,2021-03-01T10:00:00",
    "null in a non-nullable category": ",A,2021-03-01,true,1,2021-03-01T10:00:00",
    "number in a category": "3.5,A,2021-03-01,true,1,2021-03-01T10:00:00",
    "bad date": "F,A,2021-02-30,true,1,2021-03-01T10:00:00",
    "date far out of bounds": "F,A,0001-01-01,true,1,9999-12-31T23:59:59-12:00",
    "text in a boolean column": "F,A,2021-03-01,maybe,1,2021-03-01T10:00:00",
    "bad datetime": "F,A,2021-03-01,true,1,yesterday",
    "time that does not exist (DST)": "F,A,2021-03-01,true,1,2021-03-28T02:30:00",
    "short offset +01": "F,A,2021-03-01,true,1,2021-03-01T10:00:00+01",
    "short offset -01": "F,A,2021-03-01,true,1,2021-03-01T10:00:00-01",
    "offset without its zero": "F,A,2021-03-01,true,1,2021-03-01T10:00:00+1:00",
    "nanoseconds": "F,A,2021-03-01,true,1,2021-03-01T10:00:00.123456789",
    "all missing": ",,,,,",
    "long text": "F," + "x" * 5000 + ",2021-03-01,true,1,2021-03-01T10:00:00",
}


def compare(*args) -> dict:
    """tests/test_neighbours.compare with this module's schema."""
    return neighbours.compare(*args, schema=SCHEMA)


def write_csv(directory: Path, rows: list[str]) -> None:
    (directory / "in.csv").write_text(HEADER + "\n" + "".join(r + "\n" for r in rows))


# auto takes the marginals mechanism here (6 columns, the fixed noisy count 777); privtree splits
# the level columns first.
PATHS = {"auto": "marginals-two-way", "privtree": "privtree-marginals"}


@pytest.mark.parametrize("mechanism", PATHS)
@pytest.mark.parametrize("row", ROWS)
def test_mixed_csv_neighbours_are_indistinguishable(runner, tmp_path, monkeypatch, row, mechanism):
    fix_releases(monkeypatch)
    args = ["in.csv", "--schema", "schema.json", "--mechanism", mechanism]
    seen = compare(runner, tmp_path, monkeypatch, write_csv, BASE, ROWS[row], args, "out.parquet")
    assert seen["exit"] == 0, seen["messages"]
    out = pq.read_table(pa.BufferReader(seen["outputs"]["out.parquet"]))
    assert out.schema.names == HEADER.split(",")
    assert set(out.column("sex").to_pylist()) <= {"F", "M"}  # never a new level
    report = seen["outputs"]["out.parquet.report.json"].decode()
    assert PATHS[mechanism] in report  # the path this case is for


def test_mixed_zero_vs_one_row(runner, tmp_path, monkeypatch):
    fix_releases(monkeypatch)
    args = ["in.csv", "--schema", "schema.json"]
    seen = compare(runner, tmp_path, monkeypatch, write_csv, [], BASE[0], args, "out.csv")
    assert seen["exit"] == 0, seen["messages"]


def parquet_table(rows: list[tuple]) -> pa.Table:
    """sex as dictionary text, smoker bool, day date32, at timestamp[us, UTC], n int64."""
    sex, smoker, day, at, n = zip(*rows, strict=True)
    return pa.table(
        {
            "sex": pa.array(sex, pa.string()).dictionary_encode(),
            "ward": pa.array(["A"] * len(rows)),
            "smoker": pa.array(smoker, pa.bool_()),
            "day": pa.array(day, pa.date32()),
            "at": pa.array(at, pa.timestamp("us", "UTC")),
            "n": pa.array(n, pa.int64()),
        }
    )


PARQUET_BASE = [("F", True, 18700, 1_620_000_000_000_000, 1), ("M", False, None, None, None)]
PARQUET_ROWS = {
    "undeclared level": ("X", True, 18700, 1_620_000_000_000_000, 1),
    "null boolean": ("F", None, 18700, 1_620_000_000_000_000, 1),
    "extreme date and time": ("F", True, -(2**31), 2**63 - 1, 2**63 - 1),
    "earliest time": ("F", True, 2**31 - 1, -(2**63) + 1, -(2**63)),
}


@pytest.mark.parametrize("row", PARQUET_ROWS)
def test_mixed_parquet_neighbours_are_indistinguishable(runner, tmp_path, monkeypatch, row):
    fix_releases(monkeypatch)
    seen = compare(
        runner,
        tmp_path,
        monkeypatch,
        lambda d, rows: pq.write_table(parquet_table(rows), d / "in.parquet"),
        PARQUET_BASE,
        PARQUET_ROWS[row],
        ["in.parquet", "--schema", "schema.json"],
        "out.csv",
    )
    assert seen["exit"] == 0, seen["messages"]
    # the file's column order (the schema lists them in another)
    assert seen["outputs"]["out.csv"].startswith(b'"sex","ward","smoker","day","at","n"\n')


CONSTRAINED = {**SCHEMA, "constraints": ["day >= floor(at)", "n <= 5"]}
CONSTRAINED_ROWS = ["bad date", "date far out of bounds", "all missing", "undeclared level"]


@pytest.mark.parametrize("mechanism", PATHS)
@pytest.mark.parametrize("row", CONSTRAINED_ROWS)
def test_constrained_neighbours_are_indistinguishable(
    runner, tmp_path, monkeypatch, row, mechanism
):
    """Declared constraints (issue 23) condition the release by rejection from the released
    model: post-processing, so the neighbours' outputs stay identical (and obey)."""
    fix_releases(monkeypatch)
    args = ["in.csv", "--schema", "schema.json", "--mechanism", mechanism]
    seen = neighbours.compare(
        runner,
        tmp_path,
        monkeypatch,
        write_csv,
        BASE,
        ROWS[row],
        args,
        "out.parquet",
        schema=CONSTRAINED,
    )
    assert seen["exit"] == 0, seen["messages"]
    out = pq.read_table(pa.BufferReader(seen["outputs"]["out.parquet"])).to_pandas()
    day, at = out["day"].astype("datetime64[ns]"), out["at"].dt.tz_convert("UTC")
    present = day.notna() & at.notna()
    # about a third of the rows hold both: the fixed input's flag leaves `at` missing in half,
    # and the rejection keeps the rows a constraint does not apply to (81-102 of ~270 seen)
    assert present.sum() > 50
    assert (day[present] >= at[present].dt.tz_localize(None).dt.floor("D")).all()
    assert (out["n"].dropna() <= 5).all()
    report = seen["outputs"]["out.parquet.report.json"].decode()
    assert '"conditioned"' in report and PATHS[mechanism] in report
