"""PMM accuracy: mean exact W1 under the Theorem 3.10 bound, falling at Corollary 3.11's rate.

eps * n is varied through eps at a fixed n = 2000, so W1 stays exact (optimal transport on
2000 x ~2000 points) while the depth runs from about 10 to 17.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from dpsynth_cli.evaluate.w1 import w1_exact
from dpsynth_cli.mechanisms import pmm
from dpsynth_cli.privacy.ledger import Ledger
from dpsynth_cli.privacy.noise import RandomSource

N, RUNS = 2000, 5
EPS_N = (1e3, 1e4, 1e5)


def two_clusters(n: int, d: int, rng: np.random.Generator) -> np.ndarray:
    centre = np.where(rng.random(n)[:, None] < 0.5, 0.3, 0.7)
    return np.clip(centre + rng.normal(0, 0.1, (n, d)), 0, 1)


def mean_w1(X: np.ndarray, eps: Fraction, seed: int) -> tuple[float, pmm.PmmPlan]:
    plan = pmm.plan(X.shape[0], eps, X.shape[1], "add-remove")  # true n: the theorem's setting
    values = []
    for run in range(RUNS):
        source = RandomSource.seeded(seed + run)
        post = source.spawn("post").numpy_generator()
        leaves = pmm.consistent_leaf_counts(X, plan, source.spawn("pmm"), Ledger(eps), post)
        values.append(w1_exact(X, pmm.sample_points(leaves, plan, post)))
    return float(np.mean(values)), plan


def corollary_rate(eps_n: float, d: int) -> float:
    return math.log2(eps_n) ** 2 / eps_n if d == 1 else eps_n ** (-1 / d)


@pytest.mark.heavy
@pytest.mark.parametrize("d", [1, 2, 3])
def test_mean_w1_is_under_theorem_bound_and_falls_at_the_corollary_rate(d):
    X = two_clusters(N, d, np.random.default_rng(d))
    normalised, means = [], []
    for k, eps_n in enumerate(EPS_N):
        mean, plan = mean_w1(X, Fraction(eps_n / N), seed=1000 * d + 10 * k)
        assert mean < pmm.theorem_bound(plan, N)
        means.append(mean)
        normalised.append(mean / corollary_rate(eps_n, d))
    assert means[0] > means[1] > means[2]
    # Corollary 3.11: E W1 <~ rate; measured W1/rate varies by < 2x here (0.08-1.4), while a
    # W1 that stopped falling would move it by 100^(1/d) (>= 4.6) or, for d = 1, by ~36.
    assert max(normalised) / min(normalised) < 3


def test_pmm_with_level_columns_first_is_within_its_mixed_metric_bound():
    """PMM on a category (3 levels, 2 lead bits) and a float: Theorem 3.9's bound computed with
    the mixed metric's diameters (`partition.diameter` with lead) holds for the mean exact W1
    in that metric (levels at distance 1, `Domain.to_mixed`) over seeds, and the level shares
    come back (every leaf below level 2 holds one slot, so one level)."""
    import dataclasses

    from dpsynth_cli.domain import ColumnSpec, Domain, value_matrix
    from dpsynth_cli.engine.rows import as_rows

    rng = np.random.default_rng(0)
    specs = (
        ColumnSpec("c", "category", 0.0, 2.0, levels=("a", "b", "c")),
        ColumnSpec("x", "float", 0.0, 1.0),
    )
    domain = Domain(specs)
    codes = np.column_stack([rng.choice(3, 2000, p=[0.6, 0.3, 0.1]), rng.beta(2, 5, 2000)])
    rows = dataclasses.replace(as_rows(domain.to_cube(codes)), lead=domain.lead_bits())
    w1s = []
    for seed in range(3):
        src = RandomSource.seeded(seed)
        out = pmm.run(
            rows,
            epsilon=Fraction(1),
            noisy_rows=2000,
            relation="add-remove",
            source=src,
            ledger=Ledger(Fraction(1), "add-remove"),
            rng=src.spawn("post").numpy_generator(),
            rows=None,
        )
        Y = value_matrix(domain.from_unit(domain.cube_to_unit(next(out.output.batches()))), specs)
        shares = np.bincount(Y[:, 0].astype(int), minlength=3) / len(Y)
        assert np.abs(shares - [0.6, 0.3, 0.1]).max() < 0.05
        w1s.append(w1_exact(domain.to_mixed(codes), domain.to_mixed(Y)))
    assert "level columns first" in out.description["split_order"]
    assert np.mean(w1s) <= out.w1_bound
