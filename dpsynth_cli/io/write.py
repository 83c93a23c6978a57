"""Writing a run's outputs: the table (a file or stdout) and its side files (the report), all
committed together only when all succeeded; outputs checked before any row is read."""

from __future__ import annotations

import contextlib
import errno
import os
import sys
import tempfile
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import BinaryIO

import pyarrow as pa

from dpsynth_cli.errors import DataError, UsageError
from dpsynth_cli.io.atomic import _check_output_path, _refuse_input, _temp_prefix, atomic_output
from dpsynth_cli.io.formats import _SPOOL_CHUNK, FORMATS, STDIO, STDOUT_NAME, OutputClosed, _reason
from dpsynth_cli.io.serialise import Content, Piece, _encoded, _pieces, _serialise
from dpsynth_cli.io.stops import _finished, _release_after_commit, _set_signals_blocked


def write_table(table: pa.Table, path: str, fmt: str, *, input_path: str | None) -> None:
    """Write `table` to `path` ("-" = stdout) as `fmt`; `.gz` paths get gzipped CSV.

    Files are written atomically and never over `input_path`. A closed stdout raises
    OutputClosed.
    """
    write_outputs(table, path, fmt, input_path=input_path)


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
    extra files they go to stdout as they come). A path that is a device or a FIFO (or a
    symbolic link to one) is written into as its data comes, like stdout, never replaced
    (`atomic_output`); each output is flushed once written, so that a write error there (e.g.
    /dev/full) fails the run before anything is renamed.

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
                    side.flush()  # a device's write error (/dev/full) now: before any rename
            if path != STDIO:
                fh = stack.enter_context(atomic_output(path))
                for chunk in _serialise(pieces, schema, path, fmt):
                    fh.write(chunk)
                fh.flush()
            elif extras and not isinstance(data, pa.Table):
                staged = keep.enter_context(tempfile.TemporaryFile())
                _stage(_serialise(pieces, schema, path, fmt), staged)
            for out, content in extras.items():
                if callable(content):
                    side = stack.enter_context(atomic_output(out, private=out in private))
                    side.write(_encoded(content()))
                    side.flush()
            _set_signals_blocked(True)  # a SIGTERM now waits until all renames are done
        if path == STDIO:  # after the extra files: the reader may close the pipe at any time
            if staged is not None:
                staged.seek(0)
                _write_stdout(iter(lambda: staged.read(_SPOOL_CHUNK), b""))
            else:
                _write_stdout(_serialise(pieces, schema, path, fmt))
    if final:
        _finished[0] = True


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
    temporary files, so a run killed in between leaves nothing a later run keeps). A device or
    a FIFO, written in place, is not opened now (a FIFO's reader would see its end): only
    whether we may write it is checked; no temporary file is made beside it (e.g. in /dev)."""
    target, directory, in_place = _check_output_path(path)
    if in_place:
        if not os.access(target, os.W_OK):
            raise DataError(f"cannot write {path}: {os.strerror(errno.EACCES)}")
        return
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


def _stage(chunks: Iterable[bytes | pa.Buffer], staged: BinaryIO) -> None:
    for chunk in chunks:
        try:
            staged.write(chunk)
        except OSError as exc:
            raise DataError(
                f"cannot write {STDOUT_NAME}: staging it in {tempfile.gettempdir()} failed "
                f"({_reason(exc)}; set TMPDIR to a directory with room)"
            ) from None


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


def write_text_stdout(text: str, *, final: bool = False) -> None:
    """Text (a JSON report, a plan) to stdout; a closed pipe raises OutputClosed as tables do.
    `final`: the run's last output (see `write_outputs`)."""
    _write_stdout([text.encode("utf-8")])
    if final:
        _finished[0] = True
