"""The whole table's W1 for `evaluate` (NOT private): from every row, on uniform samples, or
skipped (`--joint-w1`).

The per-column and pair figures come from one pass of exact counts at the speed of reading;
the joint W1 is the one figure whose cost grows faster than the rows (a transport problem in d
dimensions). Tables that fit the uniform samples (`stats.SAMPLE_ROWS`) get it from every row,
as before (exact when affordable, else the certified bracket and the subsample estimate).
Larger ones, by mode:

- `sample` (the default): the tables' certified lower bound (the largest 1-D W1 lower bound of
  the columns' cube coordinates, from the pass's histograms: a bound for the whole tables) and
  the certified bracket of W1 between the two uniform samples (`sample`), an estimate of the
  tables' W1 (biased upward, as any W1 of samples), not a bound on it;
- `full`: the certified bracket for the whole tables (the upper bound from the dyadic cells the
  pass also collects: slower, more memory) and the subsample estimate with its floor;
- `skip`: only the free certified lower bound, and the report says the rest was skipped.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dpsynth_cli.domain import Domain
from dpsynth_cli.engine import threads
from dpsynth_cli.evaluate.stats import TableStats
from dpsynth_cli.evaluate.w1 import bracket_summary, w1_lower_bound, w1_summary, w1_upper_bound

MODES = ("sample", "full", "skip")
SAMPLE_NOTE = (
    "certified bracket of W1 between uniform samples of the two tables (rows: their sizes): "
    "an estimate of the tables' W1, biased upward like any W1 of samples, not a bound on it"
)
NOTES = {
    "all": "from every row of both tables (they fit the samples)",
    "sample": "lower: certified for the whole tables (from the columns' histograms); sample: "
    "the bracket on uniform samples (--joint-w1 full for a certified bracket of the whole "
    "tables, slower)",
    "full": "certified bracket for the whole tables (dyadic cells of every row) and a "
    "subsample estimate from the uniform samples",
    "none": "skipped (--joint-w1 skip): only the certified lower bound from the columns' "
    "histograms, which costs nothing more",
}


def table_lower(stats: list[TableStats], brackets: list[tuple[float, float]]) -> float:
    """The largest certified 1-D lower bound over the number columns' cube coordinates
    (`brackets`: each histogram column's, `w1_binned.w1_1d_bracket`): <= the W1 of the whole
    tables on the unit cube (a coordinate is 1-Lipschitz for L-infinity). Level columns are
    left out: their histograms are of codes, not of the cube's level slots (0 if only those)."""
    real = stats[0]
    return max(
        (brackets[k][0] / scale for j, (k, scale) in enumerate(real.cube) if j not in real.levels),
        default=0.0,
    )


def joint_w1(
    mode: str,
    stats: list[TableStats],
    brackets: list[tuple[float, float]],
    X: np.ndarray,
    Y: np.ndarray,
    domain: Domain,
    rng: np.random.Generator,
    subsample_size: int,
) -> dict[str, Any]:
    """The report's `w1_unit_cube`, `w1_mixed_metric` (tables with level or nullable columns)
    and `joint_w1` (what was computed, on which rows) for samples X, Y of the two tables; with
    `full`, the dyadic cells' `partition` for the report's `streamed` block."""
    complete = all(t.sample.complete for t in stats)
    rows = "none" if mode == "skip" else "all" if complete else mode
    size = stats[0].sample.size
    out: dict[str, Any] = {
        "joint_w1": {"mode": mode, "rows": rows, "sample_rows": size, "note": NOTES[rows]}
    }
    mixed = bool(domain.level_columns or domain.nullable_continuous)
    n, m, d = stats[0].n, stats[1].n, len(domain.columns)
    head = {"metric": "linf", "n": n, "m": m, "d": d}
    if rows == "none":
        out["w1_unit_cube"] = {
            **head,
            "skipped": True,
            "lower": table_lower(stats, brackets),
            "kinds": {"lower": "lower_bound"},
        }
        return out
    U, V = domain.to_unit(X), domain.to_unit(Y)
    if rows == "all":
        out["w1_unit_cube"] = w1_summary(U, V, rng=rng)
    elif rows == "full":
        real, synth = stats
        cells = real.cells.merge(synth.cells)
        tree, curve = cells.bounds()
        upper = min(tree, curve)
        if d == 1:  # |.| is L-inf: the column's own bracket holds too
            upper = min(upper, brackets[0][1] / real.cube[0][1])
        out["w1_unit_cube"] = bracket_summary(
            (n, m), (table_lower(stats, brackets), upper), U, V, rng, subsample_size=subsample_size
        )
        out["partition"] = {
            "depth": cells.depth,
            "occupied_cells": cells.size,
            "max_cells": cells.max_cells,
            "tree_bound": tree,
            "curve_bound": curve,
        }
    else:  # both metrics' brackets side by side on the cores (sorts release the GIL)
        pairs = [(U, V)] + ([(domain.to_mixed(X), domain.to_mixed(Y))] if mixed else [])
        cube, *other = threads.ordered_map(sample_bracket, pairs)
        out["w1_unit_cube"] = {**head, "lower": table_lower(stats, brackets), **cube}
        out["w1_unit_cube"]["kinds"] = {"lower": "lower_bound", "sample": "sample_bracket"}
        if other:
            kinds = {"sample": "sample_bracket"}
            out["w1_mixed_metric"] = {**head, **other[0], "kinds": kinds}
        return out
    if mixed:
        out["w1_mixed_metric"] = w1_summary(domain.to_mixed(X), domain.to_mixed(Y), rng=rng)
    return out


def sample_bracket(pair: tuple[np.ndarray, np.ndarray]) -> dict[str, Any]:
    """{"sample": the certified bracket of W1 between the samples (X, Y), their sizes}."""
    X, Y = pair
    return {
        "sample": {
            "kind": "sample_bracket",
            "rows": [int(X.shape[0]), int(Y.shape[0])],
            "lower": w1_lower_bound(X, Y),
            "upper": w1_upper_bound(X, Y),
            "note": SAMPLE_NOTE,
        }
    }
