"""Wasserstein-1 distance between two point sets for the L-infinity (Chebyshev) metric.

The metric is ||x - y||_inf, the metric of every accuracy theorem the project implements, so
these numbers are directly comparable with the guarantees. Measures are empirical: weight 1/n
per row of X and 1/m per row of Y unless weights are given (they are normalised to sum 1).

- `w1_exact`: exact value (POT network simplex), for n*m up to `max_pairs`.
- `w1_lower_bound` / `w1_upper_bound`: a certified bracket in O(N log N), for any size.
- `w1_subsample_estimate`: exact W1 of random subsamples, an estimate (biased upward).
- `w1_summary`: the exact value when affordable, the bracket plus an estimate otherwise
  (`bracket_summary`: that report from a bracket computed elsewhere, e.g. streamed).
- `w1_1d`: 1-D W1 in the units of the data (per-column reports reuse it).
"""

from __future__ import annotations

import warnings

import numpy as np

from dpsynth_cli.evaluate._w1_input import (
    W1InputError,
    W1SolverError,
    W1TooLargeError,
    as_pair,
    as_points,
    as_values,
    as_weights,
    uniform_or,
)
from dpsynth_cli.evaluate.w1_tree import default_depth, w1_upper_bound
from dpsynth_cli.privacy.noise import analysis_generator

__all__ = [
    "W1InputError",
    "W1SolverError",
    "W1TooLargeError",
    "bracket_summary",
    "chebyshev_cost",
    "default_depth",
    "w1_1d",
    "w1_exact",
    "w1_lower_bound",
    "w1_subsample_estimate",
    "w1_summary",
    "w1_upper_bound",
]

# 10^4 x 10^4: 800 MB for the float64 cost matrix, about 4 GiB peak in all (measured: POT's
# network simplex keeps every arc plus a dense plan, about 40 bytes per pair).
DEFAULT_MAX_PAIRS = 10**8
_NUM_ITER_MAX = 10**12  # pivots: effectively no cap; non-optimality is still checked
_OPTIMAL = 1  # POT's result code for an optimal basis


def w1_1d(
    x: object,
    y: object,
    *,
    x_weights: object | None = None,
    y_weights: object | None = None,
) -> float:
    """Exact W1 between two 1-D samples: integral of |F(t) - G(t)| dt over the merged data.

    The metric is |x - y| in the units of the data (any range). With uniform weights the CDF
    gaps are integers (m count_x - n count_y), so they carry no rounding; merging the two sorted
    samples (no sort of the union) keeps it O(N log N) and fast on 10^7 values.
    """
    x, y = as_values(x, "x"), as_values(y, "y")
    n, m = x.size, y.size
    a = as_weights(x_weights, n, "x_weights")
    b = as_weights(y_weights, m, "y_weights")
    uniform = a is None and b is None
    if uniform:
        xs, ys = np.sort(x), np.sort(y)
    else:
        ox, oy = np.argsort(x), np.argsort(y)
        xs, ys = x[ox], y[oy]
    # Merge: y_j lands after the j earlier ys and every x < y_j (tied values may come in any
    # order: they only add zero-length intervals).
    pos = np.searchsorted(xs, ys, side="left") + np.arange(m)
    is_x = np.ones(n + m, dtype=bool)
    is_x[pos] = False
    merged = np.empty(n + m)
    merged[pos] = ys
    merged[is_x] = xs
    if uniform:  # m n (F - G) as integers: an x adds m, a y takes n
        step = np.full(n + m, m, dtype=np.int64)
        step[pos] = -n
    else:
        step = np.empty(n + m)
        step[is_x] = uniform_or(a, n)[ox]
        step[pos] = -uniform_or(b, m)[oy]
    gaps = np.abs(np.cumsum(step[:-1])).astype(np.float64, copy=False)
    total = float(np.dot(gaps, np.diff(merged)))
    return total / (n * m) if uniform else total


def w1_lower_bound(
    X: object,
    Y: object,
    *,
    directions: object | None = None,
    x_weights: object | None = None,
    y_weights: object | None = None,
) -> float:
    """Lower bound on W1 (L-inf): the largest exact 1-D W1 of the projections x -> w . x.

    A projection with ||w||_1 <= 1 is 1-Lipschitz from L-inf to |.| (Hoelder), so it can only
    shrink distances and the projected W1 is <= W1. Default: the coordinate axes (the
    marginals). `directions` (k, d) adds rows w, each rescaled to ||w||_1 = 1 (e.g. the 2-D
    diagonals; they did not improve the bound on the test families, hence not the default).
    Any size, O(N log N) per direction, no quadratic memory.
    """
    X, Y = as_pair(X, Y)
    d = X.shape[1]
    a = as_weights(x_weights, X.shape[0], "x_weights")
    b = as_weights(y_weights, Y.shape[0], "y_weights")
    best = max(w1_1d(X[:, c], Y[:, c], x_weights=a, y_weights=b) for c in range(d))
    if directions is not None:
        W = np.asarray(directions, dtype=np.float64)
        if W.ndim != 2 or W.shape[1] != d or not np.isfinite(W).all():
            raise W1InputError("directions must be a finite (k, d) array")
        for w in W:
            norm = float(np.abs(w).sum())
            if norm > 0:
                w = w / norm
                best = max(best, w1_1d(X @ w, Y @ w, x_weights=a, y_weights=b))
    return best


