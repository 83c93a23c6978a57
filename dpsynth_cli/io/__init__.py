"""Reading and writing tables (CSV, gzipped CSV, Parquet) with pyarrow, in record batches.

Memory is bounded by the batch (and, for CSV, by pyarrow's block), never by the file: `open_input`
gives an `InputSource` whose `batches()` reads the input again from the start on every call (the
synthesis makes 2-3 passes), and `write_outputs` writes an iterable of batches atomically.

Error messages name the file, line or column and never contain a data value: pyarrow's own
messages often quote row content, so they are never passed through.

CSV reading is strict about *structure*. pyarrow's streaming reader parses the records; a record
with the wrong number of fields goes to a handler that keeps only its number and the two field
counts (never its text). On the way to pyarrow every block is checked for what pyarrow does not
check: UTF-8 validity of every byte (also in columns not read) and the quote state at the end of
the data (pyarrow silently accepts an unterminated quoted field). A field longer than
`field_limit` is replaced by an empty one (`_FieldCap`, docs/privacy.md): record length is not
structure, so no row's length can fail a run. Only when something is wrong is
the input scanned again, record by record and one block at a time (`_CsvScan`, vectorised), to
turn pyarrow's record number or a byte offset into a physical line number (1-based, the header is
line 1; blank lines and line breaks inside quoted fields count). A clean file pays for no scan.

CSV *values* are never used to guess types: every CSV column is read as text, and
`domain.value_matrix` parses it with the column's declared type, one cell at a time. A type guessed
from the values would be a function of every row, so one row could change the released file's
schema (docs/privacy.md, "The domain is declared").
"""

from __future__ import annotations

import codecs
import collections
import contextlib
import errno
import gzip
import io as pyio
import itertools
import os
import re
import shutil
import signal
import stat
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, BinaryIO, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from dpsynth_cli.errors import DataError, UsageError

__all__ = [
    "CSV_BLOCK_BYTES",
    "DEFAULT_BATCH_ROWS",
    "InputSource",
    "InputTable",
    "OutputClosed",
    "atomic_directory",
    "atomic_output",
    "atomic_write_bytes",
    "check_delimiter",
    "check_outputs",
    "check_part_directory",
    "default_batch_rows",
    "detect_format",
    "move_file",
    "open_input",
    "parquet_files",
    "part_directory_format",
    "part_name",
    "part_suffix",
    "process_alive",
    "read_input",
    "read_table",
    "signals_held",
    "write_outputs",
    "write_part",
    "write_part_directory",
    "write_table",
]

FORMATS = ("csv", "parquet")
STDIO = "-"
STDIN_NAME = "<stdin>"
STDOUT_NAME = "<stdout>"
CSV_CHUNK_ROWS = 65_536  # rows per serialised CSV chunk when writing

# Rows per input batch. Per-batch costs (Python calls, numpy and pyarrow dispatch) are amortised
# long before 10^6 rows, and a batch of 10^6 rows x d columns is 8d MB as float64 values, which the
# statistics pass copies a few times (values, unit-cube coordinates, cell indices): about 50-200 MB
# for the usual d <= 16. Wide tables get fewer rows (`default_batch_rows`) so that a batch's values
# stay within BATCH_VALUE_BYTES whatever d is.
DEFAULT_BATCH_ROWS = 1_000_000
BATCH_VALUE_BYTES = 128 << 20
# pyarrow reads CSV in blocks of this many bytes, and a record (a row, with any line breaks inside
# its quoted fields) must fit in one block (two, if it is lucky): so fields longer than
# `field_limit(CSV_BLOCK_BYTES, fields)` are read as missing (`_FieldCap`), which makes every
# record with the header's number of fields fit, whatever its length. Its streaming reader reads
# up to 32 blocks ahead, which bounds the raw CSV held at once to about 70 MiB; its batches of one
# block each (about 10^5 rows of a few numeric columns) are gathered into batches of `batch_rows`.
CSV_BLOCK_BYTES = 2 << 20
# Parquet output: small batches are gathered into row groups of up to this size.
ROW_GROUP_ROWS = 1 << 20
ROW_GROUP_BYTES = 64 << 20

_EXTENSIONS = ((".csv.gz", "csv"), (".csv", "csv"), (".parquet", "parquet"), (".pq", "parquet"))
_PARQUET_SUFFIXES = (".parquet", ".pq")
_CSV_SUFFIXES = (".csv", ".csv.gz", ".csv.bz2", ".csv.zst")
_COMPRESSION = {".gz": "gzip", ".bz2": "bz2", ".zst": "zstd"}
_BOM = b"\xef\xbb\xbf"
_COMMA, _LF, _CR, _QUOTE = 44, 10, 13, 34
_SPOOL_CHUNK = 1 << 20
# What a header name that is really a number looks like (a headerless file's first row).
_NUMBER = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")
# A column no CSV has: reading only it makes pyarrow parse records without converting any field.
_NO_COLUMN = "\x00dpsynth: no column\x00"


class OutputClosed(Exception):
    """The reader of stdout went away (e.g. `| head`). Not an error: the CLI exits 0 on it."""

    exit_code = 0


# --------------------------------------------------------------------------- format detection


def detect_format(path: str, override: str | None, *, flag: str | None = None) -> str:
    """Return "csv" or "parquet" for `path`: `override` wins, then the extension; "-" is CSV;
    a directory whose files (not hidden) end in Parquet extensions only, or CSV ones only, has
    their format.

    `flag` names the option that overrides it (e.g. "--input-format") in the error message.
    """
    if override is not None:
        fmt = override.strip().lower()
        if fmt not in FORMATS:
            raise UsageError(
                f"{flag or '--input-format/--output-format'}: unknown format '{override}' "
                "(expected csv or parquet)"
            )
        return fmt
    if path == STDIO:
        return "csv"
    lower = path.lower().rstrip("/")
    for ext, fmt in _EXTENSIONS:
        if lower.endswith(ext):
            return fmt
    if os.path.isdir(path):
        found = [
            f
            for f, ends in (("parquet", _PARQUET_SUFFIXES), ("csv", _CSV_SUFFIXES))
            if _directory_files(path, ends)
        ]
        if len(found) == 1:  # a directory of Parquet (or CSV) parts: their names say it
            return found[0]
        what = "both Parquet and CSV files" if found else "no .parquet or .csv files"
        raise UsageError(
            f"{path} is a directory with {what} (for a directory of Parquet or CSV files as the "
            "input, give --input-format parquet or csv)"
        )
    flags = flag or "--input-format or --output-format"
    raise UsageError(
        f"cannot tell the format of {path} from its extension (.csv, .csv.gz, .parquet, .pq); "
        f"name it with {flags} (csv or parquet)"
    )


# --------------------------------------------------------------------------- reading: the API


