"""Private Signed Measure Mechanism, PSMM (dissertation Algorithms 1-2, Theorem 3.6, Cor. 3.7).

Algorithm 1 on the unit cube with the L-infinity metric:
1. Partition [0,1]^d into m = k^d cubic cells of side 1/k (x = 1 goes to the last cell); the
   representative y_i of a cell is its centre. k is fixed before any data is read, from
   epsilon, d, the relation and the *noisy* row count (the true n is private under add/remove)
   by the grid rule below, k rounded in log scale, and k^d <= 2^CELL_CAP_LOG2 (the solver's
   time budget).
2. Noisy counts c_i = n_i + lambda_i with exact discrete Laplace noise of scale sens/eps.
3. The signed measure nu_i = c_i / N is normalised by the noisy row count N (never the true n).
4. The d_BL-closest probability measure (corrected Algorithm 2, `transport.py`): an integer
   min-cost flow whose optimum gives N whole units on the cells, so the output is exactly N
   points (or `rows` resampled from them), with no rational approximation step.

Privacy (Proposition 3.4). Neighbouring relation: add/remove one row (default) or replace one
row. The cells partition the cube, so adding or removing a row changes one count by 1 (L1
sensitivity 1), and replacing it changes two counts by 1 each (sensitivity 2). Discrete Laplace
noise of exact rational scale sens/eps on every count (`noise.discrete_laplace`, Canonne,
Kamath & Steinke 2020) makes the count vector eps-DP. k depends only on public values and the
released noisy count. Everything after the noise (normalisation by the released N, the
projection, tie-breaking, placement, resampling) reads only released values, public geometry
and post-processing randomness: post-processing, no further cost.

Accuracy (Theorem 3.6, made explicit). With representatives at the centres,
W1(mu_X, mu_Y) <= 1/(2k) (each row moves to its centre), and the proof gives
E W1(mu_X, nu_hat) <= 1/(2k) + 2 E d_BL(mu_Y, nu). Theorem 3.6 bounds the last term by a
Laplacian complexity with an unspecified constant; we bound it explicitly by chaining over the
dyadic blocks of the grid (blocks of 2^j cells per axis, j = 0..J, the top block the whole grid):
for any f with |f| <= 1 and Lipschitz constant 1, telescoping f(y_i) through the centres of the
blocks holding cell i gives |sum_i f(y_i) lambda_i| <= |lambda(grid)| + sum_j sum_{B at level j}
min(2, (2^(j+1) - 1)/k) |lambda(B)|, and E|lambda(B)| <= sqrt(|B| Var), Var = 2p/(1-p)^2,
p = exp(-1/scale). Divided by N this bounds E d_BL(mu_Y, nu) when N = n, so, like PMM, the
report gives the bound evaluated at the noisy count. With the grid rule below its rate is
(eps n)^(-2/3) for d = 1 (Corollary 3.7's m = eps n gives (eps n)^(-1/2)), and Corollary 3.7's
log(eps n) (eps n)^(-1/2) for d = 2 and (eps n)^(-1/d) for d >= 3. The solver is exact
(optimality gap 0); a gap g would add 2g to the bound (`w1_bound`).

Grid rule (chosen on purpose, `target_cells`). With s = eps * noisy_rows / sens, Corollary 3.7
takes m = s. Balancing the two terms of the bound above (1/(2k) against the chaining sum, about
sqrt(k), k log k and k^(d-1) times the noise sd, over n) gives k ~ s^(2/3) for d = 1,
k^2 log k ~ s for d = 2 and k^d ~ s for d >= 3: Corollary 3.7's order is right from d = 3 only.
The constants are measured (benchmarks/psmm_grid.py, docs/benchmarks.md "PSMM grid size": exact
W1, same noise seeds, smooth, clustered and real tables, eps 0.5-2): m = 0.5 s^(2/3) for d = 1
(0.16x the W1 of m = s, geometric mean over 12 cells, n = 2000 and 20000), m = 0.5 s for d = 2
(0.88x over 12 cells, worst 1.17x; 0.25 s is even on average but worst 1.50x, 2 s is 1.2-1.5x
worse; finer suits clustered tables, coarser smooth ones) and m = s for d >= 3 (the best
geometric mean over 9 cells: 2 s gives 1.02x, 0.5 s 1.04x, 0.25 s 1.18x).
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from fractions import Fraction
from functools import partial

import numpy as np

from dpsynth_cli.engine.rows import Rows, as_rows
from dpsynth_cli.mechanisms import grid, transport
from dpsynth_cli.mechanisms.base import (
    MechanismRun,
    Output,
    discrete_laplace_variance,
    fill_empty,
    resample_counts,
)
from dpsynth_cli.privacy import noise
from dpsynth_cli.privacy.ledger import Ledger, Spend, histogram_sensitivity

CELL_CAP_LOG2 = 17  # at most 131072 cells: about 20-30 s for the exact flow (docs/benchmarks.md)
# King-move arcs number about (3k)^d; beyond this cap (d >= 8 with k = 2) k drops, down to a
# single cell, whose release is the uniform measure: slow is acceptable, a hang is not.
ARC_CAP_LOG2 = 24
# Grid rule: d -> (factor a, power p), m = a * (eps * noisy_rows / sens)^p cells (docstring).
GRID_RULE: dict[int, tuple[float, float]] = {1: (0.5, 2 / 3), 2: (0.5, 1.0)}
GRID_RULE_DEFAULT = (1.0, 1.0)  # d >= 3: Corollary 3.7's m = eps n
PLACEMENTS = ("linear", "uniform", "centre")
PLACEMENT = "linear"


@dataclass(frozen=True)
class PsmmPlan:
    """Public parameters of one PSMM run."""

    d: int
    k: int
    epsilon: Fraction
    sensitivity: int
    normaliser: int  # N: the noisy row count, the total mass of the output

    @property
    def cells(self) -> int:
        return self.k**self.d

    @property
    def scale(self) -> Fraction:
        return Fraction(self.sensitivity) / self.epsilon

    def to_json(self) -> dict:
        return {
            "name": "psmm",
            "algorithm": "Private Signed Measure Mechanism, dissertation Algorithms 1-2",
            "cells_per_axis": self.k,
            "cells": self.cells,
            "cell_cap": 1 << CELL_CAP_LOG2,
            "grid_rule": grid_rule_text(self.d) + ", k rounded in log scale, cubic cells, "
            "centres as representatives",
            "noise_scale": float(self.scale),
            "noise": "discrete Laplace, exact rational scale sensitivity/eps, every cell",
            "normaliser": self.normaliser,
            "normaliser_source": "noisy row count (released), never the true n",
        }


def grid_rule_text(d: int) -> str:
    factor, power = GRID_RULE.get(d, GRID_RULE_DEFAULT)
    exponent = "" if power == 1 else f"^{power:.3g}"
    return f"m = k^d about {factor:g} * (eps * noisy_rows / sensitivity){exponent}"


def target_cells(noisy_n: int, epsilon: Fraction, d: int, sensitivity: int) -> float:
    """The grid rule's m (module docstring) for public values, at least 1."""
    factor, power = GRID_RULE.get(d, GRID_RULE_DEFAULT)
    return max(factor * (float(epsilon) / sensitivity * max(noisy_n, 1)) ** power, 1.0)


