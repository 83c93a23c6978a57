"""The rows of an input in stream order, as batches of [0,1]^d, and how many there are.

A file already in stream order (no --order-by, or an --order-by column that never decreases in
file order) is read batch by batch: memory is bounded by a batch, whatever the file's size. That
is decided by a first pass over the --order-by column alone, which also counts the rows. Any
other file is read whole and sorted in memory (`from_table`), as before. Both give the same rows
in the same order, bit for bit.

Only public things decide: the --order-by column is the public timeline and the number of rows
is public (PRIVACY_MODEL); Parquet says it in its metadata, a CSV file is counted in the pass
over one column, whose values are not looked at.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dpsynth_cli.domain import ColumnSpec, column_values, is_text, table_codes
from dpsynth_cli.errors import DataError, UsageError
from dpsynth_cli.io import InputSource
from dpsynth_cli.online.cube import StreamCube
from dpsynth_cli.online.timeline import Timeline, TimelineBuilder

SORTED_IN_MEMORY = (
    "the input is not sorted by --order-by: it was read whole and sorted in memory; an input "
    "already in --order-by order is streamed with memory bounded by a batch"
)


@dataclass
class RowStream:
    """One pass over the rows in stream order (float64 batches of the cube [0,1]^d, `cube`; NaN
    where a value is missing) and their number `rows` (public: the length of the timeline)."""

    rows: int
    batches: Iterable[np.ndarray]
    sorted_in_memory: bool = False
    timeline: Timeline | None = None  # the --order-by times, for checkpoints by time


def from_table(
    table: pa.Table, specs: list[ColumnSpec], order_by: str | None, timeline: bool = False
) -> RowStream:
    """A table in memory, sorted by `order_by` (a stable sort: ties keep the file's order).

    The column is the public timeline (PRIVACY_MODEL), so its values may decide things: text (a
    CSV column) is sorted as numbers when every value is one, else as text (ISO 8601 times sort
    correctly as text); a missing value is an error, since the row has no time.
    """
    if order_by is not None:
        if order_by not in table.column_names:
            raise UsageError(f"--order-by column '{order_by}' is not in the input")
        key = _order_key(table.column(order_by))
        _check_times(key, order_by)
        table = table.take(pc.sort_indices(key))
    times = None
    if timeline and order_by is not None:
        builder = TimelineBuilder(order_by)
        builder.add(table.column(order_by))
        times = builder.build()
    return RowStream(table.num_rows, [_unit(table, specs)], timeline=times)


def open_stream(
    source: InputSource, specs: list[ColumnSpec], order_by: str | None, timeline: bool = False
) -> RowStream:
    """`source`'s rows in stream order: streamed when the file is in that order, else sorted in
    memory (`sorted_in_memory` is then set, for a notice). With `timeline`, also the --order-by
    column's times (`timeline.Timeline`, for checkpoints by time)."""
    builder = TimelineBuilder(order_by) if timeline and order_by is not None else None
    if order_by is None and source.num_rows is not None:
        rows, in_order = source.num_rows, True  # Parquet metadata
    else:
        column = order_by or source.schema.names[0]
        rows, in_order = _scan(source, column, order_by is not None, builder)
    if not in_order:
        table = source.read_all()
        return replace(from_table(table, specs, order_by, timeline), sorted_in_memory=True)
    batches = _exactly(rows, (_unit(b, specs) for b in source.batches()), source.name)
    return RowStream(rows, batches, timeline=builder.build() if builder else None)


def _exactly(rows: int, batches: Iterator[np.ndarray], name: str) -> Iterator[np.ndarray]:
    """`batches`, checked to hold the `rows` rows that the first pass counted (an error at the
    end, before the run commits anything, if the file changed in between)."""
    seen = 0
    for X in batches:
        seen += X.shape[0]
        yield X
    if seen != rows:
        raise DataError(f"input {name} changed while it was read: run again once it is written")


def _unit(table: pa.Table | pa.RecordBatch, specs: list[ColumnSpec]) -> np.ndarray:
    """The rows as points of the engine's cube (`cube.StreamCube`: levels first)."""
    values = np.empty((table.num_rows, len(specs)))
    for j, s in enumerate(specs):
        values[:, j] = table_codes(table, s)
    return StreamCube(tuple(specs)).to_cube(values)


def _order_key(column: pa.ChunkedArray | pa.Array) -> pa.ChunkedArray | pa.Array:
    if not is_text(column.type) or column.null_count:
        return column
    numbers = column_values(column)
    return column if np.isnan(numbers).any() else pa.array(numbers)


def _check_times(key: pa.ChunkedArray | pa.Array, order_by: str) -> None:
    if key.null_count or (pa.types.is_floating(key.type) and pc.any(pc.is_nan(key)).as_py()):
        raise DataError(
            f"--order-by column '{order_by}' has missing values: every row needs a time to "
            "be replayed (the timeline is public); fill or drop them first"
        )


def _scan(
    source: InputSource, column: str, is_time: bool, builder: TimelineBuilder | None = None
) -> tuple[int, bool]:
    """One pass over `column` alone: the number of rows and, if it is the --order-by column,
    whether it never decreases in file order under `from_table`'s ordering (text: as numbers
    when every value is one, else as text). Raises `from_table`'s error for a missing time."""
    rows, as_given, as_numbers = 0, _Rising(), _Rising()
    for batch in source.batches([column]):
        rows += batch.num_rows
        if not is_time:
            continue
        key = batch.column(0)
        _check_times(key, column)
        as_given.add(key)  # in the column's own type (text: as text)
        if builder is not None and as_given.ok:  # out of order: `from_table` builds it
            builder.add(key)
        if is_text(key.type) and as_numbers.ok is not None:
            numbers = column_values(key)
            if np.isnan(numbers).any():
                as_numbers.ok = None  # not every value is a number: text order decides
            else:
                as_numbers.add(pa.array(numbers))
    if not is_time:
        return rows, True
    use_numbers = is_text(source.schema.field(column).type) and as_numbers.ok is not None
    return rows, bool(as_numbers.ok if use_numbers else as_given.ok)


class _Rising:
    """Whether the arrays added one after another never decrease (None: not applicable)."""

    def __init__(self) -> None:
        self.ok: bool | None = True
        self._last: pa.Array | None = None

    def add(self, key: pa.Array) -> None:
        if not self.ok or not len(key):
            return
        if self._last is not None:
            key = pa.concat_arrays([self._last, key])
        try:
            falls = pc.any(pc.less(key[1:], key[:-1])).as_py()
        except pa.ArrowException:  # a type Arrow cannot compare: sort it in memory as before
            falls = True
        self.ok, self._last = not falls, key[-1:]


def rebatch(batches: Iterable[np.ndarray], size: int) -> Iterator[np.ndarray]:
    """The same rows in pieces of exactly `size` rows (the last may be shorter), so that how the
    input was read never changes what the engine is fed."""
    held: list[np.ndarray] = []
    count = 0
    for X in batches:
        while X.shape[0]:
            take = min(size - count, X.shape[0])
            held.append(X[:take])
            count, X = count + take, X[take:]
            if count == size:
                yield held[0] if len(held) == 1 else np.concatenate(held)
                held, count = [], 0
    if count:
        yield held[0] if len(held) == 1 else np.concatenate(held)