def default_batch_rows(columns: int) -> int:
    """Rows per batch for `columns` columns: DEFAULT_BATCH_ROWS, fewer for wide tables."""
    return max(1, min(DEFAULT_BATCH_ROWS, BATCH_VALUE_BYTES // (8 * max(columns, 1))))


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


def open_input(
    path: str,
    fmt: str,
    columns: list[str] | None,
    *,
    header: bool = True,
    batch_rows: int | None = None,
    delimiter: str = ",",
) -> InputSource:
    """Open `path` ("-" = stdin) as `fmt` for reading in passes, only `columns` if given.

    CSV columns come back as text (empty fields are nulls; nothing is converted), Parquet columns
    with the types the file declares. A directory is read as its Parquet files (`parquet_files`),
    which must all have the same columns and types, or, as CSV, as its CSV files in name order
    (e.g. the parts `synth --engine dask` writes), each with the same header. Blank lines are
    skipped; a header-only CSV has 0 rows. `header=False` reads a CSV without a header line:
    `columns` then names every field in order. `batch_rows` defaults to
    `default_batch_rows(number of columns)`. `delimiter` separates a CSV's fields (one ASCII
    character). Compressed bytes are recognised by their extension, or by gzip's or zstd's
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
    check_delimiter(delimiter, fmt)
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
                    f, fmt, columns, header=header, batch_rows=batch_rows, delimiter=delimiter
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
            return _CsvSource(data, columns, header, batch_rows, delimiter)
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


def parquet_files(directory: str) -> list[str]:
    """The Parquet files of a directory (not its subdirectories), sorted by name, so that every
    pass and every engine sees the rows in the same order."""
    return _directory_files(directory, _PARQUET_SUFFIXES)


def _directory_files(directory: str, suffixes: tuple[str, ...]) -> list[str]:
    """A directory's files (not subdirectories, not hidden) ending in `suffixes`, by name."""
    try:
        names = os.listdir(directory)
    except OSError as exc:
        raise DataError(f"cannot read {directory}: {_reason(exc)}") from None
    return [
        os.path.join(directory, n)
        for n in sorted(names)
        if n.lower().endswith(suffixes)
        and not n.startswith(".")
        and os.path.isfile(os.path.join(directory, n))
    ]


# --------------------------------------------------------------------------- reading: bytes


class _Reader(Protocol):
    def read(self, n: int, /) -> bytes: ...


def _stdin_stream() -> Any:
    if sys.stdin is None:  # started with stdin closed (`<&-`): Python then has no sys.stdin
        raise DataError(f"cannot read {STDIN_NAME}: it is closed (give a file, or pipe one in)")
    return getattr(sys.stdin, "buffer", sys.stdin)


def _check_readable(path: str) -> bool:
    """Raise DataError for a missing path, a directory or an empty regular file.

    Returns whether `path` is a regular file (a pipe's size is unknown until it is read).
    """
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise DataError(f"input file {path} does not exist") from None
    except OSError as exc:
        raise DataError(f"cannot read {path}: {_reason(exc)}") from None
    if stat.S_ISDIR(st.st_mode):
        raise DataError(f"input {path} is a directory, not a file")
    regular = stat.S_ISREG(st.st_mode)
    if regular and st.st_size == 0:
        raise DataError(f"input file {path} is empty (0 bytes)")
    return regular


def _codec(path: str) -> str | None:
    return next((c for ext, c in _COMPRESSION.items() if path.lower().endswith(ext)), None)


# Compressed streams recognised by their first bytes (RFC 1952, RFC 8878): neither can start
# UTF-8 text, so a CSV is never mistaken for one.
_MAGIC = {b"\x1f\x8b": "gzip", b"\x28\xb5\x2f\xfd": "zstd"}


def _sniffed_codec(spool: _Spool | None, path: str) -> str | None:
    """The codec whose magic bytes start the input (stdin, a pipe, a file without a .gz
    extension), or None; an unreadable file is reported later, where it is read."""
    try:
        if spool is not None:
            with contextlib.closing(spool.reader()) as reader:
                head = reader.read(4)
        else:
            with open(path, "rb") as fh:
                head = fh.read(4)
    except OSError:
        return None
    return next((codec for magic, codec in _MAGIC.items() if head.startswith(magic)), None)


def check_delimiter(delimiter: str, fmt: str = "csv") -> str:
    """--delimiter: one ASCII character other than a quote or a line end ('\\t' or 'tab' for a
    tab), for CSV input only."""
    if delimiter == ",":
        return delimiter
    if fmt != "csv":
        raise UsageError("--delimiter is for CSV input")
    if len(delimiter) != 1 or not delimiter.isascii() or delimiter in '"\r\n':
        raise UsageError(
            "--delimiter takes one character other than a quote or a line end, e.g. "
            "--delimiter ';' (a tab: --delimiter tab)"
        )
    return delimiter


def delimiter_flag(text: str | None) -> str:
    """The --delimiter value as a character: 'tab' and '\\t' mean a tab; default a comma."""
    if text is None:
        return ","
    return "\t" if text.strip().lower() in ("tab", "\\t") else text


def _reason(exc: OSError) -> str:
    """The OS's reason for an error (e.g. 'Permission denied'), never a message with data."""
    return exc.strerror or type(exc).__name__


class _Spool:
    """A pipe's or stdin's bytes in an anonymous temporary file, so that passes can re-read them.

    `tempfile.TemporaryFile` has no name (O_TMPFILE, or unlinked at once where that is missing):
    the copy disappears when it is closed or the process ends, by a signal or SIGKILL too.
    """

    def __init__(self) -> None:
        self._file = tempfile.TemporaryFile()  # noqa: SIM115 (lives as long as the source)
        self.size = 0

    @classmethod
    def of_stream(cls, stream: Any, name: str) -> _Spool:
        spool = cls()
        try:
            while True:
                try:
                    chunk = stream.read(_SPOOL_CHUNK)
                except OSError as exc:
                    raise DataError(f"cannot read {name}: {_reason(exc)}") from None
                if not chunk:
                    break
                if isinstance(chunk, str):  # a text-only replacement of sys.stdin (tests)
                    chunk = chunk.encode("utf-8")
                spool._write(chunk, name)
            spool._file.flush()
        except BaseException:
            spool.close()
            raise
        return spool

    @classmethod
    def of_file(cls, path: str) -> _Spool:
        try:
            fh = open(path, "rb")  # noqa: SIM115
        except OSError as exc:
            raise DataError(f"cannot read {path}: {_reason(exc)}") from None
        with fh:
            return cls.of_stream(fh, path)

    def decompressed(self, codec: str, name: str) -> _Spool:
        """A new spool with this one's content decompressed (this one is closed)."""
        try:
            with contextlib.closing(self.reader()) as raw:
                return _Spool.of_stream(_Decompressed(raw, codec, name), name)
        finally:
            self.close()

    def _write(self, chunk: bytes, name: str) -> None:
        try:
            self._file.write(chunk)
        except OSError as exc:
            raise DataError(
                f"cannot read {name}: copying it to {tempfile.gettempdir()} failed "
                f"({_reason(exc)}; set TMPDIR to a directory with room)"
            ) from None
        self.size += len(chunk)

    def reader(self) -> _PreadFile:
        """A new reader from the start, with its own position (passes may overlap)."""
        return _PreadFile(self._file.fileno(), self.size)

    def close(self) -> None:
        self._file.close()


class _PreadFile(pyio.RawIOBase):
    """A seekable read-only view of a file descriptor by `os.pread` (independent positions)."""

    def __init__(self, fd: int, size: int) -> None:
        super().__init__()
        self._fd, self._size, self._pos = fd, size, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        if n is None or n < 0:
            n = max(self._size - self._pos, 0)
        data = os.pread(self._fd, n, self._pos)
        self._pos += len(data)
        return data

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        base = {os.SEEK_SET: 0, os.SEEK_CUR: self._pos, os.SEEK_END: self._size}[whence]
        self._pos = max(base + offset, 0)
        return self._pos

    def tell(self) -> int:
        return self._pos


class _Decompressed:
    """`raw` decompressed with pyarrow's codec; corrupt data is a one-line DataError."""

    def __init__(self, raw: Any, codec: str, name: str) -> None:
        source = raw if isinstance(raw, pa.NativeFile) else pa.PythonFile(raw, mode="r")
        self._stream = pa.CompressedInputStream(source, codec)
        self._codec, self._name = codec, name

    def read(self, n: int) -> bytes:
        try:
            return self._stream.read(n)
        except OSError as exc:
            if exc.errno is not None and exc.strerror:  # from the OS, e.g. an I/O error
                raise DataError(f"cannot read {self._name}: {exc.strerror}") from None
            raise DataError(f"cannot read {self._name}: not valid {self._codec} data") from None
        except pa.ArrowException:
            raise DataError(f"cannot read {self._name}: not valid {self._codec} data") from None

    def close(self) -> None:
        self._stream.close()


@dataclass(frozen=True)
class _ByteSource:
    """Where each pass reads a CSV's bytes: the file or the spool, decompressed by extension."""

    name: str
    path: str
    spool: _Spool | None
    codec: str | None

    @contextlib.contextmanager
    def open(self) -> Iterator[_Reader]:
        """A new reader of the (decompressed) bytes from the start."""
        try:
            if self.spool is not None:
                raw: Any = self.spool.reader()
            elif self.codec is not None:
                raw = pa.OSFile(self.path)  # pyarrow decompresses natively
            else:
                raw = open(self.path, "rb")  # noqa: SIM115 (closed below)
        except OSError as exc:
            raise DataError(f"cannot read {self.name}: {_reason(exc)}") from None
        with contextlib.closing(raw):
            if self.codec is None:
                yield _Plain(raw, self.name)
            else:
                with contextlib.closing(_Decompressed(raw, self.codec, self.name)) as stream:
                    yield stream


class _Plain:
    def __init__(self, raw: BinaryIO, name: str) -> None:
        self._raw, self._name = raw, name

    def read(self, n: int) -> bytes:
        try:
            return self._raw.read(n)
        except OSError as exc:
            raise DataError(f"cannot read {self._name}: {_reason(exc)}") from None


def _read_block(reader: _Reader, n: int) -> bytes:
    """`n` bytes, fewer only at the end of the data."""
    first = reader.read(n)
    if len(first) >= n or not first:
        return first
    parts = [first]
    got = len(first)
    while got < n:
        more = reader.read(n - got)
        if not more:
            break
        parts.append(more)
        got += len(more)
    return b"".join(parts)


# --------------------------------------------------------------------------- reading: CSV


class _CsvBlocks:
    """A CSV's bytes as pyarrow parses them, in blocks, each with the byte that follows it (-1 at
    the end: CRLF and "" can straddle blocks).

    Byte order marks and blank lines before the header are dropped (`skipped_lines` counts the
    lines): pyarrow cannot start on a block of blank lines, and it drops a BOM at the start of
    what it reads, which the line scan would not know about.
    """

    def __init__(self, reader: _Reader, name: str, block: int) -> None:
        self._reader, self._block = reader, block
        data = _read_block(reader, max(block, len(_BOM)))
        if data.startswith(_BOM):
            data = data[len(_BOM) :]
        if not data and not (data := _read_block(reader, block)):
            raise DataError(f"input {name} is empty (0 bytes)")
        self.skipped_lines, cr_before = 0, False
        while True:
            if data.startswith(_BOM):
                data, cr_before = data[len(_BOM) :], False
                continue
            rest = data.lstrip(b"\r\n")
            blank = data[: len(data) - len(rest)]
            if blank:
                if cr_before and blank.startswith(b"\n"):
                    self.skipped_lines -= 1  # a CRLF split between two blocks is one line end
                lines = blank.count(b"\n") + blank.count(b"\r") - blank.count(b"\r\n")
                self.skipped_lines += lines
                cr_before = blank.endswith(b"\r")
            if rest and not _BOM.startswith(rest):  # not (a piece of) a BOM
                break
            more = _read_block(reader, block)
            if not more:
                if rest:
                    break
                raise DataError(f"input {name} is empty (no header line)")
            data = rest + more
        if len(rest) < block:  # a full first block: pyarrow needs the header whole in it
            rest += _read_block(reader, block - len(rest))
        self._first: bytes | None = rest

    def blocks(self) -> Iterator[tuple[bytes, int, int]]:
        """(block, its offset, the next byte or -1); only once."""
        data, self._first = self._first, None
        pos = 0
        while data:
            following = _read_block(self._reader, self._block)
            yield data, pos, following[0] if following else -1
            pos += len(data)
            data = following


class _Utf8:
    """Streaming UTF-8 validation: the offset of the first invalid byte."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")()

    def check(self, data: bytes, pos: int, final: bool) -> int | None:
        """The stream offset of the first invalid byte in `data` (at `pos`), or None."""
        pending = len(self._decoder.getstate()[0])
        if not pending and data.isascii():
            return None
        try:
            self._decoder.decode(data, final=final)
        except UnicodeDecodeError as exc:
            return pos - pending + exc.start
        return None


# Quote states of pyarrow's CSV parser: outside a quoted field, inside one, and just after a quote
# inside one that is followed by another quote (an escaped "" whose second quote is next).
_OUT, _IN, _ESC = 0, 1, 2


def _quote_steps(
    buf: np.ndarray, quotes: np.ndarray, prev: int, following: int, delimiter: int = _COMMA
) -> np.ndarray:
    """Each quote's transition as a row [next state from _OUT, from _IN, from _ESC].

    pyarrow's rules: a quote opens a quoted field only at the start of a field (after a comma, a
    line end or at the start of the data); inside, a quote followed by a quote is an escaped
    quote, any other quote closes the field; a quote inside an unquoted field is a character.
    """
    n = buf.size
    before = np.empty(quotes.size, dtype=np.int16)
    before[1:] = buf[quotes[1:] - 1]
    before[0] = buf[quotes[0] - 1] if quotes[0] > 0 else prev
    after = np.empty(quotes.size, dtype=np.int16)
    after[:-1] = buf[quotes[:-1] + 1]
    after[-1] = buf[quotes[-1] + 1] if quotes[-1] + 1 < n else following
    at_start = (before == delimiter) | (before == _LF) | (before == _CR) | (before < 0)
    steps = np.empty((quotes.size, 3), dtype=np.uint8)
    steps[:, _OUT] = np.where(at_start, _IN, _OUT)
    steps[:, _IN] = np.where(after == _QUOTE, _ESC, _OUT)
    steps[:, _ESC] = _IN
    return steps


def _compose(steps: np.ndarray) -> np.ndarray:
    """The transition of all quotes in turn (a pairwise reduction: O(quotes) work)."""
    while steps.shape[0] > 1:
        odd = steps[-1:] if steps.shape[0] % 2 else steps[:0]
        pairs = steps[: steps.shape[0] - odd.shape[0]]
        steps = np.concatenate([np.take_along_axis(pairs[1::2], pairs[0::2], axis=1), odd])
    return steps[0]


def _prefix_states(steps: np.ndarray, start: int) -> np.ndarray:
    """The state after each quote, from `start` (a doubling scan: O(quotes log quotes))."""
    done = steps.copy()
    k = 1
    while k < done.shape[0]:
        done[k:] = np.take_along_axis(done[k:], done[:-k], axis=1)
        k *= 2
    return done[:, start]


def _quote_state(
    buf: np.ndarray, data: bytes, state: int, prev: int, following: int, delimiter: int = _COMMA
) -> int:
    """The quote state after `data`, from `state` at its start (the cheap check)."""
    if b'"' not in data:
        return state
    quotes = np.flatnonzero(buf == _QUOTE)
    return int(_compose(_quote_steps(buf, quotes, prev, following, delimiter))[state])


@dataclass
class _Opening:
    offset: int  # of the quote that opened the quoted field still open
    line: int
    rank: int  # the non-blank record it is in (1 = the first, the header)


class _CsvScan:
    """The exact record structure of a CSV byte stream, fed block by block (error path only).

    Follows pyarrow's parser: records end at LF, CRLF or a lone CR outside quoted fields, and
    blank records are skipped, so the rank of a non-blank record is pyarrow's row number.
    Finds the physical line of record `want`, of the first invalid UTF-8 byte, of a first
    record (the header) longer than `block` bytes, of the first record whose number of fields
    differs from `fields` (default: the first record's), and of the quote that opened a field
    still open.
    """

    def __init__(
        self,
        block: int,
        *,
        want: int | None = None,
        utf8: bool = False,
        pos: int = 0,
        state: int = _OUT,
        prev: int = -1,
        fields: int | None = None,
        delimiter: int = _COMMA,
    ) -> None:
        self.block, self.want, self.delimiter = block, want, delimiter
        self.pos, self.state, self.prev = pos, state, prev
        self.lines = 0  # line ends before pos
        self.records = 0  # non-blank records ended before pos
        self.rec_start, self.rec_line = pos, 1  # the record under way
        self.rec_commas = 0  # commas outside quotes in the record under way, before pos
        self.fields = fields
        self.bad_fields: tuple[int, int, int, int] | None = None  # line, rank, expected, found
        self.want_line: int | None = None
        self.want_ended = False  # record `want` ended with a line end (it is not the last)
        self.long_line: int | None = None
        self.bad_utf8_line: int | None = None
        self.bad_utf8_ended = False
        self._bad_utf8: int | None = None
        self.opening: _Opening | None = None
        self.at_end = False
        self._utf8 = _Utf8() if utf8 else None

    def feed(self, data: bytes, following: int) -> np.ndarray:
        """Scan the next block; returns the stream offsets of its record ends."""
        buf = np.frombuffer(data, dtype=np.uint8)
        n, pos = buf.size, self.pos
        ends = np.flatnonzero(buf == _LF)
        if b"\r" in data:
            cr = np.flatnonzero(buf == _CR)
            nxt = np.full(cr.size, following, dtype=np.int16)
            inner = cr + 1 < n
            nxt[inner] = buf[cr[inner] + 1]
            lone = cr[nxt != _LF]
            if lone.size:
                ends = np.union1d(ends, lone)
        if self._utf8 is not None and self.bad_utf8_line is None:
            bad = self._utf8.check(data, pos, final=following < 0)
            if bad is not None:
                self._bad_utf8 = bad
                self.bad_utf8_line = self.lines + int(np.searchsorted(ends, bad - pos)) + 1
        quotes = np.flatnonzero(buf == _QUOTE) if b'"' in data else buf[:0]
        commas = np.flatnonzero(buf == self.delimiter)
        if quotes.size:
            steps = _quote_steps(buf, quotes, self.prev, following, self.delimiter)
            after = _prefix_states(steps, self.state)
            before = np.concatenate([[self.state], after[:-1]])
            k = np.searchsorted(quotes, ends)
            inside = np.where(k > 0, after[np.maximum(k - 1, 0)], self.state) != _OUT
            kc = np.searchsorted(quotes, commas)
            commas = commas[np.where(kc > 0, after[np.maximum(kc - 1, 0)], self.state) == _OUT]
            opens = quotes[(before == _OUT) & (steps[:, _OUT] == _IN)]
            state = int(after[-1])
        else:
            inside = np.full(ends.size, self.state != _OUT)
            commas = commas if self.state == _OUT else commas[:0]
            opens, state = quotes, self.state
        term_idx = np.flatnonzero(~inside)
        terms = ends[term_idx]
        nonblank = np.zeros(0, dtype=bool)
        if terms.size:
            starts = np.empty(terms.size, dtype=np.int64)
            starts[0] = self.rec_start
            starts[1:] = pos + terms[:-1] + 1
            length = pos + terms - starts
            last = np.where(terms > 0, buf[np.maximum(terms - 1, 0)], self.prev)
            nonblank = ~((length == 0) | ((length == 1) & (last == _CR)))
            lines = np.empty(terms.size, dtype=np.int64)
            lines[0] = self.rec_line
            lines[1:] = self.lines + term_idx[:-1] + 2
            ranks = self.records + np.cumsum(nonblank)
            if self.want is not None and self.want_line is None:
                hit = np.flatnonzero(nonblank & (ranks == self.want))
                if hit.size:
                    self.want_line, self.want_ended = int(lines[hit[0]]), True
            if self.long_line is None:
                long = np.flatnonzero(nonblank & (ranks == 1) & (length + 1 > self.block))
                if long.size:
                    self.long_line = int(lines[long[0]])
            upto = np.searchsorted(commas, terms)
            fields = np.diff(np.concatenate([[0], upto])) + 1
            fields[0] += self.rec_commas
            self.rec_commas = int(commas.size - upto[-1])
            self._check_fields(fields[nonblank], lines[nonblank], ranks[nonblank])
        else:
            self.rec_commas += int(commas.size)
        if state == _OUT:
            self.opening = None
        elif opens.size:
            at = int(opens[-1])
            earlier = int(np.count_nonzero(nonblank[terms < at])) if terms.size else 0
            line = self.lines + int(np.searchsorted(ends, at)) + 1
            self.opening = _Opening(pos + at, line, self.records + earlier + 1)
        if terms.size:
            if self._bad_utf8 is not None and pos + terms[-1] >= self._bad_utf8:
                self.bad_utf8_ended = True  # the record holding it has ended
            self.records += int(np.count_nonzero(nonblank))
            self.rec_start = pos + int(terms[-1]) + 1
            self.rec_line = self.lines + int(term_idx[-1]) + 2
        self.lines += ends.size
        self.pos += n
        self.prev = int(buf[-1]) if n else self.prev
        self.state = state
        return pos + terms

    def _check_fields(self, fields: np.ndarray, lines: np.ndarray, ranks: np.ndarray) -> None:
        """Note the first non-blank record whose number of fields is not the expected one."""
        if not fields.size or self.bad_fields is not None:
            return
        if self.fields is None:
            self.fields = int(fields[0])
        wrong = np.flatnonzero(fields != self.fields)
        if wrong.size:
            j = int(wrong[0])
            self.bad_fields = (int(lines[j]), int(ranks[j]), self.fields, int(fields[j]))

    def finish(self) -> None:
        """The end of the data: the last record may end without a line end."""
        self.at_end = True
        if self.rec_start < self.pos:  # not blank: a trailing CR would have ended it
            self.records += 1
            if self.want == self.records and self.want_line is None:
                self.want_line = self.rec_line
            long = self.pos - self.rec_start + 1 > self.block  # pyarrow gets a line end too
            first = self.records == 1
            if self.long_line is None and long and first and self.state == _OUT:
                self.long_line = self.rec_line  # else: unterminated
            if self.state == _OUT:
                one = np.array([self.rec_commas + 1])
                self._check_fields(one, np.array([self.rec_line]), np.array([self.records]))


def field_limit(block: int, fields: int) -> int:
    """The longest field (bytes between two delimiters, quotes included) read as it is, in a CSV
    of `fields` fields per record read in blocks of `block` bytes: a record whose fields are all
    this long, with its commas and a CRLF, fits in one block, which is all pyarrow needs. A
    longer field is read as missing (`_FieldCap`). Public: from the header and a constant."""
    return max(2, (block - 2) // max(fields, 1) - 1)


# A long field's replacement: an empty quoted field, which is missing (null), in any column.
_MISSING_FIELD = b'""'


def _first_of(data: bytes, needles: tuple[bytes, ...], start: int, end: int) -> int:
    """The first offset in data[start:end] of any of `needles` (single bytes), or -1; each search
    stops where an earlier needle was found."""
    found = -1
    for needle in needles:
        at = data.find(needle, start, end if found < 0 else found)
        if at >= 0:
            found = at
    return found


def _last_of(data: bytes, needles: tuple[bytes, ...], start: int, end: int) -> int:
    """The last offset in data[start:end] of any of `needles` (single bytes), or -1."""
    found = -1
    for needle in needles:
        at = data.rfind(needle, start if found < 0 else found + 1, end)
        if at >= 0:
            found = at
    return found


class _FieldCap:
    """The CSV stream with every field longer than `field_limit` replaced by `""` (missing), in
    memory bounded by a block and the limit.

    Why: pyarrow parses a record only if it fits in its blocks, so a row longer than a block
    failed the whole run, and between one and two blocks that depended on where the row fell,
    i.e. on the other rows' sizes. With every field capped, every record with the header's
    field count fits in one block whatever the data; the cap is a function of the field's own
    bytes and of public things (the header's field count, the block size), so a row is read
    the same wherever it is and whatever the other rows are. A long field in a column that is
    not read changes nothing; in a column that is read its value is missing, like any value
    that does not parse.

    Fields are the bytes between delimiters (comma, LF, CR) outside quoted fields, with
    pyarrow's quote rules (`_quote_steps`). The first record is the header when `fields` is
    None: passed on as it is, and its field count sets the limit. The field still open at the
    end of a block is held back (at most `limit` bytes; beyond that it is dropped and becomes
    `""` at its end), so a field is judged whole before any byte of it is passed on.
    """

    def __init__(self, block: int, fields: int | None, delimiter: int = _COMMA) -> None:
        self._block, self._delimiter = block, delimiter
        self._ends = (bytes([delimiter]), b"\n", b"\r")  # what ends a field
        self._starts = np.array([delimiter, _LF, _CR, _QUOTE, -1], dtype=np.int16)
        self.limit = None if fields is None else field_limit(block, fields)
        self._header_fields = 1  # fields of the header record seen so far
        self._state, self._prev = _OUT, -1
        self._carry = b""  # the open field's bytes so far (not while skipping)
        self._length = 0  # the open field's length so far
        self._skipping = False  # the open field is longer than the limit

    def feed(self, data: bytes, following: int) -> list[bytes | memoryview]:
        """The pieces to pass on for the next piece of the stream (`following`: the byte after
        it, -1 at the end); views of `data` where it goes on unchanged (no copies)."""
        out: list[bytes | memoryview] = []
        view = memoryview(data)
        if data and self.limit is None and self._state == _OUT:  # a header without quotes
            end = _first_of(data, (b"\n", b"\r"), 0, len(data))
            if end >= 0 and b'"' not in data[:end]:
                self._header_fields += data.count(b",", 0, end)
                self.limit = field_limit(self._block, self._header_fields)
                self._prev = data[end]
                out.append(view[: end + 1])
                data, view = data[end + 1 :], view[end + 1 :]
        if data:
            quoted = b'"' in data
            if self.limit is None or self._skipping or not (quoted or self._state == _OUT):
                self._general(data, view, following, quoted, out)
            elif quoted:
                self._quoted(data, view, following, out)
            else:
                self._plain(data, view, out)
            self._prev = data[-1]
        if following < 0:
            out.append(self._flush())
        return out

    def _flush(self) -> bytes:
        """The end of the data also ends the open field."""
        long = self._skipping or (self.limit is not None and self._length > self.limit)
        out = _MISSING_FIELD if long else self._carry
        self._carry, self._length, self._skipping = b"", 0, False
        return out

    def _plain(self, data: bytes, view: memoryview, out: list[bytes | memoryview]) -> None:
        """A block without quotes outside a quoted field: its delimiters are the field
        boundaries. When a check of windows of about limit/2 bytes shows every field short, the
        block goes on as it is, less its open field; otherwise `_general`."""
        limit, n = self.limit, len(data)
        assert limit is not None
        first = _first_of(data, self._ends, 0, n)
        last = _last_of(data, self._ends, 0, n)
        window = limit // 2 + 1  # every window holds a delimiter: fields <= 2 window - 2
        if (
            first < 0
            or self._length + first > limit
            or n - last - 1 > limit
            or (last - first) // window > 64
            or not all(
                _first_of(data, self._ends, i, i + window) >= 0
                for i in range(first + 1, last - window + 1, window)
            )
        ):
            self._general(data, view, -1, False, out)
            return
        out += [self._carry, view[: last + 1]]
        self._carry, self._length = data[last + 1 :], n - last - 1

    def _quoted(
        self, data: bytes, view: memoryview, following: int, out: list[bytes | memoryview]
    ) -> None:
        """A block with quotes: when they pair up by parity (`_boundaries`) and every record
        in it is at most `limit` bytes (the first counted with the open field before it), none
        of its fields is longer, and it goes on as it is up to its last record end; the rest (at
        most `limit` bytes) through `_general`. Else all of it through `_general`. This looks
        at the record ends only, one per row where `_general` looks at every delimiter."""
        limit = self.limit
        assert limit is not None
        buf = np.frombuffer(data, dtype=np.uint8)
        quotes = np.flatnonzero(buf == _QUOTE)
        ends = np.flatnonzero(buf == _LF)
        if b"\r" in data:
            ends = np.union1d(ends, np.flatnonzero(buf == _CR))
        odd = self._parity(buf, quotes)
        if odd is None:
            ends = ends[:0]
        else:
            ends = ends[(np.searchsorted(quotes, ends) + odd) % 2 == 0]  # outside quoted fields
        n = len(data)
        if (
            not ends.size
            or self._length + int(ends[0]) > limit
            or n - int(ends[-1]) - 1 > limit
            or (ends.size > 1 and int(np.diff(ends).max()) - 1 > limit)
        ):
            self._general(data, view, following, True, out)
            return
        last = int(ends[-1])
        out += [self._carry, view[: last + 1]]
        self._carry, self._length, self._prev, self._state = b"", 0, data[last], _OUT
        rest = data[last + 1 :]
        if rest:
            self._general(rest, view[last + 1 :], following, b'"' in rest, out)

    def _boundaries(self, buf: np.ndarray, following: int, quoted: bool) -> np.ndarray:
        """The offsets of the delimiters outside quoted fields in `buf` (the field boundaries);
        carries the quote state on.

        With quotes, the quick way: the n-th quote (from the state at the start) toggles
        inside/outside by parity, which is pyarrow's rule exactly when every quote that parity
        takes as opening sits at the start of a field or right after a quote (the second of an
        escaped pair; by induction, the states then agree at every byte that is not a quote).
        Otherwise (a quote inside an unquoted field) the exact scan of `_quote_steps`."""
        delims = np.flatnonzero((buf == self._delimiter) | (buf == _LF) | (buf == _CR))
        if not quoted:
            return delims if self._state == _OUT else delims[:0]
        quotes = np.flatnonzero(buf == _QUOTE)
        odd = self._parity(buf, quotes)
        if odd is not None:
            seen = np.cumsum(buf == _QUOTE, dtype=np.int32)[delims]  # quotes before each
            inside = (seen + odd) % 2 == 1
            if (quotes.size + odd) % 2:
                self._state = _IN
            else:
                self._state = _ESC if buf[-1] == _QUOTE and following == _QUOTE else _OUT
            return delims[~inside]
        steps = _quote_steps(buf, quotes, self._prev, following, self._delimiter)
        after = _prefix_states(steps, self._state)
        k = np.searchsorted(quotes, delims)
        states = np.where(k > 0, after[np.maximum(k - 1, 0)], self._state)
        self._state = int(after[-1])
        return delims[states == _OUT]

    def _parity(self, buf: np.ndarray, quotes: np.ndarray) -> int | None:
        """1 if the block starts inside a quoted field, else 0, when counting quotes gives the
        quote state (every quote that parity takes as opening starts a field or follows a
        quote); None when it does not. A quote at the start of the block that follows the
        previous block's quote reopens only from _ESC (an escaped pair across the blocks)."""
        odd = 1 if self._state == _IN else 0  # _ESC: the next byte is a quote that reopens
        opening = quotes[odd::2]
        before = buf[np.maximum(opening - 1, 0)].astype(np.int16)
        if opening.size and opening[0] == 0:
            escaped = self._prev == _QUOTE and self._state == _ESC
            before[0] = self._prev if self._prev != _QUOTE or escaped else 0
        return odd if np.isin(before, self._starts).all() else None

    def _general(
        self,
        data: bytes,
        view: memoryview,
        following: int,
        quoted: bool,
        out: list[bytes | memoryview],
    ) -> None:
        buf = np.frombuffer(data, dtype=np.uint8)
        bounds = self._boundaries(buf, following, quoted)
        start = 0
        if self.limit is None:  # the header: passed on whole, its fields counted
            ends = bounds[(buf[bounds] == _LF) | (buf[bounds] == _CR)]
            if not ends.size:
                self._header_fields += int(np.count_nonzero(buf[bounds] == self._delimiter))
                out.append(view)
                return
            start = int(ends[0]) + 1
            ends = buf[bounds[bounds < start]]
            self._header_fields += int(np.count_nonzero(ends == self._delimiter))
            self.limit = field_limit(self._block, self._header_fields)
            out.append(view[:start])
            bounds = bounds[bounds >= start]
        if not bounds.size:  # the open field goes on to the end of the block
            self._open(data[start:])
            return
        limit, b0 = self.limit, int(bounds[0])
        if self._skipping or self._length + (b0 - start) > limit:
            out.append(_MISSING_FIELD)
        else:
            out += [self._carry, view[start:b0]]
        self._carry, self._length, self._skipping = b"", 0, False
        lengths = np.diff(bounds) - 1
        at = b0
        for j in np.flatnonzero(lengths > limit):
            out += [view[at : int(bounds[j]) + 1], _MISSING_FIELD]
            at = int(bounds[j + 1])
        last = int(bounds[-1])
        out.append(view[at : last + 1])
        self._open(data[last + 1 :])

    def _open(self, more: bytes) -> None:
        """`more` continues the open field (held back, or dropped once it is too long)."""
        self._length += len(more)
        if self._skipping or (self.limit is not None and self._length > self.limit):
            self._carry, self._skipping = b"", True
        else:
            self._carry += more


class _CsvFeed(pyio.RawIOBase):
    """The bytes pyarrow's CSV reader parses, as a file object, checked on the way.

    Every block is checked for invalid UTF-8 and carries the quote state on (no line counting:
    that is `_CsvScan`'s job when something is wrong). At the first invalid byte the data is cut
    after the record that holds it, so pyarrow still judges the records up to there (an earlier
    or the same record's wrong field count comes first in file order) and none after it. A
    header-only file without a final line end gets one (pyarrow needs it).
    """

    def __init__(
        self, blocks: _CsvBlocks, block: int, fields: int | None, delimiter: int = _COMMA
    ) -> None:
        super().__init__()
        self._blocks, self._block, self._delimiter = blocks.blocks(), block, delimiter
        self._cap = _FieldCap(block, fields, delimiter)
        self._pieces: collections.deque[bytes | memoryview] = collections.deque()
        self._done, self._last = False, -1  # the last byte passed on
        self._state, self._prev = _OUT, -1
        self._utf8 = _Utf8()
        self._cutter: tuple[_CsvScan, int] | None = None  # looking for the bad record's end
        self.bad_utf8 = False
        self.unterminated = False

    @property
    def problem(self) -> bool:
        return self.bad_utf8 or self.unterminated

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        """`n` bytes (fewer only at the end): pyarrow's blocks are then all `block` bytes, so
        a record up to that long is always whole in one block or two adjacent ones."""
        parts: list[bytes | memoryview] = []
        want = (1 << 62) if n is None or n < 0 else n
        while want > 0:
            while not self._pieces:
                if self._done:
                    return b"".join(parts)
                self._advance()
            piece = self._pieces.popleft()
            if len(piece) > want:
                self._pieces.appendleft(piece[want:])
                piece = piece[:want]
            want -= len(piece)
            parts.append(piece)
        return b"".join(parts)

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def _advance(self) -> None:
        item = next(self._blocks, None)
        if item is None:
            self._done = True
            self._put(self._cap.feed(b"", -1))
            return
        data, pos, following = item
        if self._cutter is None:
            bad = self._utf8.check(data, pos, final=following < 0)
            if bad is not None:
                self.bad_utf8 = True
                scan = _CsvScan(
                    self._block,
                    pos=pos,
                    state=self._state,
                    prev=self._prev,
                    delimiter=self._delimiter,
                )
                self._cutter = (scan, bad)
        out = data
        if self._cutter is not None:
            scan, bad = self._cutter
            ends = scan.feed(data, following)
            ends = ends[ends >= bad]
            if ends.size:
                out = data[: int(ends[0]) - pos + 1]
                self._done = True
            out = _masked_from(out, bad - pos)
        else:
            buf = np.frombuffer(data, dtype=np.uint8)
            self._state = _quote_state(
                buf, data, self._state, self._prev, following, self._delimiter
            )
            self._prev = data[-1]
            if following < 0:
                self.unterminated = self._state != _OUT
        if following < 0:
            self._done = True
        self._put(self._cap.feed(out, -1 if self._done else following))

    def _put(self, pieces: list[bytes | memoryview]) -> None:
        """Queue what the field cap passed on; at the end, a final line end if there is none
        (pyarrow needs it after a header-only file)."""
        for piece in pieces:
            if len(piece):
                self._pieces.append(piece)
                self._last = piece[-1]
        if self._done and self._last not in (-1, _LF, _CR):
            self._pieces.append(b"\n")
            self._last = _LF


def _masked_from(data: bytes, start: int) -> bytes:
    """`data` with every non-ASCII byte from `start` on replaced by '?'.

    pyarrow decodes a record with a wrong field count before handing it to the handler, and
    fails on invalid UTF-8; the record holding the first invalid byte is masked from that byte
    on, so its field count is still judged (no delimiter, quote or line end is a non-ASCII byte).
    The masked record is never yielded: the error is raised first.
    """
    buf = np.frombuffer(data, dtype=np.uint8)
    tail = buf[max(start, 0) :]
    high = tail >= 0x80
    if not high.any():
        return data
    masked = buf.copy()
    masked[max(start, 0) :][high] = 0x3F
    return masked.tobytes()


class _CsvSource(InputSource):
    """A CSV input read with pyarrow's streaming reader (all columns as text)."""

    def __init__(
        self,
        data: _ByteSource,
        columns: list[str] | None,
        header: bool,
        batch_rows: int | None,
        delimiter: str = ",",
    ) -> None:
        super().__init__(data.spool)
        self._data, self.name, self._header = data, data.name, header
        self._sep = ord(delimiter)
        self._block = CSV_BLOCK_BYTES
        # fields per record, for the field limit: the header's (counted as it is read) or, with
        # --no-header, the columns named
        self._fields = None if header or columns is None else len(columns)
        names = self._first_names()
        if header:
            if all(_NUMBER.fullmatch(n.strip()) for n in names):
                raise DataError(
                    f"{self.name}: the first line holds numbers, not column names: add a header "
                    "line, or read the file with --no-header --columns NAME,NAME,... naming "
                    "every field"
                )
            wanted = names if columns is None else list(columns)
            _check_columns(wanted, names, self.name, csv_delimiter=delimiter)
        else:
            assert columns is not None
            if len(set(columns)) != len(columns):
                raise UsageError("--columns: a column is named twice")
            if len(names) != len(columns):
                raise UsageError(
                    f"--no-header: {self.name} has {len(names)} fields per line, but --columns "
                    f"names {len(columns)}; name every field in order"
                )
            names = wanted = list(columns)
        self.all_columns, self._wanted = names, wanted
        self.schema = pa.schema([(c, pa.string()) for c in wanted])
        self.batch_rows = batch_rows or default_batch_rows(len(wanted))

    def batches(self, columns: list[str] | None = None) -> Iterator[pa.RecordBatch]:
        wanted = self._wanted if columns is None else columns
        convert = pacsv.ConvertOptions(
            include_columns=wanted,
            column_types={c: pa.string() for c in wanted},
            strings_can_be_null=True,
            quoted_strings_can_be_null=True,
            null_values=[""],  # an empty field, quoted or not, is missing
        )
        invalid: list[tuple[int | None, int, int]] = []
        with self._data.open() as raw:
            feed = _CsvFeed(
                _CsvBlocks(raw, self.name, self._block), self._block, self._fields, self._sep
            )
            names = None if self._header else self.all_columns
            reader, failed = self._reader(feed, invalid, convert, names), False
            out = _Rebatch(self.batch_rows)
            held: pa.RecordBatch | None = None  # passed on once the next block parsed cleanly
            while reader is not None:
                try:
                    batch = reader.read_next_batch()
                except StopIteration:
                    break
                except (pa.ArrowException, ValueError):
                    failed = True
                    break
                if held is not None:
                    yield from out.add(held)
                held = batch
            if reader is None or failed or feed.problem:
                raise self._explain(invalid, failed=reader is None or failed)
            if held is not None:
                yield from out.add(held)
            yield from out.rest()

    def _reader(
        self,
        feed: _CsvFeed,
        invalid: list[tuple[int | None, int, int]],
        convert: pacsv.ConvertOptions | None,
        names: list[str] | None = None,
    ) -> pacsv.CSVStreamingReader | None:
        """pyarrow's streaming reader over `feed`; None if it failed on the first block.

        `names` are the column names of a file without a header; without them such a file's
        columns are named after the fields of its first record.
        """

        def on_invalid(row: Any) -> str:  # only the number and the counts: never row.text
            invalid.append((row.number, row.expected_columns, row.actual_columns))
            return "error"

        try:
            return pacsv.open_csv(
                feed,
                read_options=pacsv.ReadOptions(
                    use_threads=False,  # row numbers are only known to the serial parser
                    block_size=self._block,
                    column_names=names or None,
                    autogenerate_column_names=not self._header and not names,
                ),
                parse_options=pacsv.ParseOptions(
                    delimiter=chr(self._sep),
                    newlines_in_values=True,
                    invalid_row_handler=on_invalid,
                ),
                convert_options=convert,
            )
        except (pa.ArrowException, ValueError):  # pyarrow's text may hold data: never shown
            return None

    def _first_names(self) -> list[str]:
        """The header's names (or, without a header, one name per field of the first record).

        A problem pyarrow or the feed met on the way is reported right away: a full check then
        finds the first one in the file.
        """
        with self._data.open() as raw:
            feed = _CsvFeed(
                _CsvBlocks(raw, self.name, self._block), self._block, self._fields, self._sep
            )
            reader = self._reader(feed, [], None)
            names = None
            if reader is not None:
                with contextlib.suppress(pa.ArrowException, ValueError):
                    names = list(reader.schema.names)
                with contextlib.suppress(pa.ArrowException, ValueError):
                    reader.close()
        if names is None or feed.problem:
            self._check_structure()
        if names is None:
            raise DataError(f"cannot parse the header line of {self.name}")
        return names

    def _check_structure(self) -> None:
        """Parse every record without converting a field; raise the first problem found."""
        invalid: list[tuple[int | None, int, int]] = []
        nothing = pacsv.ConvertOptions(include_columns=[_NO_COLUMN], include_missing_columns=True)
        with self._data.open() as raw:
            feed = _CsvFeed(
                _CsvBlocks(raw, self.name, self._block), self._block, self._fields, self._sep
            )
            reader, failed = self._reader(feed, invalid, nothing), False
            if reader is not None:
                try:
                    for _ in reader:
                        pass
                except (pa.ArrowException, ValueError):
                    failed = True
        if reader is None or failed or feed.problem:
            raise self._explain(invalid, failed=reader is None or failed)

    def _explain(self, invalid: list[tuple[int | None, int, int]], *, failed: bool) -> DataError:
        """The first structural problem in file order, with its physical line number.

        `invalid` holds pyarrow's first record with a wrong field count (if any); `failed` says
        pyarrow stopped with an error of its own. The input is scanned again up to the point
        that decides.
        """
        number, expected, actual = invalid[0] if invalid else (None, 0, 0)
        with self._data.open() as raw:
            blocks = _CsvBlocks(raw, self.name, self._block)
            scan = _CsvScan(
                self._block, want=number, utf8=True, fields=self._fields, delimiter=self._sep
            )
            for data, _, following in blocks.blocks():
                scan.feed(data, following)
                if number is not None and scan.want_ended:
                    break  # a quoted field still open at the end opens after this record
                wrong = scan.long_line or scan.bad_fields
                if number is None and (scan.bad_utf8_ended or (failed and wrong)):
                    break  # the same: anything later is on a later line
            else:
                scan.finish()
        problems: list[tuple[int, str]] = []
        if scan.bad_utf8_line is not None:
            problems.append((scan.bad_utf8_line, "invalid UTF-8 (the file must be UTF-8 encoded)"))
        opening = scan.opening if scan.at_end and scan.state != _OUT else None
        line = None
        if number is not None and scan.want_line is not None:
            line, rank = scan.want_line, number
        elif failed and scan.bad_fields is not None:
            # pyarrow could not hold it in its blocks, even with its fields cut to the limit
            # (_FieldCap): a record with more fields than the header
            line, rank, expected, actual = scan.bad_fields
        if line is not None and (opening is None or rank < opening.rank):
            kind = "too many fields" if actual > expected else "too few fields"
            what = f"{kind} (expected {expected} like the header, found {actual})"
            problems.append((line, what))
            opening = None  # a malformed record before the open quote comes first
        if opening is not None:
            problems.append((opening.line, 'unterminated quoted field (missing closing ")'))
        if failed and scan.long_line is not None:  # pyarrow's first block could not hold it
            size = f"{self._block >> 20} MiB" if self._block >= 1 << 20 else f"{self._block} bytes"
            first = "header line" if self._header else "first row"
            what = f"the {first} is longer than {size}, the most dpsynth reads at once"
            problems.append((scan.long_line, what))
        if not problems:
            return DataError(f"cannot parse {self.name} as CSV")
        line, what = min(problems)
        return DataError(f"{self.name}: line {line + blocks.skipped_lines}: {what}")


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


def _check_columns(
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


# --------------------------------------------------------------------------- reading: Parquet


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
        _check_columns(wanted, available, name)
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


# --------------------------------------------------------------------------- writing


_PRIVATE_MODE = 0o600  # owner-only files: `--diagnostics`


def _default_mode() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def _check_output_path(path: str) -> tuple[str, str]:
    target = os.path.abspath(path)
    directory = os.path.dirname(target)
    if os.path.isdir(target):
        raise UsageError(f"output {path} is a directory")
    if not os.path.isdir(directory):
        raise UsageError(f"cannot write {path}: directory {directory} does not exist")
    return target, directory


@contextlib.contextmanager
def atomic_output(path: str, *, private: bool = False) -> Iterator[BinaryIO]:
    """Yield a binary file that replaces `path` atomically when the block ends without error.

    The data goes to a temporary file in the same directory, which is flushed, fsynced and then
    renamed over `path`; on any error it is removed and `path` is left as it was. A missing
    directory is a UsageError; an OS error while writing is a DataError. The file gets the mode
    of the file it replaces, else the umask's; `private` makes it owner-only (0600) whatever the
    old file's mode was (non-private diagnostics: true counts and distances).
    """
    target, directory = _check_output_path(path)
    prefix = _temp_prefix(target)
    _remove_stale_temps(directory, prefix)
    _set_signals_blocked(True)  # no stop between creating the file and the `try` removing it
    try:
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=f"{prefix}{os.getpid()}-", suffix=".tmp")
    except OSError as exc:
        _set_signals_blocked(False)
        raise DataError(f"cannot write {path}: {_reason(exc)}") from None
    try:
        _set_signals_blocked(False)  # a signal held meanwhile is raised here: tmp is removed
        if private:
            os.fchmod(fd, _PRIVATE_MODE)  # mkstemp made it 0600 already: kept so
        else:
            try:
                os.fchmod(fd, os.stat(target).st_mode & 0o7777)
            except FileNotFoundError:
                os.fchmod(fd, _default_mode())
        with os.fdopen(fd, "wb") as fh:
            fd = -1
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException as exc:
        if fd >= 0:
            os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise DataError(f"cannot write {path}: {_reason(exc)}") from None
        raise
    fsync_dir(directory)


def _temp_prefix(target: str) -> str:
    """Temporary files are named `.NAME.dpsynth-PID-XXXX.tmp`, so they can be recognised."""
    return f".{os.path.basename(target)}.dpsynth-"


def _remove_stale_temps(directory: str, prefix: str) -> None:
    """Remove temporary files (and part directories) of this output left by a run that was
    killed (SIGKILL, power loss): those whose process is gone. A live process's (a concurrent
    run's) are left alone."""
    with contextlib.suppress(OSError):
        for name in os.listdir(directory):
            if not (name.startswith(prefix) and name.endswith(".tmp")):
                continue
            pid = name[len(prefix) :].partition("-")[0]
            if pid.isdigit() and not process_alive(int(pid)):
                where = os.path.join(directory, name)
                if os.path.isdir(where) and not os.path.islink(where):  # a part directory's
                    shutil.rmtree(where, ignore_errors=True)
                    continue
                with contextlib.suppress(OSError):
                    os.unlink(where)


def process_alive(pid: int) -> bool:
    """Whether process `pid` exists (so that its temporary files are not stale)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # e.g. another user's process: it exists
        return True
    return True


def fsync_dir(directory: str) -> None:
    """Make a rename inside `directory` durable (best effort: some filesystems refuse)."""
    with contextlib.suppress(OSError):
        dfd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


def atomic_write_bytes(path: str, data: bytes | str) -> None:
    """Write `data` (str is encoded as UTF-8) to `path` atomically; see `atomic_output`."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    with atomic_output(path) as fh:
        fh.write(data)


def move_file(src: str, dst: str) -> None:
    """Move the file `src` to `dst` atomically: one rename, or, across file systems, a copy to
    a temporary file beside `dst` (fsynced, with the mode the umask gives) renamed over it, and
    then `src` removed. Stop signals are not touched (the caller may hold them)."""
    try:
        os.replace(src, dst)
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
    else:
        fsync_dir(os.path.dirname(os.path.abspath(dst)))
        return
    target = os.path.abspath(dst)
    directory = os.path.dirname(target)
    prefix = _temp_prefix(target)
    _remove_stale_temps(directory, prefix)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f"{prefix}{os.getpid()}-", suffix=".tmp")
    try:
        os.fchmod(fd, _default_mode())
        with os.fdopen(fd, "wb") as out, open(src, "rb") as data:
            fd = -1
            shutil.copyfileobj(data, out, _SPOOL_CHUNK)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, target)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_dir(directory)
    os.unlink(src)


def write_table(table: pa.Table, path: str, fmt: str, *, input_path: str | None) -> None:
    """Write `table` to `path` ("-" = stdout) as `fmt`; `.gz` paths get gzipped CSV.

    Files are written atomically and never over `input_path`. A closed stdout raises
    OutputClosed.
    """
    write_outputs(table, path, fmt, input_path=input_path)


Content = str | bytes
Piece = pa.RecordBatch | pa.Table


def write_outputs(
    data: pa.Table | Iterable[Piece],
    path: str,
    fmt: str,
    *,
    input_path: str | None,
    schema: pa.Schema | None = None,
    extra: Mapping[str, Content | Callable[[], Content]] | None = None,
    private: Collection[str] = (),
    final: bool = False,
) -> None:
    """Write a table, or an iterable of record batches (or tables) with `schema`, to `path`
    ("-" = stdout) as `fmt`, and each `extra` {path: content} (e.g. the JSON report); the
    `extra` paths in `private` are written owner-only (`atomic_output`).

    `schema` (required for an empty iterable) fixes the columns and carries the metadata a
    Parquet file keeps. An `extra` content may be a function, called once the batches are all
    written (a report that counts them), before anything is committed. Memory is bounded by a
    batch (a Parquet row group gathers small batches up to ROW_GROUP_ROWS / ROW_GROUP_BYTES).

    All paths are checked (none is the input, none repeats, directories exist) before anything
    is written. File outputs are all written to temporary files first and renamed only when all
    succeeded, with stop signals held back meanwhile; a failure (also of the batch iterator)
    leaves every path as it was. With stdout for the table, the extra files are committed
    before it is written; batches for stdout are then first staged in an anonymous temporary
    file, so that the extra files are committed only once the whole table exists (without
    extra files they go to stdout as they come).

    `final`: these are the run's last outputs. Once they are all in place (the table written to
    stdout too), the run is finished: a stop signal held during the renames is dropped rather
    than raised, and `finished()` says so (the CLI then exits 0 on a later Ctrl-C).
    """
    if fmt not in FORMATS:
        raise UsageError(f"unknown output format '{fmt}' (expected csv or parquet)")
    extras = dict(extra or {})
    if STDIO in extras:
        raise UsageError("only the table can be written to stdout ('-')")
    _check_paths([path, *extras], input_path)
    pieces, schema = _pieces(data, schema)
    with contextlib.ExitStack() as keep:
        staged: BinaryIO | None = None
        done = final and path != STDIO
        with contextlib.ExitStack() as stack:  # commit together: temp files first, renames last
            stack.push(_release_after_commit(done))  # runs after every rename
            for out, content in extras.items():
                if not callable(content):
                    side = stack.enter_context(atomic_output(out, private=out in private))
                    side.write(_encoded(content))
            if path != STDIO:
                fh = stack.enter_context(atomic_output(path))
                for chunk in _serialise(pieces, schema, path, fmt):
                    fh.write(chunk)
            elif extras and not isinstance(data, pa.Table):
                staged = keep.enter_context(tempfile.TemporaryFile())
                _stage(_serialise(pieces, schema, path, fmt), staged)
            for out, content in extras.items():
                if callable(content):
                    side = stack.enter_context(atomic_output(out, private=out in private))
                    side.write(_encoded(content()))
            _set_signals_blocked(True)  # a SIGTERM now waits until all renames are done
        if path == STDIO:  # after the extra files: the reader may close the pipe at any time
            if staged is not None:
                staged.seek(0)
                _write_stdout(iter(lambda: staged.read(_SPOOL_CHUNK), b""))
            else:
                _write_stdout(_serialise(pieces, schema, path, fmt))
    if final:
        _finished[0] = True


def finished() -> bool:
    """Whether the run's final outputs are all in place (`write_outputs(final=True)`,
    `write_part_directory(final=True)`): a stop now must not turn a complete run into a failed
    one."""
    return _finished[0]


def start_run() -> None:
    """Forget an earlier run's `finished` (commands run in one process, e.g. in tests)."""
    _finished[0] = False


_finished = [False]


def _release_after_commit(done: bool) -> Callable[..., None]:
    """The exit callback that releases held stop signals after the renames: a signal held
    meanwhile is raised, unless `done` (the run's final outputs) and the renames succeeded:
    the run is then complete, and the stop is dropped."""

    def release(exc_type: Any, _exc: Any, _tb: Any) -> None:
        _set_signals_blocked(False, drop=done and exc_type is None)

    return release


def check_outputs(paths: Iterable[str | None], input_path: str | None) -> None:
    """Refuse, before any data is read, outputs that could not be written at the end: a missing
    directory, a directory as a file's name, the input, two outputs on one file (usage errors),
    a directory where no file can be created or a closed stdout (data errors, as when the
    write itself fails). `paths` may hold None (an output not asked for) and "-" (stdout)."""
    wanted = [p for p in paths if p is not None]
    _check_paths(wanted, input_path)
    for out in dict.fromkeys(wanted):
        if out == STDIO:
            if sys.stdout is None:
                raise DataError(_STDOUT_CLOSED)
        else:
            _probe_directory(out)


def _check_paths(paths: list[str], input_path: str | None) -> None:
    """The checks `write_outputs` and `check_outputs` share (stdout at most once)."""
    files = [p for p in paths if p != STDIO]
    if len(files) < len(paths) - 1:
        raise UsageError("only one output can go to stdout ('-')")
    for out in files:
        _refuse_input(out, input_path)
        _check_output_path(out)
    resolved = [os.path.realpath(p) for p in files]
    if len(set(resolved)) != len(resolved):
        raise UsageError(f"two outputs would be written to the same file ({', '.join(files)})")


def _probe_directory(path: str) -> None:
    """Create and remove a temporary file where `atomic_output` will put `path`'s, so that a
    read-only directory fails now rather than after the work (named like `atomic_output`'s
    temporary files, so a run killed in between leaves nothing a later run keeps)."""
    target, directory = _check_output_path(path)
    _set_signals_blocked(True)
    try:
        fd, tmp = tempfile.mkstemp(
            dir=directory, prefix=f"{_temp_prefix(target)}{os.getpid()}-", suffix=".tmp"
        )
        os.close(fd)
        os.unlink(tmp)
    except OSError as exc:
        raise DataError(f"cannot write {path}: {_reason(exc)}") from None
    finally:
        _set_signals_blocked(False)


def _encoded(content: Content) -> bytes:
    return content.encode("utf-8") if isinstance(content, str) else content


def _stage(chunks: Iterable[bytes | pa.Buffer], staged: BinaryIO) -> None:
    for chunk in chunks:
        try:
            staged.write(chunk)
        except OSError as exc:
            raise DataError(
                f"cannot write {STDOUT_NAME}: staging it in {tempfile.gettempdir()} failed "
                f"({_reason(exc)}; set TMPDIR to a directory with room)"
            ) from None


def _pieces(
    data: pa.Table | Iterable[Piece], schema: pa.Schema | None
) -> tuple[Iterator[Piece], pa.Schema]:
    """The batches to write and their schema (checked against each batch as it comes)."""
    if isinstance(data, pa.Table):
        if schema is not None:
            data = _conform(data, schema)
        return iter([data]), data.schema
    items = iter(data)
    if schema is None:
        first = next(items, None)
        if first is None:
            raise ValueError("write_outputs: an empty iterable of batches needs a schema")
        schema = first.schema
        items = itertools.chain([first], items)
    return (_conform(item, schema) for item in items), schema


def _conform(item: Piece, schema: pa.Schema) -> Piece:
    if item.schema.names != schema.names or item.schema.types != schema.types:
        raise ValueError("write_outputs: a batch's columns or types differ from the schema")
    if item.schema.equals(schema, check_metadata=True):
        return item
    return item.cast(schema)  # nullability or metadata only


_STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}


