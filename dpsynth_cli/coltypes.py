"""Non-numeric column types (boolean, category, date, datetime): cells to numeric codes, and back.

Every type is read as a number on a public, declared scale, so the rest of the pipeline (bounds,
the unit cube, the mechanisms) is unchanged:

- boolean: false -> 0, true -> 1 (a 2-level category); a column may declare its spellings (the
  text written for false and true, also read), else the output is a bool (CSV: true/false).
- category: the i-th declared level -> i (0-based). A value not among the levels is the declared
  `other` level, else missing; never an error and never a new level.
- date: days since 1970-01-01; datetime: seconds since 1970-01-01T00:00:00Z (wall-clock seconds
  for a column without a time zone).
- nullable columns (discrete kinds: integer, boolean, category, date): missing is one more code,
  one past the upper one, i.e. a level of its own.

Each cell is parsed on its own (vectorised): a cell that is not a value of its declared type is
missing, so no cell can make the parse of another cell, or of the column, fail.
"""

from __future__ import annotations

import datetime as dt
import math
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dpsynth_cli.errors import UsageError

if TYPE_CHECKING:
    import pandas as pd


TRUE_TEXT = ("true", "t", "1", "yes", "y")
FALSE_TEXT = ("false", "f", "0", "no", "n")
_EPOCH = dt.date(1970, 1, 1)


