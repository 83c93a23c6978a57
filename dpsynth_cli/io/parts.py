"""A directory of part files (`--engine dask`): written by the workers into a temporary
directory that takes the output's place as a whole."""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping

import pyarrow as pa

from dpsynth_cli.errors import DataError, UsageError
from dpsynth_cli.io.atomic import (
    _check_output_path,
    _refuse_input,
    _remove_stale_temps,
    _temp_prefix,
    atomic_output,
    fsync_dir,
)
from dpsynth_cli.io.formats import _EXTENSIONS, FORMATS, STDIO, _reason, detect_format
from dpsynth_cli.io.serialise import (
    Content,
    _csv_chunks,
    _encoded,
    _gzipped,
    _parquet_chunks,
    _pieces,
)
from dpsynth_cli.io.stops import _finished, _release_after_commit, _set_signals_blocked

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
            side.flush()  # a device's write error (/dev/full) now: before any rename
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