def _set_signals_blocked(blocked: bool, *, drop: bool = False) -> None:
    """Hold back stop signals while outputs are renamed into place (or a temporary file is
    created and registered for removal), so that a run stopped then leaves all of its files or
    none: a signal that arrives meanwhile is recorded and raised again when they are released
    (unless `drop`: the run is complete, see `write_outputs`' `final`).

    Python runs signal handlers in the main thread whichever thread the operating system chose,
    so replacing the handlers holds even while pyarrow's threads run (pthread_sigmask would not:
    it masks the main thread only, and another thread then takes the signal)."""
    if threading.current_thread() is not threading.main_thread():
        return
    if blocked:
        if _held is None:
            pending: list[int] = []
            handlers = {s: signal.signal(s, lambda n, _f: pending.append(n)) for s in _STOP_SIGNALS}
            globals()["_held"] = (handlers, pending)
        return
    if _held is not None:
        handlers, pending = _held
        globals()["_held"] = None
        for s, h in handlers.items():
            signal.signal(s, h)
        if pending and not drop:
            signal.raise_signal(pending[0])


_held: tuple[dict[int, Any], list[int]] | None = None


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """Stop signals (SIGINT, SIGTERM, SIGHUP) wait until the block ends (`_set_signals_blocked`):
    for a few renames that must all happen once begun."""
    _set_signals_blocked(True)
    try:
        yield
    finally:
        _set_signals_blocked(False)


