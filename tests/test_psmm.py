"""PSMM end to end: plan from public values, ledger, output size, placement, Theorem 3.6 bound,
and accuracy against the bound with fixed seeds."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from dpsynth_cli.evaluate.w1 import w1_exact
from dpsynth_cli.mechanisms import psmm
from dpsynth_cli.privacy.ledger import Ledger
from dpsynth_cli.privacy.noise import RandomSource


def run(X, eps=Fraction(1), noisy=None, relation="add-remove", rows=None, seed=0):
    source = RandomSource.seeded(seed)
    ledger = Ledger(eps, relation)
    out = psmm.run(
        X,
        epsilon=eps,
        noisy_rows=X.shape[0] if noisy is None else noisy,
        relation=relation,
        source=source.spawn("psmm"),
        ledger=ledger,
        rng=source.spawn("post").numpy_generator(),
        rows=rows,
    )
    return out, ledger


def clusters(n, d, seed):
    rng = np.random.default_rng(seed)
    centre = np.where(rng.random(n)[:, None] < 0.5, 0.3, 0.7)
    return np.clip(centre + rng.normal(0, 0.1, (n, d)), 0, 1)


def test_plan_reads_only_public_values_and_follows_the_grid_rule():
    p = psmm.plan(1000, Fraction(1, 2), 2, "add-remove")
    assert p.k == round((0.5 * 500) ** 0.5) and p.normaliser == 1000  # d = 2: m = eps n / 2
    assert p.scale == 2
    r = psmm.plan(1000, Fraction(1, 2), 2, "replace")
    assert r.sensitivity == 2 and r.scale == 4 and r.k**2 < p.k**2
    assert psmm.plan(-5, Fraction(1), 3, "add-remove") == psmm.PsmmPlan(3, 1, Fraction(1), 1, 0)
    assert psmm.plan(10**9, Fraction(1), 2, "add-remove").cells <= 1 << psmm.CELL_CAP_LOG2
    assert psmm.plan(8000, Fraction(1), 1, "add-remove").k == 200  # d = 1: 0.5 (eps n)^(2/3)
    assert psmm.plan(8000, Fraction(1), 3, "add-remove").k == 20  # d >= 3: eps n (Cor. 3.7)
    rule = psmm.plan(8000, Fraction(1), 1, "add-remove").to_json()["grid_rule"]
    assert rule.startswith("m = k^d about 0.5 * (eps * noisy_rows / sensitivity)^0.667")


def test_run_spends_epsilon_once_and_releases_n_points_in_the_cube():
    X = clusters(500, 2, 1)
    out, ledger = run(X, noisy=480)
    assert out.points.shape == (480, 2) and ((out.points >= 0) & (out.points <= 1)).all()
    assert ledger.spent == Fraction(1) and [s.step for s in ledger.spends] == ["psmm"]
    assert ledger.spends[0].noise["scale"] == 1.0
    desc = out.description
    assert desc["name"] == "psmm" and desc["normaliser"] == 480
    assert desc["projection_result"]["optimality_gap"] == 0.0
    assert (
        0
        < out.w1_bound
        == pytest.approx(psmm.theorem_bound(psmm.plan(480, 1, 2, "add-remove"), 480))
    )


def test_rows_resamples_and_an_empty_release_is_valid():
    X = clusters(300, 3, 2)
    out, _ = run(X, rows=77)
    assert out.points.shape == (77, 3)
    empty, ledger = run(X[:0], noisy=0)
    assert empty.points.shape == (0, 3) and ledger.spent == 1


def test_true_counts_put_the_upper_face_in_the_last_cell():
    X = np.array([[0.0, 1.0], [0.999, 0.5], [1.0, 1.0]])
    c = psmm.true_counts(X, 4)
    assert c[0, 3] == 1 and c[3, 2] == 1 and c[3, 3] == 1 and c.sum() == 3


@pytest.mark.parametrize("how", psmm.PLACEMENTS)
def test_points_stay_in_their_cells(how):
    units = np.array([[3, 0], [1, 5]])
    pts = psmm.place_points(units, np.random.default_rng(0), how=how)
    cells = np.minimum((pts * 2).astype(int), 1)
    got = np.zeros((2, 2), dtype=int)
    np.add.at(got, tuple(cells.T), 1)
    assert np.array_equal(got, units)
    if how == "centre":
        assert set(np.unique(pts)) == {0.25, 0.75}


def test_noise_term_is_the_dyadic_chaining_sum():
    sd = math.sqrt(psmm.discrete_laplace_variance(Fraction(1)))
    one = psmm.PsmmPlan(1, 1, Fraction(1), 1, 10)
    assert psmm.noise_term(one) == pytest.approx(sd)  # the total only
    two = psmm.PsmmPlan(1, 2, Fraction(1), 1, 10)  # total + two cells at distance 1/2
    assert psmm.noise_term(two) == pytest.approx(math.sqrt(2) * sd + 0.5 * 2 * sd)
    three = psmm.PsmmPlan(2, 3, Fraction(1), 1, 10)  # level 0: 9 cells; level 1: 2x2, 2x1, 1x1
    level1 = 2 + 2 * math.sqrt(2) + 1  # sqrt of the cells per block
    assert psmm.noise_term(three) == pytest.approx((3 + 9 / 3 + 1 * level1) * sd)


@pytest.mark.parametrize("d", [1, 2, 3])
def test_bound_falls_at_the_grid_rules_rate(d):
    """Corollary 3.7's rates for d >= 2; (eps n)^(-2/3) for d = 1 with m ~ (eps n)^(2/3)."""
    ratios = []
    for eps_n in (10**3, 10**5):
        pp = psmm.plan(eps_n, Fraction(1), d, "add-remove")
        rate = {1: eps_n ** (-2 / 3), 2: math.log(eps_n) * eps_n**-0.5}.get(d, eps_n ** (-1 / d))
        ratios.append(psmm.theorem_bound(pp, eps_n) / rate)
    assert 0.3 < ratios[1] / ratios[0] < 3  # the rate holds up to a constant


@pytest.mark.parametrize("d", [1, 2, 3])
def test_mean_w1_is_under_theorem_3_6_and_falls_with_eps_n(d):
    """n = 1000, eps n = 100 and 1000, three seeded runs each: exact W1 below the bound."""
    X = clusters(1000, d, 10 + d)
    means = []
    for eps in (Fraction(1, 10), Fraction(1)):
        runs = [run(X, eps=eps, seed=100 * d + s) for s in range(3)]
        w1 = float(np.mean([w1_exact(X, out.points) for out, _ in runs]))
        assert w1 < runs[0][0].w1_bound
        means.append(w1)
    assert means[1] < means[0]
