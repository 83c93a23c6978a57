"""Date and datetime columns measured as their wall-clock parts (issue 36, `wallclock`).

The parts (week, weekday, day, time of day) are public functions of the declared column: round
trips through `Clock.fractions` and `Clock.assemble` on the wall clock of a zoned column across
its DST changes; which parts a column gets; the daily and weekly shapes kept by `marginals` at
eps 1 (the old single attribute: hour-of-day TVD 0.3); and privacy: an audit of the one-way
release with the parts, whose mutant calibrates the noise to the table's columns instead of the
attributes it measures (the bug the parts invite), and neighbours through the real command.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from fractions import Fraction

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from pyarrow import csv as pa_csv

from dpsynth_cli.cli import app
from dpsynth_cli.domain import Domain
from dpsynth_cli.engine.rows import as_rows
from dpsynth_cli.evaluate.cycles import cycle_codes
from dpsynth_cli.mechanisms import daily, pairs
from dpsynth_cli.privacy import noise
from dpsynth_cli.privacy.ledger import Ledger
from dpsynth_cli.schema_file import schema_column
from tests.audit import audit
from tests.test_neighbours import compare, fix_releases
from tests.test_pairs import one_way_audit_samples
from tests.test_privacy_audits import report, stream

ZONE = "America/New_York"
YEAR = {"lower": "2024-01-01T00:00", "upper": "2024-12-31T23:59"}


def domain(**columns: dict) -> Domain:
    return Domain(tuple(schema_column("test", name, spec) for name, spec in columns.items()))


def rows_of(dom: Domain, values: np.ndarray):
    """Cube rows of value codes with the domain's public facts (as synth gives them)."""
    return replace(
        as_rows(dom.to_cube(values)),
        lead=dom.lead_bits(),
        codes=dom.cube_codes(),
        flagged=dom.cube_flags(),
        coded_missing=dom.cube_coded_missing(),
        clocks=dom.cube_clocks(),
    )


def seconds(stamps: list[str]) -> np.ndarray:
    return pd.to_datetime(stamps, utc=True).as_unit("s").astype("int64").to_numpy()


@pytest.mark.parametrize(
    "spec, parts",
    [
        ({"type": "datetime", **YEAR, "resolution": "hour"}, ["week", "weekday", "time"]),
        ({"type": "datetime", **YEAR, "resolution": "day"}, ["week", "weekday"]),
        ({"type": "date", "lower": "2024-01-01", "upper": "2024-12-31"}, ["week", "weekday"]),
        ({"type": "date", "lower": "2024-01-01", "upper": "2024-01-13"}, []),
        ({"type": "datetime", "lower": "2024-01-01", "upper": "2024-01-03T23:00"}, ["day", "time"]),
        ({"type": "datetime", "lower": "2024-01-01T08:00", "upper": "2024-01-01T18:00"}, ["time"]),
    ],
)
def test_parts_of_a_column(spec, parts):
    (clock,) = domain(t=spec).cube_clocks()
    assert [name for name, _ in clock.parts()] == parts


def test_time_cells_nest_in_whole_hours():
    dom = domain(t={"type": "datetime", **YEAR, "timezone": ZONE})
    attrs = pairs.attributes_of(rows_of(dom, np.zeros((1, 1))))
    time_ = next(a for a in attrs if a.part and a.part.name == "time")
    assert time_.atoms == 24 * 32
    for signal in (1.0, 1e4, 1e9):
        sized = time_.with_size(signal)
        assert sized.size % 24 == 0 and time_.atoms % sized.size == 0
    assert 24 % time_.pair_groups == 0 or time_.pair_groups % 24 == 0


