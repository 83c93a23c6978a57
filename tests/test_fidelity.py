"""`evaluate.fidelity`: per-column errors, every pair's 2-way TVD on the public bins and the
numeric pairs' correlation errors, worst named first; levels by name (issue 23, item 5)."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from dpsynth_cli.domain import ColumnSpec
from dpsynth_cli.evaluate.fidelity import PairCounts, as_values, fidelity

HAND = [
    ColumnSpec("x", "float", 0.0, 1.0),
    ColumnSpec("y", "integer", 0, 3),
    ColumnSpec("c", "category", 0.0, 1.0, levels=("hi", "lo")),  # declared order, not sorted
]
REAL = pd.DataFrame({"x": [0.1, 0.1, 0.9, 0.9], "y": [0, 0, 3, 3], "c": ["lo", "lo", "hi", "hi"]})
SYNTH = pd.DataFrame({"x": [0.1, 0.1, 0.9, 0.9], "y": [3, 0, 0, 3], "c": ["lo", "hi", "hi", "hi"]})


def test_hand_made_tables_give_the_figures_worked_out_by_hand():
    """x in 16 bins of [0, 1] (0.1 -> bin 1, 0.9 -> bin 14), y's 4 values, c's 2 levels.
    Pairs: y x c 0.75 (real (0,lo) (3,hi) a half each; synthetic (3,lo) 1/4, (0,hi) 1/2,
    (3,hi) 1/4), x x y 0.5, x x c 0.25. Correlation of x and y: 1 real, 0 synthetic."""
    out = fidelity(REAL, SYNTH, HAND)
    pairs = out["pair_tvd"]["pairs"]
    assert [p["columns"] for p in pairs] == [["y", "c"], ["x", "y"], ["x", "c"]]  # worst first
    assert [p["tvd"] for p in pairs] == pytest.approx([0.75, 0.5, 0.25])
    summary = out["summary"]
    assert summary["pair_tvd"] == {"worst": pytest.approx(0.75), "pair": ["y", "c"], "mean": 0.5}
    corr = out["correlation"]
    assert corr["columns"] == ["x", "y"]  # the category is no number: never correlated by code
    assert corr["pairs"][0] == {
        "columns": ["x", "y"],
        "real": pytest.approx(1.0),
        "synthetic": pytest.approx(0.0, abs=1e-12),
        "error": pytest.approx(1.0),
    }
    assert summary["correlation_error"]["pair"] == ["x", "y"]
    assert out["column_errors"]["x"] == {"measure": "w1", "error": 0.0}
    assert out["column_errors"]["y"] == {"measure": "w1", "error": 0.0}
    assert summary["column_error"] == {
        "worst": 0.25,
        "column": "c",
        "mean": pytest.approx(0.25 / 3),
    }


def test_a_category_is_reported_by_level_name():
    levels = fidelity(REAL, SYNTH, HAND)["column_errors"]["c"]
    assert levels["measure"] == "tvd" and levels["error"] == pytest.approx(0.25)
    assert list(levels["levels"]) == ["hi", "lo"]
    assert levels["levels"]["hi"] == {"real": 0.5, "synthetic": 0.75}
    # the same tables as an Arrow table and as value codes (hi = 0, lo = 1): the same figures
    codes = np.array([[0.1, 0, 1], [0.1, 0, 1], [0.9, 3, 0], [0.9, 3, 0]], dtype=float)
    arrow = fidelity(pa.Table.from_pandas(REAL), SYNTH, HAND)
    assert arrow["summary"] == fidelity(codes, SYNTH, HAND)["summary"]


def mixed_tables(seed: int, n: int):
    rng = np.random.default_rng(seed)
    specs = [
        ColumnSpec("f", "float", 0.0, 10.0),
        ColumnSpec("g", "float", -1.0, 1.0, nullable=True),
        ColumnSpec("k", "integer", 1, 40),
        ColumnSpec("c", "category", 0.0, 2.0, levels=("a", "b", "c"), nullable=True),
    ]
    f = rng.uniform(-1, 11, n)  # some values outside the bounds: clamped
    g = np.where(rng.random(n) < 0.2, np.nan, np.tanh(f - 5 + rng.normal(0, 1, n)))
    k = rng.integers(1, 41, n)
    c = rng.choice(["a", "b", "c", None], n, p=[0.5, 0.3, 0.1, 0.1])
    return pd.DataFrame({"f": f, "g": g, "k": k, "c": c}), specs


def oracle_bins(frame: pd.DataFrame, spec: ColumnSpec) -> pd.Series:
    """Bins by hand: levels by name; 16 equal bins of [lower, upper] (an integer's padded by
    1/2); missing as 'NA'."""
    values = frame[spec.name]
    if spec.kind == "category":
        return values.fillna("NA").astype(str)
    pad = 0.5 if spec.kind == "integer" else 0.0
    lo, hi = spec.lower - pad, spec.upper + pad
    edges = np.linspace(lo, hi, 17)
    index = np.clip(np.searchsorted(edges, values.clip(lo, hi), side="right") - 1, 0, 15)
    return pd.Series(np.where(values.isna(), "NA", index.astype(str)), index=values.index)


def test_pair_tvd_and_correlations_match_an_independent_oracle():
    real, specs = mixed_tables(1, 3000)
    synth, _ = mixed_tables(2, 2000)
    out = fidelity(real, synth, specs)
    got = {tuple(p["columns"]): p["tvd"] for p in out["pair_tvd"]["pairs"]}
    for a, b in itertools.combinations(specs, 2):
        shares = [
            pd.crosstab(oracle_bins(t, a), oracle_bins(t, b), normalize=True).stack()
            for t in (real, synth)
        ]
        p, q = shares[0].align(shares[1], fill_value=0.0)
        assert got[a.name, b.name] == pytest.approx(0.5 * np.abs(p - q).sum(), abs=1e-12)
    for t, side in ((real, "real"), (synth, "synthetic")):
        both = t[["f", "g"]].dropna()  # rows where both are present, f clamped onto its bounds
        r = np.corrcoef(both["f"].clip(0, 10), both["g"])[0, 1]
        pair = next(p for p in out["correlation"]["pairs"] if p["columns"] == ["f", "g"])
        assert pair[side] == pytest.approx(r, abs=1e-10)
    assert out["correlation"]["columns"] == ["f", "g", "k"]
    assert list(out["column_errors"]["c"]["levels"]) == ["a", "b", "c", "(missing)"]


def test_counts_merge_across_batches():
    real, specs = mixed_tables(3, 1000)
    X = as_values(real, specs)
    whole, parts = PairCounts(specs), PairCounts(specs)
    whole.add(X)
    for lo in range(0, 1000, 137):
        part = PairCounts(specs)
        part.add(X[lo : lo + 137])
        parts.merge(part)
    assert parts.n == whole.n == 1000
    for key in whole.two:
        assert np.array_equal(whole.two[key], parts.two[key])
    assert parts.correlation() == pytest.approx(whole.correlation(), abs=1e-12)


def test_a_nullable_number_keeps_missing_as_its_own_bin_and_column_error():
    spec = [ColumnSpec("g", "float", 0.0, 1.0, nullable=True), ColumnSpec("k", "integer", 0, 1)]
    real = pd.DataFrame({"g": [0.5, 0.5, None, None], "k": [0, 0, 1, 1]})
    synth = pd.DataFrame({"g": [0.5, 0.5, 0.5, None], "k": [0, 0, 1, 1]})
    out = fidelity(real, synth, spec)
    assert out["pair_tvd"]["pairs"][0]["tvd"] == pytest.approx(0.25)  # (missing, 1) -> (0.5, 1)
    # a quarter of the rows moved from missing to a value at distance 1; the rest match
    assert out["column_errors"]["g"]["error"] == pytest.approx(0.25)
