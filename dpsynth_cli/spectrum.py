"""Can released principal directions be told from the noise? One rule for `pca` and `synth --dim`.

Both commands read directions off a noisy symmetric matrix (a covariance from noisy sums) or off
iterates built from noisy sums. With too little budget per column the noise's own spectrum is all
there is: the top eigenvalues are the noise's and the directions are random. The rule compares
each released eigenvalue estimate with the norm the noise reaches with probability about 0.99;
that norm is a function of public quantities (the noise's standard deviation, fixed by the
sensitivity and the budget; d) and released values (the noisy count, the noisy mean). It reads
no rows and costs no privacy: post-processing of the release.

- A symmetric d x d matrix of independent zero-mean entries of standard deviation tau (upper
  triangle, mirrored) has spectral norm about 2 tau sqrt(d) (Wigner's semicircle), with Tracy-
  Widom fluctuations of order tau d^(-1/6). `matrix_norm` = 2 tau (sqrt(d) + TW_PAD d^(-1/6)):
  its 99th percentile for Laplace and Gaussian entries at d = 1..300 lies below it (measured,
  tests/test_spectrum.py).
- A vector of d such entries has norm at most tau (sqrt(d) + VECTOR_PAD) with probability 0.99
  (same test).
- A covariance S2 / n - m^ m^^T from a noisy mean m^ = m + e adds m m^T - m^ m^^T: rank two,
  largest eigenvalue at most ||m|| ||e|| - m.e (and at most ||m||^2). ||m|| is private;
  ||m^||^2 - d tau_1^2 estimates ||m||^2 without bias (E ||e||^2 = d tau_1^2), and the term is
  taken as that estimate times (||e||'s 0.99 bound + VECTOR_PAD tau_1) (`covariance_noise`).
  Only the largest eigenvalue matters: a spurious direction shows as a large positive one. The
  sum with `matrix_norm` was exceeded in at most 0.6% of 500 draws in each of 72 settings (d =
  2-30, ||m|| = 0-3, tau_1 / tau = 0.1-5; tests/test_spectrum.py checks some). By Weyl the
  released top eigenvalue is at most the data's plus these.

A component counts as above the noise when its released eigenvalue exceeds that norm: below it,
noise alone could have produced it. Why that is the right line: a direction of variance lambda in
Wigner noise of norm nu lifts the top eigenvalue above nu only once lambda > nu / 2 (the BBP
transition); the eigenvalue is then lambda + nu^2 / (4 lambda) and the direction found has squared
overlap 1 - nu^2 / (4 lambda^2) with the true one, so just above the line it is a weak estimate
and well below it a random direction.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

TW_PAD = 2.0  # matrix_norm: 2 tau (sqrt(d) + TW_PAD d^(-1/6)), a 0.99 bound (module docstring)
VECTOR_PAD = 3.3  # vector_norm: tau (sqrt(d) + VECTOR_PAD), a 0.99 bound
RULE = (
    "a component is above the noise when its released eigenvalue exceeds the spectral norm the "
    "noise reaches with probability about 0.99 (from the public noise scale, d, the noisy count "
    "and the noisy mean); below it, noise alone could have produced it and the direction is "
    "close to random. Post-processing of released values only"
)


def matrix_norm(sd: float, d: int) -> float:
    """About the 0.99 quantile of the spectral norm of a symmetric d x d noise matrix whose
    upper-triangle entries are independent with standard deviation `sd`."""
    return 2.0 * sd * (math.sqrt(d) + TW_PAD * d ** (-1.0 / 6.0))


def vector_norm(sd: float, d: int) -> float:
    """About the 0.99 quantile of the Euclidean norm of d independent noise entries of sd `sd`."""
    return sd * (math.sqrt(d) + VECTOR_PAD)


def covariance_noise(d: int, second_sd: float, first_sd: float, mean_norm: float) -> float:
    """The largest eigenvalue the noise of cov = S2/n - m^ m^^T reaches (module docstring):
    S2/n's entries of sd `second_sd`, the noisy mean m^ (norm `mean_norm`, released) with
    entries of sd `first_sd`. In covariance (mean) units, i.e. after dividing by the noisy count."""
    m = math.sqrt(max(mean_norm * mean_norm - d * first_sd * first_sd, 0.0))
    return matrix_norm(second_sd, d) + m * (vector_norm(first_sd, d) + VECTOR_PAD * first_sd)


@dataclass(frozen=True)
class SpectrumSignal:
    """Released eigenvalue estimates (descending; NaN where none is released) against the noise's
    norm for each, and the verdict."""

    values: tuple[float, ...]
    noise: tuple[float, ...]
    compared: str  # what the values are, in words
    forced: str | None = None  # a reason every component is noise whatever the values

    @property
    def above(self) -> tuple[bool, ...]:
        if self.forced is not None:
            return tuple(False for _ in self.values)
        return tuple(bool(v > n) for v, n in zip(self.values, self.noise, strict=True))

    @property
    def count(self) -> int:
        return sum(self.above)

    def to_json(self) -> dict[str, Any]:
        block: dict[str, Any] = {
            "compared": self.compared,
            "released_values": [None if math.isnan(v) else v for v in self.values],
            "noise_norm": [None if math.isnan(v) else v for v in self.noise],
            "above_noise": list(self.above),
            "components_above_noise": self.count,
            "little_signal": self.count == 0,
            "rule": RULE,
        }
        if self.forced is not None:
            block["reason"] = self.forced
        return block


def check(
    values: Sequence[float] | np.ndarray,
    noise: float | Sequence[float],
    compared: str,
    forced: str | None = None,
) -> SpectrumSignal:
    """The verdict for released `values` (one per component) against the noise's norm (one, or
    one per component)."""
    vals = tuple(float(v) for v in np.asarray(values, dtype=np.float64).ravel())
    if isinstance(noise, (int, float)):
        norms = tuple(float(noise) for _ in vals)
    else:
        norms = tuple(float(v) for v in noise)
    return SpectrumSignal(vals, norms, compared, forced)


def trace_noise(d: int, second_sd: float, first_sd: float, mean_norm: float) -> float:
    """About one standard deviation of the noise in the trace of cov = S2/n - m^ m^^T: d
    diagonal entries of sd `second_sd`, and ||m||^2 - ||m^||^2 = -2 m.e - ||e||^2 (sd about
    2 ||m|| tau_1, mean d tau_1^2; ||m|| estimated as in `covariance_noise`)."""
    m = math.sqrt(max(mean_norm * mean_norm - d * first_sd * first_sd, 0.0))
    return math.sqrt(d) * second_sd + 2.0 * m * first_sd + d * first_sd * first_sd


TOTAL_NOISE_LIMIT = 0.25  # ratios only when the total's noise sd is at most this share of it


def explained_ratios(
    signal: SpectrumSignal, total: tuple[float, float] | None
) -> tuple[list[float | None] | None, str]:
    """Explained-variance ratios that mean what their name says: eigenvalue / total variance,
    both noisy, so the total is taken as at least the sum of the released top eigenvalues
    (every ratio in [0, 1], their sum <= 1); None for a component below the noise (its
    eigenvalue is the noise's). `total` is (noisy total variance, its noise sd); None overall
    without a released total, or when its noise exceeds TOTAL_NOISE_LIMIT of it."""
    if total is None:
        return None, "this method releases no estimate of the total variance"
    kept = [max(v, 0.0) if a else 0.0 for v, a in zip(signal.values, signal.above, strict=True)]
    denom = max(float(total[0]), sum(kept))
    if total[1] > TOTAL_NOISE_LIMIT * denom:
        return None, (
            f"the noisy total variance ({total[0]:.3g}) is too uncertain for a ratio: its noise "
            f"sd is about {total[1]:.3g}"
        )
    note = (
        "noisy eigenvalue / max(noisy total variance, sum of the released eigenvalues above the "
        "noise): each in [0, 1], their sum at most 1"
    )
    if signal.count < len(signal.values):
        note += "; null where the component cannot be told from noise (module spectrum)"
    if denom <= 0:
        return [None for _ in kept], note
    return [k / denom if a else None for k, a in zip(kept, signal.above, strict=True)], note


SHOWN = 5  # components (and their values) named in the summary sentence


def _numbers(components: list[int]) -> str:
    return ", ".join(str(j + 1) for j in components)


def summary(signal: SpectrumSignal, what: str, help_: Sequence[str]) -> str | None:
    """One plain sentence for stderr when some component cannot be told from noise, naming
    what would help; None when all can."""
    k, m = len(signal.values), signal.count
    if m == k:
        return None
    below = [j for j, a in enumerate(signal.above) if not a]
    # the components named and the values given are the same ones, in the same order (at most
    # SHOWN of each, then how many more)
    named = below[:SHOWN]
    more = f" and {len(below) - SHOWN} more" if len(below) > SHOWN else ""
    values = [signal.values[j] for j in named]
    if signal.forced is not None:
        why = signal.forced
    elif all(math.isnan(v) for v in values):
        why = "no estimate of their size is released"
    else:
        many = len(below) > 1
        listed = ", ".join("n/a" if math.isnan(v) else f"{v:.3g}" for v in values)
        released = (
            f"released values {listed}{more and ', ...'} for components {_numbers(named)}{more}"
            if many
            else f"released value {listed}"
        )
        why = (
            f"{released} {'are' if many else 'is'} not above "
            f"{max(signal.noise[j] for j in below):.3g}, which the noise alone can reach"
        )
    if m == 0:
        which = f"none of the {k} components" if k > 1 else "the component"
        rest = "they are" if k > 1 else "it is"
    else:
        which = f"component{'s' if len(below) > 1 else ''} {_numbers(named)}{more} of {k}"
        rest = "they are" if len(below) > 1 else "it is"
    head = f"{what}: {which} {'can' if m == 0 and k > 1 else 'cannot'} be told from noise"
    return f"{head} ({why}); {rest} close to random. What would help: " + "; ".join(help_)
