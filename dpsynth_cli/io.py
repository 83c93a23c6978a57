"""Reading and writing tables (CSV, gzipped CSV, Parquet) with pyarrow.

Error messages name the file, line or column and never contain a data value: pyarrow's own
messages often quote row content, so they are never passed through.

CSV reading is strict about *structure*. Before pyarrow parses the bytes, a vectorised (numpy) scan
of the raw bytes finds record boundaries with pyarrow's own quoting rules and checks every record's
field count, unterminated quotes and UTF-8 validity, so each problem is reported with its physical
line number (1-based, the header is line 1) instead of being skipped or filled with nulls.

CSV *values* are never used to guess types: every CSV column is read as text, and
`domain.value_matrix` parses it with the column's declared type, one cell at a time. A type guessed
from the values would be a function of every row, so one row could change the released file's
schema (docs/privacy.md, "The domain is declared").
"""

from __future__ import annotations

import codecs
import contextlib
import errno
import gzip
import os
import re
import signal
import stat
import sys
import tempfile
import threading
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from dpsynth_cli.errors import DataError, UsageError

__all__ = [
    "OutputClosed",
    "atomic_output",
    "atomic_write_bytes",
    "detect_format",
    "InputTable",
    "read_input",
    "read_table",
    "write_outputs",
    "write_table",
]

FORMATS = ("csv", "parquet")
STDIO = "-"
STDIN_NAME = "<stdin>"
STDOUT_NAME = "<stdout>"
CSV_CHUNK_ROWS = 65_536  # rows per serialised CSV chunk when writing

_EXTENSIONS = ((".csv.gz", "csv"), (".csv", "csv"), (".parquet", "parquet"), (".pq", "parquet"))
_COMPRESSION = {".gz": "gzip", ".bz2": "bz2", ".zst": "zstd"}
_BOM = b"\xef\xbb\xbf"
_COMMA, _LF, _CR, _QUOTE = 44, 10, 13, 34
_UTF8_CHUNK = 1 << 24
# What a header name that is really a number looks like (a headerless file's first row).
_NUMBER = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")


class OutputClosed(Exception):
    """The reader of stdout went away (e.g. `| head`). Not an error: the CLI exits 0 on it."""

    exit_code = 0


# --------------------------------------------------------------------------- format detection


