"""PMM parameters: exact budget of eq. (3.7) scales, depth rule, Theorem 3.9/3.10 bound."""

import math
from fractions import Fraction

import pytest

from dpsynth_cli.mechanisms import partition, pmm


@pytest.mark.parametrize("d", [1, 2, 3, 5])
@pytest.mark.parametrize("depth", [0, 1, 7, 13, 24])
@pytest.mark.parametrize("relation,sens", [("add-remove", 1), ("replace", 2)])
def test_sum_of_inverse_scales_is_the_epsilon_share_exactly(d, depth, relation, sens):
    eps = Fraction(912_345, 2**20)
    scales = pmm.level_scales(eps, depth, d, sens)
    assert len(scales) == depth + 1
    assert sum(Fraction(sens) / s for s in scales) == eps  # exact rational equality


@pytest.mark.parametrize("d,depth", [(2, 10), (3, 12)])
def test_scales_follow_eq_3_7(d, depth):
    eps = Fraction(1)
    scales = pmm.level_scales(eps, depth, d, 1)
    deltas = partition.level_diameter_sums(depth, d)[:-1]
    S = sum(math.sqrt(x) for x in deltas)
    for s, delta in zip(scales, deltas, strict=True):
        assert float(s) == pytest.approx(S / math.sqrt(delta), rel=1e-3)


def test_depth_follows_corollary_3_11_and_is_capped():
    assert pmm.choose_depth(2000, Fraction(1), 2, 1) == 11
    assert pmm.choose_depth(2000, Fraction(1), 1, 1) == 10
    assert pmm.choose_depth(2000, Fraction(1), 2, 2) == 10
    assert pmm.choose_depth(0, Fraction(1), 2, 1) == 0
    assert pmm.choose_depth(10**12, Fraction(1), 3, 1) == pmm.LEAF_CAP_LOG2


def test_theorem_bound_matches_closed_form():
    eps, depth, d, n = Fraction(1), 11, 2, 2000
    plan = pmm.PmmPlan(d, depth, eps, 1, pmm.level_scales(eps, depth, d, 1))
    S = sum(math.sqrt(x) for x in partition.level_diameter_sums(depth, d)[:-1])
    closed = 2 * math.sqrt(2) * S**2 / (float(eps) * n) + 2.0 ** -(depth // d)
    assert pmm.theorem_bound(plan, n) == pytest.approx(closed, rel=1e-3)


@pytest.mark.parametrize("d", [33, 1000, 10_000])
def test_high_dimensional_plan_halves_only_the_first_depth_coordinates(d):
    """The depth does not grow with d (2^depth leaves, never 2^d): at d > depth only the first
    `depth` coordinates are halved, once each, and the budget stays exact."""
    eps = Fraction(1)
    plan = pmm.plan(2000, eps, d, "add-remove")
    assert plan.depth == pmm.choose_depth(2000, eps, 2, 1) == 11
    assert sum(Fraction(1) / s for s in plan.level_scales) == eps
    bits = partition.bits_per_coordinate(plan.depth, d)
    assert bits[: plan.depth].tolist() == [1] * plan.depth and not bits[plan.depth :].any()
    assert plan.to_json()["leaf_cells"] == 1 << plan.depth
    assert math.isfinite(pmm.theorem_bound(plan, 2000))
