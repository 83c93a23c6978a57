"""DP estimate of a column's bounds, for columns the user gave no public bounds for.

Mechanism (two noisy histograms on public grids; everything after the noise is post-processing):

1. **Find** (15/16 of the column's epsilon). A histogram of the column over a fixed, public grid
   of 409 bins (signed powers of two, each octave cut in quarters, from 2^-10 to 2^41 in
   magnitude, plus one bin around zero; values beyond +-2^41, +-inf included, fall into the
   outermost bins, NaN counts nowhere), discrete Laplace noise on every bin. A bin belongs to
   the core when its noisy count, or the noisy sum of a window of 2 or 4 adjacent bins holding
   it, passes a threshold that empty bins (windows) pass with total probability below
   FALSE_BIN_PROBABILITY; windows find columns spread thinly over several bins. From the
   outermost core bins the range grows outward while the next bin's noisy count exceeds a lower
   threshold (an empty neighbour passes it with probability EXTEND_PROBABILITY), which catches
   thin tails next to the bulk.
2. **Refine** (1/16). The two edge bins of that range (one, if they coincide) are cut into
   SUB_BINS equal sub-bins (64 per octave), whose counts get discrete Laplace noise. When an
   edge bin's noisy count from step 1 exceeds the sub-bin threshold (so that one of its
   sub-bins can pass it), the lower bound moves up to the leftmost sub-bin whose noisy count
   passes it (empty sub-bins pass it with total probability FALSE_SUB_BIN_PROBABILITY), the
   upper bound down to the right edge of the rightmost one, provided the noisy count of the
   sub-bins cut off is small (at most TRIM_SHARE of the edge bin's noisy count plus
   TRIM_NOISE_SDS standard deviations of its noise). A column of a few values (the years
   2007-2009) then gets 2000-2016 instead of 1792-2048, once eps x rows is about 150 or more.
3. **Zero.** A positive lower bound at most 1/ZERO_SNAP_RATIO of the upper bound becomes 0 (and
   symmetrically for a negative upper bound): the log-scale bins near zero are too thin to hold
   the rows of such a column, so they were cut, and 0 costs at most 1/7 more width.

Privacy (neighbouring relation ``add-remove``: one row added or removed; ``replace``: one row
changed; ``values`` are the column's complete rows, so a neighbouring table changes them by at
most one added or removed value, or one of each):

* Each grid is a partition: every value (after clipping to the grid; NaN dropped, which is a
  per-row map) lies in exactly one bin and, when it is in an edge bin, one sub-bin. Adding or
  removing a row changes one count of each histogram by 1 (L1 sensitivity 1); replacing a row
  changes two counts by 1 (sensitivity 2, ``histogram_sensitivity``).
* Step 1 releases h0 + Z0, Z0 i.i.d. discrete Laplace with P(z) ~ exp(-|z|/s0) and
  s0 >= sens/eps0 (scales are exact fractions rounded up, epsilons exact fractions). For any
  output y, P[h0 + Z0 = y] / P[h0' + Z0 = y] = exp((|y - h0'|_1 - |y - h0|_1) / s0)
  <= exp(|h0 - h0'|_1 / s0) <= exp(eps0). The noise is sampled exactly (CKS 2020, ``noise``), so
  this holds without a floating-point gap.
* The edge bins (and whether anything was found) are a function of the released h0 + Z0 alone.
  For each fixed choice of edge bins, step 2 releases the sub-bin histogram h1 of those bins
  plus i.i.d. discrete Laplace noise of scale s1 >= sens/eps1: eps1-DP by the same argument
  (when both edges are one bin, its sub-bins are counted and noised once, so the sensitivity
  stays sens). 2 * SUB_BINS draws are taken whatever the data, so the batch size is public.
* Adaptive sequential composition: the pair of releases is (eps0 + eps1)-DP, and
  eps0 + eps1 = eps exactly. The bounds, and the DataError raised when step 1 finds nothing,
  are functions of the two noisy histograms and public constants only: post-processing.

The thresholds are public functions of the scales and grid sizes; they only set accuracy
(``tests/test_bounds.py`` checks the statements below). An empty column passes step 1 with
probability below FALSE_BIN_PROBABILITY, so a column is found with even chance from about
``rows_needed(eps)`` = (16/15) ln(409 / 0.008) / eps = 11.6 / eps rows in one bin (sensitivity
1), and almost surely from 16 / eps; spread over 2-4 adjacent bins, the windows need fewer per
bin. No estimator can do much better: an eps-DP release that locates n identical rows among the
grid's B bins with probability q needs n eps >= ln(B q) (ln 409 = 6.0). Below that, declare
bounds (``--bounds COL=LOWER:UPPER`` or ``--schema``), as the error message says first.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from functools import cache
from typing import Any

import numpy as np

from dpsynth_cli.domain import DRAFT_HINT, bounds_flag
from dpsynth_cli.errors import DataError
from dpsynth_cli.privacy import noise
from dpsynth_cli.privacy.ledger import Ledger, Spend, histogram_sensitivity

SMALLEST_EXPONENT, LARGEST_EXPONENT = -10, 41
FIND_SHARE = Fraction(15, 16)  # of the column's epsilon for step 1; the rest refines
FALSE_BIN_PROBABILITY = 0.01  # an empty grid passes some core threshold
WINDOWS = ((1, 0.8), (2, 0.1), (4, 0.1))  # window width in bins, share of FALSE_BIN_PROBABILITY
EXTEND_PROBABILITY = 0.05  # an empty neighbour joins the range
SUB_BINS = 16  # sub-bins of each edge bin (64 per octave)
FALSE_SUB_BIN_PROBABILITY = 0.05  # some empty sub-bin of the edge bins passes its threshold
TRIM_SHARE = 0.02  # of an edge bin's noisy count that refining may cut off (plus the noise)
TRIM_NOISE_SDS = 2.0
ZERO_SNAP_RATIO = 8


@cache
def _bin_edges() -> np.ndarray:
    k = np.arange(SMALLEST_EXPONENT, LARGEST_EXPONENT)
    positive = (np.exp2(k)[:, None] * np.array([1.0, 1.25, 1.5, 1.75])).ravel()
    positive = np.append(positive, 2.0**LARGEST_EXPONENT)
    edges = np.concatenate([-positive[::-1], positive])
    edges.flags.writeable = False
    return edges


def bin_edges() -> np.ndarray:
    """The public grid: +-2^k * (1, 1.25, 1.5, 1.75) for k in [-10, 40], and +-2^41."""
    return _bin_edges()


def threshold(scale: Fraction, bins: int, probability: float) -> int:
    """A count that an empty bin's noisy count passes with probability <= probability / bins.

    P(Z > t) = p^(t+1) / (1 + p) < exp(-t / scale) for discrete Laplace, p = exp(-1 / scale).
    """
    return math.ceil(float(scale) * math.log(bins / probability))


def laplace_sum_tail(width: int, x: float) -> float:
    """P(L_1 + ... + L_width > x) for i.i.d. continuous Laplace(1) draws L_i, x >= 0.

    The sum is A - B with A, B i.i.d. Gamma(width, 1), and integrating P(A > x + b) =
    e^(-x-b) sum_{k<width} (x+b)^k / k! against B's density gives the closed form
    e^(-x) sum_{k<width} sum_{i<=k} C(k, i) x^(k-i) (width-1+i)! / (k! (width-1)! 2^(width+i)).
    """
    total = 0.0
    for k in range(width):
        for i in range(k + 1):
            total += (
                math.comb(k, i)
                * x ** (k - i)
                * math.factorial(width - 1 + i)
                / (math.factorial(k) * math.factorial(width - 1) * 2 ** (width + i))
            )
    return math.exp(-x) * total


@cache
def window_threshold(scale: Fraction, width: int, windows: int, probability: float) -> int:
    """A count that the noise summed over ``width`` bins passes w.p. <= probability / windows.

    A discrete Laplace draw of scale s is G1 - G2 with G = floor(s E), E ~ Exp(1) (so
    P(G >= g) = exp(-g/s)), hence G1 - G2 < s (E1 - E2) + 1: a sum of ``width`` draws is below
    s S + width, S a sum of ``width`` Laplace(1) draws. T = s x + width with
    ``laplace_sum_tail(width, x) <= probability / windows`` is therefore a valid threshold
    (x by bisection; the slack, ``width`` counts, is small against s x). Width 1: ``threshold``.
    """
    if width == 1:
        return threshold(scale, windows, probability)
    target = probability / windows
    lo, hi = 0.0, 1.0
    while laplace_sum_tail(width, hi) > target:
        hi *= 2
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if laplace_sum_tail(width, mid) <= target else (mid, hi)
    return math.ceil(float(scale) * hi + width)


@dataclass(frozen=True)
class Plan:
    """Scales and thresholds: public functions of epsilon and the relation, fixed before data."""

    sensitivity: int
    epsilon_find: Fraction
    epsilon_refine: Fraction
    scale_find: Fraction
    scale_refine: Fraction
    windows: tuple[tuple[int, int], ...]  # (width, threshold on the window's noisy sum)
    extend: int
    sub_bin: int

    def to_json(self) -> dict[str, Any]:
        return {
            "distribution": "discrete Laplace",
            "find": {
                "epsilon": float(self.epsilon_find),
                "scale": float(self.scale_find),
                "bins": int(bin_edges().size - 1),
                "window_thresholds": {str(w): t for w, t in self.windows},
                "extension_threshold": self.extend,
            },
            "refine": {
                "epsilon": float(self.epsilon_refine),
                "scale": float(self.scale_refine),
                "bins": 2 * SUB_BINS,
                "sub_bins_per_edge_bin": SUB_BINS,
                "threshold": self.sub_bin,
            },
        }


def plan(epsilon: Fraction, relation: str) -> Plan:
    sens = histogram_sensitivity(relation)
    eps_find = Fraction(epsilon) * FIND_SHARE
    eps_refine = Fraction(epsilon) - eps_find
    s0 = noise.as_scale(Fraction(sens) / eps_find)
    s1 = noise.as_scale(Fraction(sens) / eps_refine)
    bins = bin_edges().size - 1
    windows = tuple(
        (w, window_threshold(s0, w, bins - w + 1, FALSE_BIN_PROBABILITY * share))
        for w, share in WINDOWS
    )
    extend = threshold(s0, 1, EXTEND_PROBABILITY)
    sub_bin = threshold(s1, 2 * SUB_BINS, FALSE_SUB_BIN_PROBABILITY)
    return Plan(sens, eps_find, eps_refine, s0, s1, windows, extend, sub_bin)


def histograms(values: np.ndarray) -> np.ndarray:
    """True counts of the column on the grid's sub-bins: bins x SUB_BINS (row sums: the bins).

    NaN counts nowhere; everything else (+-inf, 1e308) is clipped into the outermost bins.
    """
    edges = bin_edges()
    v = np.asarray(values, dtype=float).ravel()
    v = np.clip(v[~np.isnan(v)], edges[0], np.nextafter(edges[-1], 0.0))
    index = np.searchsorted(edges, v, side="right") - 1
    left, width = edges[index], edges[index + 1] - edges[index]
    sub = np.clip(np.floor((v - left) / width * SUB_BINS).astype(np.int64), 0, SUB_BINS - 1)
    cells = np.bincount(index * SUB_BINS + sub, minlength=(edges.size - 1) * SUB_BINS)
    return cells.reshape(edges.size - 1, SUB_BINS)


def _covered(starts: np.ndarray, width: int, bins: int) -> np.ndarray:
    """Bins covered by a window of ``width`` bins starting where ``starts`` (copies x windows)."""
    cum = np.concatenate([np.zeros((starts.shape[0], 1), np.int64), starts.cumsum(1)], axis=1)
    b = np.arange(bins)
    return (
        cum[:, np.minimum(b, starts.shape[1] - 1) + 1] - cum[:, np.maximum(b - width + 1, 0)]
    ) > 0


def find_range(noisy: np.ndarray, p: Plan) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Step 1 on noisy counts (copies x bins): (found, first bin, last bin) per copy."""
    copies, bins = noisy.shape
    big = noisy > p.extend
    zero = np.zeros((copies, 1), np.int64)
    sums = np.concatenate([zero, noisy.cumsum(1)], axis=1)
    bigs = np.concatenate([zero, big.cumsum(1)], axis=1)
    core = np.zeros_like(big)
    for w, t in p.windows:
        passing = (sums[:, w:] - sums[:, :-w]) > t
        with_big = (bigs[:, w:] - bigs[:, :-w]) > 0
        core |= _covered(passing & with_big, w, bins) & big  # its bins above the extension cut
        core |= _covered(passing & ~with_big, w, bins)  # none above it: the whole window
    found = core.any(1)
    first = np.argmax(core, 1)
    last = bins - 1 - np.argmax(core[:, ::-1], 1)
    idx = np.arange(bins)
    below = np.maximum.accumulate(np.where(big, -1, idx), axis=1)  # last bin <= i not above
    above = np.minimum.accumulate(np.where(big, bins, idx)[:, ::-1], axis=1)[:, ::-1]
    rows = np.arange(copies)
    first = np.where(first > 0, below[rows, np.maximum(first - 1, 0)] + 1, first)
    last = np.where(last < bins - 1, above[rows, np.minimum(last + 1, bins - 1)] - 1, last)
    return found, first, last