@pytest.mark.parametrize("zone", [ZONE, None])
def test_parts_round_trip_on_the_wall_clock(zone):
    """Whole hours through the year, both DST changes included: parts, then the value again
    (`fractions` then `assemble`), written exactly as they were but for the hour the fall-back
    repeats (its first instant); the parts are the wall clock's (01:00 and 03:00 local on the
    spring-forward day are hours 1 and 3)."""
    spec = {"type": "datetime", **YEAR, "resolution": "hour"}
    dom = domain(t={**spec, "timezone": zone} if zone else spec)
    stamps = ["2024-03-10T06:00Z", "2024-03-10T07:00Z", "2024-11-03T05:00Z", "2024-11-03T06:00Z"]
    hours = seconds(["2024-01-01T05:00Z"])[0] + 3600 * np.arange(0, 8760, 7)
    codes = np.concatenate([seconds(stamps), hours]).astype(np.float64)[:, None]
    X = dom.to_cube(codes)
    (clock,) = dom.cube_clocks()
    parts = clock.fractions(X)
    hour = np.floor(parts["time"][:4] * 24)
    assert hour.tolist() == ([1, 3, 1, 1] if zone else [6, 7, 5, 6])
    back = X.copy()
    back[:, clock.column] = clock.assemble(parts, np.random.default_rng(0))
    written = dom.written_codes(back)[:, 0]
    if zone:  # the repeated hour (01:00 EST after 01:00 EDT): the wall clock's first instant
        repeated = codes[:, 0] == seconds(["2024-11-03T06:00Z"])[0]
        assert np.array_equal(written[repeated], codes[repeated, 0] - 3600)
        written, codes = written[~repeated], codes[~repeated]
    assert np.array_equal(written, codes[:, 0])


def test_a_missing_date_stays_missing():
    dom = domain(d={"type": "date", "lower": "2024-01-01", "upper": "2024-12-31", "nullable": True})
    codes = np.array([[19723.0], [19724.0], [dom.columns[0].code_upper]])
    X = dom.to_cube(codes)
    (clock,) = dom.cube_clocks()
    parts = clock.fractions(X)
    assert np.isnan(parts["week"][2]) and not np.isnan(parts["week"][:2]).any()
    X[:, clock.column] = clock.assemble(parts, np.random.default_rng(0))
    written = dom.written_codes(X)[:, 0]
    assert written[:2].tolist() == [19723.0, 19724.0] and np.isnan(written[2])


# -- what a person sees: the day's and the week's shapes -------------------------------------------

DAYS = pd.date_range("2024-01-01", "2024-12-31", freq="D")


def office_table(n: int, seed: int = 0) -> tuple[pa.Table, dict]:
    """n events on weekdays only, between 08:00 and 18:59 local time (most around 10 and 15),
    with a category and a number that depend on the hour."""
    rng = np.random.default_rng(seed)
    weekdays = DAYS[DAYS.day_of_week < 5]
    day = weekdays[rng.integers(0, weekdays.size, n)]
    hour = np.clip(
        np.where(rng.random(n) < 0.5, rng.normal(10, 1.2, n), rng.normal(15, 1.5, n)), 8, 18.99
    )
    local = day + pd.to_timedelta(np.floor(hour).astype(int), unit="h")
    stamps = local.tz_localize(ZONE).tz_convert("UTC").strftime("%Y-%m-%dT%H:00:00Z")
    desk = np.where(hour < 12, "front", np.where(rng.random(n) < 0.7, "back", "phone"))
    minutes = np.clip(np.round(rng.gamma(2.0, 5.0 + hour)), 0, 240).astype(int)
    table = pa.table({"when": list(stamps), "desk": desk, "minutes": minutes})
    table = table.append_column("queue", pa.array(rng.integers(0, 10, n)))
    schema = {
        "columns": {
            "when": {"type": "datetime", **YEAR, "timezone": ZONE, "resolution": "hour"},
            "desk": {"type": "category", "levels": ["front", "back", "phone"]},
            "minutes": {"type": "integer", "lower": 0, "upper": 240},
            "queue": {"type": "integer", "lower": 0, "upper": 9},
        }
    }
    return table, schema


