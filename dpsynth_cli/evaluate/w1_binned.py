"""1-D W1 and quantiles from mergeable histograms: columns of tables read in batches.

The exact 1-D W1 (`w1_1d`) sorts all the values. Streamed, each column keeps instead B equal
bins of a [0, 1] coordinate with, per bin, the number of values and the smallest and largest
value (`Histograms`): sums, minima and maxima, so batches add and merge in any order.

A certified bracket, not an estimate (chosen so that the W1 lower bound stays a bound). W1 is
the integral of |F - G| (F, G the two CDFs, F(t) = share of values <= t). The values of a bin
k lie in [a_k, b_k] (its minimum and maximum), and bins are ordered by value, so F is known
exactly off the intervals [a_k, b_k): before a_k it counts the earlier bins (C_k values), from
b_k on also all of bin k (C_k + c_k). Inside [a_k, b_k) at least the value a_k is counted and
the value b_k is not: C_k + 1 <= n F(t) <= C_k + c_k - 1 (exact when c_k <= 2). On each piece
between consecutive breakpoints (all a_k, b_k of both columns) F and G thus lie in known
intervals, and |F - G| is at least the gap between the intervals and at most their farthest
ends; integrating gives lower <= W1 <= upper. The bracket is exact when every bin holds at most
two values or a single distinct value (integer columns with fewer than B values), and always
upper - lower <= sum over bins of (b_k - a_k)(p_k + q_k) <= 2 max_k (b_k - a_k) (p, q the
bins' shares of the two columns), about twice a bin's width.
"""

from __future__ import annotations

import numpy as np

# Default bins: 2**16 per column, fewer when a side's histograms would pass HIST_BYTES (24
# bytes a bin: count, minimum, maximum).
MAX_BINS = 1 << 16
MIN_BINS = 1 << 8
HIST_BYTES = 64 << 20


def default_bins(columns: int) -> int:
    """Bins per column for `columns` histogram columns: a power of two (see HIST_BYTES)."""
    fit = HIST_BYTES // (24 * max(columns, 1))
    return max(MIN_BINS, min(MAX_BINS, 1 << max(fit.bit_length() - 1, 0)))


class Histograms:
    """Per column j: counts of values in B equal bins of a coordinate in [0, 1], and the
    smallest and largest value in each bin. Values may be in any units, but must be
    non-decreasing in the coordinate (the bins then order them). Mergeable: counts add, minima
    and maxima combine."""

    def __init__(self, columns: int, bins: int) -> None:
        self.bins = int(bins)
        self.counts = np.zeros((columns, self.bins), dtype=np.int64)
        self.low = np.full((columns, self.bins), np.inf)
        self.high = np.full((columns, self.bins), -np.inf)

    def add(self, coords: np.ndarray, values: np.ndarray) -> None:
        """A batch: coords (k, columns) in [0, 1] choose the bins of values (k, columns)."""
        if coords.shape[0] == 0:
            return
        columns, bins = self.counts.shape
        index = np.minimum(np.floor(coords * bins), bins - 1).astype(np.intp)
        index += np.arange(columns) * bins  # one flat index over all columns' bins
        flat, values = index.ravel(), values.ravel()
        self.counts += np.bincount(flat, minlength=columns * bins).reshape(columns, bins)
        np.minimum.at(self.low.reshape(-1), flat, values)
        np.maximum.at(self.high.reshape(-1), flat, values)

    def merge(self, other: Histograms) -> Histograms:
        self.counts += other.counts
        np.minimum(self.low, other.low, out=self.low)
        np.maximum(self.high, other.high, out=self.high)
        return self

    def column(self, j: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Column j's occupied bins in order: (minimum, maximum, count)."""
        full = self.counts[j] > 0
        return self.low[j][full], self.high[j][full], self.counts[j][full]


def w1_1d_bracket(x: Histograms, y: Histograms, j: int) -> tuple[float, float]:
    """(lower, upper) with lower <= W1 <= upper between column j of x and of y (module
    docstring), in the values' units. Both columns need at least one value."""
    ax, bx, cx = x.column(j)
    ay, by, cy = y.column(j)
    n, m = float(cx.sum()), float(cy.sum())
    cuts = np.unique(np.concatenate((ax, bx, ay, by)))
    width, left = np.diff(cuts), cuts[:-1]
    f_lo, f_hi = _cdf_range(ax, bx, cx, left)
    g_lo, g_hi = _cdf_range(ay, by, cy, left)
    f_lo, f_hi, g_lo, g_hi = f_lo * m, f_hi * m, g_lo * n, g_hi * n  # units 1 / (n m)
    gap_lo = np.maximum(np.maximum(g_lo - f_hi, f_lo - g_hi), 0.0)
    gap_hi = np.maximum(f_hi - g_lo, g_hi - f_lo)
    return float(np.dot(width, gap_lo)) / (n * m), float(np.dot(width, gap_hi)) / (n * m)


def _cdf_range(
    low: np.ndarray, high: np.ndarray, count: np.ndarray, at: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Smallest and largest possible number of values <= t, for t just right of each `at`
    (a breakpoint: no bin's minimum or maximum lies strictly between it and the next one)."""
    before = np.cumsum(count) - count
    k = np.searchsorted(low, at, side="right") - 1  # the last bin starting at or before t
    kk = np.maximum(k, 0)
    inside = at < high[kk]  # t inside [low, high) of bin k
    done = np.where(k >= 0, before[kk] + count[kk], 0)
    lo = np.where(inside & (k >= 0), before[kk] + 1, done)
    hi = np.where(inside & (k >= 0), before[kk] + count[kk] - 1, done)
    return lo.astype(np.float64), hi.astype(np.float64)


def binned_quantiles(h: Histograms, j: int, qs: tuple[float, ...]) -> np.ndarray:
    """Column j's quantiles as numpy's default (linear) method defines them, from the bins:
    exact where the order statistics needed are a bin's smallest or largest value (or the bin
    holds one distinct value), otherwise interpolated by rank inside the bin, within
    max - min of that bin (at most a bin's width) of the exact value."""
    low, high, count = h.column(j)
    ends = np.cumsum(count)
    n = int(ends[-1])

    def order_statistic(k: np.ndarray) -> np.ndarray:
        b = np.searchsorted(ends, k, side="right")
        rank, c = k - (ends[b] - count[b]), count[b]
        inner = low[b] + (high[b] - low[b]) * rank / np.maximum(c - 1, 1)
        return np.where(rank == 0, low[b], np.where(rank == c - 1, high[b], inner))

    pos = (n - 1) * np.asarray(qs, dtype=np.float64)
    k = np.floor(pos).astype(np.int64)
    frac = pos - k
    below, above = order_statistic(k), order_statistic(np.minimum(k + 1, n - 1))
    return below + frac * (above - below)
