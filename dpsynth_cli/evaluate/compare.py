"""Utility of synthetic data against the real table: W1 and per-column statistics.

This reads the owner's raw data and releases nothing: its output is NOT differentially private,
and every report it makes says so. Both tables are mapped to [0,1]^d with the same public bounds,
so the cube W1 is in the metric of the theorems (L-infinity on the unit cube).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from dpsynth_cli.domain import ColumnSpec, Domain, column_values, schema_column, value_matrix
from dpsynth_cli.errors import DataError, UsageError
from dpsynth_cli.evaluate.categorical import categorical_columns
from dpsynth_cli.evaluate.w1 import w1_1d, w1_summary
from dpsynth_cli.privacy.noise import analysis_generator

SCHEMA = "dpsynth.evaluate-report/1"
WARNING = "computed from the raw data: NOT differentially private; do not release"
QUANTILES = (0.05, 0.25, 0.5, 0.75, 0.95)


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


def columns_with_numbers(table: pa.Table) -> list[str]:
    """The columns of a text (CSV) table in which some cell is a number (reads values)."""
    names = [c for c in table.column_names if np.isfinite(column_values(table.column(c))).any()]
    if not names:
        raise DataError("no column of the real table holds numbers: choose columns with --columns")
    return names


def fill_bounds_from_data(specs: list[ColumnSpec], *tables: pa.Table) -> list[ColumnSpec]:
    """Columns without declared bounds get the min and max of both tables (evaluate only)."""
    filled = []
    for spec in specs:
        if not spec.has_bounds:
            values = np.concatenate([value_matrix(t, [spec])[:, 0] for t in tables])
            values = values[np.isfinite(values)]
            if values.size == 0:
                raise DataError(f"column '{spec.name}' has no finite values")
            lo, hi = float(values.min()), float(values.max())
            spec = replace(spec, lower=lo, upper=hi if hi > lo else lo + 1, source="data")
        filled.append(spec)
    return filled


def per_column(real: np.ndarray, synth: np.ndarray, specs: list[ColumnSpec]) -> dict[str, Any]:
    """1-D W1, mean, standard deviation and quantiles of each column, in original units."""
    out = {}
    for j, spec in enumerate(specs):
        r, s = real[:, j], synth[:, j]
        qr, qs = np.quantile(r, QUANTILES), np.quantile(s, QUANTILES)
        out[spec.name] = {
            "w1": w1_1d(r, s),
            "mean": {"real": r.mean(), "synthetic": s.mean(), "difference": s.mean() - r.mean()},
            "std": {"real": r.std(), "synthetic": s.std(), "difference": s.std() - r.std()},
            "quantiles": {
                f"q{round(q * 100):02d}": {"real": a, "synthetic": b, "difference": b - a}
                for q, a, b in zip(QUANTILES, qr, qs, strict=True)
            },
        }
    return _floats(out)


def correlation_gap(real: np.ndarray, synth: np.ndarray) -> dict[str, Any] | None:
    """Difference of the Pearson correlation matrices (synthetic minus real)."""
    if real.shape[1] < 2:
        return None
    with np.errstate(invalid="ignore", divide="ignore"):
        diff = np.corrcoef(synth, rowvar=False) - np.corrcoef(real, rowvar=False)
    finite = diff[np.isfinite(diff)]
    return {
        "difference": [[_num(x) for x in row] for row in diff],
        "max_abs_difference": _num(np.abs(finite).max()) if finite.size else None,
    }


def evaluate(
    real: pa.Table, synth: pa.Table, specs: list[ColumnSpec], seed: int | None = None
) -> dict[str, Any]:
    """The full comparison as a JSON-ready dict, labelled as not differentially private."""
    domain = Domain(tuple(specs))
    X, Y = value_matrix(real, specs), value_matrix(synth, specs)
    for name, values in (("real", X), ("synthetic", Y)):
        if values.shape[0] == 0:
            raise DataError(f"the {name} table has no complete rows in the chosen columns")
    # Clamp onto the bounds in original units too, so per-column figures match the cube.
    lo, hi = [s.lower for s in specs], [s.upper for s in specs]
    Xc, Yc = np.clip(X, lo, hi), np.clip(Y, lo, hi)
    rng = analysis_generator(seed)
    return {
        "schema": SCHEMA,
        "NOT_DIFFERENTIALLY_PRIVATE": True,
        "warning": WARNING,
        "columns": {s.name: s.to_json() for s in specs},
        "rows": {"real": int(X.shape[0]), "synthetic": int(Y.shape[0])},
        "w1_unit_cube": w1_summary(domain.to_unit(X), domain.to_unit(Y), rng=rng),
        "metric": "1-Wasserstein, L-infinity distance on [0,1]^d after the public bounds",
        "mixed_metric": domain.metric(),
        "per_column": _with_levels(per_column(Xc, Yc, specs), categorical_columns(X, Y, specs)),
        "correlation": correlation_gap(X, Y),
    }


def _with_levels(numeric: dict[str, Any], levels: dict[str, Any]) -> dict[str, Any]:
    """Boolean / category columns get their TVD and level shares next to the code statistics
    (W1, mean, quantiles of the level codes: the mixed metric's view of the column)."""
    return {name: {**c, **levels.get(name, {})} for name, c in numeric.items()}


def _num(x: float) -> float | None:
    return float(x) if np.isfinite(x) else None


def _floats(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _floats(v) for k, v in obj.items()}
    return _num(obj) if isinstance(obj, float | np.floating) else obj
