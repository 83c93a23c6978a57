"""`dpsynth schema draft`: a starting schema from a file's structure alone (names, file types).

Levels, bounds and, for CSV, the types themselves would have to be read from the values, which is
not private: they are left as FILL IN placeholders that `domain.load_schema` refuses until the
user replaces them with public facts.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from dpsynth_cli.domain import KINDS, arrow_kind, arrow_time_kind, is_text

FILL = "FILL IN"
NOTE = (
    f"Drafted by `dpsynth schema draft` from the column names and the file's declared types "
    f"only: no value was read. Replace every '{FILL} ...' with public facts (levels and bounds "
    "read from the data are not private) and remove the keys that do not apply: 'lower'/'upper' "
    "are numbers for float/integer (remove both to spend part of --eps on a DP estimate) and ISO "
    "strings for date/datetime; 'levels' is the list of a category's levels. Remove the columns "
    "you do not want to synthesise. Optional keys: 'nullable': true (any type: missing becomes a "
    "level of its own; a float or integer column then needs 'lower' and 'upper'), 'other': the "
    "level of undeclared values (category), 'timezone' (datetime), 'true' and 'false' (boolean: "
    "the text each is written as, e.g. yes/no; else true/false). Any other key is refused; "
    "keys that start with '_' are comments."
)
TYPE = f"{FILL}: {'|'.join(KINDS)}"
BOUND = f"{FILL} (float, integer, date, datetime)"
LEVELS = f"{FILL} (category)"
NUMBER = f"{FILL}: a number, or remove lower and upper"
ISO = {"date": f"{FILL}: ISO date, e.g. 2024-01-31", "datetime": f"{FILL}: ISO date-time"}


def draft(schema: pa.Schema, *, typed: bool) -> dict[str, Any]:
    """The schema file's JSON for a file with this Arrow schema (`typed`: Parquet types)."""
    return {"_note": NOTE, "columns": {f.name: _column(f.type, typed) for f in schema}}


def _column(dtype: pa.DataType, typed: bool) -> dict[str, Any]:
    if pa.types.is_dictionary(dtype):
        dtype = dtype.value_type
    kind = (arrow_kind(dtype) or arrow_time_kind(dtype)) if typed else None
    if kind == "boolean":
        return {"type": kind}
    if kind in ("date", "datetime"):
        column = {"type": kind, "lower": ISO[kind], "upper": ISO[kind]}
        if kind == "datetime" and dtype.tz:
            column["timezone"] = dtype.tz
        return column
    if kind is not None:
        return {"type": kind, "lower": NUMBER, "upper": NUMBER}
    if typed and is_text(dtype):
        return {"type": TYPE, "levels": LEVELS}
    if typed:
        return {"type": f"{FILL}: the file declares {dtype}; dpsynth reads {'|'.join(KINDS)}"}
    return {"type": TYPE, "lower": BOUND, "upper": BOUND, "levels": LEVELS}
