"""Checkpoints by time on a date or datetime --order-by column (issue 25): `--checkpoints
every:7d` or `monthly`.

What is public and why this keeps the guarantee. The --order-by column is the public timeline
(PRIVACY_MODEL): its values, the order they give and so the number of rows up to any time are
public by declaration; neighbouring streams (one row's protected values changed, or under
add-remove one time slot emptied) have the same timeline. Checkpoint times are computed from
that column and the flag only: the grid starts at the stream's first time (floored to the
interval's unit: midnight for whole days) or at calendar months, and a checkpoint tau is
reached once a row with time >= tau has been seen. Its release holds the rows with time < tau:
exactly as many rows as the timeline has before tau, a public number, as a row-count
checkpoint's t is. Nothing here reads a synthesised column, so the releases stay the same
post-processing of the same ledgered counts as with row-count checkpoints. A period without
rows gives a release of the same size as the one before (a new draw from the same noisy
counts: post-processing, no budget).

Times are seconds since the epoch as `coltypes.datetime_codes` reads them (a date at midnight;
text without an offset as wall-clock time, shown without a zone); the timeline is held
run-length coded (distinct times and the rows up to each): 16 bytes per distinct time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from dpsynth_cli.coltypes import datetime_codes
from dpsynth_cli.errors import DataError, UsageError

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_EVERY = re.compile(r"^every:(\d+)([smhdw])$")
DAY = 86400


@dataclass(frozen=True)
class TimeRule:
    """`every` seconds from the floored first time, or calendar months (`every` = 0)."""

    every: int
    spec: str

    def points(self, origin: float, after: float, upto: float) -> list[float]:
        """Checkpoint times tau with after < tau <= upto on the grid that starts at `origin`."""
        if upto <= after:
            return []
        if self.every == 0:
            import pandas as pd  # here: a third of every command's start-up

            start = pd.Timestamp(int(origin), unit="s").to_period("M")
            end = pd.Timestamp(int(np.floor(upto)), unit="s").to_period("M")
            months = pd.period_range(start + 1, end, freq="M") if end > start else []
            taus = [float(p.to_timestamp().value // 10**9) for p in months]
            return [t for t in taus if after < t <= upto]
        grain = next(g for g in (DAY, 3600, 60, 1) if self.every % g == 0)
        base = np.floor(origin / grain) * grain
        k0 = int(np.floor((max(after, base) - base) / self.every)) + 1
        k1 = int(np.floor((upto - base) / self.every))
        return [base + k * self.every for k in range(k0, k1 + 1)]


def time_rule(spec: str) -> TimeRule | None:
    """The rule of a time checkpoint spec, or None for a row-count one (`parse_checkpoints`)."""
    text = spec.strip().lower()
    if text == "monthly":
        return TimeRule(0, text)
    m = _EVERY.match(text)
    if m is None:
        return None
    n = int(m.group(1)) * _UNITS[m.group(2)]
    if n < 1:
        raise UsageError("--checkpoints every:N<unit> needs a positive interval, e.g. every:7d")
    return TimeRule(n, text)


@dataclass
class Timeline:
    """The --order-by column's times in stream order (public), run-length coded."""

    times: np.ndarray  # distinct times, increasing (seconds)
    ends: np.ndarray  # rows up to and including each time

    def rows_before(self, tau: float) -> int:
        """How many rows have a time < tau."""
        k = int(np.searchsorted(self.times, tau, side="left"))
        return int(self.ends[k - 1]) if k else 0

    def time_of_row(self, i: int) -> float:
        """The time of the row at 0-based position i."""
        return float(self.times[int(np.searchsorted(self.ends, i, side="right"))])


class TimelineBuilder:
    """Collects the order column batch by batch (in stream order) into a `Timeline`."""

    def __init__(self, column: str) -> None:
        self.column, self.rows = column, 0
        self.times: list[np.ndarray] = []
        self.ends: list[np.ndarray] = []

    def add(self, key: pa.Array | pa.ChunkedArray) -> None:
        chunked = key if isinstance(key, pa.ChunkedArray) else pa.chunked_array([key])
        seconds = datetime_codes(chunked, None)
        if np.isnan(seconds).any():
            raise DataError(
                f"--order-by column '{self.column}' has a value that is not a date or time: "
                "--checkpoints by time need ISO dates or times there"
            )
        if seconds.size == 0:
            return
        last = self.times[-1][-1] if self.times else -np.inf
        if seconds[0] < last or (np.diff(seconds) < 0).any():
            raise DataError(
                f"--order-by column '{self.column}': its order is not the order of its times "
                "(text with different UTC offsets?); write the times with one offset"
            )
        cut = np.flatnonzero(np.diff(seconds)) + 1
        starts = np.concatenate([[0], cut])
        ends = np.concatenate([cut, [seconds.size]]) + self.rows
        times = seconds[starts]
        if self.times and times[0] == last:  # the same time across batches: one run
            self.ends[-1][-1] = ends[0]
            times, ends = times[1:], ends[1:]
        self.times.append(times)
        self.ends.append(ends)
        self.rows += seconds.size

    def build(self) -> Timeline:
        if not self.times:
            return Timeline(np.empty(0), np.empty(0, dtype=np.int64))
        return Timeline(np.concatenate(self.times), np.concatenate(self.ends).astype(np.int64))


def time_text(tau: float) -> str:
    """A checkpoint time as ISO text: the date alone at midnight."""
    import pandas as pd  # here: a third of every command's start-up

    stamp = pd.Timestamp(int(round(tau)), unit="s")
    return stamp.date().isoformat() if tau % DAY == 0 else stamp.isoformat()


def file_stamp(tau: float) -> str:
    """The time part of a release's file name (no colons: portable, sorts in time order)."""
    return time_text(tau).replace(":", "")
