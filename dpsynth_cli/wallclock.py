"""A date or datetime column read as the parts a person sees in it (issue 36).

A flight's departure is a day of the year, a weekday and a time of day; a one-year range cut into
equal cells loses the last two (1,024 cells of 8.6 hours), so the daily and weekly shapes of the
data are noise to a mechanism that measures the column as one number. A `Clock` holds the public
facts that turn a column's cube coordinate into its wall-clock parts and back: the column's
public interval, its time zone, its declared resolution and how a missing value is marked. The
parts are public functions of the declared column alone (no data read): the marginals mechanism
measures each as an attribute of its own (`mechanisms.attributes`) and writes a value assembled
from the parts it drew (`assemble`), so the shapes survive.

Parts (`Clock.parts`), on the wall clock of the column's zone (a column without one holds
wall-clock seconds already):
- `week`: whole weeks since the Monday on or before the first day of the range, and `weekday`
  (Monday 0 .. Sunday 6), when the range spans at least WEEKDAY_FROM_DAYS days; else `day`, the
  day since the first;
- `time`: the time of day, for a datetime column recorded finer than whole days.
A date column of fewer than WEEKDAY_FROM_DAYS days, or a datetime on whole days over such a span,
has no more than its days: it stays one attribute.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from dpsynth_cli.coltypes import instant_seconds, wall_seconds

DAY = 86400
WEEKDAY_FROM_DAYS = 14  # a range of two weeks or more is read as weeks and weekdays
HOUR_PARTS = 32  # the time of day's finest cells per hour (1.875 minutes), 24 * 32 in all


@dataclass(frozen=True)
class Clock:
    """Public facts of one date or datetime cube column (`Domain.cube_clocks`)."""

    column: int  # the cube column of its value
    lower: float  # the code at cube coordinate 0 (a date's: half a day before its first)
    width: float  # codes across [0, 1]
    date: bool  # codes are days (a date column), else seconds (a datetime column)
    timezone: str | None
    step: int  # the declared resolution in seconds (a date's: a day)
    first: float  # the first and last codes in bounds
    last: float
    flag: int | None = None  # the cube column of its missing flag (a nullable datetime)
    missing_from: float = 2.0  # cube coordinates from here on are "missing" (a nullable date)

    @property
    def nullable(self) -> bool:
        return self.flag is not None or self.missing_from <= 1.0

    def _wall(self, codes: np.ndarray) -> np.ndarray:
        """Wall-clock seconds of codes."""
        if self.date:
            return codes * DAY
        return wall_seconds(codes, self.timezone) if self.timezone else codes

    def _code(self, wall: np.ndarray) -> np.ndarray:
        """Codes of wall-clock seconds (an instant for a zoned datetime)."""
        if self.date:
            return np.floor(wall / DAY)
        return instant_seconds(wall, self.timezone) if self.timezone else wall

    @cached_property
    def days(self) -> tuple[int, int]:
        """The first and last wall-clock days of the range (days since 1970-01-01)."""
        wall = self._wall(np.array([self.first, self.last], dtype=np.float64))
        return int(wall[0] // DAY), int(wall[1] // DAY)

    @property
    def monday(self) -> int:
        """The Monday on or before the first day (1970-01-01 was a Thursday)."""
        first = self.days[0]
        return first - (first + 3) % 7

    def parts(self) -> tuple[tuple[str, int], ...]:
        """(name, values) of each part, in order; () when the column stays one attribute."""
        return self._parts

    @cached_property
    def _parts(self) -> tuple[tuple[str, int], ...]:
        first, last = self.days
        timed = not self.date and self.step < DAY
        if last - first + 1 >= WEEKDAY_FROM_DAYS:
            weeks = (last - self.monday) // 7 + 1
            days: tuple[tuple[str, int], ...] = (("week", weeks), ("weekday", 7))
        elif timed and last > first:
            days = (("day", last - first + 1),)
        elif timed:
            days = ()
        else:
            return ()
        return (*days, ("time", time_cells(self.step))) if timed else days

    def wall_of(self, unit: np.ndarray) -> np.ndarray:
        """Wall-clock seconds of the values `Domain.from_unit` writes for cube coordinates."""
        codes = np.clip(self.lower + unit * self.width, self.first, self.last)
        return self._wall(np.floor(codes + 0.5) if self.date else np.round(codes))

    def days_of(self, unit: np.ndarray) -> np.ndarray:
        """The wall-clock day (days since 1970-01-01) of cube coordinates of the column."""
        return np.floor_divide(self.wall_of(unit), DAY)

    def fraction_of_day(self, day: np.ndarray, name: str) -> np.ndarray:
        """A wall-clock day's fraction for the `week`, `weekday` or `day` part (`fractions`)."""
        parts = dict(self.parts())
        if name == "week":
            return ((day - self.monday) // 7 + 0.5) / parts["week"]
        if name == "weekday":
            return ((day - self.monday) % 7 + 0.5) / 7
        return (day - self.days[0] + 0.5) / parts["day"]

    def missing_rows(self, X: np.ndarray) -> np.ndarray:
        if self.flag is not None:
            return X[:, self.flag] >= 0.5
        return X[:, self.column] >= self.missing_from

    def fractions(self, X: np.ndarray) -> dict[str, np.ndarray]:
        """Each part's value in cube rows X as a fraction of its range, [0, 1) (NaN: missing):
        week w of W at (w + 1/2) / W, a weekday at (k + 1/2) / 7, the time of day t at t / DAY."""
        wall = self.wall_of(X[:, self.column])
        day = np.floor_divide(wall, DAY)
        out = {}
        for name, _ in self.parts():
            if name == "time":
                out[name] = (wall - day * DAY) / DAY
            else:
                out[name] = self.fraction_of_day(day, name)
        if self.nullable:
            missing = self.missing_rows(X)
            for f in out.values():
                f[missing] = np.nan
        return out

    def assemble(self, fractions: dict[str, np.ndarray], rng: np.random.Generator) -> np.ndarray:
        """Cube coordinates of the values whose parts are these fractions (`fractions`'s
        inverse; NaN in the first part: missing). A day outside the range (a week's first or
        last days beyond the bounds) moves by a week into it, keeping its weekday; a later part
        missing where the first is not takes the part of another row (post-processing)."""
        parts = dict(self.parts())
        lead = next(iter(fractions.values()))
        present = ~np.isnan(lead)
        fractions = {k: _filled(f, present, rng) for k, f in fractions.items()}
        first, last = self.days
        if "week" in fractions:
            week = np.floor(fractions["week"] * parts["week"])
            if "weekday" in fractions:
                weekday = np.floor(fractions["weekday"] * 7)
            else:  # not measured (`pairs.modelled`): the week's days evenly
                weekday = rng.permutation(np.arange(lead.size) % 7).astype(np.float64)
            day = self.monday + 7 * week + weekday
            day = np.where(day < first, day + 7, np.where(day > last, day - 7, day))
        elif "day" in fractions:
            day = first + np.floor(fractions["day"] * parts["day"])
        else:
            day = np.full(lead.size, float(first))
        # the time of day on the declared resolution's grid, floored: a cell of whole hours
        # keeps its hours (rounding to the nearest would move half of each to the next)
        wall = day * DAY
        if "time" in fractions:
            wall = wall + np.floor(fractions["time"] * DAY / self.step) * self.step
        wall = np.clip(np.where(present, wall, first * DAY), first * DAY, (last + 1) * DAY - 1)
        codes = np.clip(self._code(wall), self.first, self.last)
        unit = (codes - self.lower) / self.width
        if self.flag is None and self.nullable:
            unit = np.where(present, unit, (1.0 + self.missing_from) / 2)
        return np.where(present, unit, 0.0) if self.flag is not None else unit


def time_cells(step: int) -> int:
    """Cells of the day for the time-of-day part: whole hours' fractions of 24 * 2^k, so that
    every coarser grid of 24 * 2^j cells (the release's, the pairs') is whole hours' runs; at
    most HOUR_PARTS a hour, at least one a step (the declared resolution)."""
    per_hour = min(max(3600 // max(step, 1), 1), HOUR_PARTS)
    return 24 * (1 << (per_hour.bit_length() - 1))


def hour_aligned(cells: int, at_most: float) -> int:
    """`cells` (24 * 2^m) halved until at most `at_most` (down to 3 = 24 / 8): a coarser grid of
    the day whose runs nest with every other such grid (power-of-two ratios)."""
    while cells > at_most and cells % 2 == 0 and cells > 3:
        cells //= 2
    return cells


def _filled(f: np.ndarray, present: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """f with its NaN among `present` rows replaced by f of random rows where it is known."""
    holes = present & np.isnan(f)
    if not holes.any():
        return f
    known = f[~np.isnan(f)]
    f = f.copy()
    f[holes] = rng.choice(known, int(holes.sum())) if known.size else 0.0
    return f
