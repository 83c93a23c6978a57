"""The online mechanism's cube for a mixed stream: the same cube and metric as `synth` (issue 25).

A row's declared columns become a point of `Domain.to_cube`: the boolean and category columns
and the missing flags of nullable float/datetime columns first (split first by the partition,
`partition`, "Level columns first"), then the other columns rescaled by their public bounds.
Everything here is decided by the declarations (schema, flags), never by a value.

A row with a missing value in a column that is not nullable is NaN in every coordinate: it keeps
its time slot and is counted in no region (`engine`). A cube of level columns only (no numeric
coordinate left to halve once the levels are split) gets one constant coordinate 0 (public)
appended, so that the time levels can keep deepening the partition: its halvings separate
nothing (the second child of each cell is always empty), which costs accuracy, never privacy.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pyarrow as pa

from dpsynth_cli.domain import ColumnSpec, Domain
from dpsynth_cli.mechanisms import partition
from dpsynth_cli.mechanisms.conditioned import Conditioned, Rules


@dataclass(frozen=True)
class StreamCube:
    """The map between a mixed table's declared columns and the engine's cube [0,1]^d."""

    specs: tuple[ColumnSpec, ...]

    @cached_property
    def domain(self) -> Domain:
        return Domain(self.specs)

    @cached_property
    def lead(self) -> tuple[int, ...]:
        return self.domain.lead_bits()

    @property
    def padded(self) -> bool:
        """True when every cube coordinate is a lead one: a constant coordinate is appended."""
        return bool(self.lead) and len(self.lead) == self.domain.cube_dim

    @property
    def d(self) -> int:
        return self.domain.cube_dim + self.padded

    def to_cube(self, codes: np.ndarray) -> np.ndarray:
        """Rows of column codes (`domain.column_codes`, NaN missing) as points of the cube; a
        row with a missing code is NaN throughout (an empty time slot). Without level columns
        the cube is `to_unit`'s, bit for bit as before issue 25 (states made then continue)."""
        if not self.lead:
            return self.domain.to_unit(codes)
        missing = np.isnan(codes).any(axis=1)
        cube = self.domain.to_cube(np.where(missing[:, None], 0.0, codes))
        if self.padded:
            cube = np.hstack([cube, np.zeros((cube.shape[0], 1))])
        cube[missing] = np.nan
        return cube

    def to_unit(self, points: np.ndarray) -> np.ndarray:
        """Points of the cube in the declared columns' unit coordinates (NaN: flagged missing)."""
        if self.padded:
            points = points[:, :-1]
        return self.domain.cube_to_unit(points)

    def to_table(self, points: np.ndarray) -> pa.Table:
        """Released points of the cube as a table of the declared columns (post-processing)."""
        return self.domain.from_unit(self.to_unit(points))

    def conditioned_table(
        self, counts: np.ndarray, depth: int, rules: Rules, rng: np.random.Generator
    ) -> pa.Table:
        """The release of the consistent leaf `counts` conditioned on the declared constraints
        (`mechanisms.conditioned`: a row that breaks one is replaced by a fresh draw from the
        released counts; post-processing of released values only), rows in random order."""
        lead = self.lead

        def place(cells: np.ndarray, k: np.ndarray, g: np.random.Generator) -> np.ndarray:
            codes = np.repeat(np.asarray(cells, dtype=np.int64), k)
            return self.to_unit(partition.points_in_cells(codes, depth, self.d, g, lead))

        cells = np.flatnonzero(counts)
        unit = Conditioned(place, counts, rules).sample(cells, counts[cells], rng).points
        return self.domain.from_unit(unit[rng.permutation(unit.shape[0])])
