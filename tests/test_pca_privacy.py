"""Privacy tests of pca's Gaussian and Laplace steps (PRIVACY.md, "Testing privacy").

Gaussian steps (every one goes through gauss.noisy_integers, after per-row rounding in
gauss.noisy_sum): the sampled privacy profile delta(eps') of neighbouring releases must stay
below the declared profile (the Gaussian mechanism's exact profile at the declared sensitivity,
itself below the ledger's zCDP conversion); mutants with noise x 0.8 and with a clip derived from
the data must exceed it. Laplace steps (laplace-cov = mechanisms.moments) are audited by the
neighbour audit of tests/audit.py. Fixed seeds.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy.stats import norm

from dpsynth_cli.mechanisms import moments
from dpsynth_cli.pca import gauss
from dpsynth_cli.privacy import noise
from dpsynth_cli.privacy.ledger import Ledger, rho_for, zcdp_delta
from tests.audit import audit
from tests.test_pca_noise import sampled_profile_lower

RUNS = 100_000
RHO = rho_for(1.0, 1e-5)


def gauss_profile(shift: float, sigma: float, eps: float) -> float:
    """Exact profile of N(0, sigma^2) against a shift (Balle & Wang 2018)."""
    a, b = shift / (2 * sigma), eps * sigma / shift
    return float(norm.cdf(a - b) - math.exp(eps) * norm.cdf(-a - b))


def release(data: np.ndarray, bound: float, tag: str, shrink: float = 1.0) -> np.ndarray:
    """RUNS independent releases of the sum of 1-d rows (each |row| <= bound), through the real
    noisy_sum grid and noisy_integers calibration (replicates share one exact integer sum)."""
    g = gauss.grid_for(bound / math.sqrt(2 * RHO))
    total = np.full(RUNS, np.rint(data / g).sum())
    delta_units = bound / g + 0.5
    src = noise.RandomSource.seeded(11).spawn(tag)
    rel = gauss.noisy_integers(total, delta_units, g, RHO * shrink, src)
    return rel.value


def check(base, plus, shift_bound, sigma):
    worst = []
    for eps in (0.0, 0.1, 0.25):
        declared = gauss_profile(shift_bound, sigma, eps)
        assert declared <= zcdp_delta(RHO, eps) + 1e-3
        worst.append(sampled_profile_lower(plus, base, eps) - declared)
    return max(worst)


def test_gaussian_step_profile_and_mutants():
    base_rows = np.full(20, 0.1)
    plus_rows = np.append(base_rows, 1.0)  # the added row sits at the public bound 1
    sigma = 1.0 / math.sqrt(2 * RHO)
    base, plus = release(base_rows, 1.0, "b"), release(plus_rows, 1.0, "p")
    assert check(base, plus, 1.0, sigma) <= 0.0
    # mutant 1: noise x 0.8 (variance x 0.64)
    mb, mp = release(base_rows, 1.0, "mb", 1 / 0.64), release(plus_rows, 1.0, "mp", 1 / 0.64)
    assert check(mb, mp, 1.0, sigma) > 0.0
    # mutant 2: the clip (and so the noise) taken from the data's largest row
    cb = release(base_rows, float(base_rows.max()), "cb")
    cp = release(plus_rows, float(plus_rows.max()), "cp")
    assert check(cb, cp, 1.0, sigma) > 0.0


@pytest.mark.parametrize("mutant", [None, 0.8])
def test_laplace_cov_first_moment_audit(mutant, monkeypatch):
    """The pure-eps step of laplace-cov (mechanisms.moments S1) on d = 1, eps = 1."""
    if mutant:
        real = noise.as_scale
        monkeypatch.setattr(noise, "as_scale", lambda x, *a, **k: real(Fraction(x) * 4 / 5))
    eps = Fraction(1)

    def sample(X, tag):
        src = noise.RandomSource.seeded(5).spawn(tag)
        out = np.empty(20_000)
        sums = moments.MomentSums.of(X).first[0]
        s1 = moments.first_sensitivity(1, "add-remove")
        scale = noise.as_scale(Fraction(s1) / eps)
        out[:] = sums + noise.discrete_laplace(src, scale, out.size)
        return out

    X = np.full((5, 1), 0.5)
    Xp = np.vstack([X, [[1.0]]])
    result = audit(sample(X, "a"), sample(Xp, "b"))
    if mutant:
        result.assert_exceeds(1.0)
    else:
        result.assert_within(1.0)
    Ledger(eps)  # pure ledger still builds
