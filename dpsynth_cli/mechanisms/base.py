"""What every synthesis mechanism takes and returns, so `synth` can run any of them.

A mechanism reads X (rows in [0,1]^d), spends exactly its epsilon through the ledger, and returns
points in [0,1]^d with a public description for the report. It may use the noisy row count (a
released value) but never the true one.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Protocol

import numpy as np

from dpsynth_cli.privacy.ledger import Ledger
from dpsynth_cli.privacy.noise import RandomSource


@dataclass(frozen=True)
class MechanismRun:
    """Synthetic points and what the report may say about how they were made."""

    points: np.ndarray
    description: dict[str, Any]
    guarantee: str
    w1_bound: float | None = None


class Mechanism(Protocol):
    def __call__(
        self,
        X: np.ndarray,
        *,
        epsilon: Fraction,
        noisy_rows: int,
        relation: str,
        source: RandomSource,
        ledger: Ledger,
        rng: np.random.Generator,
        rows: int | None,
    ) -> MechanismRun: ...


def resample_counts(counts: np.ndarray, rows: int | None, rng: np.random.Generator) -> np.ndarray:
    """`--rows`: draw `rows` cells from the released counts (post-processing); None keeps them.

    A measure with no mass gives no rows.
    """
    if rows is None:
        return counts
    total = int(counts.sum())
    return rng.multinomial(rows, counts / total) if total > 0 else np.zeros_like(counts)
