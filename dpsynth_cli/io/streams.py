"""The bytes of an input, for every pass: stdin and pipes copied once into an anonymous
temporary file (`_Spool`), compressed data recognised by extension or magic bytes and
decompressed, and read errors as one-line messages."""

from __future__ import annotations

import contextlib
import io as pyio
import os
import stat
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO, Protocol

import pyarrow as pa

from dpsynth_cli.errors import DataError
from dpsynth_cli.io.formats import _SPOOL_CHUNK, STDIN_NAME, _reason

_COMPRESSION = {".gz": "gzip", ".bz2": "bz2", ".zst": "zstd"}


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
