"""Exact moment sums for `evaluate`'s correlations, means and standard deviations (NOT private).

Float sums depend on the order rows are added in, so a pass split over threads or Dask workers
would give figures that move in their last bits from run to run. Here each value on a 0-1
scale is put on the public grid 2^-GRID_BITS around 1/2 (q = rint((u - 1/2) 2^GRID_BITS): at
most 1.2e-10 of the column's range from u) and the sums of q, q^2 and q q' are exact integers,
so any split and merge order gives the same statistic bit for bit. Each q is split into a high
and a low part of HALF_BITS bits (q = h 2^HALF_BITS + l, 0 <= l < 2^HALF_BITS): every product
of parts is below 2^(2 HALF_BITS) and a float64 matrix product of CHUNK_ROWS rows of them stays
below 2^53, hence exact (BLAS, a batch at a time); the parts' sums go to int64 per chunk and to
Python integers across chunks (no overflow however many rows).
"""

from __future__ import annotations

import math

import numpy as np

GRID_BITS = 32  # q in [-2^31, 2^31]
HALF_BITS = 16  # h in [-2^15, 2^15], l in [0, 2^16): products below 2^32
CHUNK_ROWS = 1 << 16  # products below 2^32: sums of up to 2^20 stay exact; 2^16 bounds memory


def grid_parts(unit: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Values on a 0-1 scale (clamped) as the high and low parts of their grid integers
    (float64, exact integers)."""
    q = np.rint((np.clip(unit, 0.0, 1.0) - 0.5) * float(1 << GRID_BITS))
    high = np.floor(q / float(1 << HALF_BITS))
    return high, q - high * float(1 << HALF_BITS)


class ExactSums:
    """For k columns on a 0-1 scale with a presence mask (a value counts where present):
    count[a, b] (rows where both are present), first[a, b] = sum of q_a over them, second[a, b]
    = sum of q_a^2 over them, cross[a, b] = sum of q_a q_b; exact integers (object arrays of
    Python ints). Mergeable in any order."""

    def __init__(self, k: int, pairs: bool = True) -> None:
        self.k, self.pairs = k, pairs  # pairs=False: the diagonal only (a column's own sums)
        zero = np.zeros((k, k), dtype=np.int64)
        self.count, self.first, self.second, self.cross = (zero.astype(object) for _ in range(4))

    def add(self, unit: np.ndarray, present: np.ndarray) -> None:
        """A batch: `unit` (m, k) values on the 0-1 scale, `present` (m, k) booleans."""
        k = self.k
        parts = np.zeros((9, k, k), dtype=np.int64)  # count, h, l, hh, hl, ll (first args), ...
        for lo in range(0, unit.shape[0], CHUNK_ROWS):
            p = present[lo : lo + CHUNK_ROWS]
            full = bool(p.all())
            p = np.ones(p.shape) if full else p.astype(np.float64)
            h, low = grid_parts(unit[lo : lo + CHUNK_ROWS])
            if not full:  # 0 where missing: products then count rows where both are present
                h *= p
                low *= p
            if full or not self.pairs:  # column sums (each below 2^52: exact), by BLAS
                one = np.ones(p.shape[0])
                column = [one @ v for v in (p, h, low, h * h, h * low, low * low)]
                for i, v in enumerate(column):  # every row present: the same for each b
                    parts[i] = np.diag(v) if not full else np.broadcast_to(v[:, None], (k, k))
                if not self.pairs:  # the diagonal only: cross = second there
                    parts[6:] = parts[3:6]
                    self._fold(parts)
                    continue
            hT, lT = h.T, low.T
            if full:
                products = (hT @ h, hT @ low, lT @ low)
                start = 6
            else:
                products = (
                    p.T @ p,
                    hT @ p,
                    lT @ p,
                    (hT * hT) @ p,
                    (hT * lT) @ p,
                    (lT * lT) @ p,
                    hT @ h,
                    hT @ low,
                    lT @ low,
                )
                start = 0
            for i, m in enumerate(products, start):
                parts[i] = m
            self._fold(parts)

    def _fold(self, parts: np.ndarray) -> None:
        """One chunk's part sums (exact int64) into the Python-integer totals."""
        c, h1, l1, hh, hl, ll, xhh, xhl, xll = (part.astype(object) for part in parts)
        s, s2 = 1 << HALF_BITS, 1 << (2 * HALF_BITS)
        self.count = self.count + c
        self.first = self.first + h1 * s + l1
        self.second = self.second + hh * s2 + 2 * hl * s + ll
        self.cross = self.cross + xhh * s2 + (xhl + xhl.T) * s + xll

    def merge(self, other: ExactSums) -> ExactSums:
        self.count = self.count + other.count
        self.first = self.first + other.first
        self.second = self.second + other.second
        self.cross = self.cross + other.cross
        return self

    def variance(self) -> np.ndarray:
        """variance[a, b]: of column a on the 0-1 scale over rows where a and b are present
        (NaN where there are none)."""
        out = np.full((self.k, self.k), np.nan)
        for a in range(self.k):
            for b in range(self.k):
                n = self.count[a, b]
                if n:
                    spread = n * self.second[a, b] - self.first[a, b] ** 2  # exact
                    out[a, b] = spread / (n * n * (1 << (2 * GRID_BITS)))
        return out

    def mean(self) -> np.ndarray:
        """Each column's mean on the 0-1 scale over rows where it is present (NaN if none)."""
        return np.array(
            [
                0.5 + self.first[j, j] / (self.count[j, j] << GRID_BITS)
                if self.count[j, j]
                else math.nan
                for j in range(self.k)
            ]
        )

    def correlation(self) -> np.ndarray:
        """Pearson correlation of each pair over rows where both are present, from the exact
        integers (one rounding at the end; NaN where a variance is zero or no row counts)."""
        r = np.full((self.k, self.k), np.nan)
        for a in range(self.k):
            for b in range(self.k):
                n = self.count[a, b]
                if not n:
                    continue
                cov = n * self.cross[a, b] - self.first[a, b] * self.first[b, a]
                va = n * self.second[a, b] - self.first[a, b] ** 2
                vb = n * self.second[b, a] - self.first[b, a] ** 2
                if va > 0 and vb > 0:
                    r[a, b] = min(1.0, max(-1.0, float(cov) / math.sqrt(float(va) * float(vb))))
        return r
