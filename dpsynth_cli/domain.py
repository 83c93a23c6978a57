"""The map between a table and the unit cube [0,1]^d, on declared columns only.

Each cell is parsed with its column's declared type: a cell that is not a value of it (text in a
number column, an empty field, NA, NaN) is missing, and rows with a missing value in a chosen
column are dropped (how many, per column, is released only with DP noise:
`count.noisy_tally`). Values outside the bounds (including +-inf and numbers beyond the int64
or float range) are clamped onto them. What a column is lives in `columns`, the schema file in
`schema_file`, the choice of columns in `declare`; their names are importable from here too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dpsynth_cli import coltypes
from dpsynth_cli.columns import (
    CONTINUOUS,
    DISCRETE,
    DRAFT_HINT,
    KINDS,
    LEVEL_KINDS,
    NULLABLE,
    ColumnSpec,
    arrow_kind,
    arrow_time_kind,
    bounds_flag,
    check_bounds,
    is_text,
    parse_bounds_flag,
)
from dpsynth_cli.declare import (
    ColumnChoice,
    Declared,
    declare_columns,
    parse_names,
    requested_columns,
    resolve_columns,
)
from dpsynth_cli.errors import DataError, UsageError
from dpsynth_cli.schema_file import (
    COLUMN_KEYS,
    InlineSchema,
    load_constraints,
    load_schema,
    schema_column,
)
from dpsynth_cli.wallclock import Clock

__all__ = [
    "COLUMN_KEYS",
    "CONTINUOUS",
    "DISCRETE",
    "DRAFT_HINT",
    "KINDS",
    "LEVEL_KINDS",
    "METRIC_TEXT",
    "NULLABLE",
    "NUMBER_PATTERN",
    "OUTPUT_RESOLUTION",
    "ColumnChoice",
    "ColumnSpec",
    "Declared",
    "Domain",
    "InlineSchema",
    "arrow_kind",
    "arrow_time_kind",
    "bounds_flag",
    "check_bounds",
    "column_codes",
    "column_values",
    "declare_columns",
    "is_text",
    "load_constraints",
    "load_schema",
    "parse_bounds_flag",
    "parse_names",
    "requested_columns",
    "resolve_columns",
    "schema_column",
    "table_codes",
    "complete_rows",
    "tallied_matrix",
    "value_matrix",
]

METRIC_TEXT = (
    "rho(x, y) = max over columns: a boolean or category column contributes 1 if the levels "
    "differ ('missing' is a level if nullable), else 0 (the discrete metric); a float or "
    "datetime column its difference divided by its public range, and 1 between missing and a "
    "value if nullable; an integer or date column with L codes (then 'missing' if nullable) "
    "|i - j| / L"
)
# Float outputs are rounded to this fraction of the column's public range: far below the error of
# any mechanism here (W1 in the unit cube is rarely below 1e-3), and it keeps files small.
OUTPUT_RESOLUTION = 1e-6

# A number as `value_matrix` reads it from text (surrounding white space is trimmed first). Every
# string this matches, Arrow's string -> float64 cast accepts, so parsing never fails on a cell.
NUMBER_PATTERN = (
    r"^[+-]?(([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?"
    r"|[iI][nN][fF]([iI][nN][iI][tT][yY])?|[nN][aA][nN])$"
)


def column_values(column: pa.ChunkedArray, decimal: str = ".") -> np.ndarray:
    """One column as float64, missing cells as NaN; each cell is read on its own.

    Text is parsed as a number (NUMBER_PATTERN after trimming white space); anything else in it
    is missing. Numbers of any width (uint64 beyond int64, decimals) become the nearest double;
    booleans become 0 and 1. No cell can make the parse of another cell, or of the column, fail.
    With `decimal` "," (`--decimal ,`), a text cell's commas are read as decimal points first
    ("3,5" is 3.5); thousands separators ("1.234,5") stay unsupported: such a cell is missing.
    """
    dtype = column.type
    if pa.types.is_dictionary(dtype):
        column = column.cast(dtype.value_type)
        dtype = column.type
    if is_text(dtype):
        text = pc.utf8_trim_whitespace(column)
        if decimal != ".":
            text = pc.replace_substring(text, decimal, ".")
        number = pc.match_substring_regex(text, NUMBER_PATTERN)
        column = pc.if_else(number, text, pa.scalar(None, dtype))
    column = column.cast(pa.float64(), safe=False)
    return column.to_numpy(zero_copy_only=False).astype(np.float64, copy=False)


def column_codes(column: pa.ChunkedArray, spec: ColumnSpec) -> np.ndarray:
    """One column as float64 codes of its declared kind (`coltypes`), missing cells as NaN, or
    as the missing level's code for a nullable column."""
    if spec.kind == "boolean":
        codes = coltypes.boolean_codes(column, spec.spellings)
    elif spec.kind == "category":
        codes = coltypes.category_codes(column, spec.levels or (), spec.other)
    elif spec.kind == "date":
        codes = coltypes.date_codes(column)
    elif spec.kind == "datetime":
        codes = coltypes.datetime_codes(column, spec.timezone)
    else:
        codes = column_values(column, spec.decimal)
    if spec.nullable and spec.kind in CONTINUOUS:  # values clamped, missing past the upper one
        codes = np.where(np.isnan(codes), spec.code_upper, np.clip(codes, spec.lower, spec.upper))
    elif spec.nullable:  # values clamped first: one past the upper code is the missing level
        clamped = np.clip(codes, math.ceil(spec.lower), math.floor(spec.upper))
        codes = np.where(np.isnan(codes), math.floor(spec.code_upper), clamped)
    return codes


