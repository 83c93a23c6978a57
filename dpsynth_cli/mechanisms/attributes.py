"""The table's columns as the marginal model sees them: discrete attributes on public grids.

The `marginals` mechanism measures one-way and two-way histograms, so every column becomes an
attribute with finitely many values, read from the mechanisms' cube (`Domain.to_cube`) with the
public facts `Rows.lead`, `Rows.codes` and `Rows.flagged` (the schema's), never from the values.
Its finest grid, the atoms, depends on those facts only, so its counts can be taken in any pass,
before the noisy count is known (synth's first pass):
- a level column (boolean, category): its L declared levels (a row sits in the first slot of its
  level's slots, so the level is slot * L // P);
- an integer or date column with at most ATOMS codes: its codes (code i owns [i/L, (i+1)/L));
- any other number: ATOMS equal cells of [0, 1];
- a nullable column is one attribute whose last value is "missing": a float or datetime's
  missing flag in the cube, an integer or date's last code (`Rows.coded_missing`);
- a date or datetime column with a `Clock` (`Rows.clocks`, issue 36) is several attributes, its
  wall-clock parts (`wallclock`): weeks (codes, or ATOMS cells of them), the weekday (7 levels)
  and the time of day (24 * 2^k cells, grids of whole hours' runs: `wallclock.hour_aligned`),
  each a public function of the column's value. They write their values into scratch columns
  past the cube's (`Attribute.column`), from which `assemble` makes the column's value.
The one-way release groups a number's atoms into `size` runs (`with_size`: 2^b, b from eps and
the noisy count); two-way counts are kept on the pair grid, at most PAIR_CELLS runs of atoms (a
level column: all its levels, up to LEVEL_PAIR_CELLS, while the counts fit; `keep_levels`). All
groupings are i * k // A of the atoms with power-of-two ratios between them, so they nest:
floor(floor(i k / A) / 2) = floor(i k / (2 A)).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from dpsynth_cli.wallclock import Clock, hour_aligned

PAIR_CELLS = 64  # pair-grid cells of an attribute at most (its missing value aside)
# A level column keeps every level on its pair grid up to this many levels (`keep_levels`):
# grouping levels by index would merge unrelated levels before any count is seen.
LEVEL_PAIR_CELLS = 1024
PAIR_COUNTS = 1 << 24  # two-way counts kept in all (128 MiB): fewer pair cells for wide tables
MAX_CELL_BITS = 10
ATOMS = 1 << MAX_CELL_BITS  # equal cells of a number without few codes


def groups(atoms: int, k: int) -> np.ndarray:
    """Atom -> one of k contiguous runs (k <= atoms): i * k // atoms."""
    return np.arange(atoms, dtype=np.int64) * k // atoms


@dataclass(frozen=True)
class Part:
    """Which wall-clock part of a date or datetime column an attribute is."""

    clock: Clock
    name: str  # "week", "weekday", "day" or "time" (`Clock.parts`)


