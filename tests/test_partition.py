"""Binary hierarchical partition: indexing, counts and geometry (Definition 2.7)."""

import numpy as np
import pytest

from dpsynth_cli.mechanisms import partition


def brute_force_code(x: np.ndarray, depth: int) -> int:
    """Descend the tree one halving at a time, as Definition 2.7 describes it."""
    lo, hi = np.zeros(x.size), np.ones(x.size)
    code = 0
    for j in range(depth):
        c = j % x.size
        mid = (lo[c] + hi[c]) / 2
        bit = int(x[c] >= mid)
        lo[c], hi[c] = (mid, hi[c]) if bit else (lo[c], mid)
        code = 2 * code + bit
    return code


@pytest.mark.parametrize("d,depth", [(1, 5), (2, 7), (3, 8), (2, 0)])
def test_leaf_codes_match_recursive_halving(d, depth):
    rng = np.random.default_rng(1)
    X = rng.random((300, d))
    X[0] = 1.0
    X[1] = 0.0
    expected = [brute_force_code(x, depth) for x in X]
    assert partition.leaf_codes(X, depth).tolist() == expected


@pytest.mark.parametrize("d,depth", [(1, 6), (2, 9), (3, 7)])
def test_cells_contain_their_points(d, depth):
    rng = np.random.default_rng(2)
    codes = rng.integers(0, 1 << depth, 500)
    points = partition.points_in_cells(codes, depth, d, rng)
    assert np.array_equal(partition.leaf_codes(points, depth), codes)


def test_level_counts_are_consistent_and_sum_to_n():
    rng = np.random.default_rng(3)
    X = rng.random((1000, 2))
    counts = partition.true_level_counts(X, 6)
    assert [c.size for c in counts] == [1 << j for j in range(7)]
    assert counts[0].tolist() == [1000]
    for parent, child in zip(counts[:-1], counts[1:], strict=True):
        assert np.array_equal(child.reshape(-1, 2).sum(axis=1), parent)


def test_diameters_and_delta_sums():
    assert partition.diameter(0, 2) == 1.0
    assert partition.diameter(3, 2) == 0.5
    assert partition.diameter(4, 2) == 0.25
    # Delta_j = 2^j * 2^-floor(j/d); Delta_-1 = Delta_0 = 1.
    assert partition.level_diameter_sums(3, 1) == [1.0, 1.0, 1.0, 1.0, 1.0]
    assert partition.level_diameter_sums(3, 2) == [1.0, 1.0, 2.0, 2.0, 4.0]
