"""Where to put a cell's synthetic points: a linear density per axis, low-discrepancy points.

Post-processing shared by the mechanisms whose released values are counts of axis-aligned boxes
(`hierarchy`: a regular grid; `privtree`: the leaves of an adaptive binary partition). It reads
only released counts, public geometry and post-processing randomness, so it costs no privacy.
Uniform placement makes the synthetic density a staircase; when the counts say the density
rises across a cell, a per-axis linear density 1 + a (u - 1/2) (a MUSCL-style piecewise-linear
reconstruction, |a| <= 2 keeps it non-negative) follows that rise and lowers W1 on smooth data.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MAX_SLOPE = 2.0  # 1 + a (u - 1/2) >= 0 on [0, 1] iff |a| <= 2


def _golden(d: int) -> float:
    """Unique positive root of x^(d+1) = x + 1 (the generalised golden ratio)."""
    x = 2.0
    for _ in range(200):
        x = (1.0 + x) ** (1.0 / (d + 1))
    return x


def point_cells(counts: np.ndarray) -> np.ndarray:
    """The cell index of every point when cell c holds counts[c] points, cells in order.

    Per-cell values are expanded through it with `np.take(..., axis=0)`: the same values as
    `np.repeat(values, counts, axis=0)`, several times faster on 2-D arrays.
    """
    return np.repeat(np.arange(counts.size), counts)


def within_cell_uniforms(
    counts: np.ndarray, d: int, rng: np.random.Generator, cells: np.ndarray | None = None
) -> np.ndarray:
    """Low-discrepancy points in [0,1)^d for every cell, counts[c] of them, cells in order.

    Exactly stratified for d = 1 (one point in each 1/c of the cell); a randomly shifted
    Kronecker sequence with the generalised golden ratio for d >= 2. `cells`: `point_cells(counts)`
    if the caller has it.
    """
    cells = point_cells(counts) if cells is None else cells
    start = np.cumsum(counts) - counts
    i = np.arange(cells.size, dtype=np.float64)
    i -= np.take(start, cells)  # exact: integers below 2^53
    shift = np.take(rng.random((counts.size, d)), cells, axis=0)
    if d == 1:
        shift += i[:, None]
        shift /= np.take(counts, cells)[:, None]
        return shift
    alpha = _golden(d) ** -np.arange(1.0, d + 1.0)
    u = shift
    for c in range(d):
        u[:, c] += i * alpha[c]
    u -= np.floor(u)
    return u


def relative_slope(below: np.ndarray, here: np.ndarray, above: np.ndarray) -> np.ndarray:
    """a = (above - below) / (2 here), the central difference of densities sampled one cell
    width apart on either side, relative to the cell's own; 0 where here is 0; clipped to +-2."""
    a = np.divide(above - below, 2.0 * here, out=np.zeros_like(here, dtype=float), where=here > 0)
    return np.clip(a, -MAX_SLOPE, MAX_SLOPE)


def linear_inverse_cdf(a: np.ndarray, p: np.ndarray) -> np.ndarray:
    """u in [0,1] with P(U <= u) = p for the density 1 + a (u - 1/2), |a| <= 2.

    F(u) = (a/2) u^2 + (1 - a/2) u; u = 2p / (b + sqrt(b^2 + 2ap)) with b = 1 - a/2 (the stable
    root: a = 0 gives u = 2p / 2 = p exactly; the denominator is 0 only if a = 2 and p = 0, where
    u = 2p = 0). In place on temporaries: on output-sized arrays the number of passes over
    memory is the cost.
    """
    b = a * -0.5  # exactly -(a / 2)
    b += 1.0
    den = b * b
    t = a * 2.0
    t *= p
    den += t
    np.maximum(den, 0.0, out=den)
    np.sqrt(den, out=den)
    den += b
    u = np.multiply(p, 2.0, out=t)
    np.divide(u, den, out=u, where=den > 0)
    return np.clip(u, 0.0, 1.0, out=u)


