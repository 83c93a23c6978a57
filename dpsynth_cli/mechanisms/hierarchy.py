"""Nested-grid hierarchy with least-squares consistency and pruning (`--mechanism hierarchy`).

A sibling of the PMM (dissertation Algorithm 4) tuned for measured W1 rather than for its proof.
The cube is cut into nested regular grids: level i has k_i cells per axis (k_i^d cells), each
level refines the one above by a factor 2 or 3 per axis, and the finest ("leaf") level has about
c_d (eps n)^(1/(d+1)) cells per axis: the resolution of the eps-DP uniform grid, times a constant
c_d measured per dimension. Only the last L_d levels are measured (a band); the top of the tree
(at least the root) is implicit, as in the grid, which is the special case L = 1.

Higher dimensions (`plan`; d <= 3 keep the measured rule exactly). c_d^d grows exponentially, and a
band of 2^d-cell levels estimates the total (the output size) from thousands of noisy cells: at
1000 rows x 15 columns and eps 0.2 its standard deviation was larger than n, and outputs had 0 to
3000+ rows. From d = 4 on the plan is therefore the first of (1) the measured rule, (2) the same
band with fewer cells per axis, (3) two cells on each of the first m columns only (one level,
2^m <= max(1, eps n / sens), m <= MAX_AXES = 22), (4) the root alone, whose least-squares total
has a standard deviation of at most TOTAL_RSD = 10% of the noisy count (`total_variance`, a
function of the plan). Columns a grid does not cut are uniform on [0, 1] in every cell: the
release says nothing about them, so for d >> log2(eps n) the output keeps the joint law of the
first m columns (coarsely) and no more. Count arrays have one numpy dimension per cut axis
(<= 22; numpy allows 32, or 64 from numpy 2), and nothing is ever of size 2^d; time and memory are
O(n d + cells), cells <= 2^LEAF_CAP_LOG2.

Privacy. Neighbouring relation: add/remove one row (default) or replace one row. Every level is
a partition of [0,1]^d (a row on a cell boundary goes to exactly one cell; x = 1 to the last;
when only the first m columns are cut, a cell is a box on them times [0,1]^(d-m)), so
adding or removing a row changes exactly one count per level by 1: the L1 sensitivity of a
level's count vector is 1, and 2 under replace-one-row (one count down, one up), the
`histogram_sensitivity` of the relation. Level i gets exact discrete Laplace noise
(`privacy.noise.discrete_laplace_mixed`, Canonne, Kamath & Steinke 2020) of exact rational scale
sigma_i = sens * W / (eps * w_i) with w_i = 2^(i - L + 1) and W = sum w_i, so level i is
(sens / sigma_i)-DP and the levels compose to sum_i sens / sigma_i = eps exactly (checked in
rational arithmetic by tests/test_hierarchy.py). The noisy row count (`noisy_rows`, released by
its own step) and eps, d and the relation are the only inputs of the plan (grid sizes, levels,
scales, threshold, axes cut; `total_variance` is a function of the plan): the true n is never
used.

Post-processing (no privacy cost: it reads only the released noisy counts, public parameters and
post-processing randomness):
1. Least-squares consistency over the tree (Hay, Rastogi, Miklau & Suciu 2010, "Boosting the
   accuracy of differentially private histograms through consistency"): their two-pass
   algorithm, generalised to per-level noise variances 2p/(1-p)^2 (p = exp(-1/sigma_i), the
   discrete Laplace variance), unmeasured upper levels and fan-outs 2^d or 3^d. It returns the
   generalised least-squares estimate of every cell count (the best linear unbiased estimate
   given all measured levels), consistent across levels.
2. Pruning: a cell whose least-squares estimate is below KAPPA standard deviations of that
   estimate gets weight zero, so clipped noise in empty regions does not create phantom rows;
   its parent's mass goes to its siblings.
3. Integer consistent counts top-down, as Algorithm 3 of the dissertation but with the
   least-squares estimates as the split weights: the total (the least-squares estimate of the
   root) is split among the top cells, and every parent's integer count among its children in
   proportion to their pruned weights (largest remainder rounding, random ties).
4. Placement: inside each leaf cell, points follow a product of per-axis linear densities whose
   slopes are central differences of the neighbouring leaf counts (a MUSCL-style piecewise
   linear reconstruction, clipped to keep the density non-negative), and the cell's points are
   a low-discrepancy set (exactly stratified for d = 1; a randomly shifted Kronecker sequence
   with the generalised golden ratio for d >= 2) pushed through the per-axis inverse CDFs
   (`placement.py`, shared with privtree). `rows` resamples the leaf counts multinomially
   first. Output rows are shuffled. If the leaves have no mass (the least-squares total rounds
   to 0 or below), `base.fill_empty` places `rows` or, without it, the noisy count's rows from
   the uniform measure on the cube, so the output size follows the noisy count and `--rows N`
   always gives N rows (post-processing of released values).

Accuracy. No a-priori bound. The PMM's Theorem 3.9 ((2 sqrt 2 / n) sum_j sigma_j Delta_{j-1}
+ delta) rests on Algorithm 3's split being comparable with the noisy counts (Lemma 3.16), so
that each level's consistent error is at most twice its noise. The least-squares weights (a
split may move away from a cell's own noisy count) and the pruning (a cell with rows may get
zero) break that comparability, and the unmeasured upper levels would have to be charged with
the summed noise of their descendants. So `w1_bound` is None and accuracy is measured, not
proved: mean exact W1 against the uniform grid and the literal PMM on smooth, clustered,
skewed and real tables (d = 1..3, eps = 0.1..2, n = 2000 and 20000).

Cost: one bincount of the rows, k^m (1 + 2^-m + ...) noise draws for m cut axes (far fewer than the
PMM's 2^(depth+1)), and O(k^m) array passes per level; memory is capped at 2^LEAF_CAP_LOG2
leaves, plus the n x d output.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from fractions import Fraction
from functools import partial

import numpy as np

from dpsynth_cli.engine.rows import Rows, as_rows
from dpsynth_cli.mechanisms import grid
from dpsynth_cli.mechanisms.base import (
    MechanismRun,
    Output,
    discrete_laplace_variance,
    output_counts,
)
from dpsynth_cli.mechanisms.grid import leaf_slopes  # noqa: F401 (hierarchy.leaf_slopes)
from dpsynth_cli.privacy import noise
from dpsynth_cli.privacy.ledger import Ledger, Spend, histogram_sensitivity

LEAF_CAP_LOG2 = 22
# Constants measured on scratch tables (smooth, clustered, skewed; d = 1, 2, 3; n = 2000;
# eps = 0.1 .. 2): leaf resolution c_d times the grid's (eps n)^(1/(d+1)) cells per axis, and
# how many levels are measured: (eps n / sens threshold, levels below it, levels from it on).
RESOLUTION = {1: 1.25, 2: 1.5, 3: 1.5}
RESOLUTION_DEFAULT = 1.5
LEVELS = {1: (0.0, 1, 1), 2: (900.0, 1, 2), 3: (500.0, 2, 3)}
LEVELS_DEFAULT = (0.0, 2, 2)
KAPPA = 2.0  # pruning threshold, in standard deviations of a cell's least-squares estimate
# Dimensions for which RESOLUTION and LEVELS were measured: their plans are never changed. From
# d = 4 on, `plan` coarsens the grid until the least-squares total has a standard deviation of at
# most TOTAL_RSD times the noisy count.
TUNED_DIMENSIONS = 3
TOTAL_RSD = 0.1
# At most this many axes are cut (count arrays have at most this many numpy dimensions; each cut
# axis has >= 2 cells, so the leaf cap allows no more anyway).
MAX_AXES = LEAF_CAP_LOG2


@dataclass(frozen=True)
class HierarchyPlan:
    """Public parameters of one run: grid sizes, noise scales, threshold."""

    d: int
    cells_per_axis: tuple[int, ...]  # k_i per level, coarsest first; each divides the next
    epsilon: Fraction
    sensitivity: int
    level_scales: tuple[Fraction, ...]
    kappa: float = KAPPA
    axes: int | None = None  # axes cut: the first `axes` columns; None: all d

    @property
    def cut(self) -> int:
        """Number of axes the grids cut (columns 0 .. cut-1); the others span [0, 1] in every
        cell. Count arrays have shape (k,) * cut."""
        return self.d if self.axes is None else self.axes

    @property
    def implicit_cells_per_axis(self) -> tuple[int, ...]:
        """Unmeasured coarser levels above the band (their counts are sums), coarsest first."""
        return tuple(k for k in level_sizes(self.cells_per_axis[0], 10**9) if k > 1)[:-1]

    @property
    def tree_cells_per_axis(self) -> tuple[int, ...]:
        """Every level of the tree below the root: implicit ones, then the measured band."""
        return self.implicit_cells_per_axis + self.cells_per_axis

    @property
    def tree_fanouts(self) -> tuple[int, ...]:
        ks = (1,) + self.tree_cells_per_axis
        return tuple(b // a for a, b in zip(ks[:-1], ks[1:], strict=True))

    @property
    def fanouts(self) -> tuple[int, ...]:
        """Per-axis refinement factor from the level above (the root for level 0)."""
        ks = (1,) + self.cells_per_axis
        return tuple(b // a for a, b in zip(ks[:-1], ks[1:], strict=True))

    @property
    def variances(self) -> tuple[float, ...]:
        return tuple(discrete_laplace_variance(s) for s in self.level_scales)

    def to_json(self) -> dict:
        return {
            "name": "hierarchy",
            "algorithm": "nested-grid hierarchy: noisy counts on a band of levels, "
            "least-squares consistency (Hay et al. 2010), pruning, consistent integer counts "
            "(Algorithm 3 style top-down split), piecewise-linear low-discrepancy placement",
            "cells_per_axis_by_level": list(self.cells_per_axis),
            "axes_cut": self.cut,
            "uncut_columns": "none"
            if self.cut == self.d
            else f"columns {self.cut + 1}..{self.d}: uniform on [0,1] in every cell",
            "unmeasured_coarser_levels": list(self.implicit_cells_per_axis),
            "leaf_cells": self.cells_per_axis[-1] ** self.cut,
            "leaf_cap": 1 << LEAF_CAP_LOG2,
            "level_noise_scales": [float(s) for s in self.level_scales],
            "noise": "discrete Laplace, exact rational scales, sum of sens/scale = epsilon",
            "consistency": "generalised least squares over the tree, then top-down integer split",
            "pruning_threshold_sd": self.kappa,
            "placement": "piecewise-linear density per leaf, low-discrepancy (post-processing)",
        }


def _smooth_numbers(limit: int) -> list[int]:
    """All 2^a 3^b <= limit, ascending (grid sizes whose nested coarsenings divide evenly)."""
    out, p2 = [], 1
    while p2 <= limit:
        p = p2
        while p <= limit:
            out.append(p)
            p *= 3
        p2 *= 2
    return sorted(out)


def leaf_cells_per_axis(noisy_n: int, epsilon: Fraction, d: int, sensitivity: int) -> int:
    """c_d (eps n / sens)^(1/(d+1)) rounded (in log scale) to a 2^a 3^b, under the leaf cap."""
    scale = float(epsilon) / sensitivity * max(noisy_n, 1)
    target = RESOLUTION.get(d, RESOLUTION_DEFAULT) * max(scale, 1.0) ** (1.0 / (d + 1))
    kmax = max(1, int(2 ** (LEAF_CAP_LOG2 / d) + 1e-9))
    while kmax**d > 1 << LEAF_CAP_LOG2:
        kmax -= 1
    cands = _smooth_numbers(kmax)
    return min(cands, key=lambda k: (abs(math.log(k / max(target, 1.0))), k))


def level_sizes(leaf: int, levels: int) -> tuple[int, ...]:
    """Coarser levels of a leaf grid, dividing by 2 (else 3) per axis; coarsest first."""
    ks = [leaf]
    while len(ks) < levels and ks[0] > 1:
        ks.insert(0, ks[0] // (2 if ks[0] % 2 == 0 else 3))
    return tuple(ks)


def level_scales(epsilon: Fraction, levels: int, sensitivity: int) -> tuple[Fraction, ...]:
    """sigma_i = sens W / (eps w_i), w_i = 2^(i - L + 1): sum_i sens / sigma_i == eps exactly."""
    weights = [Fraction(1, 2 ** (levels - 1 - i)) for i in range(levels)]
    total = sum(weights, Fraction(0))
    return tuple(sensitivity * total / (epsilon * w) for w in weights)


def measured_levels(noisy_n: int, epsilon: Fraction, d: int, sensitivity: int) -> int:
    """How many levels (the leaf and those just above it) get noisy counts."""
    threshold, few, many = LEVELS.get(d, LEVELS_DEFAULT)
    return many if float(epsilon) / sensitivity * max(noisy_n, 1) >= threshold else few


def total_variance(hp: HierarchyPlan) -> float:
    """Variance of the least-squares estimate of the total (the root), from the plan alone: the
    bottom-up recursion of `least_squares` over the tree (unmeasured levels are sums)."""
    implicit = len(hp.implicit_cells_per_axis)
    variances = [None] * implicit + list(hp.variances)
    fanouts = hp.tree_fanouts
    v = variances[-1]
    for i in range(len(variances) - 2, -1, -1):
        below = v * float(fanouts[i + 1]) ** hp.cut
        v = below if variances[i] is None else variances[i] * below / (variances[i] + below)
    return v * float(fanouts[0]) ** hp.cut


def _grid_plan(
    d: int, axes: int, leaf: int, levels: int, epsilon: Fraction, sens: int
) -> HierarchyPlan:
    """The band of `levels` levels above a leaf grid of `leaf` cells on each of `axes` axes."""
    ks = tuple(k for k in level_sizes(leaf, levels) if k > 1)
    ks = ks or (1,)  # the root is measured only when it is the leaf (tiny eps n)
    scales = level_scales(epsilon, len(ks), sens)
    return HierarchyPlan(d, ks, epsilon, sens, scales, axes=None if axes == d else axes)


def plan(noisy_n: int, epsilon: Fraction, d: int, relation: str) -> HierarchyPlan:
    """Fix every parameter from public quantities only (epsilon, d, noisy count, relation).

    d <= TUNED_DIMENSIONS: the measured rule, every axis cut into `leaf_cells_per_axis` cells,
    `measured_levels` levels. From d = 4 on, the first of these whose least-squares total has a
    standard deviation (`total_variance`, a function of the plan) of at most TOTAL_RSD times the
    noisy count, so that the output size follows the count (c_d^d grows exponentially with d, and
    a band of 2^d-cell levels in high d would estimate the total from thousands of noisy cells):
    1. the measured rule, then the same with fewer cells per axis (2^a 3^b, down to 2);
    2. (high d) 2 cells on each of the first m axes only, one level, m as large as allows, with
       2^m <= max(1, eps n / sens) (about one cell per unit of signal: a single level of cells
       has nothing coarser to prune against) and m <= MAX_AXES; the other columns are not cut;
    3. the root alone (a noisy total; the output is uniform on the cube).
    """
    sens = histogram_sensitivity(relation)
    levels = measured_levels(noisy_n, epsilon, d, sens)
    leaf = leaf_cells_per_axis(noisy_n, epsilon, d, sens)
    if d <= TUNED_DIMENSIONS:
        return _grid_plan(d, d, leaf, levels, epsilon, sens)
    limit = (TOTAL_RSD * max(noisy_n, 1)) ** 2
    full = [k for k in _smooth_numbers(leaf)[::-1] if k >= 2] if d <= MAX_AXES else []
    for k in full:
        hp = _grid_plan(d, d, k, levels, epsilon, sens)
        if total_variance(hp) <= limit:
            return hp
    signal = max(float(epsilon) / sens * max(noisy_n, 1), 1.0)
    top = min(d - 1 if full else d, MAX_AXES, int(math.log2(signal) + 1e-9))
    for m in range(top, 0, -1):
        hp = _grid_plan(d, m, 2, 1, epsilon, sens)
        if total_variance(hp) <= limit:
            return hp
    return _grid_plan(d, d if d <= MAX_AXES else 1, 1, 1, epsilon, sens)


# -- grid helpers (arrays of shape (k,)*m over the m cut axes, C order) ---------------------------

# numpy arrays may have at most 32 dimensions (64 from numpy 2): reshapes with two dimensions per
# axis are used only up to this many axes, one axis at a time beyond.
_PAIRED_AXES = 16


def coarsen(a: np.ndarray, f: int) -> np.ndarray:
    """Sum over blocks of f^d cells: shape (k,)*d -> (k/f,)*d."""
    if f == 1:
        return a
    d, kc = a.ndim, a.shape[0] // f
    if d <= _PAIRED_AXES:  # one reduction over every axis (the summation order of earlier runs)
        pairs = [s for _ in range(d) for s in (kc, f)]
        return a.reshape(pairs).sum(axis=tuple(range(1, 2 * d, 2)))
    k = a.shape[0]
    for axis in range(d):  # axes 0..axis-1 already coarsened: 4-dimensional views only
        a = a.reshape(kc**axis, kc, f, k ** (d - axis - 1)).sum(axis=2)
    return a.reshape((kc,) * d)


def refine(a: np.ndarray, f: int) -> np.ndarray:
    """Each cell's value copied to its f^d children: shape (k,)*d -> (k f,)*d."""
    for axis in range(a.ndim):
        a = np.repeat(a, f, axis=axis)
    return a


