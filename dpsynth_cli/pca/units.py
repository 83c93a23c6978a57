"""`pca --units original`: the principal directions of the covariance in original column units.

`pca` computes in the unit cube (each column scaled by its declared bounds: u = (x - lower) /
width), and its directions are directions there. Mapping a unit-cube direction v to original
units as v * width is *not* a principal direction of the original covariance: on diamonds every
direction turns into about -1 on price (its width dwarfs the others). The covariance itself
transforms exactly: Cov(x) = W Cov(u) W with W = diag(width), so a method that releases a noisy
covariance (laplace-cov, dp-gauss-1) can be re-decomposed in original units. That is
post-processing of the released matrix (no rows, no budget); the noise is W E W, whose spectral
norm is at most max(width)^2 ||E|| (Weyl), which is how the signal check scales its norm.
Methods that release only directions (dp-gauss-2, dp-power, k-dp-ojas, k-dp-pca) have nothing
to re-decompose.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dpsynth_cli import spectrum
from dpsynth_cli.pca import methods

UNITS = ("unit-cube", "original")
COVARIANCE_METHODS = ("laplace-cov", "dp-gauss-1")
ORIGINAL_VALUES = "eigenvalues of the noisy covariance rescaled to original units"


@dataclass(frozen=True)
class OriginalUnits:
    components: np.ndarray  # (k, d), unit length in original units
    eigenvalues: np.ndarray  # (k,) original units squared
    explained_variance: list[float | None] | None
    explained_note: str
    signal: spectrum.SpectrumSignal


def original_units(covariance: np.ndarray, width: np.ndarray, k: int, signal, total_sd):
    """Re-decompose the released unit-cube covariance in original units (module docstring).
    `signal` is the unit-cube check (its noise norms are scaled by max(width)^2) and `total_sd`
    the unit-cube trace's noise sd (scaled the same way: a bound, not an estimate)."""
    w = np.asarray(width, dtype=np.float64)
    cov = covariance * w[:, None] * w[None, :]
    comps, vals = methods.top_k(cov, k)
    scale = float(np.max(w * w))
    noise = [v * scale for v in signal.noise]
    checked = spectrum.check(vals, noise, ORIGINAL_VALUES, signal.forced)
    total = None if total_sd is None else (float(np.trace(cov)), total_sd * scale)
    ev, note = spectrum.explained_ratios(checked, total)
    return OriginalUnits(comps, vals, ev, note, checked)