def table_codes(table: pa.Table | pa.RecordBatch, spec: ColumnSpec) -> np.ndarray:
    """`column_codes` of the table's column `spec.name`. Text that is not UTF-8 (Parquet does
    not check it on read; text functions do) is an encoding error naming the column: structure,
    like a CSV's encoding, so one line and exit 1 rather than an internal error."""
    try:
        return column_codes(table.column(spec.name), spec)
    except pa.ArrowInvalid:
        raise DataError(
            f"column '{spec.name}' holds text that is not valid UTF-8 (an encoding error)"
        ) from None


def value_matrix(table: pa.Table, specs: list[ColumnSpec]) -> np.ndarray:
    """The chosen columns as float64 (n, d), rows with any missing value (null or NaN) dropped."""
    if not specs:
        return np.empty((0, 0))
    values = np.empty((table.num_rows, len(specs)))
    missing = np.zeros(table.num_rows, dtype=bool)
    for j, s in enumerate(specs):
        values[:, j] = table_codes(table, s)
        missing |= np.isnan(values[:, j])
    return values[~missing] if missing.any() else values


COMPLETE = -1.0  # `tallied_matrix`'s last column for a complete row


def tallied_matrix(table: pa.Table, specs: list[ColumnSpec]) -> np.ndarray:
    """Every row of the chosen columns as float64 (n, d + 1): the d codes (NaN where a cell is
    missing or not a value of its column's type), then the index of the row's FIRST unusable
    column in the declared order, or COMPLETE. Each row falls in exactly one of d + 1 cells
    (complete, or dropped at column j): synth's first pass counts them (`complete_rows` keeps
    the complete ones for every other use)."""
    values = np.empty((table.num_rows, len(specs) + 1))
    first = values[:, -1]
    first.fill(COMPLETE)
    for j, s in enumerate(specs):
        values[:, j] = table_codes(table, s)
        first[np.isnan(values[:, j]) & (first == COMPLETE)] = j
    return values


def complete_rows(X: np.ndarray) -> np.ndarray:
    """`tallied_matrix`'s complete rows without the tally column: `value_matrix`'s rows."""
    keep = X[:, -1] == COMPLETE
    return X[:, :-1] if keep.all() else X[keep, :-1]