@dataclass(frozen=True)
class Pooled:
    """A column's released density on 2^bits equal cells of [0, 1] (`marginals`): a point of a
    box side wider than one cell is drawn from it, restricted to that side, instead of from the
    box's linear density. With level columns split first (`partition`) the leaves of sparse
    level combinations span a column's whole range, where the box alone says nothing of its
    shape. Built from released values only.
    """

    cum: np.ndarray  # cumulative mass at the 2^bits + 1 cell edges

    @classmethod
    def of_cells(cls, mass: np.ndarray) -> Pooled:
        """The density with these masses (clipped at 0) on len(mass) equal cells."""
        return cls(np.concatenate([[0.0], np.cumsum(np.maximum(mass, 0.0))]))

    @property
    def cells(self) -> int:
        return self.cum.size - 1

    def wide(self, width: np.ndarray) -> np.ndarray:
        """Which boxes span more than one cell (the others keep their linear density)."""
        return width * self.cells > 1.0 + 1e-9

    def place(self, lower: np.ndarray, width: np.ndarray, u: np.ndarray) -> np.ndarray:
        """The point at quantile u of the density on [lower, lower + width) (dyadic boxes,
        aligned to the cells); uniform where the density has no mass there."""
        g = self.cells
        a = np.rint(lower * g).astype(np.int64)
        b = np.rint((lower + width) * g).astype(np.int64)
        fa, fb = self.cum[a], self.cum[b]
        t = fa + u * (fb - fa)
        j = np.clip(np.searchsorted(self.cum, t, "right") - 1, a, b - 1)
        mass = self.cum[j + 1] - self.cum[j]
        frac = np.divide(t - self.cum[j], mass, out=np.full_like(t, 0.5), where=mass > 0)
        x = (j + np.clip(frac, 0.0, 1.0)) / g
        return np.where(fb > fa, x, lower + u * width)


def place_in_boxes(
    lower: np.ndarray,
    width: np.ndarray,
    slopes: np.ndarray,
    counts: np.ndarray,
    rng: np.random.Generator,
    pooled: dict[int, Pooled] | None = None,
) -> np.ndarray:
    """counts[i] points in box i (lower[i], width[i]: (k, d)) with per-axis relative slopes
    slopes[i] ((k, d)), in box order (the caller shuffles). `pooled`: for these axes, boxes
    wider than a cell of its density draw from it instead (`Pooled`)."""
    counts = np.asarray(counts, dtype=np.int64)
    d = lower.shape[1]
    cells = point_cells(counts)
    u = within_cell_uniforms(counts, d, rng, cells)
    pooled = pooled or {}
    for c in range(d):
        raw = u[:, c].copy() if c in pooled else None
        u[:, c] = linear_inverse_cdf(np.take(slopes[:, c], cells), u[:, c])
        u[:, c] *= np.take(width[:, c], cells)
        u[:, c] += np.take(lower[:, c], cells)
        if raw is not None:
            at = np.flatnonzero(np.take(pooled[c].wide(width[:, c]), cells))
            box = cells[at]
            u[at, c] = pooled[c].place(lower[box, c], width[box, c], raw[at])
    return u


def shuffled(points: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """The rows of points in a uniformly random order (`np.take` gathers rows several times
    faster than fancy indexing, with the same result)."""
    return np.take(points, rng.permutation(points.shape[0]), axis=0)


_CHUNK_VALUES = 1 << 22  # uniform draws per chunk in `uniform_columns` (32 MiB of float64)


def uniform_columns(points: np.ndarray, columns: int, rng: np.random.Generator) -> np.ndarray:
    """points (m, c) widened to (m, columns): the extra columns iid uniform on [0, 1).

    For columns a partition never cuts (high dimensions): every cell spans [0, 1] along them, so
    the cell's measure is uniform there. Drawn in row chunks (C order, the same numbers as one
    draw of the whole block), so memory stays at the output's. `points` itself when nothing is
    added (no draws).
    """
    m, c = points.shape
    if columns <= c:
        return points
    out = np.empty((m, columns))
    out[:, :c] = points
    step = max(1, _CHUNK_VALUES // (columns - c))
    for lo in range(0, m, step):
        out[lo : lo + step, c:] = rng.random((min(step, m - lo), columns - c))
    return out