def cycles(table: pa.Table, spec) -> dict[str, np.ndarray]:
    codes = pd.to_datetime(table.column("when").to_pandas(), utc=True, format="ISO8601")
    counts = cycle_codes(codes.dt.as_unit("s").astype("int64").to_numpy().astype(float), spec)
    return {
        k: np.bincount(v, minlength=24 if k == "hour_of_day" else 12) for k, v in counts.items()
    }


def tvd(a: np.ndarray, b: np.ndarray) -> float:
    return 0.5 * float(np.abs(a / a.sum() - b / b.sum()).sum())


def synth_csv(
    runner, tmp_path, monkeypatch, table: pa.Table, schema: dict, mechanism: str, eps: str = "1"
) -> tuple[dict, pa.Table]:
    """`synth --seed 1` of the table written as a CSV with its schema: (report, output)."""
    monkeypatch.chdir(tmp_path)
    pa_csv.write_csv(table, "in.csv")
    (tmp_path / "schema.json").write_text(json.dumps(schema))
    args = ["synth", "in.csv", "--schema", "schema.json", "--eps", eps, "--seed", "1"]
    result = runner.invoke(app, [*args, "--mechanism", mechanism, "-o", "out.csv"])
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "out.csv.report.json").read_text())
    return report, pa_csv.read_csv(tmp_path / "out.csv")


def test_marginals_keep_the_day_and_the_week(runner, tmp_path, monkeypatch):
    """At eps 1 on 20,000 rows (issue 36's targets): hour-of-day and weekday TVD <= 0.05, every
    time on the declared whole hours (one attribute of 1,024 cells: hour TVD about 0.3, weekends
    as common as weekdays, weekday TVD about 0.2)."""
    table, schema = office_table(20000)
    _, synthetic = synth_csv(runner, tmp_path, monkeypatch, table, schema, "marginals")
    spec = schema_column("test", "when", schema["columns"]["when"])
    real, fake = cycles(table, spec), cycles(synthetic, spec)
    assert tvd(real["hour_of_day"], fake["hour_of_day"]) <= 0.05
    assert tvd(real["weekday"], fake["weekday"]) <= 0.05
    stamps = pd.to_datetime(synthetic.column("when").to_pandas(), utc=True, format="ISO8601")
    assert (stamps.dt.minute == 0).all() and (stamps.dt.second == 0).all()


def test_privtree_keeps_the_day_and_the_week(runner, tmp_path, monkeypatch):
    """PrivTree's leaves span days along a year: their points take the time of day and the
    weekday from the noisy histograms (`mechanisms.daily`; before: hour TVD about 0.3)."""
    table, schema = office_table(20000)
    table = table.drop_columns(["queue", "desk"])
    schema["columns"] = {k: schema["columns"][k] for k in ("when", "minutes")}
    report_, synthetic = synth_csv(runner, tmp_path, monkeypatch, table, schema, "privtree")
    assert "privtree-time-of-day" in [e["step"] for e in report_["ledger"]["entries"]]
    spec = schema_column("test", "when", schema["columns"]["when"])
    real, fake = cycles(table, spec), cycles(synthetic, spec)
    assert tvd(real["hour_of_day"], fake["hour_of_day"]) <= 0.05
    assert tvd(real["weekday"], fake["weekday"]) <= 0.05


# -- privacy ---------------------------------------------------------------------------------------

AUDIT_EPS = Fraction(6)
AUDIT_RUNS = 10000


def audit_rows():
    """X: 40 rows of a three-week datetime (parts: weeks, weekday, time) and a 4-code integer;
    X': X plus one row (its cube row too)."""
    dom = domain(
        t={
            "type": "datetime",
            "lower": "2024-01-01",
            "upper": "2024-01-21T23:00",
            "resolution": "hour",
        },
        n={"type": "integer", "lower": 0, "upper": 3},
    )
    rng = np.random.default_rng(9)
    start = seconds(["2024-01-01T00:00Z"])[0]
    values = np.column_stack([start + 3600 * rng.integers(0, 21 * 24, 40), rng.integers(0, 4, 40)])
    added = np.array([[start + 3600 * (7 * 24 + 13), 3.0]])
    base = rows_of(dom, values.astype(np.float64))
    plus = rows_of(dom, np.vstack([values, added]).astype(np.float64))
    return base, plus, dom.to_cube(added)


