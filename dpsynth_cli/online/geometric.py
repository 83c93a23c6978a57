"""Exact first-firing times of repeated noisy threshold tests (event-driven Algorithm 10).

Algorithm 10 tests ``N + lambda' > T~`` at every time step with fresh ``lambda' ~ Lap_Z(b)``.
While the segment count N and the threshold T~ stay fixed the tests are i.i.d. Bernoulli(q) with
q = P(Z > g), g = T~ - N, the exact discrete-Laplace tail (P(z) ∝ p^|z|, p = e^(-1/b)):

    q = p^(g+1) / (1+p)          for g >= 0,
    q = 1 - p^(-g) / (1+p)       for g <= -1.

So the first firing among the next m tests is W = min{k >= 1 : V < 1 - (1-q)^k} for one uniform
V, i.e. W = floor(x) + 1 with x = -ln(1-V) / A and A = -ln(1-q) (W > m means "no firing"). This
module samples W *exactly* (the same law as m literal tests) by inversion with certified
arithmetic: V is revealed 64 bits at a time and W is returned only when every V in the revealed
interval gives the same W.

- Fast path (float64, vectorised): x is bracketed from both ends of V's 64-bit interval and
  widened by a relative margin of 1e-9, ten million times the error of the libm functions used
  (log, log1p, exp: below 1 ulp in glibc). Decides all but about 1e-9 of the draws.
- Slow path (``decimal``, whose ln and exp are correctly rounded): another 64 bits of V and 20
  more digits per round, with a margin of 10^-(digits - 10), until W is decided.

No float shortcut like ``floor(log(u)/log(1-q))`` (PRIVACY.md, "Integer noise"): the answer is
returned only when it is certain for the whole interval of V. All bits come from the one
``RandomSource`` (``noise.py``).
"""

from __future__ import annotations

import decimal
import math
from fractions import Fraction

import numpy as np

from dpsynth_cli.privacy.noise import RandomSource

__all__ = ["first_fire", "firing_probability", "NONE"]

NONE = 0  # "no test fires within the horizon"
_MARGIN = 1e-9
_TWO64 = float(2**64)
_HALF = np.uint64(1 << 63)


def firing_probability(gap: int, scale: Fraction) -> float:
    """q = P(Z > gap) for Z discrete Laplace of `scale` (float; for tests and a-priori sums)."""
    p = math.exp(-1.0 / float(scale))
    if gap >= 0:
        return math.exp(-(gap + 1) / float(scale)) / (1.0 + p)
    return 1.0 - math.exp(gap / float(scale)) / (1.0 + p)


def _log_rate(gap: np.ndarray, scale: Fraction) -> np.ndarray:
    """ln A, A = -ln(1 - q(gap)), in float64 (absolute error about 1e-13 for |ln A| < 1000)."""
    inv_b = scale.denominator / scale.numerator
    lp = math.log1p(math.exp(-inv_b))  # ln(1 + p)
    g = gap.astype(np.float64)
    out = np.empty(g.shape)
    neg = gap < 0
    out[neg] = np.log(-g[neg] * inv_b + lp)  # A = -ln(p^-g / (1+p)) exactly
    pos = ~neg
    ln_h = -(g[pos] + 1.0) * inv_b - lp  # h = q = p^(g+1)/(1+p)
    h = np.exp(ln_h)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(h > 1e-300, -np.log1p(-h) / np.where(h > 0, h, 1.0), 1.0)
    out[pos] = ln_h + np.log(ratio)
    return out


def _neg_log1m(w: np.ndarray, plus_one: bool) -> np.ndarray:
    """-ln(1 - V) for V = (w + plus_one) / 2^64, accurate to a few ulps (inf for V = 1)."""
    v = w.astype(np.float64)
    if plus_one:
        v = v + 1.0
    out = np.empty(w.shape)
    low = w < _HALF
    out[low] = -np.log1p(-v[low] / _TWO64)
    rest = (np.uint64(0) - w[~low]).astype(np.float64)  # 2^64 - w, exact in uint64
    if plus_one:
        rest = rest - 1.0
    with np.errstate(divide="ignore"):
        out[~low] = math.log(_TWO64) - np.log(rest)
    return out


