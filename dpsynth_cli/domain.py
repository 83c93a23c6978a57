"""Columns, public bounds and the map between a table and the unit cube [0,1]^d.

Bounds are public facts the user declares (`--bounds col=lo:hi`, `--schema`), or the output of
a DP estimate (`mechanisms.bounds`); never the data's own min or max, which would leak the most
extreme rows. Values outside the bounds (including +-inf) are clamped onto them; rows with a
missing value in a chosen column are dropped (how many is never reported: it is private).

Schema file (JSON), every key but "columns" optional:

    {"columns": {"age":    {"type": "integer", "lower": 0, "upper": 120},
                 "income": {"type": "float",   "lower": 0, "upper": 500000}}}

"type" is "integer" or "float" (default: the file's column type); a column listed without bounds
gets a DP bounds estimate. When neither --columns nor a schema names columns, every numeric
column of the input is used.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pyarrow as pa

from dpsynth_cli.errors import DataError, UsageError

KINDS = ("integer", "float")


@dataclass(frozen=True)
class ColumnSpec:
    """One chosen column: its name, kind, public bounds and where the bounds came from."""

    name: str
    kind: str
    lower: float | None = None
    upper: float | None = None
    source: str = "declared"

    @property
    def has_bounds(self) -> bool:
        return self.lower is not None and self.upper is not None

    def to_json(self) -> dict:
        return {
            "type": self.kind,
            "lower": self.lower,
            "upper": self.upper,
            "bounds_source": self.source,
        }


def check_bounds(name: str, lower: float, upper: float, where: str) -> tuple[float, float]:
    """Bounds must be finite numbers with lower < upper."""
    if not (math.isfinite(lower) and math.isfinite(upper)):
        raise UsageError(f"{where}: bounds of column '{name}' must be finite numbers")
    if lower >= upper:
        raise UsageError(f"{where}: lower bound of column '{name}' must be below its upper bound")
    return float(lower), float(upper)


def parse_bounds_flag(text: str) -> tuple[str, float, float]:
    """`col=lo:hi` from --bounds; split at the last '=', so a column name may contain '='."""
    name, sep, rng = text.rpartition("=")
    lo_text, colon, hi_text = rng.partition(":")
    if not sep or not name or not colon:
        raise UsageError(f"--bounds '{text}': expected COLUMN=LOWER:UPPER, e.g. age=0:120")
    try:
        lower, upper = float(lo_text), float(hi_text)
    except ValueError:
        raise UsageError(f"--bounds '{text}': LOWER and UPPER must be numbers") from None
    return (name, *check_bounds(name, lower, upper, "--bounds"))


def load_schema(path: str) -> dict[str, ColumnSpec]:
    """Read a schema file (format in the module docstring) into column specs."""
    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"--schema {path}: file not found") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UsageError(
            f"--schema {path}: not a readable JSON file ({type(exc).__name__})"
        ) from None
    columns = raw.get("columns") if isinstance(raw, dict) else None
    if not isinstance(columns, dict) or not columns:
        raise UsageError(f"--schema {path}: expected an object with a non-empty 'columns' object")
    return {name: _schema_column(path, name, spec) for name, spec in columns.items()}


def _schema_column(path: str, name: str, spec: object) -> ColumnSpec:
    if not isinstance(spec, dict):
        raise UsageError(f"--schema {path}: column '{name}' must be an object")
    kind = spec.get("type", "")
    if kind and kind not in KINDS:
        raise UsageError(f"--schema {path}: column '{name}' type must be 'integer' or 'float'")
    lower, upper = spec.get("lower"), spec.get("upper")
    if (lower is None) != (upper is None):
        raise UsageError(f"--schema {path}: column '{name}' needs both 'lower' and 'upper'")
    if lower is not None:
        if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in (lower, upper)):
            raise UsageError(f"--schema {path}: bounds of column '{name}' must be numbers")
        lower, upper = check_bounds(name, lower, upper, f"--schema {path}")
    return ColumnSpec(name, kind, lower, upper)


def arrow_kind(dtype: pa.DataType) -> str | None:
    """'integer', 'float', or None for a non-numeric Arrow type."""
    if pa.types.is_integer(dtype) or pa.types.is_boolean(dtype):
        return "integer"
    if pa.types.is_floating(dtype) or pa.types.is_decimal(dtype):
        return "float"
    return None


def requested_columns(
    columns_flag: str | None, schema: dict[str, ColumnSpec] | None
) -> list[str] | None:
    """Column names the user asked for (--columns wins over the schema); None means all numeric."""
    if columns_flag is not None:
        names = [c.strip() for c in columns_flag.split(",") if c.strip()]
        if not names:
            raise UsageError("--columns: give at least one column name, e.g. --columns age,income")
        if len(set(names)) != len(names):
            raise UsageError("--columns: a column is named twice")
        return names
    return list(schema) if schema else None


def resolve_columns(
    table_schema: pa.Schema,
    names: list[str] | None,
    schema: dict[str, ColumnSpec] | None,
    bounds: dict[str, tuple[float, float]],
    source: str,
) -> list[ColumnSpec]:
    """Column specs with kind and declared bounds (flags override the schema file)."""
    if names is None:
        names = [f.name for f in table_schema if arrow_kind(f.type) is not None]
        if not names:
            raise DataError(f"{source}: no numeric columns (choose columns with --columns)")
    for name in bounds:
        if name not in names:
            raise UsageError(f"--bounds: column '{name}' is not among the chosen columns")
    specs = []
    for name in names:
        kind = arrow_kind(table_schema.field(name).type)
        if kind is None:
            raise DataError(
                f"{source}: column '{name}' is not numeric; "
                "only numeric columns are supported for now"
            )
        spec = (schema or {}).get(name) or ColumnSpec(name, kind)
        spec = replace(spec, kind=spec.kind or kind)
        if name in bounds:
            spec = replace(spec, lower=bounds[name][0], upper=bounds[name][1], source="declared")
        specs.append(spec)
    return specs


def value_matrix(table: pa.Table, specs: list[ColumnSpec]) -> np.ndarray:
    """The chosen columns as float64 (n, d), rows with any missing value (null or NaN) dropped."""
    cols = [table.column(s.name).to_numpy(zero_copy_only=False).astype(np.float64) for s in specs]
    if not cols:
        return np.empty((0, 0))
    values = np.column_stack(cols) if cols[0].size else np.empty((0, len(cols)))
    return values[~np.isnan(values).any(axis=1)]


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

    def _interval(self) -> tuple[np.ndarray, np.ndarray]:
        pad = np.array([0.5 if c.kind == "integer" else 0.0 for c in self.columns])
        lo = np.array([c.lower for c in self.columns], dtype=np.float64)
        hi = np.array([c.upper for c in self.columns], dtype=np.float64)
        lo = np.where(pad > 0, np.ceil(lo), lo) - pad
        hi = np.where(pad > 0, np.floor(hi), hi) + pad
        return lo, hi - lo

    @property
    def unit_widths(self) -> np.ndarray:
        """Length in original units of the interval each column maps onto [0, 1]."""
        return self._interval()[1]

    def to_unit(self, values: np.ndarray) -> np.ndarray:
        """Rescale with the public bounds and clamp onto [0,1] (handles +-inf and huge values)."""
        lo, width = self._interval()
        with np.errstate(over="ignore", invalid="ignore"):
            unit = (values - lo) / width
        return np.clip(unit, 0.0, 1.0)

    def from_unit(self, unit: np.ndarray) -> pa.Table:
        """Back to original units; integer columns rounded and kept inside their bounds."""
        lo, width = self._interval()
        values = lo + unit * width
        arrays = {}
        for j, col in enumerate(self.columns):
            if col.kind == "integer":
                ints = np.clip(
                    np.floor(values[:, j] + 0.5), math.ceil(col.lower), math.floor(col.upper)
                )
                arrays[col.name] = pa.array(ints.astype(np.int64))
            else:
                arrays[col.name] = pa.array(np.clip(values[:, j], col.lower, col.upper))
        return pa.table(arrays)