def one_way_samples(variant: str, monkeypatch) -> tuple[np.ndarray, np.ndarray, Fraction]:
    """Per run, the least excess of the noisy one-way counts at the added row's cells over X's
    true counts, over the 4 attributes (week, weekday, time, n): threshold events of likelihood
    ratio up to e^(one-way share)."""
    base, plus, added = audit_rows()
    if variant == "columns, not attributes":  # the noise for the table's 2 columns
        columns = property(lambda p: noise.as_scale(Fraction(p.sensitivity * 2) / p.one_way))
        monkeypatch.setattr(pairs.Plan, "one_way_scale", columns)
    plan = pairs.plan(AUDIT_EPS, 2000, base, "add-remove")
    attrs = plan.attributes
    assert [a.part.name if a.part else None for a in attrs] == ["week", "weekday", "time", None]
    value = [a.atom_value()[a.encode(added)[0]] for a in attrs]

    a, b = one_way_audit_samples(plan, base, plus, value, f"wallclock/{variant}", AUDIT_RUNS)
    return a, b, plan.one_way


@pytest.mark.heavy
@pytest.mark.parametrize("variant", ["correct", "columns, not attributes"])
def test_one_way_audit_with_parts(variant, monkeypatch):
    """The one-way release of a datetime's 3 parts and a number stays within its share (with
    power: above 0.6 of it); noise calibrated to the 2 columns (half the scale) exceeds it."""
    begin = time.perf_counter()
    a, b, share = one_way_samples(variant, monkeypatch)
    result = audit(a, b, names=["one-way excess"])
    report(
        f"wallclock one-way eps={float(share):.2f} {variant}", result, time.perf_counter() - begin
    )
    if variant == "correct":
        result.assert_within(share)
        assert result.epsilon_lower > 0.6 * float(share)
    else:
        result.assert_exceeds(share)


def daily_samples(variant: str, monkeypatch) -> tuple[np.ndarray, np.ndarray, Fraction]:
    """Per run, the least excess of the noisy time-of-day and weekday counts at the added row's
    cells over X's true counts (`mechanisms.daily`): threshold events of likelihood ratio up
    to e^(eps_D)."""
    base, plus, added = audit_rows()
    (clock,) = base.clocks
    if variant == "one histogram fewer":  # the noise for 1 histogram where there are 2
        real = daily.plan

        def fewer(*args, **kwargs):
            dp = real(*args, **kwargs)
            return replace(dp, scale=noise.as_scale(Fraction(dp.sensitivity) / dp.epsilon))

        monkeypatch.setattr(daily, "plan", fewer)
    dp = daily.plan(AUDIT_EPS / 2, (clock,), 2000, "add-remove")
    assert dp.histograms == 2
    parts = clock.fractions(added)
    cell = {
        "time": int(parts["time"][0] * dp.time_cells[0]),
        "weekday": int(parts["weekday"][0] * 7),
    }

    def counts(rows):
        (hist,) = rows.collect(lambda: daily.CycleCounts((clock,))).counts
        t = hist["time"]
        return {"time": t.reshape(dp.time_cells[0], -1).sum(axis=1), "weekday": hist["weekday"]}

    truth = counts(base)
    out = []
    for side, rows in (("X", base), ("X'", plus)):
        exact, src = counts(rows), stream(f"daily/{variant}/{side}")
        draws = noise.discrete_laplace(src, dp.scale, 2 * AUDIT_RUNS).reshape(AUDIT_RUNS, 2)
        excess = np.column_stack(
            [exact[n][cell[n]] - truth[n][cell[n]] + draws[:, i] for i, n in enumerate(cell)]
        )
        out.append(excess.min(axis=1))
    return out[0], out[1], dp.epsilon


