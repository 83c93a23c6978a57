"""`dpsynth evaluate` end to end: labels, figures, report reuse, bad input, and tables read in
batches (the same report; streamed statistics that bracket the in-memory figures)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from dpsynth_cli.cli import app
from dpsynth_cli.domain import ColumnSpec, Domain
from tests.conftest import SAMPLE


def tables(tmp_path, shift=0.1):
    rng = np.random.default_rng(3)
    real = pd.DataFrame({"x": rng.random(400) * 0.8, "y": rng.random(400) * 0.8})
    real.to_csv(tmp_path / "real.csv", index=False)
    (real + shift).to_parquet(tmp_path / "synth.parquet")
    return tmp_path / "real.csv", tmp_path / "synth.parquet"


def evaluate(runner, *args):
    return runner.invoke(app, ["evaluate", *map(str, args)])


def test_translated_copy_has_w1_equal_to_the_shift(runner, tmp_path):
    real, synth = tables(tmp_path, shift=0.1)
    result = evaluate(runner, real, synth, "--bounds", "x=0:1", "--bounds", "y=0:1", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["NOT_DIFFERENTIALLY_PRIVATE"] is True
    assert report["w1_unit_cube"]["exact"] == pytest.approx(0.1, abs=1e-9)
    assert report["per_column"]["x"]["w1"] == pytest.approx(0.1, abs=1e-9)
    assert report["per_column"]["x"]["mean"]["difference"] == pytest.approx(0.1)
    assert report["rows"] == {"real": 400, "synthetic": 400}
    assert report["correlation"]["max_abs_difference"] == pytest.approx(0, abs=1e-9)
    assert "cycles" not in report["per_column"]["x"]  # a number has no calendar


def test_summary_table_on_stdout_says_not_private(runner, tmp_path):
    real, synth = tables(tmp_path)
    result = evaluate(runner, real, synth, "--bounds", "x=0:1", "--bounds", "y=0:1")
    assert result.exit_code == 0, result.output
    assert "NOT differentially private" in result.stdout and "W1" in result.stdout
    assert result.stderr == ""  # results go to stdout; stderr holds only notes and errors
    quiet = evaluate(runner, real, synth, "--bounds", "x=0:1", "--bounds", "y=0:1", "-q")
    assert quiet.stdout == result.stdout  # -q silences notes, not the result


def test_synthetic_table_without_a_compared_column_is_a_one_line_error(runner, tmp_path):
    real, synth = tables(tmp_path)
    pd.read_parquet(synth)[["x"]].to_parquet(synth)
    result = evaluate(runner, real, synth)
    assert result.exit_code == 2
    assert (
        result.stderr.strip() == f"dpsynth: error: column 'y' not found in {synth} (available: x)"
    )


def test_an_estimate_outside_its_bracket_is_flagged_in_plain_words():
    """Issue 24: 'outside the certified bounds: biased upward at this size' said nothing to a
    steward; the summary says what the numbers are and which to trust."""
    from dpsynth_cli.evaluate.summary import _describe_w1

    sub = {"mean": 0.0246, "size": 2000, "floor": {"mean": 0.02}, "outside_certified_bounds": True}
    text = _describe_w1({"lower": 0.001, "upper": 0.0105, "subsample": sub})
    assert "0.0246" in text and "between 0.001 and 0.0105 (proven bounds)" in text
    assert "2,000-row samples" in text and "differ by chance; trust the bounds" in text
    assert "biased" not in text and "certified" not in text


def test_from_report_reuses_synth_columns_and_bounds(runner, tmp_path):
    out = tmp_path / "p.csv"
    args = [
        "synth",
        str(SAMPLE / "patients.csv"),
        "--eps",
        "1",
        "--schema",
        str(SAMPLE / "patients.schema.json"),
        "-o",
        str(out),
        "--seed",
        "1",
    ]
    assert runner.invoke(app, args).exit_code == 0
    result = evaluate(
        runner,
        SAMPLE / "patients.csv",
        out,
        "--from-report",
        str(out) + ".report.json",
        "--report",
        tmp_path / "u.json",
        "--quiet",
    )
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "u.json").read_text())
    assert list(report["columns"]) == ["age", "systolic_bp", "cholesterol"]
    assert report["columns"]["age"]["lower"] == 18
    assert 0 < report["w1_unit_cube"]["exact"] < 0.2


def test_plot_writes_a_png(runner, tmp_path):
    pytest.importorskip("matplotlib")
    real, synth = tables(tmp_path)
    png = tmp_path / "cmp.png"
    result = evaluate(
        runner, real, synth, "--bounds", "x=0:1", "--bounds", "y=0:1", "--plot", png, "--quiet"
    )
    assert result.exit_code == 0, result.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def mixed_pair(tmp_path, n=600):
    """A real table of 8 columns (a category, a boolean, numbers) and a synthetic one that
    keeps each column but breaks the pairs (columns shuffled apart)."""
    rng = np.random.default_rng(7)
    ward = rng.choice(["cardiology", "surgery", "maternity"], n, p=[0.5, 0.3, 0.2])
    x = rng.random(n)
    real = pd.DataFrame(
        {
            "ward": ward,
            "smoker": np.where(rng.random(n) < 0.3, "true", "false"),
            "x": x,
            "y": x + 0.1 * rng.random(n),
            **{f"z{k}": rng.random(n) for k in range(4)},
        }
    )
    real["y"] += (ward == "surgery") * 0.5
    synth = pd.DataFrame({c: rng.permutation(real[c].to_numpy()) for c in real.columns})
    schema = {"ward": {"type": "category", "levels": ["cardiology", "surgery", "maternity"]}}
    schema["smoker"] = {"type": "boolean"}
    schema.update({c: {"type": "float", "lower": 0, "upper": 2} for c in real.columns[2:]})
    real.to_csv(tmp_path / "real.csv", index=False)
    synth.to_csv(tmp_path / "synth.csv", index=False)
    (tmp_path / "s.json").write_text(json.dumps({"columns": schema}))
    return tmp_path / "real.csv", tmp_path / "synth.csv", ["--schema", tmp_path / "s.json"]


def test_report_labels_correlations_and_names_the_worst_pairs(runner, tmp_path):
    """Issue 24: the JSON correlation matrix had no labels and mixed category codes in; the
    summary's 'largest correlation difference: 0.837' named no pair. Now: labelled, numeric
    columns only, every pair worst first, and the summary names them."""
    real, synth, schema = mixed_pair(tmp_path)
    report = json.loads(evaluate(runner, real, synth, *schema, "--json").stdout)
    corr = report["correlation"]
    assert corr["columns"] == ["x", "y", "z0", "z1", "z2", "z3"]  # no level codes as numbers
    assert len(corr["difference"]) == 6 and corr["pairs"][0]["columns"] == ["x", "y"]
    assert report["summary"]["pair_tvd"]["pair"] == ["x", "y"]
    assert {tuple(p["columns"]) for p in report["pair_tvd"]["pairs"][:2]} == {
        ("x", "y"),
        ("ward", "y"),
    }
    ward = report["per_column"]["ward"]  # by level name, no mean or quantile of codes
    assert set(ward) == {"tvd", "levels"} and list(ward["levels"]) == [
        "cardiology",
        "surgery",
        "maternity",
    ]
    text = evaluate(runner, real, synth, *schema).stdout
    assert "largest difference 0.804 for (x, y) (real 0.7953, synthetic -0.008712)" in text
    assert "worst (x, y) 0.6583, (ward, y) 0.2433" in text
    assert "cardiology: 48.0%" in text  # a category's figure is a level's share, by name


def test_plot_is_a_grid_with_levels_by_name(runner, tmp_path, monkeypatch):
    """Issue 24: --plot drew one 4400 x 360 px row of panels with category codes on a number
    axis. Now a grid of 4 panels per row, levels named on the axes, the worst pairs drawn."""
    plt = pytest.importorskip("matplotlib.pyplot")
    figures = []
    close = plt.close
    monkeypatch.setattr(plt, "close", lambda fig: (figures.append(fig), close(fig)))
    real, synth, schema = mixed_pair(tmp_path)
    png = tmp_path / "grid.png"
    result = evaluate(runner, real, synth, *schema, "--plot", png, "-q")
    assert result.exit_code == 0, result.output
    width, height = (v * 100 for v in figures[0].get_size_inches())
    assert width <= 1700 and height >= 3 * 320  # 8 columns in 2 rows, then the pairs' heat maps
    labels = {
        tick.get_text()
        for ax in figures[0].axes
        for tick in ax.get_xticklabels() + ax.get_yticklabels()
    }
    assert {"cardiology", "surgery", "maternity", "false", "true"} <= labels
    titles = [ax.get_title() for ax in figures[0].axes]
    assert any(t.startswith("x × y: real") for t in titles)


@pytest.mark.parametrize(
    "extra,code,words",
    [
        (["--from-report", "missing.json"], 2, "--from-report"),
        (["--columns", "zz"], 2, "'zz'"),
        (["--plot-columns", "x,zz", "--plot", "p.png"], 2, "--plot-columns"),
    ],
)
def test_bad_input(runner, tmp_path, extra, code, words):
    real, synth = tables(tmp_path)
    result = evaluate(runner, real, synth, *extra)
    assert result.exit_code == code, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0]


BOUNDS = ["--bounds", "x=0:1", "--bounds", "y=0:1"]


def test_small_batches_give_the_same_report(runner, tmp_path):
    real, synth = tables(tmp_path)
    whole = evaluate(runner, real, synth, *BOUNDS, "--json")
    small = evaluate(runner, real, synth, *BOUNDS, "--json", "--batch-rows", "97")
    assert whole.exit_code == small.exit_code == 0, small.output
    assert small.stdout == whole.stdout


def frames(n=600, m=500):
    rng = np.random.default_rng(5)
    real = pd.DataFrame({"x": rng.random(n) * 0.8, "y": rng.integers(0, 6, n)})
    real["x"] += 0.1 * real["y"] / 5
    synth = pd.DataFrame({"x": rng.random(m) ** 2, "y": rng.integers(1, 6, m)})
    return real, synth


def streamed(real, synth, specs, size, limits, joint="full"):
    """compare.evaluate fed record batches of `size` rows (the joint W1's certified bracket of
    the whole tables unless `joint` says otherwise)."""
    from dpsynth_cli.evaluate import compare

    def batches(frame):
        table = pa.Table.from_pandas(frame, preserve_index=False)
        return lambda: table.to_batches(max_chunksize=size)

    return compare.evaluate(batches(real), batches(synth), specs, 1, limits, joint).report


def test_streamed_statistics_bracket_the_in_memory_figures(capsys):
    from dpsynth_cli.evaluate import compare
    from dpsynth_cli.evaluate.summary import print_evaluation
    from dpsynth_cli.evaluate.w1 import w1_exact

    real, synth = frames()
    specs = [ColumnSpec("x", "float", 0.0, 1.0, "declared"), ColumnSpec("y", "integer", 0, 5, "")]
    limits = compare.Limits(sample_rows=200, max_cells=40, max_bins=8)
    report = streamed(real, synth, specs, 97, limits)
    same_up_to_rounding(report, streamed(real, synth, specs, 1000, limits))
    memory = compare.evaluate(pa.Table.from_pandas(real), pa.Table.from_pandas(synth), specs, 1)
    exact = memory.report  # the tables fit the samples: figures from the rows, as before
    assert not memory.sampled and "streamed" not in exact
    assert report["streamed"]["partition"]["occupied_cells"] <= 40
    domain = Domain(tuple(specs))
    true_w1 = w1_exact(domain.to_unit(real.to_numpy(float)), domain.to_unit(synth.to_numpy(float)))
    assert exact["w1_unit_cube"]["exact"] == pytest.approx(true_w1, abs=1e-12)
    cube = report["w1_unit_cube"]
    assert cube["lower"] <= true_w1 + 1e-12 <= cube["upper"] + 2e-12
    assert report["rows"] == exact["rows"] == {"real": 600, "synthetic": 500}
    for name in ("x", "y"):
        got, want = report["per_column"][name], exact["per_column"][name]
        bounds = got["w1_bounds"]
        assert bounds["lower"] <= want["w1"] + 1e-12 <= bounds["upper"] + 2e-12
        for stat in ("mean", "std"):
            assert got[stat] == pytest.approx(want[stat], rel=1e-12)
        width = 2.0 ** -report["streamed"]["histogram_depths"][name]["real"] * 5  # one bin
        for q, pair in got["quantiles"].items():
            assert abs(pair["real"] - want["quantiles"][q]["real"]) <= width + 1e-12
    # y is an integer column with 6 values: its bins hold one value each, its figures are exact
    assert report["per_column"]["y"]["quantiles"] == exact["per_column"]["y"]["quantiles"]
    gap = np.array(report["correlation"]["difference"])
    assert gap == pytest.approx(np.array(exact["correlation"]["difference"]), rel=1e-12)
    # the pair figures are counts on the public bins: the streamed ones are the exact ones
    assert report["pair_tvd"] == exact["pair_tvd"]
    assert report["summary"]["pair_tvd"] == exact["summary"]["pair_tvd"]
    assert report["column_errors"]["y"]["error"] == pytest.approx(
        exact["column_errors"]["y"]["error"],
        abs=0.5 / 6,  # within the bracket's width
    )
    print_evaluation(report)
    assert "more rows than evaluate keeps" in capsys.readouterr().out


def same_up_to_rounding(a, b):
    """Reports from two batch splits: the same W1 figures, bins and quantiles bit for bit (exact
    integer counts, minima, maxima and the same samples); the same moments up to rounding."""
    assert a["w1_unit_cube"] == b["w1_unit_cube"] and a["streamed"] == b["streamed"]
    for name, col in a["per_column"].items():
        other = b["per_column"][name]
        assert (col["w1"], col["w1_bounds"], col["quantiles"]) == (
            other["w1"],
            other["w1_bounds"],
            other["quantiles"],
        )
        for stat in ("mean", "std"):
            assert col[stat] == pytest.approx(other[stat], rel=1e-12)


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_a_directory_of_part_files_reads_as_one_table(runner, tmp_path, fmt):
    real, synth = frames()
    parts = tmp_path / f"synth.{fmt}"
    parts.mkdir()
    for k, lo in enumerate(range(0, len(synth), 200)):
        piece = synth.iloc[lo : lo + 200]
        path = parts / f"part-{k:05d}.{fmt}"
        piece.to_csv(path, index=False) if fmt == "csv" else piece.to_parquet(path)
    synth.to_csv(tmp_path / "whole.csv", index=False)
    real.to_csv(tmp_path / "real.csv", index=False)
    args = ["--bounds", "x=0:1", "--bounds", "y=0:5", "--json"]
    from_parts = evaluate(runner, tmp_path / "real.csv", parts, *args)
    from_file = evaluate(runner, tmp_path / "real.csv", tmp_path / "whole.csv", *args)
    assert from_parts.exit_code == 0, from_parts.output
    assert (
        json.loads(from_parts.stdout)["w1_unit_cube"]
        == json.loads(from_file.stdout)["w1_unit_cube"]
    )
    assert json.loads(from_parts.stdout)["rows"]["synthetic"] == 500


def constant_tables(tmp_path, rows=200_000):
    """A real table with two constant columns (c, k) among numbers, a synthetic one where they
    vary: their correlations are undefined in the real table."""
    rng = np.random.default_rng(5)
    x = rng.random(rows)
    real = pd.DataFrame({"x": x, "y": x * 0.5 + rng.random(rows) * 0.5, "c": 0.123, "k": 0.321})
    synth = pd.DataFrame(
        {
            "x": rng.random(rows),
            "y": rng.random(rows),
            "c": rng.random(rows),
            "k": rng.random(rows),
        }
    )
    real.to_parquet(tmp_path / "real.parquet")
    synth.to_parquet(tmp_path / "synth.parquet")
    bounds = [a for n in "xyck" for a in ("--bounds", f"{n}=0:1")]
    return tmp_path / "real.parquet", tmp_path / "synth.parquet", bounds


def test_correlations_with_a_constant_column_are_left_out_and_said(runner, tmp_path):
    """Issue 38 (6): a constant real column's correlations are undefined (no "real 1" leading the
    correlation line): no error, out of the worst and the mean, and the summary says so."""
    real, synth, bounds = constant_tables(tmp_path)
    result = evaluate(runner, real, synth, *bounds, "--batch-rows", "7000", "--json")
    assert result.exit_code == 0, result.output
    corr = json.loads(result.stdout)["correlation"]
    defined = [p for p in corr["pairs"] if p["error"] is not None]
    assert [p["columns"] for p in defined] == [["x", "y"]]
    assert corr["undefined_pairs"] == 5
    assert corr["constant_columns"] == {"real": ["c", "k"], "synthetic": []}
    assert all(p["real"] is None for p in corr["pairs"] if {"c", "k"} & set(p["columns"]))
    text = evaluate(runner, real, synth, *bounds, "--batch-rows", "7000")
    assert text.exit_code == 0, text.output
    line = next(t for t in text.stdout.splitlines() if t.startswith("correlations"))
    assert "for (x, y)" in line and "real 1," not in line
    assert "5 pairs left out, correlation undefined (c, k constant in the real table)" in line


def test_progress_never_says_0_s_left_while_evaluate_computes(runner, tmp_path, status_texts):
    """Issue 38 (6): once a pass has read every row, the status line says so (the figures are
    still being computed) instead of keeping "about 0 s left" up."""
    texts = status_texts
    real, synth = tables(tmp_path)
    pd.read_csv(real).to_parquet(tmp_path / "real.parquet")
    result = evaluate(runner, tmp_path / "real.parquet", synth, "--batch-rows", "100")
    assert result.exit_code == 0, result.output
    reading = [t for t in texts if "(pass" in t]
    assert reading and not [t for t in reading if "0 s left" in t]
    assert reading[-1].endswith("all 400 rows read; working")


def cycle_tables(tmp_path, real_times, synth_times, declared):
    """Real and synthetic CSVs of one column `t` and a schema declaring it."""
    pd.DataFrame({"t": real_times}).to_csv(tmp_path / "real.csv", index=False)
    pd.DataFrame({"t": synth_times}).to_csv(tmp_path / "synth.csv", index=False)
    (tmp_path / "s.json").write_text(json.dumps({"columns": {"t": declared}}))
    return tmp_path / "real.csv", tmp_path / "synth.csv", ["--schema", tmp_path / "s.json"]


DAY_TIMES = {"type": "datetime", "lower": "2021-01-01T00:00:00", "upper": "2022-01-01T00:00:00"}
TWO_WEEKS = pd.date_range("2021-01-04", periods=14, freq="D")  # Monday 4 to Sunday 17 January


def stamps(hours, days=TWO_WEEKS, minute=30):
    return [
        (d + pd.Timedelta(hours=h, minutes=minute)).strftime("%Y-%m-%dT%H:%M:%S")
        for d in days
        for h in hours
    ]


@pytest.mark.parametrize("batch_rows", [None, "13"])
def test_a_lost_daily_cycle_has_a_large_hour_of_day_tvd(runner, tmp_path, batch_rows):
    """Issue 36: events all between 08:00 and 18:00 against events spread over the day: the
    hour-of-day TVD is exactly 1/2 (10 x |1/10 - 1/24| + 14 x 1/24) = 7/12; the same days in
    both, so weekday and month agree; the same figures whether the tables are read whole or
    streamed in batches."""
    real, synth, schema = cycle_tables(tmp_path, stamps(range(8, 18)), stamps(range(24)), DAY_TIMES)
    rows = ["--batch-rows", batch_rows] if batch_rows else []
    result = evaluate(runner, real, synth, *schema, *rows, "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    cycles = report["per_column"]["t"]["cycles"]
    assert cycles["hour_of_day_tvd"] == pytest.approx(7 / 12, abs=1e-12)
    assert cycles["weekday_tvd"] == pytest.approx(0, abs=1e-12)
    assert cycles["month_tvd"] == pytest.approx(0, abs=1e-12)
    assert report["column_errors"]["t"]["cycles"] == cycles
    assert "hour of day" in report["definitions"]["cycles"]
    text = evaluate(runner, real, synth, *schema, *rows)
    assert text.exit_code == 0, text.output
    line = next(t for t in text.stdout.splitlines() if t.startswith("calendar cycles of t"))
    assert "hour of day 0.5833, weekday 0, month 0" in line


def cycles_of(runner, real, synth, schema) -> dict:
    """evaluate --json's calendar cycles of column t."""
    result = evaluate(runner, real, synth, *schema, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)["per_column"]["t"]["cycles"]