@dataclass(frozen=True)
class Domain:
    """Columns with public bounds: the affine map between table values and [0,1]^d.

    A float column maps [lower, upper] onto [0, 1]. An integer column maps
    [lower - 1/2, upper + 1/2] onto [0, 1], so that each integer owns an interval of equal width
    and rounding back gives every value in bounds the same share of the cube.
    """

    columns: tuple[ColumnSpec, ...]

    def __post_init__(self) -> None:
        for c in self.columns:
            if c.kind == "integer" and math.ceil(c.lower) > math.floor(c.upper):
                raise UsageError(f"bounds of integer column '{c.name}' contain no integer")

    def levels(self, j: int) -> int:
        """How many codes column j has (declared levels, then missing if nullable)."""
        c = self.columns[j]
        return int(math.floor(c.code_upper) - math.ceil(c.lower) + 1)

    @property
    def level_columns(self) -> tuple[int, ...]:
        """The boolean and category columns, in order: top-level splits of the partitions."""
        return tuple(j for j, c in enumerate(self.columns) if c.kind in LEVEL_KINDS)

    def slots(self, j: int) -> int:
        """The unit interval of level column j is cut into P = 2^ceil(log2 L) equal slots, so
        that ceil(log2 L) halvings separate its L levels: level i owns slots ceil(iP/L) ..
        ceil((i+1)P/L) - 1 (one or two of them) and its rows sit in the first."""
        return 1 << max(self.levels(j) - 1, 0).bit_length()

    def lead_bits(self) -> tuple[int, ...]:
        """The bits a partition splits first (`to_cube`'s first columns): log2 of the slots of
        each level column, then 1 for each missing flag."""
        levels = tuple(self.slots(j).bit_length() - 1 for j in self.level_columns)
        return levels + (1,) * len(self.nullable_continuous)

    @property
    def nullable_continuous(self) -> tuple[int, ...]:
        """Nullable float and datetime columns: each has a hidden missing flag in the cube."""
        return tuple(j for j, c in enumerate(self.columns) if c.kind in CONTINUOUS and c.nullable)

    @property
    def cube_dim(self) -> int:
        return len(self.columns) + len(self.nullable_continuous)

    @property
    def _others(self) -> list[int]:
        return [j for j in range(len(self.columns)) if j not in self.level_columns]

    def cube_flags(self) -> tuple[tuple[int, int], ...]:
        """(value column, missing flag column) in the cube of each nullable float/datetime."""
        m, others = len(self.level_columns), self._others
        return tuple(
            (m + len(self.nullable_continuous) + others.index(j), m + k)
            for k, j in enumerate(self.nullable_continuous)
        )

    def cube_codes(self) -> tuple[int, ...]:
        """Codes of each cube column (`Rows.codes`): levels of a level column, 2 for a missing
        flag, the whole codes of an integer or date column, 0 for a float or datetime one."""
        others = [self.levels(j) if self.columns[j].kind in DISCRETE else 0 for j in self._others]
        levels = [self.levels(j) for j in self.level_columns]
        return (*levels, *(2,) * len(self.nullable_continuous), *others)

    def cube_coded_missing(self) -> tuple[int, ...]:
        """Cube columns of nullable integer and date columns: their last code is "missing"
        (`Rows.coded_missing`)."""
        m, f = len(self.level_columns), len(self.nullable_continuous)
        return tuple(
            m + f + k
            for k, j in enumerate(self._others)
            if self.columns[j].nullable and self.columns[j].kind in DISCRETE
        )

    def cube_column(self, j: int) -> int:
        """The cube column holding column j's value (`to_cube`'s order)."""
        if j in self.level_columns:
            return self.level_columns.index(j)
        return len(self.level_columns) + len(self.nullable_continuous) + self._others.index(j)

    def cube_clocks(self) -> tuple[Clock, ...]:
        """The wall-clock facts of each date and datetime column in the cube (`Rows.clocks`)."""
        m, f = len(self.level_columns), len(self.nullable_continuous)
        flag_of = dict(self.cube_flags())
        lo, width = self._interval()
        out = []
        for k, j in enumerate(self._others):
            col = self.columns[j]
            if col.kind not in ("date", "datetime"):
                continue
            c = m + f + k
            date = col.kind == "date"
            first, last = (math.ceil(col.lower), math.floor(col.upper)) if date else (0, 0)
            missing_from = 2.0
            if date and col.nullable:  # the last code is "missing"
                missing_from = float((last + 0.5 - lo[j]) / width[j])
            out.append(
                Clock(
                    column=c,
                    lower=float(lo[j]),
                    width=float(width[j]),
                    date=date,
                    timezone=col.timezone,
                    step=coltypes.RESOLUTIONS["day"] if date else col.step,
                    first=float(first) if date else float(col.lower),
                    last=float(last) if date else float(col.upper),
                    flag=flag_of.get(c),
                    missing_from=missing_from,
                )
            )
        return tuple(out)

    def to_cube(self, values: np.ndarray) -> np.ndarray:
        """The mechanisms' cube (`cube_dim` columns): the level columns, then a missing flag
        (a two-slot level column: 1/4 a value, 3/4 missing) per nullable float or datetime
        column, all split first (`partition`, "Level columns first"), then the other columns
        in their order, a missing value at 0 (a public constant)."""
        unit = self.to_unit(values)
        if not self.level_columns and not self.nullable_continuous:
            return unit  # the columns in their order: no copy
        flags = []
        for j in self.nullable_continuous:
            missing = values[:, j] > self.columns[j].upper
            flags.append(np.where(missing, 0.75, 0.25))
            unit[:, j] = np.where(missing, 0.0, unit[:, j])
        flags = [np.column_stack(flags)] if flags else []
        return np.hstack([unit[:, list(self.level_columns)], *flags, unit[:, self._others]])

    def cube_to_unit(self, points: np.ndarray) -> np.ndarray:
        """Points of the mechanisms' cube back in the table's columns (`from_unit`'s); a
        flagged missing value is NaN."""
        m, f = len(self.level_columns), len(self.nullable_continuous)
        unit = np.empty((points.shape[0], len(self.columns)))
        unit[:, list(self.level_columns)] = points[:, :m]
        unit[:, self._others] = points[:, m + f :]
        for k, j in enumerate(self.nullable_continuous):
            unit[points[:, m + k] >= 0.5, j] = np.nan
        return unit

    def to_mixed(self, values: np.ndarray) -> np.ndarray:
        """An isometric embedding of the mixed metric into L-infinity: each level column as the
        ceil(log2 L) bits of its level (two levels differ in some bit: distance exactly 1), the
        others as in `to_unit`, a nullable float/datetime as its value (0 if missing) and a
        missing flag. For evaluate's joint W1 in the metric."""
        unit = self.to_unit(values)
        parts = []
        for j in range(len(self.columns)):
            if j in self.nullable_continuous:  # the value (missing at 0) and a missing flag
                missing = values[:, j] > self.columns[j].upper
                parts.append(np.column_stack([np.where(missing, 0.0, unit[:, j]), missing]))
            elif j in self.level_columns:  # the level's bits: distinct levels differ in one
                size, slots = self.levels(j), self.slots(j)
                code = np.clip(np.floor(unit[:, j] * slots), 0, slots - 1).astype(np.int64)
                level = code * size // slots
                bits = max(size - 1, 0).bit_length()
                parts.append((level[:, None] >> np.arange(bits)) & 1)
            else:
                parts.append(unit[:, j : j + 1])
        return np.hstack(parts) if parts else unit

    def _interval(self) -> tuple[np.ndarray, np.ndarray]:
        pad = np.array([0.5 if c.kind in DISCRETE else 0.0 for c in self.columns])
        lo = np.array([c.lower for c in self.columns], dtype=np.float64)
        hi = np.array(
            [c.upper if c.kind in CONTINUOUS else c.code_upper for c in self.columns],
            dtype=np.float64,
        )
        lo = np.where(pad > 0, np.ceil(lo), lo) - pad
        hi = np.where(pad > 0, np.floor(hi), hi) + pad
        return lo, hi - lo

    @property
    def unit_widths(self) -> np.ndarray:
        """Length in original units of the interval each column maps onto [0, 1]."""
        return self._interval()[1]

    def to_unit(self, values: np.ndarray) -> np.ndarray:
        """Rescale with the public bounds and clamp onto [0,1] (handles +-inf and huge values).
        A missing value of a nullable float or datetime column lands on 1 with the upper bound
        here; `to_cube` and `to_mixed` keep it apart."""
        lo, width = self._interval()
        with np.errstate(over="ignore", invalid="ignore"):
            unit = values - lo
            unit /= width
        np.clip(unit, 0.0, 1.0, out=unit)
        for j in self.level_columns:  # level i -> the middle of its first slot
            size, slots = self.levels(j), self.slots(j)
            i = np.clip(np.floor(unit[:, j] * size), 0, size - 1).astype(np.int64)
            unit[:, j] = (-(-i * slots // size) + 0.5) / slots
        return unit

    def metric(self) -> dict:
        """The metric the unit-cube W1 bound is stated on, for the report (docs/privacy.md)."""
        codes = {c.name: self.levels(j) for j, c in enumerate(self.columns) if c.kind in DISCRETE}
        slots = {self.columns[j].name: self.slots(j) for j in self.level_columns}
        return {
            "definition": METRIC_TEXT,
            "codes_per_discrete_column": codes,
            "unit_cube_embedding": "a float, datetime, integer or date column affinely by its "
            "public range (codes on equal bins); level i of a boolean or category column with L "
            "levels at the middle of slot ceil(iP/L) of P = 2^ceil(log2 L) equal slots",
            "slots_per_level_column": slots,
            "bound": "pmm (level columns split first) states its bound B in this metric, and "
            "the released table is within min(2 B, B + max over integer and date columns of "
            "1/(2L)) of the input; for a bound B on the unit cube (the other mechanisms, which "
            "split the embedding), within min(1, 2 P B) with P the most slots of a level column "
            "(1 without one); plus 5e-7 for the rounding of float columns",
        }

    def decimals(self) -> dict[str, int]:
        """Decimal places written for each float column: enough to resolve OUTPUT_RESOLUTION of
        its public range (e.g. 4 for a range of 120, 0 for 500000). Finer digits would only
        carry the sampler's bits, not information, and triple a CSV's size."""
        return {
            c.name: max(0, math.ceil(-math.log10(float(w) * OUTPUT_RESOLUTION)))
            for c, w in zip(self.columns, self.unit_widths, strict=True)
            if c.kind == "float"
        }

    def output_schema(self, metadata: dict[str, str] | None = None) -> pa.Schema:
        """The released table's schema, from the declarations alone (no rows needed)."""
        schema = self.from_unit(np.zeros((0, len(self.columns)))).schema
        return schema.with_metadata(metadata) if metadata else schema

    def written_codes(self, unit: np.ndarray, columns: list[int] | None = None) -> np.ndarray:
        """The codes `from_unit` writes for points of [0,1]^d (the given columns, default all):
        a level's index, whole codes for integer and date columns, whole seconds for datetime
        ones (whole minutes, hours or days of their wall clock with a declared resolution),
        float values rounded to `decimals()`, all inside their bounds; NaN for missing.

        Column-major (each column's codes contiguous: the per-column work and the output's
        arrays read memory in order)."""
        columns = list(range(len(self.columns))) if columns is None else columns
        lo, width = self._interval()
        decimals = self.decimals()
        values = np.empty((len(columns), unit.shape[0]))
        for k, j in enumerate(columns):
            col, v = self.columns[j], values[k]
            np.multiply(unit[:, j], width[j], out=v)
            v += lo[j]
            if j in self.level_columns:  # a slot's level (every slot has one)
                size, slots = self.levels(j), self.slots(j)
                slot = np.clip(np.floor(unit[:, j] * slots), 0, slots - 1).astype(np.int64)
                v[:] = slot * size // slots
            if col.kind in DISCRETE:
                top = math.floor(col.code_upper)
                v += 0.5
                np.floor(v, out=v)
                np.clip(v, math.ceil(col.lower), top, out=v)
                if col.nullable:
                    v[v == top] = np.nan
            elif col.kind == "datetime":  # NaN: flagged missing (`cube_to_unit`)
                np.clip(v, col.lower, col.upper, out=v)
                np.round(v, out=v)
                if col.step > 1:  # on its declared resolution: post-processing, no privacy cost
                    v[:] = coltypes.on_resolution(v, col.step, col.timezone, col.lower, col.upper)
            else:
                np.round(v, decimals[col.name], out=v)
                np.clip(v, col.lower, col.upper, out=v)
        return values.T

    def unit_of_codes(self, j: int, codes: np.ndarray) -> np.ndarray:
        """Unit coordinates of column j (not a level column) that `from_unit` writes as these
        in-bounds codes (the inverse of `written_codes`)."""
        lo, width = self._interval()
        return (codes - lo[j]) / width[j]

    def from_unit(self, unit: np.ndarray) -> pa.Table:
        """Back to original units (`written_codes`): integer columns rounded, float columns
        rounded to `decimals()`, all kept inside their bounds; levels, dates and missing values
        from their codes (`coltypes`)."""
        codes = self.written_codes(unit)
        arrays = {}
        for j, col in enumerate(self.columns):
            missing = np.isnan(codes[:, j])
            if col.kind in DISCRETE:
                if col.kind == "integer" and not col.nullable:
                    arrays[col.name] = pa.array(codes[:, j].astype(np.int64))
                else:
                    arrays[col.name] = coltypes.output_array(codes[:, j], missing, col)
            elif col.kind == "datetime":
                seconds = np.where(missing, col.lower, codes[:, j])
                arrays[col.name] = coltypes.datetime_array(seconds, col.timezone, missing)
            else:
                arrays[col.name] = pa.array(codes[:, j], mask=missing if missing.any() else None)
        return pa.table(arrays)
