"""Columns, public bounds and the map between a table and the unit cube [0,1]^d.

The domain is declared, never read from values. Which columns, which types and which bounds come
from the user's flags and schema file, or from the input file's own structure (a CSV header's
names, a Parquet file's declared column types): one row added to the table cannot change them.
Bounds are public facts the user declares (`--bounds col=lo:hi`, `--schema`), or the output of a
DP estimate (`mechanisms.bounds`); never the data's own min or max, which would leak the most
extreme rows. Each cell is parsed with its column's declared type: a cell that is not a number
(text, an empty field, NA, NaN) is missing, and rows with a missing value in a chosen column are
dropped (how many is never reported: it is private). Values outside the bounds (including +-inf
and numbers beyond the int64 or float range) are clamped onto them.

Schema file (JSON), every key but "columns" optional:

    {"columns": {"age":    {"type": "integer", "lower": 0, "upper": 120},
                 "income": {"type": "float",   "lower": 0, "upper": 500000}}}

"type" is "float", "integer", "boolean", "category" (with its public "levels" and an optional
"other" level for undeclared values), "date" or "datetime" (ISO "lower"/"upper", optional
"timezone"); "nullable": true makes missing a level of its own (any kind). Any other key (a typo
such as "lowr") is a usage error (`COLUMN_KEYS`); keys that start with "_" are comments. Cells of
these types are read by `coltypes` (docs/privacy.md, "Mixed tables"). Without a type a Parquet
column's declared type decides, and a CSV column (whose text declares no type) is "float" unless
`--integer` names it. A column listed without bounds gets a DP bounds estimate. An optional
"constraints" list declares linear constraints between float, integer, date and datetime columns
(`constraints`, `load_constraints`). The chosen columns are those of --columns, else the
schema's, else those that --bounds and --integer name, else every column of a CSV header or
every numeric column a Parquet file declares.
"""

from __future__ import annotations

import difflib
import json
import math
import shlex
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dpsynth_cli import coltypes
from dpsynth_cli.constraints import Constraint, parse_constraints
from dpsynth_cli.errors import DataError, UsageError

KINDS = ("float", "integer", "boolean", "category", "date", "datetime")
# Kinds whose values are whole codes (integers, levels, days): each owns an equal-width bin of the
# unit interval, and a nullable one has "missing" as one more code past the upper one.
DISCRETE = ("integer", "boolean", "category", "date")
NULLABLE = KINDS
# The keys a schema column of each type may have ("": no type; the file's type decides).
COLUMN_KEYS: dict[str, tuple[str, ...]] = {
    "": ("type", "lower", "upper", "nullable"),
    "float": ("type", "lower", "upper", "nullable"),
    "integer": ("type", "lower", "upper", "nullable"),
    "boolean": ("type", "nullable"),
    "category": ("type", "levels", "other", "nullable"),
    "date": ("type", "lower", "upper", "nullable"),
    "datetime": ("type", "lower", "upper", "timezone", "nullable"),
}
# Continuous kinds: a nullable one gets a hidden "missing" level column in the mechanisms' cube.
CONTINUOUS = ("float", "datetime")
# Kinds whose codes are levels, not numbers: the discrete metric, and top-level splits.
LEVEL_KINDS = ("boolean", "category")
METRIC_TEXT = (
    "rho(x, y) = max over columns: a boolean or category column contributes 1 if the levels "
    "differ ('missing' is a level if nullable), else 0 (the discrete metric); a float or "
    "datetime column its difference divided by its public range, and 1 between missing and a "
    "value if nullable; an integer or date column with L codes (then 'missing' if nullable) "
    "|i - j| / L"
)
DRAFT_HINT = "`dpsynth schema draft INPUT > schema.json` writes a schema to fill in"
# Float outputs are rounded to this fraction of the column's public range: far below the error of
# any mechanism here (W1 in the unit cube is rarely below 1e-3), and it keeps files small.
OUTPUT_RESOLUTION = 1e-6


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

    @property
    def has_bounds(self) -> bool:
        return self.lower is not None and self.upper is not None

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
        extra = {"levels": levels, "other": self.other, "timezone": self.timezone}
        out.update({k: v for k, v in extra.items() if v})
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


def load_schema(path: str) -> dict[str, ColumnSpec]:
    """Read a schema file (format in the module docstring) into column specs."""
    columns = _schema_json(path).get("columns")
    return {name: schema_column(path, name, spec) for name, spec in columns.items()}


