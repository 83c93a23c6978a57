"""`dpsynth evaluate --target` (issue 37, item 3): the same gradient-boosting model trained on
the synthetic and on the real table, scored on real rows; through the real CLI and the API."""

from __future__ import annotations

import json
import sys

import numpy as np
import pandas as pd
import pytest

import dpsynth_cli as dp
from dpsynth_cli.cli import app

LEVELS = ["low", "mid", "high"]


def draw(n: int, seed: int) -> pd.DataFrame:
    """kind follows x (thresholds, 10% flipped), amount = exp(2 + 4 y) times noise, and z a
    noise column: a model can learn both targets from the others."""
    rng = np.random.default_rng(seed)
    x, y, z = rng.random(n), rng.random(n), rng.random(n)
    code = np.digitize(x, [0.33, 0.66])
    flip = rng.random(n) < 0.1
    code[flip] = rng.integers(0, 3, flip.sum())
    amount = np.exp(2 + 4 * y + 0.2 * rng.standard_normal(n))
    return pd.DataFrame(
        {"x": x, "y": y, "z": z, "kind": np.array(LEVELS)[code], "amount": amount.clip(0, 1e4)}
    )


def shuffled(frame: pd.DataFrame, seed: int) -> pd.DataFrame:
    """Each column permuted on its own: the same columns, no relation between them."""
    rng = np.random.default_rng(seed)
    return pd.DataFrame({c: rng.permutation(frame[c].to_numpy()) for c in frame})


@pytest.fixture
def files(tmp_path):
    schema = {
        "columns": {
            "x": {"type": "float", "lower": 0, "upper": 1},
            "y": {"type": "float", "lower": 0, "upper": 1},
            "z": {"type": "float", "lower": 0, "upper": 1},
            "kind": {"type": "category", "levels": LEVELS},
            "amount": {"type": "float", "lower": 0, "upper": 10000},
        }
    }
    real = draw(3000, 1)
    paths = {
        "real": real,
        "holdout": draw(1500, 2),
        "good": draw(3000, 3),
        "broken": shuffled(draw(3000, 3), 4),
        "same": real,
    }
    out = {}
    for name, frame in paths.items():
        out[name] = tmp_path / f"{name}.csv"
        frame.to_csv(out[name], index=False)
    out["schema"] = tmp_path / "schema.json"
    out["schema"].write_text(json.dumps(schema))
    return out


def utility(runner, files, synthetic: str, *args: str) -> dict:
    result = runner.invoke(
        app,
        ["evaluate", str(files["real"]), str(files[synthetic])]
        + ["--schema", str(files["schema"]), "--json", *args],
    )
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)["utility"]


def refused(runner, files, *args: str) -> str:
    result = runner.invoke(
        app,
        ["evaluate", str(files["real"]), str(files["good"]), "--schema", str(files["schema"])]
        + list(args),
    )
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.output
    return lines[0]


@pytest.mark.heavy
def test_a_level_target_scores_real_and_synthetic_models_on_the_holdout(runner, files):
    holdout = ["--target", "kind", "--holdout", str(files["holdout"])]
    good = utility(runner, files, "good", *holdout)
    broken = utility(runner, files, "broken", *holdout)
    assert good["metric"] == "auc" and good["task"] == "level"
    assert good["scored_on"]["source"] == "holdout" and good["scored_on"]["rows"] == 1500
    assert good["trained_on_rows"] == {"real": 3000, "synthetic": 3000}
    assert set(good["features"]) == {"x", "y", "z", "amount"}
    assert good["train_real"] > 0.85 and good["train_synthetic"] > 0.85
    assert broken["train_real"] == good["train_real"]  # the same real model and rows
    assert broken["train_synthetic"] < 0.6  # the relation is gone: about chance
    assert broken["difference"] == pytest.approx(broken["train_synthetic"] - broken["train_real"])
    assert set(good["levels"]) == set(LEVELS)  # one-vs-rest, averaged
    mean = np.mean([v["train_real"] for v in good["levels"].values()])
    assert good["train_real"] == pytest.approx(mean)


@pytest.mark.heavy
def test_one_level_against_the_rest_and_a_numeric_target(runner, files):
    holdout = ["--holdout", str(files["holdout"])]
    one = utility(runner, files, "good", "--target", "kind=high", *holdout)
    assert one["metric"] == "auc" and "levels" not in one and "'high'" in one["auc"]
    assert one["train_real"] > 0.85
    good = utility(runner, files, "good", "--target", "log(amount)", *holdout)
    broken = utility(runner, files, "broken", "--target", "log(amount)", *holdout)
    assert good["metric"] == "r2" and good["scale"] == "ln(1 + value)"
    assert good["train_real"] > 0.8 and good["train_synthetic"] > 0.8
    assert broken["train_synthetic"] < 0.1
    raw = utility(runner, files, "good", "--target", "amount", *holdout)
    assert raw["scale"] == "value" and raw["train_real"] != good["train_real"]


