"""CSV input: pyarrow's streaming reader, strict about structure, with every column as text.

A record with the wrong number of fields goes to a handler that keeps only its number and the
two field counts (never its text); on the way to pyarrow every block is checked for invalid
UTF-8 (also in columns not read) and for the quote state at the end of the data. Only when
something is wrong is the input scanned again (`csv_scan`) to name the line. A clean file pays
for no scan. Error messages name the file and line, never a value: pyarrow's own messages often
quote row content, so they are never passed through.

CSV values never decide types: `domain.value_matrix` parses each cell with its column's declared
type. A type guessed from the values would be a function of every row, so one row could change
the released file's schema (docs/privacy.md, "The domain is declared").
"""

from __future__ import annotations

import collections
import contextlib
import io as pyio
import re
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

from dpsynth_cli.errors import DataError, UsageError
from dpsynth_cli.io.csv_scan import (
    _COMMA,
    _CR,
    _LF,
    _OUT,
    _CsvBlocks,
    _CsvScan,
    _quote_state,
    _Utf8,
)
from dpsynth_cli.io.field_cap import _FieldCap
from dpsynth_cli.io.formats import default_batch_rows
from dpsynth_cli.io.source import InputSource, _Rebatch, check_columns
from dpsynth_cli.io.streams import _ByteSource

# pyarrow reads CSV in blocks of this many bytes, and a record (a row, with any line breaks inside
# its quoted fields) must fit in one block (two, if it is lucky): so fields longer than
# `field_limit(CSV_BLOCK_BYTES, fields)` are read as missing (`_FieldCap`), which makes every
# record with the header's number of fields fit, whatever its length. Its streaming reader reads
# up to 32 blocks ahead, which bounds the raw CSV held at once to about 70 MiB; its batches of one
# block each (about 10^5 rows of a few numeric columns) are gathered into batches of `batch_rows`.
CSV_BLOCK_BYTES = 2 << 20

# What a header name that is really a number looks like (a headerless file's first row).
_NUMBER = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")

# A column no CSV has: reading only it makes pyarrow parse records without converting any field.
_NO_COLUMN = "\x00dpsynth: no column\x00"


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
        self._stopped = False

    def stop(self) -> None:
        """The reader is done with the feed: reads return nothing from now on, so pyarrow's
        read-ahead (in its IO threads, calling into Python) ends at once, not blocks later
        while the command may be ending."""
        self._stopped = True

    @property
    def problem(self) -> bool:
        return self.bad_utf8 or self.unterminated

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        """`n` bytes (fewer only at the end): pyarrow's blocks are then all `block` bytes, so
        a record up to that long is always whole in one block or two adjacent ones."""
        if self._stopped:
            return b""
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


PARQUET_MAGIC = b"PAR1"
# separators a header read with commas may hold instead (the hint of _refuse_other_separator)
OTHER_SEPARATORS = ((";", "';'"), ("\t", "tab"), ("|", "'|'"))


def _refuse_other_separator(names: list[str], name: str) -> None:
    """A header read with commas that is one field holding ';' (a tab, '|') is most likely a
    file separated by it: refused with the --delimiter to give. Decided from the header line
    alone (column names are structure, public), never from data rows; --delimiter ',' reads
    such a file as one column."""
    if len(names) != 1:
        return
    for sep, flag in OTHER_SEPARATORS:
        if sep in names[0]:
            shown = "a tab" if sep == "\t" else f"'{sep}'"
            raise UsageError(
                f"{name} looks separated by {shown} (its header is one field holding "
                f"{shown}): add --delimiter {flag} (or --delimiter ',' to read it as one column)"
            )


def _first_line(data: bytes) -> bytes | None:
    """The first record of `data` with its line end, when no quote can hide a line end in it
    (structure only); None otherwise (the full reader decides)."""
    ends = [i for i in (data.find(b"\n"), data.find(b"\r")) if i >= 0]
    if not ends:
        return None
    end = min(ends)
    if b'"' in data[:end]:
        return None
    end += 2 if data[end : end + 2] == b"\r\n" else 1
    return data[:end]


class _CsvSource(InputSource):
    """A CSV input read with pyarrow's streaming reader (all columns as text)."""

    def __init__(
        self,
        data: _ByteSource,
        columns: list[str] | None,
        header: bool,
        batch_rows: int | None,
        delimiter: str = ",",
        *,
        guess: bool = False,
    ) -> None:
        super().__init__(data.spool)
        self._data, self.name, self._header = data, data.name, header
        self._sep = ord(delimiter)
        self._block = CSV_BLOCK_BYTES
        # fields per record, for the field limit: the header's (counted as it is read) or, with
        # --no-header, the columns named
        self._fields = None if header or columns is None else len(columns)
        self._refuse_parquet()
        names = self._first_names()
        if header and guess and columns is None:
            _refuse_other_separator(names, self.name)
        if header:
            if all(_NUMBER.fullmatch(n.strip()) for n in names):
                raise DataError(
                    f"{self.name}: the first line holds numbers, not column names: add a header "
                    "line, or read the file with --no-header --columns NAME,NAME,... naming "
                    "every field"
                )
            wanted = names if columns is None else list(columns)
            check_columns(wanted, names, self.name, csv_delimiter=delimiter)
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
            try:
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
            finally:  # a pass left early (an error, a caller that stops): no read-ahead goes on
                feed.stop()

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

    def _refuse_parquet(self) -> None:
        """A Parquet file read as CSV (e.g. named .csv): its first bytes are Parquet's magic
        (structure, not data), which would otherwise be reported as invalid UTF-8."""
        with self._data.open() as raw:
            start = raw.read(len(PARQUET_MAGIC))
        if start == PARQUET_MAGIC:
            raise DataError(
                f"{self.name} looks like a Parquet file: use --input-format parquet or rename it"
            )

    def _first_names(self) -> list[str]:
        """The header's names (or, without a header, one name per field of the first record).

        A problem pyarrow or the feed met on the way is reported right away: a full check then
        finds the first one in the file.
        """
        with self._data.open() as raw:
            feed = _CsvFeed(
                _CsvBlocks(raw, self.name, self._block), self._block, self._fields, self._sep
            )
            line = _first_line(feed.read(self._block))  # what pyarrow's first block holds
        problem = feed.problem
        if line is not None:
            # pyarrow parses the first record from memory: a reader over the feed would read
            # ahead in pyarrow's IO threads, still calling into Python while the command ends
            # ("terminate called without an active exception" at exit, e.g. `schema draft`)
            names = self._names_from(pa.BufferReader(line))
        else:  # a quote in the first line, or no line end in the first block: the full reader
            with self._data.open() as raw:
                feed = _CsvFeed(
                    _CsvBlocks(raw, self.name, self._block), self._block, self._fields, self._sep
                )
                names = self._names_from(feed)
                feed.stop()
                problem = feed.problem
        if names is None or problem:
            self._check_structure()
        if names is None:
            raise DataError(f"cannot parse the header line of {self.name}")
        return names

    def _names_from(self, source: Any) -> list[str] | None:
        reader, names = self._reader(source, [], None), None
        if reader is not None:
            with contextlib.suppress(pa.ArrowException, ValueError):
                names = list(reader.schema.names)
            with contextlib.suppress(pa.ArrowException, ValueError):
                reader.close()
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
            feed.stop()
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
