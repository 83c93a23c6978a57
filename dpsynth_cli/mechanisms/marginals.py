"""Noisy one-column histograms that shape the points of wide leaves (issue 15, level columns).

With level columns split first (`partition`), a table with many level combinations leaves most
of PrivTree's leaves wide along some columns: a sparse combination is one leaf over the whole
range of every numeric column and over several levels of the columns split last. Points placed
uniformly there miss the column's shape, and the leaves themselves say little about it (the
pooled leaves of 4 independent 16-level columns are nearly flat where the columns are not).
So a share of the epsilon measures each splittable column's histogram directly, as MST and AIM
measure their one-way marginals, and `placement.Pooled` draws a wide side from it.

Privacy. Neighbouring relation add/remove one row (default): the row adds 1 to one cell of each
column's histogram, so each histogram has L1 sensitivity 1 (replace: 2, `histogram_sensitivity`);
discrete Laplace noise of scale sens/eps_c on every cell of column c's histogram is eps_c-DP,
and the k histograms together are (sum eps_c)-DP = the share eps_M by sequential composition
(one ledger spend). The cells are public: a level column's 2^bits slots (its levels), a numeric
column's 2^b equal cells, b from the noisy count and eps_c only. A nullable float/datetime
column's value histogram counts only rows flagged present (one count per row at most, still).
Clipping at 0 and placing points is post-processing. The tree and its leaf counts run on
epsilon - eps_M.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction
from functools import partial

import numpy as np

from dpsynth_cli.engine.rows import Rows
from dpsynth_cli.mechanisms.placement import Pooled
from dpsynth_cli.privacy import noise
from dpsynth_cli.privacy.ledger import EPS_GRID, Ledger, Spend, histogram_sensitivity

SHARE = 0.2  # of the mechanism's epsilon, with level columns (measured: docs/benchmarks.md)
MAX_BITS = 12  # at most 4096 cells per numeric column


def numeric_bits(eps_column: Fraction, noisy_n: int, sensitivity: int) -> int:
    """Cells of a numeric column's histogram: about (eps n / sens)^(2/3). Finer than the 1-D
    grid's sqrt(eps n) balance, because wide leaves draw from it only inside their own side,
    where the tree's counts fix the mass: on the mixed tables (docs/benchmarks.md) 2/3 lowered
    penguins' column W1 at eps 1 and 2 (e.g. bill length 0.068 -> 0.048) and left diamonds'
    within +-0.01."""
    signal = max(float(eps_column) * max(noisy_n, 1) / sensitivity, 2.0)
    return int(min(max(round(math.log2(signal) * 2 / 3), 1), MAX_BITS))


@dataclass
class ColumnHistograms:
    """Rows per cell of each column's histogram (exact integers; batches add). `flagged`:
    (value column, its missing flag column) pairs: a value column counts only the rows whose
    flag says present (a missing value's placeholder 0 is no value: it would be a spike)."""

    ANY_ORDER = True  # exact integers: any split and merge order, the same statistic

    bits: tuple[int, ...]
    flagged: tuple[tuple[int, int], ...] = ()
    counts: list[np.ndarray] = field(init=False)

    def __post_init__(self) -> None:
        self.counts = [np.zeros(1 << b, dtype=np.int64) for b in self.bits]

    def add(self, X: np.ndarray) -> None:
        present = {v: X[:, f] < 0.5 for v, f in self.flagged if v < len(self.bits)}
        for c, b in enumerate(self.bits):
            x = X[present[c], c] if c in present else X[:, c]
            q = np.minimum((x * float(1 << b)).astype(np.int64), (1 << b) - 1)
            self.counts[c] += np.bincount(q, minlength=1 << b)

    def merge(self, other: ColumnHistograms) -> ColumnHistograms:
        self.counts = [a + b for a, b in zip(self.counts, other.counts, strict=True)]
        return self


@dataclass(frozen=True)
class Plan:
    epsilon: Fraction  # the whole share eps_M
    per_column: Fraction
    bits: tuple[int, ...]
    scale: Fraction
    sensitivity: int
    flagged: tuple[tuple[int, int], ...] = ()

    def to_json(self) -> dict:
        return {
            "epsilon": float(self.epsilon),
            "epsilon_per_column": float(self.per_column),
            "cells_per_column": [1 << b for b in self.bits],
            "noise_scale": float(self.scale),
            "use": "wide leaf sides draw from these clipped histograms (post-processing)",
        }


def share(epsilon: Fraction) -> Fraction:
    """eps_M: SHARE of the mechanism's epsilon, on the ledger's grid (rounded down)."""
    return Fraction(max(1, math.floor(Fraction(SHARE) * epsilon * EPS_GRID)), EPS_GRID)


def plan(
    share: Fraction,
    lead: tuple[int, ...],
    columns: int,
    noisy_n: int,
    relation: str,
    flagged: tuple[tuple[int, int], ...] = (),
) -> Plan:
    """Cells and noise for the first `columns` columns (lead ones: their slots) under eps_M:
    each column eps_M / columns, so discrete Laplace of scale sens * columns / eps_M."""
    per_column = share / columns
    sens = histogram_sensitivity(relation)
    rest = numeric_bits(per_column, noisy_n, sens)
    bits = tuple(lead[c] if c < len(lead) else rest for c in range(columns))
    scale = noise.as_scale(sens / per_column)
    return Plan(share, per_column, bits, scale, sens, tuple(flagged))


def release(rows: Rows, mp: Plan, source: noise.RandomSource, ledger: Ledger) -> dict[int, Pooled]:
    """One pass, the noisy histograms (spend recorded), clipped at 0, as densities."""
    columns = len(mp.bits)
    counts = rows.collect(partial(ColumnHistograms, mp.bits, mp.flagged)).counts
    ledger.record(
        Spend(
            step="privtree-marginals",
            mechanism="noisy one-column histograms that shape wide leaves (mechanisms/marginals)",
            epsilon=mp.epsilon,
            sensitivity=mp.sensitivity,
            noise={
                "distribution": "discrete Laplace",
                "scale": float(mp.scale),
                "columns": columns,
                "composition": "sequential over the columns, eps/columns each",
            },
        )
    )
    draws = noise.discrete_laplace(source, mp.scale, sum(c.size for c in counts))
    pooled, at = {}, 0
    for c, hist in enumerate(counts):
        pooled[c] = Pooled.of_cells((hist + draws[at : at + hist.size]).astype(np.float64))
        at += hist.size
    return pooled
