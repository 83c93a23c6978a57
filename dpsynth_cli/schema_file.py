"""The `--schema` file (or the API's schema dict): its columns as `ColumnSpec`s, every key checked.

    {"columns": {"age":    {"type": "integer", "lower": 0, "upper": 120},
                 "income": {"type": "float",   "lower": 0, "upper": 500000}}}

"type" is "float", "integer", "boolean" (optional "true"/"false": the text it is written as, also
read), "category" (with its public "levels" and an optional "other" level for undeclared
values), "date" or "datetime" (ISO "lower"/"upper", optional "timezone"; a datetime's optional
"resolution": "second" (default), "minute", "hour" or "day", the wall-clock grid its output is
written on); "nullable": true makes
missing a level of its own (any kind). Any other key (a typo such as "lowr") is a usage error
(`COLUMN_KEYS`); keys that start with "_" are comments. Cells of these types are read by
`coltypes` (docs/privacy.md, "Mixed tables"). A column listed without bounds gets a DP bounds
estimate. An optional "constraints" list declares linear constraints between float, integer,
date and datetime columns, and their calendar parts (`constraints`, `load_constraints`); an
optional "determines" list declares that a category column's level fixes another's, with or
without the public map (`determines`, `load_determines`).
"""

from __future__ import annotations

import difflib
import json
from pathlib import Path

from dpsynth_cli import coltypes
from dpsynth_cli.columns import DRAFT_HINT, KINDS, NULLABLE, ColumnSpec, check_bounds
from dpsynth_cli.constraints import Constraint, parse_constraints
from dpsynth_cli.determines import Dependency, parse_determines
from dpsynth_cli.errors import UsageError

# The keys a schema column of each type may have ("": no type; the file's type decides).
COLUMN_KEYS: dict[str, tuple[str, ...]] = {
    "": ("type", "lower", "upper", "nullable"),
    "float": ("type", "lower", "upper", "nullable"),
    "integer": ("type", "lower", "upper", "nullable"),
    "boolean": ("type", "true", "false", "nullable"),
    "category": ("type", "levels", "other", "nullable"),
    "date": ("type", "lower", "upper", "nullable"),
    "datetime": ("type", "lower", "upper", "timezone", "resolution", "nullable"),
}


def load_schema(path: str) -> dict[str, ColumnSpec]:
    """Read a schema file (format in the module docstring) into column specs."""
    columns = _schema_json(path).get("columns")
    return {name: schema_column(path, name, spec) for name, spec in columns.items()}


def parse_decimal(value: object, where: str) -> str:
    """A decimal separator: "." or "," (`--decimal ,`, the schema's "decimal": ",")."""
    if value not in (".", ","):
        raise UsageError(f"{where} must be '.' or ',' (the decimal separator of number cells)")
    return str(value)


def load_decimal(path: str) -> str:
    """The schema file's top-level "decimal" (the decimal separator of its float and integer
    columns' text cells), "." when it declares none."""
    return parse_decimal(_schema_json(path).get("decimal", "."), f"--schema {path}: 'decimal'")


def load_constraints(path: str) -> tuple[Constraint, ...]:
    """The schema file's declared constraints between its columns (`constraints`), checked
    against its columns; () when it declares none."""
    raw = _schema_json(path).get("constraints")
    return parse_constraints(raw, load_schema(path), f"--schema {path}")


def load_determines(path: str) -> tuple[Dependency, ...]:
    """The schema file's declared dependencies between level columns (`determines`); () when
    it declares none."""
    raw = _schema_json(path).get("determines")
    return parse_determines(raw, load_schema(path), f"--schema {path}")


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
    _check_keys(raw, ("columns", "constraints", "decimal", "determines"), f"--schema {path}")
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
    spellings = None
    if kind == "boolean":
        if "levels" in spec or "other" in spec:
            raise UsageError(f"{where}: a boolean column takes no 'levels' or 'other'")
        spellings = _spellings(where, spec)
        levels: tuple[str, ...] = spellings or ("false", "true")  # their names (evaluate's)
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
        name,
        kind,
        0.0,
        float(len(levels) - 1),
        levels=levels,
        other=other,
        nullable=nullable,
        spellings=spellings,
    )


def _spellings(where: str, spec: dict) -> tuple[str, str] | None:
    """A boolean's declared "false" and "true" text (both or neither): non-empty strings without
    outer spaces that differ in more than case (cells are read trimmed, in any case)."""
    if "true" not in spec and "false" not in spec:
        return None
    if "true" not in spec or "false" not in spec:
        missing = "false" if "true" in spec else "true"
        raise UsageError(
            f"{where}: declare both 'true' and 'false' spellings ('{missing}' is missing)"
        )
    false, true = spec["false"], spec["true"]
    for key, value in (("true", true), ("false", false)):
        if not isinstance(value, str) or not value or value.strip() != value:
            raise UsageError(
                f"{where}: '{key}' must be a non-empty string without outer spaces, "
                'e.g. "true": "yes", "false": "no"'
            )
    if true.lower() == false.lower():
        raise UsageError(
            f"{where}: 'true' and 'false' must be different spellings (cells are read in any case)"
        )
    return false, true


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
    resolution = spec.get("resolution")
    if kind == "datetime" and resolution is not None:
        if not isinstance(resolution, str) or resolution not in coltypes.RESOLUTIONS:
            allowed = ", ".join(f'"{r}"' for r in coltypes.RESOLUTIONS)
            raise UsageError(f"{where}: 'resolution' must be one of {allowed}")
        first, last = coltypes.resolution_grid(lo, hi, coltypes.RESOLUTIONS[resolution], tz)
        if first > last:
            raise UsageError(f"{where}: its bounds contain no whole {resolution}")
    elif resolution is not None:
        raise UsageError(f"{where}: 'resolution' is for datetime columns")
    return ColumnSpec(name, kind, lo, hi, nullable=nullable, timezone=tz, resolution=resolution)
