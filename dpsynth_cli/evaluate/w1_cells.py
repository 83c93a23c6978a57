"""The certified W1 upper bound from mergeable cell statistics: tables read in batches.

`dyadic_bounds` (w1_tree) needs every point in memory. Its tree bound needs only, per leaf of
the partition, the two masses and the bounding box of the points in the leaf: with leaves the
occupied cells of a fixed depth r, those are sums, minima and maxima, which batches add and
merge in any order. `DyadicCells` keeps them for the occupied cells only (a sparse table sorted
by Morton code), so memory is bounded by the number of occupied cells, which `max_cells` caps.

Fixed-depth argument (why the bounds stay certified). Take the depth-r dyadic partition of
[0, 1]^d (level t halves coordinate t mod d; points are clamped onto the cube first, as
`Domain.to_unit` does). Leaves are its occupied cells L, with masses mu(L) = n_x(L)/n,
nu(L) = n_y(L)/m, e(L) = mu(L) - nu(L), and the bounding box B(L) of all points (of either
table) in L, of L-inf diameter D(L). This is exactly the partition `dyadic_bounds` builds at
`depth=r`, with the same leaf statistics, so its proof applies word for word: matching
min(mu(L), nu(L)) inside each leaf costs at most D(L) per unit (both ends lie in B(L)), and
the leftovers matched in a parent P between its children C0, C1 cost at most the largest
distance between B(C0) and B(C1); the root is balanced, so this is a coupling of mu and nu and
`tree` >= W1. Nothing in that argument needs the points themselves, only that every point of
L lies in B(L), which the batch-wise minima and maxima guarantee.

The curve plan, at cell resolution: order the leaves by Morton code and couple the cell masses
by the north-west corner rule (the k-th unit of mu's mass, in cell order, goes to the k-th unit
of nu's). Flow f from cell i (mu's points, inside B(i)) to cell j (nu's, inside B(j)) moves
each unit at most max_c max(hi_i - lo_j, hi_j - lo_i) (the farthest two points of the boxes),
and any way of splitting the flow among the points realises it: a coupling, so `curve` >= W1.
At a depth where cells hold single points it is the point-level curve of `dyadic_bounds`.

Cap rule: a table starts at depth r0 = min(default_depth(d), 63) (one uint64 code) and, when
more than `max_cells` cells are occupied, drops its deepest levels (code >> s, merging cells
into their ancestors), as few as make them fit. The number of occupied cells grows with the data and
with the depth, so the final depth is the deepest r <= r0 at which all the rows occupy at most
`max_cells` cells: the same for every batch split and merge order, as are the integer counts
and the boxes (minima, maxima). Coarser leaves only loosen the bound (see `dyadic_bounds`:
deeper is never worse); they never invalidate it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dpsynth_cli.evaluate.w1_tree import (
    WORD_BITS,
    count_coupling,
    default_depth,
    grid_ints,
    level_bits,
    merge_up,
    morton_codes,
)

# Default cap: 2**22 occupied cells, fewer when the table of cells would pass CELL_BYTES
# (8 bytes each for the code, the two counts and 2 d box coordinates).
MAX_CELLS = 1 << 22
CELL_BYTES = 256 << 20


def default_max_cells(d: int) -> int:
    """Occupied cells kept at most for d columns (see CELL_BYTES)."""
    return max(1, min(MAX_CELLS, CELL_BYTES // (8 * (3 + 2 * d))))


class DyadicCells:
    """Per occupied cell of a depth-r dyadic partition of [0, 1]^d: Morton code, the number of
    points of each side (0: mu, 1: nu; `sides=1` for one table) and their bounding box.
    Mergeable: `add` batches of unit-cube points of either side, `merge` another such table
    (see the module's cap rule)."""

    def __init__(
        self, d: int, max_cells: int | None = None, depth: int | None = None, sides: int = 2
    ) -> None:
        self.d, self.sides = d, sides
        self._depth = min(default_depth(d), WORD_BITS) if depth is None else int(depth)
        self.max_cells = default_max_cells(d) if max_cells is None else int(max_cells)
        if not 0 <= self._depth <= WORD_BITS or self.max_cells < 1:
            raise ValueError("depth must be in [0, 63] and max_cells at least 1")
        self._codes = np.empty(0, dtype=np.uint64)
        self._counts = np.empty((0, sides), dtype=np.int64)
        self._lo = np.empty((d, 0))
        self._hi = np.empty((d, 0))
        # batches' cells not yet merged into the table (sorted, at this depth): merged in one
        # stable sort of sorted runs once they hold as many cells as the table (or the cap), so
        # each cell is copied a bounded number of times, not once per batch
        self._pending: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
        self._pending_cells = 0

    # The table, its pending cells merged in first (`_flush`).
    depth = property(lambda self: self._flushed("_depth"), doc="levels of the partition")
    codes = property(lambda self: self._flushed("_codes"), doc="occupied cells' Morton codes")
    counts = property(lambda self: self._flushed("_counts"), doc="points per cell and side")
    lo = property(lambda self: self._flushed("_lo"), doc="cells' boxes: lowest values (d, k)")
    hi = property(lambda self: self._flushed("_hi"), doc="cells' boxes: highest values (d, k)")

    def _flushed(self, name: str) -> Any:
        self._flush()
        return getattr(self, name)

    def add(self, U: np.ndarray, side: int, values: np.ndarray | None = None) -> None:
        """Points U (k, d) of side 0 (mu) or 1 (nu), clamped onto [0, 1]^d. The boxes bound
        `values` (k, d) instead of U if given: any values non-decreasing in each coordinate
        of U (a 1-D histogram of a column in its own units, `w1_binned`)."""
        if U.shape[0] == 0:
            return
        if self.d == 1:
            u = np.sort(np.clip(U[:, 0], 0.0, 1.0))
            self.add_sorted(u, side, u if values is None else np.sort(values[:, 0]))
            return
        U = np.clip(U, 0.0, 1.0)
        bits = level_bits(self._depth, self.d)
        codes = morton_codes(
            [grid_ints(U[:, c], bits[c]) for c in range(self.d)], bits, self._depth
        )
        order = np.argsort(codes)
        codes = codes[order]
        # The union occupies at least the cells the batch does: coarsen to fit the batch first.
        shift = _shift_to_fit(codes, self.max_cells)
        self._coarsen(shift)
        codes >>= np.uint64(shift)
        starts = _run_starts(codes)
        counts = np.zeros((starts.size, self.sides), dtype=np.int64)
        counts[:, side] = np.diff(np.append(starts, codes.size))
        points = (U if values is None else values)[order].T
        self._absorb(
            codes[starts],
            counts,
            np.minimum.reduceat(points, starts, axis=1),
            np.maximum.reduceat(points, starts, axis=1),
        )

    def add_sorted(self, u: np.ndarray, side: int, values: np.ndarray) -> None:
        """`add` in 1-D (a column's histogram, `w1_binned`) of sorted coordinates u in [0, 1]
        and their values, sorted too (non-decreasing in u: sorting each lines them up). The
        codes are the grid integers, sorted already (no argsort, no gathers), and a bin's
        minimum and maximum are its first and last value: the cells of `add`, bit for bit."""
        codes = grid_ints(u, self._depth)
        shift = _shift_to_fit(codes, self.max_cells)
        self._coarsen(shift)
        codes >>= np.uint64(shift)
        starts = _run_starts(codes)
        ends = np.append(starts[1:], codes.size)
        counts = np.zeros((starts.size, self.sides), dtype=np.int64)
        counts[:, side] = ends - starts
        self._absorb(codes[starts], counts, values[starts][None, :], values[ends - 1][None, :])

    def merge(self, other: DyadicCells) -> DyadicCells:
        """Both tables' cells, at the shallower of the two depths."""
        other = other.copy()
        depth = min(self._depth, other._depth)
        self._coarsen(self._depth - depth)
        other._coarsen(other._depth - depth)
        self._absorb(other.codes, other.counts, other.lo, other.hi)
        return self

    def copy(self) -> DyadicCells:
        self._flush()
        out = DyadicCells(self.d, self.max_cells, self._depth, self.sides)
        out._codes, out._counts = self._codes.copy(), self._counts.copy()
        out._lo, out._hi = self._lo.copy(), self._hi.copy()
        return out

    @property
    def size(self) -> int:
        return int(self.codes.size)

    def bounds(self) -> tuple[float, float]:
        """(tree, curve): the two certified upper bounds on W1(mu, nu) (module docstring)."""
        n, m = (int(v) for v in self.counts.sum(axis=0))
        if n == 0 or m == 0:
            raise ValueError("both sides need at least one point")
        flow, i, j = count_coupling(self.counts[:, 0], self.counts[:, 1])
        reach = np.zeros(flow.size)
        for lo, hi in zip(self.lo, self.hi, strict=True):  # a coordinate at a time: less memory
            np.maximum(reach, np.maximum(hi[i] - lo[j], hi[j] - lo[i]), out=reach)
        curve = float(np.dot(flow, reach))
        del flow, i, j, reach
        a, b = self.counts[:, 0] / n, self.counts[:, 1] / m
        excess = a - b
        diam = (self.hi - self.lo).max(axis=0)
        total = float(np.dot(diam, a + b - np.abs(excess)))
        del a, b, diam
        levels = self._depth - _bit_length(self.codes[1:] ^ self.codes[:-1])
        lo, hi = list(self.lo.copy()), list(self.hi.copy())  # merge_up works in place
        total += merge_up(levels, excess, lo, hi, self._depth)
        return 0.5 * total, curve

    def _absorb(
        self, codes: np.ndarray, counts: np.ndarray, lo: np.ndarray, hi: np.ndarray
    ) -> None:
        """Add sorted cells (at this depth); merged into the table, and the table coarsened to
        fit the cap, once enough are pending (`_flush`). The final table is the same: its depth
        is the deepest at which all the cells added fit, whenever the merges happen."""
        self._pending.append((codes, counts, lo, hi))
        self._pending_cells += codes.size
        if self._pending_cells >= max(self.max_cells, self._codes.size):
            self._flush()

    def _flush(self) -> None:
        """Merge the pending cells into the table (the peak: the table, the pending cells and
        one merged copy), then coarsen to fit the cap."""
        if not self._pending:
            return
        parts = [(self._codes, self._counts, self._lo, self._hi), *self._pending]
        self._pending, self._pending_cells = [], 0
        codes = np.concatenate([p[0] for p in parts])
        order = np.argsort(codes, kind="stable")  # runs already sorted: a merge
        codes = codes[order]
        starts = _run_starts(codes)
        self._codes = codes[starts]
        del codes
        self._counts = np.add.reduceat(np.concatenate([p[1] for p in parts])[order], starts)
        self._lo = np.minimum.reduceat(
            np.concatenate([p[2] for p in parts], 1)[:, order], starts, 1
        )
        self._hi = np.maximum.reduceat(
            np.concatenate([p[3] for p in parts], 1)[:, order], starts, 1
        )
        self._coarsen(_shift_to_fit(self._codes, self.max_cells))

    def _coarsen(self, levels: int) -> None:
        """Drop the deepest `levels` levels: cells merge into their ancestors (codes stay
        sorted; pending cells are only shifted, `_flush` merges them)."""
        if levels == 0:
            return
        self._depth -= levels
        shift = np.uint64(levels)
        for codes, *_ in self._pending:
            codes >>= shift
        if self._codes.size == 0:
            return
        self._codes >>= shift
        starts = _run_starts(self._codes)
        self._codes = self._codes[starts]
        self._counts = np.add.reduceat(self._counts, starts, axis=0)
        self._lo = np.minimum.reduceat(self._lo, starts, axis=1)
        self._hi = np.maximum.reduceat(self._hi, starts, axis=1)


def _run_starts(sorted_codes: np.ndarray) -> np.ndarray:
    """Index of the first element of each run of equal values."""
    if sorted_codes.size == 0:
        return np.empty(0, dtype=np.intp)
    return np.flatnonzero(np.concatenate(([True], sorted_codes[1:] != sorted_codes[:-1])))


def _shift_to_fit(sorted_codes: np.ndarray, cap: int) -> int:
    """The fewest deepest levels to drop so that at most `cap` distinct codes remain: dropping
    s levels keeps 1 + #(neighbours whose codes differ above bit s) distinct codes."""
    if sorted_codes.size <= cap:
        return 0
    xor = sorted_codes[1:] ^ sorted_codes[:-1]  # 0 for equal neighbours
    if sorted_codes[-1] < np.uint64(1 << 52):  # exact in float64 (a column's histogram)
        parts = np.frexp(xor.astype(np.float64))[1].astype(np.int64)
    else:
        parts = _bit_length(xor)
    above = np.cumsum(np.bincount(parts, minlength=65)[::-1])[::-1]  # above[s] = #(parts >= s)
    return int(np.flatnonzero(1 + above[1:] <= cap)[0])  # 1 + #(parts > s) <= cap


def _bit_length(v: np.ndarray) -> np.ndarray:
    """Exact bit length of uint64 values (frexp of each 32-bit half, exact in float64)."""
    _, high = np.frexp((v >> np.uint64(32)).astype(np.float64))
    _, low = np.frexp((v & np.uint64(0xFFFFFFFF)).astype(np.float64))
    return np.where(high > 0, high + 32, low).astype(np.int64)
