"""Privacy tests of pca's Gaussian and Laplace steps (PRIVACY.md, "Testing privacy").

Gaussian steps (every one goes through gauss.noisy_integers, after per-row rounding in
gauss.noisy_sum): the sampled privacy profile delta(eps') of neighbouring releases must stay
below the declared profile (the Gaussian mechanism's exact profile at the declared sensitivity,
itself below the ledger's zCDP conversion); mutants with noise x 0.8 and with a clip derived from
the data must exceed it. Laplace steps (laplace-cov = mechanisms.moments, dp-gauss-2's eigengap) are
audited by the neighbour audit of tests/audit.py. dp-power and dp-gauss-2 add deterministic checks
of their sensitivity arguments (Frobenius bound, Weyl, Davis-Kahan) on adversarial neighbours,
each with a mutant that must break them, also at the factor grid's rounding corner (review F4),
and dp-gauss-2's PTR floor its failure rate. Fixed seeds.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy.stats import norm

from dpsynth_cli.mechanisms import moments
from dpsynth_cli.pca import gauss, methods
from dpsynth_cli.pca.stream import Stream
from dpsynth_cli.privacy import noise
from dpsynth_cli.privacy.ledger import Ledger, rho_for, zcdp_delta
from tests.audit import audit, cp_lower
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


# -- dp-power and dp-gauss-2 -------------------------------------------------------------------


def statistic_release(shift: float, sens: float, tag: str, shrink: float = 1.0) -> np.ndarray:
    """RUNS releases of a 1-d statistic through gauss.noisy_statistic (dp-power's iterations and
    dp-gauss-2's projector): `shift` is the neighbour's value, `sens` the declared sensitivity."""
    src = noise.RandomSource.seeded(13).spawn(tag)
    return gauss.noisy_statistic(np.full(RUNS, shift), sens, RHO * shrink, src).value


def test_noisy_statistic_profile_and_mutant():
    """Both new Gaussian steps release through noisy_statistic; at the worst neighbour (shift =
    the declared sensitivity) the sampled profile stays below the declared one; x 0.8 fails."""
    sigma = 1.0 / math.sqrt(2 * RHO)
    base, plus = statistic_release(0.0, 1.0, "b"), statistic_release(1.0, 1.0, "p")
    assert check(base, plus, 1.0, sigma) <= 0.0
    mb, mp = (
        statistic_release(0.0, 1.0, "mb", 1 / 0.64),
        statistic_release(1.0, 1.0, "mp", 1 / 0.64),
    )
    assert check(mb, mp, 1.0, sigma) > 0.0


def _worst_power_shift(beta2: float, clip: float, seed: int = 0) -> float:
    """Largest ||A Y||_F / (declared sensitivity) over adversarial rows a with ||a||^2 = beta2
    (the public bound), A = a a^T clipped to trace `clip`, and orthonormal Y (d = 4, k = 2)."""
    rng = np.random.default_rng(seed)
    worst = 0.0
    for _ in range(300):
        Y, _ = np.linalg.qr(rng.standard_normal((4, 2)))
        a = Y @ rng.standard_normal(2) if rng.random() < 0.5 else rng.standard_normal(4)
        a *= math.sqrt(beta2) / np.linalg.norm(a)
        A = np.outer(a, a) * min(1.0, clip / float(a @ a))
        worst = max(worst, np.linalg.norm(A @ Y) / (clip * gauss.relation_factor("add-remove")))
    return worst


def test_dp_power_sensitivity_and_data_clip_mutant():
    """power_step's sensitivity beta^2 covers ||A Y||_F for every row within the public bound;
    a clip taken from the data (here 0.5 of the bound) does not cover the row at the bound."""
    assert _worst_power_shift(2.0, 2.0) <= 1.0 + 1e-12
    assert _worst_power_shift(2.0, 2.0) >= 0.999  # attained: a in span(Y)
    # mutant: the declared sensitivity from the data's largest row (1.0) while a row at 2.0 comes
    rng = np.random.default_rng(1)
    Y, _ = np.linalg.qr(rng.standard_normal((4, 2)))
    a = Y[:, 0] * math.sqrt(2.0)
    assert np.linalg.norm(np.outer(a, a) @ Y) > 1.0 * gauss.relation_factor("add-remove")


def _projector(X, k):
    vals, vecs = np.linalg.eigh(X)
    V = vecs[:, ::-1][:, :k]
    return V @ V.T, vals[::-1]


def test_dp_gauss_2_weyl_and_davis_kahan_bounds():
    """The gap moves by at most beta^2 (its Laplace sensitivity) and the projector by at most
    projector_sensitivity(beta^2, gap) for adversarial PSD rows of trace beta^2; a mutant
    sensitivity without Davis-Kahan's factor 2 sqrt(2) is exceeded."""
    rng = np.random.default_rng(3)
    d, k, beta2 = 4, 2, 1.0
    gap_ratio, proj_ratio, naive = 0.0, 0.0, 0.0
    for _ in range(400):
        Q, _ = np.linalg.qr(rng.standard_normal((d, d)))
        lam = np.sort(rng.uniform(0, 6, d))[::-1]
        X = (Q * lam) @ Q.T
        P, vals = _projector(X, k)
        gap = vals[k - 1] - vals[k]
        a = (
            Q[:, k - 1 : k + 1] @ rng.standard_normal(2)
            if rng.random() < 0.7
            else rng.standard_normal(d)
        )
        a *= math.sqrt(beta2) / np.linalg.norm(a)
        P2, vals2 = _projector(X + np.outer(a, a), k)
        gap_ratio = max(gap_ratio, abs((vals2[k - 1] - vals2[k]) - gap) / beta2)
        move = np.linalg.norm(P - P2)
        proj_ratio = max(proj_ratio, move / methods.projector_sensitivity(beta2, gap))
        naive = max(naive, move / (beta2 / gap))  # mutant: sensitivity beta^2 / gap
    assert gap_ratio <= 1.0 + 1e-9 and proj_ratio <= 1.0
    assert naive > 1.0


@pytest.mark.parametrize("mutant", [None, 0.8])
def test_dp_gauss_2_gap_audit(mutant, monkeypatch):
    """The eigengap's discrete Laplace (laplace_release) at eps = 1, sensitivity 1, neighbours
    one sensitivity apart; mutant: scale x 0.8."""
    if mutant:
        real = noise.as_scale
        monkeypatch.setattr(noise, "as_scale", lambda x, *a, **k: real(Fraction(x) * 4 / 5))
    src = noise.RandomSource.seeded(17)
    a, _ = methods.laplace_release(np.full(40_000, 3.0), 1.0, Fraction(1), src.spawn("a"))
    b, _ = methods.laplace_release(np.full(40_000, 4.0), 1.0, Fraction(1), src.spawn("b"))
    result = audit(a, b)
    if mutant:
        result.assert_exceeds(1.0)
    else:
        result.assert_within(1.0)


def test_dp_gauss_2_ptr_floor_fails_at_most_delta_p():
    """P[ptr_floor > gap - shift] <= delta_p (here 0.05, to be measurable; the one-sided tail
    gives about delta_p / 2); a mutant that forgets the neighbour's shift fails about
    e delta_p / 2 = 0.068 of the time."""
    delta_p, gap, shift, runs = 0.05, 10.0, 1.0, 40_000
    src = noise.RandomSource.seeded(19)
    noisy, desc = methods.laplace_release(np.full(runs, gap), shift, Fraction(1), src)
    fails = sum(methods.ptr_floor(float(v), desc, delta_p, shift) > gap - shift for v in noisy)
    assert cp_lower(fails, runs, 0.05) <= delta_p
    fails_m = sum(methods.ptr_floor(float(v), desc, delta_p, 0.0) > gap - shift for v in noisy)
    assert cp_lower(fails_m, runs, 0.05) > delta_p


# -- the factor grid's rounding corner (privacy review F4) --------------------------------------


def _corner_neighbours(case: str, n: int = 100) -> tuple[Stream, Stream]:
    """Neighbours D (n rows) and D plus one more, every row at the corner where rounding to the
    factor grid h = 2^-13 lifts it most: entries 1/2 + 0.55 h (4096.55 h, rounded up to 4097 h).
    "box": d = 4, the CLI's stream (centre 1/2 - 0.55 h, box = max(centre, 1 - centre), beta^2 =
    sum box^2); "factor": d = 2 with a shared factor F of the same entries, beta^2 = Tr A."""
    h = 2.0**-13
    if case == "box":
        centre = np.full(4, 0.5 - 0.55 * h)
        box = np.maximum(centre, 1 - centre)
        pair = [
            Stream.of(np.ones((m, 4)) - centre, float((box**2).sum()), box=box) for m in (n, n + 1)
        ]
    else:
        v = np.full((2, 1), 0.5 + 0.55 * h)
        beta2 = float((v * v).sum() * 2)
        pair = [Stream.of(np.tile(v.T, (m, 1)), beta2, v) for m in (n, n + 1)]
    assert methods._factor_grid(pair[0]) == h
    return pair[0], pair[1]


@pytest.mark.parametrize("case", ["box", "factor"])
def test_rounded_corner_row_is_covered_by_gauss_2_and_power(case):
    """dp-gauss-2 and dp-power release from the exact sum of rows rounded to the factor grid, so
    the added summand A is the rounded row's: Tr A = ||A||_F = ||A y|| (y along the row) =
    1.00022 beta^2 at this corner. The gap (which moves by exactly Tr A here), the PTR test's
    shift, the projector's Davis-Kahan bound and every power step must be calibrated to at least
    that; the mutant calibration beta^2 (before the fix) is exceeded."""
    lo, hi = _corner_neighbours(case)
    d = lo.d
    A = methods._exact_sum(hi) - methods._exact_sum(lo)
    tr, fro = float(np.trace(A)), float(np.linalg.norm(A))
    y = A[:, :1] / np.linalg.norm(A[:, 0])
    ay = float(np.linalg.norm(A @ y))
    assert tr / lo.beta2 == pytest.approx(1.000220, abs=1e-6)  # mutant beta^2 is exceeded
    assert fro == pytest.approx(tr, rel=1e-12) and ay == pytest.approx(tr, rel=1e-12)
    assert tr <= methods.trace_bound(lo)

    def gap(s):
        vals = np.linalg.eigvalsh(methods._exact_sum(s))[::-1]
        return vals[0] - vals[1]

    src = noise.RandomSource.seeded(23)
    res = methods.dp_gauss_2(lo, 1, Fraction(1), 1e-6, RHO, "add-remove", src.spawn("g2"))
    gdesc, pdesc = res.steps
    assert abs(gap(hi) - gap(lo)) == pytest.approx(tr, rel=1e-9)
    assert abs(gap(hi) - gap(lo)) <= gdesc["l1_sensitivity"]
    info = res.info
    shift = info["noisy_gap"] - gdesc["scale"] * math.log(1e6) - gdesc["grid"] - info["ptr_floor"]
    assert info["ptr_passed"] and shift >= tr - 1e-9  # the PTR floor allows for the neighbour
    declared = pdesc["l2_sensitivity"] - math.sqrt(d * (d + 1) / 2) * pdesc["grid"]
    assert declared >= methods.projector_sensitivity(fro, info["ptr_floor"])
    power = methods.dp_power(lo, 1, RHO, "add-remove", src.spawn("power"))
    for step in power.steps:
        assert step["l2_sensitivity"] - math.sqrt(d) * step["grid"] >= ay