def first_fire(
    source: RandomSource, gap: np.ndarray, scale: Fraction, horizon: np.ndarray
) -> np.ndarray:
    """For each entry, the index W in 1..horizon of the first of `horizon` i.i.d. tests
    {Z > gap} (Z discrete Laplace of `scale`) that fires, or NONE (0) when none does.

    Exactly the law of running the tests one by one (module docstring). `gap` and `horizon` are
    int64 arrays of one shape; horizons of 0 give NONE without using random bits.
    """
    gap = np.asarray(gap, dtype=np.int64)
    horizon = np.broadcast_to(np.asarray(horizon, dtype=np.int64), gap.shape)
    out = np.zeros(gap.shape, dtype=np.int64)
    live = np.flatnonzero(horizon > 0)
    if live.size == 0:
        return out
    w = source.words(live.size).copy()
    g, m_int = gap[live], horizon[live]
    # Screen: -ln(1-V) >= V >= m A (with A <= h/(1-h) for g >= 0) means no test fires. Most
    # draws (regions far below their threshold) end here, without logarithms.
    inv_b = scale.denominator / scale.numerator
    lp = math.log1p(math.exp(-inv_b))
    with np.errstate(over="ignore", under="ignore"):
        h = np.exp(-(np.maximum(g, 0).astype(np.float64) + 1.0) * inv_b - lp)
        a_up = h / (1.0 - h)
        v_lo = w.astype(np.float64) * (1.0 / _TWO64)
        quiet = (g >= 0) & (v_lo >= m_int.astype(np.float64) * a_up * (1.0 + _MARGIN)) & (w > 0)
    rest = np.flatnonzero(~quiet)
    if rest.size == 0:
        return out
    live, w, g, m_int = live[rest], w[rest], g[rest], m_int[rest]
    ln_a = _log_rate(g, scale)
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        x_lo = np.exp(np.log(_neg_log1m(w, False)) - ln_a) * (1.0 - _MARGIN)
        x_hi = np.exp(np.log(_neg_log1m(w, True)) - ln_a) * (1.0 + _MARGIN)
    m = m_int.astype(np.float64)
    none = x_lo >= m
    k_lo, k_hi = np.floor(x_lo), np.floor(x_hi)
    decided = none | ((k_lo == k_hi) & np.isfinite(x_hi))
    fire = decided & ~none
    out[live[fire]] = k_lo[fire].astype(np.int64) + 1
    for i in np.flatnonzero(~decided):
        out[live[i]] = _slow(source, int(w[i]), int(g[i]), scale, int(m_int[i]))
    return out


# -- slow path: correctly rounded decimal arithmetic ---------------------------------------------


def _series_neg_log1m(z: decimal.Decimal) -> decimal.Decimal:
    """-ln(1 - z) for 0 <= z < 1 in the current context, accurate also for tiny z."""
    if z == 0:
        return decimal.Decimal(0)
    if z < decimal.Decimal("1e-8"):
        total, term, k = decimal.Decimal(0), z, 1
        while True:
            add = term / k
            if add < total * decimal.Decimal(10) ** (-decimal.getcontext().prec - 2):
                return total + add
            total += add
            term *= z
            k += 1
    return -((1 - z).ln())


def _rate(gap: int, scale: Fraction) -> decimal.Decimal:
    D = decimal.Decimal
    inv_b = D(scale.denominator) / D(scale.numerator)
    lp = (1 + (-inv_b).exp()).ln()
    if gap < 0:
        return D(-gap) * inv_b + lp
    h = (-(D(gap) + 1) * inv_b - lp).exp()
    return _series_neg_log1m(h)


def _slow(source: RandomSource, w: int, gap: int, scale: Fraction, horizon: int) -> int:
    """Refine V by 64 bits per round until W is the same for every V in its interval."""
    bits = 64
    digits = 60
    while True:
        w = (w << 64) | int(source.words(1)[0])
        bits += 64
        digits += 20
        with decimal.localcontext() as ctx:
            ctx.prec = digits
            D = decimal.Decimal
            a = _rate(gap, scale)
            scale_v = D(2) ** bits
            margin = D(10) ** (-(digits - 10))
            x_lo = _series_neg_log1m(D(w) / scale_v) / a * (1 - margin)
            v_hi = D(w + 1) / scale_v
            if v_hi >= 1:
                continue  # V's interval reaches 1: x unbounded above; read more bits
            x_hi = _series_neg_log1m(v_hi) / a * (1 + margin)
            if x_lo >= horizon:
                return NONE
            k_lo, k_hi = (
                int(x_lo.to_integral_value(decimal.ROUND_FLOOR)),
                int(x_hi.to_integral_value(decimal.ROUND_FLOOR)),
            )
            if k_lo == k_hi:
                return k_lo + 1