def _refuse_input(out: str, input_path: str | None) -> None:
    if input_path is None or input_path == STDIO:
        return
    same = os.path.realpath(out) == os.path.realpath(input_path)
    if not same and os.path.exists(out) and os.path.exists(input_path):
        try:
            same = os.path.samefile(out, input_path)
        except OSError:
            same = False
    if same:
        raise UsageError(f"refusing to overwrite the input {input_path} with output {out}")


def _serialise(
    pieces: Iterable[Piece], schema: pa.Schema, path: str, fmt: str
) -> Iterator[bytes | pa.Buffer]:
    if fmt == "parquet":
        return _parquet_chunks(pieces, schema, _out_name(path))
    chunks = _csv_chunks(pieces, schema, _out_name(path))
    if path != STDIO and path.lower().endswith(".gz"):
        return _gzipped(chunks)
    return chunks


def _out_name(path: str) -> str:
    return STDOUT_NAME if path == STDIO else path


def _csv_chunks(pieces: Iterable[Piece], schema: pa.Schema, name: str) -> Iterator[pa.Buffer]:
    """The batches as CSV (header first), CSV_CHUNK_ROWS rows at a time."""
    header = True
    for piece in pieces:
        for off in range(0, piece.num_rows, CSV_CHUNK_ROWS):
            yield _csv_chunk(piece.slice(off, CSV_CHUNK_ROWS), header, name)
            header = False
    if header:  # no rows: the header alone
        yield _csv_chunk(schema.empty_table(), True, name)


