"""An input table read in passes of record batches (`InputSource`), and the column checks every
format shares."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa

from dpsynth_cli.errors import DataError, UsageError
from dpsynth_cli.io.streams import _Spool


@dataclass(frozen=True)
class InputTable:
    """The columns read, and every column name the file has (for the report's left-out list)."""

    table: pa.Table
    all_columns: list[str]


class InputSource:
    """An input table read in passes of record batches, each pass from the start of the input.

    `schema` is the requested columns' (CSV: all text; Parquet: the file's declared types),
    `all_columns` every column name the file has. Structural problems of a CSV file (found while
    reading) raise DataError from `batches()`; no batch holding a malformed record is yielded.
    """

    name: str
    schema: pa.Schema
    all_columns: list[str]
    batch_rows: int
    num_rows: int | None = None  # known in advance for Parquet (for progress; never release it)

    def __init__(self, spool: _Spool | None) -> None:
        self._spool = spool

    def batches(self, columns: list[str] | None = None) -> Iterator[pa.RecordBatch]:
        """A new pass: the requested columns (or only `columns` of them) in order, at most
        `batch_rows` rows per batch."""
        raise NotImplementedError

    def read_all(self) -> pa.Table:
        """The whole table in memory (one pass)."""
        return pa.Table.from_batches(list(self.batches()), schema=self.schema)

    def close(self) -> None:
        """Drop the temporary copy of a piped input (it also goes when the object does)."""
        if self._spool is not None:
            self._spool.close()

    def __enter__(self) -> InputSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Rebatch:
    """pyarrow's batches (one per block) regrouped into batches of `rows` rows (the last fewer)."""

    def __init__(self, rows: int) -> None:
        self._rows = rows
        self._parts: list[pa.RecordBatch] = []
        self._count = 0

    def add(self, batch: pa.RecordBatch) -> Iterator[pa.RecordBatch]:
        if batch.num_rows:
            self._parts.append(batch)
            self._count += batch.num_rows
        if self._count < self._rows:
            return
        whole = self._parts[0] if len(self._parts) == 1 else pa.concat_batches(self._parts)
        full = whole.num_rows - whole.num_rows % self._rows
        for off in range(0, full, self._rows):
            yield whole.slice(off, self._rows)
        self._parts = [whole.slice(full)] if full < whole.num_rows else []
        self._count = whole.num_rows - full

    def rest(self) -> Iterator[pa.RecordBatch]:
        if self._parts:
            yield self._parts[0] if len(self._parts) == 1 else pa.concat_batches(self._parts)
        self._parts, self._count = [], 0


def check_columns(
    wanted: list[str], available: list[str], name: str, csv_delimiter: str | None = None
) -> None:
    """Every wanted column exists exactly once in `available`, and none is wanted twice. For a
    CSV whose header is one field holding another common separator, the error says which
    --delimiter would split it."""
    counts = Counter(available)
    for col in wanted:
        if col not in counts:
            raise UsageError(
                f"column '{col}' not found in {name} (available: {_names_list(available)})"
                + _delimiter_hint(available, csv_delimiter)
            )
        if counts[col] > 1:
            raise DataError(f"column name '{col}' appears more than once in the header of {name}")
    if len(set(wanted)) != len(wanted):
        raise UsageError("a column is requested more than once")


def _delimiter_hint(header: list[str], delimiter: str | None) -> str:
    if delimiter is None or len(header) != 1:
        return ""
    for sep, flag in ((";", "';'"), ("\t", "tab"), ("|", "'|'"), (",", "','")):
        if sep != delimiter and sep in header[0]:
            shown = "a tab" if sep == "\t" else f"'{sep}'"
            return f"; the header is one field holding {shown}: give --delimiter {flag}"
    return ""


def _names_list(names: list[str], limit: int = 30) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f", ... ({len(names)} columns)" if len(names) > limit else "")