def detect_format(path: str, override: str | None, *, flag: str | None = None) -> str:
    """Return "csv" or "parquet" for `path`: `override` wins, then the extension; "-" is CSV.

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
    lower = path.lower()
    for ext, fmt in _EXTENSIONS:
        if lower.endswith(ext):
            return fmt
    if os.path.isdir(path):
        raise UsageError(f"{path} is a directory, not a file")
    flags = flag or "--input-format or --output-format"
    raise UsageError(
        f"cannot tell the format of {path} from its extension (.csv, .csv.gz, .parquet, .pq); "
        f"name it with {flags} (csv or parquet)"
    )


# --------------------------------------------------------------------------- reading


@dataclass(frozen=True)
class InputTable:
    """The columns read, and every column name the file has (for the report's left-out list)."""

    table: pa.Table
    all_columns: list[str]


def read_table(path: str, fmt: str, columns: list[str] | None, *, header: bool = True) -> pa.Table:
    """`read_input`'s table alone."""
    return read_input(path, fmt, columns, header=header).table


def read_input(
    path: str, fmt: str, columns: list[str] | None, *, header: bool = True
) -> InputTable:
    """Read `path` ("-" = stdin) as `fmt`, only `columns` if given (in that order).

    CSV columns come back as text (empty fields are nulls; nothing is converted), Parquet columns
    with the types the file declares. Blank lines are skipped. A header-only CSV gives a table with
    0 rows. `header=False` reads a CSV without a header line: `columns` then names every field in
    order. Raises DataError for unreadable or malformed input (CSV problems with their line number)
    and UsageError for a requested column that is not in the file.
    """
    if fmt not in FORMATS:
        raise UsageError(f"unknown format '{fmt}' (expected csv or parquet)")
    if columns is not None and not columns:
        raise UsageError("no columns requested")
    if not header and (fmt != "csv" or columns is None):
        raise UsageError("--no-header is for CSV input and needs --columns naming every field")
    if path == STDIO:
        raw: bytes | None = _read_stdin()
        name = STDIN_NAME
    else:
        name = path
        regular = _check_readable(path)
        # CSV is read whole (decompressed by extension); a pipe (e.g. <(zcat ...)) also for Parquet
        raw = _read_file_bytes(path) if fmt == "csv" or not regular else None
    if fmt == "csv":
        assert raw is not None
        return _read_csv(raw, name, columns, header)
    return _read_parquet(raw if raw is not None else path, name, columns)


def _read_stdin() -> bytes:
    stream = getattr(sys.stdin, "buffer", sys.stdin)
    try:
        data = stream.read()
    except OSError as exc:
        raise DataError(f"cannot read {STDIN_NAME}: {_reason(exc)}") from None
    if isinstance(data, str):  # a text-only replacement of sys.stdin (tests, embedding)
        data = data.encode("utf-8")
    return data


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


def _read_file_bytes(path: str) -> bytes:
    """The whole content of a file (or named pipe), decompressed by extension (.gz, .bz2, .zst)."""
    codec = next((c for ext, c in _COMPRESSION.items() if path.lower().endswith(ext)), None)
    try:
        with open(path, "rb") as fh:
            if codec is None:
                return fh.read()
            with pa.CompressedInputStream(pa.PythonFile(fh, mode="r"), codec) as stream:
                return stream.read()
    except OSError as exc:
        if exc.errno is not None and exc.strerror:  # from the OS, e.g. permission denied
            raise DataError(f"cannot read {path}: {exc.strerror}") from None
        raise DataError(f"cannot read {path}: not valid {codec} data") from None
    except pa.ArrowException:
        raise DataError(f"cannot read {path}: not valid {codec} data") from None


def _reason(exc: OSError) -> str:
    """The OS's reason for an error (e.g. 'Permission denied'), never a message with data."""
    return exc.strerror or type(exc).__name__


@dataclass(frozen=True)
class _CsvLayout:
    header: tuple[int, int]  # byte range of the header record (the first non-blank one)
    fields: int  # fields per record
    data_records: int  # non-blank records after the header
    quoted_newlines: bool  # some quoted field spans lines


def _read_csv(raw: bytes, name: str, columns: list[str] | None, header: bool) -> InputTable:
    if raw.startswith(_BOM):
        raw = raw[len(_BOM) :]
    if not raw:
        raise DataError(f"input {name} is empty (0 bytes)")
    layout = _scan_csv(raw, name)
    if header:
        names = _header_names(raw, layout, name)
        wanted = names if columns is None else list(columns)
        _check_columns(wanted, names, name)
        if layout.data_records == 0 and raw[-1:] not in (b"\n", b"\r"):
            raw += b"\n"  # pyarrow needs the header line terminated to read a header-only file
    else:
        assert columns is not None
        names = wanted = list(columns)
        if len(set(names)) != len(names):
            raise UsageError("--columns: a column is named twice")
        if len(names) != layout.fields:
            raise UsageError(
                f"--no-header: {name} has {layout.fields} fields per line, but --columns names "
                f"{len(names)}; name every field in order"
            )
    try:
        table = pacsv.read_csv(
            pa.py_buffer(raw),
            read_options=pacsv.ReadOptions(
                use_threads=True, block_size=1 << 22, column_names=None if header else names
            ),
            parse_options=pacsv.ParseOptions(newlines_in_values=layout.quoted_newlines),
            convert_options=pacsv.ConvertOptions(
                include_columns=wanted,
                column_types={c: pa.string() for c in wanted},
                strings_can_be_null=False,
            ),
        )
    except pa.ArrowException:  # the scan should have caught it; pyarrow's text may hold data
        raise DataError(f"cannot parse {name} as CSV") from None
    return InputTable(_empty_strings_to_null(table), names)


def _check_columns(wanted: list[str], available: list[str], name: str) -> None:
    """Every wanted column exists exactly once in `available`, and none is wanted twice."""
    counts = Counter(available)
    for col in wanted:
        if col not in counts:
            raise UsageError(
                f"column '{col}' not found in {name} (available: {_names_list(available)})"
            )
        if counts[col] > 1:
            raise DataError(f"column name '{col}' appears more than once in the header of {name}")
    if len(set(wanted)) != len(wanted):
        raise UsageError("a column is requested more than once")


def _names_list(names: list[str], limit: int = 30) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f", ... ({len(names)} columns)" if len(names) > limit else "")