def cells_per_axis(noisy_n: int, epsilon: Fraction, d: int, sensitivity: int) -> int:
    """k with k^d about the grid rule's m (log-rounded), at least 1, k^d under the caps."""
    k = max(1, round(target_cells(noisy_n, epsilon, d, sensitivity) ** (1.0 / d)))
    while k > 1 and (k**d > 1 << CELL_CAP_LOG2 or (k * 3) ** d > 1 << ARC_CAP_LOG2):
        k -= 1
    return k


def plan(noisy_n: int, epsilon: Fraction, d: int, relation: str) -> PsmmPlan:
    """Fix every parameter from public quantities only (epsilon, d, relation, noisy count)."""
    sens = histogram_sensitivity(relation)
    k = cells_per_axis(noisy_n, epsilon, d, sens)
    return PsmmPlan(d, k, epsilon, sens, max(int(noisy_n), 0))


def true_counts(X: Rows | np.ndarray, k: int, cut: int | None = None) -> np.ndarray:
    """Exact number of rows of X in each cell of the k^cut grid on the first `cut` columns (all
    by default), shape (k,)*cut, C order (private: noise only). One statistics pass."""
    rows = as_rows(X)
    return rows.collect(partial(grid.GridCounts, k, rows.d if cut is None else cut)).counts


