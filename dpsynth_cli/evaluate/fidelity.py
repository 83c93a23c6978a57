"""What a data steward checks, per column and per pair, on public encodings (NOT private).

docs/FIDELITY: each column's error (TVD of the level shares of a boolean or category column;
1-D W1 on the 0-1 scale of the public bounds of a number, integer, date or datetime column),
every pair's 2-way TVD (numbers in `BINS` equal-width bins of their public bounds, levels by
their declared names, a nullable column's missing as a bin of its own), and every pair of
numeric columns' |Pearson(real) - Pearson(synthetic)| on the 0-1 scale; worst and mean of
each, the worst columns and pairs named first. Everything is read from the declarations (the
specs) and counted on them, never on codes' values as numbers for a level column.

`PairCounts` holds mergeable counts (1- and 2-way histograms on the public bins, exact pairwise
sums for the correlations), so the same figures come from one pass over record batches, split
any way (threads, Dask workers);
`fidelity` takes two tables (numpy value rows, pandas or Arrow) and returns a JSON-able dict.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import combinations
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np
import pyarrow as pa

from dpsynth_cli.domain import DISCRETE, LEVEL_KINDS, ColumnSpec, value_matrix
from dpsynth_cli.evaluate.categorical import MISSING
from dpsynth_cli.evaluate.cycles import DEFINITION as CYCLES_DEFINITION
from dpsynth_cli.evaluate.cycles import CycleCounts
from dpsynth_cli.evaluate.exact import ExactSums
from dpsynth_cli.evaluate.w1 import w1_1d

BINS = 16  # equal-width bins of a numeric column's public bounds in the 2-way histograms
DEFINITIONS = {
    "determined_pairs": "pairs (a, b) of category or boolean columns where a nearly determines b "
    "in the real table (its map, each level of a -> the most common b with it in the real "
    "table, holds in at least 95% of real rows and explains 3/4 of the rows b's most common level "
    "does not): the share of real and of synthetic rows whose (a, b) agrees with that map (NOT "
    "private: the map is read from the real rows)",
    "column_error": "a boolean or category column: TVD of its level shares (missing a level "
    "if nullable); a numeric, date or datetime column: W1 on the 0-1 scale of its public "
    "bounds (a nullable one: |difference of missing shares| + (1 - the larger missing share) "
    "x W1 of the present values, the cost of a coupling, exact without missing values)",
    "pair_tvd": f"TVD of each pair's 2-way histogram: numbers in {BINS} equal-width bins of "
    "their public bounds, levels by name, a nullable column's missing as its own bin",
    "correlation": "Pearson correlation of each pair of numeric (float, integer, date, "
    "datetime) columns on the 0-1 scale of their public bounds, over rows where both are "
    "present; error = |real - synthetic|; undefined (null, left out of the worst and the mean, "
    "counted in undefined_pairs) where a column is constant in a table",
    "cycles": CYCLES_DEFINITION,
}
# a variance on the 0-1 scale below this is rounding (sums of centred values): a constant column
CONSTANT = 1e-15
NUMERIC = ("float", "integer", "date", "datetime")
if TYPE_CHECKING:  # pandas takes a second to import: only when a frame is given
    import pandas as pd

TableLike: TypeAlias = "np.ndarray | pd.DataFrame | pa.Table"


def unit_interval(spec: ColumnSpec) -> tuple[float, float]:
    """The interval of present values the 0-1 scale maps from (an integer or date column owns
    [lower - 1/2, upper + 1/2], as on the unit cube)."""
    if spec.kind in DISCRETE:
        return math.ceil(spec.lower) - 0.5, math.floor(spec.upper) + 0.5
    return float(spec.lower), float(spec.upper)


def missing_mask(values: np.ndarray, spec: ColumnSpec) -> np.ndarray:
    """Which codes are a nullable column's missing level (past the upper bound, `column_codes`)."""
    if not spec.nullable:
        return np.zeros(values.shape, dtype=bool)
    return values > spec.upper


def unit_values(values: np.ndarray, spec: ColumnSpec) -> np.ndarray:
    """A numeric column on the 0-1 scale of its public bounds (clamped)."""
    lo, hi = unit_interval(spec)
    return np.clip((values - lo) / (hi - lo), 0.0, 1.0)


def bin_labels(spec: ColumnSpec, bins: int = BINS) -> list[str]:
    """The names of a column's bins: its levels, or its numeric bins' ranges (public), then
    the missing level if nullable."""
    if spec.kind in LEVEL_KINDS:
        names = list(spec.levels or ())
    else:
        lo, hi = unit_interval(spec)
        edges = np.linspace(lo, hi, bins + 1)
        names = [f"[{a:.4g}, {b:.4g})" for a, b in zip(edges[:-1], edges[1:], strict=True)]
    return names + ([MISSING] if spec.nullable else [])


