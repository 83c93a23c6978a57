"""The calendar in declared constraints (issue 36): year(), month(), day(), hour(), minute(),
weekday() of a date or datetime column on its wall clock, days_in_month(year, month) of integer
columns; their parse-time checks; derived parts that agree with their date-time and conditions
that keep out dates that do not exist, in unit tests and through the real command."""

from __future__ import annotations

import calendar
import datetime as dt
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dpsynth_cli import constraints as cons
from dpsynth_cli.coltypes import parse_iso_bound
from dpsynth_cli.constraints import Term, days_in_month, parse_constraint, parse_constraints
from dpsynth_cli.domain import ColumnSpec, Domain
from dpsynth_cli.errors import UsageError
from dpsynth_cli.mechanisms.conditioned import Rules

WHERE = "--schema s.json"
NY = "America/New_York"


def bounds(kind: str, zone: str | None, lower: str, upper: str) -> tuple[float, float]:
    return tuple(parse_iso_bound(v, kind, zone, "") for v in (lower, upper))


COLUMNS = {
    "t": ColumnSpec(
        "t",
        "datetime",
        *bounds("datetime", NY, "2024-01-01T00:00", "2024-12-31T23:59"),
        timezone=NY,
    ),
    "w": ColumnSpec(
        "w", "datetime", *bounds("datetime", None, "2024-01-01T00:00", "2024-12-31T23:59")
    ),
    "d": ColumnSpec("d", "date", *bounds("date", None, "1960-01-01", "2030-12-31")),
    "year": ColumnSpec("year", "integer", 1890, 2110),
    "month": ColumnSpec("month", "integer", 1, 12),
    "day": ColumnSpec("day", "integer", 1, 31),
    "hour": ColumnSpec("hour", "integer", 0, 23),
    "x": ColumnSpec("x", "float", 0.0, 3000.0),
    "sex": ColumnSpec("sex", "category", 0.0, 1.0, levels=("F", "M")),
}


def epoch_days(text: str) -> float:
    """An ISO instant (with its offset) in constraint units: days since 1970-01-01T00:00 UTC."""
    return dt.datetime.fromisoformat(text).timestamp() / 86400


def wall_days(text: str) -> float:
    """A wall-clock time (no offset) in constraint units of a column without a time zone."""
    return (dt.datetime.fromisoformat(text) - dt.datetime(1970, 1, 1)).total_seconds() / 86400


# --- parsing --------------------------------------------------------------------------------


def test_calendar_terms_parse_like_columns():
    c = parse_constraint("month == month(t)", WHERE)
    assert c.target == "month" and c.terms == ((Term("t", "month"), 1.0),) and c.constant == 0
    c = parse_constraint("day <= days_in_month(year, `month`)", WHERE)
    assert dict(c.terms) == {Term("day"): 1.0, Term("year", "days_in_month", "month"): -1.0}
    assert c.columns == ("day", "year", "month") and c.op == "<="
    c = parse_constraint("2 * hour(t) + minute(t) >= 10 + weekday(d)", WHERE)
    want = {Term("t", "hour"): -2.0, Term("t", "minute"): -1.0, Term("d", "weekday"): 1.0}
    assert dict(c.terms) == want and c.constant == 10.0 and c.columns == ("d", "t")
    # a column may be named like a function: only a '(' makes a call
    c = parse_constraint("day == day(t)", WHERE)
    assert c.target == "day" and c.terms == ((Term("t", "day"), 1.0),)
    assert str(Term("year", "days_in_month", "month")) == "days_in_month(year, month)"


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (["hour(d) >= 5"], "hour() takes a datetime column; 'd' is a date column"),
        (["minute(d) >= 5"], "minute() takes a datetime column; 'd' is a date column"),
        (["hour(year) >= 5"], "hour() takes a datetime column; 'year' is an integer column"),
        (["month(x) >= 5"], "month() takes a date or datetime column; 'x' is a float column"),
        (
            ["day <= days_in_month(x, month)"],
            "days_in_month() takes integer columns; 'x' is a float",
        ),
        (["day <= days_in_month(year, d)"], "days_in_month() takes integer columns; 'd' is a date"),
        (["weekday(sex) <= 5"], "column 'sex' is a category column"),
        (["day <= days_in_month(year, zz)"], "column 'zz' is not in the schema"),
        (["hour(zz) >= 5"], "column 'zz' is not in the schema"),
        (["abs(x) <= 1"], "unknown function 'abs' (the known ones: floor(), year(), month(),"),
        (["Month(t) <= 1"], "days_in_month()"),
        (["day <= days_in_month(year)"], "days_in_month takes two columns, e.g."),
        (["day <= days_in_month(year, month, day)"], "days_in_month takes two columns"),
        (["hour(t, w) <= 3"], "hour takes one column, e.g. hour(time_hour)"),
        (["hour(t + 1) <= 3"], "hour takes one column"),
        (["hour(t) * hour(w) <= 3"], "a product of two columns is not linear"),
        (["year == days_in_month(year, month)"], "column 'year' is on both sides"),
        (["month == days_in_month(year, month)"], "column 'month' is on both sides"),
        (["day == day(t)", "hour == days_in_month(year, day)"], "column 'day' is derived"),
        (["month, day <= 3"], "expected + or - before ','"),
    ],
)
def test_bad_calendar_constraints_are_usage_errors_naming_them(raw, message):
    with pytest.raises(UsageError) as err:
        parse_constraints(raw, COLUMNS, WHERE)
    text = str(err.value)
    assert message in text and text.startswith(WHERE) and f'"{raw[-1]}"' in text
    assert "\n" not in text