def true_level_counts(X: Rows | np.ndarray, hp: HierarchyPlan) -> list[np.ndarray]:
    """Exact counts of every cell of every level (private: feed only to noise); one pass for
    the finest level, the others are its block sums."""
    make = partial(grid.GridCounts, hp.cells_per_axis[-1], hp.cut)
    counts = [as_rows(X).collect(make).counts]
    for f in hp.fanouts[:0:-1]:
        counts.insert(0, coarsen(counts[0], f))
    return counts


def noisy_level_counts(
    X: Rows | np.ndarray, hp: HierarchyPlan, source: noise.RandomSource, ledger: Ledger
) -> list[np.ndarray]:
    """True counts plus discrete Laplace noise of scale sigma_i on level i; spend recorded."""
    counts = true_level_counts(X, hp)
    sizes = [k**hp.cut for k in hp.cells_per_axis]
    draws = noise.discrete_laplace_mixed(source, list(hp.level_scales), sizes)
    ledger.record(
        Spend(
            step="hierarchy",
            mechanism="noisy counts of nested grids (hierarchy mechanism)",
            epsilon=hp.epsilon,
            sensitivity=hp.sensitivity,
            noise={
                "distribution": "discrete Laplace",
                "scales_by_level": [float(s) for s in hp.level_scales],
                "cells_per_axis_by_level": list(hp.cells_per_axis),
                "axes_cut": hp.cut,
                "sensitivity_per_level": hp.sensitivity,
            },
        )
    )
    offsets = np.cumsum([0] + sizes)
    for i, c in enumerate(counts):
        c += draws[offsets[i] : offsets[i + 1]].reshape(c.shape)
    return counts


