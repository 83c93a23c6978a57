"""The sparse counter of online-replay (dissertation Algorithms 10-11): exact event-driven
sampling, the literal oracle, the privacy parameters, and privacy audits with mutants.

Run with ``pytest -s`` to see the measured figures.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy.stats import chi2_contingency

from dpsynth_cli.online import geometric
from dpsynth_cli.online.counters import CounterBank
from dpsynth_cli.online.geometric import firing_probability, first_fire
from dpsynth_cli.online.literal import literal_counter
from dpsynth_cli.online.params import LevelParams, OnlinePlan, check_budget
from dpsynth_cli.privacy.noise import RandomSource, discrete_laplace
from tests.audit import audit

SEED = 20_261_123


def src(name: str) -> RandomSource:
    return RandomSource.seeded(SEED).spawn(name)


def homogeneity_p(a: np.ndarray, b: np.ndarray) -> float:
    """Chi-square p-value that two integer samples have one law (cells with < 10 pooled)."""
    vals = np.union1d(a, b)
    ca = np.array([(a == v).sum() for v in vals])
    cb = np.array([(b == v).sum() for v in vals])
    keep = ca + cb >= 10
    rest_a, rest_b = ca[~keep].sum(), cb[~keep].sum()
    table = np.vstack([np.append(ca[keep], rest_a), np.append(cb[keep], rest_b)])
    table = table[:, table.sum(axis=0) > 0]
    if table.shape[1] < 2:
        return 1.0
    return float(chi2_contingency(table)[1])


# -- the exact first-firing sampler --------------------------------------------------------------


@pytest.mark.parametrize(
    "gap,scale,m",
    [(3, Fraction(3, 2), 10), (-2, Fraction(3, 2), 10), (0, Fraction(1), 5), (10, Fraction(2), 40)],
)
def test_first_fire_matches_literal_tests(gap, scale, m):
    n = 40_000
    w = first_fire(src(f"ff{gap}"), np.full(n, gap), scale, np.full(n, m))
    lam = discrete_laplace(src(f"lit{gap}"), scale, n * m).reshape(n, m) > gap
    w_lit = np.where(lam.any(axis=1), lam.argmax(axis=1) + 1, 0)
    assert homogeneity_p(w, w_lit) > 1e-3
    q = firing_probability(gap, scale)
    assert np.mean(w == 0) == pytest.approx((1 - q) ** m, abs=4 * math.sqrt(0.25 / n))


def test_first_fire_slow_path_has_the_same_law(monkeypatch):
    """With the fast path's margin made huge every draw goes through the decimal refinement."""
    monkeypatch.setattr(geometric, "_MARGIN", 0.5)
    n, gap, scale, m = 3000, 1, Fraction(2), 8
    w = first_fire(src("slow"), np.full(n, gap), scale, np.full(n, m))
    q = firing_probability(gap, scale)
    expect = np.array([(1 - q) ** m] + [q * (1 - q) ** (k - 1) for k in range(1, m + 1)])
    observed = np.bincount(w, minlength=m + 1)
    chi2 = ((observed - n * expect) ** 2 / (n * expect)).sum()
    assert chi2 < 30  # 8 degrees of freedom: P(chi2 > 30) ~ 2e-4


def test_first_fire_tiny_probability_and_empty_horizon():
    w = first_fire(src("tiny"), np.full(1000, 10**6), Fraction(1), np.full(1000, 10**9))
    assert (w == 0).all()
    assert (first_fire(src("zero"), np.array([0, 1]), Fraction(1), np.array([0, 0])) == 0).all()


# -- privacy parameters --------------------------------------------------------------------------


@pytest.mark.parametrize("d", [1, 2, 3, 8])
@pytest.mark.parametrize("allocation", ["literal", "tuned"])
@pytest.mark.parametrize("relation", ["replace", "add-remove"])
def test_per_path_budget_is_exact(d, allocation, relation):
    plan = OnlinePlan(Fraction(1), d, relation, allocation)
    assert check_budget(plan) <= plan.path_budget  # exact rational arithmetic
    if d >= 2:  # (5.3) as printed: C1 eps alpha^(j-r) with C1 = (1 - 1/alpha)/2
        alpha = 2 ** ((1 - 1 / d) / 2)
        c1 = (1 - 1 / alpha) / 2
        factor = 2 / plan.sensitivity
        assert float(plan.epsilon_jr(3, 7)) == pytest.approx(factor * c1 * alpha ** (3 - 7))
    elif allocation == "literal":  # (5.12): 3 eps / (pi^2 (j+1)^2) under replace
        factor = 2 / plan.sensitivity
        assert float(plan.epsilon_jr(4, 9)) == pytest.approx(factor * 3 / (math.pi**2 * 25))


def test_level_starts_follow_algorithm_11():
    plan = OnlinePlan(Fraction(1, 3), 2)
    assert [plan.level_start(r) for r in range(4)] == [3, 6, 12, 24]  # ceil(2^r / eps)
    assert plan.level_of(2) == -1 and plan.level_of(3) == 0 and plan.level_of(23) == 2
    p = plan.params(2, 5)
    assert p.horizon == plan.level_start(6) - plan.level_start(5)


# -- event-driven bank vs the literal oracle -----------------------------------------------------


def small_level(horizon: int) -> LevelParams:
    """Constants where segments close often (T0 is public and outside the privacy proof)."""
    return LevelParams(Fraction(1), horizon, 3, Fraction(3, 2), 3, Fraction(2), Fraction(2))


