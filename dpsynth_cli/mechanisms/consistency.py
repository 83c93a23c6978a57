"""Algorithm 3 (Consistency): non-negative noisy counts to consistent integer counts.

Top to bottom, each parent's consistent count m is split between its two children as the
*proportional* transformation of Algorithm 3: the point of {x + y = m, x, y >= 0 integers} closest
to the line through the children's noisy counts (a, b) and the origin, i.e. x = round(m a/(a+b)).
That point is comparable with (a, b) (both coordinates move in the direction of m - a - b), which
is all Lemma 3.16 asks for the accuracy proof. When a = b = 0 the mass is split evenly, an odd unit
going to a child chosen at random. Pure post-processing of released counts: no privacy cost.
"""

from __future__ import annotations

import numpy as np


def split_proportionally(
    parent: np.ndarray, left: np.ndarray, right: np.ndarray, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Split each parent total between two children in proportion to their counts."""
    total = left + right
    safe = np.maximum(total, 1)
    x = (2 * parent * left + total) // (2 * safe)  # round half up of parent * left / total
    empty = total == 0
    coin = rng.integers(0, 2, size=parent.shape[0])
    x = np.where(empty, parent // 2 + (parent % 2) * coin, x)
    return x, parent - x


def make_consistent(noisy: list[np.ndarray], rng: np.random.Generator) -> list[np.ndarray]:
    """Algorithm 3 applied level by level to clipped noisy counts (level 0 = the root)."""
    consistent = [np.maximum(noisy[0], 0)]
    for level in noisy[1:]:
        children = np.maximum(level, 0).reshape(-1, 2)
        x, y = split_proportionally(consistent[-1], children[:, 0], children[:, 1], rng)
        consistent.append(np.stack([x, y], axis=1).reshape(-1))
    return consistent


def is_comparable(a: np.ndarray, b: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """(x, y) and (a, b) comparable in the product order: both >= or both <=."""
    return ((x >= a) & (y >= b)) | ((x <= a) & (y <= b))