def _trim(y: np.ndarray, total: np.ndarray, p: Plan) -> tuple[np.ndarray, np.ndarray]:
    """(trim, j): whether to cut the first j sub-bins off (y: copies x SUB_BINS, from the edge)."""
    passing = y > p.sub_bin
    j = np.argmax(passing, 1)
    cut = np.take_along_axis(
        np.concatenate([np.zeros((y.shape[0], 1)), y.cumsum(1)], 1), j[:, None], 1
    )[:, 0]
    sd = math.sqrt(2) * float(p.scale_refine) * np.sqrt(j)
    allowed = TRIM_SHARE * np.maximum(total, 0) + TRIM_NOISE_SDS * sd
    credible = total > p.sub_bin  # else no sub-bin can hold enough rows to pass
    return credible & passing.any(1) & (j > 0) & (cut <= allowed), j


def release(
    values: np.ndarray,
    epsilon: Fraction,
    relation: str,
    source: noise.RandomSource,
    copies: int = 1,
) -> tuple[np.ndarray, np.ndarray, Plan]:
    """``copies`` independent releases on one column: (lower, upper, plan); NaN: nothing found.
    ``values``: the column's values (1-d), or their `histograms` (2-d, e.g. summed over batches).

    ``estimate_bounds`` takes one copy; audits and benchmarks batch many (each copy draws its
    own noise, so copies are independent runs of the mechanism).
    """
    p = plan(epsilon, relation)
    edges = bin_edges()
    fine = values if values.ndim == 2 else histograms(values)
    counts = fine.sum(1)
    bins = counts.size
    noisy = counts + noise.discrete_laplace(source, p.scale_find, copies * bins).reshape(copies, -1)
    found, first, last = find_range(noisy, p)
    z = noise.discrete_laplace(source, p.scale_refine, copies * 2 * SUB_BINS)
    z = z.reshape(copies, 2, SUB_BINS)
    same = first == last
    y_lo = fine[first] + z[:, 0]
    y_hi = fine[last] + np.where(same[:, None], z[:, 0], z[:, 1])  # one bin: noised once
    rows = np.arange(copies)
    cut_lo, j_lo = _trim(y_lo, noisy[rows, first], p)
    cut_hi, j_hi = _trim(y_hi[:, ::-1], noisy[rows, last], p)
    w_lo = (edges[first + 1] - edges[first]) / SUB_BINS
    w_hi = (edges[last + 1] - edges[last]) / SUB_BINS
    lower = np.where(cut_lo, edges[first] + w_lo * j_lo, edges[first])
    upper = np.where(cut_hi, edges[last + 1] - w_hi * j_hi, edges[last + 1])
    lower = np.where((lower > 0) & (lower * ZERO_SNAP_RATIO <= upper), 0.0, lower)
    upper = np.where((upper < 0) & (upper * ZERO_SNAP_RATIO >= lower), 0.0, upper)
    return np.where(found, lower, np.nan), np.where(found, upper, np.nan), p


