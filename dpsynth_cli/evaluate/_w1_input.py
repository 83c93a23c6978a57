"""Input checks and error types shared by the W1 modules.

Error messages name the argument at fault and never contain a data value (they end up in logs).
Each error is both a `DpsynthError` (so the CLI prints one line) and the matching built-in type
(so library callers can catch `ValueError` / `RuntimeError`).
"""

from __future__ import annotations

import numpy as np

from dpsynth_cli.errors import DataError, DpsynthError, UsageError


class W1InputError(DataError, ValueError):
    """Points or weights unusable for a W1 computation (shape, NaN, negative weight...)."""


class W1TooLargeError(UsageError, ValueError):
    """The exact solve was refused: its n*m cost matrix would exceed `max_pairs`."""


class W1SolverError(DpsynthError, RuntimeError):
    """The exact OT solver stopped without certifying optimality."""


def as_points(X: object, name: str) -> np.ndarray:
    """`X` as a C-contiguous float64 (n, d) array with n >= 1, d >= 1 and finite entries."""
    arr = np.ascontiguousarray(X, dtype=np.float64)
    if arr.ndim != 2 or arr.shape[0] == 0 or arr.shape[1] == 0:
        raise W1InputError(f"{name} must be a non-empty 2-D array (rows x columns)")
    if not np.isfinite(arr).all():
        raise W1InputError(f"{name} contains NaN or infinite values")
    return arr


def as_pair(X: object, Y: object) -> tuple[np.ndarray, np.ndarray]:
    """Both point sets, checked, with the same number of columns."""
    Xa, Ya = as_points(X, "X"), as_points(Y, "Y")
    if Xa.shape[1] != Ya.shape[1]:
        raise W1InputError("X and Y must have the same number of columns")
    return Xa, Ya


def as_values(x: object, name: str) -> np.ndarray:
    """A non-empty finite 1-D float64 array."""
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim != 1 or arr.shape[0] == 0:
        raise W1InputError(f"{name} must be a non-empty 1-D array")
    if not np.isfinite(arr).all():
        raise W1InputError(f"{name} contains NaN or infinite values")
    return arr


def as_weights(w: object | None, n: int, name: str) -> np.ndarray | None:
    """Weights normalised to sum 1, or None for uniform weights 1/n.

    Weights are proportional masses (counts are fine): W1 compares probability measures, so
    each side is rescaled to total mass 1.
    """
    if w is None:
        return None
    arr = np.asarray(w, dtype=np.float64)
    if arr.shape != (n,):
        raise W1InputError(f"{name} must be a 1-D array with one weight per row")
    if not np.isfinite(arr).all() or (arr < 0).any():
        raise W1InputError(f"{name} must be finite and non-negative")
    total = float(arr.sum())
    if total <= 0:
        raise W1InputError(f"{name} must have a positive sum")
    return arr / total


def uniform_or(w: np.ndarray | None, n: int) -> np.ndarray:
    """Explicit weights: `w`, or 1/n each."""
    return np.full(n, 1.0 / n) if w is None else w