@dataclass(frozen=True)
class Attribute:
    """One column of the table in the model."""

    column: int  # the cube column holding its value (a part's: its scratch column)
    kind: str  # "level", "code" (whole codes) or "cell" (equal cells of [0, 1])
    atoms: int  # levels, codes or ATOMS cells (the missing value not included)
    size: int  # values of the one-way release: runs of atoms (levels: the levels)
    slots: int = 1  # a level column's slots in the cube (2^ceil(log2 L))
    flag: int | None = None  # the cube column of its missing flag (nullable float/datetime)
    pair_limit: int = PAIR_CELLS  # pair-grid cells at most (`pair_cells_for`)
    span: float = 1.0  # the share of [0, 1] its values fill: (L - 1) / L when the last of L
    # codes is "missing" (a nullable integer or date), which owns the rest
    part: Part | None = None  # a date or datetime column's wall-clock part
    first: int = 0  # runs of the one-way release's first stage (`one_way`; 0: one stage)

    @property
    def missing(self) -> bool:
        nullable = self.part is not None and self.part.clock.nullable
        return self.flag is not None or self.span < 1.0 or nullable

    @property
    def values(self) -> int:
        return self.size + self.missing

    @property
    def numeric(self) -> bool:
        """Ordered values with a distance (not levels): bins are contiguous runs of them."""
        return self.kind != "level"

    @property
    def pair_groups(self) -> int:
        return min(self.atoms, self.pair_limit)

    @property
    def pair_cells(self) -> int:
        return self.pair_groups + self.missing

    @property
    def coarse(self) -> int:
        """Cells of the grid both the values and the pair grid refine (bins are unions of
        these): the coarser of the two (of a two-stage release: of its runs), plus the missing
        value."""
        return min(self.first or self.size, self.pair_groups) + self.missing

    def _with_missing(self, runs: np.ndarray, k: int) -> np.ndarray:
        return np.append(runs, k) if self.missing else runs

    def atom_value(self) -> np.ndarray:
        """Atom (and missing) -> value of the one-way release."""
        return self._with_missing(groups(self.atoms, self.size), self.size)

    def value_first(self) -> np.ndarray:
        """Value (and missing) -> run of the one-way release's first stage (`one_way.refined`:
        the values are those runs' fine cells, or their codes)."""
        k = self.first or self.size
        return self._with_missing(groups(self.size, k), k)

    def atom_pair(self) -> np.ndarray:
        """Atom (and missing) -> pair-grid cell."""
        return self._with_missing(groups(self.atoms, self.pair_groups), self.pair_groups)

    def value_coarse(self) -> np.ndarray:
        """Value -> coarse cell (the values refine the coarse grid)."""
        k = self.coarse - self.missing
        return self._with_missing(groups(self.size, k), k)

    def pair_coarse(self) -> np.ndarray:
        """Pair-grid cell -> coarse cell."""
        k = self.coarse - self.missing
        return self._with_missing(groups(self.pair_groups, k), k)

    def encode(self, X: np.ndarray) -> np.ndarray:
        """Each row's atom (int64) from the cube columns; missing is `atoms`."""
        if self.part is not None:
            f = self.part.clock.fractions(X)[self.part.name]
            atom = np.clip(np.nan_to_num(f) * self.atoms, 0, self.atoms - 1).astype(np.int64)
            atom[np.isnan(f)] = self.atoms
            return atom
        x = X[:, self.column]
        if self.kind == "level":
            slot = np.clip((x * self.slots).astype(np.int64), 0, self.slots - 1)
            return slot * self.atoms // self.slots
        atom = np.clip((x * (self.atoms / self.span)).astype(np.int64), 0, self.atoms - 1)
        if self.flag is not None:
            atom[X[:, self.flag] >= 0.5] = self.atoms
        elif self.span < 1.0:
            atom[x >= self.span] = self.atoms
        return atom

    def value_span(self) -> tuple[np.ndarray, np.ndarray]:
        """Where each value lies in [0, 1]: its first atom's start and its width."""
        first = -(-np.arange(self.size + 1, dtype=np.int64) * self.atoms // self.size)
        unit = self.span / self.atoms
        return first[:-1] * unit, np.diff(first) * unit

    def write(self, out: np.ndarray, values: np.ndarray, u: np.ndarray) -> None:
        """Put values (with within-value positions u in [0, 1)) into the cube columns of out:
        a level at the middle of its first slot (as `Domain.to_unit`), a number uniform in its
        value's run of atoms (a whole code at its middle), "missing" at 0 with its flag set; a
        part its fraction of its range (NaN: missing) in its scratch column (`wallclock`)."""
        if self.part is not None:
            out[:, self.column] = self._fraction(values, u)
            return
        if self.kind == "level":
            out[:, self.column] = (-(-values * self.slots // self.size) + 0.5) / self.slots
            return
        present = values < self.size
        v = np.minimum(values, self.size - 1)
        start, width = self.value_span()
        unit = self.span / self.atoms
        if self.kind == "code":  # a whole code: the middle of the atom the position falls in
            atom = np.floor((start[v] + u * width[v]) / unit)
            point = (atom + 0.5) * unit
        else:
            point = start[v] + u * width[v]
        if self.flag is not None:  # a missing flag: the value at 0
            out[:, self.column] = np.where(present, point, 0.0)
            out[:, self.flag] = np.where(present, 0.25, 0.75)
        else:  # the missing code's middle
            out[:, self.column] = np.where(present, point, (1.0 + self.span) / 2)

    def _fraction(self, values: np.ndarray, u: np.ndarray) -> np.ndarray:
        """A part's values as fractions of its range (a level at its middle; a number as
        `write` places it), NaN for missing."""
        present = values < self.size
        v = np.minimum(values, self.size - 1)
        if self.kind == "level":
            f = (v + 0.5) / self.size
        else:
            start, width = self.value_span()
            f = start[v] + u * width[v]
            if self.kind == "code":
                f = (np.floor(f * self.atoms) + 0.5) / self.atoms
        return np.where(present, f, np.nan)

    def with_size(self, signal: float) -> Attribute:
        """The release grid for eps n / sens = `signal` per attribute: a number's atoms in
        2^b runs, b about log2 of 1.25 sqrt(signal) (the 1-D grid balance that `hierarchy`
        measured), 1 <= b <= MAX_CELL_BITS; all of them when there are fewer. Levels stay."""
        if self.kind == "level":
            return self
        if self.part is not None and self.part.name == "time":  # runs of whole hours
            return replace(self, size=hour_aligned(self.atoms, max(1.25 * math.sqrt(signal), 24)))
        bits = round(math.log2(1.25 * math.sqrt(max(signal, 1.0))))
        return replace(self, size=min(self.atoms, 1 << int(min(max(bits, 1), MAX_CELL_BITS))))


def pair_cells_for(columns: int) -> int:
    """Pair-grid cells per attribute for a table of this many columns: the largest power of
    two (16 to PAIR_CELLS) whose tables for every pair fit PAIR_COUNTS counts."""
    pairs = max(columns * (columns - 1) // 2, 1)
    cells = 1 << max(int(math.log2(math.sqrt(PAIR_COUNTS / pairs))), 4)
    return min(cells, PAIR_CELLS)


def part_attributes(clock: Clock, scratch: int, limit: int) -> list[Attribute]:
    """A clocked column's parts as attributes writing into scratch columns from `scratch` on."""
    out = []
    for k, (name, values) in enumerate(clock.parts()):
        part = Part(clock, name)
        if name == "weekday":
            attr = Attribute(scratch + k, "level", 7, 7, pair_limit=limit, part=part)
        elif name == "time":
            pair = hour_aligned(values, limit)
            attr = Attribute(scratch + k, "cell", values, values, pair_limit=pair, part=part)
        else:
            kind, atoms = ("code", values) if values <= ATOMS else ("cell", ATOMS)
            attr = Attribute(scratch + k, kind, atoms, atoms, pair_limit=limit, part=part)
        out.append(attr)
    return out


def attributes(
    d: int,
    lead: tuple[int, ...],
    codes: tuple[int, ...],
    flagged: tuple[tuple[int, int], ...],
    coded_missing: tuple[int, ...] = (),
    clocks: tuple[Clock, ...] = (),
) -> tuple[Attribute, ...]:
    """The model's attributes at their atoms, in the cube's order (level columns first; a
    clocked column's parts in its place), from public facts only; `with_size` fixes the release
    grid once the noisy count is known."""
    flag_of = {value: flag for value, flag in flagged}
    flags = set(flag_of.values())
    clock_of = {k.column: k for k in clocks if k.parts()}
    extra = sum(len(k.parts()) - 1 for k in clock_of.values())
    limit = pair_cells_for(d - len(flags) + extra)
    out: list[Attribute] = []
    scratch = d
    for c in range(d):
        if c in flags:
            continue
        if c in clock_of:
            out += part_attributes(clock_of[c], scratch, limit)
            scratch += len(clock_of[c].parts())
            continue
        if c < len(lead):
            levels = max(codes[c] if codes else 1 << lead[c], 1)
            out.append(Attribute(c, "level", levels, levels, 1 << lead[c], pair_limit=limit))
            continue
        count = codes[c] if codes else 0
        span = (count - 1) / count if c in coded_missing and count > 1 else 1.0
        count -= span < 1.0
        kind, atoms = ("code", count) if 0 < count <= ATOMS else ("cell", ATOMS)
        flag = flag_of.get(c)
        out.append(Attribute(c, kind, atoms, atoms, flag=flag, pair_limit=limit, span=span))
    return keep_levels(tuple(out))


def keep_levels(attrs: tuple[Attribute, ...], budget: int = PAIR_COUNTS) -> tuple[Attribute, ...]:
    """Level attributes with every level on their pair grid (at most LEVEL_PAIR_CELLS levels),
    fewest levels first, each while every pair's two-way counts still fit `budget`; the rest
    keep their grid (index runs of at most `pair_limit`). Public: the schema's levels only. The
    bins are then chosen from the released counts (`pairs.coarse_bins`), never by index."""
    out = list(attrs)
    cells = [a.pair_cells for a in out]

    def counts() -> int:
        return (sum(cells) ** 2 - sum(c * c for c in cells)) // 2

    levels = [i for i, a in enumerate(out) if a.kind == "level" and a.atoms > a.pair_limit]
    for i in sorted(levels, key=lambda i: out[i].atoms):
        if out[i].atoms > LEVEL_PAIR_CELLS:
            continue
        before = cells[i]
        cells[i] = out[i].atoms + out[i].missing
        if counts() > budget:
            cells[i] = before
            continue
        out[i] = replace(out[i], pair_limit=out[i].atoms)
    return tuple(out)