def _csv_chunk(piece: Piece, header: bool, name: str) -> pa.Buffer:
    sink = pa.BufferOutputStream()
    try:
        piece = _iso_times(piece)
        pacsv.write_csv(piece, sink, pacsv.WriteOptions(include_header=header))
    except pa.ArrowException:
        raise DataError(f"cannot write {name} as CSV (unsupported column type)") from None
    return sink.getvalue()


def _iso_times(piece: Piece) -> Piece:
    """Date-time columns as ISO 8601 text (2024-01-31T08:00:00, +0100 in a zoned column's time
    zone), as they are read; pyarrow would write a space and a fraction."""
    for i, field in enumerate(piece.schema):
        if pa.types.is_timestamp(field.type):
            iso = "%Y-%m-%dT%H:%M:%S" + ("%z" if field.type.tz else "")
            text = pc.strftime(piece.column(i), format=iso)
            piece = piece.set_column(i, field.name, text)
    return piece


def _parquet_chunks(pieces: Iterable[Piece], schema: pa.Schema, name: str) -> Iterator[bytes]:
    """The batches as one Parquet file: small batches are gathered into row groups of up to
    ROW_GROUP_ROWS rows / ROW_GROUP_BYTES bytes; a table is written as `pq.write_table` does.

    Dictionary encoding only for columns that are not floating point: synthetic floats are
    almost all distinct, so pyarrow would build a dictionary per column chunk only to drop it
    (half the write time of a float table, for files about 5% smaller)."""
    sink = _Collector()
    dictionary = [f.name for f in schema if not pa.types.is_floating(f.type)]
    try:
        writer = pq.ParquetWriter(sink, schema, use_dictionary=dictionary)
    except pa.ArrowException:
        raise DataError(f"cannot write {name} as Parquet") from None
    group: list[Piece] = []
    rows = size = 0
    for piece in itertools.chain(pieces, [None]):
        if piece is not None and not isinstance(piece, pa.Table):
            group.append(piece)
            rows, size = rows + piece.num_rows, size + piece.nbytes
            if rows < ROW_GROUP_ROWS and size < ROW_GROUP_BYTES:
                continue
        tables = [pa.Table.from_batches(group, schema=schema)] if group else []
        if isinstance(piece, pa.Table):
            tables.append(piece)
        group, rows, size = [], 0, 0
        try:
            for table in tables:
                writer.write_table(table)
            if piece is None:
                writer.close()
        except pa.ArrowException:
            raise DataError(f"cannot write {name} as Parquet") from None
        yield sink.take()


