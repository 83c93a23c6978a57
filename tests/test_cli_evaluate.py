"""`dpsynth evaluate` end to end: labels, figures, report reuse, and bad input."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from dpsynth_cli.cli import app
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


def test_an_estimate_outside_its_bracket_is_flagged():
    from dpsynth_cli.console import _describe_w1

    sub = {"mean": 0.0246, "floor": {"mean": 0.02}, "outside_certified_bounds": True}
    text = _describe_w1({"lower": 0.001, "upper": 0.0105, "subsample": sub})
    assert "0.0246" in text and "outside the certified bounds" in text


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