def bin_codes(values: np.ndarray, spec: ColumnSpec, bins: int = BINS) -> np.ndarray:
    """Each value's bin: a level's code, or one of `bins` equal-width bins of the bounds; the
    missing level last."""
    size = len(bin_labels(spec, bins))
    missing = missing_mask(values, spec)
    if spec.kind in LEVEL_KINDS:
        codes = np.clip(np.nan_to_num(values), 0, size - 1 - spec.nullable).astype(np.int64)
    else:
        unit = unit_values(np.where(missing, spec.lower, values), spec)
        codes = np.minimum(np.floor(unit * bins), bins - 1).astype(np.int64)
    return np.where(missing, size - 1, codes)


class PairCounts:
    """One table's mergeable counts on the public bins: rows, each column's histogram, every
    pair's 2-way histogram, and for each pair of numeric columns the sums that give their
    Pearson correlation over rows where both are present (on the 0-1 scale, centred at 1/2)."""

    def __init__(self, specs: Sequence[ColumnSpec], bins: int = BINS) -> None:
        self.specs, self.bins, self.n = tuple(specs), bins, 0
        self.sizes = [len(bin_labels(s, bins)) for s in self.specs]
        self.one = [np.zeros(k, dtype=np.int64) for k in self.sizes]
        self.pairs = list(combinations(range(len(self.specs)), 2))
        self.two = {
            (a, b): np.zeros(self.sizes[a] * self.sizes[b], np.int64) for a, b in self.pairs
        }
        self.numeric = [j for j, s in enumerate(self.specs) if s.kind in NUMERIC]
        k = len(self.numeric)
        # exact sums over rows where both of a pair are present (`exact.ExactSums`): the same
        # correlations whatever the batches, threads or workers
        self.moments = ExactSums(k)
        # each numeric column's smallest and largest present value on the 0-1 scale: a column
        # whose present values are all equal is constant, its correlations undefined (exactly,
        # where the variance from the sums is rounding that CONSTANT may not catch)
        self.low, self.high = np.full(k, np.inf), np.full(k, -np.inf)
        self.cycles = CycleCounts(self.specs)  # date / datetime columns' hours, weekdays, months

    def add(self, X: np.ndarray) -> None:
        """Count rows of value codes in original units (`domain.value_matrix`)."""
        if X.shape[0] == 0:
            return
        self.n += X.shape[0]
        # int32 codes (a few levels or bins): half the memory of the batch's codes
        codes = [
            bin_codes(X[:, j], s, self.bins).astype(np.int32) for j, s in enumerate(self.specs)
        ]
        for j, c in enumerate(codes):
            self.one[j] += np.bincount(c, minlength=self.sizes[j])
        for a, b in self.pairs:
            flat = codes[a] * self.sizes[b] + codes[b]
            self.two[a, b] += np.bincount(flat, minlength=self.two[a, b].size)
        if self.numeric:
            self._add_moments(X)
        present = {j: ~missing_mask(X[:, j], self.specs[j]) for j in self.cycles.counts}
        self.cycles.add(X, present)

    def _add_moments(self, X: np.ndarray) -> None:
        present = np.column_stack([~missing_mask(X[:, j], self.specs[j]) for j in self.numeric])
        unit = np.column_stack([unit_values(X[:, j], self.specs[j]) for j in self.numeric])
        full = present.all()
        self.low = np.fmin(self.low, (unit if full else np.where(present, unit, np.inf)).min(0))
        self.high = np.fmax(self.high, (unit if full else np.where(present, unit, -np.inf)).max(0))
        self.moments.add(unit, present)

    def merge(self, other: PairCounts) -> PairCounts:
        """Add another batch's (or table part's) counts: the figures do not depend on the split."""
        self.n += other.n
        for mine, theirs in zip(self.one, other.one, strict=True):
            mine += theirs
        for key in self.two:
            self.two[key] += other.two[key]
        self.moments.merge(other.moments)
        self.low, self.high = np.fmin(self.low, other.low), np.fmax(self.high, other.high)
        self.cycles.merge(other.cycles)
        return self

    def correlation(self) -> np.ndarray:
        """Pearson correlations of the numeric columns (pairwise complete rows; NaN where a
        column is constant or a pair never present together; 1 on the diagonal)."""
        r = self.moments.correlation()
        var = self.moments.variance()  # var[a, b]: of a over rows where a and b are present
        var_a, var_b = var, var.T
        with np.errstate(invalid="ignore"):
            r[(var_a <= CONSTANT) | (var_b <= CONSTANT)] = np.nan  # a constant column: undefined
        constant = self.high <= self.low  # every present value equal (or none present)
        r[constant, :] = np.nan
        r[:, constant] = np.nan
        np.fill_diagonal(r, 1.0)
        return r