def test_kinds_resolved_later_are_checked_when_chosen():
    """A schema column without a type takes the file's: a calendar term is checked then."""
    unresolved = {"t": ColumnSpec("t", ""), "h": ColumnSpec("h", "")}
    (c,) = parse_constraints(["h == hour(t)"], unresolved, "")
    with pytest.raises(UsageError, match=r"hour\(\) takes a datetime column; 't' is a date"):
        cons.choose([c], [ColumnSpec("t", "date"), ColumnSpec("h", "integer")])
    kept, _ = cons.choose([c], [ColumnSpec("t", "datetime"), ColumnSpec("h", "integer")])
    assert kept == (c,)


def test_the_report_says_how_calendar_constraints_are_enforced():
    parsed = parse_constraints(
        ["month == month(t)", "hour(t) >= 5", "day <= days_in_month(year, month)"], COLUMNS, ""
    )
    block = cons.describe(parsed)
    assert block["derived"] == {"month": "month == month(t)"}
    assert block["conditioned"] == ["hour(t) >= 5", "day <= days_in_month(year, month)"]
    for words in ("weekday(c) (Monday 0 ... Sunday 6)", "wall clock", "days_in_month(year, month)"):
        assert words in block["units"]


# --- the values -----------------------------------------------------------------------------


def parts(function: str, days: list[float], zone: str | None) -> list[float]:
    return cons.calendar_part(function, np.array(days), zone).tolist()


def test_a_zoned_datetime_is_read_on_its_wall_clock_across_dst():
    """America/New_York: 2024-03-10 springs from 02:00 EST to 03:00 EDT; 2024-11-03 falls from
    02:00 EDT back to 01:00 EST. Each instant's parts are its New York wall clock's."""
    instants = [
        "2024-03-10T06:30:00+00:00",  # 01:30 EST, Sunday
        "2024-03-10T07:30:00+00:00",  # 03:30 EDT (02:30 does not exist)
        "2024-11-03T05:30:00+00:00",  # 01:30 EDT
        "2024-11-03T06:30:00+00:00",  # 01:30 EST (the repeated hour)
        "2024-03-10T04:59:00+00:00",  # 23:59 EST on Saturday 2024-03-09 (UTC: the 10th)
        "2025-01-01T04:05:00+00:00",  # 23:05 EST on Tuesday 2024-12-31 (UTC: 2025)
    ]
    days = [epoch_days(i) for i in instants]
    assert parts("hour", days, NY) == [1, 3, 1, 1, 23, 23]
    assert parts("minute", days, NY) == [30, 30, 30, 30, 59, 5]
    assert parts("day", days, NY) == [10, 10, 3, 3, 9, 31]
    assert parts("month", days, NY) == [3, 3, 11, 11, 3, 12]
    assert parts("year", days, NY) == [2024, 2024, 2024, 2024, 2024, 2024]
    assert parts("weekday", days, NY) == [6, 6, 6, 6, 5, 1]
    # read in UTC instead (no zone) the same instants fall on other hours, days and years
    assert parts("hour", days, None) == [6, 7, 5, 6, 4, 4]
    assert parts("day", days, None)[4:] == [10, 1] and parts("year", days, None)[5] == 2025


