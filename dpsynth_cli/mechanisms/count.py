"""Noisy row count: the public stand-in for n wherever a parameter needs the data size.

Under add/remove one row the true n is private (it changes by 1), so the PMM depth, the
a-priori accuracy bound and every other n-dependent parameter use this noisy count instead.
Sensitivity 1 under add/remove; 0 under replace-one (n is then public), for which calibrating to
1 is conservative. Discrete Laplace noise of scale 1/eps gives eps-DP.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction

import numpy as np

from dpsynth_cli.privacy import noise
from dpsynth_cli.privacy.ledger import Ledger, Spend, histogram_sensitivity

EMPTY_TABLE_PROBABILITY = 0.01  # of a noisy count above `empty_floor` when the table is empty


def noisy_count(n: int, epsilon: Fraction, source: noise.RandomSource, ledger: Ledger) -> int:
    """n plus discrete Laplace noise of scale 1/epsilon, clipped at 0 (post-processing)."""
    scale = noise.as_scale(1 / epsilon)
    released = max(0, n + int(noise.discrete_laplace(source, scale, 1)[0]))
    ledger.record(
        Spend(
            step="count",
            mechanism="noisy row count",
            epsilon=epsilon,
            sensitivity=1,
            noise={"distribution": "discrete Laplace", "scale": float(scale)},
            released={"noisy_rows": released},
        )
    )
    return released


def count_sensitivity(relation: str) -> int:
    """L1 sensitivity of `noisy_tally`'s histogram: a row added or removed is in one cell (1);
    a row replaced leaves one cell and enters another (2)."""
    return histogram_sensitivity(relation)


def noisy_tally(
    n: int,
    dropped: Sequence[int],
    names: Sequence[str],
    epsilon: Fraction,
    source: noise.RandomSource,
    ledger: Ledger,
) -> tuple[int, dict[str, int]]:
    """The noisy row count and, per chosen column, the noisy number of rows dropped at it: a
    histogram over d + 1 disjoint cells (cell 0: the complete rows, n; cell j: the rows whose
    first unusable cell, in the declared order, is in column j). Every row is in exactly one
    cell, so the histogram's L1 sensitivity is 1 under add/remove (2 under replace) and one
    discrete Laplace draw per cell at scale sensitivity / epsilon makes the whole of it
    epsilon-DP: the dropped counts cost nothing beyond the count (docs/privacy.md).

    Cell 0 is drawn first from `source` exactly as `noisy_count` draws it (the same call), so
    that seeded runs keep their count under add/remove; the d other cells from its child
    stream "count-dropped". Each is clipped at 0 (post-processing)."""
    sens = count_sensitivity(ledger.relation)
    scale = noise.as_scale(Fraction(sens) / epsilon)
    released = max(0, n + int(noise.discrete_laplace(source, scale, 1)[0]))
    drops = np.asarray(dropped, dtype=np.int64)
    if drops.size:
        drawn = noise.discrete_laplace(source.spawn("count-dropped"), scale, drops.size)
        drops = np.maximum(0, drops + np.asarray(drawn, dtype=np.int64))
    by_column = {name: int(v) for name, v in zip(names, drops.tolist(), strict=True)}
    ledger.record(
        Spend(
            step="count",
            mechanism="noisy row count and, per column, the rows dropped at it (a histogram "
            "of disjoint cells: complete, or first unusable cell in that column)",
            epsilon=epsilon,
            sensitivity=sens,
            noise={"distribution": "discrete Laplace", "scale": float(scale)},
            released={"noisy_rows": released, "noisy_rows_dropped_at": by_column},
        )
    )
    return released, by_column


def empty_floor(epsilon: Fraction, relation: str = "add-remove") -> int:
    """The noisy count that a table with no rows at all exceeds with probability below
    EMPTY_TABLE_PROBABILITY: a release sized at or below it is within the noise of an empty
    table. For the noise of scale s (`noisy_count`), P(Z > t) < exp(-t / s). A function of
    epsilon alone (public), so comparing the released count with it is post-processing."""
    scale = noise.as_scale(Fraction(count_sensitivity(relation)) / epsilon)
    return math.ceil(float(scale) * math.log(1 / EMPTY_TABLE_PROBABILITY))