def _header_names(raw: bytes, layout: _CsvLayout, name: str) -> list[str]:
    """The header's names; a header of numbers only is the first data row of a headerless file.

    Refusing it keeps a data row out of the output's header, the notes and the report.
    """
    start, end = layout.header
    try:
        head = pacsv.read_csv(
            pa.py_buffer(raw[start:end] + b"\n"),
            read_options=pacsv.ReadOptions(use_threads=False),
            parse_options=pacsv.ParseOptions(newlines_in_values=True),
        )
    except pa.ArrowException:
        raise DataError(f"cannot parse the header line of {name}") from None
    names = head.column_names
    if all(_NUMBER.fullmatch(n.strip()) for n in names):
        raise DataError(
            f"{name}: the first line holds numbers, not column names: add a header line, or read "
            "the file with --no-header --columns NAME,NAME,... naming every field"
        )
    return names


def _empty_strings_to_null(table: pa.Table) -> pa.Table:
    """Empty unquoted or quoted fields of text columns become nulls, as in numeric columns."""
    for i, field in enumerate(table.schema):
        if pa.types.is_string(field.type) or pa.types.is_large_string(field.type):
            col = table.column(i)
            empty = pc.equal(pc.binary_length(col), 0)
            if pc.any(empty).as_py():
                table = table.set_column(
                    i, field, pc.if_else(empty, pa.scalar(None, field.type), col)
                )
    return table


# --------------------------------------------------------------------------- CSV structure scan


def _scan_csv(raw: bytes, name: str) -> _CsvLayout:
    """Check record structure and UTF-8 of a comma-separated buffer; report by line number.

    Follows pyarrow's parser: records end at LF, CRLF or a lone CR outside quotes; a quote opens a
    quoted field only at the start of a field; inside, "" is a literal quote; empty lines are
    skipped. Everything is vectorised except a fallback for quotes that do not follow RFC 4180.
    """
    buf = np.frombuffer(raw, dtype=np.uint8)
    n = buf.size
    # Delimiters and line ends, in one sorted array; `is_end` tells which is which.
    special = np.flatnonzero((buf == _COMMA) | (buf == _LF))
    if raw.find(b"\r") >= 0:
        cr = np.flatnonzero(buf == _CR)
        lone = cr[(cr + 1 >= n) | (buf[np.minimum(cr + 1, n - 1)] != _LF)]
        if lone.size:
            special = np.union1d(special, lone)
    is_end = buf[special] != _COMMA
    line_ends = special[is_end]  # every physical line end, quoted or not

    def line_of(pos: int) -> int:  # physical line (1-based) holding byte `pos`
        return int(np.searchsorted(line_ends, pos, side="left")) + 1

    problems: list[tuple[int, str]] = []
    bad_utf8 = _first_invalid_utf8(raw)
    if bad_utf8 is not None:
        problems.append((line_of(bad_utf8), "invalid UTF-8 (the file must be UTF-8 encoded)"))

    starts, ends = _quoted_spans(raw, buf)
    unterminated = bool(ends.size) and ends[-1] >= n
    quoted_newlines = False
    if starts.size:
        quoted = _inside(special, starts, ends)
        quoted_newlines = bool((quoted & is_end).any())
        special, is_end = special[~quoted], is_end[~quoted]
    rec_term = special[is_end]
    record_of = np.cumsum(is_end) - is_end  # index of the record each delimiter belongs to

    rec_start = np.concatenate(([0], rec_term + 1))
    rec_end = np.concatenate((rec_term, [n]))
    if rec_start[-1] >= n:  # nothing after the last line end
        rec_start, rec_end = rec_start[:-1], rec_end[:-1]
    nrec = rec_start.size
    fields = np.bincount(record_of[~is_end], minlength=nrec)[:nrec] + 1
    length = rec_end - rec_start
    blank = (length == 0) | ((length == 1) & (buf[np.minimum(rec_start, n - 1)] == _CR))
    if blank.all():
        raise DataError(f"input {name} is empty (no header line)")
    header = int(np.argmin(blank))  # the first non-blank record
    ncols = int(fields[header])
    wrong = (fields != ncols) & ~blank
    wrong[: header + 1] = False
    bad = np.flatnonzero(wrong)

    if unterminated:
        opening = int(starts[-1])
        open_record = int(np.searchsorted(rec_end, opening, side="left"))
        if bad.size == 0 or bad[0] >= open_record:
            problems.append((line_of(opening), 'unterminated quoted field (missing closing ")'))
            bad = bad[:0]
    if bad.size:
        r = int(bad[0])
        got = int(fields[r])
        kind = "too many fields" if got > ncols else "too few fields"
        problems.append(
            (line_of(int(rec_start[r])), f"{kind} (expected {ncols} like the header, found {got})")
        )
    if problems:
        line, what = min(problems)
        raise DataError(f"{name}: line {line}: {what}")
    return _CsvLayout(
        header=(int(rec_start[header]), int(rec_end[header])),
        fields=ncols,
        data_records=int(nrec - header - 1 - np.count_nonzero(blank[header + 1 :])),
        quoted_newlines=quoted_newlines,
    )


