"""Gridded discrete Gaussian releases of sums (PRIVACY.md, "Real-valued statistics").

A sum of real vectors is released as g (sum_i round(v_i / g) + N_Z(0, s2)): every row is put on
the power-of-two grid g first (a data-independent map of each row, so the sum is an exact
integer vector), and exact discrete Gaussian noise (noise.discrete_gaussian) is added in grid
units. L2 sensitivity in grid units: ||round(v / g)|| <= ||v|| / g + sqrt(m) / 2 for a row of m
coordinates with ||v|| <= bound (add/remove one row; x2 under replace). Adding N_Z(0, s2) to an
integer query of L2 sensitivity Delta is Delta^2 / (2 s2)-zCDP (CKS 2020, Theorem 4). Every
released value is a multiple of g.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from dpsynth_cli.privacy import noise

GRID_BITS = 24  # the grid is about 2^-24 of the noise's standard deviation: negligible


def relation_factor(relation: str) -> int:
    return 1 if relation == "add-remove" else 2


@dataclass(frozen=True)
class GaussRelease:
    value: np.ndarray
    grid: float
    sigma: float  # noise standard deviation in the value's units
    sensitivity: float  # L2, value units, including the grid term

    def describe(self) -> dict:
        return {
            "distribution": "discrete Gaussian on a grid",
            "grid": self.grid,
            "sigma": self.sigma,
            "l2_sensitivity": self.sensitivity,
        }


def grid_for(sigma: float) -> float:
    """The power of two about 2^-GRID_BITS times sigma (public: sigma is public)."""
    return 2.0 ** math.floor(math.log2(sigma) - GRID_BITS)


def noisy_sum(
    rows: np.ndarray,
    bound: float,
    rho: float,
    relation: str,
    source: noise.RandomSource,
    rows_grid: float | None = None,
) -> GaussRelease:
    """The sum of `rows` (each of L2 norm <= bound, which the caller guarantees) with rho-zCDP.
    `rows_grid`: a power of two the rows are already multiples of; when g divides it, rounding
    to g is the identity and the sum is taken directly (exact: multiples of rows_grid)."""
    m = rows.shape[1]
    f = relation_factor(relation)
    g = grid_for(f * bound / math.sqrt(2 * rho))
    if rows_grid is not None and g <= rows_grid:
        total = rows.sum(axis=0) / g
    else:
        total = np.rint(rows / g).sum(axis=0)  # exact: integers far below 2^53
    delta_units = f * (bound / g + math.sqrt(m) / 2)
    s2 = noise.variance_up(delta_units**2 / (2 * rho))
    noisy = total + noise.discrete_gaussian(source, s2, m)
    return GaussRelease(noisy * g, g, math.sqrt(float(s2)) * g, delta_units * g)


def noisy_integers(
    total: np.ndarray, delta_units: float, unit: float, rho: float, source: noise.RandomSource
) -> GaussRelease:
    """An exact integer vector of L2 sensitivity delta_units (grid units) with rho-zCDP noise."""
    s2 = noise.variance_up(delta_units**2 / (2 * rho))
    noisy = total + noise.discrete_gaussian(source, s2, total.size)
    return GaussRelease(noisy * unit, unit, math.sqrt(float(s2)) * unit, delta_units * unit)


def noisy_statistic(
    values: np.ndarray, sens: float, rho: float, source: noise.RandomSource
) -> GaussRelease:
    """A real vector statistic of L2 sensitivity `sens` (value units) with rho-zCDP: rounded to
    the grid g, which moves each of its m entries by < g/2 on each neighbour, so the integer
    vector has L2 sensitivity sens / g + sqrt(m) (grid units)."""
    g = grid_for(sens / math.sqrt(2 * rho))
    units = np.rint(np.asarray(values, dtype=np.float64).ravel() / g)
    return noisy_integers(units, sens / g + math.sqrt(units.size), g, rho, source)