def noisy_counts(
    X: Rows | np.ndarray, pp: PsmmPlan, source: noise.RandomSource, ledger: Ledger, cut=None
) -> np.ndarray:
    """Proposition 3.4: every cell count plus discrete Laplace(sens/eps) noise, spend recorded."""
    counts = true_counts(X, pp.k, cut)
    draws = noise.discrete_laplace(source, pp.scale, pp.cells)
    ledger.record(
        Spend(
            step="psmm",
            mechanism="PSMM noisy grid counts (Algorithm 1, Proposition 3.4)",
            epsilon=pp.epsilon,
            sensitivity=pp.sensitivity,
            noise={"distribution": "discrete Laplace", "scale": float(pp.scale), "cells": pp.cells},
        )
    )
    counts += draws.reshape(counts.shape)
    return counts


def project(
    counts: np.ndarray, pp: PsmmPlan, rng: np.random.Generator, **options
) -> transport.Projection | None:
    """The d_BL-closest probability measure in whole units of 1/N (None when N = 0)."""
    if pp.normaliser < 1:
        return None
    return transport.closest_probability(counts, pp.normaliser, rng, **options)


def place_points(
    units: np.ndarray,
    rng: np.random.Generator,
    rows: int | None = None,
    how: str = PLACEMENT,
) -> np.ndarray:
    """units[c] points in cell c (or `rows` resampled), placed by `placer`; shuffled."""
    counts = resample_counts(units.reshape(-1).astype(np.int64), rows, rng)
    return grid.placer(units, units.ndim, how)(np.arange(counts.size), counts, rng)


def noise_term(pp: PsmmPlan) -> float:
    """Explicit bound on N * E d_BL(mu_Y, nu): the dyadic chaining sum of the module docstring."""
    sd = math.sqrt(discrete_laplace_variance(pp.scale))
    k, d = pp.k, pp.d
    total = math.sqrt(pp.cells) * sd  # |lambda(grid)| (f(top) times the total noise)
    j = 0
    while (1 << j) < k:
        side = 1 << j
        full, rest = divmod(k, side)  # blocks per axis: `full` of `side` cells, one of `rest`
        per_axis = [(full, side)] + ([(1, rest)] if rest else [])
        blocks = 0.0
        for combo in _products(per_axis, d):
            num, size = combo
            blocks += num * math.sqrt(size)
        total += min(2.0, (2 * side - 1) / k) * blocks * sd
        j += 1
    return total


def _products(per_axis: list[tuple[int, int]], d: int):
    """(number of blocks, cells per block) for each mix of full and partial blocks per axis."""
    out = [(1, 1)]
    for _ in range(d):
        out = [(a * n, b * s) for a, b in out for n, s in per_axis]
    return out


def theorem_bound(pp: PsmmPlan, n: float, gap: float = 0.0) -> float:
    """A-priori bound on E W1 (unit cube, L-infinity) at n rows: Theorem 3.6 made explicit."""
    return 0.5 / pp.k + 2.0 * noise_term(pp) / max(n, 1) + 2.0 * gap


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
    """Algorithm 1 end to end with the exact sparse projection and the Theorem 3.6 bound."""
    X = as_rows(X)
    pp = plan(noisy_rows, epsilon, X.d, relation)
    # High d: one cell per axis (k = 1) is a single cell, which one column describes; the other
    # columns are uniform in it (no (1,)*d arrays, which numpy refuses beyond 64 dimensions).
    cut = X.d if pp.k > 1 else 1
    counts = noisy_counts(X, pp, source, ledger, cut)
    proj = project(counts, pp, rng)
    units = proj.multiplicities if proj is not None else np.zeros_like(counts)
    units = fill_empty(units, rows, noisy_rows, rng)  # no mass: the uniform measure stands in
    description = pp.to_json() | {
        "projection": "d_BL-closest probability measure: corrected Algorithm 2 as an integer "
        "min-cost flow on the king-move grid graph (exact)",
        "tie_break": "keep mass where noisy counts are large; created mass proportional to kept",
        "placement": f"{PLACEMENT} density inside each cell (post-processing)",
    }
    if proj is not None:
        description["projection_result"] = proj.to_json()
    sizes = resample_counts(units.reshape(-1).astype(np.int64), rows, rng)
    return MechanismRun(
        output=Output(sizes, grid.placer(units, X.d), copy.deepcopy(rng), X.d),
        description=description,
        guarantee="a-priori bound on expected W1 (L-infinity metric), dissertation Theorem 3.6 "
        "with its Laplacian-complexity term bounded explicitly (dyadic chaining over the grid), "
        "evaluated at the noisy row count",
        w1_bound=theorem_bound(pp, noisy_rows, proj.gap if proj is not None else 0.0),
    )
