"""The table's columns as the marginal model sees them: discrete attributes on public grids.

The `marginals` mechanism measures one-way and two-way histograms, so every column becomes an
attribute with finitely many values, read from the mechanisms' cube (`Domain.to_cube`) with the
public facts `Rows.lead`, `Rows.codes` and `Rows.flagged` (the schema's), never from the values:
- a level column (boolean, category): its L declared levels (a row sits in the first slot of
  its level's slots, so the level is slot * L // P);
- an integer or date column with few codes: its codes (code i owns [i/L, (i+1)/L));
- any other number (float, datetime, integer or date with many codes): `cells` equal cells of
  [0, 1], a power of two fixed from eps and the noisy count (`plan_cells`);
- a nullable float or datetime column (value and missing flag in the cube) is one attribute whose
  last value is "missing".
Each attribute also has a coarser "pair grid" (at most PAIR_CELLS contiguous groups of its
values, and the missing value alone) on which all two-way histograms are counted in the same
pass; the model's bins are unions of pair-grid cells chosen after the one-way release.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

PAIR_CELLS = 64  # pair-grid cells of an attribute (its missing value aside)
MAX_CELL_BITS = 10  # at most 1024 equal cells for a numeric attribute's one-way release


@dataclass(frozen=True)
class Attribute:
    """One column of the table in the model: `values` codes 0..values-1 read from the cube."""

    column: int  # the cube column holding its value
    kind: str  # "level", "code" (whole codes) or "cell" (equal cells of [0, 1])
    size: int  # levels, codes or cells (the missing value not included)
    slots: int = 1  # a level column's slots in the cube (2^ceil(log2 L))
    flag: int | None = None  # the cube column of its missing flag (nullable float/datetime)
    codes: int = 0  # a "cell" attribute's whole codes (integer, date), 0 if continuous

    @property
    def missing(self) -> bool:
        return self.flag is not None

    @property
    def values(self) -> int:
        return self.size + self.missing

    @property
    def numeric(self) -> bool:
        """Ordered values with a distance (not levels): bins are contiguous runs of them."""
        return self.kind != "level"

    @property
    def pair_cells(self) -> int:
        """Cells of the pair grid: levels as they are (up to PAIR_CELLS), else contiguous
        groups of values; plus the missing value."""
        return min(self.size, PAIR_CELLS) + self.missing

    def pair_map(self) -> np.ndarray:
        """value -> pair-grid cell (contiguous groups; missing last on its own)."""
        groups = min(self.size, PAIR_CELLS)
        cells = np.arange(self.size, dtype=np.int64) * groups // self.size
        return np.append(cells, groups) if self.missing else cells

    def encode(self, X: np.ndarray) -> np.ndarray:
        """Each row's value (int64) from the cube columns."""
        x = X[:, self.column]
        if self.kind == "level":
            slot = np.clip((x * self.slots).astype(np.int64), 0, self.slots - 1)
            return slot * self.size // self.slots
        code = np.clip((x * self.size).astype(np.int64), 0, self.size - 1)
        if self.missing:
            code[X[:, self.flag] >= 0.5] = self.size
        return code

    def write(self, out: np.ndarray, values: np.ndarray, u: np.ndarray) -> None:
        """Put values (with within-value positions u in [0, 1)) into the cube columns of out."""
        if self.kind == "level":  # the middle of the level's first slot, as `Domain.to_unit`
            out[:, self.column] = (-(-values * self.slots // self.size) + 0.5) / self.slots
            return
        present = values < self.size
        within = 0.5 if self.kind == "code" else u
        out[:, self.column] = np.where(present, (np.minimum(values, self.size - 1) + within), 0.0)
        out[:, self.column] /= self.size
        if self.missing:
            out[:, self.flag] = np.where(present, 0.25, 0.75)


def plan_cells(codes: int, signal: float) -> tuple[str, int]:
    """A number's one-way grid: its whole codes when they are few enough, else 2^b equal cells,
    b about log2 of 1.25 sqrt(eps n / sens) (the 1-D grid balance that `hierarchy` measured),
    1 <= b <= MAX_CELL_BITS."""
    bits = round(math.log2(1.25 * math.sqrt(max(signal, 1.0))))
    cells = 1 << int(min(max(bits, 1), MAX_CELL_BITS))
    if 0 < codes <= cells:
        return "code", codes
    return "cell", cells


def attributes(
    d: int,
    lead: tuple[int, ...],
    codes: tuple[int, ...],
    flagged: tuple[tuple[int, int], ...],
    signal: float,
) -> tuple[Attribute, ...]:
    """The model's attributes, in the table's cube order (level columns first), from public
    facts only. `signal` is eps n / sens of one attribute's one-way release (`plan_cells`)."""
    flag_of = {value: flag for value, flag in flagged}
    flags = set(flag_of.values())
    out = []
    for c in range(d):
        if c in flags:
            continue
        if c < len(lead):
            levels = codes[c] if codes else 1 << lead[c]
            out.append(Attribute(c, "level", max(levels, 1), slots=1 << lead[c]))
            continue
        kind, size = plan_cells(codes[c] if codes else 0, signal)
        code_count = codes[c] if codes else 0
        out.append(Attribute(c, kind, size, flag=flag_of.get(c), codes=code_count))
    return tuple(out)
