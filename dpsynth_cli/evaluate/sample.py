"""A uniform sample of a table's rows that does not depend on how the rows were split or merged
(evaluate's joint W1 and plots; NOT private).

Bottom-k on a keyed hash of each row's values: every row gets the key hash(seed, its values)
and the `size` rows with the smallest keys are kept. The key is a function of the row alone,
so threads and Dask workers that each keep their own bottom-k merge into the same sample
whatever took which rows (a row-order key, as a generator's draws, would not). Different rows
get independent-looking keys, so each `size`-subset of distinct rows is about equally likely;
copies of one row share their key and enter together (the sample is then of clusters of equal
rows, still of the table's measure). Equal keys mean equal rows (up to 2^-64 collisions), so
the kept rows are the same multiset however ties at the boundary fall.
"""

from __future__ import annotations

import numpy as np

_MUL = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


def _finish(h: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser (a bijection of uint64 that mixes every bit)."""
    h ^= h >> np.uint64(30)
    h *= _MIX1
    h ^= h >> np.uint64(27)
    h *= _MIX2
    h ^= h >> np.uint64(31)
    return h


def row_keys(X: np.ndarray, seed: int) -> np.ndarray:
    """A uint64 key per row of X (float64, (m, d)), a function of `seed` and the row's values
    (0.0 and -0.0 alike)."""
    bits = np.ascontiguousarray(X + 0.0, dtype=np.float64).view(np.uint64)
    start = (seed * int(_MUL) + int(_MIX2)) % (1 << 64)
    h = np.full(X.shape[0], start, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for j in range(X.shape[1]):
            h = _finish(h ^ bits[:, j])
    return h


class HashSample:
    """The `size` rows of smallest `row_keys` seen so far (module docstring); mergeable in any
    order to the same sample."""

    def __init__(self, size: int, d: int, seed: int) -> None:
        self.size, self.seed, self.seen = int(size), int(seed), 0
        self.rows = np.empty((0, d))
        self.keys = np.empty(0, dtype=np.uint64)

    def add(self, X: np.ndarray) -> None:
        self.seen += X.shape[0]
        keys = row_keys(X, self.seed)
        if self.keys.size >= self.size:  # only rows below the largest kept key can enter
            keep = keys < self.keys.max()
            X, keys = X[keep], keys[keep]
        self._take(X, keys)

    def merge(self, other: HashSample) -> HashSample:
        self.seen += other.seen
        self._take(other.rows, other.keys)
        return self

    def _take(self, X: np.ndarray, keys: np.ndarray) -> None:
        if not keys.size:
            return
        self.rows = np.concatenate((self.rows, X))
        self.keys = np.concatenate((self.keys, keys))
        if self.keys.size > self.size:
            best = np.argpartition(self.keys, self.size - 1)[: self.size]
            self.rows, self.keys = self.rows[best], self.keys[best]

    @property
    def complete(self) -> bool:
        """Whether the sample holds every row of the table."""
        return self.seen <= self.size

    def sample(self) -> np.ndarray:
        """The kept rows in key order (the same order whatever the split)."""
        return self.rows[np.argsort(self.keys, kind="stable")]