class NoBoundsFound(DataError):
    """Step 1 found nothing in `column` (a function of its noisy histogram alone). `synth`
    gathers these over every undeclared column into one message (`no_bounds_message`)."""

    def __init__(self, column: str, epsilon: Fraction, relation: str) -> None:
        super().__init__(no_bounds_message([column], epsilon, relation))
        self.column = column


def no_bounds_message(columns: list[str], epsilon: Fraction, relation: str = "add-remove") -> str:
    """The DataError when step 1 finds nothing in `columns` (each estimated at `epsilon`):
    declared bounds first, every such column named, no data values in it. A row counts only
    when every chosen column holds a number, so one text column empties every histogram: the
    message says so instead of blaming a column of numbers, and says how to declare text."""
    if len(columns) == 1:
        head = (
            f"column '{columns[0]}' has no bounds: declare them with {bounds_flag(columns[0])} or "
            f"in --schema, where a text column is a category with its levels ({DRAFT_HINT})"
        )
        found = (
            f"The private estimate at epsilon {float(epsilon):.4g} found nothing above its noise"
        )
    else:
        named = ", ".join(f"'{c}'" for c in columns)
        head = (
            f"{len(columns)} columns have no bounds ({named}): declare them in --schema, a column "
            "of numbers with 'lower' and 'upper' and a text column as a category with its "
            f"'levels' ({DRAFT_HINT}), or give --bounds COL=LOWER:UPPER for each column of numbers"
        )
        found = (
            f"The private estimate at epsilon {float(epsilon):.4g} per column found nothing "
            "above its noise in any of them"
        )
    return (
        f"{head}. {found}: it counts only rows with a number in every chosen column (one text "
        f"column leaves none) and needs roughly {rows_needed(epsilon, relation)} of them (more "
        "if they are spread out); raise --bounds-eps, or leave columns out with --columns"
    )


