"""An in-memory table (a pandas DataFrame or an Arrow table) read like a CSV file: cell by cell.

A DataFrame's dtypes are guessed by pandas from all the values of a column, so they cannot
decide how a cell is read: one `bytes` cell that is not UTF-8, one `int` among strings or one
integer past 2^63 would otherwise turn a whole column binary, object or missing, and one row
would decide what every other row of that column says (docs/privacy.md, "The Python API").
So every cell becomes text on its own, as a CSV field holds it, from its own value only:

- text as it is; bytes decoded as UTF-8 (missing when they are not UTF-8);
- a whole number in decimal digits (any size); a real number in its shortest exact form (63.0
  is "63", as Arrow prints it: the same text whether the column is int64, float64 or object);
- true/false for a boolean;
- a date as YYYY-MM-DD; a date-time without a zone as YYYY-MM-DD at midnight, else
  "YYYY-MM-DD HH:MM:SS[.fraction]"; with a zone, that instant with its offset;
- missing for None, NaN, NaT and anything that is not one of these (a list, a dict, a duration).

The declared types then parse the text (`domain`), exactly as for a CSV file, so a cell that is
not a value of its column's type is missing and nothing else changes. The typed paths (an
int64 or datetime64 column) and the per-cell path (an object column) print a value the same way,
so a column's dtype never changes what a value says. The table's number of rows is not exposed.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dpsynth_cli.errors import UsageError
from dpsynth_cli.io.formats import default_batch_rows
from dpsynth_cli.io.source import InputSource, check_columns

if TYPE_CHECKING:
    import pandas as pd

TEXT = pa.string()
_FAILED = (pa.ArrowException, TypeError, ValueError, OverflowError)


def text_cells(array: pa.Array) -> pa.Array:
    """Each cell of a typed Arrow array as the text a CSV field would hold (module docstring).
    Printed in one step; if that fails (bytes that are not UTF-8, a date-time Arrow cannot
    print), each cell alone, a cell that cannot be printed being missing."""
    try:
        return _typed_text(array)
    except _FAILED:
        return pa.array([_cell(array.slice(i, 1)) for i in range(len(array))], TEXT)


def _cell(one: pa.Array) -> str | None:
    try:
        return _typed_text(one)[0].as_py()
    except _FAILED:
        return None


def _typed_text(array: pa.Array) -> pa.Array:
    kind = array.type
    if pa.types.is_dictionary(kind):
        return _typed_text(array.dictionary_decode())
    if pa.types.is_string(kind):
        return array
    if pa.types.is_boolean(kind):
        return pc.if_else(array, "true", "false")
    if pa.types.is_timestamp(kind):
        return _timestamp_text(array)
    if any(is_kind(kind) for is_kind in _PRINTED):
        return array.cast(TEXT)  # UTF-8 is checked for bytes
    return pa.nulls(len(array), TEXT)  # no value of any declared type (lists, durations, ...)


_PRINTED = (
    pa.types.is_large_string,
    pa.types.is_string_view,
    pa.types.is_integer,
    pa.types.is_floating,
    pa.types.is_decimal,
    pa.types.is_date,
    pa.types.is_binary,
    pa.types.is_large_binary,
    pa.types.is_binary_view,
    pa.types.is_fixed_size_binary,
)


def _timestamp_text(array: pa.Array) -> pa.Array:
    """A zoned instant with its offset; a naive one as its date at midnight, else date and time
    (so a datetime64 column of dates reads as a `date` column, as its CSV would)."""
    text = array.cast(TEXT)
    if array.type.tz is not None:
        return text
    day = pc.cast(pc.cast(array, pa.date32(), safe=False), array.type)
    return pc.if_else(pc.equal(day, array), pc.strftime(array, format="%Y-%m-%d"), text)


def series_text(series: pd.Series) -> pa.Array:
    """A pandas column's cells as text, each from its own value."""
    import pandas as pd

    if isinstance(series.dtype, pd.CategoricalDtype) or series.dtype == object:
        return object_text(series.to_numpy(dtype=object))
    try:
        return text_cells(pa.array(series, from_pandas=True))
    except _FAILED:  # a dtype Arrow does not take (e.g. periods): cell by cell
        return object_text(series.to_numpy(dtype=object))