def bank_outputs(x: np.ndarray, levels, runs: int, source: RandomSource) -> np.ndarray:
    """The event-driven bank: `runs` independent counters fed the same stream, read every step."""
    bank = CounterBank.create(runs)
    out = np.zeros((runs, x.size), dtype=np.int64)
    for t_r, p in levels:
        bank.start_level(p, t_r, source)
        last = t_r + p.horizon - 1
        for t in range(t_r, min(last, x.size) + 1):
            ids = np.arange(runs) if x[t - 1] else np.zeros(0, dtype=np.int64)
            bank.advance(ids, np.full(ids.size, t, dtype=np.int64), t, last, p, source)
            out[:, t - 1] = bank.outputs()
        if last <= x.size:
            bank.end_level(p, source)
    return out


def test_event_driven_counter_has_the_literal_law():
    """Same distribution of released counts at every step (chi-square homogeneity, T = 24)."""
    x = np.random.default_rng(1).random(24) < 0.6
    levels = [(1, small_level(8)), (9, small_level(16))]
    runs = 20_000
    lit = literal_counter(x, levels, runs, src("literal"))
    ev = bank_outputs(x, levels, runs, src("event"))
    pvals = [homogeneity_p(lit[:, t], ev[:, t]) for t in range(24)]
    print(f"\n[online] literal vs event-driven: min p over 24 steps {min(pvals):.3f}")
    assert min(pvals) > 1e-3  # 24 tests at level 1e-3: a false alarm has probability < 2.5%
    closed = (lit[:, 7] != lit[:, 0]).mean(), (ev[:, 7] != ev[:, 0]).mean()
    assert closed[0] == pytest.approx(closed[1], abs=0.02) and closed[0] > 0.3  # segments close


# -- privacy: exact law of one segment's stopping time ------------------------------------------


def stopping_law(counts: np.ndarray, t0: int, b: float, threshold_noise: bool = True):
    """P(tau = k) for k = 1..m and P(no stop): Algorithm 10's first segment, tests at every step
    with count counts[k-1] (exact sums over the threshold noise, truncated at 80 b)."""
    lam = np.arange(-int(80 * b), int(80 * b) + 1) if threshold_noise else np.array([0])
    p = math.exp(-1 / b)
    w_lam = (1 - p) / (1 + p) * p ** np.abs(lam) if threshold_noise else np.array([1.0])

    def tail(g):  # P(Z > g), Z discrete Laplace of scale b
        g = np.asarray(g)
        pos = p ** (np.maximum(g, 0) + 1) / (1 + p)
        neg = 1 - p ** np.maximum(-g, 0) / (1 + p)
        return np.where(g >= 0, pos, neg)

    law, alive = [], np.ones(lam.size)
    for c in counts:
        q = tail(t0 + lam - c)
        law.append(float((w_lam * alive * q).sum()))
        alive = alive * (1 - q)
    law.append(float((w_lam * alive).sum()))
    return np.array(law)


def max_leak(b: float, threshold_noise: bool, m: int = 14, t0: int = 4) -> float:
    worst = 0.0
    base = np.ones(m, dtype=int)
    for s in range(m):  # the neighbour lacks the row at time s (counts after s drop by 1)
        x2 = base.copy()
        x2[s] = 0
        c1 = np.concatenate([[0], np.cumsum(base)[:-1]])
        c2 = np.concatenate([[0], np.cumsum(x2)[:-1]])
        a, z = stopping_law(c1, t0, b, threshold_noise), stopping_law(c2, t0, b, threshold_noise)
        ok = (a > 1e-300) & (z > 1e-300)
        worst = max(worst, float(np.abs(np.log(a[ok]) - np.log(z[ok])).max()))
    return worst


def test_segment_stopping_time_leaks_half_of_algorithm_10s_epsilon():
    """Exact enumeration: one segment's stopping time costs 1/b = eps'/2 (b = 2/eps', Algorithm 10
    at eps'); without the threshold noise it leaks far more (the mutant)."""
    b = 2.0
    correct, mutant = max_leak(b, True), max_leak(b, False)
    print(
        f"\n[online] segment stopping-time leak: {correct:.4f} (1/b = {1 / b}), "
        f"no threshold noise: {mutant:.4f}"
    )
    assert correct <= 1 / b + 1e-9
    assert correct > 0.9 / b  # the bound is attained (tail events)
    assert mutant > 2 / b


# -- privacy: statistical audit of the counter ---------------------------------------------------


def audit_counter(threshold_noise: bool, runs: int = 40_000):
    """Algorithm 11 counter (one level, eps_r = 1) on neighbouring Boolean streams."""
    svt = Fraction(4) if threshold_noise else Fraction(1, 1000)  # the mutant: no test noise
    p = LevelParams(Fraction(1), 12, 2, svt, 3, Fraction(12), Fraction(2))
    x = np.array([1] * 6 + [0] * 6, dtype=bool)
    x2 = x.copy()
    x2[1] = False
    a = bank_outputs(x, [(1, p)], runs, src(f"aud-a-{threshold_noise}"))[:, [3, 5, 7, 10, 11]]
    z = bank_outputs(x2, [(1, p)], runs, src(f"aud-b-{threshold_noise}"))[:, [3, 5, 7, 10, 11]]
    return audit(a, z)


def test_counter_audit_and_mutant():
    ok = audit_counter(True)
    bad = audit_counter(False, runs=4000)
    print(f"\n[online] counter audit (eps_r = 1): {ok.summary()}\n  mutant: {bad.summary()}")
    ok.assert_within(1.0)
    bad.assert_exceeds(1.0)
