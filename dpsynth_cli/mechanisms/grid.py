"""A regular grid of k^c cells over the first c coordinates of [0,1]^d: counts and placement.

The statistic of the grid mechanisms (`hierarchy`'s finest level, `psmm`): exact int64 counts,
one `np.bincount` per batch, so batches and workers add up to the one-pass counts bit for bit.
Nothing here adds noise. The placement of points in released cells is post-processing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from dpsynth_cli.mechanisms import placement
from dpsynth_cli.mechanisms.base import Place


@dataclass
class GridCounts:
    """Rows per cell of the grid with k cells per axis on coordinates 0..cut-1 (C order)."""

    ANY_ORDER = True  # exact integers: any split and merge order, the same statistic

    k: int
    cut: int
    counts: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        self.counts = np.zeros((self.k,) * self.cut, dtype=np.int64)

    def add(self, X: np.ndarray) -> None:
        k, c = self.k, self.cut
        idx = np.minimum((X[:, :c] * k).astype(np.int64), k - 1)  # x = 1 goes to the last cell
        np.maximum(idx, 0, out=idx)
        flat = np.ravel_multi_index(tuple(idx.T), (k,) * c) if idx.size else idx[:, 0]
        self.counts += np.bincount(flat, minlength=k**c).reshape(self.counts.shape)

    def merge(self, other: GridCounts) -> GridCounts:
        self.counts = self.counts + other.counts
        return self


def leaf_slopes(counts: np.ndarray) -> np.ndarray:
    """Relative slopes a (d, k^d) of a per-axis linear density 1 + a (u - 1/2) in each cell.

    Central differences of the neighbouring counts (the cell itself past the cube's faces),
    relative to the cell's count (`placement.relative_slope`).
    """
    d = counts.ndim
    m = counts.astype(np.float64)
    out = np.zeros((d, m.size))
    for c in range(d):
        pad = np.pad(m, [(1, 1) if a == c else (0, 0) for a in range(d)], mode="edge")
        hi = [slice(None)] * d
        lo = [slice(None)] * d
        hi[c], lo[c] = slice(2, None), slice(0, -2)
        out[c] = placement.relative_slope(pad[tuple(lo)], m, pad[tuple(hi)]).reshape(-1)
    return out


def placer(units: np.ndarray, d: int, how: str = "linear") -> Place:
    """Points in the grid cells of the released measure `units` ((k,)*c): at the centre,
    uniform, or `placement`'s piecewise-linear density with slopes from the neighbouring units;
    random order; the columns beyond the grid's (d > c) uniform on [0, 1]."""
    c, k = units.ndim, units.shape[0]
    lower = np.column_stack(np.unravel_index(np.arange(units.size), (k,) * c)) / k
    slopes = leaf_slopes(units).T if how == "linear" else np.zeros_like(lower)
    width = np.full_like(lower, 1.0 / k)

    def place(cells: np.ndarray, counts: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        if how == "centre":
            pts = np.repeat(lower[cells] + 0.5 / k, counts, axis=0)
        else:
            box = [np.take(a, cells, axis=0) for a in (lower, width, slopes)]
            pts = placement.place_in_boxes(*box, counts, rng)
        return placement.uniform_columns(placement.shuffled(pts, rng), d, rng)

    return place
