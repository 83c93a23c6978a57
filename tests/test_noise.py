"""Exactness, reproducibility and containment tests for dpsynth_cli.privacy.noise.

Statistical tests use fixed seeds (they cannot flake); mutants and exact counts show they can fail.
"""

from __future__ import annotations

import copy
import math
import re
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from dpsynth_cli.privacy import noise
from dpsynth_cli.privacy.noise import (
    RandomSource,
    as_scale,
    bernoulli_exp,
    discrete_laplace,
    discrete_laplace_mixed,
    uniform_below,
)

N_DRAWS = 200_000


def dlap_pmf(z: np.ndarray, scale: Fraction) -> np.ndarray:
    """Exact discrete Laplace pmf f(z) = (1-p)/(1+p) p^|z|, p = exp(-1/scale)."""
    p = math.exp(-1 / float(scale))
    return (1 - p) / (1 + p) * p ** np.abs(z)


def dlap_pvalue(draws: np.ndarray, scale: Fraction, min_expected: float = 20.0) -> float:
    """Chi-square goodness of fit against the exact pmf; |z| > K pooled into two tail bins."""
    n = draws.size
    p = math.exp(-1 / float(scale))
    c0 = (1 - p) / (1 + p)
    k = 0
    while n * c0 * p ** (k + 1) >= min_expected:
        k += 1
    support = np.arange(-k, k + 1)
    tail = c0 * p ** (k + 1) / (1 - p)  # P(Z > k) = P(Z < -k)
    expected = n * np.concatenate(([tail], dlap_pmf(support, scale), [tail]))
    observed = np.bincount(np.clip(draws, -k - 1, k + 1) + k + 1, minlength=2 * k + 3)
    return float(stats.chisquare(observed, expected * (n / expected.sum())).pvalue)


SCALES = [Fraction(1, 2), Fraction(1), as_scale(3.7), Fraction(100)]


@pytest.mark.parametrize("scale", SCALES, ids=str)
def test_discrete_laplace_matches_exact_pmf(scale: Fraction) -> None:
    draws = discrete_laplace(RandomSource.seeded(101).spawn(f"chi2:{scale}"), scale, N_DRAWS)
    assert draws.dtype == np.int64 and draws.shape == (N_DRAWS,)
    assert dlap_pvalue(draws, scale) > 1e-4


@pytest.mark.parametrize("scale", [Fraction(1), Fraction(100)], ids=str)
def test_goodness_of_fit_rejects_10_percent_less_noise(scale: Fraction) -> None:
    """The chi-square above has power: a 10% under-noised sampler fails it."""
    mutant = scale * Fraction(9, 10)
    draws = discrete_laplace(RandomSource.seeded(102).spawn("mutant"), mutant, N_DRAWS)
    assert dlap_pvalue(draws, scale) < 1e-4


def test_secure_source_moments() -> None:
    scale = as_scale(3.7)
    draws = discrete_laplace(RandomSource.secure(), scale, N_DRAWS).astype(np.float64)
    z = np.arange(-4000, 4001)
    f = dlap_pmf(z, scale)
    p = math.exp(-1 / float(scale))
    var = 2 * p / (1 - p) ** 2
    assert math.isclose(float(f @ z**2), var, rel_tol=1e-9)
    fourth = float(f @ z.astype(np.float64) ** 4)
    se_mean = math.sqrt(var / draws.size)
    se_var = math.sqrt((fourth - var**2) / draws.size)
    assert abs(draws.mean()) < 6 * se_mean
    assert abs(np.mean(draws**2) - var) < 6 * se_var


def test_discrete_laplace_one_coin_path_and_large_numerators() -> None:
    """t >= 2**28 decides one CKS coin per word; t near 2**56 is still exact."""
    src = RandomSource.seeded(103)
    for scale in (as_scale(1234.567), Fraction(2**55 - 1, 2**40)):
        draws = discrete_laplace(src.spawn(str(scale)), scale, 100_000)
        assert dlap_pvalue(draws, scale) > 1e-4


def test_uniform_below_small_m_chisquare() -> None:
    src = RandomSource.seeded(201)
    for m in (3, 7, 1024, 1025, 65521):
        n = 60 * m if m > 100 else 30_000
        u = uniform_below(src, np.full(n, m))
        assert u.dtype == np.int64 and u.min() >= 0 and u.max() < m
        assert stats.chisquare(np.bincount(u, minlength=m)).pvalue > 1e-4, m
    assert not uniform_below(src, np.ones(100, dtype=np.int64)).any()


