"""The exact discrete Gaussian sampler (noise.discrete_gaussian) and the (eps, delta) ledger.

Exactness: chi-square against the pmf (a 20% under-noised mutant must be rejected). Privacy:
the sampled privacy profile delta(eps') of x -> x + N_Z(0, sigma^2) on neighbours 0 and 1 must
not exceed the exact discrete-Gaussian profile, which must not exceed what the ledger's zCDP
conversion declares; a mutant with noise x 0.8 must exceed it. Fixed seeds: nothing flakes.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from dpsynth_cli.errors import PrivacyRefusal
from dpsynth_cli.privacy import noise
from dpsynth_cli.privacy.ledger import Ledger, Spend, rho_for, zcdp_delta, zcdp_epsilon
from tests.audit import cp_lower, cp_upper

N = 200_000


def dg_pmf(sigma2: float, half_width: int) -> tuple[np.ndarray, np.ndarray]:
    z = np.arange(-half_width, half_width + 1)
    w = np.exp(-(z.astype(float) ** 2) / (2 * sigma2))
    return z, w / w.sum()


def dg_pvalue(draws: np.ndarray, sigma2: float) -> float:
    """Chi-square of draws against the N_Z(0, sigma2) pmf; tails with < 20 expected pooled."""
    hw = int(12 * math.sqrt(sigma2)) + 12
    z, p = dg_pmf(sigma2, hw)
    keep = N * p >= 20
    lo, hi = z[keep][0], z[keep][-1]
    expected = np.concatenate(([p[z < lo].sum()], p[keep], [p[z > hi].sum()])) * draws.size
    observed = np.bincount(np.clip(draws, lo - 1, hi + 1) - lo + 1, minlength=keep.sum() + 2)
    return float(stats.chisquare(observed, expected * draws.size / expected.sum()).pvalue)


@pytest.mark.parametrize("sigma2", [Fraction(1, 2), Fraction(4), Fraction(37, 3), Fraction(400)])
def test_discrete_gaussian_matches_pmf(sigma2):
    draws = noise.discrete_gaussian(noise.RandomSource.seeded(7).spawn(str(sigma2)), sigma2, N)
    assert draws.dtype == np.int64 and draws.shape == (N,)
    assert dg_pvalue(draws, float(sigma2)) > 1e-4
    mutant = noise.discrete_gaussian(noise.RandomSource.seeded(8).spawn("m"), sigma2 * 8 / 10, N)
    assert dg_pvalue(mutant, float(sigma2)) < 1e-4


def test_discrete_gaussian_huge_variance_moments():
    s2 = Fraction(10**14) + Fraction(1, 3)  # sigma = 10^7: big-integer acceptance path
    draws = noise.discrete_gaussian(noise.RandomSource.seeded(9).spawn("big"), s2, 40_000)
    sd = draws.std() / 1e7
    assert abs(sd - 1) < 0.02 and abs(draws.mean()) / 1e7 < 0.02
    assert abs(stats.kurtosis(draws / 1e7)) < 0.1


def test_bern_big_exact_on_ties():
    src = noise.RandomSource.seeded(3).spawn("b")
    hits = noise._bern_big(src, [1] * 100_000, 3)
    assert abs(hits.mean() - 1 / 3) < 0.005


def test_variance_up_rounds_up_and_validates():
    for x in (0.1, 3.0, 1e-9, 1e20, Fraction(1, 3)):
        v = noise.variance_up(x)
        assert Fraction(x) <= v <= Fraction(x) * (1 + Fraction(1, 2**38))
    with pytest.raises(TypeError):
        noise.discrete_gaussian(noise.RandomSource.seeded(1), 2.0, 3)
    with pytest.raises(ValueError):
        noise.discrete_gaussian(noise.RandomSource.seeded(1), Fraction(0), 3)


def exact_profile(sigma2: float, eps: float) -> float:
    """delta(eps) of x + N_Z(0, sigma2) between x = 1 and x = 0 (sum of max(0, p - e^eps q))."""
    z, p = dg_pmf(sigma2, int(40 * math.sqrt(sigma2)) + 40)
    q = np.roll(p, 1)  # q(z) = p(z - 1): the neighbour's output law
    return float(np.maximum(0.0, q - math.exp(eps) * p).sum())


def sampled_profile_lower(a: np.ndarray, b: np.ndarray, eps: float, alpha=0.05) -> float:
    """Lower confidence bound on delta(eps) = P[A in E] - e^eps P[B in E], E = {z >= c}: c chosen
    on the first half, bounded by Clopper-Pearson on the second (each side at alpha/2)."""
    h = a.size // 2
    cs = np.unique(np.concatenate([a[:h], b[:h]]))
    pa = h - np.searchsorted(np.sort(a[:h]), cs)
    pb = h - np.searchsorted(np.sort(b[:h]), cs)
    c = cs[int(np.argmax(pa - math.exp(eps) * pb))]
    ka, kb = int((a[h:] >= c).sum()), int((b[h:] >= c).sum())
    m = a.size - h
    return float(cp_lower(ka, m, alpha / 2) - math.exp(eps) * cp_upper(kb, m, alpha / 2))


def profile_samples(sigma2: Fraction, tag: str) -> tuple[np.ndarray, np.ndarray]:
    src = noise.RandomSource.seeded(20_260_101)
    one = 1 + noise.discrete_gaussian(src.spawn(tag + "1"), sigma2, N)
    zero = noise.discrete_gaussian(src.spawn(tag + "0"), sigma2, N)
    return one, zero


def test_privacy_profile_and_mutant():
    rho = rho_for(1.0, 1e-5)
    sigma2 = noise.variance_up(1 / (2 * rho))  # L2 sensitivity 1: rho-zCDP (CKS Thm 4)
    one, zero = profile_samples(sigma2, "ok")
    m_one, m_zero = profile_samples(noise.variance_up(float(sigma2) * 0.64), "mut")
    failed = []
    for eps in (0.0, 0.1, 0.25):
        declared = exact_profile(float(sigma2), eps)
        assert declared <= zcdp_delta(rho, eps)  # the ledger's conversion covers the profile
        assert sampled_profile_lower(one, zero, eps) <= declared
        failed.append(sampled_profile_lower(m_one, m_zero, eps) > declared)
    assert all(failed), "the noise x 0.8 mutant passed the privacy-profile test"


# -- the (eps, delta) ledger --------------------------------------------------------------------


def test_zcdp_conversion_known_values():
    rho = rho_for(1.0, 1e-5)
    assert zcdp_epsilon(rho, 1e-5) <= 1.0
    assert rho > 0.0305 and rho < 0.031  # tighter than Bun-Steinke's rho ~ 0.0208
    bs = (math.sqrt(math.log(1e5) + 1) - math.sqrt(math.log(1e5))) ** 2
    assert rho > bs
    assert zcdp_delta(rho, 1.0) <= 1e-5 * (1 + 1e-6)


def gauss_spend(rho, delta=0.0, step="g"):
    return Spend(step, "m", Fraction(0), 1.0, {}, delta=delta, rho=rho)


def test_ledger_composes_rho_and_pure_and_refuses():
    ledger = Ledger(Fraction(1), budget_delta=1e-6)
    ledger.record(Spend("c", "m", Fraction(1, 4), 1, {}))
    rho = rho_for(0.75, 1e-6)
    ledger.record(gauss_spend(rho / 2))
    ledger.record(gauss_spend(rho / 2, step="h"))
    assert ledger.spent <= 1
    js = ledger.to_json()
    assert js["total_delta"] == 1e-6 and js["total_rho"] == pytest.approx(rho)
    assert js["entries"][1]["rho"] == rho / 2
    with pytest.raises(PrivacyRefusal):
        ledger.record(gauss_spend(rho / 100, step="over"))
    assert len(ledger.spends) == 3
    with pytest.raises(PrivacyRefusal):
        Ledger(Fraction(1)).record(gauss_spend(0.01))  # a Gaussian step needs delta > 0


def test_pure_ledger_json_unchanged():
    ledger = Ledger(Fraction(1))
    ledger.record(Spend("c", "m", Fraction(1, 2), 1, {}))
    assert set(ledger.to_json()) == {
        "composition",
        "neighbouring_relation",
        "neighbouring_relation_meaning",
        "budget_epsilon",
        "total_epsilon",
        "total_epsilon_exact",
        "total_delta",
        "entries",
    }
    assert "rho" not in ledger.to_json()["entries"][0]