@pytest.mark.heavy
@pytest.mark.parametrize("variant", ["correct", "one histogram fewer"])
def test_daily_audit(variant, monkeypatch):
    """PrivTree's time-of-day and weekday release stays within its share (with power); noise
    calibrated to one histogram where there are two exceeds it."""
    begin = time.perf_counter()
    a, b, share = daily_samples(variant, monkeypatch)
    result = audit(a, b, names=["daily excess"])
    report(f"daily eps={float(share):.2f} {variant}", result, time.perf_counter() - begin)
    if variant == "correct":
        result.assert_within(share)
        assert result.epsilon_lower > 0.6 * float(share)
    else:
        result.assert_exceeds(share)


def test_daily_release_is_ledgered_and_sums():
    base, _, _ = audit_rows()
    for eps in (Fraction(1, 2), Fraction(3)):
        dp = daily.plan(daily.share(eps), base.clocks, 5000, "add-remove")
        ledger = Ledger(eps)
        (shape,) = daily.release(base, dp, noise.RandomSource.seeded(1), ledger)
        (spend,) = ledger.spends
        assert spend.epsilon == dp.epsilon and dp.time_cells[0] % 24 == 0
        assert shape.time.cells == dp.time_cells[0] and shape.weekday.size == 7


def test_spends_sum_to_epsilon_with_parts():
    base, _, _ = audit_rows()
    for eps in (Fraction(1, 2), Fraction(1), Fraction(7, 3)):
        mp = pairs.plan(eps, 5000, base, "add-remove")
        ledger = Ledger(eps)
        zeros = [np.zeros(a.values, dtype=np.int64) for a in mp.attributes]
        pairs.measure_one_way(zeros, mp, noise.RandomSource.seeded(1), ledger)
        pairs.record_spends(mp, ledger)
        assert sum(s.epsilon for s in ledger.spends) == eps


NEIGHBOUR_ROWS = {
    "out of bounds": "2031-05-01T10:00:00Z,3",
    "in the DST gap": "2024-03-10T02:30:00,1",
    "not a time": "soon,2",
    "missing": ",0",
}


@pytest.mark.parametrize("mechanism", ["marginals", "privtree"])
@pytest.mark.parametrize("row", NEIGHBOUR_ROWS)
def test_neighbours_with_a_datetime_are_indistinguishable(
    runner, tmp_path, monkeypatch, row, mechanism
):
    """The real command on a datetime (parts) and an integer column, with and without one
    adversarial row, every ledgered release forced equal: identical output, report, messages."""
    fix_releases(monkeypatch)
    schema = {
        "columns": {
            "when": {
                "type": "datetime",
                **YEAR,
                "timezone": ZONE,
                "resolution": "hour",
                "nullable": True,
            },
            "n": {"type": "integer", "lower": 0, "upper": 3},
        }
    }
    rows = [(f"2024-0{1 + i % 9}-1{i % 10}T{i % 24:02d}:00:00Z", str(i % 4)) for i in range(30)]

    def write(d, table):
        (d / "in.csv").write_text("when,n\n" + "".join(f"{a},{b}\n" for a, b in table))

    extra = tuple(NEIGHBOUR_ROWS[row].split(","))
    args = ["in.csv", "--schema", "schema.json", "--mechanism", mechanism]
    seen = compare(runner, tmp_path, monkeypatch, write, rows, extra, args, "out.csv", schema)
    assert seen["exit"] == 0, seen["messages"]
    report_ = json.loads(seen["outputs"]["out.csv.report.json"])
    if mechanism == "privtree":  # the time of day and weekday measured (`mechanisms.daily`)
        assert report_["mechanism"]["time_of_day"]["histograms"] == 2
        return
    parts = [a.get("part") for a in report_["mechanism"]["attributes"]]
    assert parts == ["week", "time", None]  # a weekday needs more signal (`pairs.modelled`)
