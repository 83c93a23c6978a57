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


def schedule(depth: int, d: int, lead: tuple[int, ...]) -> list[int]:
    """The coordinate halved at each level, written out plainly: each lead coordinate in turn
    while it has bits left, then the others in turn (module docstring)."""
    left, order = list(lead), []
    while any(left):
        for c in range(len(lead)):
            if left[c]:
                order.append(c)
                left[c] -= 1
    rest = list(range(len(lead), d))
    while len(order) < depth:
        order += rest
    return order[:depth]


def brute_force_lead_code(x: np.ndarray, depth: int, lead: tuple[int, ...]) -> int:
    lo, hi = np.zeros(x.size), np.ones(x.size)
    code = 0
    for c in schedule(depth, x.size, lead):
        mid = (lo[c] + hi[c]) / 2
        bit = int(x[c] >= mid)
        lo[c], hi[c] = (mid, hi[c]) if bit else (lo[c], mid)
        code = 2 * code + bit
    return code


LEADS = [((2,), 3, 9), ((2, 1, 3), 5, 14), ((3, 0, 1), 4, 4), ((1, 2), 2, 3), ((2,), 1, 2)]


@pytest.mark.parametrize("lead,d,depth", LEADS)
def test_lead_codes_match_recursive_halving(lead, d, depth):
    """Level columns first: the codes are those of halving by the written-out schedule, every
    level's code is a prefix of the next (one row, one cell per level: what PMM's and
    PrivTree's privacy needs), and cells contain their points."""
    rng = np.random.default_rng(4)
    X = rng.random((400, d))
    X[0], X[1] = 1.0, 0.0
    codes = partition.leaf_codes(X, depth, lead)
    assert codes.tolist() == [brute_force_lead_code(x, depth, lead) for x in X]
    for j in range(depth + 1):
        assert np.array_equal(partition.leaf_codes(X, j, lead), codes >> (depth - j))
    bits = partition.bits_per_coordinate(depth, d, lead)
    assert bits.tolist() == np.bincount(schedule(depth, d, lead), minlength=d).tolist()
    cells = rng.integers(0, 1 << depth, 300)
    points = partition.points_in_cells(cells, depth, d, rng, lead)
    assert np.array_equal(partition.leaf_codes(points, depth, lead), cells)
    side = np.exp2(-bits)
    lower = partition.cell_grid_index(cells, depth, d, lead) * side
    assert ((points >= lower) & (points < lower + side)).all()


def test_lead_diameters_in_the_mixed_metric():
    """Above level sum(lead) a cell spans two levels or the whole numeric cube (diameter 1);
    then the others' longest side; with nothing but level columns, 0 once they are split."""
    lead, d = (2, 1), 4  # B = 3 lead levels, then 2 numeric coordinates
    assert [partition.diameter(j, d, lead) for j in range(8)] == [1, 1, 1, 1, 1, 0.5, 0.5, 0.25]
    for j in range(3, 12):
        longest = np.exp2(-partition.bits_per_coordinate(j, d, lead)[2:]).max()
        assert partition.diameter(j, d, lead) == longest
    assert partition.diameter(3, 2, lead) == 0.0
    assert partition.depth_limit(2, lead, 10) == 3 and partition.depth_limit(3, lead, 10) == 10
    with pytest.raises(ValueError):
        partition.leaf_codes(np.zeros((1, 2)), 4, lead)
