"""DP estimate of a column's bounds, for columns the user gave no public bounds for.

Mechanism: a histogram of the column over a fixed, public, data-independent grid of bins (signed
powers of two, each octave cut into quarters, from 2^-10 to 2^41 in magnitude, plus a bin around
zero), discrete Laplace noise on every bin, and a threshold. The estimated lower bound is the left
edge of the leftmost bin whose noisy count exceeds the threshold; the upper bound is the right
edge of the rightmost such bin. From there the range grows outward one bin at a time while the
next bin's noisy count exceeds a lower threshold, which catches thin tails next to the bulk:
an empty neighbour passes it with probability below EXTEND_PROBABILITY, so a false extension
is rare and short. Values beyond +-2^41 fall into the outermost bins.

Privacy: add/remove one row changes one bin by 1 (L1 sensitivity 1); replace-one changes two
bins (sensitivity 2). Noise scale sens/eps gives eps-DP for the noisy histogram; the bounds are
post-processing of it. The threshold sigma * ln(bins / beta) keeps the chance that any empty bin
passes it below beta, so with probability at least 1 - beta the bounds enclose only occupied
bins; rows beyond them are clamped, which is why declared bounds are better.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from dpsynth_cli.errors import DataError
from dpsynth_cli.privacy import noise
from dpsynth_cli.privacy.ledger import Ledger, Spend, histogram_sensitivity

FALSE_BIN_PROBABILITY = 0.01
EXTEND_PROBABILITY = 0.05
SMALLEST_EXPONENT, LARGEST_EXPONENT = -10, 41


def bin_edges() -> np.ndarray:
    """The public grid: +-2^k * (1, 1.25, 1.5, 1.75) for k in [-10, 40], and +-2^41."""
    k = np.arange(SMALLEST_EXPONENT, LARGEST_EXPONENT)
    positive = (np.exp2(k)[:, None] * np.array([1.0, 1.25, 1.5, 1.75])).ravel()
    positive = np.append(positive, 2.0**LARGEST_EXPONENT)
    return np.concatenate([-positive[::-1], positive])


def threshold(scale: Fraction, bins: int, probability: float) -> int:
    """A count that an empty bin's noisy count passes with probability <= probability / bins."""
    return math.ceil(float(scale) * math.log(bins / probability))


def occupied_range(noisy: np.ndarray, core: int, extend: int) -> tuple[int, int] | None:
    """First and last bin above `core`, grown outward over neighbours above `extend`."""
    above = np.flatnonzero(noisy > core)
    if above.size == 0:
        return None
    first, last = int(above[0]), int(above[-1])
    while first > 0 and noisy[first - 1] > extend:
        first -= 1
    while last < noisy.size - 1 and noisy[last + 1] > extend:
        last += 1
    return first, last


def estimate_bounds(
    values: np.ndarray,
    column: str,
    epsilon: Fraction,
    source: noise.RandomSource,
    ledger: Ledger,
) -> tuple[float, float]:
    """Noisy-histogram bounds of one column (values already without missing entries)."""
    edges = bin_edges()
    limit = 2.0**LARGEST_EXPONENT
    clipped = np.clip(values, -limit, limit)
    index = np.clip(np.searchsorted(edges, clipped, side="right") - 1, 0, edges.size - 2)
    counts = np.bincount(index, minlength=edges.size - 1)
    sens = histogram_sensitivity(ledger.relation)
    scale = noise.as_scale(Fraction(sens) / epsilon)
    noisy = counts + noise.discrete_laplace(source, scale, counts.size)
    cut = threshold(scale, counts.size, FALSE_BIN_PROBABILITY)
    grow = threshold(scale, 1, EXTEND_PROBABILITY)
    span = occupied_range(noisy, cut, grow)
    found = (float(edges[span[0]]), float(edges[span[1] + 1])) if span else None
    ledger.record(
        Spend(
            step=f"bounds:{column}",
            mechanism="noisy histogram on a public log-scale grid, thresholded",
            epsilon=epsilon,
            sensitivity=sens,
            noise={
                "distribution": "discrete Laplace",
                "scale": float(scale),
                "bins": int(counts.size),
                "threshold": cut,
                "extension_threshold": grow,
            },
            released={"lower": found[0], "upper": found[1]} if found else {},
        )
    )
    if found is None:
        raise DataError(
            f"column '{column}': the private bounds estimate found no data (too few rows with a "
            f"number there for the bounds budget); declare bounds with --bounds "
            f"{column}=LOWER:UPPER or --schema, or leave the column out with --columns"
        )
    return found