def load_constraints(path: str) -> tuple[Constraint, ...]:
    """The schema file's declared constraints between its columns (`constraints`), checked
    against its columns; () when it declares none."""
    raw = _schema_json(path).get("constraints")
    return parse_constraints(raw, load_schema(path), f"--schema {path}")


class InlineSchema(str):
    """A schema given as a Python value (the API's `schema=` dict) where a --schema path goes:
    its text is how messages name it; `value` is the dict, checked like a file's JSON."""

    value: object

    def __new__(cls, value: object) -> InlineSchema:
        made = super().__new__(cls, "(schema dict)")
        made.value = value
        return made


def _schema_json(path: str) -> dict:
    """A schema file's JSON object, with a non-empty "columns" object (usage errors otherwise)."""
    try:
        if isinstance(path, InlineSchema):
            raw = json.loads(json.dumps(path.value))  # a copy, with JSON's types
        else:
            raw = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"--schema {path}: file not found") from None
    except (OSError, UnicodeDecodeError, ValueError, TypeError) as exc:
        raise UsageError(
            f"--schema {path}: not a readable JSON file ({type(exc).__name__})"
        ) from None
    columns = raw.get("columns") if isinstance(raw, dict) else None
    if not isinstance(columns, dict) or not columns:
        raise UsageError(f"--schema {path}: expected an object with a non-empty 'columns' object")
    _check_keys(raw, ("columns", "constraints"), f"--schema {path}")
    for name, spec in columns.items():
        kind = spec.get("type", "") if isinstance(spec, dict) else None
        if isinstance(kind, str) and kind in COLUMN_KEYS:  # another type is refused below
            _check_keys(spec, COLUMN_KEYS[kind], f"--schema {path}: column '{name}'", kind)
    return raw


def schema_column(path: str, name: str, spec: object) -> ColumnSpec:
    where = f"--schema {path}: column '{name}'"
    if not isinstance(spec, dict):
        raise UsageError(f"{where} must be an object")
    for key, value in spec.items():
        if isinstance(value, str) and value.startswith("FILL IN"):
            raise UsageError(f"{where}: '{key}' still says FILL IN: replace it with a public fact")
    kind = spec.get("type", "")
    if kind and kind not in KINDS:
        raise UsageError(f"{where}: type must be one of {', '.join(KINDS)} ({DRAFT_HINT})")
    nullable = spec.get("nullable", False)
    if not isinstance(nullable, bool):
        raise UsageError(f"{where}: 'nullable' must be true or false")
    if nullable and kind not in NULLABLE:
        raise UsageError(
            f"{where}: 'nullable' is supported for {', '.join(NULLABLE)} columns (declare the "
            "type); rows with a missing value in other columns are dropped"
        )
    if kind in ("boolean", "category"):
        return _level_column(where, name, kind, spec, nullable)
    if kind in ("date", "datetime"):
        return _time_column(where, name, kind, spec, nullable)
    lower, upper = spec.get("lower"), spec.get("upper")
    if (lower is None) != (upper is None):
        raise UsageError(f"{where} needs both 'lower' and 'upper'")
    if lower is not None:
        if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in (lower, upper)):
            raise UsageError(f"--schema {path}: bounds of column '{name}' must be numbers")
        lower, upper = check_bounds(name, lower, upper, f"--schema {path}")
    elif nullable:
        raise UsageError(
            f"{where}: a nullable {kind or 'float'} column needs declared 'lower' and 'upper'"
        )
    return ColumnSpec(name, kind, lower, upper, nullable=nullable)


def _check_keys(spec: dict, allowed: tuple[str, ...], where: str, kind: str | None = None) -> None:
    """A key the schema does not know (a typo such as "lowr" or "nulable") is an error, never
    ignored: ignored, it would silently spend epsilon on a DP bounds estimate or change which
    rows are kept. Keys that start with '_' are comments. `kind`: the column's type, for keys
    that exist but do not apply to it (e.g. 'levels' on a float column)."""
    extra = [k for k in spec if not k.startswith("_") and k not in allowed]
    if not extra:
        return
    known = {k for keys in COLUMN_KEYS.values() for k in keys} if kind is not None else set()
    misplaced = [k for k in extra if k in known]
    if misplaced:
        what = f"a {kind} column" if kind else "a column without a 'type'"
        raise UsageError(
            f"{where}: {what} takes no {_quoted(misplaced)} (its keys: {', '.join(allowed)})"
        )
    hints = []
    for key in extra:
        close = difflib.get_close_matches(key, sorted(known | set(allowed)), n=1)
        hints.append(f"'{key}'" + (f" (did you mean '{close[0]}'?)" if close else ""))
    keys = "key" if len(extra) == 1 else "keys"
    raise UsageError(
        f"{where}: unknown {keys} {', '.join(hints)}; allowed: {', '.join(allowed)} "
        "(keys starting with '_' are comments)"
    )


