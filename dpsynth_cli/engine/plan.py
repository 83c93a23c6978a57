"""A released output's batches as plans that any process can place: the mechanisms make them
(`mechanisms.base.Output.plan`), the CLI and the Dask engine execute them. Here, below both, so
that the engine needs nothing from the mechanisms."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

# (cells, their sizes, rng) -> the points of those cells, (sizes.sum(), d), in random row order.
Place = Callable[[np.ndarray, np.ndarray, np.random.Generator], np.ndarray]


@dataclass(frozen=True)
class BatchPlan:
    """One output batch, fixed before any point is placed: which cells, how many points in each,
    and the batch's own generator. It holds released values and post-processing randomness only,
    so any process can place it (a Dask worker writes its part file from it) and the points do
    not depend on which process places which batch, or in what order."""

    index: int
    cells: np.ndarray
    counts: np.ndarray
    rng: np.random.Generator

    def points(self, place: Place) -> np.ndarray:
        """The batch's points, placed with a copy of its generator (the same points every call:
        a retried task writes the same part)."""
        return place(self.cells, self.counts, copy.deepcopy(self.rng))
