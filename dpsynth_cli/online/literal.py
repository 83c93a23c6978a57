"""Algorithm 11 with Algorithm 10 inside, step by step: the test oracle for `counters.py`.

Literally as printed (with the conventions `counters.py` documents): at every time step every
counter draws fresh test noise lambda'_t ~ Lap_Z(4/eps_r) and compares N + lambda'_t with its
threshold T~ = T0 + lambda, closing segments (and testing again at the same step) while the
test fires. Vectorised over independent runs only; cost Theta(runs x steps). Never used for a
release: it exists so the tests can show that the event-driven bank has the same law.
"""

from __future__ import annotations

import numpy as np

from dpsynth_cli.online.params import LevelParams
from dpsynth_cli.privacy.noise import RandomSource, discrete_laplace


def literal_counter(
    x: np.ndarray,
    levels: list[tuple[int, LevelParams]],
    runs: int,
    source: RandomSource,
    s_tilde0: int = 0,
) -> np.ndarray:
    """Outputs (runs, T) of Algorithm 11 on the Boolean stream x (x[t-1] at time t = 1..T).

    `levels`: (t_r, params) of consecutive levels, the first starting the counter; outputs before
    it are s_tilde0 (nothing counted yet).
    """
    T = x.size
    out = np.full((runs, T), s_tilde0, dtype=np.int64)
    s_tilde = np.full(runs, s_tilde0, dtype=np.int64)
    for t_r, p in levels:
        t_next = t_r + p.horizon
        seg = np.zeros(runs, dtype=np.int64)
        total = np.zeros(runs, dtype=np.int64)
        k = np.zeros(runs, dtype=np.int64)
        alpha = np.zeros((runs, p.bm_bits), dtype=np.int64)
        hat = np.zeros((runs, p.bm_bits), dtype=np.int64)
        thresh = p.threshold + discrete_laplace(source, p.svt_scale, runs)
        for t in range(t_r, min(t_next, T + 1)):
            pend = np.flatnonzero(k < p.segment_cap)
            while pend.size:
                lam = discrete_laplace(source, p.svt_scale, pend.size)
                fired = pend[seg[pend] + lam > thresh[pend]]
                if fired.size:
                    _bm_step(fired, seg, k, alpha, hat, p, source)
                    seg[fired] = 0
                    thresh[fired] = p.threshold + discrete_laplace(source, p.svt_scale, fired.size)
                pend = fired[k[fired] < p.segment_cap]
            seg += int(x[t - 1])
            total += int(x[t - 1])
            out[:, t - 1] = s_tilde + hat.sum(axis=1)
        if t_next - 1 <= T:
            s_tilde = s_tilde + total + discrete_laplace(source, p.total_scale, runs)
    return out


def _bm_step(idx, seg, k, alpha, hat, p: LevelParams, source: RandomSource) -> None:
    """Binary Mechanism (Chan, Shi & Song 2011): the k-th input is the closed segment's count."""
    k[idx] += 1
    low = np.array([(int(v) & -int(v)).bit_length() - 1 for v in k[idx]], dtype=np.int64)
    below = np.arange(p.bm_bits)[None, :] < low[:, None]
    a, h = alpha[idx], hat[idx]
    total = np.where(below, a, 0).sum(axis=1) + seg[idx]
    a[below] = 0
    h[below] = 0
    rows = np.arange(idx.size)
    a[rows, low] = total
    h[rows, low] = total + discrete_laplace(source, p.bm_scale, idx.size)
    alpha[idx], hat[idx] = a, h
