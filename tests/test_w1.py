"""W1 (L-infinity) library: exact solver against independent solvers, the certified bracket,
and the streamed statistics behind `evaluate` on tables read in batches.

Fixed seeds throughout. The structured-case test prints the bracket's tightness factors
(run with -s to see them).
"""

from __future__ import annotations

import numpy as np
import ot
import pytest
from scipy.optimize import linear_sum_assignment, linprog
from scipy.stats import wasserstein_distance

from dpsynth_cli.errors import DpsynthError
from dpsynth_cli.evaluate.exact import ExactSums
from dpsynth_cli.evaluate.sample import HashSample
from dpsynth_cli.evaluate.w1 import (
    W1InputError,
    W1SolverError,
    W1TooLargeError,
    chebyshev_cost,
    w1_1d,
    w1_exact,
    w1_lower_bound,
    w1_subsample_estimate,
    w1_subsample_floor,
    w1_summary,
    w1_upper_bound,
)
from dpsynth_cli.evaluate.w1_binned import Histograms, binned_quantiles, w1_1d_bracket
from dpsynth_cli.evaluate.w1_cells import DyadicCells
from dpsynth_cli.evaluate.w1_tree import default_depth, dyadic_bounds

TOL = 1e-12


def lp_w1(X, Y, a=None, b=None) -> float:
    """Independent oracle: the transport LP solved by HiGHS (dual simplex)."""
    n, m = len(X), len(Y)
    a = np.full(n, 1 / n) if a is None else a / a.sum()
    b = np.full(m, 1 / m) if b is None else b / b.sum()
    cost = np.abs(X[:, None, :] - Y[None, :, :]).max(axis=2).ravel()
    rows = np.kron(np.eye(n), np.ones(m))
    cols = np.kron(np.ones(n), np.eye(m))
    res = linprog(
        cost,
        A_eq=np.vstack((rows, cols)),
        b_eq=np.concatenate((a, b)),
        bounds=(0, None),
        method="highs-ds",
        options={"primal_feasibility_tolerance": 1e-10, "dual_feasibility_tolerance": 1e-10},
    )
    assert res.status == 0
    return float(res.fun)


def clustered(rng, n, d, centres=2, spread=0.05):
    c = rng.random((centres, d))
    pts = c[rng.integers(0, centres, n)] + spread * rng.standard_normal((n, d))
    return np.clip(pts, 0.0, 1.0)


def random_case(rng):
    d = int(rng.integers(1, 4))
    n, m = (int(v) for v in rng.integers(1, 61, 2))
    kind = rng.integers(0, 3)
    if kind == 0:
        return rng.random((n, d)), rng.random((m, d))
    if kind == 1:
        return clustered(rng, n, d), clustered(rng, m, d, centres=3)
    # coarse grid: many ties and exact duplicates
    return rng.integers(0, 5, (n, d)) / 4.0, rng.integers(0, 5, (m, d)) / 4.0


# --- exact ---------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(24))
def test_exact_agrees_with_highs_lp(seed):
    rng = np.random.default_rng(seed)
    d = 1 + seed % 3
    n, m = (int(v) for v in rng.integers(1, 13, 2))
    X = rng.random((n, d)) if seed % 2 else clustered(rng, n, d)
    Y = rng.random((m, d))
    assert w1_exact(X, Y) == pytest.approx(lp_w1(X, Y), abs=1e-9)
    a, b = rng.random(n) + 0.05, rng.random(m) + 0.05
    got = w1_exact(X, Y, x_weights=a, y_weights=b)
    assert got == pytest.approx(lp_w1(X, Y, a, b), abs=1e-9)


def test_identical_sets_have_zero_distance_and_zero_bracket():
    X = np.random.default_rng(1).random((40, 3))
    assert w1_exact(X, X) == pytest.approx(0.0, abs=TOL)
    assert w1_lower_bound(X, X) == 0.0
    assert w1_upper_bound(X, X) == pytest.approx(0.0, abs=TOL)


@pytest.mark.parametrize("d", [1, 2, 3])
def test_translated_copy_is_at_distance_t(d):
    rng = np.random.default_rng(2)
    t = 0.125
    X = rng.random((50, d)) * (1 - t)
    Y = X.copy()
    Y[:, 0] += t
    assert w1_exact(X, Y) == pytest.approx(t, abs=1e-12)
    assert w1_lower_bound(X, Y) == pytest.approx(t, abs=1e-12)
    assert w1_upper_bound(X, Y) >= t - TOL


