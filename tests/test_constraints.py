"""Declared constraints between columns (issue 23): the grammar and its errors, the units, the
derived columns, and the rejection sampler: exactly the requested rows, every one satisfying the
constraints as written, distributed as the released measure restricted to the constraint set."""

from __future__ import annotations

import json
import pickle
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from scipy import stats

from dpsynth_cli import constraints as cons
from dpsynth_cli.cli import app
from dpsynth_cli.coltypes import parse_iso_bound
from dpsynth_cli.constraints import parse_constraint, parse_constraints
from dpsynth_cli.domain import ColumnSpec, Domain, load_constraints
from dpsynth_cli.errors import DataError, UsageError
from dpsynth_cli.mechanisms.base import Output
from dpsynth_cli.mechanisms.conditioned import Conditioned, Rules, conditioned

WHERE = "--schema s.json"
COLUMNS = {
    "a": ColumnSpec("a", "float", 0.0, 1.0),
    "b": ColumnSpec("b", "float", 0.0, 1.0),
    "c": ColumnSpec("c", "integer", 0, 10),
    "my col": ColumnSpec("my col", "float", 0.0, 1.0),
    "floor": ColumnSpec("floor", "integer", 0, 10),
    "sex": ColumnSpec("sex", "category", 0.0, 1.0, levels=("F", "M")),
    "smoker": ColumnSpec("smoker", "boolean", 0.0, 1.0, levels=("false", "true")),
}


def terms(c) -> dict:
    return {(t.column, t.floor): k for t, k in c.terms}


@pytest.mark.parametrize(
    ("text", "want_terms", "constant", "op"),
    [
        ("a <= b", {("a", False): 1.0, ("b", False): -1.0}, 0.0, "<="),
        ("2 * a + 3 >= b - 1.5", {("b", False): 1.0, ("a", False): -2.0}, -4.5, "<="),
        ("a * 2 < `my col`", {("a", False): 2.0, ("my col", False): -1.0}, 0.0, "<"),
        ("b > floor(a) - 1", {("a", True): 1.0, ("b", False): -1.0}, -1.0, "<"),
        ("- -a - .5e1 <= floor", {("a", False): 1.0, ("floor", False): -1.0}, -5.0, "<="),
        ("a - a + b <= 1", {("b", False): 1.0}, -1.0, "<="),
    ],
)
def test_inequalities_parse_to_one_side(text, want_terms, constant, op):
    c = parse_constraint(text, WHERE)
    assert terms(c) == want_terms and c.constant == constant and c.op == op
    assert c.target is None and c.text == text


@pytest.mark.parametrize(
    ("text", "target", "want_terms", "constant"),
    [
        ("c == a + b", "c", {("a", False): 1.0, ("b", False): 1.0}, 0.0),
        ("2 * a - 1 == c", "c", {("a", False): 2.0}, -1.0),
        ("a == b", "a", {("b", False): 1.0}, 0.0),
        ("c == 3", "c", {}, 3.0),
    ],
)
def test_an_equality_derives_the_column_alone_on_one_side(text, target, want_terms, constant):
    c = parse_constraint(text, WHERE)
    assert c.derives and c.target == target and c.op == "=="
    assert terms(c) == want_terms and c.constant == constant


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("a <= b", '"constraints" must be a list of strings'),
        ([5], "each constraint must be a non-empty string"),
        ([""], "each constraint must be a non-empty string"),
        (["a + b"], "needs exactly one of <=, >=, <, >, =="),
        (["a <= b <= c"], "needs exactly one of <=, >=, <, >, =="),
        (["a <= b / 2"], "cannot read '/' (character 8)"),
        (["a * b <= 1"], "a product of two columns is not linear"),
        (["abs(a) <= 1"], "unknown function 'abs'"),
        (["floor(a + b) <= 1"], "floor takes one column"),
        (["<= b"], "a side of the comparison is empty"),
        (["2 a <= b"], "expected + or - before 'a'"),
        (["a + <= b"], "expected a number or a column at 'the end'"),
        (["a <= 1e999"], "the number 1e999 is not finite"),
        (["a <= zz"], "column 'zz' is not in the schema"),
        (["1 <= 2"], "names no column"),
        (["a - a <= 1"], "names no column (or its columns cancel)"),
        (["sex <= 1"], "column 'sex' is a category column"),
        (["a <= floor(smoker)"], "column 'smoker' is a boolean column"),
        (["a + b == c + 1"], "an equality needs one column alone on one side"),
        (["a == a + b"], "column 'a' is on both sides"),
        (["c == a", "c == b"], "column 'c' is derived by another constraint too"),
        (["c == a", "b == c + 1"], "column 'c' is derived (\"c == a\")"),
    ],
)
def test_bad_constraints_are_usage_errors_naming_them(raw, message):
    with pytest.raises(UsageError) as err:
        parse_constraints(raw, COLUMNS, WHERE)
    assert message in str(err.value) and str(err.value).startswith(WHERE)
    if isinstance(raw, list) and raw and isinstance(raw[-1], str) and raw[-1]:
        assert f'"{raw[-1]}"' in str(err.value) or f'"{raw[0]}"' in str(err.value)


