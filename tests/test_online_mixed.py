"""online-replay on mixed streams and a date timeline (issue 25): the schema types synth accepts
as released columns (levels first, the mixed metric), checkpoints by time on a public date or
datetime --order-by column, the weak-bound notice, resume with --state, neighbouring files
through the real CLI (CSV and Parquet, the mixed-types tests' adversarial cells), and audits of
the levels-first engine with mutants (a broken mechanism, a timeline read from a protected
column) that the tests must catch."""

from __future__ import annotations

import datetime as dt
import json
from fractions import Fraction
from functools import partial
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from dpsynth_cli.domain import ColumnSpec
from dpsynth_cli.online import stream
from dpsynth_cli.online.cube import StreamCube
from dpsynth_cli.online.engine import OnlineEngine, apriori_bound
from dpsynth_cli.online.params import OnlinePlan
from dpsynth_cli.online.replay import REPORT_NAME
from dpsynth_cli.online.timeline import Timeline, TimelineBuilder, time_rule
from tests.test_neighbours_mixed import ROWS as MIXED_ROWS
from tests.test_neighbours_mixed import SCHEMA as MIXED_SCHEMA
from tests.test_online_cli import listing, one_line_error, run
from tests.test_online_engine import TunedPlan, audit_with_mutant, src

SCHEMA = {"columns": {k: v for k, v in MIXED_SCHEMA["columns"].items()}}
HEADER = "when,sex,ward,day,smoker,n,at"
START = dt.date(2021, 1, 1)