def as_text(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """Any column as trimmed text (dictionary decoded, numbers and booleans printed); an empty
    cell is missing."""
    if pa.types.is_dictionary(column.type):
        column = column.cast(column.type.value_type)
    if pa.types.is_boolean(column.type):
        column = pc.if_else(column, "true", "false")
    text = pc.utf8_trim_whitespace(column.cast(pa.string()))
    return pc.if_else(pc.equal(text, ""), pa.scalar(None, pa.string()), text)


def _codes(index: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """Numbers with nulls as NaN (float64; beyond 2^53 the nearest double, never an error)."""
    return pc.cast(index, pa.float64(), safe=False).to_numpy(zero_copy_only=False)


# Timestamps are clamped to +-7900 years around 1970 before any time-zone arithmetic, so that no
# value (int64 extremes included) can make it fail; every declared bound lies well inside.
_LIMIT_SECONDS = 2.5e11
_PER_SECOND = {"s": 1, "ms": 10**3, "us": 10**6, "ns": 10**9}


def _timestamp_seconds(column: pa.ChunkedArray, tz: str | None, local: bool) -> np.ndarray:
    """Seconds since the epoch of a timestamp column, clamped to +-_LIMIT_SECONDS: the instant
    (a zoned column, or a naive one read in `tz`), or with `local` the wall-clock time."""
    unit, zone = column.type.unit, column.type.tz
    raw = _codes(pc.cast(column, pa.int64())) / _PER_SECOND[unit]
    seconds = np.clip(raw, -_LIMIT_SECONDS, _LIMIT_SECONDS)
    if (zone is None and (local or tz is None)) or (zone is not None and not local):
        return seconds  # the wall-clock time asked for, or the instant a zoned column holds
    missing = np.isnan(seconds)
    stamps = pa.array(np.where(missing, 0, seconds).astype(np.int64), pa.timestamp("s", zone))
    if local:
        stamps = pc.local_timestamp(stamps)
    else:
        stamps = pc.assume_timezone(stamps, tz, ambiguous="earliest", nonexistent="earliest")
    out = _codes(pc.cast(stamps, pa.int64()))
    return np.where(missing, np.nan, out)


def boolean_texts(spellings: tuple[str, str] | None) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The lower-case text read as (false, true): FALSE_TEXT and TRUE_TEXT, plus the declared
    (false, true) spellings, which win over a default of the other side (a declared "true": "n"
    makes "n" true, no longer false)."""
    if spellings is None:
        return FALSE_TEXT, TRUE_TEXT
    false, true = (s.lower() for s in spellings)
    return (
        (false, *(t for t in FALSE_TEXT if t != true)),
        (true, *(t for t in TRUE_TEXT if t != false)),
    )


def boolean_codes(column: pa.ChunkedArray, spellings: tuple[str, str] | None = None) -> np.ndarray:
    """0 / 1 from a boolean column, from 0 / 1 numbers, or from text (TRUE_TEXT, FALSE_TEXT and
    the declared (false, true) `spellings`, any case: `boolean_texts`); anything else is missing
    (NaN)."""
    if pa.types.is_boolean(column.type):
        return _codes(column)
    text = pc.utf8_lower(as_text(column))
    false_text, true_text = boolean_texts(spellings)
    one = pc.is_in(text, value_set=pa.array(true_text, pa.string()))
    zero = pc.is_in(text, value_set=pa.array(false_text, pa.string()))
    code = pc.if_else(one, 1.0, pc.if_else(zero, 0.0, pa.scalar(None, pa.float64())))
    return _codes(code)


def category_codes(column: pa.ChunkedArray, levels: tuple[str, ...], other: str | None):
    """The index of each cell's level (text after trimming; a whole number written with a
    fraction of zeros, 63.0, is the level 63); an undeclared value is `other`'s index when
    declared, else missing (NaN) like an empty cell."""
    text = as_text(column)
    declared = pa.array(levels, pa.string())
    index = pc.index_in(text, value_set=declared)
    # a whole number written as a real one (pandas writes 63 as 63.0 once a column has a gap)
    # is its level "63", as the same column read from Parquet is
    whole = pc.replace_substring_regex(text, pattern=r"^\+?(-?[0-9]+)\.0*$", replacement=r"\1")
    index = pc.coalesce(index, pc.index_in(whole, value_set=declared))
    if other is not None:
        fallback = pa.scalar(levels.index(other), index.type)
        index = pc.if_else(pc.and_(pc.is_null(index), pc.is_valid(text)), fallback, index)
    return _codes(index)


def date_codes(column: pa.ChunkedArray) -> np.ndarray:
    """Days since 1970-01-01: a date column, a timestamp's date, or ISO text YYYY-MM-DD."""
    if pa.types.is_timestamp(column.type):
        return np.floor(_timestamp_seconds(column, None, local=True) / 86400.0)
    if pa.types.is_date(column.type):
        return _codes(pc.cast(pc.cast(column, pa.date32()), pa.int32()))
    text = as_text(column)
    parsed = pc.strptime(text, format="%Y-%m-%d", unit="s", error_is_null=True)
    # strptime rolls 2020-02-30 over to March and accepts a trailing time: print it back
    exact = pc.equal(pc.strftime(parsed, format="%Y-%m-%d"), text)
    days = pc.divide(pc.cast(parsed, pa.int64()), 86400)
    return _codes(pc.if_else(exact, days, pa.scalar(None, pa.int64())))


def datetime_codes(column: pa.ChunkedArray, tz: str | None) -> np.ndarray:
    """Seconds since the epoch. A cell with an offset (or a zoned timestamp) is that instant; a
    cell without one is wall-clock time in the column's time zone `tz` (a column without a time
    zone keeps wall-clock seconds; an aware cell is then taken in UTC)."""
    if pa.types.is_timestamp(column.type):
        return _timestamp_seconds(column, tz, local=False)
    if pa.types.is_date(column.type):  # midnight, wall-clock
        days = _codes(pc.cast(pc.cast(column, pa.date32()), pa.int32()))
        seconds = np.clip(days * 86400.0, -_LIMIT_SECONDS, _LIMIT_SECONDS)
        midnight = pa.array(np.nan_to_num(seconds).astype(np.int64), pa.timestamp("s"))
        midnight = pc.if_else(pa.array(np.isnan(seconds)), None, midnight)
        return _timestamp_seconds(pa.chunked_array([midnight]), tz, local=False)
    micros, offset = _iso_micros(as_text(column))
    out = np.full(micros.size, np.nan)
    aware = ~np.isnan(offset)
    out[aware] = (micros[aware] - offset[aware] * 1e6) / 1e6  # the instant, in UTC
    naive = ~aware & ~np.isnan(micros)
    if naive.any():
        wall = micros[naive].astype(np.int64).astype("datetime64[us]")
        import pandas as pd  # here: a third of every command's start-up

        stamps = pd.Series(wall)
        if tz is not None:
            stamps = stamps.dt.tz_localize(tz, ambiguous="NaT", nonexistent="NaT")
        out[naive] = _seconds(stamps)
    return out


# ISO 8601 date-time text, the whole cell: date, optional time (seconds and fraction optional),
# optional offset (Z, +hh, +hhmm, +hh:mm). Anything else is missing.
_ISO_DATETIME = (
    r"^(?P<date>\d{4}-\d\d-\d\d)"
    r"(?:[T ](?P<h>\d\d):(?P<m>\d\d)(?::(?P<s>\d\d)(?:\.(?P<frac>\d{1,9}))?)?)?"
    r"(?P<zone>Z|[+-]\d\d(?::?\d\d)?)?$"
)


def _iso_micros(text: pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """(microseconds since the epoch of the written wall-clock time, the cell's UTC offset in
    seconds or NaN without one) of each ISO cell; NaN for a cell that is not one.

    Every cell is read on its own, at a fixed microsecond resolution (finer digits dropped), so
    no cell can change how another is read (pandas picks one resolution for a whole array: one
    nanosecond cell would turn every date outside 1677-2262 into missing)."""
    parts = pc.extract_regex(text, _ISO_DATETIME)
    if isinstance(parts, pa.ChunkedArray):  # a table's column (a record batch's is an array)
        parts = parts.combine_chunks()
    field = {name: parts.field(name) for name in ("date", "h", "m", "s", "frac", "zone")}
    day = pc.strptime(field["date"], format="%Y-%m-%d", unit="s", error_is_null=True)
    exact = pc.equal(pc.strftime(day, format="%Y-%m-%d"), field["date"])  # no 02-30 roll-over
    days = _codes(pc.if_else(exact, pc.divide(pc.cast(day, pa.int64()), 86400), None))

    def number(values: pa.Array, width: int = 2) -> np.ndarray:
        return _codes(pc.cast(pc.utf8_rpad(values, width, "0"), pa.int64()))

    h, m, sec = (number(field[k]) for k in ("h", "m", "s"))
    frac = number(pc.utf8_slice_codeunits(field["frac"], 0, 6), 6)  # microseconds, truncated
    valid = (h <= 23) & (m <= 59) & (sec <= 59)
    clock = ((days * 86400 + h * 3600 + m * 60 + sec) * 1_000_000 + frac).clip(
        -_LIMIT_SECONDS * 1e6, _LIMIT_SECONDS * 1e6
    )
    micros = np.where(valid, clock, np.nan)
    zone = field["zone"]
    sign = np.where(_codes(pc.cast(pc.starts_with(zone, "-"), pa.int8())) == 1, -1.0, 1.0)
    digits = pc.replace_substring(pc.utf8_slice_codeunits(zone, 1, 6), ":", "")
    zh = number(pc.utf8_slice_codeunits(digits, 0, 2))
    zm = number(pc.utf8_slice_codeunits(digits, 2, 4))
    offset = np.where(
        _codes(pc.cast(pc.equal(zone, "Z"), pa.int8())) == 1, 0.0, sign * (zh * 3600 + zm * 60)
    )
    has_zone = _codes(pc.cast(pc.greater(pc.utf8_length(zone), 0), pa.int8())) == 1
    offset = np.where(has_zone & (zh <= 23) & (zm <= 59), offset, np.nan)
    micros = np.where(has_zone & np.isnan(offset), np.nan, micros)  # a malformed offset
    return micros, offset


def _seconds(stamps: pd.Series) -> np.ndarray:
    """Seconds since the epoch, NaT as NaN (an aware series as UTC instants)."""
    if getattr(stamps.dt, "tz", None) is not None:
        stamps = stamps.dt.tz_convert("UTC").dt.tz_localize(None)
    micros = stamps.to_numpy().astype("datetime64[us]").astype(np.int64).astype(np.float64)
    return np.where(stamps.isna().to_numpy(), np.nan, micros / 1e6)


def parse_iso_bound(value: object, kind: str, tz: str | None, where: str) -> float:
    """A declared date / datetime bound (ISO text) as its code; a non-ISO bound is a usage
    error (it is a declaration, not data)."""
    if isinstance(value, str):
        array = pa.chunked_array([pa.array([value])])
        code = date_codes(array) if kind == "date" else datetime_codes(array, tz)
        if np.isfinite(code[0]):
            return float(code[0])
    example = "2024-01-31" if kind == "date" else "2024-01-31T08:00:00"
    raise UsageError(f'{where}: bounds must be ISO {kind} strings, e.g. "{example}"')


def bound_text(code: float, kind: str, tz: str | None) -> str:
    """A bound's code back as ISO text (for the report)."""
    if kind == "date":
        return (_EPOCH + dt.timedelta(days=int(code))).isoformat()
    import pandas as pd

    stamp = pd.Timestamp(int(round(code * 1e6)), unit="us")
    return (stamp.tz_localize("UTC").tz_convert(tz) if tz else stamp).isoformat()


def zone_of(value: object) -> str | None:
    """The fixed offset a datetime bound declares (e.g. '+01:00'), or None for naive text."""
    if not isinstance(value, str):
        return None
    import pandas as pd

    try:
        stamp = pd.Timestamp(value)
    except ValueError:
        return None
    if stamp.tzinfo is None:
        return None
    offset = stamp.utcoffset() or dt.timedelta(0)
    minutes = int(offset.total_seconds() // 60)
    sign = "+" if minutes >= 0 else "-"
    return f"{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"


def check_timezone(tz: str, where: str) -> str:
    """A declared time zone must be one Arrow knows (an IANA name or a fixed offset)."""
    try:
        pa.array([0], pa.timestamp("s", tz)).to_pylist()
    except (pa.ArrowException, ValueError):
        raise UsageError(f"{where}: unknown time zone '{tz}'") from None
    return tz


def output_array(codes: np.ndarray, missing: np.ndarray, spec) -> pa.Array:
    """Integer codes (already clipped to the declared range) as the column's output type (a
    boolean with declared spellings: that text)."""
    mask = missing if missing.any() else None
    safe = np.where(missing, 0, codes).astype(np.int64)
    if spec.kind == "boolean" and spec.spellings:
        return pa.array(np.asarray(spec.spellings, dtype=object)[safe], pa.string(), mask=mask)
    if spec.kind == "boolean":
        return pa.array(safe == 1, pa.bool_(), mask=mask)
    if spec.kind == "category":
        return pa.array(np.asarray(spec.levels, dtype=object)[safe], pa.string(), mask=mask)
    if spec.kind == "date":
        return pa.array(safe.astype(np.int32), pa.date32(), mask=mask)
    return pa.array(safe, pa.int64(), mask=mask)


def datetime_array(
    seconds: np.ndarray, tz: str | None, missing: np.ndarray | None = None
) -> pa.Array:
    """Seconds since the epoch as a timestamp[s] column in the column's time zone (null where
    `missing`)."""
    mask = missing if missing is not None and missing.any() else None
    return pa.array(np.round(seconds).astype(np.int64), pa.timestamp("s", tz), mask=mask)


# A datetime column's declared resolution ("resolution" in the schema): the step, in seconds, of
# the wall-clock grid its written values lie on ("second", whole seconds, is the default).
RESOLUTIONS = {"second": 1, "minute": 60, "hour": 3600, "day": 86400}


def wall_seconds(seconds: np.ndarray, tz: str) -> np.ndarray:
    """Wall-clock seconds in `tz` of instants (whole seconds, no NaN)."""
    stamps = pa.array(seconds.astype(np.int64), pa.timestamp("s", tz))
    return pc.cast(pc.local_timestamp(stamps), pa.int64()).to_numpy().astype(np.float64)


def instant_seconds(wall: np.ndarray, tz: str) -> np.ndarray:
    """Instants of wall-clock seconds in `tz` (a time in a DST gap: the transition, on the
    hour; a repeated one: the earlier instant)."""
    stamps = pa.array(wall.astype(np.int64), pa.timestamp("s"))
    stamps = pc.assume_timezone(stamps, tz, ambiguous="earliest", nonexistent="latest")
    return pc.cast(stamps, pa.int64()).to_numpy().astype(np.float64)


def resolution_grid(lower: float, upper: float, step: int, tz: str | None) -> tuple[float, float]:
    """The first and last wall-clock points of the `step` grid within bounds (codes: instants
    of a zoned column); lower > upper when the bounds hold none."""
    bounds = np.array([lower, upper])
    wall = wall_seconds(np.round(bounds), tz) if tz else bounds
    return math.ceil(wall[0] / step) * step, math.floor(wall[1] / step) * step


def on_resolution(
    seconds: np.ndarray, step: int, tz: str | None, lower: float, upper: float
) -> np.ndarray:
    """Whole-second codes (NaN: missing, kept) moved to the nearest point of the column's
    wall-clock grid of `step` seconds (whole minutes, hours, days: local ones for a zoned column,
    e.g. Asia/Kolkata's hours at :00 local, not UTC's :30) that lies within [lower, upper].

    Post-processing of released values: no privacy cost (the step is a public declaration)."""
    if step == 1:
        return seconds
    first, last = resolution_grid(lower, upper, step, tz)
    missing = np.isnan(seconds)
    codes = np.where(missing, lower, seconds)
    wall = wall_seconds(codes, tz) if tz else codes
    wall = np.clip(np.floor(wall / step + 0.5) * step, first, last)
    if tz:  # back to instants; a DST fold could push one out of bounds: its nearest grid end
        out = instant_seconds(wall, tz)
        ends = instant_seconds(np.array([first, last], dtype=np.float64), tz)
        out = np.where(out < lower, ends[0], np.where(out > upper, ends[1], out))
    else:
        out = wall
    return np.where(missing, np.nan, out)