def test_a_schema_without_constraints_has_none(tmp_path):
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"columns": {"a": {"type": "float"}}}))
    assert load_constraints(str(path)) == ()


def test_kinds_resolved_from_the_file_are_checked_when_chosen():
    """A schema column without a type takes the Parquet file's: checked once resolved."""
    (c,) = parse_constraints(["a <= b"], {"a": ColumnSpec("a", ""), "b": ColumnSpec("b", "")}, "")
    with pytest.raises(UsageError, match="column 'b' is a boolean column"):
        cons.choose([c], [ColumnSpec("a", "float"), ColumnSpec("b", "boolean")])
    kept, left_out = cons.choose([c], [ColumnSpec("a", "float")])
    assert kept == () and left_out == {"a <= b": "column 'b' is not among the chosen columns"}


# Units: a date's days, a datetime's (fractional) days since the epoch (UTC for a zoned column).
TIMES = (
    ColumnSpec(
        "d", "date", *(parse_iso_bound(v, "date", None, "") for v in ("2024-01-01", "2024-12-31"))
    ),
    ColumnSpec(
        "t",
        "datetime",
        *(
            parse_iso_bound(v, "datetime", None, "")
            for v in ("2024-01-01T00:00:00", "2025-01-01T00:00:00")
        ),
    ),
    ColumnSpec(
        "z",
        "datetime",
        *(
            parse_iso_bound(v, "datetime", "Europe/Paris", "")
            for v in ("2024-01-01T00:00:00", "2025-01-01T00:00:00")
        ),
        timezone="Europe/Paris",
    ),
    ColumnSpec("i", "integer", 0, 100),
    ColumnSpec("f", "float", 0.0, 10.0),
)


def test_constraint_units_are_days_since_the_epoch():
    domain = Domain(TIMES)
    jan2 = 19724.0  # 2024-01-02 is day 19724 after 1970-01-01
    codes = np.array(
        [
            [
                jan2,
                parse_iso_bound("2024-01-02T18:00:00", "datetime", None, ""),
                parse_iso_bound("2024-01-02T12:00:00", "datetime", "Europe/Paris", ""),
                7,
                2.5,
            ]
        ]
    )
    rules = Rules(domain, (parse_constraint("d + t + z + i + f >= 0", ""),))
    values = rules.values(domain.to_unit(codes))
    assert values["d"][0] == jan2
    assert values["t"][0] == jan2 + 0.75  # wall-clock 18:00 without a time zone
    assert values["z"][0] == pytest.approx(jan2 + 11 / 24)  # 12:00 in Paris is 11:00 UTC
    assert values["i"][0] == 7 and values["f"][0] == 2.5


def test_floor_of_a_datetime_is_its_calendar_date():
    """`d >= floor(t)` and `d > t - 1` accept the same rows (d whole days)."""
    domain = Domain(TIMES[:2])
    rng = np.random.default_rng(0)
    unit = rng.random((5000, 2))
    a = Rules(domain, (parse_constraint("d >= floor(t)", ""),)).apply(unit.copy())
    b = Rules(domain, (parse_constraint("d > t - 1", ""),)).apply(unit.copy())
    assert 0.3 < a.mean() < 0.7 and np.array_equal(a, b)
    table = domain.from_unit(unit[a])
    days = table.column("d").cast(pa.int32()).to_numpy()
    dates = table.column("t").to_numpy().astype("datetime64[D]").astype(np.int64)
    assert (days >= dates).all()


