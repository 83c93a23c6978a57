"""`--dim`: private moments, the subspace, the exact box, clipping, recovery of subspace data."""

from __future__ import annotations

import itertools
import json
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest

from dpsynth_cli.cli import app
from dpsynth_cli.errors import UsageError
from dpsynth_cli.evaluate.w1 import w1_exact
from dpsynth_cli.mechanisms import lowdim, moments, select
from dpsynth_cli.privacy.ledger import Ledger
from dpsynth_cli.privacy.noise import RandomSource

H = 1 << (moments.STAT_BITS - 1)


def contribution(row: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One row's S1 and S2-upper-triangle contributions, in grid units."""
    sums = moments.MomentSums.of(row[None, :])
    return sums.first, sums.second[np.triu_indices(row.size)]


@pytest.mark.parametrize("d", [1, 2, 5, 30])
def test_sensitivities_are_attained_by_corner_rows_and_never_exceeded(d):
    corner = np.ones(d)  # every |z_j| = 1/2: the worst case of both sums
    first, second = contribution(corner)
    assert np.abs(first).sum() == moments.first_sensitivity(d, "add-remove") == d * H
    assert np.abs(second).sum() == moments.second_sensitivity(d, "add-remove")
    assert moments.second_sensitivity(d, "replace") == moments.second_sensitivity(d, "add-remove")
    rng = np.random.default_rng(d)
    for row in rng.random((200, d)):
        first, second = contribution(row)
        assert np.abs(first).sum() <= moments.first_sensitivity(d, "add-remove")
        assert np.abs(second).sum() <= moments.second_sensitivity(d, "add-remove")
    corners = rng.integers(0, 2, (300, 2, d)).astype(float)  # replace: vertices are extreme
    pairs = [(np.zeros(d), np.ones(d)), *corners, *rng.random((300, 2, d))]
    worst = 0
    for old, new in pairs:
        (f0, s0), (f1, s1) = contribution(old), contribution(new)
        worst = max(worst, np.abs(s1 - s0).sum())
        assert np.abs(f1 - f0).sum() <= moments.first_sensitivity(d, "replace")
    assert worst <= moments.second_sensitivity(d, "replace")


def test_far_below_algorithm_6():
    """Algorithm 6 charges 6/n per entry of M, i.e. 3 d^2 on the scale of the sum (summed over
    d^2 entries, halved for symmetry); ours is d(d+1)/8 in the same units."""
    for d in (10, 30):
        ours = moments.second_sensitivity(d, "add-remove") / float(H * H * 4)
        assert ours == d * (d + 1) / 8 and 3 * d * d / ours > 20


def test_sums_are_exact_and_merge_across_batches():
    rng = np.random.default_rng(0)
    X = rng.random((5000, 4))
    whole = moments.MomentSums.of(X)
    parts = moments.MomentSums.of(X[:1234]).merge(moments.MomentSums.of(X[1234:]))
    q = moments.quantise(X).astype(np.int64)
    assert (whole.first == parts.first).all() and (whole.second == parts.second).all()
    assert (whole.second == q.T @ q).all() and (whole.first == q.sum(axis=0)).all()


def test_released_moments_are_on_the_grid_and_estimate_mean_and_covariance():
    rng = np.random.default_rng(1)
    X = rng.random((200_000, 3)) * [1, 0.5, 0.2]
    ledger = Ledger(Fraction(2))
    noisy = moments.release(X, Fraction(1), Fraction(1), RandomSource.seeded(2), ledger)
    assert noisy.first.dtype == np.int64 and noisy.second.dtype == np.int64
    assert (noisy.second == noisy.second.T).all()
    assert [e.step for e in ledger.spends] == ["moments:first", "moments:second"]
    np.testing.assert_allclose(noisy.mean(len(X)), X.mean(axis=0), atol=1e-3)
    np.testing.assert_allclose(noisy.covariance(len(X)), np.cov(X.T), atol=2e-3)


def test_subspace_box_is_the_exact_range_over_the_cube():
    rng = np.random.default_rng(2)
    d, k = 4, 2
    basis = np.linalg.qr(rng.normal(size=(d, k)))[0]
    centre = rng.random(d)
    lo, hi = lowdim.subspace_box(basis, centre)
    vertices = np.array(list(itertools.product([0.0, 1.0], repeat=d)))
    coords = (vertices - centre) @ basis
    np.testing.assert_allclose(lo, coords.min(axis=0))
    np.testing.assert_allclose(hi, coords.max(axis=0))
    radius = np.sqrt(d) + np.linalg.norm(centre)  # §4.3's R: the box is never larger
    assert (hi - lo <= 2 * radius).all()


def test_parse_dim():
    assert lowdim.parse_dim("full", 1) == 0 and lowdim.parse_dim("auto", 3) is None
    assert lowdim.parse_dim(" 2 ", 3) == 2
    for text, d in (("auto", 1), ("4", 3), ("0", 3), ("two", 3)):
        with pytest.raises(UsageError, match="--dim"):
            lowdim.parse_dim(text, d)


def test_choose_dim_follows_the_spectrum():
    flat = np.full(10, 0.05)
    two = np.array([0.08, 0.05] + [1e-5] * 8)
    assert lowdim.choose_dim(two, Fraction(1), 100_000, "add-remove") == 2
    assert lowdim.choose_dim(flat, Fraction(1), 100_000, "add-remove") == 10


def subspace_table(n: int, seed: int) -> np.ndarray:
    """Rows exactly on a 2-D affine subspace of [0,1]^6."""
    rng = np.random.default_rng(seed)
    A = np.array([[0.4, -0.3, 0.2, 0.1, 0.3, -0.2], [0.1, 0.3, 0.3, -0.3, 0.0, 0.2]])
    return 0.5 + (rng.random((n, 2)) - 0.5) @ A


def run_lowdim(X: np.ndarray, dim: int | None, seed: int) -> np.ndarray:
    eps = Fraction(1)
    return lowdim.run(
        X,
        epsilon=eps,
        noisy_rows=len(X),
        relation="add-remove",
        source=RandomSource.seeded(seed),
        ledger=Ledger(eps),
        rng=np.random.default_rng(seed),
        rows=None,
        dim=dim,
        inner=select.run,
    ).points


@pytest.mark.heavy
def test_data_on_a_subspace_is_recovered_as_n_grows():
    """W1 falls with n toward what the estimator can see: at n = 40000 the 1500-row subsample W1
    sits near its floor (the same estimator between two parts of the real table; measured 0.0128
    against 0.0118, and 0.080 at n = 2000)."""
    errors = []
    for n in (2000, 40000):
        X = subspace_table(n, 0)
        Y = run_lowdim(X, 2, 1)
        assert ((Y >= 0) & (Y <= 1)).all()
        rng = np.random.default_rng(5)
        sample = rng.choice(len(X), 1500, replace=False), rng.choice(len(Y), 1500, replace=False)
        errors.append(w1_exact(X[sample[0]], Y[sample[1]]))
    floor = w1_exact(X[:1500], X[-1500:])  # two parts of the real table at the same size
    assert errors[1] < errors[0]
    assert errors[1] < 2.5 * floor


def test_cli_dim_report_and_errors(runner, tmp_path):
    path, out = tmp_path / "w.csv", tmp_path / "o.csv"
    X = subspace_table(3000, 3)
    pd.DataFrame(X, columns=[f"c{j}" for j in range(6)]).to_csv(path, index=False)
    bounds = [a for j in range(6) for a in ("--bounds", f"c{j}=0:1")]
    args = ["synth", str(path), "--eps", "1", *bounds, "-o", str(out), "--seed", "1"]
    result = runner.invoke(app, [*args, "--dim", "2"])
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "o.csv.report.json").read_text())
    mech = report["mechanism"]
    assert mech["name"] == "lowdim" and mech["dim"] == 2 and len(mech["basis"]) == 2
    steps = [e["step"] for e in report["ledger"]["entries"]]
    assert steps[:3] == ["count", "moments:first", "moments:second"]
    assert report["ledger"]["total_epsilon"] <= 1
    assert len(pd.read_csv(out).columns) == 6
    for bad, words in (("7", "between 1 and"), ("x", "expected auto")):
        result = runner.invoke(app, [*args, "--dim", bad])
        assert result.exit_code == 2 and words in result.stderr
    one = runner.invoke(app, [*args[:2], "--eps", "1", "--bounds", "c0=0:1", "--dim", "auto"])
    assert one.exit_code == 2 and "at least two columns" in one.stderr
    plan = runner.invoke(app, [*args, "--dim", "auto", "--dry-run"])
    assert json.loads(plan.stdout)["dim_plan"]["dim_rule"] == lowdim.DIM_RULE