def test_a_datetime_without_a_zone_and_a_date_are_read_as_written():
    days = [wall_days("2024-02-29T23:15:42"), wall_days("1969-12-31T00:00:59"), np.nan]
    assert parts("year", days, None)[:2] == [2024, 1969]
    assert parts("month", days, None)[:2] == [2, 12]
    assert parts("day", days, None)[:2] == [29, 31]
    assert parts("hour", days, None)[:2] == [23, 0]
    assert parts("minute", days, None)[:2] == [15, 0]
    assert parts("weekday", days, None)[:2] == [3, 2]  # Thursday, Wednesday
    assert all(np.isnan(parts(f, days, None)[2]) for f in cons.CALENDAR)  # missing stays so
    dates = [
        float((dt.date(y, m, d) - dt.date(1970, 1, 1)).days)
        for y, m, d in ((2000, 2, 29), (1900, 3, 1), (1970, 1, 1), (2023, 12, 31))
    ]
    assert parts("year", dates, None) == [2000, 1900, 1970, 2023]
    assert parts("month", dates, None) == [2, 3, 1, 12]
    assert parts("day", dates, None) == [29, 1, 1, 31]
    assert parts("weekday", dates, None) == [1, 3, 3, 6]  # Tue, Thu, Thu, Sun


def test_days_in_month_knows_the_leap_years():
    year = np.array([1900, 2000, 2024, 2023, 2100, 2023, 2023, 2023, 2023, 2023, np.nan, 2023])
    month = np.array([2, 2, 2, 2, 2, 4, 1, 12, 13, 0, 2, np.nan])
    got = days_in_month(year, month)
    assert got[:8].tolist() == [28, 29, 29, 28, 28, 30, 31, 31]
    assert np.isnan(got[8:]).all()  # a month outside 1-12, or a missing part: missing
    every = np.arange(1, 13)
    for y in (1900, 1999, 2000, 2024):  # against the standard library
        want = [calendar.monthrange(y, m)[1] for m in every]
        assert days_in_month(np.full(12, float(y)), every.astype(float)).tolist() == want


# --- derived and conditioned rows -----------------------------------------------------------


def local_parts(column: pa.ChunkedArray) -> pd.DataFrame:
    """pandas' reading of a written timestamp column's wall-clock parts (an independent check)."""
    stamps = column.to_pandas()
    return pd.DataFrame(
        {
            "year": stamps.dt.year,
            "month": stamps.dt.month,
            "day": stamps.dt.day,
            "hour": stamps.dt.hour,
            "minute": stamps.dt.minute,
            "weekday": stamps.dt.day_of_week,
        }
    )


@pytest.mark.parametrize("name", ["t", "w"])
def test_derived_parts_agree_with_the_datetime_as_written(name):
    specs = (COLUMNS[name], COLUMNS["month"], COLUMNS["day"], COLUMNS["hour"])
    domain = Domain(specs)
    texts = [f"{p} == {p}({name})" for p in ("month", "day", "hour")]
    rules = Rules(domain, tuple(parse_constraint(t, "") for t in texts))
    unit = np.random.default_rng(3).random((4000, 4))
    ok = rules.apply(unit)
    assert ok.all()  # every derived part lies within its bounds
    table = domain.from_unit(unit)
    want = local_parts(table.column(name))
    for p in ("month", "day", "hour"):
        assert np.array_equal(table.column(p).to_numpy(), want[p].to_numpy())
    if name == "t":
        assert str(table.schema.field("t").type) == f"timestamp[s, tz={NY}]"


