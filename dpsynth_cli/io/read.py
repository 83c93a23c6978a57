"""Opening an input: a CSV or Parquet file, stdin, or a directory of either, as an
`InputSource`. Memory is bounded by the batch (and, for CSV, by pyarrow's block), never by the
file: each pass reads again from the start (the synthesis makes 2-3 passes)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from dpsynth_cli.errors import DataError, UsageError
from dpsynth_cli.io.csv_read import _CsvSource
from dpsynth_cli.io.formats import (
    _CSV_SUFFIXES,
    FORMATS,
    STDIN_NAME,
    STDIO,
    _directory_files,
    _reason,
    check_delimiter,
    default_batch_rows,
    parquet_files,
)
from dpsynth_cli.io.source import InputSource, InputTable, check_columns
from dpsynth_cli.io.streams import (
    _ByteSource,
    _check_readable,
    _codec,
    _sniffed_codec,
    _Spool,
    _stdin_stream,
)


def open_input(
    path: str,
    fmt: str,
    columns: list[str] | None,
    *,
    header: bool = True,
    batch_rows: int | None = None,
    delimiter: str | None = None,
) -> InputSource:
    """Open `path` ("-" = stdin) as `fmt` for reading in passes, only `columns` if given.

    CSV columns come back as text (empty fields are nulls; nothing is converted), Parquet columns
    with the types the file declares. A directory is read as its Parquet files (`parquet_files`),
    which must all have the same columns and types, or, as CSV, as its CSV files in name order
    (e.g. the parts `synth --engine dask` writes), each with the same header. Blank lines are
    skipped; a header-only CSV has 0 rows. `header=False` reads a CSV without a header line:
    `columns` then names every field in order. `batch_rows` defaults to
    `default_batch_rows(number of columns)`. `delimiter` separates a CSV's fields (one ASCII
    character; None: a comma, and a header that is one field holding ';', a tab or '|' is
    refused with the --delimiter to give, decided from the header line alone). A file that
    starts with Parquet's magic bytes read as CSV is refused as such. Compressed bytes are
    recognised by their extension, or by gzip's or zstd's
    magic bytes (a stream on stdin has no extension; neither can start UTF-8 text).

    stdin and other non-regular files (pipes such as <(zcat ...)) are copied once into an
    anonymous temporary file (in TMPDIR) so that every pass can read them again; it has no name,
    so nothing is left behind however the process ends.

    Raises UsageError for a requested column that is not in the file and DataError for a missing,
    empty or unreadable input or a malformed header; other CSV problems surface in `batches()`.
    """
    if fmt not in FORMATS:
        raise UsageError(f"unknown format '{fmt}' (expected csv or parquet)")
    if columns is not None and not columns:
        raise UsageError("no columns requested")
    if not header and (fmt != "csv" or columns is None):
        raise UsageError("--no-header is for CSV input and needs --columns naming every field")
    if batch_rows is not None and batch_rows < 1:
        raise UsageError("--batch-rows must be at least 1")
    guess = delimiter is None  # not given: a comma, and a one-field header is looked at
    delimiter = check_delimiter("," if delimiter is None else delimiter, fmt)
    if fmt == "parquet" and path != STDIO and os.path.isdir(path):
        files = parquet_files(path)
        if not files:
            raise DataError(f"input {path} is a directory without .parquet or .pq files")
        return _ParquetSource(path, [(f, f) for f in files], columns, batch_rows, None)
    if fmt == "csv" and path != STDIO and os.path.isdir(path):
        files = _directory_files(path, _CSV_SUFFIXES)
        if not files:
            raise DataError(f"input {path} is a directory without .csv files")
        return _CsvParts(
            path,
            [
                open_input(
                    f,
                    fmt,
                    columns,
                    header=header,
                    batch_rows=batch_rows,
                    delimiter=None if guess else delimiter,
                )
                for f in files
            ],
        )
    codec = None if path == STDIO else _codec(path)
    if path == STDIO:
        name = STDIN_NAME
        spool: _Spool | None = _Spool.of_stream(_stdin_stream(), name)
    else:
        name = path
        spool = None if _check_readable(path) else _Spool.of_file(path)
    try:
        if codec is None and (fmt == "csv" or spool is not None):
            codec = _sniffed_codec(spool, path)
        if fmt == "csv":
            data = _ByteSource(name, path, spool, codec)
            return _CsvSource(data, columns, header, batch_rows, delimiter, guess=guess)
        if spool is not None and codec is not None:  # Parquet needs random access: spool it plain
            spool = spool.decompressed(codec, name)
        if spool is not None and spool.size == 0:
            raise DataError(f"input {name} is empty (0 bytes)")
        where: Any = spool.reader if spool is not None else path  # a path pickles (Dask)
        return _ParquetSource(name, [(name, where)], columns, batch_rows, spool)
    except BaseException:
        if spool is not None:
            spool.close()
        raise


def read_input(
    path: str, fmt: str, columns: list[str] | None, *, header: bool = True
) -> InputTable:
    """Read `path` whole (see `open_input`): the requested columns and every column name."""
    with open_input(path, fmt, columns, header=header) as source:
        return InputTable(source.read_all(), source.all_columns)


def read_table(path: str, fmt: str, columns: list[str] | None, *, header: bool = True) -> pa.Table:
    """`read_input`'s table alone."""
    return read_input(path, fmt, columns, header=header).table


