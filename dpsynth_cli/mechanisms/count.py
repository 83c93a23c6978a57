"""Noisy row count: the public stand-in for n wherever a parameter needs the data size.

Under add/remove one row the true n is private (it changes by 1), so the PMM depth, the
a-priori accuracy bound and every other n-dependent parameter use this noisy count instead.
Sensitivity 1 under add/remove; 0 under replace-one (n is then public), for which calibrating to
1 is conservative. Discrete Laplace noise of scale 1/eps gives eps-DP.
"""

from __future__ import annotations

import math
from fractions import Fraction

from dpsynth_cli.privacy import noise
from dpsynth_cli.privacy.ledger import Ledger, Spend

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


def empty_floor(epsilon: Fraction) -> int:
    """The noisy count that a table with no rows at all exceeds with probability below
    EMPTY_TABLE_PROBABILITY: a release sized at or below it is within the noise of an empty
    table. For the noise of scale s (`noisy_count`), P(Z > t) < exp(-t / s). A function of
    epsilon alone (public), so comparing the released count with it is post-processing."""
    scale = noise.as_scale(1 / epsilon)
    return math.ceil(float(scale) * math.log(1 / EMPTY_TABLE_PROBABILITY))