def _gzipped(chunks: Iterable[bytes | pa.Buffer]) -> Iterator[bytes]:
    compressor = _Collector()
    with gzip.GzipFile(fileobj=compressor, mode="wb", compresslevel=6, mtime=0) as gz:
        for chunk in chunks:
            gz.write(chunk)
            yield compressor.take()
    yield compressor.take()


class _Collector:
    """A write-only file object that collects what a writer (gzip, Parquet) writes, to hand it
    on in pieces."""

    def __init__(self) -> None:
        self._parts: list[bytes] = []
        self._written = 0
        self.closed = False

    def write(self, data: Any) -> int:
        part = bytes(data)
        self._parts.append(part)
        self._written += len(part)
        return len(part)

    def tell(self) -> int:
        return self._written

    def flush(self) -> None:
        pass

    def take(self) -> bytes:
        data, self._parts = b"".join(self._parts), []
        return data


_STDOUT_CLOSED = f"cannot write {STDOUT_NAME}: it is closed (give -o FILE, or redirect it)"


def _write_stdout(chunks: Iterable[bytes | pa.Buffer]) -> None:
    if sys.stdout is None:  # started with stdout closed (`>&-`): Python then has no sys.stdout
        raise DataError(_STDOUT_CLOSED)
    out = getattr(sys.stdout, "buffer", None)
    if out is None:
        raise DataError(f"cannot write binary data to {STDOUT_NAME}")
    try:
        sys.stdout.flush()  # text written before must come first
        for chunk in chunks:
            out.write(chunk)
        out.flush()
    except BrokenPipeError:
        _silence_stdout()
        raise OutputClosed() from None
    except OSError as exc:
        if exc.errno == errno.EPIPE:
            _silence_stdout()
            raise OutputClosed() from None
        raise DataError(f"cannot write {STDOUT_NAME}: {_reason(exc)}") from None


