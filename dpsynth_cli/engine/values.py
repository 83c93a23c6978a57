"""A table's declared columns as value rows for the statistics passes: what the synth job and
`evaluate` both read, so neither imports the other."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import partial

import numpy as np
import pyarrow as pa

from dpsynth_cli.domain import ColumnSpec, tallied_matrix, value_matrix
from dpsynth_cli.engine.rows import BatchesSource, Rows, as_rows

# A source of the table's rows for the statistics passes: a table in memory, or a function that
# starts a new pass over record batches (pa.RecordBatch or pa.Table) each time it is called.
TableData = pa.Table | Callable[[], Iterable[pa.RecordBatch | pa.Table]]


def value_rows(data: TableData, specs: list[ColumnSpec]) -> Rows:
    """The declared columns' complete rows (float64, original units), read only in passes."""
    if isinstance(data, pa.Table):  # no complete rows is a valid input: n is private
        return as_rows(value_matrix(data, specs).reshape(-1, len(specs)))

    return Rows(BatchesSource(data, partial(_values, specs)), len(specs))


def _values(specs: list[ColumnSpec], batch: pa.RecordBatch | pa.Table) -> np.ndarray:
    return value_matrix(batch, specs).reshape(-1, len(specs))


def tallied_rows(data: TableData, specs: list[ColumnSpec]) -> Rows:
    """Every row as `tallied_matrix` gives it (d + 1 columns: the values, then the first
    unusable column or COMPLETE): synth's first pass counts the dropped rows per column, and
    `.map(complete_rows, d)` is `value_rows`."""
    if isinstance(data, pa.Table):
        return as_rows(tallied_matrix(data, specs).reshape(-1, len(specs) + 1))

    return Rows(BatchesSource(data, partial(_tallied, specs)), len(specs) + 1)


def _tallied(specs: list[ColumnSpec], batch: pa.RecordBatch | pa.Table) -> np.ndarray:
    return tallied_matrix(batch, specs).reshape(-1, len(specs) + 1)
