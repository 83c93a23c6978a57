"""Fields longer than `field_limit` read as missing, so that no row's length can fail a run.

pyarrow parses a record only if it fits in its blocks; capping each field by its own bytes and
public numbers (the header's field count, the block size) makes every record fit, wherever it
falls in the file (docs/privacy.md).
"""

from __future__ import annotations

import numpy as np

from dpsynth_cli.io.csv_scan import (
    _COMMA,
    _CR,
    _ESC,
    _IN,
    _LF,
    _OUT,
    _QUOTE,
    _prefix_states,
    _quote_steps,
)


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
