"""The Python API reads an in-memory table cell by cell (issue 35, finding 1): one row must not
decide how a column is read.

Each case is a DataFrame (or an Arrow table) and the same table plus one adversarial row (bytes
that are not UTF-8, an int, a list or a bool among strings, a whole number past 2^64, a time in a
date column, ...), which changes the column's dtype. Two checks per case:
- the rows the release measures: the true count is the base table's (all its rows complete,
  the datetime64 column declared `date` included) on one side and at most one more on the other;
  before the fix one bytes cell made the column binary, then missing: every row was dropped;
- with every ledgered release forced equal (tests/test_neighbours.fix_releases), the two calls
  return the same table, report and warnings, and neither raises.
"""

from __future__ import annotations

import datetime as dt
import warnings
from decimal import Decimal

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import dpsynth_cli as dp
from dpsynth_cli import synth
from dpsynth_cli.io.memory import object_text, series_text, text_cells
from tests.test_neighbours import fix_releases

SCHEMA = {
    "columns": {
        "ward": {"type": "category", "levels": ["A", "B"]},
        "age": {"type": "integer", "lower": 0, "upper": 100},
        "day": {"type": "date", "lower": "2021-01-01", "upper": "2021-12-31"},
        "smoker": {"type": "boolean"},
    }
}
N = 40


def base_frame() -> pd.DataFrame:
    rng = np.random.default_rng(4)
    return pd.DataFrame(
        {
            "ward": rng.choice(["A", "B"], N),
            "age": rng.integers(0, 101, N),
            "day": pd.to_datetime("2021-01-01") + pd.to_timedelta(rng.integers(0, 300, N), "D"),
            "smoker": rng.random(N) < 0.3,
        }
    )


GOOD = {"ward": "A", "age": 5, "day": pd.Timestamp("2021-05-05"), "smoker": False}
ROWS = {
    "bytes that are not UTF-8": {"ward": b"\xff\xfe"},
    "UTF-8 bytes": {"ward": b"B"},
    "an int among strings": {"ward": 3},
    "a list among strings": {"ward": [1, 2]},
    "a dict among strings": {"ward": {"k": 1}},
    "a bool among strings": {"ward": True},
    "2^64 in an integer column": {"age": 2**64},
    "2^63 in an integer column": {"age": 2**63},
    "-2^70 in an integer column": {"age": -(2**70)},
    "text in an integer column": {"age": "old"},
    "NaN in an integer column": {"age": float("nan")},
    "a Decimal in an integer column": {"age": Decimal("7.5")},
    "a time in a date column": {"day": pd.Timestamp("2021-05-05 13:00")},
    "text in a date column": {"day": "yesterday"},
    "a date object in a date column": {"day": dt.date(2021, 5, 5)},
    "a zoned time in a date column": {"day": pd.Timestamp("2021-05-05", tz="UTC")},
    "year 3000 in a date column": {"day": dt.datetime(3000, 1, 1)},
    "text in a boolean column": {"smoker": "maybe"},
    "None in a boolean column": {"smoker": None},
    "everything missing": dict.fromkeys(GOOD),
}


def with_row(frame: pd.DataFrame, change: dict) -> pd.DataFrame:
    row = pd.DataFrame({k: pd.Series([v], dtype=object) for k, v in {**GOOD, **change}.items()})
    return pd.concat([frame, row], ignore_index=True)


def release(data, monkeypatch) -> tuple[int, pa.Table, dict, list[str]]:
    """The true count the release measured, and the call's table, report and warnings."""
    counted = []
    count = synth.noisy_tally
    monkeypatch.setattr(synth, "noisy_tally", lambda n, *a: counted.append(n) or count(n, *a))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        table, report = dp.synthesize(
            data, eps=1, schema=SCHEMA, seed=3, budget=False, output="arrow"
        )
    return counted[0], table, report, [str(w.message) for w in caught]


@pytest.mark.parametrize("row", ROWS)
def test_one_row_never_changes_how_the_others_are_read(row, monkeypatch):
    frame = base_frame()
    without, *_ = release(frame, monkeypatch)
    with_it, *_ = release(with_row(frame, ROWS[row]), monkeypatch)
    assert without == N  # every base row complete (the datetime64 dates read as dates)
    assert with_it - without in (0, 1)


@pytest.mark.parametrize("row", ROWS)
def test_api_neighbours_are_indistinguishable(row, monkeypatch):
    fix_releases(monkeypatch)
    frame = base_frame()
    _, table, report, said = release(frame, monkeypatch)
    _, table2, report2, said2 = release(with_row(frame, ROWS[row]), monkeypatch)
    assert table.equals(table2) and table.schema == table2.schema
    assert report == report2 and said == said2


@pytest.mark.parametrize("bad", [b"\xff", b"\xc3(", None])
def test_an_arrow_binary_column_is_read_cell_by_cell(bad, monkeypatch):
    frame = base_frame()
    arrow = pa.table({**{c: frame[c] for c in frame}, "ward": pa.array(frame["ward"], pa.binary())})
    extra = pa.table(
        {**{c: frame[c][:1] for c in frame}, "ward": pa.array([bad], pa.binary())}
    ).cast(arrow.schema)
    without, *_ = release(arrow, monkeypatch)
    with_it, *_ = release(pa.concat_tables([arrow, extra]), monkeypatch)
    assert without == N and with_it - without in (0, 1)


def test_a_value_reads_the_same_whatever_its_columns_dtype():
    """The typed paths and the per-cell path print a value alike (63.0 is "63" everywhere)."""
    mixed = np.array([63, 63.0, True, "x", pd.Timestamp("2021-05-05"), None], dtype=object)
    assert object_text(mixed).to_pylist() == ["63", "63", "true", "x", "2021-05-05", None]
    assert series_text(pd.Series([63, None])).to_pylist() == ["63", None]  # float64
    assert series_text(pd.Series([63.5, 2.0])).to_pylist() == ["63.5", "2"]
    assert series_text(pd.Series([True])).to_pylist() == ["true"]
    stamps = pd.Series(pd.to_datetime(["2021-05-05", "2021-05-05 13:00:00.5"], format="ISO8601"))
    assert series_text(stamps).to_pylist() == ["2021-05-05", "2021-05-05 13:00:00.500000"]
    assert text_cells(pa.array([b"ok", b"\xff", None])).to_pylist() == ["ok", None, None]
    assert text_cells(pa.array([[1]])).to_pylist() == [None]  # no value of any declared type
