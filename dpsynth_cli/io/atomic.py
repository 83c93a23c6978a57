"""Files that appear whole or not at all: a temporary file beside the target, fsynced and
renamed; stale temporaries of killed runs removed; never the input overwritten. An output that
is not a regular file (a device, a FIFO) is written into, never replaced; a symbolic link is
followed (the file it names is replaced, the link stays)."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from typing import BinaryIO

from dpsynth_cli.errors import DataError, UsageError
from dpsynth_cli.io.formats import _SPOOL_CHUNK, STDIO, _reason
from dpsynth_cli.io.stops import _set_signals_blocked

_PRIVATE_MODE = 0o600  # owner-only files: `--diagnostics`


def _default_mode() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def _check_output_path(path: str) -> tuple[str, str, bool]:
    """Where the output `path` goes: (target, its directory, in_place), decided by the path
    alone (never by the data), the same before any row is read and at the end.

    A path that is (or is a symbolic link to) something other than a regular file or a
    directory, a device or a FIFO, is written into in place (`in_place`): replacing it would
    change the machine (run as root, a world-writable regular file at /dev/null) or lose the
    data (/dev/full). A symbolic link to a regular file, or a dangling one, is followed: the
    target is the file it names, replaced atomically, and the link stays. A directory, a
    socket, a link loop and a missing directory are usage errors."""
    target = os.path.abspath(path)
    try:
        mode: int | None = os.stat(target).st_mode  # follows symbolic links
    except FileNotFoundError:
        mode = None
    except OSError as exc:  # a link loop, a name too long, a file used as a directory
        raise UsageError(f"cannot write {path}: {_reason(exc)}") from None
    if mode is not None and stat.S_ISDIR(mode):
        raise UsageError(f"output {path} is a directory")
    if mode is not None and stat.S_ISSOCK(mode):
        raise UsageError(f"cannot write {path}: it is a socket")
    if mode is not None and not stat.S_ISREG(mode):  # a character or block device, a FIFO
        return target, os.path.dirname(target), True
    if os.path.islink(target):
        target = os.path.realpath(target)
        directory = os.path.dirname(target)
        if not os.path.isdir(directory):
            raise UsageError(
                f"cannot write {path}: it is a symbolic link to {target}, whose directory "
                "does not exist"
            )
        return target, directory, False
    directory = os.path.dirname(target)
    if not os.path.isdir(directory):
        raise UsageError(f"cannot write {path}: directory {directory} does not exist")
    return target, directory, False


def written_in_place(path: str) -> bool:
    """Whether `path` is (or is a symbolic link to) a device or a FIFO, which an output is
    written into rather than replaced (`_check_output_path`); False for anything else."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISSOCK(mode))


@contextlib.contextmanager
def atomic_output(path: str, *, private: bool = False) -> Iterator[BinaryIO]:
    """Yield a binary file that replaces `path` atomically when the block ends without error.

    The data goes to a temporary file in the same directory, which is flushed, fsynced and then
    renamed over `path`; on any error it is removed and `path` is left as it was. A missing
    directory is a UsageError; an OS error while writing is a DataError. The file gets the mode
    of the file it replaces, else the umask's; `private` makes it owner-only (0600) whatever the
    old file's mode was (non-private diagnostics: true counts and distances).

    A symbolic link is followed: the file it names is replaced and the link stays. A device or
    a FIFO (`_check_output_path`) is written into instead, as the data comes (like stdout: not
    all or nothing), its mode untouched; a write error there (a full disk, /dev/full, a reader
    gone) is a DataError too.
    """
    target, directory, in_place = _check_output_path(path)
    if in_place:
        with _written_in_place(path, target) as fh:
            yield fh
        return
    prefix = _temp_prefix(target)
    _remove_stale_temps(directory, prefix)
    _set_signals_blocked(True)  # no stop between creating the file and the `try` removing it
    try:
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=f"{prefix}{os.getpid()}-", suffix=".tmp")
    except OSError as exc:
        _set_signals_blocked(False)
        raise DataError(f"cannot write {path}: {_reason(exc)}") from None
    # The file object owns fd from here. Made while stops are held: a stop inside `fdopen`
    # could drop it (closing fd) before its caller knew, and closing fd again then failed.
    fh = os.fdopen(fd, "wb")
    try:
        _set_signals_blocked(False)  # a signal held meanwhile is raised here: tmp is removed
        if private:
            os.fchmod(fd, _PRIVATE_MODE)  # mkstemp made it 0600 already: kept so
        else:
            try:
                os.fchmod(fd, os.stat(target).st_mode & 0o7777)
            except FileNotFoundError:
                os.fchmod(fd, _default_mode())
        with fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            fh.close()  # closed already unless the error came before `with fh`
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise DataError(f"cannot write {path}: {_reason(exc)}") from None
        raise
    fsync_dir(directory)


@contextlib.contextmanager
def _written_in_place(path: str, target: str) -> Iterator[BinaryIO]:
    """Yield `target` (a device or a FIFO) opened for writing: no temporary file, no rename,
    no truncation, no new file (the open never creates one). Opening a FIFO waits for its
    reader. An OS error, also when the data is flushed at the end, is a DataError."""
    try:
        fd = os.open(target, os.O_WRONLY | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        raise DataError(f"cannot write {path}: {_reason(exc)}") from None
    fh = os.fdopen(fd, "wb")
    try:
        if stat.S_ISREG(os.fstat(fd).st_mode):  # replaced by a file since it was checked
            raise DataError(f"cannot write {path}: it became a regular file while checked")
        yield fh
        fh.flush()
        _sync_special(fd)
        fh.close()
    except BaseException as exc:
        with contextlib.suppress(OSError):
            fh.close()  # closes the descriptor even when the last flush fails again
        if isinstance(exc, OSError):
            raise DataError(f"cannot write {path}: {_reason(exc)}") from None
        raise


def _sync_special(fd: int) -> None:
    """fsync a device (a block device's write errors show here); FIFOs and character devices
    do not support it (EINVAL), which is no error."""
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.EROFS, errno.ENOTSUP, errno.EOPNOTSUPP):
            raise


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
    then `src` removed. Stop signals are not touched (the caller may hold them).

    `dst` is taken as `atomic_output` takes its path (`_check_output_path`): a symbolic link is
    followed (the file it names is replaced, the link stays), a device or a FIFO is written
    into (then `src` is removed). OS errors are raised as they are."""
    target, directory, in_place = _check_output_path(dst)
    if in_place:
        _copy_into(src, target)
        os.unlink(src)
        return
    try:
        os.replace(src, target)
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
    else:
        fsync_dir(directory)
        return
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


def _copy_into(src: str, target: str) -> None:
    """Copy the file `src` into the device or FIFO `target` (never creating or replacing it)."""
    fd = os.open(target, os.O_WRONLY | os.O_NOCTTY | os.O_CLOEXEC)
    with os.fdopen(fd, "wb") as out, open(src, "rb") as data:
        shutil.copyfileobj(data, out, _SPOOL_CHUNK)
        out.flush()
        _sync_special(out.fileno())


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
