"""Quality of the DP bounds estimate: ``python -m benchmarks.bounds_quality [--reps N]``.

For every column and per-column epsilon, runs the bounds estimate ``--reps`` times (seeded: NOT
for release) and reports, for the estimator before 2026-11-23 (``before``: the thresholded noisy
histogram on the quarter-octave grid, copied below) and the current one
(``dpsynth_cli.mechanisms.bounds``):

* ``fail``: share of runs that found no bounds (DataError);
* ``width``: median over the successful runs of (upper - lower) / (max - min of the column);
* ``clamped``: mean over the successful runs of the share of rows outside [lower, upper];
  ``clamped p90`` its 90th percentile.

Integer columns get floor(lower) and ceil(upper), as ``synth`` does. Columns: the Palmer penguins
table (the 342 rows complete in the five numeric columns; ``pip install palmerpenguins``, else a
column drawn from its published summary; also at eps 0.5) and synthetic columns of n = 300, 3000,
30000 rows. Prints markdown, then the comparison: the failure rate where 15 <= n*eps <= 35 first
(where the old estimator sometimes works), then width and clamped share where both estimators
find bounds in most runs. Not a unit test (about 2 minutes at 300 runs per case).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable
from fractions import Fraction

import numpy as np

from dpsynth_cli.errors import DataError
from dpsynth_cli.mechanisms import bounds
from dpsynth_cli.privacy import noise
from dpsynth_cli.privacy.ledger import Ledger

EPSILONS = (0.01, 0.05, 0.1)
PENGUIN_EXTRA_EPSILONS = (0.5,)  # where the year column gets refined (eps x rows about 170)
SIZES = (300, 3000, 30000)
DATA_SEED = 20261124
PENGUIN_COLUMNS = ("bill_length_mm", "bill_depth_mm", "flipper_length_mm", "body_mass_g", "year")
PENGUIN_INTEGERS = {"flipper_length_mm", "body_mass_g", "year"}


# -- the estimator before 2026-11-23 (same grid, thresholds and rule as its code) -------------

OLD_FALSE_BIN_PROBABILITY = 0.01
OLD_EXTEND_PROBABILITY = 0.05


def _old_occupied_range(noisy: np.ndarray, core: int, extend: int) -> tuple[int, int] | None:
    above = np.flatnonzero(noisy > core)
    if above.size == 0:
        return None
    first, last = int(above[0]), int(above[-1])
    while first > 0 and noisy[first - 1] > extend:
        first -= 1
    while last < noisy.size - 1 and noisy[last + 1] > extend:
        last += 1
    return first, last


def old_estimate(
    values: np.ndarray, epsilon: Fraction, source: noise.RandomSource
) -> tuple[float, float] | None:
    edges = bounds.bin_edges()
    limit = 2.0**bounds.LARGEST_EXPONENT
    clipped = np.clip(values, -limit, limit)
    index = np.clip(np.searchsorted(edges, clipped, side="right") - 1, 0, edges.size - 2)
    counts = np.bincount(index, minlength=edges.size - 1)
    scale = noise.as_scale(Fraction(1) / epsilon)
    noisy = counts + noise.discrete_laplace(source, scale, counts.size)
    cut = bounds.threshold(scale, counts.size, OLD_FALSE_BIN_PROBABILITY)
    grow = bounds.threshold(scale, 1, OLD_EXTEND_PROBABILITY)
    span = _old_occupied_range(noisy, cut, grow)
    return (float(edges[span[0]]), float(edges[span[1] + 1])) if span else None


# -- columns ----------------------------------------------------------------------------------


def penguins() -> tuple[dict[str, np.ndarray], str]:
    """The five numeric penguin columns on their complete rows, and where they came from."""
    try:
        from palmerpenguins import load_penguins
    except ImportError:
        return _penguins_from_summary(), "drawn from the published summary (palmerpenguins absent)"
    df = load_penguins()[list(PENGUIN_COLUMNS)].dropna()
    return {c: df[c].to_numpy(dtype=float) for c in PENGUIN_COLUMNS}, "palmerpenguins 342 rows"


def _penguins_from_summary() -> dict[str, np.ndarray]:
    """Normal columns with the published means, sds and ranges (Horst et al. 2020), 342 rows."""
    rng = np.random.default_rng(DATA_SEED)
    spec = {  # mean, sd, min, max
        "bill_length_mm": (43.92, 5.46, 32.1, 59.6),
        "bill_depth_mm": (17.15, 1.97, 13.1, 21.5),
        "flipper_length_mm": (200.9, 14.06, 172, 231),
        "body_mass_g": (4201.8, 802.0, 2700, 6300),
    }
    out = {c: np.clip(rng.normal(m, s, 342), lo, hi) for c, (m, s, lo, hi) in spec.items()}
    out["flipper_length_mm"] = out["flipper_length_mm"].round()
    out["body_mass_g"] = (out["body_mass_g"] / 25).round() * 25
    out["year"] = rng.choice([2007.0, 2008.0, 2009.0], 342, p=[0.32, 0.35, 0.33])
    return out


SYNTHETIC: dict[str, tuple[Callable[[np.random.Generator, int], np.ndarray], bool]] = {
    "normal(100, 15)": (lambda g, n: g.normal(100, 15, n), False),
    "lognormal(8, 1)": (lambda g, n: g.lognormal(8, 1, n), False),
    "uniform(0, 1000)": (lambda g, n: g.uniform(0, 1000, n), False),
    "year 2007-2009": (lambda g, n: g.choice([2007.0, 2008.0, 2009.0], n), True),
}


def columns() -> tuple[list[tuple[str, int, bool, np.ndarray]], str]:
    out = []
    cols, origin = penguins()
    for name, v in cols.items():
        out.append((f"penguins {name}", v.size, name in PENGUIN_INTEGERS, v))
    for name, (draw, integer) in SYNTHETIC.items():
        for n in SIZES:
            v = draw(np.random.default_rng([DATA_SEED, n, len(name)]), n)
            out.append((name, n, integer, v))
    return out, origin


# -- measurement ------------------------------------------------------------------------------


def summarise(values: np.ndarray, lo: np.ndarray, hi: np.ndarray, integer: bool) -> dict:
    ok = ~np.isnan(lo)
    if integer:
        lo, hi = np.floor(lo), np.ceil(hi)
    out = {"fail": 1 - ok.mean(), "width": math.nan, "clamped": math.nan, "clamped_p90": math.nan}
    if ok.any():
        span = values.max() - values.min()
        s = np.sort(values)
        below = np.searchsorted(s, lo[ok], side="left")
        above = s.size - np.searchsorted(s, hi[ok], side="right")
        clamped = (below + above) / s.size
        out["width"] = float(np.median((hi[ok] - lo[ok]) / span))
        out["clamped"] = float(clamped.mean())
        out["clamped_p90"] = float(np.quantile(clamped, 0.9))
    return out


def measure_old(values: np.ndarray, eps: float, reps: int, seed: int) -> tuple:
    src = noise.RandomSource.seeded(seed).spawn("before")
    lo, hi = np.full(reps, np.nan), np.full(reps, np.nan)
    for i in range(reps):
        found = old_estimate(values, Fraction(eps), src)
        if found:
            lo[i], hi[i] = found
    return lo, hi


def measure_new(values: np.ndarray, eps: float, reps: int, seed: int) -> tuple:
    src = noise.RandomSource.seeded(seed).spawn("after")
    lo, hi, _ = bounds.release(values, Fraction(eps), "add-remove", src, copies=reps)
    return lo, hi


def check_estimate_bounds_agrees(values: np.ndarray) -> None:
    """The batched release and estimate_bounds are the same mechanism (one copy)."""
    a = bounds.release(values, Fraction(1, 10), "add-remove", noise.RandomSource.seeded(5))[:2]
    try:
        b = bounds.estimate_bounds(
            values, "x", Fraction(1, 10), noise.RandomSource.seeded(5), Ledger(Fraction(1))
        )
    except DataError:
        b = (math.nan, math.nan)
    assert np.allclose([a[0][0], a[1][0]], b, equal_nan=True)


def criterion(rows: list[tuple[float, dict, dict]]) -> str:
    """The comparison: failures where n*eps <= 35, then width and clamping where both work."""
    small = [(o["fail"], a["fail"]) for ne, o, a in rows if 15 <= ne <= 35]
    both = [(o, a) for _, o, a in rows if o["fail"] < 0.5 and a["fail"] < 0.5]
    worse = sum(a > o + 0.1 for o, a in small)
    better = sum(a < o - 0.1 for o, a in small)
    width = [(o["width"], a["width"]) for o, a in both]
    clamp = [(o["clamped"], a["clamped"]) for o, a in both]
    return (
        f"- failures, 15 <= n*eps <= 35 ({len(small)} cases): mean "
        f"{np.mean([o for o, _ in small]):.1%} before, {np.mean([a for _, a in small]):.1%} after; "
        f"{better} cases better and {worse} worse by more than 10 points\n"
        f"- where both find bounds in most runs ({len(both)} cases): median width "
        f"{np.median([o for o, _ in width]):.2f} before, {np.median([a for _, a in width]):.2f} "
        f"after; mean share of rows clamped {np.mean([o for o, _ in clamp]):.1%} before, "
        f"{np.mean([a for _, a in clamp]):.1%} after; narrower in "
        f"{sum(a < 0.9 * o for o, a in width)} cases, wider in "
        f"{sum(a > 1.1 * o for o, a in width)}"
    )


def fmt(x: float, pct: bool = False) -> str:
    if math.isnan(x):
        return "-"
    return f"{100 * x:.1f}%" if pct else f"{x:.2f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=200, help="runs per case (default 200)")
    args = ap.parse_args(argv)
    cols, origin = columns()
    check_estimate_bounds_agrees(cols[0][3])
    print(f"penguins: {origin}; {args.reps} runs per case; per-column epsilon\n")
    print(
        "| column | n | eps | n*eps | fail before | fail after | width before | width after "
        "| clamped before | clamped after | clamped p90 before | clamped p90 after |"
    )
    print("|" + " --- |" * 3 + " ---: |" * 9)
    start = time.perf_counter()
    rows = []
    for k, (name, n, integer, v) in enumerate(cols):
        extra = PENGUIN_EXTRA_EPSILONS if name.startswith("penguins") else ()
        for j, eps in enumerate(EPSILONS + extra):
            seed = DATA_SEED + 100 * k + j
            old = summarise(v, *measure_old(v, eps, args.reps, seed), integer)
            new = summarise(v, *measure_new(v, eps, args.reps, seed), integer)
            rows.append((n * eps, old, new))
            print(
                f"| {name} | {n} | {eps} | {n * eps:g} | {fmt(old['fail'], True)} "
                f"| {fmt(new['fail'], True)} | {fmt(old['width'])} | {fmt(new['width'])} "
                f"| {fmt(old['clamped'], True)} | {fmt(new['clamped'], True)} "
                f"| {fmt(old['clamped_p90'], True)} | {fmt(new['clamped_p90'], True)} |"
            )
    print()
    print(criterion(rows))
    print(f"\n({time.perf_counter() - start:.0f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
