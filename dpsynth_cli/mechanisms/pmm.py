"""Private Measure Mechanism, PMM (dissertation Algorithm 4, Theorems 3.8-3.10).

Privacy (Theorem 3.8). Neighbouring relation: add/remove one row (the default). One row lies in
exactly one cell per level, so adding or removing it changes one count per level by 1: with
discrete Laplace noise of scale sigma_j on level j, the counts are (sum_j 1/sigma_j)-DP. Under
replace-one-row two counts per level change, so the sensitivity per level is 2 and every scale is
doubled. Scales follow eq. (3.7), sigma_j proportional to 1/sqrt(Delta_{j-1}), made exact: the
weights sqrt(Delta_{j-1}) are rounded to rationals w_j and sigma_j = sens * sum(w) / (eps * w_j),
so sum_j sens/sigma_j equals the PMM's epsilon share exactly (not merely approximately).

Depth (Corollary 3.11): r = ceil(log2(eps n)) for d >= 2 and one less for d = 1, where n is a
*noisy* count (the true n is private under add/remove) and eps is the per-unit-sensitivity
epsilon; r is capped so that the tree has at most 2^LEAF_CAP_LOG2 leaves (bounded memory).

Output: consistent counts by Algorithm 3 (proportional transformation), then m_theta points
drawn uniformly in each leaf cell: "choose any points in the cell" made concrete without looking
at the data, so it is post-processing. The output size is the consistent root, i.e. the clipped
noisy root count (its noise scale sigma_0 is the largest; in high d about 3.4 sqrt(eps n)/eps).
`--rows N` draws N cells from m_theta; if m_theta has no mass (a noisy root <= 0), the uniform
measure on the cube stands in (`base.fill_empty`: N rows, or the noisy count's without
`--rows`).

High dimensions: the depth r <= 24 does not depend on d, so when d > r only the first r
coordinates are ever halved (once each) and the others are uniform on [0, 1] in every cell; the
leaf counts never exceed 2^24 and the cost is O(n d + 2^r) for any d.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from dpsynth_cli.engine.rows import Rows, as_rows
from dpsynth_cli.mechanisms import partition
from dpsynth_cli.mechanisms.base import MechanismRun, Output, Place, output_counts, resample_counts
from dpsynth_cli.mechanisms.consistency import make_consistent
from dpsynth_cli.privacy import noise
from dpsynth_cli.privacy.ledger import Ledger, Spend, histogram_sensitivity

LEAF_CAP_LOG2 = 24
WEIGHT_GRID = 2**16


@dataclass(frozen=True)
class PmmPlan:
    """Public parameters of one PMM run: everything the report says about the mechanism."""

    d: int
    depth: int
    epsilon: Fraction
    sensitivity: int
    level_scales: tuple[Fraction, ...]
    lead: partition.Lead = ()

    def to_json(self) -> dict:
        return {
            "name": "pmm",
            "algorithm": "Private Measure Mechanism, dissertation Algorithm 4",
            "depth": self.depth,
            "leaf_cells": 1 << self.depth,
            "leaf_cap": 1 << LEAF_CAP_LOG2,
            "split_order": partition.split_order_text(self.lead),
            "level_noise_scales": [float(s) for s in self.level_scales],
            "noise": "discrete Laplace, scales by eq. (3.7), exact rationals",
            "consistency": "Algorithm 3, proportional transformation",
            "placement": "uniform at random inside each leaf cell (post-processing)",
        }


def level_weights(depth: int, d: int, lead: partition.Lead = ()) -> list[Fraction]:
    """Rational stand-ins for sqrt(Delta_{j-1}), j = 0..depth, scaled so the largest is 1."""
    roots = [math.sqrt(x) for x in partition.level_diameter_sums(depth, d, lead)[:-1]]
    top = max(roots)
    return [Fraction(max(1, round(r / top * WEIGHT_GRID)), WEIGHT_GRID) for r in roots]


def level_scales(
    epsilon: Fraction, depth: int, d: int, sensitivity: int, lead: partition.Lead = ()
) -> tuple[Fraction, ...]:
    """Eq. (3.7) scales: sigma_j = sens * S / (eps * w_j), so sum_j sens / sigma_j == eps."""
    weights = level_weights(depth, d, lead)
    total = sum(weights, Fraction(0))
    return tuple(sensitivity * total / (epsilon * w) for w in weights)


def choose_depth(noisy_n: int, epsilon: Fraction, d: int, sensitivity: int) -> int:
    """Corollary 3.11's depth for the noisy count, at least 0 and at most the leaf cap."""
    scale = float(epsilon) / sensitivity * max(noisy_n, 1)
    r = math.ceil(math.log2(scale)) if scale > 1 else 0
    if d == 1:
        r -= 1
    return int(min(max(r, 0), LEAF_CAP_LOG2))


