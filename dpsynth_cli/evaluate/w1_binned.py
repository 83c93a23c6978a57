"""1-D W1 and quantiles from mergeable histograms: columns of tables read in batches.

The exact 1-D W1 (`w1_1d`) sorts all the values. Streamed, each column keeps instead the
occupied bins of a fine dyadic grid of a [0, 1] coordinate with, per bin, the number of values
and the smallest and largest value (`Histograms`): sums, minima and maxima, so batches add and
merge in any order.

A certified bracket, not an estimate (chosen so that the W1 lower bound stays a bound). W1 is
the integral of |F - G| (F, G the two CDFs, F(t) = share of values <= t). The values of a bin
k lie in [a_k, b_k] (its minimum and maximum), and bins are ordered by value, so F is known
exactly off the intervals [a_k, b_k): before a_k it counts the earlier bins (C_k values), from
b_k on also all of bin k (C_k + c_k). Inside [a_k, b_k) at least the value a_k is counted and
the value b_k is not: C_k + 1 <= n F(t) <= C_k + c_k - 1 (exact when c_k <= 2). On each piece
between consecutive breakpoints (all a_k, b_k of both columns) F and G thus lie in known
intervals, and |F - G| is at least the gap between the intervals and at most their farthest
ends; integrating gives lower <= W1 <= upper. The bracket is exact when every bin holds at most
two values or a single distinct value (e.g. columns with few distinct values), and always
upper - lower <= sum over bins of (b_k - a_k)(p_k + q_k) <= 2 max_k (b_k - a_k) (p, q the
bins' shares of the two columns), about twice a bin's width.
"""

from __future__ import annotations

import numpy as np

from dpsynth_cli.evaluate.w1_cells import DyadicCells

# Default cap on the occupied bins of one column: 2**20, fewer when a table's histograms would
# pass HIST_BYTES (32 bytes a bin: code, count, minimum, maximum).
MAX_BINS = 1 << 20
MIN_BINS = 1 << 8
HIST_BYTES = 64 << 20


def default_max_bins(columns: int) -> int:
    """Occupied bins kept per column for `columns` histogram columns (see HIST_BYTES)."""
    return max(MIN_BINS, min(MAX_BINS, HIST_BYTES // (32 * max(columns, 1))))


class Histograms:
    """Per column j: the occupied bins of the dyadic grid of a coordinate in [0, 1], each
    with its number of values and smallest and largest value. Values may be in any units but
    must be non-decreasing in the coordinate (the bins then order them). The grid is as fine
    as `max_bins` occupied bins allow: 2**-52 at first, halved while more bins are occupied
    (1-D `DyadicCells`: the same cap rule, so the result does not depend on the batches).
    Mergeable: counts add, minima and maxima combine."""

    def __init__(self, columns: int, max_bins: int) -> None:
        self.max_bins = int(max_bins)
        self.columns = [DyadicCells(1, self.max_bins, sides=1) for _ in range(columns)]

    def add(self, coords: np.ndarray, values: np.ndarray) -> None:
        """A batch: coords (k, columns) in [0, 1] choose the bins of values (k, columns)."""
        for j, cells in enumerate(self.columns):
            cells.add(coords[:, j : j + 1], 0, values[:, j : j + 1])

    def add_sorted(self, j: int, coords: np.ndarray, values: np.ndarray) -> None:
        """Column j of a batch alone, sorted (coords in [0, 1] and values, both non-decreasing):
        one column's copies at a time, and a sort the caller's other sums may share."""
        self.columns[j].add_sorted(coords, 0, values)

    def merge(self, other: Histograms) -> Histograms:
        for mine, theirs in zip(self.columns, other.columns, strict=True):
            mine.merge(theirs)
        return self

    def column(self, j: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Column j's occupied bins in order: (minimum, maximum, count)."""
        cells = self.columns[j]
        return cells.lo[0], cells.hi[0], cells.counts[:, 0]


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