# The Python types whose cells an object column converts together (one Arrow array per group,
# printed as the typed column would be); any other value is converted alone.
_GROUPS: dict[type, str] = {
    str: "string",
    bytes: "binary",
    bool: "bool",
    np.bool_: "bool",
    int: "int64",
    np.int64: "int64",
    float: "double",
    np.float64: "double",
}


def object_text(values: np.ndarray) -> pa.Array:
    """An object column's cells as text: all text (or missing) in one step, else grouped by
    each cell's Python type, each group printed as its typed column would be."""
    try:
        return pa.array(values, type=TEXT, from_pandas=True)  # text, UTF-8 bytes, missing
    except _FAILED:
        pass
    out = np.full(len(values), None, dtype=object)
    groups = np.array([_GROUPS.get(type(v), "") for v in values])
    for group in set(_GROUPS.values()):
        where = np.flatnonzero(groups == group)
        if where.size:
            out[where] = _group_text(values[where], pa.type_for_alias(group))
    for i in np.flatnonzero(groups == ""):
        out[i] = _one_text(values[i])
    return pa.array(out, TEXT, from_pandas=True)


def _group_text(values: np.ndarray, arrow_type: pa.DataType) -> np.ndarray:
    try:
        array = pa.array(values, arrow_type, from_pandas=True)
    except _FAILED:  # whole numbers beyond int64: one at a time
        return np.array([_one_text(v) for v in values], dtype=object)
    return text_cells(array).to_numpy(zero_copy_only=False)


def _one_text(value: Any) -> str | None:
    """One cell on its own: an Arrow array of that value alone, printed as its type is."""
    if isinstance(value, int) and not isinstance(value, bool | np.bool_):
        return str(value)  # any size (an int64 array would overflow past 2^63)
    try:
        return text_cells(pa.array([value], from_pandas=True))[0].as_py()
    except _FAILED:
        return None


class TableInput(InputSource):
    """An in-memory table read like a CSV file: every column as text, each cell from its own
    value (module docstring), so that its types come from declarations (schema, --integer) and
    never from the dtypes that pandas or Arrow inferred from the values. Its number of rows is
    not exposed (`num_rows` stays None)."""

    def __init__(
        self, table: pd.DataFrame | pa.Table, columns: list[str] | None, batch_rows: int | None
    ) -> None:
        super().__init__(None)
        self.name = "the table"
        self._frame = not isinstance(table, pa.Table)
        self.all_columns = [str(c) for c in table.columns] if self._frame else table.column_names
        if len(set(self.all_columns)) < len(self.all_columns):
            raise UsageError("the table has two columns of the same name: rename one")
        wanted = self.all_columns if columns is None else list(columns)
        check_columns(wanted, self.all_columns, self.name)
        self._table = table
        self._wanted = wanted
        self.schema = pa.schema([pa.field(c, TEXT) for c in wanted])
        self.batch_rows = batch_rows or default_batch_rows(len(wanted))

    def batches(self, columns: list[str] | None = None) -> Iterator[pa.RecordBatch]:
        names = self._wanted if columns is None else list(columns)
        schema = pa.schema([pa.field(c, TEXT) for c in names])
        positions = [self.all_columns.index(c) for c in names]
        for start in range(0, len(self._table), self.batch_rows):
            if self._frame:
                piece = self._table.iloc[start : start + self.batch_rows]
                arrays = [series_text(piece.iloc[:, j]) for j in positions]
            else:
                piece = self._table.slice(start, self.batch_rows)
                arrays = [text_cells(piece.column(j).combine_chunks()) for j in positions]
            yield pa.RecordBatch.from_arrays(arrays, schema=schema)
