"""The only source of randomness in dpsynth, and exact integer noise samplers.

Why this module exists (see docs PRIVACY.md, "Randomness" and "Integer noise"):

* Every random bit comes from one place. The default is the operating system's CSPRNG
  (``os.urandom``, read in bulk). ``RandomSource.seeded`` (the CLI's ``--seed``) is for tests and
  demos only; its output is reproducible and therefore not for release.
* Every mechanism draws from its own child stream (``RandomSource.spawn``): a shared stream would
  correlate noise across mechanisms and break the privacy accounting.
* Noise is sampled *exactly*: only random bits, integer comparisons and exact rational scales,
  following Canonne, Kamath & Steinke (2020), "The Discrete Gaussian for Differential Privacy"
  (CKS). Floating point samplers (e.g. ``floor(log(u)/log(p))``) truncate tails and mis-round
  probabilities, so they give at best an approximate guarantee (Mironov 2012).
* Scales are exact ``Fraction``s t/s. Epsilons are rounded *down* (``ledger.round_down``) and noise
  scales rounded *up* (``as_scale``): either way the noise is at least what the accounting assumes.
* All samplers are vectorised: every rejection loop runs over the still-pending entries with boolean
  masks, so the number of Python iterations is the number of rejection rounds, not of draws. Batches
  (chunks of ``_CHUNK`` draws) depend only on the public ``size``, never on data.
"""

from __future__ import annotations

import hashlib
import math
import os
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import numpy as np

__all__ = [
    "RandomSource",
    "as_scale",
    "bernoulli_exp",
    "discrete_laplace",
    "discrete_laplace_mixed",
    "permute_and_flip",
    "uniform_below",
]

_REFILL_BYTES = 1 << 20  # bytes read from the OS (or PCG64) per refill; >= 64 KiB
_CHUNK = 1 << 17  # draws per vectorised batch of the discrete Laplace sampler (public constant)
_T_LIMIT = 1 << 56  # numerators t must stay below this so t*k and U + t*V fit in 63 bits
_M_LIMIT = 1 << 62  # uniform_below accepts 1 <= m < 2**62


class _SeededAttr:
    """``RandomSource.seeded(seed)`` builds a seeded source; ``source.seeded`` is a bool.

    One name for both keeps the report's ``seeded: true`` flag and the constructor in sync.
    """

    def __get__(self, obj: RandomSource | None, objtype: type | None = None) -> Any:
        if obj is None:
            return (objtype or RandomSource)._from_seed
        return obj._seed is not None