# -- least squares (Hay et al. 2010, two passes, per-level variances) ---------------------------


def least_squares(
    noisy: list[np.ndarray | None], variances: list[float], fanouts: list[int]
) -> tuple[list[np.ndarray], list[float]]:
    """Generalised least-squares counts of every cell from noisy level counts.

    noisy[i] is level i's noisy count array (None: not measured; the leaf level must be), with
    noise variance variances[i]; fanouts[i] is the per-axis factor from level i-1 to i (level 0
    hangs off an unmeasured root). Bottom-up, z_v is the best estimate of cell v from its own
    subtree (inverse-variance mix of its count and its children's sum); top-down, every child
    gets its parent's residual split equally, x_v = z_v + (x_parent - sum_siblings z) / F. For
    per-level variances this is the exact weighted least-squares solution (tested against a
    direct solve). Also returns U_i, the variance of each level-i estimate.
    """
    L = len(noisy)
    d = noisy[-1].ndim
    z: list[np.ndarray] = [np.empty(0)] * L
    V = [0.0] * L
    z[-1], V[-1] = noisy[-1].astype(np.float64), variances[-1]
    for i in range(L - 2, -1, -1):
        f = fanouts[i + 1]
        total, v_total = coarsen(z[i + 1], f), V[i + 1] * f**d
        if noisy[i] is None:
            z[i], V[i] = total, v_total
        else:
            w = v_total / (variances[i] + v_total)  # weight of the level's own count
            z[i] = w * noisy[i] + (1.0 - w) * total
            V[i] = variances[i] * v_total / (variances[i] + v_total)
    x, U = [z[0]], [V[0]]
    for i in range(1, L):
        f = fanouts[i]
        F = f**d
        x.append(z[i] + refine((x[i - 1] - coarsen(z[i], f)) / F, f))
        U.append(V[i] * (1.0 - 1.0 / F) + U[i - 1] / F**2)
    return x, U