def test_uniform_below_large_m_high_and_low_bits() -> None:
    m = 2**40 + 3
    u = uniform_below(RandomSource.seeded(202), np.full(100_000, m))
    assert u.min() >= 0 and u.max() < m
    high = u * 16 // m  # 16 (almost exactly) equiprobable ranges of the high bits
    assert stats.chisquare(np.bincount(high, minlength=16)).pvalue > 1e-4
    low = np.stack([(u >> b) & 1 for b in range(8)])  # the low bits are fair coins
    assert np.all(np.abs(low.mean(axis=1) - 0.5) < 5 * math.sqrt(0.25 / u.size))


def test_uniform_below_per_element_ranges() -> None:
    ms = np.tile(np.array([1, 3, 1000, 2**40 + 3, 2**62 - 1], dtype=np.int64), 20_000)
    u = uniform_below(RandomSource.seeded(203), ms.reshape(-1, 5))
    assert u.shape == (20_000, 5)
    assert np.all((u >= 0) & (u < ms.reshape(-1, 5)))
    for j, m in enumerate([3, 1000, 2**40 + 3, 2**62 - 1], start=1):
        mean, sd = (m - 1) / 2, math.sqrt((m * m - 1) / 12 / 20_000)
        assert abs(u[:, j].astype(np.float64).mean() - mean) < 6 * sd
    with pytest.raises(ValueError):
        uniform_below(RandomSource.seeded(1), np.array([0]))
    with pytest.raises(ValueError):
        uniform_below(RandomSource.seeded(1), np.array([2**62]))


@pytest.mark.parametrize(("num", "den"), [(0, 1), (3, 10), (1, 1), (5, 2), (7, 3)])
def test_bernoulli_exp_frequency(num: int, den: int) -> None:
    n = 200_000
    hits = bernoulli_exp(RandomSource.seeded(301).spawn(f"{num}/{den}"), np.full(n, num), den)
    p = math.exp(-num / den)
    assert hits.dtype == bool and hits.shape == (n,)
    if num == 0:
        assert hits.all()
    else:
        assert abs(hits.mean() - p) < 5 * math.sqrt(p * (1 - p) / n)


def test_bernoulli_exp_elementwise_parameters() -> None:
    num = np.tile([0, 3, 1, 5, 7, 0, 40], 50_000)
    den = np.tile([1, 10, 1, 2, 3, 5, 1], 50_000)
    hits = bernoulli_exp(RandomSource.seeded(302), num.reshape(-1, 7), den.reshape(-1, 7))
    for j in range(7):
        p = math.exp(-num[j] / den[j])
        assert abs(hits[:, j].mean() - p) < 5 * math.sqrt(max(p * (1 - p), 1e-12) / 50_000) + 1e-9
    with pytest.raises(ValueError):
        bernoulli_exp(RandomSource.seeded(1), -1, 2)
    with pytest.raises(ValueError):
        bernoulli_exp(RandomSource.seeded(1), 1, 0)