def _first_invalid_utf8(raw: bytes) -> int | None:
    """Byte offset of the first invalid UTF-8 sequence, or None; streaming, no full decode."""
    if raw.isascii():
        return None
    decoder = codecs.getincrementaldecoder("utf-8")()
    view = memoryview(raw)
    for off in range(0, len(raw), _UTF8_CHUNK):
        pending = len(decoder.getstate()[0])
        try:
            decoder.decode(view[off : off + _UTF8_CHUNK], final=off + _UTF8_CHUNK >= len(raw))
        except UnicodeDecodeError as exc:
            return off - pending + exc.start
    return None


def _quoted_spans(raw: bytes, buf: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted (start, end) byte positions of the opening and closing quote of quoted fields.

    An unterminated quoted field ends at len(raw). Fast path: if every quote plays its RFC 4180
    role under simple quote parity (opening at a field start, closing before a delimiter, line
    end, end of data or an escaping quote), parity is what pyarrow does. Otherwise walk the quotes
    in Python with pyarrow's rules (a quote inside an unquoted field is a literal character).
    """
    n = buf.size
    if raw.find(b'"') < 0:
        empty = np.empty(0, dtype=np.int64)
        return empty, empty
    q = np.flatnonzero(buf == _QUOTE)
    opens, closes = q[0::2], q[1::2]
    before = buf[np.maximum(opens - 1, 0)]
    ok_open = (
        (opens == 0) | (before == _COMMA) | (before == _LF) | (before == _CR) | (before == _QUOTE)
    )
    after = buf[np.minimum(closes + 1, n - 1)]
    ok_close = (
        (closes == n - 1) | (after == _COMMA) | (after == _LF) | (after == _CR) | (after == _QUOTE)
    )
    if ok_open.all() and ok_close.all():
        if opens.size > closes.size:
            closes = np.append(closes, n)
        return opens, closes
    return _quoted_spans_slow(raw, q.tolist())


def _quoted_spans_slow(raw: bytes, quotes: list[int]) -> tuple[np.ndarray, np.ndarray]:
    n = len(raw)
    starts: list[int] = []
    ends: list[int] = []
    i, m = 0, len(quotes)
    while i < m:
        p = quotes[i]
        if p == 0 or raw[p - 1] in (_COMMA, _LF, _CR):  # a quote at a field start opens it
            j = i + 1
            while j + 1 < m and quotes[j + 1] == quotes[j] + 1:  # "" is an escaped quote
                j += 2
            starts.append(p)
            if j >= m:
                ends.append(n)
                break
            ends.append(quotes[j])
            i = j + 1
        else:  # a quote inside an unquoted field is a literal character
            i += 1
    return np.asarray(starts, dtype=np.int64), np.asarray(ends, dtype=np.int64)


def _inside(pos: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Whether each sorted position lies strictly inside one of the sorted, disjoint spans."""
    lo = np.searchsorted(pos, starts, side="right")
    hi = np.searchsorted(pos, ends, side="left")
    if starts.size <= 64:  # typically just a quoted header
        mask = np.zeros(pos.size, dtype=bool)
        for a, b in zip(lo.tolist(), hi.tolist(), strict=True):
            mask[a:b] = True
        return mask
    edges = np.bincount(lo, minlength=pos.size + 1) - np.bincount(hi, minlength=pos.size + 1)
    return np.cumsum(edges[:-1]) > 0


# --------------------------------------------------------------------------- Parquet


def _read_parquet(source: str | bytes, name: str, columns: list[str] | None) -> InputTable:
    if isinstance(source, str):
        where: str | pa.BufferReader = source
    else:
        if not source:
            raise DataError(f"input {name} is empty (0 bytes)")
        where = pa.BufferReader(source)
    try:
        pfile = pq.ParquetFile(where)
    except PermissionError as exc:
        raise DataError(f"cannot read {name}: {_reason(exc)}") from None
    except (OSError, pa.ArrowException):
        raise DataError(f"cannot read {name}: not a valid Parquet file") from None
    with contextlib.closing(pfile):
        available = pfile.schema_arrow.names
        _check_columns(available if columns is None else list(columns), available, name)
        try:
            table = pfile.read(columns=columns and list(columns), use_threads=True)
        except (OSError, pa.ArrowException):
            raise DataError(f"cannot read {name}: corrupt or unsupported Parquet data") from None
    return InputTable(table, available)


# --------------------------------------------------------------------------- writing


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
def atomic_output(path: str) -> Iterator[BinaryIO]:
    """Yield a binary file that replaces `path` atomically when the block ends without error.

    The data goes to a temporary file in the same directory, which is flushed, fsynced and then
    renamed over `path`; on any error it is removed and `path` is left as it was. A missing
    directory is a UsageError; an OS error while writing is a DataError.
    """
    target, directory = _check_output_path(path)
    prefix = _temp_prefix(target)
    _remove_stale_temps(directory, prefix)
    try:
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=f"{prefix}{os.getpid()}-", suffix=".tmp")
    except OSError as exc:
        raise DataError(f"cannot write {path}: {_reason(exc)}") from None
    try:
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
    _fsync_dir(directory)