def _quoted(names: list[str]) -> str:
    return ", ".join(f"'{n}'" for n in names)


def _level_column(where: str, name: str, kind: str, spec: dict, nullable: bool) -> ColumnSpec:
    """A boolean (levels false, true) or a category with its public list of levels."""
    if kind == "boolean":
        if "levels" in spec or "other" in spec:
            raise UsageError(f"{where}: a boolean column takes no 'levels' or 'other'")
        levels: tuple[str, ...] = ("false", "true")
    else:
        raw = spec.get("levels")
        if not isinstance(raw, list) or not raw:
            raise UsageError(
                f"{where}: a category column needs its public list of levels, "
                f'"levels": ["a", "b", ...], in the schema ({DRAFT_HINT}); levels read from '
                "the data would not be private"
            )
        if not all(isinstance(v, str) and v.strip() == v and v for v in raw):
            raise UsageError(f"{where}: levels must be non-empty strings without outer spaces")
        if len(set(raw)) != len(raw):
            raise UsageError(f"{where}: a level is listed twice")
        levels = tuple(raw)
    other = spec.get("other")
    if other is not None and other not in levels:
        raise UsageError(f"{where}: 'other' must be one of its levels")
    return ColumnSpec(
        name, kind, 0.0, float(len(levels) - 1), levels=levels, other=other, nullable=nullable
    )


def _time_column(where: str, name: str, kind: str, spec: dict, nullable: bool) -> ColumnSpec:
    """A date or datetime column on declared ISO bounds (and, for datetime, a time zone)."""
    lower, upper = spec.get("lower"), spec.get("upper")
    if lower is None or upper is None:
        raise UsageError(f"{where}: a {kind} column needs 'lower' and 'upper' (ISO strings)")
    tz = spec.get("timezone")
    if kind == "date" and tz is not None:
        raise UsageError(f"{where}: a date column takes no 'timezone'")
    if kind == "datetime":
        tz = coltypes.zone_of(lower) if tz is None else tz
        if not isinstance(tz, str | None):
            raise UsageError(f"{where}: 'timezone' must be a string such as \"Europe/Paris\"")
        tz = coltypes.check_timezone(tz, where) if tz else None
    lo, hi = (coltypes.parse_iso_bound(v, kind, tz, where) for v in (lower, upper))
    lo, hi = check_bounds(name, lo, hi, where)
    return ColumnSpec(name, kind, lo, hi, nullable=nullable, timezone=tz)


# A number as `value_matrix` reads it from text (surrounding white space is trimmed first). Every
# string this matches, Arrow's string -> float64 cast accepts, so parsing never fails on a cell.
NUMBER_PATTERN = (
    r"^[+-]?(([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?"
    r"|[iI][nN][fF]([iI][nN][iI][tT][yY])?|[nN][aA][nN])$"
)


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


def requested_columns(
    columns_flag: str | None,
    schema: dict[str, ColumnSpec] | None,
    flagged: list[str] | None = None,
) -> tuple[list[str] | None, str]:
    """The columns the user declared, and by what: --columns, else the schema's columns, else
    the columns that --bounds / --integer name (`flagged`, in order); None: the file decides."""
    if columns_flag is not None:
        names = parse_names(columns_flag, "--columns")
        if not names:
            raise UsageError("--columns: give at least one column name, e.g. --columns age,income")
        return names, "--columns"
    if schema:
        return list(schema), "schema"
    if flagged:
        return list(dict.fromkeys(flagged)), "--bounds/--integer"
    return None, ""


@dataclass(frozen=True)
class Declared:
    """What --columns, --schema, --bounds and --integer declare (read before any row)."""

    names: list[str] | None  # None: the file's structure decides
    columns_from: str
    schema: dict[str, ColumnSpec] | None
    bounds: dict[str, tuple[float, float]]
    integers: list[str]
    constraints: tuple[Constraint, ...] = ()

    def resolve(
        self,
        table_schema: pa.Schema,
        *,
        typed: bool,
        all_columns: list[str] | None = None,
        numbers_only: str | None = None,
    ) -> ColumnChoice:
        """`resolve_columns` with these declarations. `numbers_only` names a command that reads
        float and integer columns only (pca, online-replay): a Parquet boolean is then the
        integer 0/1 as before issue 15, and another declared type is a usage error."""
        choice = resolve_columns(
            table_schema,
            self.names,
            self.schema,
            self.bounds,
            typed=typed,
            integers=self.integers,
            columns_from=self.columns_from,
            all_columns=all_columns,
        )
        if numbers_only is None:
            return choice
        specs, other = [], []
        for s in choice.specs:
            if s.kind == "boolean" and s.kind_source == "Parquet schema":
                s = ColumnSpec(s.name, "integer", kind_source=s.kind_source)
            elif s.kind not in ("float", "integer") or s.nullable:
                other.append(f"'{s.name}' is {'nullable' if s.nullable else s.kind}")
            specs.append(s)
        if other:  # every offending column at once, from the declarations only
            raise UsageError(
                f"{numbers_only} reads float and integer columns: {', '.join(other)}; leave "
                f"{'it' if len(other) == 1 else 'them'} out with --columns"
            )
        return replace(choice, specs=specs)


