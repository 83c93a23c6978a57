"""What a declared column is: its kind, its public bounds, and where each came from.

The domain is declared, never read from values: kinds and bounds come from the user's flags and
schema file, or from the input file's own structure (a Parquet column's declared type), so one
row added to the table cannot change them. Bounds are public facts (`--bounds col=lo:hi`,
`--schema`) or the output of a DP estimate (`mechanisms.bounds`); never the data's own min or
max, which would leak the most extreme rows.
"""

from __future__ import annotations

import math
import shlex
from dataclasses import dataclass

import pyarrow as pa

from dpsynth_cli import coltypes
from dpsynth_cli.errors import UsageError

KINDS = ("float", "integer", "boolean", "category", "date", "datetime")
# Kinds whose values are whole codes (integers, levels, days): each owns an equal-width bin of the
# unit interval, and a nullable one has "missing" as one more code past the upper one.
DISCRETE = ("integer", "boolean", "category", "date")
NULLABLE = KINDS
# Continuous kinds: a nullable one gets a hidden "missing" level column in the mechanisms' cube.
CONTINUOUS = ("float", "datetime")
# Kinds whose codes are levels, not numbers: the discrete metric, and top-level splits.
LEVEL_KINDS = ("boolean", "category")
DRAFT_HINT = "`dpsynth schema draft INPUT > schema.json` writes a schema to fill in"


@dataclass(frozen=True)
class ColumnSpec:
    """One chosen column: its name, kind, public bounds and where the bounds came from."""

    name: str
    kind: str
    lower: float | None = None
    upper: float | None = None
    source: str = "declared"
    kind_source: str = "schema"
    levels: tuple[str, ...] | None = None  # category: the declared levels, in order
    other: str | None = None  # category: the level an undeclared value maps to
    nullable: bool = False  # missing is a level of its own
    timezone: str | None = None  # datetime: the zone of naive cells and of the output
    spellings: tuple[str, str] | None = None  # boolean: the declared (false, true) text
    decimal: str = "."  # float/integer text cells: the decimal separator ("," from --decimal)
    resolution: str | None = None  # datetime: "second" (default), "minute", "hour" or "day"

    @property
    def has_bounds(self) -> bool:
        return self.lower is not None and self.upper is not None

    @property
    def step(self) -> int:
        """A datetime column's resolution in seconds (1 unless it declares a coarser one)."""
        return coltypes.RESOLUTIONS[self.resolution or "second"]

    @property
    def code_upper(self) -> float:
        """The largest code: `upper`, or past it (missing) for a nullable column: one past for
        whole codes, one range width past (at least 1) for a continuous column."""
        if not self.nullable:
            return self.upper
        if self.kind in CONTINUOUS:
            return self.upper + max(self.upper - self.lower, 1.0)
        return self.upper + 1

    def to_json(self) -> dict:
        out = {
            "type": self.kind,
            "type_source": self.kind_source,
            "lower": self.lower,
            "upper": self.upper,
            "bounds_source": self.source,
        }
        if self.kind in ("date", "datetime"):
            out["lower"], out["upper"] = (
                coltypes.bound_text(v, self.kind, self.timezone) for v in (self.lower, self.upper)
            )
        if self.kind in ("boolean", "category"):
            del out["lower"], out["upper"], out["bounds_source"]
        levels = list(self.levels or ()) if self.kind == "category" else None
        extra = {
            "levels": levels,
            "other": self.other,
            "timezone": self.timezone,
            "resolution": self.resolution,  # a declaration (schema_file reads it back)
        }
        out.update({k: v for k, v in extra.items() if v})
        if self.kind == "boolean":  # what the output holds: a declaration, public
            false, true = self.spellings or ("false", "true")
            if self.spellings:  # as a schema declares them (evaluate --from-report reads them)
                out.update({"true": true, "false": false})
            out["written"] = {"true": true, "false": false}
            out["written_source"] = "schema" if self.spellings else "default"
        if self.nullable:
            out["nullable"] = True
        return out


def check_bounds(name: str, lower: float, upper: float, where: str) -> tuple[float, float]:
    """Bounds must be finite numbers with lower < upper."""
    if not (math.isfinite(lower) and math.isfinite(upper)):
        raise UsageError(f"{where}: bounds of column '{name}' must be finite numbers")
    if lower >= upper:
        raise UsageError(f"{where}: lower bound of column '{name}' must be below its upper bound")
    return float(lower), float(upper)


def bounds_flag(name: str) -> str:
    """The --bounds flag to suggest for a column, quoted for a shell when the name needs it
    (a space, a quote): copied from a message, it must work as printed."""
    return "--bounds " + shlex.quote(f"{name}=LOWER:UPPER")


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


def arrow_kind(dtype: pa.DataType) -> str | None:
    """The kind a file's declared column type implies: 'integer', 'float', 'boolean', or None
    (not numeric)."""
    if pa.types.is_boolean(dtype):
        return "boolean"
    if pa.types.is_integer(dtype):
        return "integer"
    if pa.types.is_floating(dtype) or pa.types.is_decimal(dtype):
        return "float"
    return None


def arrow_time_kind(dtype: pa.DataType) -> str | None:
    """'date' or 'datetime' for a file's date / timestamp column (bounds must be declared)."""
    if pa.types.is_date(dtype):
        return "date"
    if pa.types.is_timestamp(dtype):
        return "datetime"
    return None


def is_text(dtype: pa.DataType) -> bool:
    return pa.types.is_string(dtype) or pa.types.is_large_string(dtype)