def _silence_stdout() -> None:
    """Point stdout's descriptor at /dev/null so Python's exit-time flush cannot fail again."""
    try:
        fileno = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fileno)
    finally:
        os.close(devnull)


# --------------------------------------------------------------------------- writing: part files

# A directory of part files (`--engine dask`): part-00000.parquet, part-00001.parquet, ... in the
# order of the rows; names get more digits only past 10^PART_DIGITS parts, so they always sort.
PART_DIGITS = 5
_PART_NAME = re.compile(r"part-[0-9]+\.(parquet|csv|csv\.gz)")


def part_directory_format(path: str, override: str | None) -> str:
    """The format of a part directory's files: `--output-format`, else the extension of the
    directory's name (synth.parquet/, synth.csv/); a name without one is an error, as for files."""
    if override is not None or path == STDIO:
        return detect_format(path, override, flag="--output-format")
    lower = path.lower().rstrip("/")
    for ext, fmt in _EXTENSIONS:
        if lower.endswith(ext):
            return fmt
    raise UsageError(
        f"cannot tell the part files' format from the name {path}: name the directory like "
        "synth.parquet or synth.csv, or give --output-format parquet|csv"
    )


def part_suffix(path: str, fmt: str) -> str:
    """The part files' extension: .parquet, or .csv (.csv.gz when the directory's name ends in
    .gz, as a file output would be gzipped)."""
    if fmt == "parquet":
        return ".parquet"
    return ".csv.gz" if path.lower().rstrip("/").endswith(".gz") else ".csv"