class RandomSource:
    """A stream of uniformly random 64-bit words (bytes, internally).

    Build with ``RandomSource.secure()`` (default; OS CSPRNG) or ``RandomSource.seeded(seed)``
    (PCG64, reproducible, not for release). Give each mechanism its own ``spawn(name)``.
    Not thread-safe: give each thread its own spawned child.
    """

    seeded = _SeededAttr()

    def __init__(self, _seed: int | None = None, _key: tuple[int, ...] = ()) -> None:
        self._seed = _seed
        self._key = _key
        self._buf = np.empty(0, dtype=np.uint8)
        self._pos = 0
        self._children: set[str] = set()
        self._pid = os.getpid()
        self._bitgen: np.random.PCG64 | None = None
        if _seed is not None:
            seq = np.random.SeedSequence(entropy=_seed, spawn_key=_key)
            self._bitgen = np.random.PCG64(seq)

    # -- construction -------------------------------------------------------------------------
    @classmethod
    def secure(cls) -> RandomSource:
        """Bits from ``os.urandom`` (the default for every real run)."""
        return cls()

    @classmethod
    def _from_seed(cls, seed: int) -> RandomSource:
        """Bits from ``Generator(PCG64(SeedSequence(seed)))``: reproducible, NOT for release."""
        if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
            raise ValueError("seed must be a non-negative integer")
        return cls(_seed=int(seed))

    def spawn(self, name: str) -> RandomSource:
        """An independent child stream for one mechanism or step, identified by ``name``.

        Seeded: derived from the seed and the SHA-256 of the name path (stable across processes,
        unlike ``hash()``), so the same seed and name give the same stream. Secure: a fresh
        secure source. Spawning the same name twice from one source raises ``ValueError``: two
        mechanisms sharing a stream would draw correlated noise.
        """
        if not isinstance(name, str):
            raise TypeError("spawn name must be a str")
        if name in self._children:
            raise ValueError(f"stream {name!r} was already spawned from this source")
        self._children.add(name)
        if self._seed is None:
            return RandomSource()
        digest = hashlib.sha256(name.encode("utf-8")).digest()
        words = tuple(int.from_bytes(digest[i : i + 4], "little") for i in range(0, 32, 4))
        return RandomSource(_seed=self._seed, _key=self._key + words)

    # -- raw bits -----------------------------------------------------------------------------
    def _fresh(self, nbytes: int) -> np.ndarray:
        if self._bitgen is None:
            return np.frombuffer(os.urandom(nbytes), dtype=np.uint8)
        return self._bitgen.random_raw(-(-nbytes // 8)).view(np.uint8)

    def _take(self, nbytes: int, align: int = 1) -> np.ndarray:
        """The next ``nbytes`` bytes of the stream (read-only view), ``align``-aligned."""
        if self._bitgen is None and os.getpid() != self._pid:
            # After fork() the child must not replay the parent's buffered bytes.
            self._buf, self._pos, self._pid = np.empty(0, dtype=np.uint8), 0, os.getpid()
        pos = -(-self._pos // align) * align
        buf = self._buf
        if pos + nbytes > buf.size:
            rest = buf[pos:]
            need = nbytes - rest.size
            fresh = self._fresh(max(_REFILL_BYTES, -(-need // 8) * 8))
            buf = np.concatenate((rest, fresh)) if rest.size else fresh
            self._buf, pos = buf, 0
        self._pos = pos + nbytes
        return buf[pos : pos + nbytes]

    def _uwords(self, k: int, width: int) -> np.ndarray:
        """k unsigned words of ``width`` bytes (2, 4 or 8)."""
        dtype = {2: np.uint16, 4: np.uint32, 8: np.uint64}[width]
        return self._take(k * width, width).view(dtype)

    def words(self, k: int) -> np.ndarray:
        """k uniformly random 64-bit words (uint64, read-only)."""
        if k < 0:
            raise ValueError("k must be >= 0")
        return self._uwords(int(k), 8)

    def bits(self, k: int) -> np.ndarray:
        """k fair coin flips as a bool array (8 per byte, so sign bits cost 1 bit each)."""
        raw = self._take(-(-int(k) // 8))
        return np.unpackbits(raw, count=int(k)).view(bool)

    def numpy_generator(self) -> np.random.Generator:
        """A ``numpy.random.Generator`` for POST-PROCESSING ONLY (placing points, resampling rows).

        Post-processing randomness does not affect the DP guarantee, so a fast non-cryptographic
        PCG64 is fine there, provided it is seeded unpredictably: seeded sources derive it from
        this stream (256 bits), secure sources seed it with 256 bits of ``os.urandom``. NEVER use
        it for noise.
        """
        if self._seed is None:
            entropy = int.from_bytes(os.urandom(32), "little")
        else:
            entropy = [int(w) for w in self.words(4)]
        return np.random.Generator(np.random.PCG64(np.random.SeedSequence(entropy)))

    def __repr__(self) -> str:
        if self._seed is None:
            return "RandomSource.secure()"
        return f"RandomSource.seeded({self._seed}) (spawn depth {len(self._key) // 8})"


# -- exact integer samplers -------------------------------------------------------------------

_U64 = np.uint64


def _sub(x: np.ndarray, sel: np.ndarray) -> np.ndarray:
    """Select pending entries of a per-element parameter; 0-d (shared) parameters pass through."""
    return x if x.ndim == 0 else x[sel]


def _width(bmax: int) -> int:
    """Bytes per word for ranges up to ``bmax``: rejection probability stays below 2**-6.

    Chosen from public bounds (scales, round counters), never from the values drawn.
    """
    if bmax <= 1 << 10:
        return 2
    if bmax <= 1 << 26:
        return 4
    return 8


def _scaled_uniform(
    source: RandomSource, m: np.ndarray, n: int, mmax: int
) -> tuple[np.ndarray, np.ndarray]:
    """Words x and q with x // q exactly uniform in {0..m-1}: rejection sampling, no modulo bias.

    With q = floor((2**w - 1) / m), words x < q*m are kept (each value of x // q has exactly q
    of them) and the others redrawn. Callers compare x < a*q, which is W < a for W = x // q,
    so Bernoulli(a/m) needs no division per draw.
    """
    width = _width(mmax)
    q = _U64((1 << (8 * width)) - 1) // m
    lim = q * m
    x = source._uwords(n, width)
    bad = np.flatnonzero(x >= lim)
    if bad.size:
        x = x.copy()
        while bad.size:
            x[bad] = source._uwords(bad.size, width)
            bad = bad[x[bad] >= _sub(lim, bad)]
    return x, q


def _uniform(source: RandomSource, m: np.ndarray, n: int, mmax: int) -> np.ndarray:
    x, q = _scaled_uniform(source, m, n, mmax)
    return (x // q).astype(_U64, copy=False)


def _bern_ratio(source: RandomSource, a: Any, b: Any, n: int, bmax: int) -> np.ndarray:
    """Exact Bernoulli(a/b): W uniform below b, return W < a (CKS 2020, step 1)."""
    x, q = _scaled_uniform(source, np.asarray(b, _U64), n, bmax)
    return x < np.asarray(a, _U64) * q


def uniform_below(source: RandomSource, m: np.ndarray) -> np.ndarray:
    """Exact uniform integers in {0..m-1}, elementwise (1 <= m < 2**62), by rejection (no bias)."""
    m = np.asarray(m)
    if m.size == 0:
        return np.zeros(m.shape, dtype=np.int64)
    mi = m.astype(np.int64)
    if not np.array_equal(mi, m) or mi.min() < 1 or mi.max() >= _M_LIMIT:
        raise ValueError("uniform_below needs integers 1 <= m < 2**62")
    flat = mi.reshape(-1).astype(_U64)
    out = _uniform(source, flat, flat.size, int(mi.max()))
    return out.astype(np.int64).reshape(m.shape)


def _bern_exp_unit(source: RandomSource, a: np.ndarray, b: np.ndarray, k0: int = 1) -> np.ndarray:
    """Bernoulli(exp(-a/b)) for 0 <= a <= b (CKS 2020, Alg. 1): k=1; while Bern(a/(b k)): k+=1.

    Returns (final k odd). All pending entries share k, which advances once per round. ``k0``
    resumes loops whose coins for k < k0 are already known to have succeeded.
    """
    res = np.empty(a.size, dtype=bool)
    pend = np.arange(a.size)
    bmax = int(b.max()) if b.size else 1
    k = k0
    while pend.size:
        if k >= 127:  # b*k must stay below 2**63 (b < 2**56); P(k >= 127) < 1/126!
            raise RuntimeError("CKS counter exceeded 126 (probability < 1e-200)")
        hit = _bern_ratio(source, a, b * _U64(k), pend.size, bmax * k)
        if not hit.all():
            res[pend[~hit]] = bool(k & 1)
            pend, a, b = pend[hit], a[hit], _sub(b, hit)
        k += 1
    return res


def _exp1_table() -> np.ndarray:
    """Codes for one 16-bit word x deciding a whole Bernoulli(exp(-1)) trial (CKS loop, a = b = 1).

    The loop's final k satisfies P(k > j) = 1/j!. With N = 13 * 7! = 65520 and x uniform below N,
    k > j iff x < N / j! for j <= 7, exactly (N / j! is an integer). Codes: 0 trial failed (k even),
    1 trial succeeded (k odd), 2 k > 7 (resume the loop at k = 8), 3 x >= N (draw again).
    """
    n_acc = 13 * math.factorial(7)
    x = np.arange(1 << 16)
    k = 1 + sum((x < n_acc // math.factorial(j)).astype(np.int64) for j in range(1, 8))
    code = (k & 1).astype(np.uint8)
    code[x < n_acc // math.factorial(7)] = 2
    code[x >= n_acc] = 3
    return code


_EXP1 = _exp1_table()


def _exp1_trials(source: RandomSource, n: int) -> np.ndarray:
    """n exact Bernoulli(exp(-1)) coins, one 16-bit word each (see ``_exp1_table``)."""
    code = _EXP1[source._uwords(n, 2)]
    redo = np.flatnonzero(code == 3)
    while redo.size:
        code[redo] = _EXP1[source._uwords(redo.size, 2)]
        redo = redo[code[redo] == 3]
    tail = np.flatnonzero(code == 2)
    if tail.size:
        one = np.ones(tail.size, dtype=_U64)
        code[tail] = _bern_exp_unit(source, one, one, k0=8)
    return code.view(bool)


def _exp1_count(source: RandomSource, n: int) -> np.ndarray:
    """V = number of Bernoulli(exp(-1)) successes before the first failure (CKS 2020, Alg. 2)."""
    out = np.zeros(n, dtype=_U64)
    pend = np.arange(n)
    rounds = 0
    while pend.size:
        rounds += 1
        if rounds >= 127:  # keeps U + t*V below 2**63; probability e**-126 per draw
            raise RuntimeError("geometric count exceeded 126 (probability < 1e-54)")
        pend = pend[_exp1_trials(source, pend.size)]
        out[pend] += _U64(1)
    return out


def bernoulli_exp(source: RandomSource, num: Any, den: Any) -> np.ndarray:
    """Exact Bernoulli(exp(-num/den)) elementwise, integers only (CKS 2020, Alg. 1).

    For num/den <= 1: k=1; while Bernoulli(num/(den k)): k += 1; return k odd. For num/den > 1:
    floor(num/den) Bernoulli(exp(-1)) trials must all succeed, then Bernoulli(exp(-remainder)).
    """
    num, den = np.broadcast_arrays(np.asarray(num), np.asarray(den))
    shape = num.shape
    num_i, den_i = num.astype(np.int64).reshape(-1), den.astype(np.int64).reshape(-1)
    if not (np.array_equal(num_i, num.reshape(-1)) and np.array_equal(den_i, den.reshape(-1))):
        raise ValueError("bernoulli_exp needs integer num and den")
    if num_i.size == 0:
        return np.zeros(shape, dtype=bool)
    if num_i.min() < 0 or den_i.min() < 1 or den_i.max() >= _T_LIMIT:
        raise ValueError("bernoulli_exp needs num >= 0 and 1 <= den < 2**56")
    whole, rem = np.divmod(num_i, den_i)
    res = np.ones(num_i.size, dtype=bool)
    alive = np.flatnonzero(whole > 0)
    left = whole[alive]
    while alive.size:  # one Bernoulli(exp(-1)) trial per round for entries still needing one
        ok = _exp1_trials(source, alive.size)
        res[alive[~ok]] = False
        left = left - 1
        keep = ok & (left > 0)
        alive, left = alive[keep], left[keep]
    idx = np.flatnonzero(res & (rem > 0))
    if idx.size:
        res[idx] = _bern_exp_unit(source, rem[idx].astype(_U64), den_i[idx].astype(_U64))
    return res.reshape(shape)


def permute_and_flip(
    source: RandomSource, scores: np.ndarray, epsilon: Fraction, sensitivity: int
) -> int:
    """The index of one candidate, chosen by permute-and-flip (McKenna & Sheldon 2020, Alg. 1).

    Integer `scores` of sensitivity `sensitivity` (a neighbouring table moves each by at most
    that much): in a uniformly random order, candidate i is taken with probability
    exp(epsilon (q_i - q_max) / (2 sensitivity)) and the first one taken is returned. It is
    epsilon-DP (their Theorem 1) and never less accurate than the exponential mechanism. Exact:
    the order is a Fisher-Yates shuffle from `uniform_below`, each coin `bernoulli_exp`; a
    candidate with the largest score is always taken, so every coin may be drawn at once.
    """
    q = np.asarray(scores)
    qi = q.astype(np.int64).reshape(-1)
    if qi.size == 0 or not np.array_equal(qi, q.reshape(-1)):
        raise ValueError("permute_and_flip needs a non-empty array of integer scores")
    eps = Fraction(epsilon)
    if eps <= 0 or sensitivity < 1:
        raise ValueError("permute_and_flip needs epsilon > 0 and sensitivity >= 1")
    order = np.arange(qi.size)
    if qi.size > 1:
        swaps = uniform_below(source, np.arange(qi.size, 1, -1))  # j_i uniform in {i..k-1}
        for i, j in enumerate(swaps):
            order[[i, i + j]] = order[[i + j, i]]
    gap = (int(qi.max()) - qi[order]) * eps.numerator
    taken = bernoulli_exp(source, gap, np.full(qi.size, 2 * sensitivity * eps.denominator))
    return int(order[int(np.argmax(taken))])


def _accepted_uniform(source: RandomSource, t: np.ndarray, n: int, tmax: int) -> np.ndarray:
    """CKS 2020 Alg. 2, first loop: U uniform in {0..t-1}, kept with probability exp(-U/t).

    The CKS loop for exp(-U/t) (k=1; while Bernoulli(U/(t k)): k += 1; keep U iff k odd) has
    P(first j coins succeed) = (U/t)**j / j!. For t < 2**28 one word W uniform below 2 t**2 decides
    the first two coins exactly: W >= 2 t U means coin 1 failed (keep U), U**2 <= W < 2 t U means
    coin 2 failed (draw a new U), W < U**2 means both succeeded and the loop resumes at k = 3.
    Larger t decide one coin per word. Rejected entries draw a fresh U in the next round.
    """
    out = np.empty(n, dtype=_U64)
    pend = np.arange(n)
    tp = t
    two = tmax < 1 << 28
    while pend.size:
        m = pend.size
        u = _uniform(source, tp, m, tmax)
        if two:
            x, q = _scaled_uniform(source, 2 * tp * tp, m, 2 * tmax * tmax)
            keep_u = x >= u * (2 * tp * q)
            tail = np.flatnonzero(x < u * u * q)
        else:
            x, q = _scaled_uniform(source, tp, m, tmax)
            keep_u = x >= u * q
            tail = np.flatnonzero(~keep_u)
        if tail.size:
            keep_u[tail] = _bern_exp_unit(source, u[tail], _sub(tp, tail), k0=3 if two else 2)
        if keep_u.all():
            out[pend] = u
            break
        out[pend[keep_u]] = u[keep_u]
        again = ~keep_u
        pend, tp = pend[again], _sub(tp, again)
    return out


def _laplace_batch(
    source: RandomSource, t: np.ndarray, s: np.ndarray, tmax: int, n: int
) -> np.ndarray:
    """n discrete Laplace draws, P(z) ∝ exp(-|z| s/t) (CKS 2020, Alg. 2). t, s: 0-d or per entry."""
    out = np.empty(n, dtype=np.int64)
    todo = np.arange(n)
    tp, sp = t, s
    while todo.size:
        m = todo.size
        if tmax == 1:
            u = np.zeros(m, dtype=_U64)  # t = 1: U = 0, accepted with probability exp(0) = 1
        else:
            u = _accepted_uniform(source, tp, m, tmax)
        v = _exp1_count(source, m)
        y = u + tp * v  # X = U + t V < 2**63 (V < 127), geometric with ratio exp(-1/t)
        if sp.ndim or sp != 1:
            y //= sp  # Y = floor(X / s): geometric with ratio exp(-s/t)
        neg = source.bits(m)
        z = y.astype(np.int64)
        np.negative(z, out=z, where=neg)
        reject = neg & (y == 0)  # (-, 0) would count zero twice
        if not reject.any():
            out[todo] = z
            break
        keep = ~reject
        out[todo[keep]] = z[keep]
        todo, tp, sp = todo[reject], _sub(tp, reject), _sub(sp, reject)
    return out


def _check_scale(scale: Fraction | int) -> Fraction:
    if isinstance(scale, float | np.floating):
        raise TypeError("noise scale must be an exact Fraction; convert floats with as_scale()")
    if not isinstance(scale, Fraction | int | np.integer) or isinstance(scale, bool):
        raise TypeError("noise scale must be a Fraction")
    scale = Fraction(int(scale)) if not isinstance(scale, Fraction) else scale
    if scale <= 0:
        raise ValueError("noise scale must be > 0")
    if scale.numerator >= _T_LIMIT or scale.denominator >= _T_LIMIT:
        raise ValueError("noise scale numerator and denominator must be < 2**56 (use as_scale)")
    return scale


def discrete_laplace(source: RandomSource, scale: Fraction, size: int) -> np.ndarray:
    """``size`` exact discrete Laplace draws: P(z) ∝ exp(-|z|/scale), int64.

    The scale is an exact rational t/s (numerator and denominator < 2**56); the sampler is CKS 2020
    Alg. 2 and uses only random bits and integer arithmetic. Batches depend only on ``size``.
    """
    return discrete_laplace_mixed(source, [scale], [size])


def discrete_laplace_mixed(
    source: RandomSource, scales: Sequence[Fraction], sizes: Sequence[int]
) -> np.ndarray:
    """``sizes[i]`` draws of exact scale ``scales[i]`` for each i, concatenated in order (int64).

    One vectorised pass with per-entry t and s (the PMM needs one scale per tree level and
    millions of draws). Same sampler and guarantees as ``discrete_laplace``.
    """
    if len(scales) != len(sizes):
        raise ValueError("scales and sizes must have the same length")
    fracs = [_check_scale(sc) for sc in scales]
    counts = [int(z) for z in sizes]
    if any(c < 0 for c in counts):
        raise ValueError("sizes must be >= 0")
    total = sum(counts)
    out = np.empty(total, dtype=np.int64)
    if total == 0:
        return out
    t_all = np.repeat(np.array([f.numerator for f in fracs], dtype=_U64), counts)
    s_all = np.repeat(np.array([f.denominator for f in fracs], dtype=_U64), counts)
    for lo in range(0, total, _CHUNK):
        hi = min(lo + _CHUNK, total)
        t, s = t_all[lo:hi], s_all[lo:hi]
        if t[0] == t[-1] and s[0] == s[-1] and (t == t[0]).all() and (s == s[0]).all():
            t, s = np.asarray(t[0]), np.asarray(s[0])  # one scale in this batch: share it
        out[lo:hi] = _laplace_batch(source, t, s, int(t.max()), hi - lo)
    return out


def as_scale(x: float | Fraction, max_denominator_bits: int = 20) -> Fraction:
    """A noise scale as an exact Fraction, rounded UP onto the dyadic grid 2**-max_denominator_bits.

    Never rounded down: more noise is always safe. (The ledger rounds epsilons down, for the same
    reason.) Dyadic denominators keep t/s small. For very large scales the grid is coarsened so
    the numerator stays below 2**56, still rounding up.
    """
    if isinstance(x, bool) or not isinstance(x, float | int | Fraction | np.floating | np.integer):
        raise TypeError("scale must be a float, int or Fraction")
    if isinstance(x, float | np.floating) and not math.isfinite(float(x)):
        raise ValueError("scale must be finite")
    exact = Fraction(x) if not isinstance(x, np.floating) else Fraction(float(x))
    if exact <= 0:
        raise ValueError("scale must be > 0")
    if max_denominator_bits < 0:
        raise ValueError("max_denominator_bits must be >= 0")
    bits = max_denominator_bits
    while True:
        grid = 1 << bits
        num = -(-exact.numerator * grid // exact.denominator)  # ceil(exact * grid)
        if num < _T_LIMIT or bits == 0:
            break
        bits -= 1
    out = Fraction(num, grid)
    if out.numerator >= _T_LIMIT:
        raise ValueError("scale too large: numerator must stay below 2**56")
    return out


def analysis_generator(seed: int | None) -> np.random.Generator:
    """Randomness for non-private analysis (evaluate's subsamples and plots), reproducible.

    Not for privacy: evaluate releases nothing, so its choices only need to be repeatable;
    with no seed they are fixed (seed 0) so that two evaluations of the same files agree.
    """
    return RandomSource.seeded(0 if seed is None else seed).spawn("analysis").numpy_generator()


# -- exact discrete Gaussian (CKS 2020, Algorithm 3) --------------------------------------------

_VAR_LIMIT = 1 << 110  # numerator and denominator of sigma^2 (big-int arithmetic, any size works)


def _bern_big(source: RandomSource, nums: list[int], den: int) -> np.ndarray:
    """Exact Bernoulli(num/den) for 0 <= num < den of any size (Python ints), elementwise.

    U uniform in [0,1) is read 64 bits at a time: U < p iff the first 64-bit word W of U is below
    P64 = floor(p 2^64), or W == P64 and the comparison continues on the next word (probability
    2^-64 per entry, resolved exactly with Python ints). No rounding anywhere.
    """
    p64 = np.array([(x << 64) // den for x in nums], dtype=_U64)
    w = source.words(len(nums))
    res = w < p64
    for i in np.flatnonzero(w == p64):
        rem = (nums[i] << 64) - int(p64[i]) * den
        while True:
            nxt = (rem << 64) // den
            word = int(source.words(1)[0])
            if word != nxt:
                res[i] = word < nxt
                break
            rem = (rem << 64) - nxt * den
    return res


def _bern_exp_frac_big(source: RandomSource, nums: list[int], den: int) -> np.ndarray:
    """Bernoulli(exp(-num/den)) for 0 <= num/den < 1, big ints (CKS 2020 Alg. 1: k = 1; while
    Bernoulli(num/(den k)): k += 1; return k odd)."""
    res = np.empty(len(nums), dtype=bool)
    pend = np.arange(len(nums))
    k = 1
    while pend.size:
        hit = _bern_big(source, [nums[i] for i in pend], den * k)
        res[pend[~hit]] = bool(k & 1)
        pend = pend[hit]
        k += 1
    return res


def _gauss_accept(source: RandomSource, y: np.ndarray, s2: Fraction, t: int) -> np.ndarray:
    """Accept each proposal y w.p. exp(-(|y| - s2/t)^2 / (2 s2)), exactly (CKS 2020 Alg. 3).

    With s2 = a/b the exponent is (|y| t b - a)^2 / (2 a b t^2): integers, split into a whole part
    (``bernoulli_exp``, Bernoulli(exp(-1)) trials) and a fraction below 1 (big-int coins).
    """
    a, b = s2.numerator, s2.denominator
    den = 2 * a * b * t * t
    nums = [(abs(int(v)) * t * b - a) ** 2 for v in y]
    whole = np.array([x // den for x in nums], dtype=np.int64)
    ok = bernoulli_exp(source, whole, np.ones_like(whole))
    idx = np.flatnonzero(ok)
    if idx.size:
        ok[idx] = _bern_exp_frac_big(source, [nums[i] % den for i in idx], den)
    return ok


def _check_variance(sigma2: Fraction | int) -> Fraction:
    if isinstance(sigma2, float | np.floating) or isinstance(sigma2, bool):
        raise TypeError("sigma^2 must be an exact Fraction or int (use as_scale on a float)")
    if not isinstance(sigma2, Fraction | int | np.integer):
        raise TypeError("sigma^2 must be a Fraction")
    s2 = Fraction(sigma2)
    if s2 <= 0:
        raise ValueError("sigma^2 must be > 0")
    if s2.numerator >= _VAR_LIMIT or s2.denominator >= _VAR_LIMIT:
        raise ValueError("sigma^2 numerator and denominator must be < 2**110")
    return s2


def discrete_gaussian(source: RandomSource, sigma2: Fraction | int, size: int) -> np.ndarray:
    """``size`` exact discrete Gaussian draws: P(z) ∝ exp(-z^2 / (2 sigma2)), int64.

    CKS 2020 Algorithm 3: t = floor(sigma) + 1; propose Y from the discrete Laplace of scale t
    (this module's exact sampler), accept with probability exp(-(|Y| - sigma^2/t)^2 / (2 sigma^2))
    (exact rational Bernoulli); otherwise propose again. sigma2 is an exact rational; random bits,
    integer and big-integer arithmetic only. Needs floor(sigma) + 1 < 2**56.

    Privacy (CKS 2020 Theorem 4): adding it to an integer vector query of L2 sensitivity Delta is
    (Delta^2 / (2 sigma2))-zCDP, as for the continuous Gaussian.
    """
    s2 = _check_variance(sigma2)
    if size < 0:
        raise ValueError("size must be >= 0")
    t = math.isqrt(s2.numerator // s2.denominator) + 1  # floor(sqrt(s2)) + 1
    if t >= _T_LIMIT:
        raise ValueError("sigma too large: floor(sigma) + 1 must be < 2**56")
    out = np.empty(int(size), dtype=np.int64)
    pend = np.arange(int(size))
    while pend.size:
        y = discrete_laplace(source, Fraction(t), pend.size)
        ok = _gauss_accept(source, y, s2, t)
        out[pend[ok]] = y[ok]
        pend = pend[~ok]
    return out


def variance_up(x: float | Fraction, rel_bits: int = 40) -> Fraction:
    """A variance as an exact Fraction rounded UP to ``rel_bits`` significant bits (dyadic).

    Like ``as_scale`` (more noise is always safe) but relative, so tiny and huge variances both
    keep small exact representations for ``discrete_gaussian``.
    """
    exact = Fraction(x) if not isinstance(x, np.floating) else Fraction(float(x))
    if exact <= 0:
        raise ValueError("variance must be > 0")
    shift = rel_bits - (exact.numerator.bit_length() - exact.denominator.bit_length())
    num = -(-exact.numerator * (1 << max(shift, 0)) // (exact.denominator << max(-shift, 0)))
    return Fraction(num, 1 << max(shift, 0)) * (1 << max(-shift, 0))


def batch_generator(entropy: list[int], index: int) -> np.random.Generator:
    """Output batch `index`'s generator (post-processing randomness): child `index` of a
    SeedSequence, so batches draw independent streams that any process (a Dask worker) can
    rebuild from (entropy, index) alone."""
    seq = np.random.SeedSequence(entropy, spawn_key=(index,))
    return np.random.Generator(np.random.PCG64(seq))
