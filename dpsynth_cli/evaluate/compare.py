"""Utility of synthetic data against the real table: W1 and per-column statistics.

This reads the owner's raw data and releases nothing: its output is NOT differentially private,
and every report it makes says so. Both tables are mapped to [0,1]^d with the same public bounds,
so the cube W1 is in the metric of the theorems (L-infinity on the unit cube). Tables are read
in passes over record batches (as synth reads them), so memory does not grow with their rows.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from dpsynth_cli.domain import CONTINUOUS, ColumnSpec, Domain, column_values, schema_column
from dpsynth_cli.engine import threads
from dpsynth_cli.engine.rows import Rows
from dpsynth_cli.engine.values import TableData, value_rows
from dpsynth_cli.errors import DataError, UsageError
from dpsynth_cli.evaluate.categorical import LEVEL_KINDS
from dpsynth_cli.evaluate.fidelity import column_w1, fidelity_from_counts, unit_interval
from dpsynth_cli.evaluate.joint import MODES, joint_w1
from dpsynth_cli.evaluate.stats import TableStats, default_sample_rows, own_missing
from dpsynth_cli.evaluate.w1 import w1_1d, w1_summary
from dpsynth_cli.evaluate.w1_binned import binned_quantiles, default_max_bins, w1_1d_bracket
from dpsynth_cli.privacy.noise import analysis_generator

SCHEMA = "dpsynth.evaluate-report/1"
WARNING = "computed from the raw data: NOT differentially private; do not release"
QUANTILES = (0.05, 0.25, 0.5, 0.75, 0.95)
METRIC = "1-Wasserstein, L-infinity distance on [0,1]^d after the public bounds"
SUBSAMPLE_SIZE = 2000  # rows per subsample of the W1 estimate (w1_summary's default)
STREAMED_NOTE = (
    "more rows than the samples hold: the joint W1 as joint_w1 says (on uniform samples of "
    "sample_rows rows by default); per-column w1 is the midpoint of its certified w1_bounds "
    "(as for every table), quantiles are exact at a histogram bin's smallest or largest value "
    "and otherwise within one bin ((upper - lower) / 2**depth, histogram_depths) of the exact "
    "ones; level shares, 2-way TVDs, means, standard deviations and correlations are exact "
    "(counts and sums on public grids); a nullable float or datetime column's 1-D figures come "
    "from the uniform samples"
)


def specs_from_report(path: str) -> list[ColumnSpec]:
    """Columns and bounds exactly as a synth run used them (its report's `domain` block)."""
    try:
        domain = json.loads(Path(path).read_text(encoding="utf-8"))["domain"]
        # the report's domain entries are schema entries (levels, ISO bounds, ...) with bounds
        specs = [replace(schema_column(path, n, c), source="report") for n, c in domain.items()]
    except FileNotFoundError:
        raise UsageError(f"--from-report {path}: file not found") from None
    except (OSError, ValueError, KeyError, TypeError, AttributeError, UsageError):
        raise UsageError(f"--from-report {path}: not a dpsynth synth report") from None
    if not all(s.has_bounds for s in specs):
        raise UsageError(f"--from-report {path}: not a dpsynth synth report")
    return specs


def columns_with_numbers(data: TableData) -> list[str]:
    """The columns of a text (CSV) table in which some cell is a number (one pass, reads
    values)."""
    names: list[str] = []
    found: set[str] = set()
    for batch in _batches(data):
        names = names or batch.schema.names
        for c in names:
            if c not in found and np.isfinite(column_values(batch.column(c))).any():
                found.add(c)
    if not found:
        raise DataError("no column of the real table holds numbers: choose columns with --columns")
    return [c for c in names if c in found]


def fill_bounds_from_data(specs: list[ColumnSpec], *tables: TableData) -> list[ColumnSpec]:
    """Columns without declared bounds get the min and max of both tables (evaluate only; one
    pass over each table when some column needs them)."""
    missing = [s.name for s in specs if not s.has_bounds]
    if not missing:
        return specs
    low = dict.fromkeys(missing, np.inf)
    high = dict.fromkeys(missing, -np.inf)
    for data in tables:
        for batch in _batches(data):
            for name in missing:
                values = column_values(batch.column(name))
                values = values[np.isfinite(values)]
                if values.size:
                    low[name] = min(low[name], float(values.min()))
                    high[name] = max(high[name], float(values.max()))
    filled = []
    for spec in specs:
        if not spec.has_bounds:
            lo, hi = low[spec.name], high[spec.name]
            if lo > hi:
                raise DataError(f"column '{spec.name}' has no finite values")
            spec = replace(spec, lower=lo, upper=hi if hi > lo else lo + 1, source="data")
        filled.append(spec)
    return filled


def per_column(real: np.ndarray, synth: np.ndarray, specs: list[ColumnSpec]) -> dict[str, Any]:
    """1-D W1, mean, standard deviation and quantiles of each column, in original units, values
    clamped onto the bounds; for a nullable float or datetime column, of its present values,
    with each table's share of missing ones."""
    out = {}
    for spec, r, s in zip(specs, real.T, synth.T, strict=True):
        extra = {}
        if spec.nullable and spec.kind in CONTINUOUS:
            r_miss, s_miss = r > spec.upper, s > spec.upper
            extra = {"missing": _pair(r_miss.mean(), s_miss.mean())}
            r, s = r[~r_miss], s[~s_miss]
        if spec.has_bounds:
            r, s = np.clip(r, spec.lower, spec.upper), np.clip(s, spec.lower, spec.upper)
        if r.size == 0 or s.size == 0:  # every value missing in a table
            nan = (math.nan, math.nan)
            out[spec.name] = {"w1": None, "mean": _pair(*nan), "std": _pair(*nan), **extra}
            continue
        figures = _column(
            w1_1d(r, s),
            (r.mean(), s.mean()),
            (r.std(), s.std()),
            (np.quantile(r, QUANTILES), np.quantile(s, QUANTILES)),
        )
        out[spec.name] = {**figures, **extra}
    return _floats(out)


def _column(
    w1: float,
    mean: tuple[float, float],
    std: tuple[float, float],
    quantiles: tuple[np.ndarray, np.ndarray],
) -> dict[str, Any]:
    """One column's figures (real, synthetic and their difference, synthetic minus real)."""
    return {
        "w1": w1,
        "mean": _pair(*mean),
        "std": _pair(*std),
        "quantiles": {
            f"q{round(q * 100):02d}": _pair(a, b)
            for q, a, b in zip(QUANTILES, *quantiles, strict=True)
        },
    }


def _pair(real: float, synth: float) -> dict[str, float]:
    return {"real": real, "synthetic": synth, "difference": synth - real}


@dataclass(frozen=True)
class Limits:
    """Sizes of the streamed statistics (None: the defaults, see `stats`, `w1_binned` and
    `w1_cells`); tests make them small to exercise the streamed figures on small tables."""

    sample_rows: int | None = None
    max_cells: int | None = None
    max_bins: int | None = None


@dataclass(frozen=True)
class Evaluation:
    """The report, and the rows held (all of them, or uniform samples: `sampled`) for plots."""

    report: dict[str, Any]
    real: np.ndarray
    synthetic: np.ndarray
    sampled: bool


def evaluate(
    real: TableData | Rows,
    synth: TableData | Rows,
    specs: list[ColumnSpec],
    seed: int | None = None,
    limits: Limits = Limits(),
    joint: str = "sample",
) -> Evaluation:
    """The full comparison, labelled as not differentially private, from one pass over each
    table (memory: a batch and bounded statistics, see `stats.TableStats`). A table is read
    from its data, or given as its value rows (`Rows`, e.g. held by Dask workers:
    `engine.dask.dask_rows(...).map(complete_rows, d)`); the passes run where the rows are (the
    machine's cores, or the workers) with the same figures.

    Level shares, 2-way TVDs and correlations are exact counts and sums; a numeric column's
    W1 is the middle of its certified bracket (exact when its histogram bins hold one distinct
    value each: tables within `max_bins` rows, columns with few distinct values), its
    quantiles exact or within a bin; the joint W1 as `joint` says (`joint.MODES`).
    """
    real, synth = (t if isinstance(t, Rows) else value_rows(t, specs) for t in (real, synth))
    if joint not in MODES:
        raise UsageError(f"--joint-w1 must be one of {', '.join(MODES)}")
    d = len(specs)
    rng = analysis_generator(seed)
    # the sample's hash key from a stream of its own: rng's draws stay those of before
    key = int(rng.spawn(1)[0].integers(0, 1 << 62))
    size = limits.sample_rows or default_sample_rows(d, 2 * SUBSAMPLE_SIZE)
    columns = d + sum(s.kind == "integer" for s in specs)  # histograms: see TableStats
    max_bins = limits.max_bins or default_max_bins(columns)
    make = partial(TableStats, specs, seed=key, sample_rows=size, max_bins=max_bins)
    stats = [
        rows.collect(partial(make, side, max_cells=limits.max_cells, cells=joint == "full"))
        for side, rows in enumerate((real, synth))
    ]
    for name, table in zip(("real", "synthetic"), stats, strict=True):
        if table.n == 0:
            raise DataError(f"the {name} table has no complete rows in the chosen columns")
    X, Y = (table.sample.sample() for table in stats)
    complete = all(table.sample.complete for table in stats)
    domain = Domain(tuple(specs))
    report = {
        "schema": SCHEMA,
        "NOT_DIFFERENTIALLY_PRIVATE": True,
        "warning": WARNING,
        "columns": {s.name: s.to_json() for s in specs},
        "rows": {"real": stats[0].n, "synthetic": stats[1].n},
    }
    real_stats, synth_stats = stats
    columns = range(len(real_stats.hist.columns))  # each 1-D bracket once, on the cores
    bracket = partial(w1_1d_bracket, real_stats.hist, synth_stats.hist)
    brackets = list(threads.ordered_map(bracket, columns))
    whole = joint_w1(joint, stats, brackets, X, Y, domain, rng, SUBSAMPLE_SIZE)
    partition = whole.pop("partition", None)
    report["w1_unit_cube"] = whole.pop("w1_unit_cube")
    report.update({"metric": METRIC, "mixed_metric": domain.metric(), **whole})
    report["per_column"] = _per_column(stats, brackets, X, Y, specs)
    if not complete:
        report["streamed"] = _streamed(stats, specs, partition)
    w1 = _column_w1s(brackets, X, Y, specs)
    figures = fidelity_from_counts(real_stats.pairs, synth_stats.pairs, w1)
    report["per_column"] = _with_levels(report["per_column"], figures["column_errors"])
    report.update(figures)
    return Evaluation(report, X, Y, not complete)


def _mixed_w1(
    domain: Domain, X: np.ndarray, Y: np.ndarray, rng: np.random.Generator
) -> dict[str, Any]:
    """The joint W1 in the mixed metric (levels, and missing against a value, at distance 1)
    where it differs from the unit cube's: tables with boolean, category or nullable float /
    datetime columns, on the rows X, Y."""
    if not (domain.level_columns or domain.nullable_continuous):
        return {}
    return {"w1_mixed_metric": w1_summary(domain.to_mixed(X), domain.to_mixed(Y), rng=rng)}


def _per_column(
    stats: list[TableStats],
    brackets: list[tuple[float, float]],
    X: np.ndarray,
    Y: np.ndarray,
    specs: list[ColumnSpec],
) -> dict[str, Any]:
    """Each number's W1 (the middle of its certified bracket, `w1_bounds`), mean, standard
    deviation and quantiles from the statistics; a nullable float or datetime column's from
    the samples X, Y (the whole tables when they fit); level columns get theirs later
    (`_with_levels`)."""
    real, synth = stats
    columns: dict[str, Any] = {}
    for j, spec in enumerate(specs):
        if spec.kind in LEVEL_KINDS:
            columns[spec.name] = {}
        elif own_missing(spec):
            columns.update(per_column(X[:, [j]], Y[:, [j]], [spec]))
        else:
            low, high = brackets[j]
            (mean_r, std_r), (mean_s, std_s) = real.mean_std(j), synth.mean_std(j)
            quantiles = (
                binned_quantiles(real.hist, j, QUANTILES),
                binned_quantiles(synth.hist, j, QUANTILES),
            )
            figures = _column((low + high) / 2, (mean_r, mean_s), (std_r, std_s), quantiles)
            columns[spec.name] = _floats({**figures, "w1_bounds": {"lower": low, "upper": high}})
    return columns


def _streamed(
    stats: list[TableStats], specs: list[ColumnSpec], partition: dict[str, Any] | None
) -> dict[str, Any]:
    """What the figures of tables larger than the samples rest on (the report's `streamed`)."""
    real, synth = stats
    out = {
        "note": STREAMED_NOTE,
        "sample_rows": real.sample.size,
        "histogram_max_bins": real.hist.max_bins,
        "histogram_depths": {
            spec.name: {
                "real": real.hist.columns[j].depth,
                "synthetic": synth.hist.columns[j].depth,
            }
            for j, spec in enumerate(specs)
        },
    }
    return out | ({"partition": partition} if partition else {})


def _batches(data: TableData) -> Iterable[pa.Table | pa.RecordBatch]:
    return [data] if isinstance(data, pa.Table) else data()


def _with_levels(columns: dict[str, Any], errors: dict[str, Any]) -> dict[str, Any]:
    """Boolean / category columns: their TVD and level shares by name, in place of statistics
    of their codes (a level's code is no number); the others as they are, a date or datetime
    column's with its calendar cycles' TVDs (`cycles`)."""
    return {
        name: {"tvd": errors[name]["error"], "levels": errors[name]["levels"]}
        if errors[name]["measure"] == "tvd"
        else c | ({"cycles": errors[name]["cycles"]} if "cycles" in errors[name] else {})
        for name, c in columns.items()
    }


def _numeric(specs: list[ColumnSpec]) -> list[tuple[int, ColumnSpec]]:
    return [(j, s) for j, s in enumerate(specs) if s.kind not in LEVEL_KINDS]


def _column_w1s(
    brackets: list[tuple[float, float]], X: np.ndarray, Y: np.ndarray, specs: list[ColumnSpec]
) -> dict[str, float | None]:
    """Each numeric column's 1-D W1 on the 0-1 scale from the streamed statistics: the middle of
    its certified bracket over the width of the 0-1 scale; a nullable column's (missing at
    distance 1, which the histograms of clamped values do not keep apart) from the uniform
    samples X, Y."""
    out = {}
    for j, spec in _numeric(specs):
        if spec.nullable:
            out[spec.name] = column_w1(X[:, j], Y[:, j], spec)
        else:
            low, high = brackets[j]
            lo, hi = unit_interval(spec)
            out[spec.name] = float((low + high) / 2 / (hi - lo))
    return out


def _num(x: float) -> float | None:
    return float(x) if np.isfinite(x) else None


def _floats(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _floats(v) for k, v in obj.items()}
    return _num(obj) if isinstance(obj, float | np.floating) else obj
