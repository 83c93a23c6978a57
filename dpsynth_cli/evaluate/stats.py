"""What one pass over a table's record batches collects for `evaluate` (not private).

`TableStats` is the accumulator a pass feeds (`Rows.collect`, as synth's passes): per-column
histograms (the 1-D W1 brackets, quantiles and the joint W1's lower bound), exact moment sums
(means, standard deviations), the counts on the public bins of every column and pair
(`fidelity.PairCounts`: level shares, 2-way TVDs, correlations), a uniform sample of rows (the
joint W1 on a sample, plots, and every figure when it holds the whole table) and, for
`--joint-w1 full` only, the dyadic cells of the joint W1's certified upper bound. Every part
is exact integers, minima and maxima, or a sample keyed by the rows' values, so batches merge
in any order to the same statistic (`ANY_ORDER`): the pass runs on the machine's cores and on
Dask with the same figures. Memory: a batch plus these, whatever the number of rows.
"""

from __future__ import annotations

import numpy as np

from dpsynth_cli.domain import CONTINUOUS, LEVEL_KINDS, ColumnSpec, Domain
from dpsynth_cli.evaluate.exact import ExactSums
from dpsynth_cli.evaluate.fidelity import PairCounts
from dpsynth_cli.evaluate.sample import HashSample
from dpsynth_cli.evaluate.w1_binned import Histograms
from dpsynth_cli.evaluate.w1_cells import DyadicCells

# Rows kept by the uniform sample: the whole table up to this many rows (then the joint W1
# comes from every row, as on a table in memory), fewer for wide tables (SAMPLE_BYTES of
# values). Larger tables get the joint W1 on the sample: its bracket costs about a second per
# metric at 2^16 rows of 10 columns, where every row of 10^6 took tens of seconds.
SAMPLE_ROWS = 1 << 16
SAMPLE_BYTES = 64 << 20


def default_sample_rows(d: int, at_least: int) -> int:
    """Sample size for d columns: SAMPLE_ROWS, fewer when wide, never below `at_least`."""
    return max(at_least, min(SAMPLE_ROWS, SAMPLE_BYTES // (8 * max(d, 1))))


def own_missing(spec: ColumnSpec) -> bool:
    """A nullable float or datetime column: its missing values are left out of its per-column
    figures (their share is reported apart), which the statistics here do not separate."""
    return spec.nullable and spec.kind in CONTINUOUS


class TableStats:
    """One table's statistics for `evaluate`, fed batches of rows in original units in any
    order and split (module docstring).

    Per column: a histogram of the values clamped onto the column's bounds and the exact sums
    of the clamped values on the 0-1 scale of the bounds (mean, standard deviation); all
    columns: `PairCounts`, the sample, and with `max_cells` the unit-cube points in dyadic
    cells as `side` (0: real, 1: synthetic). A float column's cube coordinate is (clamped -
    lower) / (upper - lower), bit for bit the histogram's bin coordinate, so its cube histogram
    is the same one rescaled; integer columns (padded by 1/2 on the cube) get their own (`cube`).
    """

    ANY_ORDER = True  # exact integers, minima, maxima, value-keyed sample: any split and order

    def __init__(
        self,
        specs: list[ColumnSpec],
        side: int,
        seed: int,
        sample_rows: int,
        max_bins: int,
        max_cells: int | None = None,
        cells: bool = False,
    ) -> None:
        d = len(specs)
        self.domain = Domain(tuple(specs))
        self.lower = np.array([s.lower for s in specs], dtype=np.float64)
        self.upper = np.array([s.upper for s in specs], dtype=np.float64)
        width = self.upper - self.lower
        self.width = np.where(width > 0, width, 1.0)
        self.padded = [j for j, s in enumerate(specs) if s.kind == "integer"]
        self.levels = {j for j, s in enumerate(specs) if s.kind in LEVEL_KINDS}
        self.padded_domain = Domain(tuple(specs[j] for j in self.padded))
        # cube[j] = (histogram column, units of that column per unit of the cube coordinate)
        self.cube = [(j, float(self.upper[j] - self.lower[j])) for j in range(d)]
        for k, j in enumerate(self.padded):
            self.cube[j] = (d + k, 1.0)
        # per-column moments: the numbers, each on the 0-1 scale of its bounds (a nullable float
        # or datetime column's from the sample: `own_missing`)
        self.measured = [
            j for j, s in enumerate(specs) if s.kind not in LEVEL_KINDS and not own_missing(s)
        ]
        self.side, self.n = side, 0
        self.hist = Histograms(d + len(self.padded), max_bins)
        self.moments = ExactSums(len(self.measured), pairs=False)
        self.pairs = PairCounts(specs)
        self.sample = HashSample(sample_rows, d, seed)
        self.cells = DyadicCells(d, max_cells) if cells else None

    def add(self, X: np.ndarray) -> None:
        """A batch of value rows; a column at a time, so the copies are a column's, not the
        batch's (memory: the batch, its sample keys and a few columns)."""
        if X.shape[0] == 0:
            return
        self.n += X.shape[0]
        scaled = np.empty((X.shape[0], len(self.measured)))
        for j in range(X.shape[1]):  # sorted: the histogram's order (the sums take any)
            clamped = np.sort(np.clip(X[:, j], self.lower[j], self.upper[j]))
            coord = clamped - self.lower[j]
            coord /= self.upper[j] - self.lower[j]
            self.hist.add_sorted(j, np.clip(coord, 0.0, 1.0), clamped)
            if j in self.measured:
                k = self.measured.index(j)
                scaled[:, k] = coord if self.width[j] == self.upper[j] - self.lower[j] else 0.0
        if self.padded:
            unit = self.padded_domain.to_unit(X[:, self.padded])
            for k in range(len(self.padded)):
                column = np.sort(unit[:, k])
                self.hist.add_sorted(X.shape[1] + k, column, column)
        if self.measured:
            self.moments.add(scaled, np.ones(scaled.shape, dtype=bool))
        del scaled
        self.pairs.add(X)
        self.sample.add(X)
        if self.cells is not None:
            self.cells.add(self.domain.to_unit(X), self.side)

    def merge(self, other: TableStats) -> TableStats:
        self.n += other.n
        self.hist.merge(other.hist)
        self.moments.merge(other.moments)
        self.pairs.merge(other.pairs)
        self.sample.merge(other.sample)
        if self.cells is not None and other.cells is not None:
            self.cells.merge(other.cells)
        return self

    def mean_std(self, j: int) -> tuple[float, float]:
        """Column j's mean and standard deviation (numpy's, ddof = 0) of its clamped values in
        original units (j in `measured`)."""
        k = self.measured.index(j)
        unit_mean = self.moments.mean()[k]
        unit_var = self.moments.variance()[k, k]
        scale = self.width[j]
        return float(self.lower[j] + scale * unit_mean), float(scale * np.sqrt(unit_var))