def test_a_derived_part_around_the_dst_change_is_the_wall_clock_hour():
    domain = Domain((COLUMNS["t"], COLUMNS["hour"]))
    rules = Rules(domain, (parse_constraint("hour == hour(t)", ""),))
    instants = [
        "2024-03-10T06:30:00+00:00",
        "2024-03-10T07:30:00+00:00",
        "2024-11-03T05:30:00+00:00",
        "2024-11-03T06:30:00+00:00",
    ]
    codes = np.array([[epoch_days(i) * 86400, 12.0] for i in instants])
    unit = domain.to_unit(codes)
    assert rules.apply(unit).all()
    assert domain.from_unit(unit).column("hour").to_pylist() == [1, 3, 1, 1]


def test_a_calendar_condition_keeps_exactly_the_rows_that_obey():
    domain = Domain((COLUMNS["t"], COLUMNS["x"]))
    rules = Rules(
        domain, (parse_constraint("hour(t) >= 5", ""), parse_constraint("weekday(t) <= 4", ""))
    )
    unit = np.random.default_rng(4).random((5000, 2))
    ok = rules.apply(unit.copy())
    local = local_parts(domain.from_unit(unit).column("t"))
    want = (local.hour >= 5) & (local.weekday <= 4)
    assert np.array_equal(ok, want.to_numpy()) and 0.4 < ok.mean() < 0.7


def test_days_in_month_keeps_out_the_dates_that_do_not_exist():
    specs = (COLUMNS["year"], COLUMNS["month"], COLUMNS["day"])
    domain = Domain(specs)
    rules = Rules(domain, (parse_constraint("day <= days_in_month(year, month)", ""),))
    unit = np.random.default_rng(5).random((20_000, 3))
    ok = rules.apply(unit.copy())
    table = domain.from_unit(unit).to_pandas()
    real = [d <= calendar.monthrange(y, m)[1] for y, m, d in table.itertuples(index=False)]
    assert np.array_equal(ok, np.array(real)) and 0.9 < ok.mean() < 0.99
    # the hard cases: Feb 29 of 1900 (not leap), 2000 and 2024 (leap), 2023; Feb 30, Apr 31
    codes = np.array(
        [
            [1900, 2, 29],
            [2000, 2, 29],
            [2024, 2, 29],
            [2023, 2, 29],
            [2023, 2, 28],
            [2024, 2, 30],
            [2023, 4, 31],
            [2023, 4, 30],
            [2023, 12, 31],
        ],
        dtype=float,
    )
    got = rules.apply(domain.to_unit(codes)).tolist()
    assert got == [False, True, True, False, True, False, False, True, True]


def test_a_missing_part_leaves_days_in_month_out():
    nullable = ColumnSpec("month", "integer", 1, 12, nullable=True)
    domain = Domain((COLUMNS["year"], nullable, COLUMNS["day"]))
    rules = Rules(domain, (parse_constraint("day <= days_in_month(year, month)", ""),))
    codes = np.array([[2023.0, 2.0, 29.0], [2024.0, 2.0, 29.0], [2023.0, 13.0, 31.0]])
    assert rules.apply(domain.to_unit(codes)).tolist() == [False, True, True]  # 13: missing


# --- through the real command ---------------------------------------------------------------


def dpsynth(*args) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "dpsynth_cli", *map(str, args)]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)


def synth(tmp_path: Path, table: pa.Table, schema: dict, name: str) -> pd.DataFrame:
    data, out = tmp_path / "in.parquet", tmp_path / f"{name}.parquet"
    pq.write_table(table, data)
    (tmp_path / "s.json").write_text(json.dumps(schema))
    args = ["synth", data, "--eps", "1", "--schema", tmp_path / "s.json", "-o", out]
    done = dpsynth(*args, "--seed", "1", "-q")
    assert done.returncode == 0, done.stderr
    return pq.read_table(out).to_pandas()


def real_dates(frame: pd.DataFrame) -> np.ndarray:
    days = [calendar.monthrange(y, m)[1] for y, m in zip(frame.year, frame.month, strict=True)]
    return frame.day.to_numpy() <= np.array(days)