def mixed_lines(rows: int, seed: int = 0) -> list[str]:
    """A stream of `rows` rows, 10 a day from 2021-01-01 (`when`, the public timeline)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(rows):
        when = START + dt.timedelta(days=i // 10)
        sex = "FM"[int(rng.integers(2))]
        ward = "ABC"[int(rng.integers(3))]
        day = (START + dt.timedelta(days=int(rng.integers(300)))).isoformat()
        smoker = ["true", "false"][int(rng.integers(2))]
        n = "" if rng.random() < 0.1 else str(int(rng.integers(10)))
        at = f"2021-0{1 + int(rng.integers(9))}-1{int(rng.integers(10))}T10:00:00"
        out.append(f"{when.isoformat()},{sex},{ward},{day},{smoker},{n},{at}")
    return out


def write(work: Path, lines: list[str], name: str = "s.csv", schema: dict = SCHEMA) -> Path:
    work.mkdir(parents=True, exist_ok=True)
    (work / "schema.json").write_text(json.dumps(schema))
    path = work / name
    path.write_text(HEADER + "\n" + "".join(line + "\n" for line in lines))
    return path


COMMON = ["--eps", 1, "--order-by", "when", "--schema", "schema.json", "--seed", 3]


# -- releases, report, notices ---------------------------------------------------------------------
def test_mixed_stream_releases_every_type_by_time(runner, tmp_path, monkeypatch):
    """Monthly checkpoints on a date timeline: each release holds exactly the rows before the
    first of its month, with the declared types and levels; the report names each checkpoint's
    time and states the bound in the mixed metric; the vacuous bound is said once on stderr."""
    write(tmp_path, mixed_lines(1000))
    monkeypatch.chdir(tmp_path)
    result = run(runner, "s.csv", *COMMON, "--checkpoints", "monthly", "--out-dir", "rel")
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "rel" / REPORT_NAME).read_text())
    # 10 rows a day from Jan 1: the timeline ends on Apr 10; Feb 1, Mar 1, Apr 1 are reached
    times = [c["time"] for c in report["checkpoints"]]
    assert times == ["2021-02-01", "2021-03-01", "2021-04-01"]
    assert [c["rows"] for c in report["checkpoints"]] == [310, 590, 900]
    last = report["checkpoints"][-1]
    assert last["file"] == "release-000000000900-2021-04-01.parquet"
    assert "w1_bound_mixed_metric" in last and "w1_bound_unit_cube" not in last
    assert report["metric"]["definition"].startswith("rho(x, y)")
    assert report["mechanism"]["split_order"].startswith("level columns first")
    out = pq.read_table(tmp_path / "rel" / last["file"])
    assert out.num_rows == 900 and out.schema.names == list(SCHEMA["columns"])
    assert set(out.column("sex").to_pylist()) <= {"F", "M"}
    assert set(out.column("ward").to_pylist()) <= {"A", "B", "other"}
    assert out.schema.field("day").type == pa.date32()
    assert pa.types.is_timestamp(out.schema.field("at").type)
    assert out.schema.field("smoker").type == pa.bool_()
    assert result.output.count("vacuous a-priori W1 bound") == 1


def test_weak_bound_is_said_once_in_plain_words(monkeypatch):
    """A bound in [0.5, 1) at a release of this run: one notice, in words, no "vacuous"."""
    from dpsynth_cli.online_cli import vacuous_notice

    checkpoints = [
        {"rows": 8, "vacuous": True, "weak": True},
        {"rows": 16, "vacuous": False, "weak": True},
        {"rows": 32, "vacuous": False, "weak": True},
    ]
    said = vacuous_notice({"checkpoints": checkpoints, "checkpoints_this_run": [16, 32]})
    assert len(said) == 1 and "weak a-priori W1 bound" in said[0] and "vacuous" not in said[0]
    assert "every release of this run (up to 32 rows)" in said[0]
    both = vacuous_notice({"checkpoints": checkpoints, "checkpoints_this_run": [8, 16, 32]})
    assert len(both) == 1 and "vacuous" in both[0] and "2 more have a weak one" in both[0]
    fine = [{"rows": 8, "vacuous": False, "weak": False}]
    assert vacuous_notice({"checkpoints": fine, "checkpoints_this_run": [8]}) == []


def test_bound_is_in_the_mixed_metric():
    """Levels first: until the level bits are split (t < t_4 here) every cell spans two levels,
    diameter 1 in the mixed metric, so the bound is vacuous with the level column and not
    without it; the flags follow the bound."""
    plain = OnlinePlan(Fraction(1), 3, "replace", "tuned")
    mixed = OnlinePlan(Fraction(1), 3, "replace", "tuned", (3,))
    for t in (2, 4, 8, 15):
        assert apriori_bound(mixed, t)["w1_bound_mixed_metric"] >= 1.0
        assert apriori_bound(mixed, t)["vacuous"]
    for t in (2**12, 2**16, 2**20, 2**24):
        a, b = apriori_bound(plain, t), apriori_bound(mixed, t)
        assert a["w1_bound_mixed_metric"] == a["w1_bound_unit_cube"]
        assert "w1_bound_unit_cube" not in b
        assert b["weak"] == (b["w1_bound_mixed_metric"] >= 0.5)
        assert b["vacuous"] == (b["w1_bound_mixed_metric"] >= 1.0)


# -- checkpoints by time ---------------------------------------------------------------------------
def test_time_rules():
    day = 86400
    seven = time_rule("every:7d")
    assert seven is not None and seven.every == 7 * day
    origin = 18628 * day + 3600 * 5  # 2021-01-01T05:00: the grid starts at that midnight
    assert seven.points(origin, -np.inf, origin + 15 * day) == [18635 * day, 18642 * day]
    assert seven.points(origin, 18635 * day, origin + 15 * day) == [18642 * day]
    monthly = time_rule("monthly")
    feb = dt.datetime(2021, 2, 1, tzinfo=dt.UTC).timestamp()
    mar = dt.datetime(2021, 3, 1, tzinfo=dt.UTC).timestamp()
    assert monthly.points(origin, -np.inf, mar) == [feb, mar]
    assert time_rule("every:100") is None and time_rule("pow2") is None
    assert time_rule("every:12h").every == 12 * 3600


def test_timeline_is_run_length_coded_across_batches():
    b = TimelineBuilder("when")
    b.add(pa.array(["2021-01-01", "2021-01-01", "2021-01-02"]))
    b.add(pa.array(["2021-01-02", "2021-01-05"]))
    line = b.build()
    assert line.ends.tolist() == [2, 4, 5]
    assert line.rows_before(18629 * 86400) == 2 and line.time_of_row(3) == 18629 * 86400


@pytest.mark.parametrize(
    "flags, code, says",
    [
        (["--checkpoints", "monthly"], 2, "--order-by"),  # no timeline
        (["--order-by", "when", "--checkpoints", "every:0d"], 2, "positive interval"),
        (["--order-by", "sex", "--checkpoints", "monthly"], 2, "synthesised"),
    ],
)
def test_time_checkpoint_usage_errors(runner, tmp_path, monkeypatch, flags, code, says):
    write(tmp_path, mixed_lines(30))
    monkeypatch.chdir(tmp_path)
    result = run(runner, "s.csv", "--eps", 1, "--schema", "schema.json", *flags, "--out-dir", "r")
    one_line_error(result, code)
    assert says in result.output and not (tmp_path / "r").exists()


def test_times_that_are_not_times_are_a_data_error(runner, tmp_path, monkeypatch):
    lines = mixed_lines(30)
    lines[5] = "soon" + lines[5][10:]
    write(tmp_path, lines)
    monkeypatch.chdir(tmp_path)
    args = ["--eps", 1, "--order-by", "when", "--schema", "schema.json"]
    result = run(runner, "s.csv", *args, "--checkpoints", "every:7d", "--out-dir", "r")
    one_line_error(result, 1)
    assert "not a date or time" in result.output and not (tmp_path / "r").exists()


# -- resume --------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["whole", "new"])
def test_resume_a_mixed_stream_by_time(runner, tmp_path, monkeypatch, mode):
    """Run 1 on 45 days, run 2 on 100 days (whole table, or only the new rows): the weekly grid
    keeps its origin, each checkpoint is released once, earlier files untouched. A state is
    refused for a schema whose levels differ (exit 3)."""
    lines = mixed_lines(1000)
    write(tmp_path, lines[:450], "first.csv")
    write(tmp_path, lines if mode == "whole" else lines[450:], "second.csv")
    monkeypatch.chdir(tmp_path)
    common = [*COMMON, "--checkpoints", "every:7d", "--out-dir", "rel", "--state", "st"]
    assert run(runner, "first.csv", *common).exit_code == 0
    before = listing(tmp_path / "rel")
    result = run(runner, "second.csv", *common, "--input-mode", mode)
    assert result.exit_code == 0, result.output
    after = listing(tmp_path / "rel")
    assert all(after[k] == v for k, v in before.items() if k != REPORT_NAME)
    report = json.loads(after[REPORT_NAME])
    times = [c["time"] for c in report["checkpoints"]]
    week = [(START + dt.timedelta(days=7 * k)).isoformat() for k in range(1, 15)]
    assert times == week  # Jan 8 .. Apr 9: rows until Apr 10
    assert [c["rows"] for c in report["checkpoints"]] == [70 * k for k in range(1, 15)]
    assert report["checkpoints_this_run"] == [70 * k for k in range(7, 15)]
    # day 45 (run 1's last) is before Feb 19 (the 7th checkpoint): run 2 releases it
    other = json.loads((tmp_path / "schema.json").read_text())
    other["columns"]["ward"]["levels"] = ["B", "A", "other"]  # the same bounds, other levels
    (tmp_path / "schema.json").write_text(json.dumps(other))
    refused = run(runner, "second.csv", *common, "--input-mode", mode)
    assert refused.exit_code == 3 and "levels of column 'ward'" in refused.output


def test_new_rows_before_the_state_last_time_are_refused(runner, tmp_path, monkeypatch):
    lines = mixed_lines(400)
    write(tmp_path, lines[200:], "first.csv")
    write(tmp_path, lines[:200], "second.csv")
    monkeypatch.chdir(tmp_path)
    common = [*COMMON, "--checkpoints", "every:7d", "--out-dir", "rel", "--state", "st"]
    assert run(runner, "first.csv", *common).exit_code == 0
    result = run(runner, "second.csv", *common, "--input-mode", "new")
    assert result.exit_code == 3 and "begin before the last time" in result.output
    assert result.output.count("error") == 1


# -- neighbouring files through the real CLI -------------------------------------------------------
def forced_feed(monkeypatch) -> None:
    """The values the mechanism counts forced equal on both sides (tests/test_online_cli.py):
    what is left to differ is what a value decides outside the ledger."""
    feed = OnlineEngine.feed
    monkeypatch.setattr(
        OnlineEngine, "feed", lambda self, X, *a, **k: feed(self, np.full_like(X, 0.3), *a, **k)
    )


def neighbours(runner, tmp_path, monkeypatch, make, args) -> list[tuple]:
    """Base and neighbour (`make(work, side)` writes the input) through the CLI, seeded alike."""
    seen = []
    for side in ("base", "neighbour"):
        work = tmp_path / side
        name = make(work, side)
        monkeypatch.chdir(work)
        result = run(runner, name, *args, "--out-dir", "rel", "--state", "st")
        seen.append((result.exit_code, result.output, listing(work / "rel")))
    return seen


CHECKPOINTS = ["--checkpoints", "every:30d"]


@pytest.mark.parametrize("row", [*MIXED_ROWS, "not forced"])
def test_mixed_csv_neighbours_are_indistinguishable(runner, tmp_path, monkeypatch, row):
    """The row at time 302 of 1000 (level 8: counted from t = 512 on) replaced by an adversarial
    one (its time kept): releases, file names and checkpoint times, report, messages and exit
    code identical once the counted values are forced equal. "not forced" shows that the
    comparison can fail."""
    if row != "not forced":
        forced_feed(monkeypatch)

    def make(work: Path, side: str) -> str:
        lines = mixed_lines(1000)
        if side == "neighbour":
            lines[301] = lines[301][:10] + "," + MIXED_ROWS.get(row, "M,B,,false,7,")
        write(work, lines)
        return "s.csv"

    seen = neighbours(runner, tmp_path, monkeypatch, make, [*COMMON, *CHECKPOINTS])
    assert seen[0][0] == 0 and len(seen[0][2]) == 4, seen[0][1]
    if row == "not forced":
        name = "release-000000000900-2021-04-01.parquet"
        assert seen[0][2][name] != seen[1][2][name]
    else:
        assert seen[0] == seen[1]


CONSTRAINED = {**SCHEMA, "constraints": ["day >= floor(at)", "n <= 5"]}


@pytest.mark.parametrize("row", ["bad date", "all missing", "undeclared level"])
def test_constrained_neighbours_are_indistinguishable(runner, tmp_path, monkeypatch, row):
    """Declared constraints condition each release on the released counts only: neighbours
    stay identical, and every release obeys them."""
    forced_feed(monkeypatch)

    def make(work: Path, side: str) -> str:
        lines = mixed_lines(1000)
        if side == "neighbour":
            lines[301] = lines[301][:10] + "," + MIXED_ROWS[row]
        write(work, lines, schema=CONSTRAINED)
        return "s.csv"

    seen = neighbours(runner, tmp_path, monkeypatch, make, [*COMMON, *CHECKPOINTS])
    assert seen[0][0] == 0 and len(seen[0][2]) == 4, seen[0][1]
    assert seen[0] == seen[1]
    out = pq.read_table(pa.BufferReader(seen[0][2]["release-000000000900-2021-04-01.parquet"]))
    n = out.column("n").to_numpy(zero_copy_only=False)
    assert np.all(np.isnan(n) | (n <= 5))


def parquet_rows(lines: list[str]) -> pa.Table:
    """The CSV stream as typed Parquet: when date32, sex dictionary text, smoker bool, day
    date32, n int64, at timestamp[us, UTC]."""
    cells = [line.split(",") for line in lines]
    cols = list(zip(*cells, strict=True))

    def days(texts):
        epoch = dt.date(1970, 1, 1)
        return [None if not t else (dt.date.fromisoformat(t) - epoch).days for t in texts]

    def micros(texts):
        return [
            None if not t else int(dt.datetime.fromisoformat(t + "+00:00").timestamp() * 1e6)
            for t in texts
        ]

    return pa.table(
        {
            "when": pa.array(days(cols[0]), pa.date32()),
            "sex": pa.array(cols[1], pa.string()).dictionary_encode(),
            "ward": pa.array(cols[2], pa.string()),
            "day": pa.array(days(cols[3]), pa.date32()),
            "smoker": pa.array([c == "true" for c in cols[4]], pa.bool_()),
            "n": pa.array([int(c) if c else None for c in cols[5]], pa.int64()),
            "at": pa.array(micros(cols[6]), pa.timestamp("us", "UTC")),
        }
    )


PARQUET_NEIGHBOURS = {
    "undeclared level": {"sex": "X"},
    "null boolean": {"smoker": None},
    "extreme date": {"day": -(2**31)},
    "extreme time": {"at": 2**63 - 1},
    "earliest time": {"at": -(2**63) + 1, "n": -(2**63)},
}


@pytest.mark.parametrize("row", PARQUET_NEIGHBOURS)
def test_mixed_parquet_neighbours_are_indistinguishable(runner, tmp_path, monkeypatch, row):
    forced_feed(monkeypatch)

    def make(work: Path, side: str) -> str:
        work.mkdir(parents=True, exist_ok=True)
        (work / "schema.json").write_text(json.dumps(SCHEMA))
        table = parquet_rows(mixed_lines(1000))
        if side == "neighbour":
            for col, value in PARQUET_NEIGHBOURS[row].items():
                cells = table.column(col).to_pylist()
                cells[301] = value
                field = table.schema.field(col)
                kind = pa.string() if pa.types.is_dictionary(field.type) else field.type
                array = pa.array(cells, kind)
                if pa.types.is_dictionary(field.type):
                    array = array.dictionary_encode()
                table = table.set_column(table.schema.get_field_index(col), col, array)
        pq.write_table(table, work / "s.parquet")
        return "s.parquet"

    seen = neighbours(runner, tmp_path, monkeypatch, make, [*COMMON, *CHECKPOINTS])
    assert seen[0][0] == 0 and len(seen[0][2]) == 4, seen[0][1]
    assert seen[0] == seen[1]


def test_timeline_from_a_protected_column_is_caught(runner, tmp_path, monkeypatch):
    """Mutant: the checkpoint grid starts at the earliest value of the synthesised `day`
    column instead of the declared --order-by column's first time. A neighbour whose
    protected day is earlier moves the grid: file names and checkpoint times differ, and the
    comparison must see it (the correct code passes it: the tests above)."""
    forced_feed(monkeypatch)
    original = stream.open_stream

    def protected_origin(read, specs, order_by, timeline=False):
        rows = original(read, specs, order_by, timeline)
        day = pc.min(read.read_all().column("day").cast(pa.date32())).as_py()
        early = float(day.toordinal() - dt.date(1970, 1, 1).toordinal()) * 86400
        line = rows.timeline
        rows.timeline = Timeline(np.r_[early, line.times], np.r_[0, line.ends])
        return rows

    monkeypatch.setattr(stream, "open_stream", protected_origin)

    def make(work: Path, side: str) -> str:
        lines = [line[:11] + "F,A,2021-01-05,true,1," for line in mixed_lines(1000)]
        if side == "neighbour":
            lines[0] = lines[0][:11] + "F,A,2020-12-01,true,1,"
        write(work, lines)
        return "s.csv"

    seen = neighbours(runner, tmp_path, monkeypatch, make, [*COMMON, *CHECKPOINTS])
    assert seen[0][0] == seen[1][0] == 0, seen[0][1]
    assert sorted(seen[0][2]) != sorted(seen[1][2])


# -- the levels-first engine: audit and mutant ----------------------------------------------------
def test_levels_first_engine_audit_and_mutant():
    """A category column of 4 levels (2 lead bits) and a float: neighbouring streams differ in
    one row moved from level 0 to level 3 (replace, eps 1, the default allocation); released
    counts at t = 34 of every region. The mutant drops the level-total noise."""
    cube = StreamCube(
        (
            ColumnSpec("ward", "category", 0.0, 3.0, levels=("A", "B", "C", "D")),
            ColumnSpec("x", "float", 0.0, 1.0),
        )
    )
    assert cube.lead == (2,) and cube.d == 2
    X = cube.to_cube(np.column_stack([np.zeros(34), np.full(34, 0.01)]))
    X2 = X.copy()
    X2[19] = cube.to_cube(np.array([[3.0, 0.01]]))[0]
    make = partial(TunedPlan, Fraction(1), cube.d, "replace", "tuned", cube.lead)
    audit_with_mutant(lambda m: make(mutant=m), X, X2, 1_000, "mixed-", "levels-first")


def test_cube_of_level_columns_only_is_padded():
    """Only level columns: a constant coordinate lets the time levels deepen; it is dropped
    from the release, and a row with a missing value is an empty slot (NaN)."""
    cube = StreamCube((ColumnSpec("b", "boolean", 0.0, 1.0, levels=("false", "true")),))
    assert cube.padded and cube.d == 2 and cube.lead == (1,)
    pts = cube.to_cube(np.array([[0.0], [1.0], [np.nan]]))
    assert np.isnan(pts[2]).all() and (pts[:2, 1] == 0).all()
    plan = OnlinePlan(Fraction(1), cube.d, "replace", "tuned", cube.lead)
    eng = OnlineEngine(plan)
    eng.use(src("pad"))
    eng.feed(np.repeat(pts[:2], 600, axis=0))
    table = cube.to_table(eng.release(np.random.default_rng(0)))
    assert table.num_rows == 1200 and table.schema.names == ["b"]
