"""Private first and second moments of rows in [0,1]^d: the noisy sufficient statistics behind
`--dim` (dissertation Algorithms 6-7, re-derived for our relation) and, later, `pca`.

Why not Algorithm 6 as printed: it noises the covariance M with scale 3d^2/(eps n), which needs
the true n (private under add/remove) and a bound of 6/n per entry that is far from tight. Here
the released statistics are sums, whose sensitivity needs no n:

- Rows are centred at the cube's centre c = (1/2, ..., 1/2) (public), so z = x - c lies in
  [-1/2, 1/2]^d, and put on the public grid 2^-STAT_BITS: q = round(z * 2^STAT_BITS), integers
  with |q_j| <= 2^(STAT_BITS-1) = h. (A data-independent map of each row: it moves each
  coordinate by at most 2^-(STAT_BITS+1).)
- S1 = sum_i q_i (d integers) and S2 = upper triangle of sum_i q_i q_i^T (d(d+1)/2 integers),
  computed exactly: float64 BLAS sums of integers below 2^53 are exact, and chunks keep every
  partial sum there.
- Sensitivity under add/remove one row (L1): S1: sum_j |q_j| <= d h. S2: sum_{j<=k} |q_j q_k| =
  ((sum_j |q_j|)^2 + sum_j q_j^2) / 2 <= (d^2 + d) h^2 / 2, i.e. d(d+1)/8 in units of the cube;
  Algorithm 6's proof charges 6 d^2 / (2 n) per M instead, and an n-free 3d^2 on the sum scale,
  about 24x more. Under replace one row p -> q: S1 twice (sum_j |q_j - p_j| <= 2 d h). S2 *not*
  twice: with u = q - p and v = q + p, q q^T - p p^T = (u v^T + v u^T) / 2, whose entrywise L1 is
  at most |u|_1 |v|_1 <= ((|u|_1 + |v|_1) / 2)^2 <= (d h)^2 since |u_j| + |v_j| = 2 max(|q_j|,
  |p_j|) <= 2h; the diagonal adds at most d h^2 and the upper triangle is half the sum:
  d(d+1) h^2 / 2 again (checked by brute force in tests/test_lowdim.py).
- Each statistic gets exact discrete Laplace noise of scale sensitivity / eps on its integer grid
  (pure eps-DP, no floating-point noise: PRIVACY.md "Real-valued statistics"). Every released
  value is an integer number of grid units.
- The mean and covariance are post-processing with the noisy count n_hat (its own ledger entry):
  mean = c + S1_hat / (n_hat 2^b), cov = S2_hat / (n_hat 4^b) - (S1_hat / (n_hat 2^b))^2 terms.

Rows dropped as missing do not enter the sums; under replace a row turned incomplete is one
removal, within the calibration (docs/privacy.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from functools import partial

import numpy as np

from dpsynth_cli import spectrum
from dpsynth_cli.engine.rows import Rows, as_rows
from dpsynth_cli.privacy import noise
from dpsynth_cli.privacy.ledger import Ledger, Spend

STAT_BITS = 12  # grid 2^-12 per coordinate: |q| <= 2^11, |q q'| <= 2^22
_CHUNK_ROWS = 1 << 16  # rows per exact float64 product (2^16 * 2^22 < 2^53); bounds memory


def quantise(X: np.ndarray) -> np.ndarray:
    """Rows of [0,1]^d as integers on the grid 2^-STAT_BITS around the cube's centre (float64).

    Clipped into the cube first: the sensitivities hold only there, whoever the caller is."""
    X = np.asarray(X, dtype=np.float64)
    if np.isnan(X).any():
        raise ValueError("moments need complete rows (no NaN)")
    return np.rint((np.clip(X, 0.0, 1.0) - 0.5) * (1 << STAT_BITS))


@dataclass
class MomentSums:
    """Exact integer sums of one or more batches of rows; batches merge by addition."""

    ANY_ORDER = True  # exact integers: any split and merge order, the same statistic

    d: int
    first: np.ndarray  # S1, int64 (d,)
    second: np.ndarray  # S2, int64 (d, d), symmetric

    @classmethod
    def empty(cls, d: int) -> MomentSums:
        return cls(d, np.zeros(d, dtype=np.int64), np.zeros((d, d), dtype=np.int64))

    @classmethod
    def of(cls, X: np.ndarray) -> MomentSums:
        sums = cls.empty(X.shape[1])
        sums.add(X)
        return sums

    def add(self, X: np.ndarray) -> None:
        """Add a batch of rows in [0,1]^d (int64 sums: exact for any number of batches)."""
        for lo in range(0, X.shape[0], _CHUNK_ROWS):
            q = quantise(X[lo : lo + _CHUNK_ROWS])
            self.first += q.sum(axis=0).astype(np.int64)
            self.second += (q.T @ q).astype(np.int64)  # exact: integers below 2^53

    def merge(self, other: MomentSums) -> MomentSums:
        return MomentSums(self.d, self.first + other.first, self.second + other.second)


def ball_radius(row_norm: float, d: int) -> float:
    """A bound on ||q||_2 (grid units) for rows with ||x - c|| <= row_norm (`pca --row-norm`):
    row_norm 2^STAT_BITS, plus sqrt(d)/2 for the rounding (each coordinate moves by <= 1/2)."""
    return row_norm * (1 << STAT_BITS) + math.sqrt(d) / 2


def _ceil(x: float) -> int:
    return math.ceil(x * (1 + 1e-9))  # the float product's rounding, conservatively


def first_sensitivity(d: int, relation: str, radius: float | None = None) -> int:
    """L1 sensitivity of S1 in grid units (module docstring). With rows also in the ball ||q||_2
    <= radius: sum_j |q_j| <= sqrt(d) radius (Cauchy-Schwarz), when smaller than d h."""
    box = d * (1 << (STAT_BITS - 1))
    one = box if radius is None else min(box, _ceil(math.sqrt(d) * radius))
    return (1 if relation == "add-remove" else 2) * one


def second_sensitivity(d: int, relation: str, radius: float | None = None) -> int:
    """L1 sensitivity of the upper triangle of S2 in grid units squared (module docstring); the
    same under both relations on the box. With rows also in the ball ||q||_2 <= radius: one
    row's upper triangle has L1 ((sum |q_j|)^2 + ||q||^2) / 2 <= (d + 1) radius^2 / 2, twice
    that under replace (remove one row, add one: the triangle inequality); the smaller is used."""
    h = 1 << (STAT_BITS - 1)
    box = d * (d + 1) * h * h // 2
    if radius is None:
        return box
    ball = (1 if relation == "add-remove" else 2) * _ceil((d + 1) * radius * radius / 2)
    return min(box, ball)


@dataclass(frozen=True)
class NoisyMoments:
    """The released sums (grid units) and what post-processing makes of them."""

    first: np.ndarray  # noisy S1, int64 (d,)
    second: np.ndarray  # noisy S2, int64 (d, d) symmetric (upper triangle noised, mirrored)
    second_scale: Fraction  # the discrete Laplace scale of S2's entries (grid units squared)
    first_scale: Fraction  # the discrete Laplace scale of S1's entries (grid units)

    def noise(self, noisy_rows: int) -> tuple[float, float, float]:
        """(sd of the covariance's S2 term, sd of the mean's entries, the noisy mean's norm): a
        discrete Laplace draw of scale b has sd at most sqrt(2) b (its variance 1 / (2
        sinh^2(1 / 2b)) <= 2 b^2). Public scales over the noisy count, and a released value."""
        n = max(noisy_rows, 1)
        unit = float(1 << STAT_BITS)
        second_sd = math.sqrt(2.0) * float(self.second_scale) / (n * unit * unit)
        first_sd = math.sqrt(2.0) * float(self.first_scale) / (n * unit)
        return second_sd, first_sd, float(np.linalg.norm(self.first / (n * unit)))

    def noise_norm(self, noisy_rows: int) -> float:
        """The largest eigenvalue the covariance's noise reaches with probability about 0.99."""
        return spectrum.covariance_noise(self.first.size, *self.noise(noisy_rows))

    def mean(self, noisy_rows: int) -> np.ndarray:
        """The private mean in [0,1]^d coordinates (clipped into the cube)."""
        n = max(noisy_rows, 1)
        return np.clip(0.5 + self.first / (n * float(1 << STAT_BITS)), 0.0, 1.0)

    def covariance(self, noisy_rows: int) -> np.ndarray:
        """The private covariance of the rows, from the noisy sums and the noisy count."""
        n = max(noisy_rows, 1)
        unit = float(1 << STAT_BITS)
        m1 = self.first / (n * unit)
        return self.second / (n * unit * unit) - np.outer(m1, m1)


def release(
    X: Rows | np.ndarray,
    eps_first: Fraction,
    eps_second: Fraction,
    source: noise.RandomSource,
    ledger: Ledger,
    radius: float | None = None,
) -> NoisyMoments:
    """Noisy S1 and S2 of the rows X in [0,1]^d (one pass), each a ledger entry. `radius`: a
    public bound on every quantised row's ||q||_2 (ball_radius; the caller has projected the
    rows onto the ball), which lowers both sensitivities."""
    rows = as_rows(X)
    d = rows.d
    sums = rows.collect(partial(MomentSums.empty, d))
    relation = ledger.relation
    s1 = first_sensitivity(d, relation, radius)
    scale1 = noise.as_scale(Fraction(s1) / eps_first)
    first = sums.first + noise.discrete_laplace(source.spawn("first"), scale1, d)
    ledger.record(
        Spend(
            step="moments:first",
            mechanism=f"noisy sum of centred rows on the grid 2^-{STAT_BITS} (Algorithm 7's "
            "private mean, re-derived)",
            epsilon=eps_first,
            sensitivity=s1 / float(1 << STAT_BITS),
            noise={"distribution": "discrete Laplace", "scale_grid_units": float(scale1)},
            released={"note": "the d noisy sums; the report gives the mean derived from them"},
        )
    )
    s2 = second_sensitivity(d, relation, radius)
    scale2 = noise.as_scale(Fraction(s2) / eps_second)
    upper = np.triu_indices(d)
    noisy_upper = sums.second[upper] + noise.discrete_laplace(
        source.spawn("second"), scale2, upper[0].size
    )
    second = np.zeros((d, d), dtype=np.int64)
    second[upper] = noisy_upper
    second = second + np.triu(second, 1).T
    ledger.record(
        Spend(
            step="moments:second",
            mechanism="noisy upper triangle of the sum of outer products of centred rows on the "
            f"grid 2^-{STAT_BITS} (Algorithm 6, re-derived without n)",
            epsilon=eps_second,
            sensitivity=s2 / float(1 << (2 * STAT_BITS)),
            noise={"distribution": "discrete Laplace", "scale_grid_units": float(scale2)},
            released={"note": "d(d+1)/2 noisy sums; the report gives the spectrum and basis"},
        )
    )
    return NoisyMoments(first, second, scale2, scale1)