def test_cli_every_synthetic_date_is_real(tmp_path):
    """Year, month and day as integer columns of real dates (1999-2001, 2000 a leap year): the
    model alone writes Feb 30 and the like; with day <= days_in_month(year, month), none."""
    rng = np.random.default_rng(6)
    first, end = (np.datetime64(d).astype(np.int64) for d in ("1999-01-01", "2002-01-01"))
    stamps = pd.to_datetime(rng.integers(first, end, 3000).astype("datetime64[D]"))
    table = pa.table({"year": stamps.year, "month": stamps.month, "day": stamps.day})
    columns = {
        "year": {"type": "integer", "lower": 1999, "upper": 2001},
        "month": {"type": "integer", "lower": 1, "upper": 12},
        "day": {"type": "integer", "lower": 1, "upper": 31},
    }
    free = synth(tmp_path, table, {"columns": columns}, "free")
    assert not real_dates(free).all()  # the test can fail: without the constraint, it does
    schema = {"columns": columns, "constraints": ["day <= days_in_month(year, month)"]}
    kept = synth(tmp_path, table, schema, "kept")
    assert len(kept) > 2500 and real_dates(kept).all()
    report = json.loads((tmp_path / "kept.parquet.report.json").read_text())
    assert report["constraints"]["conditioned"] == ["day <= days_in_month(year, month)"]


def test_cli_derived_parts_agree_with_their_datetime(tmp_path):
    """A zoned time_hour with month, day and hour columns: derived, they agree with its New York
    wall clock in every row (the model alone mostly disagrees)."""
    rng = np.random.default_rng(7)
    hours = rng.integers(0, 365 * 24, 3000) * 3600
    instants = np.datetime64("2013-01-01T05:00:00") + hours.astype("timedelta64[s]")
    stamps = pd.to_datetime(instants).tz_localize("UTC").tz_convert(NY)
    table = pa.table(
        {
            "time_hour": pa.array(stamps, pa.timestamp("s", NY)),
            "month": stamps.month,
            "day": stamps.day,
            "hour": stamps.hour,
        }
    )
    columns = {
        "time_hour": {
            "type": "datetime",
            "timezone": NY,
            "lower": "2013-01-01T00:00",
            "upper": "2013-12-31T23:59",
            "resolution": "hour",
        },
        "month": {"type": "integer", "lower": 1, "upper": 12},
        "day": {"type": "integer", "lower": 1, "upper": 31},
        "hour": {"type": "integer", "lower": 0, "upper": 23},
    }
    texts = ["month == month(time_hour)", "day == day(time_hour)", "hour == hour(time_hour)"]
    free = synth(tmp_path, table, {"columns": columns}, "free")
    derived = synth(tmp_path, table, {"columns": columns, "constraints": texts}, "derived")
    for out, agree in ((free, False), (derived, True)):
        local = out.time_hour.dt.tz_convert(NY)
        same = (
            (out.month == local.dt.month) & (out.day == local.dt.day) & (out.hour == local.dt.hour)
        )
        assert same.all() == agree and len(out) > 2500
    report = json.loads((tmp_path / "derived.parquet.report.json").read_text())
    want = dict(zip(["month", "day", "hour"], texts, strict=True))
    assert report["constraints"]["derived"] == want


def test_cli_a_calendar_function_of_the_wrong_kind_is_one_line_and_exit_2(
    runner, tmp_path, private_budget
):
    """Checked against the declarations before any row is read: no output, no spend."""
    from dpsynth_cli.cli import app

    pq.write_table(
        pa.table({"d": pa.array([0, 1, 2], pa.date32()), "h": [1, 2, 3]}), tmp_path / "in.parquet"
    )
    columns = {
        "d": {"type": "date", "lower": "1970-01-01", "upper": "1970-12-31"},
        "h": {"type": "integer", "lower": 0, "upper": 23},
    }
    (tmp_path / "s.json").write_text(
        json.dumps({"columns": columns, "constraints": ["h == hour(d)"]})
    )
    out = tmp_path / "out.csv"
    args = ["synth", str(tmp_path / "in.parquet"), "--eps", "1", "-o", str(out)]
    result = runner.invoke(app, [*args, "--schema", str(tmp_path / "s.json")])
    assert result.exit_code == 2 and not out.exists() and result.stderr.count("\n") == 1
    assert not private_budget.exists() or "releases" not in private_budget.read_text()
    assert "constraint \"h == hour(d)\": hour() takes a datetime column; 'd' is a date column" in (
        result.stderr
    )