def declare_columns(
    columns: str | None, schema: str | None, bounds: list[str] | None, integer: str | None = None
) -> Declared:
    """The column flags of synth, pca and online-replay, parsed once the same way."""
    specs = load_schema(schema) if schema else None
    declared = {name: (lo, hi) for name, lo, hi in map(parse_bounds_flag, bounds or [])}
    integers = parse_names(integer, "--integer")
    names, columns_from = requested_columns(columns, specs, [*declared, *integers])
    constraints = load_constraints(schema) if schema else ()
    return Declared(names, columns_from, specs, declared, integers, constraints)


def parse_names(text: str | None, flag: str) -> list[str]:
    """A comma-separated list of column names from a flag; a name given twice is an error."""
    names = [c.strip() for c in (text or "").split(",") if c.strip()]
    if len(set(names)) != len(names):
        raise UsageError(f"{flag}: a column is named twice")
    return names


@dataclass(frozen=True)
class ColumnChoice:
    """The chosen columns and, for the report, where they came from and what was left out."""

    specs: list[ColumnSpec]
    columns_from: str
    left_out: dict[str, str]

    def to_json(self) -> dict:
        return {
            "columns_from": self.columns_from,
            "types_from": {s.name: s.kind_source for s in self.specs},
            "left_out": self.left_out,
        }


def resolve_columns(
    table_schema: pa.Schema,
    names: list[str] | None,
    schema: dict[str, ColumnSpec] | None,
    bounds: dict[str, tuple[float, float]],
    *,
    typed: bool,
    integers: list[str] | None = None,
    columns_from: str = "",
    all_columns: list[str] | None = None,
) -> ColumnChoice:
    """Column specs from declarations only: flags, schema file, and the file's structure.

    `typed` says whether the file declares column types (Parquet) or not (CSV, all text). The
    column set is `names` when given; else every CSV column, or every Parquet column of a
    numeric type (the others are left out, with the reason). A column's kind is the schema's
    type, else `--integer`, else the Parquet type, else float. A declared type the tool cannot
    read as a number (a timestamp, a list) is a usage error: it is structure, not data.
    `all_columns` (the file's, when only some were read) lists what the user left out. The
    chosen columns are in the file's order, whatever order --columns or the schema name them in.
    """
    left_out: dict[str, str] = {}
    if names is None:
        names = []
        for f in table_schema:
            if not typed or arrow_kind(f.type) is not None:
                names.append(f.name)
            else:
                left_out[f.name] = f"type {f.type} in the file's schema is not numeric"
        columns_from = "every numeric column of the Parquet schema" if typed else "CSV header"
        if not names:
            raise UsageError("the input declares no numeric column: choose columns with --columns")
    else:
        every = all_columns or table_schema.names
        left_out = {n: f"not named by {columns_from}" for n in every if n not in names}
        position = {n: i for i, n in enumerate(every)}  # the output keeps the input's order
        names = sorted(names, key=lambda n: position.get(n, len(position)))
    for flag, given in (("--bounds", bounds), ("--integer", integers or [])):
        for name in given:
            if name not in names:
                raise UsageError(f"{flag}: column '{name}' is not among the chosen columns")
    specs = []
    for name in names:
        dtype = table_schema.field(name).type
        if pa.types.is_dictionary(dtype):
            dtype = dtype.value_type
        file_kind = (arrow_kind(dtype) or arrow_time_kind(dtype)) if typed else None
        declared = (schema or {}).get(name)
        if declared and declared.kind:
            kind, kind_source = declared.kind, "schema"
        elif name in (integers or []):
            kind, kind_source = "integer", "--integer"
        elif file_kind:  # a Parquet boolean given --bounds is read as a number, as it was
            numeric = file_kind == "boolean" and name in bounds
            kind, kind_source = "integer" if numeric else file_kind, "Parquet schema"
        else:
            kind, kind_source = "float", "default (float)"
        if kind in ("float", "integer") and arrow_time_kind(dtype):
            raise UsageError(
                f"column '{name}' has type {dtype} in the input's schema: declare it as a "
                "date or datetime column"
            )
        if pa.types.is_binary(dtype) or pa.types.is_large_binary(dtype):
            # bytes are not text: a cell that is not UTF-8 would have no reading at all
            raise UsageError(
                f"column '{name}' has type {dtype} in the input's schema: dpsynth reads text "
                "from string columns; write the column as string"
            )
        if kind_source != "schema" and file_kind is None and not is_text(dtype):
            raise UsageError(
                f"column '{name}' has type {dtype} in the input's schema: declare its type "
                f"in --schema ({DRAFT_HINT})"
            )
        if kind in ("date", "datetime", "category") and kind_source != "schema":
            raise UsageError(
                f"column '{name}' is a {kind} column: declare it in --schema with its "
                f"{'levels' if kind == 'category' else 'bounds'} ({DRAFT_HINT})"
            )
        if kind == "boolean" and kind_source != "schema":
            declared = ColumnSpec(name, kind, 0.0, 1.0, levels=("false", "true"))
        spec = replace(declared or ColumnSpec(name, kind), kind=kind, kind_source=kind_source)
        if name in bounds:
            if kind not in ("float", "integer"):
                raise UsageError(f"--bounds: column '{name}' is a {kind} column, not a number")
            spec = replace(spec, lower=bounds[name][0], upper=bounds[name][1], source="declared")
        if kind != "integer" and name in (integers or []):
            raise UsageError(f"--integer: column '{name}' is declared {kind} in the schema")
        specs.append(spec)
    return ColumnChoice(specs, columns_from, left_out)