def test_missing_values_leave_the_constraint_out():
    domain = Domain(
        (ColumnSpec("n", "integer", 0, 9, nullable=True), ColumnSpec("m", "integer", 0, 9))
    )
    rules = Rules(domain, (parse_constraint("n <= m", ""),))
    codes = np.array([[5.0, 3.0], [10.0, 3.0], [2.0, 3.0]])  # 10: n's missing code
    assert rules.apply(domain.to_unit(codes)).tolist() == [False, True, True]


@dataclass(frozen=True)
class GridPlace:
    """Points uniform in the cells of a k x k grid of [0,1]^2 (cell = row-major index), in
    random order: a release with a known measure."""

    k: int

    def __call__(self, cells, counts, rng):
        cell = np.repeat(np.asarray(cells, dtype=np.int64), counts)
        rng.shuffle(cell)
        corner = np.column_stack([cell // self.k, cell % self.k]) / self.k
        return corner + rng.random((cell.size, 2)) / self.k


UNIT_FLOATS = Domain((ColumnSpec("x", "float", 0.0, 1.0), ColumnSpec("y", "float", 0.0, 1.0)))


def grid_output(sizes, seed=0) -> Output:
    return Output(np.asarray(sizes, dtype=np.int64), GridPlace(2), np.random.default_rng(seed), 2)


def test_rejection_keeps_every_row_count_and_every_row_obeys():
    rules = Rules(UNIT_FLOATS, (parse_constraint("x + 0.25 <= y", ""),))
    out = conditioned(grid_output([300, 500, 100, 700]), rules)
    for batch_rows in (None, 333):
        parts = [UNIT_FLOATS.from_unit(p) for p in out.batches(batch_rows)]
        table = pa.concat_tables(parts)
        assert table.num_rows == 1600
        x, y = (table.column(c).to_numpy() for c in ("x", "y"))
        assert (x + 0.25 <= y).all()
        again = pa.concat_tables([UNIT_FLOATS.from_unit(p) for p in out.batches(batch_rows)])
        assert again.equals(table)  # the batch's own generator: reproducible


def test_conditioned_output_is_the_release_restricted_to_the_constraint_set():
    """Cells (x, y) of a 2 x 2 grid with sizes 1, 3, 2, 4 (cell 1: x < 1/2 <= y), uniform in
    each; conditioned on x <= y: the lower-left and upper-right cells keep half their mass (the
    triangle above the diagonal), the upper-left all, the lower-right none. Regions: the two
    triangles halved again by x + y <= 1/2 (resp. 3/2), and the upper-left cell's quarters."""
    sizes = np.array([1000, 3000, 2000, 4000])
    rules = Rules(UNIT_FLOATS, (parse_constraint("x <= y", ""),))
    got = np.vstack(list(conditioned(grid_output(sizes, 1), rules).batches(2500)))
    x, y = got[:, 0], got[:, 1]
    assert got.shape == (10_000, 2) and (x <= y).all()
    mass = np.array([1000 / 2, 3000, 4000 / 2])  # the three cells' mass in x <= y
    region = np.select(
        [
            (x < 0.5) & (y < 0.5) & (x + y <= 0.5),
            (x < 0.5) & (y < 0.5),
            (x >= 0.5) & (y >= 0.5) & (x + y <= 1.5),
            (x >= 0.5) & (y >= 0.5),
            (x < 0.25) & (y < 0.75),
            (x < 0.25),
            (y < 0.75),
        ],
        range(7),
        7,
    )
    # each triangle splits in halves of its mass; the upper-left cell in quarters
    p = np.array([mass[0] / 2] * 2 + [mass[2] / 2] * 2 + [mass[1] / 4] * 4) / mass.sum()
    counts = np.bincount(region, minlength=8)
    assert stats.chisquare(counts, p * got.shape[0]).pvalue > 1e-3
    # and it has power here: 20% too much mass in the upper-left cell is caught (drawing the
    # fresh rows' cells uniformly instead of by released size gives a p-value of 1e-132)
    skewed = p.copy()
    skewed[4:] *= 1.2
    skewed /= skewed.sum()
    assert stats.chisquare(counts, skewed * got.shape[0]).pvalue < 1e-6


def test_derived_columns_are_computed_rounded_and_kept_in_bounds():
    domain = Domain(
        (
            ColumnSpec("a", "float", 0.0, 10.0),
            ColumnSpec("b", "float", 0.0, 10.0),
            ColumnSpec("total", "integer", 0, 12),
            ColumnSpec("half", "float", 0.0, 100.0),
        )
    )
    rules = Rules(
        domain,
        (parse_constraint("total == a + b", ""), parse_constraint("half == 0.5 * a + 3.3", "")),
    )
    rng = np.random.default_rng(4)
    sizes = np.full(50, 100)
    out = conditioned(Output(sizes, UniformPlace(4), rng, 4), rules)
    table = domain.from_unit(next(out.batches()))
    a, b, total, half = (table.column(c).to_numpy() for c in ("a", "b", "total", "half"))
    assert table.num_rows == 5000 and (total <= 12).all()
    assert np.array_equal(total, np.floor(a + b + 0.5))
    assert np.array_equal(half, np.round(0.5 * a + 3.3, domain.decimals()["half"]))
    assert (a + b > 12.5).sum() == 0  # such rows were replaced, not clipped


def test_a_derived_datetime_is_whole_seconds_in_its_zone():
    """`z == t + 0.25`: six hours after t's wall-clock time, read as a UTC instant, written in
    z's zone (Europe/Paris) to the second."""
    domain = Domain(TIMES[1:3])
    rules = Rules(domain, (parse_constraint("z == t + 0.25", ""),))
    unit = np.random.default_rng(2).random((2000, 2))
    ok = rules.apply(unit)
    table = domain.from_unit(unit[ok])
    t = table.column("t").cast(pa.int64()).to_numpy()
    z = table.column("z").cast(pa.int64()).to_numpy()
    assert ok.mean() > 0.9 and np.array_equal(z, t + 6 * 3600)
    assert str(table.schema.field("z").type) == "timestamp[s, tz=Europe/Paris]"


@dataclass(frozen=True)
class UniformPlace:
    """Points uniform on [0,1]^d, whatever the cells."""

    d: int

    def __call__(self, cells, counts, rng):
        return rng.random((int(np.sum(counts)), self.d))


def test_too_few_rows_satisfying_the_constraints_is_an_error():
    rules = Rules(UNIT_FLOATS, (parse_constraint("x >= y + 0.999", ""),))
    out = conditioned(grid_output([500, 500, 500, 500]), rules)
    with pytest.raises(DataError, match="the declared constraints hold for too few rows"):
        next(out.batches())


def test_the_conditioned_placement_pickles_and_places_alike():
    rules = Rules(UNIT_FLOATS, (parse_constraint("x <= y", ""),))
    place = Conditioned(GridPlace(2), np.array([1, 2, 3, 4]), rules)
    copy = pickle.loads(pickle.dumps(place))
    cells, counts = np.arange(4), np.array([10, 20, 30, 40])
    got = [p(cells, counts, np.random.default_rng(5)) for p in (place, copy)]
    assert np.array_equal(got[0], got[1])


ADMISSIONS = Path(__file__).resolve().parent.parent / "sample_data" / "admissions.schema.json"


def write_two_floats(tmp_path: Path, constraints: list[str], **bounds) -> None:
    rng = np.random.default_rng(1)
    pa_table = pa.table({"a": rng.random(3000), "b": rng.random(3000) + 1.0})
    pq.write_table(pa_table, tmp_path / "in.parquet")
    columns = {
        "a": {"type": "float", "lower": 0, "upper": 1},
        "b": {"type": "float", "lower": 0, "upper": 2, **bounds},
    }
    schema = {"columns": columns, "constraints": constraints}
    (tmp_path / "s.json").write_text(json.dumps(schema))


def test_cli_a_bad_constraint_is_one_line_and_exit_2(runner, tmp_path):
    write_two_floats(tmp_path, ["a <= b * a"])
    out = tmp_path / "out.csv"
    args = ["synth", str(tmp_path / "in.parquet"), "--eps", "1", "-o", str(out)]
    result = runner.invoke(app, [*args, "--schema", str(tmp_path / "s.json")])
    assert result.exit_code == 2 and not out.exists()
    assert result.stderr.count("\n") == 1
    assert 'constraint "a <= b * a": a product of two columns is not linear' in result.stderr


def test_cli_infeasible_constraints_stop_the_run_without_output(runner, tmp_path):
    write_two_floats(tmp_path, ["a >= b + 1.5"])
    out = tmp_path / "out.csv"
    args = ["synth", str(tmp_path / "in.parquet"), "--eps", "1", "-o", str(out), "-q"]
    result = runner.invoke(app, [*args, "--schema", str(tmp_path / "s.json")])
    assert result.exit_code == 1 and not out.exists()
    assert result.stderr.startswith("dpsynth: error: the declared constraints hold for too few")
    assert result.stderr.count("\n") == 1


@pytest.mark.parametrize("extra", [[], ["--dim", "1"], ["--mechanism", "pmm"]])
def test_cli_output_obeys_and_the_report_says_how(runner, tmp_path, extra):
    write_two_floats(tmp_path, ["b >= a + 0.5", "b <= 1.8"])
    out = tmp_path / "out.parquet"
    args = ["synth", str(tmp_path / "in.parquet"), "--eps", "1", "-o", str(out), "--seed", "2"]
    result = runner.invoke(app, [*args, "--schema", str(tmp_path / "s.json"), *extra])
    assert result.exit_code == 0, result.output
    table = pq.read_table(out)
    a, b = (table.column(c).to_numpy() for c in ("a", "b"))
    assert table.num_rows > 2000 and (b >= a + 0.5).all() and (b <= 1.8).all()
    report = json.loads((tmp_path / "out.parquet.report.json").read_text())
    block = report["constraints"]
    assert block["conditioned"] == ["b >= a + 0.5", "b <= 1.8"] and block["derived"] == {}
    if "pmm" in extra:  # an a-priori W1 bound, which says what it covers
        assert "before the declared constraints" in report["accuracy"]["constraints_note"]
    assert block["first_batch"]["rows"] == table.num_rows
    assert 0.5 < block["first_batch"]["acceptance_rate"] <= 1


def test_cli_dry_run_lists_the_constraints(runner, tmp_path):
    write_two_floats(tmp_path, ["b >= a", "b == a + 1"])
    args = ["synth", "in.parquet", "--eps", "1", "--schema", str(tmp_path / "s.json")]
    result = runner.invoke(app, [*args, "--dry-run"])
    assert result.exit_code == 0, result.output
    block = json.loads(result.stdout)["constraints"]
    assert block["derived"] == {"b": "b == a + 1"} and block["conditioned"] == ["b >= a"]


def test_cli_constraints_on_columns_not_chosen_are_left_out(runner, tmp_path):
    write_two_floats(tmp_path, ["b >= a + 0.5"])
    out = tmp_path / "out.csv"
    args = ["synth", str(tmp_path / "in.parquet"), "--eps", "1", "-o", str(out), "--columns", "a"]
    result = runner.invoke(app, [*args, "--schema", str(tmp_path / "s.json")])
    assert result.exit_code == 0, result.output
    assert "constraint \"b >= a + 0.5\" left out: column 'b' is not among the chosen" in (
        result.stderr
    )
    block = json.loads((tmp_path / "out.csv.report.json").read_text())["constraints"]
    assert block["declared"] == [] and "b >= a + 0.5" in block["left_out"]


def test_online_replay_conditions_its_releases_on_declared_constraints(runner, tmp_path):
    """issue 25: every release obeys the schema's constraints (rejection from the released
    counts: post-processing), the report says how; the same run without them breaks one."""
    write_two_floats(tmp_path, ["b - 1 >= a"])
    args = ["online-replay", str(tmp_path / "in.parquet"), "--eps", "1", "--seed", "2"]
    args += ["--checkpoints", "1024,3000", "--schema", str(tmp_path / "s.json")]
    result = runner.invoke(app, [*args, "--out-dir", str(tmp_path / "rel")])
    assert result.exit_code == 0, result.output
    for name in ("release-000000001024.parquet", "release-000000003000.parquet"):
        out = pq.read_table(tmp_path / "rel" / name).to_pandas()
        assert len(out) == int(name[8:20]) and (out.b - 1 >= out.a).all()
    report = json.loads((tmp_path / "rel" / "online-replay.report.json").read_text())
    assert report["constraints"]["conditioned"] == ["b - 1 >= a"]
    write_two_floats(tmp_path, [])
    result = runner.invoke(app, [*args, "--out-dir", str(tmp_path / "free")])
    free = pq.read_table(tmp_path / "free" / "release-000000003000.parquet").to_pandas()
    assert not (free.b - 1 >= free.a).all()