def chebyshev_cost(X: np.ndarray, Y: np.ndarray) -> np.ndarray:
    """Dense (n, m) float64 matrix of ||x_i - y_j||_inf (exact: only differences and maxima).

    scipy's cdist: 0.1 s for 10^4 x 10^4 in 2-D here, twice as fast as blocked numpy.
    """
    from scipy.spatial.distance import cdist  # only for an exact solve (its import takes time)

    return cdist(X, Y, metric="chebyshev")


def w1_exact(
    X: object,
    Y: object,
    *,
    x_weights: object | None = None,
    y_weights: object | None = None,
    max_pairs: int = DEFAULT_MAX_PAIRS,
) -> float:
    """Exact W1 (L-inf) between the empirical measures of X (n, d) and Y (m, d), any n, m.

    d == 1 or a single point on one side: closed forms. Otherwise the transport LP is solved by
    POT's network simplex (`ot.emd2`) on the dense Chebyshev cost matrix; the solver's status
    is checked and anything but an optimal basis raises `W1SolverError`. Memory is about
    40 n m bytes at peak (cost matrix, POT's arcs and dense plan), so n*m > `max_pairs` raises
    `W1TooLargeError`: use the bracket (`w1_lower_bound`, `w1_upper_bound`) instead.
    """
    import ot  # POT takes most of a second to import: only when an exact solve is needed

    X, Y = as_pair(X, Y)
    a = as_weights(x_weights, X.shape[0], "x_weights")
    b = as_weights(y_weights, Y.shape[0], "y_weights")
    if X.shape[1] == 1:
        return w1_1d(X[:, 0], Y[:, 0], x_weights=a, y_weights=b)
    a, b = uniform_or(a, X.shape[0]), uniform_or(b, Y.shape[0])
    keep_x, keep_y = a > 0, b > 0  # zero-mass rows change nothing; POT drops them anyway
    X, a, Y, b = X[keep_x], a[keep_x], Y[keep_y], b[keep_y]
    n, m = X.shape[0], Y.shape[0]
    if n == 1 or m == 1:  # the only coupling moves everything to / from the single point
        dist = np.abs(X - Y).max(axis=1)
        return float(np.dot(dist, b if n == 1 else a))
    if n * m > max_pairs:
        raise W1TooLargeError(
            f"exact W1 needs an n*m cost matrix above max_pairs={max_pairs}; "
            "use the lower/upper bracket or a subsample estimate"
        )
    cost = chebyshev_cost(X, Y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the status code below is the authority
        value, log = ot.emd2(a, b, cost, numItermax=_NUM_ITER_MAX, log=True)
    if log.get("result_code") != _OPTIMAL:
        raise W1SolverError(f"exact W1: the OT solver did not reach optimality ({log['warning']})")
    return float(value)


def w1_subsample_estimate(
    X: object,
    Y: object,
    size: int,
    repeats: int,
    rng: np.random.Generator,
) -> tuple[float, float]:
    """Mean and standard deviation of exact W1 between `size`-row subsamples of X and Y.

    An estimate, not a bound: by convexity of W1 and E[subsample measure] = full measure,
    E[estimate] >= W1(X, Y), and the upward bias is large for small `size` (in d dimensions
    it decays like size^(-1/d) for spread-out data). Rows are drawn without replacement
    (all rows of a side with fewer than `size`).
    """
    X, Y = as_pair(X, Y)
    if size < 1 or repeats < 1:
        raise W1InputError("subsample size and repeats must be at least 1")
    values = []
    for _ in range(repeats):
        xi = rng.choice(X.shape[0], min(size, X.shape[0]), replace=False)
        yi = rng.choice(Y.shape[0], min(size, Y.shape[0]), replace=False)
        values.append(w1_exact(X[xi], Y[yi], max_pairs=max(xi.size * yi.size, 1)))
    arr = np.asarray(values)
    return float(arr.mean()), (float(arr.std(ddof=1)) if repeats > 1 else 0.0)


def w1_subsample_floor(
    X: object, size: int, repeats: int, rng: np.random.Generator
) -> tuple[float, float]:
    """Mean and standard deviation of exact W1 between two disjoint `size`-row subsamples of X
    (at most half of X each): the sampling floor of `w1_subsample_estimate` at that size.

    Another sample of the same table scores about this much, so a synthetic table whose
    estimate is near the floor is, at this resolution, as close as real data would be; the
    estimate cannot tell such tables apart.
    """
    X = as_points(X, "X")
    size = min(size, X.shape[0] // 2)
    if size < 1 or repeats < 1:
        raise W1InputError("the floor needs at least 2 rows, and repeats of at least 1")
    values = []
    for _ in range(repeats):
        idx = rng.choice(X.shape[0], 2 * size, replace=False)
        a, b = X[idx[:size]], X[idx[size:]]
        values.append(w1_exact(a, b, max_pairs=max(size * size, 1)))
    arr = np.asarray(values)
    return float(arr.mean()), (float(arr.std(ddof=1)) if repeats > 1 else 0.0)


def w1_summary(
    X: object,
    Y: object,
    exact_max_pairs: int = DEFAULT_MAX_PAIRS,
    rng: np.random.Generator | None = None,
    *,
    subsample_size: int = 2000,
    subsample_repeats: int = 5,
    floor: bool = True,
) -> dict:
    """W1 (L-inf) report: exact when n*m <= `exact_max_pairs`, else a certified bracket plus a
    subsample estimate.

    Shape: {"metric": "linf", "n", "m", "d", "kinds": {...}} and either "exact": float, or
    "lower": float, "upper": float, "subsample": {"kind", "mean", "std", "size", "repeats"}.
    "kinds" labels every number: "exact", "lower_bound", "upper_bound" or
    "subsample_estimate". `rng=None` uses the project's fixed analysis generator, so reports
    are reproducible; the subsample draws are not privacy-relevant randomness. `floor=False`
    skips the estimate's floor (`w1_subsample_floor` of X), for callers comparing many Y with
    one X that compute it once themselves.
    """
    X, Y = as_pair(X, Y)
    n, m, d = X.shape[0], Y.shape[0], X.shape[1]
    if n * m <= exact_max_pairs or d == 1:
        exact = w1_exact(X, Y, max_pairs=max(exact_max_pairs, 1))
        return {
            "metric": "linf",
            "n": n,
            "m": m,
            "d": d,
            "exact": exact,
            "kinds": {"exact": "exact"},
        }
    return bracket_summary(
        (n, m),
        (w1_lower_bound(X, Y), w1_upper_bound(X, Y)),
        X,
        Y,
        rng,
        subsample_size=subsample_size,
        subsample_repeats=subsample_repeats,
        floor=floor,
    )


def bracket_summary(
    rows: tuple[int, int],
    bracket: tuple[float, float],
    X: np.ndarray,
    Y: np.ndarray,
    rng: np.random.Generator | None = None,
    *,
    subsample_size: int = 2000,
    subsample_repeats: int = 5,
    floor: bool = True,
) -> dict:
    """`w1_summary`'s bracket branch for tables of `rows` = (n, m) rows: the certified
    `bracket` = (lower, upper) and the subsample estimate drawn from X and Y, the tables
    themselves or uniform samples of them (a uniform subsample of a uniform sample is a
    uniform subsample of the table)."""
    n, m = rows
    out: dict = {"metric": "linf", "n": n, "m": m, "d": X.shape[1]}
    rng = analysis_generator(None) if rng is None else rng
    out["lower"], out["upper"] = bracket
    mean, std = w1_subsample_estimate(X, Y, subsample_size, subsample_repeats, rng)
    out["subsample"] = {
        "kind": "subsample_estimate",
        "mean": mean,
        "std": std,
        "size": subsample_size,
        "repeats": subsample_repeats,
        "note": "biased upward (E[estimate] >= W1); an estimate, not a bound",
    }
    if not out["lower"] <= mean <= out["upper"]:
        out["subsample"]["outside_certified_bounds"] = True
        out["subsample"]["outside_note"] = (
            "the estimate lies outside the certified bounds, which hold; it is biased upward at "
            "this subsample size (compare its floor)"
        )
    kinds = {"lower": "lower_bound", "upper": "upper_bound", "subsample": "subsample_estimate"}
    if floor:
        floor_mean, floor_std = w1_subsample_floor(X, subsample_size, subsample_repeats, rng)
        out["subsample"]["floor"] = {
            "kind": "subsample_floor",
            "mean": floor_mean,
            "std": floor_std,
            "note": "W1 between two disjoint subsamples of the same size of the first table: "
            "estimates near it cannot be told apart at this size",
        }
        kinds["subsample.floor"] = "subsample_floor"
    out["kinds"] = kinds
    return out