def test_exp1_table_is_exact() -> None:
    """One 16-bit word decides a Bernoulli(exp(-1)) trial with exactly the CKS probabilities."""
    codes = np.bincount(noise._EXP1, minlength=4)
    n = 13 * math.factorial(7)  # the accepted words, 0..n-1
    fail = sum(n * (k - 1) // math.factorial(k) for k in (2, 4, 6))  # P(final k) = (k-1)/k!
    succeed = sum(n * (k - 1) // math.factorial(k) for k in (3, 5, 7))
    assert codes.tolist() == [fail, succeed, n // math.factorial(7), 2**16 - n]


def test_mixed_keeps_order_sizes_and_scales() -> None:
    scales = [Fraction(1), Fraction(1000), Fraction(7), as_scale(3.7), Fraction(1, 2)]
    sizes = [40_000, 50_000, 0, 60_000, 30_000]
    draws = discrete_laplace_mixed(RandomSource.seeded(401), scales, sizes)
    assert draws.shape == (sum(sizes),) and draws.dtype == np.int64
    bounds = np.cumsum([0, *sizes])
    for scale, lo, hi in zip(scales, bounds[:-1], bounds[1:], strict=True):
        if hi == lo:
            continue
        block = draws[lo:hi].astype(np.float64)
        p = math.exp(-1 / float(scale))
        var = 2 * p / (1 - p) ** 2
        assert abs(block.var() / var - 1) < 0.05, scale
    assert discrete_laplace_mixed(RandomSource.seeded(1), [Fraction(3)], [0]).shape == (0,)


def test_mixed_interleaved_small_blocks() -> None:
    """Blocks smaller than a batch (several scales per batch) keep their own scale."""
    scales = [Fraction(1), Fraction(10_000)] * 40
    draws = discrete_laplace_mixed(RandomSource.seeded(402), scales, [5_000] * 80)
    draws = draws.reshape(40, 2, -1)
    small, large = np.abs(draws[:, 0]).max(axis=1), np.abs(draws[:, 1]).mean(axis=1)
    assert small.max() < 30 and large.min() > 8_000
    assert dlap_pvalue(draws[:, 0].ravel(), Fraction(1)) > 1e-4
    assert dlap_pvalue(draws[:, 1].ravel(), Fraction(10_000)) > 1e-4


def test_seeded_reproducible_and_names_independent() -> None:
    def draw(seed: int, name: str) -> np.ndarray:
        return discrete_laplace(RandomSource.seeded(seed).spawn(name), Fraction(10), 1000)

    assert np.array_equal(draw(7, "pmm"), draw(7, "pmm"))
    assert not np.array_equal(draw(7, "pmm"), draw(7, "count"))
    assert not np.array_equal(draw(7, "pmm"), draw(8, "pmm"))
    # The child depends on the seed and the name only, not on what the parent drew.
    parent = RandomSource.seeded(7)
    parent.words(1000)
    assert np.array_equal(discrete_laplace(parent.spawn("pmm"), Fraction(10), 1000), draw(7, "pmm"))
    # Names are not confused with numpy's integer spawn keys or with nested paths.
    assert not np.array_equal(
        RandomSource.seeded(7).spawn("a").spawn("b").words(4),
        RandomSource.seeded(7).spawn("b").spawn("a").words(4),
    )


def test_spawn_is_stable_across_processes() -> None:
    """Hard-coded once: a change here silently changes every seeded demo and test."""
    child = RandomSource.seeded(2024).spawn("test")
    assert discrete_laplace(child, Fraction(10), 8).tolist() == [4, -2, 39, 6, -3, -5, 10, 8]
    words = RandomSource.seeded(2024).spawn("test").words(2).tolist()
    assert words == [11083062928196773193, 14775210277380707756]
    nested = RandomSource.seeded(2024).spawn("a").spawn("b")
    assert discrete_laplace(nested, Fraction(1), 8).tolist() == [1, 2, 0, 0, 1, 1, 1, -1]
    u = uniform_below(RandomSource.seeded(5), [3, 10, 2**40 + 3])
    assert u.tolist() == [2, 8, 566606480228]
    post = RandomSource.seeded(1).numpy_generator()
    assert post.integers(0, 1000, 3).tolist() == [695, 990, 661]


def test_seeded_flag_and_spawn_guards() -> None:
    seeded, secure = RandomSource.seeded(3), RandomSource.secure()
    assert seeded.seeded is True and secure.seeded is False
    assert seeded.spawn("x").seeded is True and secure.spawn("x").seeded is False
    with pytest.raises(ValueError):
        seeded.spawn("x")  # two mechanisms must never share a stream
    with pytest.raises(ValueError):
        RandomSource.seeded(-1)
    assert isinstance(secure.numpy_generator(), np.random.Generator)
    assert not np.array_equal(secure.words(4), RandomSource.secure().words(4))


def test_secure_buffer_not_replayed_after_fork() -> None:
    src = RandomSource.secure()
    src.words(1)  # fills the buffer
    child = copy.deepcopy(src)  # what fork() would copy
    child._pid = -1  # pretend we are in another process
    assert not np.array_equal(child.words(8), src.words(8))


def test_words_and_bits() -> None:
    src = RandomSource.seeded(11)
    w = src.words(20_000)
    assert w.dtype == np.uint64 and w.shape == (20_000,)
    bits = np.unpackbits(w.view(np.uint8))
    assert abs(bits.mean() - 0.5) < 5 * math.sqrt(0.25 / bits.size)
    assert (w >> np.uint64(63)).any() and (w < np.uint64(2**32)).sum() < 5
    coins = src.bits(100_001)
    assert coins.dtype == bool and coins.shape == (100_001,)
    assert abs(coins.mean() - 0.5) < 5 * math.sqrt(0.25 / coins.size)


def test_as_scale_rounds_up_on_dyadic_grid() -> None:
    post = RandomSource.seeded(501).numpy_generator()
    for x in [*post.uniform(1e-3, 1e4, 200).tolist(), 3.7, 0.1, 1 / 3, 1e6 + 0.1]:
        s = as_scale(x)
        assert s >= Fraction(x)  # Fraction(float) is exact: never rounded down
        assert s - Fraction(x) < Fraction(1, 2**20)
        assert s.denominator & (s.denominator - 1) == 0 and s.denominator <= 2**20
    assert as_scale(0.5) == Fraction(1, 2) and as_scale(3.0) == 3
    assert as_scale(Fraction(1, 3)) == Fraction(349526, 2**20)  # ceil(2**20 / 3)
    assert as_scale(0.3, max_denominator_bits=4) == Fraction(5, 16)
    big = as_scale(3e15 + 0.5)  # grid coarsened so t < 2**56, still rounded up
    assert big >= Fraction(3e15 + 0.5) and big.numerator < 2**56
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError):
            as_scale(bad)
    with pytest.raises(ValueError):
        as_scale(1e20)


def test_discrete_laplace_validates_scale() -> None:
    src = RandomSource.seeded(1)
    with pytest.raises(TypeError):
        discrete_laplace(src, 2.5, 3)  # type: ignore[arg-type]
    for bad in (Fraction(0), Fraction(-1, 2), Fraction(2**56), Fraction(1, 2**56)):
        with pytest.raises(ValueError):
            discrete_laplace(src, bad, 3)
    assert discrete_laplace(src, Fraction(5), 0).shape == (0,)
    assert discrete_laplace(src, 3, 4).shape == (4,)  # ints are exact too


# -- containment: noise.py is the only source of randomness -------------------------------------

PACKAGE = Path(noise.__file__).resolve().parents[1]
_NP_RANDOM = re.compile(r"\b(?:np|numpy)\.random\.(\w+)(\s*\()?")
_FORBIDDEN = re.compile(
    r"^\s*(?:import\s+(?:random|secrets)\b|from\s+(?:random|secrets|numpy\.random)\s+import\b"
    r"|import\s+numpy\.random\b)|\bos\.urandom\b|\bdefault_rng\b",
    re.MULTILINE,
)


def randomness_violations(source: str, is_noise_module: bool) -> list[str]:
    """Uses of random bits outside noise.py (type annotations np.random.Generator are fine)."""
    found = []
    for match in _NP_RANDOM.finditer(source):
        name, called = match.group(1), match.group(2) is not None
        if is_noise_module and name in {"Generator", "PCG64", "SeedSequence"}:
            continue
        if not is_noise_module and name == "Generator" and not called:
            continue
        found.append(match.group(0))
    if not is_noise_module:
        found += [m.group(0).strip() for m in _FORBIDDEN.finditer(source)]
    return found


def test_randomness_checker_catches_violations() -> None:
    assert randomness_violations("x = np.random.rand(3)", False)
    assert randomness_violations("np.random.seed(0)", True)
    assert randomness_violations("rng = np.random.default_rng(1)", False)
    assert randomness_violations("rng = np.random.Generator(np.random.PCG64(1))", False)
    assert randomness_violations("import random\n", False)
    assert randomness_violations("b = os.urandom(8)", False)
    assert not randomness_violations("def f(rng: np.random.Generator) -> None: ...", False)


def test_no_randomness_outside_noise_module() -> None:
    files = sorted(PACKAGE.rglob("*.py"))
    assert PACKAGE / "privacy" / "noise.py" in files
    bad = {}
    for path in files:
        is_noise = path == PACKAGE / "privacy" / "noise.py"
        hits = randomness_violations(path.read_text(encoding="utf-8"), is_noise)
        if hits:
            bad[str(path.relative_to(PACKAGE))] = hits
    assert not bad, f"random bits must come from privacy/noise.py only: {bad}"