def part_name(index: int, suffix: str, digits: int | None = None) -> str:
    """Part `index`'s file name, its number zero-padded to `digits` (default PART_DIGITS)."""
    return f"part-{index:0{digits or PART_DIGITS}d}{suffix}"


def _is_part_directory(target: str) -> bool:
    """A real directory (not a link) holding nothing but part files: a previous run's output,
    which a new one may replace. Anything else at the path is the user's, and is refused."""
    if os.path.islink(target) or not os.path.isdir(target):
        return False
    try:
        return all(_PART_NAME.fullmatch(n) for n in os.listdir(target))
    except OSError:
        return False


def check_part_directory(path: str, input_path: str | None) -> str:
    """Refuse, before anything is read or written, a part directory that cannot be written:
    stdout, the input (or a directory holding it), a missing parent, or a path that holds a file
    or a directory with other files (only a previous part directory is replaced). Returns the
    absolute path."""
    if path == STDIO:
        raise UsageError(
            "--engine dask writes a directory of part files, not stdout: give -o DIR, "
            "e.g. -o synth.parquet"
        )
    _refuse_input(path, input_path)
    target = os.path.abspath(path)
    if input_path not in (None, STDIO):
        if os.path.realpath(input_path).startswith(os.path.realpath(target) + os.sep):
            raise UsageError(f"refusing to replace {path}: it holds the input {input_path}")
    directory = os.path.dirname(target)
    if not os.path.isdir(directory):
        raise UsageError(f"cannot write {path}: directory {directory} does not exist")
    if os.path.lexists(target) and not _is_part_directory(target):
        what = "a directory with other files" if os.path.isdir(target) else "a file"
        raise UsageError(
            f"output {path} is {what}; --engine dask writes a directory of part files there: "
            "remove it or choose another -o"
        )
    return target


@contextlib.contextmanager
def atomic_directory(path: str, *, input_path: str | None = None) -> Iterator[str]:
    """Yield a new empty directory next to `path` that takes `path`'s place when the block ends
    without error; on any error it is removed with whatever it holds, and `path` is left as it
    was. The counterpart of `atomic_output` for a directory of part files.

    `path` may hold a previous part directory: a directory cannot be renamed over a non-empty
    one, so the old one is renamed aside, the new one in, and the old one removed. A SIGKILL
    between those two renames leaves `path` missing and both directories under temporary names,
    which a later run removes (`_remove_stale_temps`); stop signals are held there as for files.
    """
    target = check_part_directory(path, input_path)
    directory = os.path.dirname(target)
    prefix = _temp_prefix(target)
    _remove_stale_temps(directory, prefix)
    _set_signals_blocked(True)  # no stop between creating the directory and the `try` removing it
    try:
        tmp = tempfile.mkdtemp(dir=directory, prefix=f"{prefix}{os.getpid()}-", suffix=".tmp")
    except OSError as exc:
        _set_signals_blocked(False)
        raise DataError(f"cannot write {path}: {_reason(exc)}") from None
    try:
        _set_signals_blocked(False)
        os.chmod(tmp, 0o777 & ~_umask())
        yield tmp
        _replace_directory(tmp, target, path)
    except BaseException as exc:
        _remove_tree(tmp)
        if isinstance(exc, OSError):
            raise DataError(f"cannot write {path}: {_reason(exc)}") from None
        raise
    fsync_dir(directory)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _replace_directory(new: str, target: str, path: str) -> None:
    """Rename `new` to `target`: in one rename over nothing or an empty directory; over a part
    directory by way of a rename aside (see `atomic_directory`), putting it back on failure."""
    try:
        os.replace(new, target)
        return
    except OSError as exc:
        if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
            raise
    if not _is_part_directory(target):  # appeared meanwhile: still never the user's files
        raise UsageError(f"output {path} changed while it was written: nothing was replaced")
    old = new[: -len(".tmp")] + "-old.tmp"
    os.rename(target, old)
    try:
        os.rename(new, target)
    except BaseException:
        os.rename(old, target)
        raise
    _remove_tree(old)


def _remove_tree(path: str, attempts: int = 20) -> None:
    """Remove a temporary directory. A worker task that was running when the write failed may
    still add a part file meanwhile, so removal is tried again for up to a second; anything left
    is a temporary directory of this process, which a later run removes."""
    for _ in range(attempts):
        shutil.rmtree(path, ignore_errors=True)
        if not os.path.lexists(path):
            return
        time.sleep(0.05)


def write_part(table: pa.Table, path: str, fmt: str, schema: pa.Schema, name: str) -> int:
    """Write one part file (on a worker) with `schema` and return its rows. It goes to a
    temporary name beside `path`, is fsynced and renamed, so a task that dies or is retried never
    leaves half a part under the part's name. `name` is how messages call it."""
    pieces, schema = _pieces(table, schema)
    tmp = f"{path}.{os.getpid()}-{uuid.uuid4().hex[:12]}.tmp"
    try:
        with open(tmp, "xb") as fh:
            if fmt == "parquet":
                chunks: Iterable[bytes | pa.Buffer] = _parquet_chunks(pieces, schema, name)
            else:
                chunks = _csv_chunks(pieces, schema, name)
                if path.lower().endswith(".gz"):
                    chunks = _gzipped(chunks)
            for chunk in chunks:
                fh.write(chunk)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            where = " (workers must see the output's directory at the same path)"
            hint = where if exc.errno == errno.ENOENT else ""
            raise DataError(f"cannot write {name}: {_reason(exc)}{hint}") from None
        raise
    return table.num_rows


def write_part_directory(
    fill: Callable[[str], int],
    path: str,
    fmt: str,
    *,
    input_path: str | None,
    extra: Mapping[str, Content] | None = None,
    private: Collection[str] = (),
    final: bool = False,
) -> int:
    """Write a directory of part files at `path`, and each `extra` {path: content} file after
    it (owner-only if in `private`), all or nothing, as `write_outputs` does for one file;
    returns the number of parts.

    `fill(tmp)` writes parts `part_name(i, part_suffix(path, fmt))` for i < k into the temporary
    directory `tmp` (Dask workers do, for `--engine dask`) and returns k, once all are written.
    Then every part must be there (workers that wrote to storage this machine does not see are
    caught here), anything else in it (a dead task's temporary file) is removed, and the
    directory and the extra files are renamed into place with stop signals held. `final`: as
    for `write_outputs`.
    """
    if fmt not in FORMATS:
        raise UsageError(f"unknown output format '{fmt}' (expected csv or parquet)")
    target = check_part_directory(path, input_path)
    extras = dict(extra or {})
    for out in extras:
        if out == STDIO:
            raise UsageError("with --engine dask nothing is written to stdout ('-')")
        _refuse_input(out, input_path)
        if os.path.realpath(out).startswith(os.path.realpath(target) + os.sep):
            raise UsageError(f"{out} is inside the output directory {path}: write it elsewhere")
        _check_output_path(out)
    resolved = [os.path.realpath(p) for p in [path, *extras]]
    if len(set(resolved)) != len(resolved):
        raise UsageError(f"two outputs would be written to the same file ({', '.join(extras)})")
    suffix = part_suffix(path, fmt)
    with contextlib.ExitStack() as stack:  # commit together: temporary files first, renames last
        stack.push(_release_after_commit(final))  # runs after every rename
        for out, content in extras.items():  # entered first, so renamed after the directory
            side = stack.enter_context(atomic_output(out, private=out in private))
            side.write(_encoded(content))
        tmp = stack.enter_context(atomic_directory(path, input_path=input_path))
        parts = fill(tmp)
        _settle_parts(tmp, parts, suffix, path)
        _set_signals_blocked(True)  # a SIGTERM now waits until all renames are done
    if final:
        _finished[0] = True
    return parts


def _settle_parts(tmp: str, parts: int, suffix: str, path: str) -> None:
    """Check that all `parts` parts are in `tmp`, drop anything else, and widen the names'
    numbers past 10^PART_DIGITS parts so that they still sort."""
    names = [part_name(i, suffix) for i in range(parts)]
    present = set(os.listdir(tmp))
    missing = [n for n in names if n not in present]
    if missing:
        raise DataError(
            f"part {missing[0]} of {path} is not in {tmp}: the workers must write to storage "
            "this machine sees at the same path"
        )
    for stray in present.difference(names):
        where = os.path.join(tmp, stray)
        if os.path.isdir(where) and not os.path.islink(where):
            shutil.rmtree(where)
        else:
            os.unlink(where)
    digits = len(str(max(parts - 1, 0)))
    if digits > PART_DIGITS:
        for i, name in enumerate(names):
            os.rename(os.path.join(tmp, name), os.path.join(tmp, part_name(i, suffix, digits)))


def write_text_stdout(text: str, *, final: bool = False) -> None:
    """Text (a JSON report, a plan) to stdout; a closed pipe raises OutputClosed as tables do.
    `final`: the run's last output (see `write_outputs`)."""
    _write_stdout([text.encode("utf-8")])
    if final:
        _finished[0] = True