def plan(
    noisy_n: int, epsilon: Fraction, d: int, relation: str, lead: partition.Lead = ()
) -> PmmPlan:
    """Fix depth and noise scales from public quantities only (epsilon, d, noisy count, and
    the level columns' bits: with them the same depth, level columns split first)."""
    sens = histogram_sensitivity(relation)
    depth = partition.depth_limit(d, lead, choose_depth(noisy_n, epsilon, d, sens))
    scales = level_scales(epsilon, depth, d, sens, lead)
    return PmmPlan(d, depth, epsilon, sens, scales, tuple(lead))


def noisy_level_counts(
    X: Rows | np.ndarray, pmm: PmmPlan, source: noise.RandomSource, ledger: Ledger
) -> list[np.ndarray]:
    """Theorem 3.8: true counts of every cell plus discrete Laplace noise, spend recorded."""
    counts = partition.true_level_counts(X, pmm.depth)
    sizes = [1 << j for j in range(pmm.depth + 1)]
    draws = noise.discrete_laplace_mixed(source, list(pmm.level_scales), sizes)
    ledger.record(
        Spend(
            step="pmm",
            mechanism="PMM noisy hierarchical counts (Algorithm 4, Theorem 3.8)",
            epsilon=pmm.epsilon,
            sensitivity=pmm.sensitivity,
            noise={
                "distribution": "discrete Laplace",
                "scales_by_level": [float(s) for s in pmm.level_scales],
                "sensitivity_per_level": pmm.sensitivity,
            },
        )
    )
    offsets = np.cumsum([0] + sizes)
    for j, c in enumerate(counts):  # in place: the exact counts are fresh arrays, never reused
        c += draws[offsets[j] : offsets[j + 1]]
    return counts


def consistent_leaf_counts(
    X: Rows | np.ndarray,
    pmm: PmmPlan,
    source: noise.RandomSource,
    ledger: Ledger,
    rng: np.random.Generator,
) -> np.ndarray:
    """Algorithm 4 up to the sampling step: consistent non-negative leaf counts m_theta."""
    noisy = noisy_level_counts(X, pmm, source, ledger)
    return make_consistent(noisy, rng)[-1]


def sample_points(
    leaf_counts: np.ndarray, pmm: PmmPlan, rng: np.random.Generator, rows: int | None = None
) -> np.ndarray:
    """Points uniform in the leaf cells, m_theta per cell, or `rows` drawn from that measure."""
    leaf_counts = resample_counts(leaf_counts, rows, rng)
    return placer(pmm)(np.arange(leaf_counts.size), leaf_counts, rng)


def placer(pmm: PmmPlan) -> Place:
    """Points uniform in the given leaf cells, so many per cell, in random order."""

    def place(cells: np.ndarray, counts: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        codes = np.repeat(cells.astype(np.int64), counts)
        rng.shuffle(codes)
        return partition.points_in_cells(codes, pmm.depth, pmm.d, rng, pmm.lead)

    return place


def theorem_bound(pmm: PmmPlan, n: float) -> float:
    """A-priori bound on E W1 (unit cube, L-infinity) for these scales at n rows.

    Theorem 3.9: (2 sqrt 2 / n) sum_j sigma_j Delta_{j-1} + delta, with the scales actually used.
    With eq. (3.7) scales this is 2 sqrt 2 sens S^2/(eps n) + delta: Theorem 3.10 prints the
    constant sqrt 2, but its proof substitutes (3.7) into Theorem 3.9, whose constant is 2 sqrt 2;
    we report the larger, proved one.
    """
    deltas = partition.level_diameter_sums(pmm.depth, pmm.d, pmm.lead)[:-1]
    noise_term = sum(float(s) * dl for s, dl in zip(pmm.level_scales, deltas, strict=True))
    last = partition.diameter(pmm.depth, pmm.d, pmm.lead)
    return 2 * math.sqrt(2) / max(n, 1) * noise_term + last


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
    """Algorithm 4 end to end, with the a-priori bound of Theorem 3.10 at the noisy count."""
    X = as_rows(X)
    pmm = plan(noisy_rows, epsilon, X.d, relation, X.lead)
    leaves = output_counts(
        consistent_leaf_counts(X, pmm, source, ledger, rng), rows, noisy_rows, rng
    )
    return MechanismRun(
        output=Output(leaves, placer(pmm), copy.deepcopy(rng), pmm.d),
        description=pmm.to_json(),
        guarantee="a-priori bound on expected W1 (L-infinity metric; with level columns, the "
        "mixed metric, levels at distance 1), dissertation Theorem 3.10, with the constant "
        "2*sqrt(2) that its proof via Theorem 3.9 gives (3.10 prints sqrt(2))",
        w1_bound=theorem_bound(pmm, noisy_rows),
    )
