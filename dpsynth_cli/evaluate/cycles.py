"""Calendar cycles of date and datetime columns for `evaluate` (NOT private: counts raw values).

A datetime column's hour of day (24 cells), weekday (7) and month of year (12), a date column's
weekday and month, counted on wall-clock time in the column's declared time zone: a datetime
code is wall-clock seconds since the epoch for a column without a time zone and an instant for
a zoned one (`coltypes.datetime_codes`), turned into the zone's wall clock here; a date code is
days since 1970-01-01. Counts are exact integers, so batches merge in any order.
"""

from __future__ import annotations

import numpy as np

from dpsynth_cli.coltypes import wall_seconds
from dpsynth_cli.domain import ColumnSpec

CYCLE_KINDS = ("date", "datetime")
SIZES = {"hour_of_day": 24, "weekday": 7, "month": 12}
DEFINITION = (
    "a date or datetime column's calendar cycles: TVD between real and synthetic of the shares "
    "of its present values by hour of day (24 cells, datetime only), weekday (7) and month of "
    "year (12), on wall-clock time in the column's declared time zone; a column whose values "
    "all lie within a day's hours or a week's days can have a small W1 and a large cycle TVD"
)


def cycle_names(spec: ColumnSpec) -> tuple[str, ...]:
    """The cycles counted for a column (none unless a date or datetime)."""
    if spec.kind == "datetime":
        return ("hour_of_day", "weekday", "month")
    if spec.kind == "date":
        return ("weekday", "month")
    return ()


def cycle_codes(codes: np.ndarray, spec: ColumnSpec) -> dict[str, np.ndarray]:
    """Each present code's cell in each of the column's cycles (`codes`: finite, not missing)."""
    if spec.kind == "datetime":
        whole = np.floor(codes)  # a zoned column's instants on its wall clock (`coltypes`)
        seconds = (wall_seconds(whole, spec.timezone) if spec.timezone else whole).astype(np.int64)
        days = np.floor_divide(seconds, 86400)
        out = {"hour_of_day": np.floor_divide(np.mod(seconds, 86400), 3600)}
    else:
        days = np.floor(codes).astype(np.int64)
        out = {}
    out["weekday"] = np.mod(days + 3, 7)  # 1970-01-01 was a Thursday; Monday is 0
    months = days.astype("datetime64[D]").astype("datetime64[M]").astype(np.int64)
    out["month"] = np.mod(months, 12)  # 0: January
    return out


class CycleCounts:
    """One table's counts of each date / datetime column's values in each of its cycles."""

    def __init__(self, specs: tuple[ColumnSpec, ...]) -> None:
        self.specs = specs
        self.counts = {
            j: {name: np.zeros(SIZES[name], dtype=np.int64) for name in cycle_names(s)}
            for j, s in enumerate(specs)
            if s.kind in CYCLE_KINDS
        }

    def add(self, X: np.ndarray, present: dict[int, np.ndarray]) -> None:
        """Count rows of value codes; `present[j]`: which rows hold a value of column j."""
        for j, cycles in self.counts.items():
            values = X[present[j], j]
            values = values[np.isfinite(values)]
            for name, cells in cycle_codes(values, self.specs[j]).items():
                cycles[name] += np.bincount(cells, minlength=SIZES[name])

    def merge(self, other: CycleCounts) -> CycleCounts:
        for j, cycles in self.counts.items():
            for name in cycles:
                cycles[name] += other.counts[j][name]
        return self
