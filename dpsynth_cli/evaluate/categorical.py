"""Per-column total variation distance for boolean and category columns (reads raw data: NOT
differentially private, like everything `evaluate` reports)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from dpsynth_cli.domain import ColumnSpec

LEVEL_KINDS = ("boolean", "category")
MISSING = "(missing)"


def level_shares(codes: np.ndarray, spec: ColumnSpec) -> np.ndarray:
    """The share of each code 0..L-1 (the declared levels, then missing if nullable)."""
    size = int(math.floor(spec.code_upper)) + 1
    counts = np.bincount(np.clip(codes.astype(np.int64), 0, size - 1), minlength=size)
    return counts / max(codes.size, 1)


def categorical_columns(X: np.ndarray, Y: np.ndarray, specs: list[ColumnSpec]) -> dict[str, Any]:
    """For each boolean / category column: TVD = 1/2 sum |p - q| over its levels (the W1 of the
    column under the discrete metric), and both tables' share of every level."""
    out = {}
    for j, spec in enumerate(specs):
        if spec.kind not in LEVEL_KINDS:
            continue
        p, q = level_shares(X[:, j], spec), level_shares(Y[:, j], spec)
        names = [*(spec.levels or ()), *([MISSING] if spec.nullable else [])]
        out[spec.name] = {
            "tvd": float(0.5 * np.abs(p - q).sum()),
            "levels": {
                n: {"real": float(a), "synthetic": float(b)}
                for n, a, b in zip(names, p, q, strict=True)
            },
        }
    return out
