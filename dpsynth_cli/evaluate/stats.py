"""What one pass over a table's record batches collects for `evaluate` (not private).

`TableStats` is the accumulator a pass feeds (`Rows.collect`, as synth's passes): histograms
for the per-column figures and the W1 lower bound, moments for means, standard deviations and
correlations, a uniform sample of rows for the subsample estimate (and for every figure when
the sample holds the whole table), and the dyadic cells of the W1 upper bound, shared by both
tables' passes. Memory: a batch plus these, whatever the number of rows.
"""

from __future__ import annotations

import numpy as np

from dpsynth_cli.domain import ColumnSpec, Domain
from dpsynth_cli.evaluate.fidelity import PairCounts
from dpsynth_cli.evaluate.w1_binned import Histograms
from dpsynth_cli.evaluate.w1_cells import DyadicCells

# Rows kept by the uniform sample: the whole table up to this many rows (then every figure is
# computed from the rows, as before streaming), fewer for wide tables (SAMPLE_BYTES of values).
SAMPLE_ROWS = 1 << 20
SAMPLE_BYTES = 128 << 20


def default_sample_rows(d: int, at_least: int) -> int:
    """Sample size for d columns: SAMPLE_ROWS, fewer when wide, never below `at_least`."""
    return max(at_least, min(SAMPLE_ROWS, SAMPLE_BYTES // (8 * max(d, 1))))


class Moments:
    """Count, mean vector and centred co-moment matrix of rows; batches merge by Chan et al.'s
    pairwise update, which stays accurate where sums of squares would cancel."""

    def __init__(self, d: int) -> None:
        self.n = 0
        self.mean = np.zeros(d)
        self.comoment = np.zeros((d, d))

    def add(self, X: np.ndarray) -> None:
        if X.shape[0]:
            batch = Moments(X.shape[1])
            batch.n, batch.mean = X.shape[0], X.mean(axis=0)
            centred = X - batch.mean
            batch.comoment = centred.T @ centred
            self.merge(batch)

    def merge(self, other: Moments) -> Moments:
        n = self.n + other.n
        if other.n:
            delta = other.mean - self.mean
            self.mean = self.mean + delta * (other.n / n)
            self.comoment = self.comoment + other.comoment
            self.comoment += np.outer(delta, delta) * (self.n * other.n / n)
            self.n = n
        return self

    def std(self) -> np.ndarray:
        """Population standard deviations (numpy's default, ddof = 0)."""
        with np.errstate(invalid="ignore"):
            return np.sqrt(np.diag(self.comoment) / self.n)

    def correlation(self) -> np.ndarray:
        """Pearson correlation matrix (NaN where a column is constant), as np.corrcoef."""
        scale = np.sqrt(np.diag(self.comoment))
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.clip(self.comoment / np.outer(scale, scale), -1.0, 1.0)


class Reservoir:
    """A uniform sample without replacement of up to `size` rows, in the table's row order.

    Bottom-k sampling: every row gets an independent uniform key from `rng` and the `size`
    rows with the smallest keys are kept, so each `size`-subset is equally likely; the table's
    rows all, while there are no more. The keys are drawn row after row, and numpy's generator
    gives the same numbers however a run of draws is split, so the sample does not depend on
    the batch sizes.
    """

    def __init__(self, size: int, d: int, rng: np.random.Generator) -> None:
        self.size, self.rng, self.seen = size, rng, 0
        self.rows = np.empty((0, d))
        self.keys = np.empty(0)
        self.index = np.empty(0, dtype=np.int64)

    def add(self, X: np.ndarray) -> None:
        keys = self.rng.random(X.shape[0])
        index = np.arange(self.seen, self.seen + X.shape[0])
        self.seen += X.shape[0]
        if self.keys.size == self.size:  # full: only rows below the largest kept key can enter
            keep = keys < self.keys.max()
            X, keys, index = X[keep], keys[keep], index[keep]
        self.rows = np.concatenate((self.rows, X))
        self.keys = np.concatenate((self.keys, keys))
        self.index = np.concatenate((self.index, index))
        if self.keys.size > self.size:
            best = np.argpartition(self.keys, self.size - 1)[: self.size]
            self.rows, self.keys, self.index = self.rows[best], self.keys[best], self.index[best]

    @property
    def complete(self) -> bool:
        """Whether the sample is the whole table."""
        return self.seen <= self.size

    def sample(self) -> np.ndarray:
        """The kept rows, in the table's order."""
        return self.rows[np.argsort(self.index)]


class TableStats:
    """One table's statistics for `evaluate`, fed batches of rows in original units, in order
    (the sample's keys are drawn row after row).

    Per column: a histogram of the values clamped onto the column's bounds (per-column figures,
    and the W1 lower bound), the clamped values' moments; all columns: the counts on the public
    bins of every column and pair (`fidelity.PairCounts`: level shares, 2-way TVD, correlations),
    a uniform sample, and the unit-cube points in `cells` as `side` (0: real,
    1: synthetic). A float column's cube coordinate is (clamped - lower) / (upper - lower), bit
    for bit the histogram's bin coordinate, so its cube histogram is the same one rescaled;
    integer columns (padded by 1/2 on the cube) get their own (`cube`).
    """

    def __init__(
        self,
        specs: list[ColumnSpec],
        side: int,
        cells: DyadicCells,
        rng: np.random.Generator,
        sample_rows: int,
        max_bins: int,
    ) -> None:
        d = len(specs)
        self.domain = Domain(tuple(specs))
        self.lower = np.array([s.lower for s in specs], dtype=np.float64)
        self.upper = np.array([s.upper for s in specs], dtype=np.float64)
        self.padded = [j for j, s in enumerate(specs) if s.kind == "integer"]
        # cube[j] = (histogram column, units of that column per unit of the cube coordinate)
        self.cube = [(j, float(self.upper[j] - self.lower[j])) for j in range(d)]
        for k, j in enumerate(self.padded):
            self.cube[j] = (d + k, 1.0)
        self.side, self.cells, self.n = side, cells, 0
        self.hist = Histograms(d + len(self.padded), max_bins)
        self.clamped = Moments(d)
        self.pairs = PairCounts(specs)
        self.sample = Reservoir(sample_rows, d, rng)

    def add(self, X: np.ndarray) -> None:
        self.n += X.shape[0]
        clamped = np.clip(X, self.lower, self.upper)
        unit = self.domain.to_unit(X)
        coord = (clamped - self.lower) / (self.upper - self.lower)
        padded = unit[:, self.padded]
        self.hist.add(np.hstack((coord, padded)), np.hstack((clamped, padded)))
        self.clamped.add(clamped)
        self.pairs.add(X)
        self.sample.add(X)
        self.cells.add(unit, self.side)
