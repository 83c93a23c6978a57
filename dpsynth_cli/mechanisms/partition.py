"""The binary hierarchical partition of [0,1]^d (dissertation Definition 2.7), vectorised.

Level j (1-based) halves coordinate (j-1) mod d, so coordinates are split in turn. A cell at level
j is named by the j bits chosen so far, most significant first (Morton / bit-interleaved order):
the parent of cell `c` at level j is `c >> 1`, its children are `2c` and `2c + 1`. A cell at level
j has side 2^-ceil(j/d) along the first (j mod d) coordinates and 2^-floor(j/d) along the others,
so its L-infinity diameter is 2^-floor(j/d).

Nothing here adds noise: these are the exact counts and the geometry that mechanisms use.
"""

from __future__ import annotations

import numpy as np


def bits_per_coordinate(depth: int, d: int) -> np.ndarray:
    """How many times each coordinate is halved in a partition of the given depth."""
    c = np.arange(d)
    return np.where(depth > c, (depth - c - 1) // d + 1, 0).astype(np.int64)


def diameter(level: int, d: int) -> float:
    """L-infinity diameter of a cell at `level`."""
    return 2.0 ** -(level // d)


def level_diameter_sums(depth: int, d: int) -> list[float]:
    """Delta_j = sum of cell diameters at level j (eq. 3.6), for j = -1..depth, Delta_-1 = 1."""
    return [1.0] + [2.0**j * diameter(j, d) for j in range(depth + 1)]


def leaf_codes(X: np.ndarray, depth: int) -> np.ndarray:
    """Index (in Morton order) of the depth-`depth` cell holding each row of X in [0,1]^d."""
    n, d = X.shape
    bits = bits_per_coordinate(depth, d)
    # Grid index per coordinate; x = 1 belongs to the last cell.
    q = np.minimum((X * np.exp2(bits)).astype(np.int64), (1 << bits) - 1)
    codes = np.zeros(n, dtype=np.int64)
    for j in range(1, depth + 1):
        c, t = (j - 1) % d, (j - 1) // d
        codes = (codes << 1) | ((q[:, c] >> (bits[c] - 1 - t)) & 1)
    return codes


def cell_grid_index(codes: np.ndarray, depth: int, d: int) -> np.ndarray:
    """Inverse of the interleaving: per-coordinate grid index (m, d) of each cell code."""
    bits = bits_per_coordinate(depth, d)
    q = np.zeros((codes.shape[0], d), dtype=np.int64)
    for j in range(1, depth + 1):
        c, t = (j - 1) % d, (j - 1) // d
        q[:, c] |= ((codes >> (depth - j)) & 1) << (bits[c] - 1 - t)
    return q


def level_counts(leaf_counts: np.ndarray, depth: int) -> list[np.ndarray]:
    """Counts at every level 0..depth from the leaf counts, by pairwise sums of siblings."""
    counts = [leaf_counts]
    for _ in range(depth):
        counts.append(counts[-1].reshape(-1, 2).sum(axis=1))
    return counts[::-1]


def true_level_counts(X: np.ndarray, depth: int) -> list[np.ndarray]:
    """Exact number of rows of X in every cell of every level (private: feed only to noise)."""
    leaves = np.bincount(leaf_codes(X, depth), minlength=1 << depth)
    return level_counts(leaves, depth)


def points_in_cells(
    codes: np.ndarray, depth: int, d: int, rng: np.random.Generator
) -> np.ndarray:
    """One point drawn uniformly in each listed cell (post-processing: looks at no data)."""
    bits = bits_per_coordinate(depth, d)
    q = cell_grid_index(codes, depth, d)
    return (q + rng.random(q.shape)) / np.exp2(bits)