# -- consistent non-negative integer counts -----------------------------------------------------


def _block_order(kc: int, f: int, d: int) -> np.ndarray:
    """Flat (C order) index in the (kc f,)*d grid of child j (C order in (f,)*d) of parent p (C
    order in (kc,)*d), shape (kc^d, f^d): the index is separable, sum over axes of
    (p_c f + j_c) (kc f)^(d-1-c)."""
    k = kc * f
    parent = np.zeros(kc**d, dtype=np.int64)
    child = np.zeros(f**d, dtype=np.int64)
    p, j = np.arange(kc**d, dtype=np.int64), np.arange(f**d, dtype=np.int64)
    for c in range(d):
        stride = k ** (d - 1 - c)
        parent += (p // kc ** (d - 1 - c) % kc) * (f * stride)
        child += (j // f ** (d - 1 - c) % f) * stride
    return parent[:, None] + child[None, :]


def _blocks(a: np.ndarray, f: int) -> np.ndarray:
    """(k,)*d -> (number of parents, f^d): each row is one parent's children."""
    return a.reshape(-1)[_block_order(a.shape[0] // f, f, a.ndim)]


def _unblocks(b: np.ndarray, kc: int, f: int, d: int) -> np.ndarray:
    """Inverse of `_blocks` for kc parents per axis."""
    a = np.empty(b.size, dtype=b.dtype)
    a[_block_order(kc, f, d)] = b
    return a.reshape((kc * f,) * d)


def split_counts(
    parent: np.ndarray,
    weights: np.ndarray,
    fallback: np.ndarray,
    f: int,
    rng: np.random.Generator,
) -> np.ndarray:
    """Split each parent's integer count among its f^d children in proportion to `weights`.

    Children of a parent whose weights are all zero use `fallback`, then equal shares.
    Largest-remainder rounding (ties broken at random) keeps every sum exactly equal to its
    parent: the result is consistent, non-negative and integer.
    """
    d = parent.ndim
    w = _blocks(weights, f)
    fb = _blocks(fallback, f)
    F = w.shape[1]
    tot = w.sum(axis=1)
    w = np.where((tot > 0)[:, None], w, fb)
    tot = w.sum(axis=1)
    w = np.where((tot > 0)[:, None], w, 1.0)
    tot = w.sum(axis=1)
    m = parent.reshape(-1).astype(np.int64)
    target = m[:, None] * (w / tot[:, None])
    base = np.floor(target)
    short = m - base.sum(axis=1).astype(np.int64)  # units still to hand out, 0 <= short < F
    rem = target - base + rng.random(target.shape) * 1e-9
    order = np.argsort(-rem, axis=1)
    ranks = np.empty_like(order)
    np.put_along_axis(ranks, order, np.broadcast_to(np.arange(F), order.shape), axis=1)
    out = base.astype(np.int64) + (ranks < short[:, None])
    return _unblocks(out, parent.shape[0], f, d)


def consistent_leaf_counts(
    estimates: list[np.ndarray],
    U: list[float],
    fanouts: list[int],
    kappa: float,
    rng: np.random.Generator,
) -> np.ndarray:
    """Top-down integer counts from least-squares estimates, pruning cells below kappa sd.

    Levels run from the root's children (fanouts[0] per axis) to the leaves. A pruned cell's
    share goes to its siblings; if all siblings are pruned, the parent (which passed its own,
    coarser test) splits in proportion to the clipped estimates, so mass spread thinly over a
    region (a long tail) stays in that region instead of being pruned.
    """
    d = estimates[0].ndim
    total = max(0, int(round(float(estimates[0].sum()))))
    m = np.full((1,) * d, total, dtype=np.int64)
    for i, f in enumerate(fanouts):
        clipped = np.maximum(estimates[i], 0.0)
        empty = clipped < kappa * math.sqrt(U[i])
        pruned = np.where(empty, 0.0, clipped)
        m = split_counts(m, pruned, clipped, f, rng)
    return m


def release_leaf_counts(
    X: Rows | np.ndarray,
    hp: HierarchyPlan,
    source: noise.RandomSource,
    ledger: Ledger,
    rng: np.random.Generator,
) -> np.ndarray:
    """Noisy band counts (the only privacy cost), then least squares over the whole tree (the
    unmeasured coarse levels as sums) and top-down pruned integer consistency."""
    noisy = noisy_level_counts(X, hp, source, ledger)
    implicit = len(hp.implicit_cells_per_axis)
    estimates, U = least_squares(
        [None] * implicit + list(noisy),
        [0.0] * implicit + list(hp.variances),
        list(hp.tree_fanouts),
    )
    return consistent_leaf_counts(estimates, U, list(hp.tree_fanouts), hp.kappa, rng)


# -- placement ----------------------------------------------------------------------------------


def place_points(
    leaf_counts: np.ndarray,
    rng: np.random.Generator,
    rows: int | None = None,
    *,
    noisy_rows: int = 0,
    columns: int | None = None,
) -> np.ndarray:
    """Points in [0,1]^columns: leaf_counts[c] per leaf (or `rows` resampled; `base.fill_empty`
    when the leaves are empty), shuffled; `grid.placer` places them."""
    counts = output_counts(leaf_counts.reshape(-1).astype(np.int64), rows, noisy_rows, rng)
    place = grid.placer(leaf_counts, leaf_counts.ndim if columns is None else columns)
    return place(np.arange(counts.size), counts, rng)


def run(
    X: Rows | np.ndarray,
    *,
    epsilon: Fraction,
    noisy_rows: int,
    relation: str,
    source: noise.RandomSource,
    ledger: Ledger,
    rng: np.random.Generator,
    rows: int | None,
) -> MechanismRun:
    """Noisy nested-grid counts, least squares, pruning, integer consistency, placement."""
    X = as_rows(X)
    hp = plan(noisy_rows, epsilon, X.d, relation)
    leaves = release_leaf_counts(X, hp, source, ledger, rng)
    counts = output_counts(leaves.reshape(-1).astype(np.int64), rows, noisy_rows, rng)
    return MechanismRun(
        output=Output(counts, grid.placer(leaves, hp.d), copy.deepcopy(rng), hp.d),
        description=hp.to_json(),
        guarantee="no a-priori W1 bound (least-squares and pruning post-processing are outside "
        "Theorem 3.9); epsilon-DP by the sensitivity argument in the module docstring",
        w1_bound=None,
    )