def as_values(table: TableLike, specs: Sequence[ColumnSpec]) -> np.ndarray:
    """Value rows (codes in original units) of a numpy array, a pandas frame or an Arrow table;
    a frame or table is read with the specs' declared kinds (levels by name), rows with a
    missing value in a column that is not nullable dropped, as dpsynth reads a file."""
    if isinstance(table, np.ndarray):
        return np.asarray(table, dtype=np.float64).reshape(-1, len(specs))
    if type(table).__module__.startswith("pandas"):  # a DataFrame (pandas not imported here)
        table = pa.Table.from_pandas(table[[s.name for s in specs]], preserve_index=False)
    return value_matrix(table, list(specs)).reshape(-1, len(specs))


def counts_of(table: TableLike, specs: Sequence[ColumnSpec], bins: int = BINS) -> PairCounts:
    counts = PairCounts(specs, bins)
    counts.add(as_values(table, specs))
    return counts


def fidelity(
    real: TableLike, synth: TableLike, specs: Sequence[ColumnSpec], *, bins: int = BINS
) -> dict[str, Any]:
    """Every column's error, every pair's 2-way TVD and every numeric pair's correlation error
    between two tables on the same declared columns (see the module docstring; the keys:
    `fidelity_from_counts`). Reads raw data: NOT differentially private."""
    X, Y = as_values(real, specs), as_values(synth, specs)
    counts = []
    for rows in (X, Y):
        c = PairCounts(specs, bins)
        c.add(rows)
        counts.append(c)
    w1 = {
        s.name: column_w1(X[:, j], Y[:, j], s)
        for j, s in enumerate(specs)
        if s.kind not in LEVEL_KINDS
    }
    return fidelity_from_counts(*counts, w1)


def column_w1(x: np.ndarray, y: np.ndarray, spec: ColumnSpec) -> float | None:
    """1-D W1 on the 0-1 scale of the bounds; a nullable column's missing at distance 1 from
    every value (the cost of a coupling that moves only the excess missing share; exact
    without missing values)."""
    mx, my = missing_mask(x, spec), missing_mask(y, spec)
    x, y = x[~mx], y[~my]
    share_x, share_y = (mx.mean() if mx.size else 0.0), (my.mean() if my.size else 0.0)
    if x.size == 0 or y.size == 0:
        return float(abs(share_x - share_y)) if x.size + y.size else 0.0
    w1 = w1_1d(unit_values(x, spec), unit_values(y, spec))
    return float(abs(share_x - share_y) + (1 - max(share_x, share_y)) * w1)


def tvd(p: np.ndarray, q: np.ndarray) -> float | None:
    """Total variation distance of two count vectors (None when a table has no rows)."""
    if p.sum() == 0 or q.sum() == 0:
        return None
    return float(0.5 * np.abs(p / p.sum() - q / q.sum()).sum())


def fidelity_from_counts(
    real: PairCounts, synth: PairCounts, w1: dict[str, float | None]
) -> dict[str, Any]:
    """The figures from two tables' counts and the numeric columns' 1-D W1 (`column_w1`, or a
    streamed estimate). Keys: "summary" (worst and mean of each figure, with the worst column
    or pair's names), "column_errors" (per column: measure, error, and level shares by name
    for a level column), "pair_tvd" (every pair, worst first), "correlation" (labelled
    matrices and every numeric pair, worst first), "definitions"."""
    specs = real.specs
    columns = {}
    for j, spec in enumerate(specs):
        if spec.kind in LEVEL_KINDS:
            columns[spec.name] = _level_column(real.one[j], synth.one[j], spec)
        else:
            columns[spec.name] = {"measure": "w1", "error": w1.get(spec.name)}
        if j in real.cycles.counts:
            columns[spec.name]["cycles"] = _cycles(real.cycles.counts[j], synth.cycles.counts[j])
    pairs = []
    for a, b in real.pairs:
        value = tvd(real.two[a, b], synth.two[a, b])
        pairs.append({"columns": [specs[a].name, specs[b].name], "tvd": value})
    pairs.sort(key=lambda p: -math.inf if p["tvd"] is None else -p["tvd"])
    correlation = _correlation(real, synth)
    out = {
        "summary": _summary(columns, pairs, correlation),
        "column_errors": columns,
        "pair_tvd": {"bins_per_number": real.bins, "pairs": pairs},
        "correlation": correlation,
    }
    determined = determined_pairs(real, synth)
    if determined:
        out["determined_pairs"] = determined
    return {**out, "definitions": DEFINITIONS}


NEAR_DETERMINED = 0.95  # the real map holds in at least this share of the real rows