def estimated_notice(column: str, epsilon: Fraction, lower: float, upper: float) -> str:
    """The notice for bounds that were estimated (released values only, never the data's)."""
    return (
        f"column '{column}' has no declared bounds: declare them with {bounds_flag(column)} or "
        f"in --schema (exact, and no epsilon spent); used a private estimate instead, "
        f"{lower:g}:{upper:g} at epsilon {float(epsilon):.4g}, and rows outside it are clamped"
    )


def rows_needed(epsilon: Fraction, relation: str = "add-remove") -> int:
    """Rows in one bin that step 1 finds with probability about 1/2 (public: from epsilon)."""
    return plan(epsilon, relation).windows[0][1] + 1


def estimate_bounds(
    values: np.ndarray,
    column: str,
    epsilon: Fraction,
    source: noise.RandomSource,
    ledger: Ledger,
) -> tuple[float, float]:
    """DP bounds of one column (values already without missing entries, or their 2-d
    `histograms`)."""
    lower, upper, p = release(values, epsilon, ledger.relation, source)
    found = None if np.isnan(lower[0]) else (float(lower[0]), float(upper[0]))
    ledger.record(
        Spend(
            step=f"bounds:{column}",
            mechanism="noisy histograms on a public log-scale grid and on sub-bins of its edge "
            "bins, thresholded",
            epsilon=epsilon,
            sensitivity=p.sensitivity,
            noise=p.to_json(),
            released={"lower": found[0], "upper": found[1]} if found else {},
        )
    )
    if found is None:
        raise NoBoundsFound(column, epsilon, ledger.relation)
    return found