def column_values(column: pa.ChunkedArray) -> np.ndarray:
    """One column as float64, missing cells as NaN; each cell is read on its own.

    Text is parsed as a number (NUMBER_PATTERN after trimming white space); anything else in it
    is missing. Numbers of any width (uint64 beyond int64, decimals) become the nearest double;
    booleans become 0 and 1. No cell can make the parse of another cell, or of the column, fail.
    """
    dtype = column.type
    if pa.types.is_dictionary(dtype):
        column = column.cast(dtype.value_type)
        dtype = column.type
    if is_text(dtype):
        text = pc.utf8_trim_whitespace(column)
        number = pc.match_substring_regex(text, NUMBER_PATTERN)
        column = pc.if_else(number, text, pa.scalar(None, dtype))
    column = column.cast(pa.float64(), safe=False)
    return column.to_numpy(zero_copy_only=False).astype(np.float64, copy=False)


def column_codes(column: pa.ChunkedArray, spec: ColumnSpec) -> np.ndarray:
    """One column as float64 codes of its declared kind (`coltypes`), missing cells as NaN, or
    as the missing level's code for a nullable column."""
    if spec.kind == "boolean":
        codes = coltypes.boolean_codes(column)
    elif spec.kind == "category":
        codes = coltypes.category_codes(column, spec.levels or (), spec.other)
    elif spec.kind == "date":
        codes = coltypes.date_codes(column)
    elif spec.kind == "datetime":
        codes = coltypes.datetime_codes(column, spec.timezone)
    else:
        codes = column_values(column)
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
        ones, float values rounded to `decimals()`, all inside their bounds; NaN for missing."""
        columns = list(range(len(self.columns))) if columns is None else columns
        lo, width = self._interval()
        values = lo[columns] + unit[:, columns] * width[columns]
        decimals = self.decimals()
        for k, j in enumerate(columns):
            col = self.columns[j]
            if j in self.level_columns:  # a slot's level (every slot has one)
                size, slots = self.levels(j), self.slots(j)
                slot = np.clip(np.floor(unit[:, j] * slots), 0, slots - 1).astype(np.int64)
                values[:, k] = slot * size // slots
            if col.kind in DISCRETE:
                top = math.floor(col.code_upper)
                ints = np.clip(np.floor(values[:, k] + 0.5), math.ceil(col.lower), top)
                values[:, k] = np.where(col.nullable & (ints == top), np.nan, ints)
            elif col.kind == "datetime":  # NaN: flagged missing (`cube_to_unit`)
                values[:, k] = np.round(np.clip(values[:, k], col.lower, col.upper))
            else:
                values[:, k] = np.clip(
                    np.round(values[:, k], decimals[col.name]), col.lower, col.upper
                )
        return values

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