def determined_pairs(real: PairCounts, synth: PairCounts) -> list[dict[str, Any]]:
    """Pairs (a, b) of level columns where a nearly determines b in the real table: the real
    map (each level of a -> its most common b in the real table) holds in at least
    NEAR_DETERMINED of the real rows and explains at least 3/4 of the rows that b's most common
    level does not; for each, the share of real and of synthetic rows whose (a, b) agrees with
    the real map (NOT private: the map is read from the real rows)."""
    out = []
    levels = [j for j, s in enumerate(real.specs) if s.kind in LEVEL_KINDS]
    for a, b in combinations(levels, 2):
        shape = (real.sizes[a], real.sizes[b])
        r, y = real.two[a, b].reshape(shape), synth.two[a, b].reshape(shape)
        for x, z, (t, u) in ((a, b, (r, y)), (b, a, (r.T, y.T))):
            total = t.sum()
            if total == 0 or u.sum() == 0:
                continue
            law = np.argmax(t, axis=1)
            held = t[np.arange(t.shape[0]), law].sum() / total
            mode = t.sum(axis=0).max() / total
            if held < NEAR_DETERMINED or 1 - held > (1 - mode) / 4:
                continue
            kept = u[np.arange(u.shape[0]), law].sum() / u.sum()
            out.append(
                {
                    "columns": [real.specs[x].name, real.specs[z].name],
                    "real_agreement": float(held),
                    "synthetic_agreement": float(kept),
                }
            )
    return out


def _cycles(real: dict[str, np.ndarray], synth: dict[str, np.ndarray]) -> dict[str, Any]:
    """A date / datetime column's cycle TVDs, e.g. {"hour_of_day_tvd": 0.3, ...} (None when
    a table has no present value)."""
    return {f"{name}_tvd": tvd(real[name], synth[name]) for name in real}


def _level_column(p: np.ndarray, q: np.ndarray, spec: ColumnSpec) -> dict[str, Any]:
    names = bin_labels(spec)
    shares_p, shares_q = (c / max(c.sum(), 1) for c in (p, q))
    return {
        "measure": "tvd",
        "error": tvd(p, q),
        "levels": {
            n: {"real": float(a), "synthetic": float(b)}
            for n, a, b in zip(names, shares_p, shares_q, strict=True)
        },
    }


def _correlation(real: PairCounts, synth: PairCounts) -> dict[str, Any] | None:
    names = [real.specs[j].name for j in real.numeric]
    if len(names) < 2:
        return None
    r, s = real.correlation(), synth.correlation()
    diff = s - r
    pairs = [
        {
            "columns": [names[a], names[b]],
            "real": _num(r[a, b]),
            "synthetic": _num(s[a, b]),
            "error": _num(abs(diff[a, b])),
        }
        for a, b in combinations(range(len(names)), 2)
    ]
    pairs.sort(key=lambda p: -math.inf if p["error"] is None else -p["error"])
    finite = [p["error"] for p in pairs if p["error"] is not None]
    undefined = [p for p in pairs if p["error"] is None]
    constant = {
        side: [names[j] for j in range(len(names)) if t.high[j] <= t.low[j]]
        for side, t in (("real", real), ("synthetic", synth))
    }
    return {
        "columns": names,
        "real": _matrix(r),
        "synthetic": _matrix(s),
        "difference": _matrix(diff),
        "max_abs_difference": max(finite) if finite else None,
        "pairs": pairs,
        # pairs whose correlation is undefined in a table (a constant column there, or never
        # present together): no error, left out of the worst and the mean, listed last
        "undefined_pairs": len(undefined),
        "constant_columns": constant,
    }


def _summary(
    columns: dict[str, Any], pairs: list[dict[str, Any]], correlation: dict[str, Any] | None
) -> dict[str, Any]:
    """Worst (named) and mean of each figure; None where there is nothing to measure."""
    errors = {n: c["error"] for n, c in columns.items() if c["error"] is not None}
    worst = max(errors, key=errors.get) if errors else None
    pair_values = [p["tvd"] for p in pairs if p["tvd"] is not None]
    corr = [p for p in (correlation or {}).get("pairs", []) if p["error"] is not None]
    return {
        "column_error": {
            "worst": errors.get(worst),
            "column": worst,
            "mean": _mean(errors.values()),
        },
        "pair_tvd": {
            "worst": pair_values[0] if pair_values else None,
            "pair": pairs[0]["columns"] if pair_values else None,
            "mean": _mean(pair_values),
        },
        "correlation_error": {
            "worst": corr[0]["error"] if corr else None,
            "pair": corr[0]["columns"] if corr else None,
            "mean": _mean(p["error"] for p in corr),
        },
    }


def _mean(values: Any) -> float | None:
    values = list(values)
    return float(np.mean(values)) if values else None


def _matrix(m: np.ndarray) -> list[list[float | None]]:
    return [[_num(x) for x in row] for row in m]


def _num(x: float) -> float | None:
    return float(x) if np.isfinite(x) else None
