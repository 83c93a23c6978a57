"""Algorithm 3: consistent, non-negative, integer, and comparable at every split."""

import numpy as np

from dpsynth_cli.mechanisms.consistency import is_comparable, make_consistent, split_proportionally


def random_noisy_tree(rng, depth):
    return [rng.integers(-20, 60, 1 << j) for j in range(depth + 1)]


def test_output_is_consistent_nonnegative_integer():
    rng = np.random.default_rng(4)
    for _ in range(50):
        noisy = random_noisy_tree(rng, 6)
        m = make_consistent(noisy, rng)
        assert m[0][0] == max(noisy[0][0], 0)
        for parent, child in zip(m[:-1], m[1:], strict=True):
            assert (child >= 0).all() and child.dtype.kind == "i"
            assert np.array_equal(child.reshape(-1, 2).sum(axis=1), parent)


def test_split_is_comparable_with_the_noisy_children():
    rng = np.random.default_rng(5)
    a, b = rng.integers(0, 100, 10000), rng.integers(0, 100, 10000)
    parent = rng.integers(0, 300, 10000)
    x, y = split_proportionally(parent, a, b, rng)
    assert (x + y == parent).all() and (x >= 0).all() and (y >= 0).all()
    assert is_comparable(a, b, x, y).all()


def test_proportional_split_values():
    rng = np.random.default_rng(6)
    x, y = split_proportionally(
        np.array([10, 7, 0, 5]), np.array([1, 3, 4, 0]), np.array([3, 3, 4, 0]), rng
    )
    assert x.tolist()[:3] == [3, 4, 0]  # 10*1/4 = 2.5 -> 3; 7*3/6 = 3.5 -> 4
    assert x[3] in (2, 3) and (x + y).tolist() == [10, 7, 0, 5]


def test_consistent_counts_are_exact_when_noise_is_zero():
    rng = np.random.default_rng(7)
    leaves = rng.integers(0, 50, 64)
    tree = [leaves.reshape(1 << j, -1).sum(axis=1) for j in range(7)]
    assert np.array_equal(make_consistent(tree, rng)[-1], leaves)