class _ParquetSource(InputSource):
    """Parquet files read by row groups (`ParquetFile.iter_batches`, columns projected)."""

    def __init__(
        self,
        name: str,
        files: list[tuple[str, Any]],
        columns: list[str] | None,
        batch_rows: int | None,
        spool: _Spool | None,
    ) -> None:
        super().__init__(spool)
        self.name, self._files = name, files
        first, total = _parquet_schema(*files[0])
        available = first.names
        wanted = available if columns is None else list(columns)
        check_columns(wanted, available, name)
        for display, where in files[1:]:
            other, rows = _parquet_schema(display, where)
            total += rows
            if other.names != first.names or other.types != first.types:
                raise DataError(
                    f"{display}: its columns or their types differ from {files[0][0]} (the files "
                    f"of {name} must have one schema)"
                )
        self.all_columns, self._wanted, self.num_rows = list(available), wanted, total
        self.schema = pa.schema([first.field(c) for c in wanted], metadata=first.metadata)
        self.batch_rows = batch_rows or default_batch_rows(len(wanted))

    def batches(self, columns: list[str] | None = None) -> Iterator[pa.RecordBatch]:
        for display, where in self._files:
            with contextlib.closing(_parquet_file(display, where)) as pfile:
                pieces = pfile.iter_batches(
                    batch_size=self.batch_rows,
                    columns=self._wanted if columns is None else columns,
                    use_threads=True,
                )
                while True:
                    try:
                        batch = next(pieces)
                    except StopIteration:
                        break
                    except (OSError, pa.ArrowException):
                        raise DataError(
                            f"cannot read {display}: corrupt or unsupported Parquet data"
                        ) from None
                    yield batch


class _CsvParts(InputSource):
    """The CSV files of a directory read in turn as one table (their columns must agree)."""

    def __init__(self, name: str, parts: list[InputSource]) -> None:
        super().__init__(None)
        self.name, self._parts = name, parts
        first = parts[0]
        for part in parts[1:]:
            if part.all_columns != first.all_columns:
                self.close()
                raise DataError(
                    f"{part.name}: its columns differ from {first.name} (the files of {name} "
                    "must have one header)"
                )
        self.schema, self.all_columns, self.batch_rows = (
            first.schema,
            first.all_columns,
            first.batch_rows,
        )

    def batches(self, columns: list[str] | None = None) -> Iterator[pa.RecordBatch]:
        for part in self._parts:
            yield from part.batches(columns)

    def close(self) -> None:
        for part in self._parts:
            part.close()


def _parquet_file(display: str, where: Any) -> pq.ParquetFile:
    source = where() if callable(where) else where
    try:
        # pre_buffer (pyarrow's default) keeps whole row groups' column chunks buffered: 1.8 GiB
        # of RSS for a 10^8 x 2 file read in 10^6-row batches, against 0.17 GiB without it, and
        # slower (5.4 s against 1.2 s, docs/benchmarks.md "Scale")
        return pq.ParquetFile(source, pre_buffer=False)
    except PermissionError as exc:
        raise DataError(f"cannot read {display}: {_reason(exc)}") from None
    except (OSError, pa.ArrowException):
        raise DataError(f"cannot read {display}: not a valid Parquet file") from None


def _parquet_schema(display: str, where: Any) -> tuple[pa.Schema, int]:
    """A Parquet file's schema and number of rows (from its footer)."""
    with contextlib.closing(_parquet_file(display, where)) as pfile:
        return pfile.schema_arrow, pfile.metadata.num_rows