def test_an_identical_copy_has_no_cycle_error(runner, tmp_path):
    times = stamps(range(8, 18))
    real, synth, schema = cycle_tables(tmp_path, times, times, DAY_TIMES)
    cycles = cycles_of(runner, real, synth, schema)
    assert cycles == {"hour_of_day_tvd": 0.0, "weekday_tvd": 0.0, "month_tvd": 0.0}


def test_a_zoned_column_is_counted_on_its_own_wall_clock(runner, tmp_path):
    """Europe/Paris: 09:30 in January (08:30 UTC) and 09:30 in July (07:30 UTC) are the same
    hour of day on the column's clock, so a real January and a synthetic July at 09:30 agree
    (TVD 0; counted in UTC they would not: TVD 1); the same weekdays, months apart."""
    july = pd.date_range("2021-07-05", periods=14, freq="D")  # Monday 5 to Sunday 18 July
    zoned = {**DAY_TIMES, "timezone": "Europe/Paris"}
    winter = stamps([9], TWO_WEEKS)
    # the synthetic table written as UTC instants, as a zoned column may be
    summer = [f"{d:%Y-%m-%d}T07:30:00Z" for d in july]
    real, synth, schema = cycle_tables(tmp_path, winter, summer, zoned)
    cycles = cycles_of(runner, real, synth, schema)
    assert cycles == {"hour_of_day_tvd": 0.0, "weekday_tvd": 0.0, "month_tvd": 1.0}
    text = evaluate(runner, real, synth, *schema)
    assert "calendar cycles of t (TVD of shares, wall clock in Europe/Paris)" in text.stdout