def test_equal_sizes_match_linear_sum_assignment():
    rng = np.random.default_rng(3)
    X, Y = rng.random((200, 2)), clustered(rng, 200, 2)
    cost = chebyshev_cost(X, Y)
    rows, cols = linear_sum_assignment(cost)
    assert w1_exact(X, Y) == pytest.approx(cost[rows, cols].mean(), abs=1e-12)


def test_chebyshev_cost_matches_broadcast():
    rng = np.random.default_rng(4)
    X, Y = rng.random((37, 3)), rng.random((23, 3))
    expect = np.abs(X[:, None, :] - Y[None, :, :]).max(axis=2)
    assert np.array_equal(chebyshev_cost(X, Y), expect)


def test_single_point_side_is_closed_form():
    rng = np.random.default_rng(5)
    X, Y = rng.random((1, 2)), rng.random((9, 2))
    expect = np.abs(X - Y).max(axis=1).mean()
    assert w1_exact(X, Y) == pytest.approx(expect, abs=TOL)
    assert w1_exact(Y, X) == pytest.approx(expect, abs=TOL)


def test_exact_refuses_above_max_pairs():
    X = np.zeros((11, 2))
    with pytest.raises(W1TooLargeError) as err:
        w1_exact(X, X, max_pairs=100)
    assert isinstance(err.value, ValueError) and isinstance(err.value, DpsynthError)
    assert w1_exact(X[:, :1], X[:, :1], max_pairs=100) == 0.0  # 1-D needs no matrix


def test_exact_raises_when_solver_is_not_optimal(monkeypatch):
    def stopped(a, b, M, **kwargs):
        return 0.5, {"result_code": 3, "warning": "numItermax reached before optimality"}

    monkeypatch.setattr(ot, "emd2", stopped)
    X = np.random.default_rng(6).random((5, 2))
    with pytest.raises(W1SolverError):
        w1_exact(X, X[::-1])


@pytest.mark.parametrize(
    "X, Y",
    [
        (np.zeros((3, 2)), np.zeros((3, 3))),
        (np.array([[0.1, np.nan]]), np.zeros((1, 2))),
        (np.zeros(3), np.zeros(3)),
        (np.zeros((0, 2)), np.zeros((1, 2))),
    ],
)
def test_bad_inputs_are_rejected(X, Y):
    for fn in (w1_exact, w1_lower_bound, w1_upper_bound):
        with pytest.raises(W1InputError):
            fn(X, Y)


def test_negative_weights_are_rejected():
    with pytest.raises(ValueError):
        w1_exact(np.zeros((2, 2)), np.ones((2, 2)), x_weights=[1.0, -1.0])


def test_bracket_outside_the_unit_cube_uses_the_data_box():
    rng = np.random.default_rng(12)
    for _ in range(30):
        X, Y = random_case(rng)
        X, Y = 10 * X - 3, 10 * Y - 3  # [-3, 7]^d
        exact = w1_exact(X, Y)
        assert w1_lower_bound(X, Y) <= exact + 1e-11 <= w1_upper_bound(X, Y) + 2e-11


