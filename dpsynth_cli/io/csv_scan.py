"""A CSV's record structure as pyarrow sees it: its blocks, UTF-8 validity and quote state.

pyarrow silently accepts an unterminated quoted field and names a bad record only by its number;
`_CsvScan` follows pyarrow's parser over the bytes (vectorised, one block at a time) to turn
that number, or a byte offset, into a physical line (1-based, the header is line 1; blank lines
and line breaks inside quoted fields count). It runs only when something is wrong.
"""

from __future__ import annotations

import codecs
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from dpsynth_cli.errors import DataError
from dpsynth_cli.io.streams import _read_block, _Reader

_BOM = b"\xef\xbb\xbf"

_COMMA, _LF, _CR, _QUOTE = 44, 10, 13, 34


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