def test_a_zoned_column_late_at_night_keeps_its_own_weekday(runner, tmp_path):
    """00:30 on a Monday in Paris is Sunday 23:30 UTC: a real table on Mondays at 00:30 Paris
    time against a synthetic one on Mondays at 00:30 UTC (01:30 Paris): same weekday, hour
    apart."""
    zoned = {**DAY_TIMES, "timezone": "Europe/Paris"}
    mondays = pd.date_range("2021-01-04", periods=4, freq="7D")
    real_times = stamps([0], mondays)
    synth_times = [f"{d:%Y-%m-%d}T00:30:00Z" for d in mondays]
    real, synth, schema = cycle_tables(tmp_path, real_times, synth_times, zoned)
    cycles = cycles_of(runner, real, synth, schema)
    assert cycles == {"hour_of_day_tvd": 1.0, "weekday_tvd": 0.0, "month_tvd": 0.0}


def test_a_date_column_reports_its_weekday_tvd(runner, tmp_path):
    """Weekdays only (Monday to Friday) against every day of the week: weekday TVD
    1/2 (5 x (1/5 - 1/7) + 2 x 1/7) = 2/7; no hour of day for a date."""
    days = pd.date_range("2021-01-04", periods=28, freq="D")
    weekdays = [f"{d:%Y-%m-%d}" for d in days if d.weekday() < 5]
    every = [f"{d:%Y-%m-%d}" for d in days]
    declared = {"type": "date", "lower": "2021-01-01", "upper": "2021-12-31"}
    real, synth, schema = cycle_tables(tmp_path, weekdays, every, declared)
    result = evaluate(runner, real, synth, *schema, "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    cycles = report["per_column"]["t"]["cycles"]
    assert set(cycles) == {"weekday_tvd", "month_tvd"}
    assert cycles["weekday_tvd"] == pytest.approx(2 / 7, abs=1e-12)
    assert cycles["month_tvd"] == pytest.approx(0, abs=1e-12)