@pytest.mark.heavy
def test_a_synthetic_table_equal_to_the_real_one_scores_like_real(runner, files):
    """The same rows train the same model (fixed random_state): the same score on the holdout.
    Without --holdout, the real model leaves out the scoring quarter and the synthetic one (the
    same rows) does not: the report says its score may be optimistic."""
    same = utility(runner, files, "same", "--target", "kind", "--holdout", str(files["holdout"]))
    assert same["train_synthetic"] == same["train_real"] and same["difference"] == 0
    split = utility(runner, files, "same", "--target", "log(amount)")
    assert split["scored_on"]["source"] == "split" and split["scored_on"]["rows"] == 750
    assert "optimistic" in split["scored_on"]["note"]
    assert split["trained_on_rows"] == {"real": 2250, "synthetic": 3000}
    assert split["train_synthetic"] >= split["train_real"] - 0.01


def test_the_summary_says_both_figures_and_where_they_were_scored(runner, files):
    result = runner.invoke(
        app,
        ["evaluate", str(files["real"]), str(files["good"]), "--schema", str(files["schema"])]
        + ["--target", "kind=low"],
    )
    assert result.exit_code == 0, result.output
    line = next(x for x in result.stdout.splitlines() if x.startswith("model utility"))
    assert "trained on real 0." in line and "on synthetic 0." in line
    assert "25% of REAL held out" in line and "--holdout FILE" in line


def test_target_errors_are_one_line_usage_errors(runner, files):
    missing = refused(runner, files, "--target", "nope")
    assert "--target: column 'nope' is not among the compared columns" in missing
    assert "--columns" in missing
    left_out = refused(runner, files, "--target", "kind", "--columns", "x,y")
    assert "'kind' is not among the compared columns (x, y)" in left_out
    assert "COL=LEVEL needs a category column" in refused(runner, files, "--target", "x=1")
    assert "not a declared level of 'kind'" in refused(runner, files, "--target", "kind=top")
    assert "log(COL) needs a float or integer" in refused(runner, files, "--target", "log(kind)")
    assert "expected COL, COL=LEVEL or log(COL)" in refused(runner, files, "--target", "kind=")
    assert "give --target COL too" in refused(runner, files, "--holdout", str(files["holdout"]))


def test_a_date_target_is_the_wrong_kind(runner, tmp_path):
    frame = pd.DataFrame({"when": ["2024-01-02", "2024-03-04"] * 20, "x": np.arange(40.0)})
    frame.to_csv(tmp_path / "r.csv", index=False)
    schema = {
        "columns": {
            "when": {"type": "date", "lower": "2024-01-01", "upper": "2024-12-31"},
            "x": {"type": "float", "lower": 0, "upper": 40},
        }
    }
    (tmp_path / "s.json").write_text(json.dumps(schema))
    args = ["evaluate", str(tmp_path / "r.csv"), str(tmp_path / "r.csv")]
    result = runner.invoke(app, [*args, "--schema", str(tmp_path / "s.json"), "--target", "when"])
    assert result.exit_code == 2
    assert result.stderr.strip() == (
        "dpsynth: error: --target: column 'when' is a date; give a category, boolean, float or "
        "integer column"
    )


def test_a_holdout_without_a_compared_column_is_refused(runner, files, tmp_path):
    pd.read_csv(files["holdout"]).drop(columns="z").to_csv(tmp_path / "h.csv", index=False)
    line = refused(runner, files, "--target", "kind", "--holdout", str(tmp_path / "h.csv"))
    assert "'z'" in line and "h.csv" in line


def test_without_scikit_learn_the_error_names_the_extra(runner, files, monkeypatch):
    monkeypatch.setitem(sys.modules, "sklearn", None)  # import sklearn raises ImportError
    line = refused(runner, files, "--target", "kind")
    assert line == (
        "dpsynth: error: --target needs scikit-learn: pip install 'dpsynth-cli[utility]'"
    )


@pytest.mark.heavy
def test_the_api_takes_target_and_holdout(files):
    real, holdout = pd.read_csv(files["real"]), pd.read_csv(files["holdout"])
    schema = json.loads(files["schema"].read_text())
    report = dp.evaluate_synthetic(real, real, schema=schema, target="kind", holdout=holdout)
    block = report["utility"]
    assert block["scored_on"]["source"] == "holdout"
    assert block["train_synthetic"] == block["train_real"] > 0.85
    with pytest.raises(dp.DpsynthError, match="give target=COL too"):
        dp.evaluate_synthetic(real, real, schema=schema, holdout=holdout)