def _temp_prefix(target: str) -> str:
    """Temporary files are named `.NAME.dpsynth-PID-XXXX.tmp`, so they can be recognised."""
    return f".{os.path.basename(target)}.dpsynth-"


def _remove_stale_temps(directory: str, prefix: str) -> None:
    """Remove temporary files of this output left by a run that was killed (SIGKILL, power loss):
    those whose process is gone. A live process's file (a concurrent run) is left alone."""
    with contextlib.suppress(OSError):
        for name in os.listdir(directory):
            if not (name.startswith(prefix) and name.endswith(".tmp")):
                continue
            pid = name[len(prefix) :].partition("-")[0]
            if pid.isdigit() and not _alive(int(pid)):
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(directory, name))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # e.g. another user's process: it exists
        return True
    return True


def _fsync_dir(directory: str) -> None:
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


def write_table(table: pa.Table, path: str, fmt: str, *, input_path: str | None) -> None:
    """Write `table` to `path` ("-" = stdout) as `fmt`; `.gz` paths get gzipped CSV.

    Files are written atomically and never over `input_path`. A closed stdout raises
    OutputClosed.
    """
    write_outputs(table, path, fmt, input_path=input_path)


def write_outputs(
    table: pa.Table,
    path: str,
    fmt: str,
    *,
    input_path: str | None,
    extra: Mapping[str, str | bytes] | None = None,
) -> None:
    """Write the table like `write_table` and each `extra` {path: content} (e.g. the JSON report).

    All paths are checked (none is the input, none repeats, directories exist) before anything
    is written. File outputs are all written to temporary files first and renamed only when all
    succeeded; with stdout for the table, the extra files are committed before it is streamed.
    """
    if fmt not in FORMATS:
        raise UsageError(f"unknown output format '{fmt}' (expected csv or parquet)")
    extra = dict(extra or {})
    files = ([] if path == STDIO else [path]) + list(extra)
    for out in files:
        if out == STDIO:
            raise UsageError("only the table can be written to stdout ('-')")
        _refuse_input(out, input_path)
        _check_output_path(out)
    resolved = [os.path.realpath(p) for p in files]
    if len(set(resolved)) != len(resolved):
        raise UsageError(f"two outputs would be written to the same file ({', '.join(files)})")
    with contextlib.ExitStack() as stack:  # commit together: temp files first, renames last
        stack.callback(_set_signals_blocked, False)  # runs after every rename
        for out, content in extra.items():
            data = content.encode("utf-8") if isinstance(content, str) else content
            stack.enter_context(atomic_output(out)).write(data)
        if path != STDIO:
            fh = stack.enter_context(atomic_output(path))
            for chunk in _serialise(table, path, fmt):
                fh.write(chunk)
        _set_signals_blocked(True)  # a SIGTERM now waits until all renames are done
    if path == STDIO:  # after the extra files: the reader may close the pipe at any time
        _write_stdout(_serialise(table, path, fmt))


_STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}


def _set_signals_blocked(blocked: bool) -> None:
    """Hold back stop signals while outputs are renamed into place, so that a run stopped then
    leaves all of its files or none (a pending signal is delivered when they are unblocked)."""
    if threading.current_thread() is threading.main_thread():
        signal.pthread_sigmask(signal.SIG_BLOCK if blocked else signal.SIG_UNBLOCK, _STOP_SIGNALS)


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


def _serialise(table: pa.Table, path: str, fmt: str) -> Iterator[bytes | pa.Buffer]:
    if fmt == "parquet":
        sink = pa.BufferOutputStream()
        try:
            pq.write_table(table, sink)
        except pa.ArrowException:
            raise DataError(f"cannot write {_out_name(path)} as Parquet") from None
        return iter([sink.getvalue()])
    chunks = _csv_chunks(table, _out_name(path))
    if path != STDIO and path.lower().endswith(".gz"):
        return _gzipped(chunks)
    return chunks


def _out_name(path: str) -> str:
    return STDOUT_NAME if path == STDIO else path


def _csv_chunks(table: pa.Table, name: str) -> Iterator[pa.Buffer]:
    """The table as CSV (header first), CSV_CHUNK_ROWS rows at a time."""
    offsets = range(0, table.num_rows, CSV_CHUNK_ROWS) if table.num_rows else [0]
    for k, off in enumerate(offsets):
        sink = pa.BufferOutputStream()
        try:
            pacsv.write_csv(
                table.slice(off, CSV_CHUNK_ROWS), sink, pacsv.WriteOptions(include_header=k == 0)
            )
        except pa.ArrowException:
            raise DataError(f"cannot write {name} as CSV (unsupported column type)") from None
        yield sink.getvalue()


def _gzipped(chunks: Iterable[bytes | pa.Buffer]) -> Iterator[bytes]:
    compressor = _GzipCollector()
    with gzip.GzipFile(fileobj=compressor, mode="wb", compresslevel=6, mtime=0) as gz:
        for chunk in chunks:
            gz.write(chunk)
            yield compressor.take()
    yield compressor.take()


class _GzipCollector:
    """A write-only file object that collects what gzip writes, to hand it on in pieces."""

    def __init__(self) -> None:
        self._parts: list[bytes] = []

    def write(self, data: bytes) -> int:
        self._parts.append(bytes(data))
        return len(data)

    def flush(self) -> None:
        pass

    def take(self) -> bytes:
        data, self._parts = b"".join(self._parts), []
        return data


def _write_stdout(chunks: Iterable[bytes | pa.Buffer]) -> None:
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


def write_text_stdout(text: str) -> None:
    """Text (a JSON report, a plan) to stdout; a closed pipe raises OutputClosed as tables do."""
    _write_stdout([text.encode("utf-8")])