# --- 1-D -----------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(10))
def test_1d_matches_scipy(seed):
    rng = np.random.default_rng(seed)
    n, m = (int(v) for v in rng.integers(1, 500, 2))
    scale = 10.0 ** rng.integers(-2, 4)  # original units, any range
    x = scale * rng.standard_normal(n)
    y = scale * np.round(rng.standard_normal(m), 1)  # ties within y and with x
    if seed % 3 == 0:
        y[: m // 2] = x[0]
    assert w1_1d(x, y) == pytest.approx(wasserstein_distance(x, y), rel=1e-12, abs=1e-15)
    a, b = rng.random(n), rng.random(m)
    expect = wasserstein_distance(x, y, a, b)
    assert w1_1d(x, y, x_weights=a, y_weights=b) == pytest.approx(expect, rel=1e-11, abs=1e-15)


def test_1d_large_unequal_sizes():
    rng = np.random.default_rng(7)
    x, y = rng.random(300_000), rng.random(70_001) ** 2
    assert w1_1d(x, y) == pytest.approx(wasserstein_distance(x, y), rel=1e-10)


# --- bracket -------------------------------------------------------------------------------


def test_bracket_contains_exact_on_many_random_cases():
    rng = np.random.default_rng(8)
    for _ in range(400):
        X, Y = random_case(rng)
        kw = {}
        if rng.random() < 0.25:
            kw = {"x_weights": rng.random(len(X)) + 0.01, "y_weights": rng.random(len(Y)) + 0.01}
        exact = w1_exact(X, Y, **kw)
        assert w1_lower_bound(X, Y, **kw) <= exact + TOL
        tree, curve = dyadic_bounds(X, Y, **kw)
        assert exact <= tree + TOL and exact <= curve + TOL
        assert w1_upper_bound(X, Y, **kw) == min(tree, curve)


def test_extra_projection_directions_stay_lower_bounds():
    rng = np.random.default_rng(9)
    dirs = np.array([[1.0, 1.0], [1.0, -1.0], [3.0, 0.5]])
    for _ in range(50):
        X, Y = clustered(rng, 30, 2), rng.random((25, 2))
        low = w1_lower_bound(X, Y, directions=dirs)
        assert w1_lower_bound(X, Y) <= low <= w1_exact(X, Y) + TOL


def reference_tree_bound(X, Y, depth):
    """Slow recursive version of the tree bound (docstring formula), uniform weights."""
    d = X.shape[1]
    P = np.vstack((X, Y))
    w = np.concatenate((np.full(len(X), 1 / len(X)), np.full(len(Y), -1 / len(Y))))

    def walk(idx, level):
        pts = P[idx]
        if level == depth:
            diam = (pts.max(0) - pts.min(0)).max()
            e = w[idx].sum()
            return diam * (np.abs(w[idx]).sum() - abs(e)) / 2, e
        c, k = level % d, level // d + 1
        cell = np.minimum(np.floor(P[idx, c] * 2.0**k), 2**k - 1)
        parts = [idx[cell % 2 == 0], idx[cell % 2 == 1]]
        cost, ex = 0.0, []
        for part in parts:
            sub_cost, e = walk(part, level + 1) if part.size else (0.0, 0.0)
            cost += sub_cost
            ex.append(e)
        if parts[0].size and parts[1].size:
            A, B = P[parts[0]], P[parts[1]]
            reach = max((B.max(0) - A.min(0)).max(), (A.max(0) - B.min(0)).max())
            cost += reach * (abs(ex[0]) + abs(ex[1]) - abs(ex[0] + ex[1])) / 2
        return cost, ex[0] + ex[1]

    return walk(np.arange(len(P)), 0)[0]


@pytest.mark.parametrize("seed", range(12))
def test_tree_bound_matches_slow_reference_at_every_depth(seed):
    rng = np.random.default_rng(100 + seed)
    X, Y = random_case(rng)
    d = X.shape[1]
    depths = sorted({0, 1, 2, 3, 5, 9, default_depth(d), min(52 * d, 70)})
    values = []
    for r in depths:  # 70 > 63 levels: the multi-word sort path
        tree = dyadic_bounds(X, Y, r)[0]
        assert tree == pytest.approx(reference_tree_bound(X, Y, r), abs=1e-12)
        values.append(tree)
    assert all(
        b <= a + TOL for a, b in zip(values, values[1:], strict=False)
    )  # deeper <= shallower


def structured_cases(rng, n):
    line = rng.random(n)
    line_b = rng.beta(2, 2, n)
    t = rng.random(n)
    X_noise = rng.random((n, 2))
    return {
        "two clusters 50/50 vs 30/70 (2-D)": (
            _two_clusters(rng, n, 0.5),
            _two_clusters(rng, n, 0.3),
        ),
        "line in 3-D, uniform vs Beta(2,2)": (
            np.column_stack((line, line, line)),
            np.column_stack((line_b, line_b, line_b)),
        ),
        "uniform vs uniform (2-D)": (rng.random((n, 2)), rng.random((n, 2))),
        "uniform vs uniform (3-D)": (rng.random((n, 3)), rng.random((n, 3))),
        "X vs X + N(0, 0.01^2) (2-D)": (
            X_noise,
            np.clip(X_noise + 0.01 * rng.standard_normal((n, 2)), 0, 1),
        ),
        "uniform vs uniform^2, m = n/2 (2-D)": (
            np.column_stack((t, t[::-1])),
            rng.random((n // 2, 2)) ** 2,
        ),
    }


def _two_clusters(rng, n, p):
    centre = np.where(rng.random((n, 1)) < p, 0.25, 0.75)
    return np.clip(centre + 0.05 * rng.standard_normal((n, 2)), 0.0, 1.0)


# Measured on seed 0, n = 1000 (see the printed table); generous limits catch regressions.
MAX_UPPER_FACTOR = 5.0


def test_bracket_tightness_on_structured_cases(capsys):
    rng = np.random.default_rng(0)
    rows = []
    for name, (X, Y) in structured_cases(rng, 1000).items():
        exact = w1_exact(X, Y)
        low, (tree, curve) = w1_lower_bound(X, Y), dyadic_bounds(X, Y)
        up = min(tree, curve)
        assert low <= exact + TOL <= up + 2 * TOL
        assert up <= MAX_UPPER_FACTOR * exact
        rows.append(
            f"{name:38s} exact {exact:.4g}  lower/exact {low / exact:.3f}  "
            f"upper/exact {up / exact:.3f} (tree {tree / exact:.3f}, curve {curve / exact:.3f})"
        )
    with capsys.disabled():
        print("\n" + "\n".join(rows))


# --- estimate and summary -----------------------------------------------------------------


def test_subsample_estimate_is_reproducible_and_exact_at_full_size():
    rng = np.random.default_rng(10)
    X, Y = rng.random((80, 2)), rng.random((60, 2))
    first = w1_subsample_estimate(X, Y, 30, 4, np.random.default_rng(1))
    again = w1_subsample_estimate(X, Y, 30, 4, np.random.default_rng(1))
    assert first == again and first[1] > 0
    mean, std = w1_subsample_estimate(X, Y, 100, 3, np.random.default_rng(2))
    assert mean == pytest.approx(w1_exact(X, Y), abs=1e-12) and std == pytest.approx(0, abs=1e-12)


def test_summary_exact_and_bracket_branches():
    rng = np.random.default_rng(11)
    X, Y = clustered(rng, 300, 2), rng.random((200, 2))
    exact = w1_summary(X, Y)
    assert exact["kinds"] == {"exact": "exact"} and exact["metric"] == "linf"
    assert exact["exact"] == pytest.approx(w1_exact(X, Y), abs=1e-12)
    big = w1_summary(X, Y, exact_max_pairs=1000, rng=np.random.default_rng(0))
    assert "exact" not in big
    assert big["kinds"] == {
        "lower": "lower_bound",
        "upper": "upper_bound",
        "subsample": "subsample_estimate",
        "subsample.floor": "subsample_floor",
    }
    assert big["subsample"]["floor"]["mean"] > 0
    assert big["lower"] <= exact["exact"] + TOL <= big["upper"] + 2 * TOL
    assert big["subsample"]["kind"] == "subsample_estimate" and big["subsample"]["std"] >= 0
    assert (big["n"], big["m"], big["d"]) == (300, 200, 2)


def test_subsample_floor_matches_a_second_sample_of_the_same_table():
    rng = np.random.default_rng(11)
    X, Y = rng.random((4000, 2)), rng.random((4000, 2))  # same distribution
    floor, floor_std = w1_subsample_floor(X, 500, 6, np.random.default_rng(1))
    est, est_std = w1_subsample_estimate(X, Y, 500, 6, np.random.default_rng(1))
    assert floor > 0 and abs(est - floor) < 3 * (floor_std + est_std)
    shifted, _ = w1_subsample_estimate(X, Y + 0.1, 500, 6, np.random.default_rng(1))
    assert shifted > floor + 0.05  # a real difference stands out above the floor
    again = w1_subsample_floor(X, 500, 6, np.random.default_rng(1))
    assert again == (floor, floor_std)
    assert w1_subsample_floor(X[:3], 500, 2, np.random.default_rng(1))[0] >= 0  # size 1


# --- streamed statistics (tables read in batches) ------------------------------------------


def batched(rows, size):
    return [rows[k : k + size] for k in range(0, len(rows), size)]


def cells_of(X, Y, size, cap):
    cells = DyadicCells(X.shape[1], max_cells=cap)
    for side, rows in ((0, X), (1, Y)):
        for part in batched(rows, size):
            cells.add(part, side)
    return cells


def test_cell_bounds_are_the_in_memory_tree_at_their_depth_and_bound_w1():
    rng = np.random.default_rng(12)
    for _ in range(60):
        X, Y = random_case(rng)
        exact = w1_exact(X, Y)
        cap = int(rng.choice([1, 3, 16, 10**6]))
        cells = cells_of(X, Y, int(rng.integers(1, 40)), cap)
        assert cells.size <= cap
        tree, curve = cells.bounds()
        assert tree == pytest.approx(dyadic_bounds(X, Y, cells.depth)[0], rel=1e-12, abs=1e-15)
        assert exact <= tree + TOL and exact <= curve + TOL
        # the same cells, bit for bit, from another split and from merging two halves
        other = cells_of(X, Y, len(X) + len(Y), cap)
        half = cells_of(X[: len(X) // 2], Y[: len(Y) // 2], 7, cap)
        half.merge(cells_of(X[len(X) // 2 :], Y[len(Y) // 2 :], 5, cap))
        for again in (other, half):
            assert again.depth == cells.depth
            for name in ("codes", "counts", "lo", "hi"):
                assert np.array_equal(getattr(again, name), getattr(cells, name))


def test_binned_1d_bracket_contains_exact_and_is_exact_with_enough_bins():
    rng = np.random.default_rng(13)
    for _ in range(80):
        X, Y = random_case(rng)
        x, y = X[:, 0], Y[:, 0]
        exact = w1_1d(x, y)
        for cap in (1, 4, 32, 10**6):
            hx, hy = Histograms(1, cap), Histograms(1, cap)
            for part in batched(x, 13):
                hx.add(part[:, None], part[:, None] * 10 - 3)  # values: any increasing map
            hy.add(y[:, None], y[:, None] * 10 - 3)
            low, high = w1_1d_bracket(hx, hy, 0)
            assert low <= 10 * exact + TOL <= high + 2 * TOL
            q = binned_quantiles(hx, 0, (0.0, 0.05, 0.5, 0.95, 1.0))
            err = np.abs(q - (np.quantile(x, (0.0, 0.05, 0.5, 0.95, 1.0)) * 10 - 3))
            assert err.max() <= 10 * 2.0 ** -hx.columns[0].depth + TOL  # within one bin
            if cap == 10**6:  # bins of 2**-52: every bin holds one distinct value
                assert (low, high) == pytest.approx((10 * exact, 10 * exact), abs=1e-12)
                assert err.max() <= 1e-12


def test_exact_sums_match_numpy_and_do_not_depend_on_the_batches():
    rng = np.random.default_rng(14)
    U = np.clip(rng.normal(0.5, 0.15, (500, 3)) @ np.diag([1.0, 0.5, 0.2]), 0, 1)
    U[:, 2] = np.clip(U[:, 2] + 0.5 * U[:, 0], 0, 1)
    present = rng.random(U.shape) > 0.1
    one, many = ExactSums(3), ExactSums(3)
    one.add(U, present)
    for part, mask in zip(batched(U, 97), batched(present, 97), strict=True):
        half = ExactSums(3)
        half.add(part, mask)
        many = half.merge(many)  # any merge order
    for name in ("count", "first", "second", "cross"):
        assert (getattr(one, name) == getattr(many, name)).all()
    both = present[:, 0] & present[:, 2]
    want = np.corrcoef(U[both][:, [0, 2]], rowvar=False)[0, 1]
    assert one.correlation()[0, 2] == pytest.approx(want, rel=1e-9)
    assert one.mean()[1] == pytest.approx(U[present[:, 1], 1].mean(), abs=1e-11)
    assert one.variance()[1, 1] == pytest.approx(U[present[:, 1], 1].var(), rel=1e-9)


def test_hash_sample_is_uniform_and_independent_of_batches_and_order():
    rows = np.arange(50, dtype=np.float64)[:, None]
    hits = np.zeros(50)
    for seed in range(400):
        one, many = HashSample(10, 1, seed), HashSample(10, 1, seed)
        one.add(rows)
        for part in batched(rows[::-1], 7):  # other batches, in reverse order
            other = HashSample(10, 1, seed)
            other.add(part)
            many = other.merge(many)
        assert np.array_equal(one.sample(), many.sample())
        hits[one.sample()[:, 0].astype(int)] += 1
    # each row is kept with probability 10/50: 400 draws, sd 8; 5 sd either side
    assert np.all(np.abs(hits - 80) <= 40)
    small = HashSample(60, 1, 0)
    small.add(rows)
    assert small.complete and np.array_equal(np.sort(small.sample(), axis=0), rows)
