"""Small wide tables (issue 23, item 3): `--dim auto` and `--dim full` against uniform noise on the
bounds, on sklearn's diabetes (442 x 11) and breast cancer (569 x 31) tables.

Both tables ship inside scikit-learn's wheel (no download). Each column is mapped onto [0, 1] by
PUBLIC bounds written below (never the data's min/max), values outside are clamped. Metrics in
that unit cube, against the real table: per-column W1 (mean and largest over the columns), the
correlation error (largest and mean absolute difference of the Pearson correlation matrices,
off the diagonal) and the joint W1 (exact, L-infinity). `uniform` is the same number of rows
drawn uniformly on the bounds' box.

    python -m benchmarks.small_wide [--eps 0.5,1,2] [--runs 5]   (needs scikit-learn)
    python -m benchmarks.small_wide grid   (the fallback rule's evidence; ~25 min on 2 cores)

`grid`: `--dim auto` with its projection forced (lowdim.CENTRE_NOISE_LIMIT lifted), `--dim full`
and uniform noise on the wide benchmark's synthetic tables (near2-d10, near2-d30, near3-d30,
indep-d10) at n = 500-20,000 and on the two real tables, eps 0.5, 1, 2, 3 seeds: exact W1
(L-infinity) on 1,500-row subsamples, the private centre's noise sd (`lowdim.centre_noise`, public)
and how many chosen directions the shared spectrum rule puts above the noise. Records go to
benchmarks/out/small_wide_grid.jsonl; the summary is one line per cell, by the centre's noise.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa

# Efron et al. (2004)'s variables (sklearn.datasets.load_diabetes(scaled=False)): clinical
# plausibility limits in round numbers. age in years (adults), sex coded 1/2, bmi kg/m^2, bp mean
# arterial pressure mmHg, s1 total cholesterol mg/dL, s2 LDL mg/dL, s3 HDL mg/dL, s4 total/HDL
# ratio, s5 log of serum triglycerides (e^3 = 20 to e^7 = 1100 mg/dL), s6 glucose mg/dL, target a
# one-year progression score (documented range 25-346: cap 400).
DIABETES = (
    ("age", 18, 100),
    ("sex", 1, 2),
    ("bmi", 10, 60),
    ("bp", 40, 160),
    ("s1", 50, 400),
    ("s2", 0, 300),
    ("s3", 0, 150),
    ("s4", 0, 12),
    ("s5", 3, 7),
    ("s6", 40, 200),
    ("target", 0, 400),
)
# Wisconsin diagnostic breast cancer (sklearn.datasets.load_breast_cancer): lengths, areas and
# ratios, all nonnegative (lower 0); upper = the next step of 1-2-5 above the maximum the
# dataset's documentation lists for the feature (a published range, rounded up); target 0/1.
_CANCER_UPPER = (
    (50, 50, 200, 5000, 0.2, 0.5, 0.5, 0.5, 0.5, 0.1),  # mean
    (5, 5, 50, 1000, 0.05, 0.2, 0.5, 0.1, 0.1, 0.05),  # error
    (50, 50, 500, 5000, 0.5, 2, 2, 0.5, 1, 0.5),  # worst
)
_CANCER_FEATURES = (
    "radius",
    "texture",
    "perimeter",
    "area",
    "smoothness",
    "compactness",
    "concavity",
    "concave points",
    "symmetry",
    "fractal dimension",
)
CANCER = (
    *(
        (f"mean {f}" if part == 0 else f"{f} error" if part == 1 else f"worst {f}", 0, upper)
        for part, uppers in enumerate(_CANCER_UPPER)
        for f, upper in zip(_CANCER_FEATURES, uppers, strict=True)
    ),
    ("target", 0, 1),
)


def load(name: str) -> tuple[np.ndarray, tuple]:
    """The table in the unit cube of its public bounds (clamped), and the bounds."""
    from sklearn import datasets

    if name == "diabetes":
        frame, bounds = datasets.load_diabetes(scaled=False, as_frame=True).frame, DIABETES
    else:
        frame, bounds = datasets.load_breast_cancer(as_frame=True).frame, CANCER
    X = np.column_stack([(frame[c].to_numpy(float) - lo) / (hi - lo) for c, lo, hi in bounds])
    return np.clip(X, 0.0, 1.0), bounds


def synth(X: np.ndarray, eps: float, dim: str, seed: int) -> tuple[np.ndarray, dict]:
    """`dpsynth synth --eps EPS --dim DIM` with bounds [0, 1] on the unit-cube table."""
    from dpsynth_cli.domain import ColumnSpec
    from dpsynth_cli.privacy.noise import RandomSource
    from dpsynth_cli.synth import SynthOptions, synthesize

    names = [f"x{j}" for j in range(X.shape[1])]
    table = pa.table({n: X[:, j] for j, n in enumerate(names)})
    specs = [ColumnSpec(n, "float", 0.0, 1.0) for n in names]
    res = synthesize(table, specs, SynthOptions(epsilon=eps, dim=dim), RandomSource.seeded(seed))
    desc = res.run.description or {}
    info = {
        "mechanism": desc.get("name"),
        "dim": desc.get("dim"),
        "fallback": (desc.get("fallback") or {}).get("reason"),
        "notices": len(res.notices),
        "little_signal": res.signal.get("little_signal"),
    }
    Y = np.column_stack([res.table.column(n).to_numpy(zero_copy_only=False) for n in names])
    return np.asarray(Y, dtype=np.float64), info


def metrics(X: np.ndarray, Y: np.ndarray) -> dict[str, float]:
    from scipy.stats import wasserstein_distance

    from dpsynth_cli.evaluate.w1 import w1_exact

    cols = [wasserstein_distance(X[:, j], Y[:, j]) for j in range(X.shape[1])]
    off = ~np.eye(X.shape[1], dtype=bool)
    with np.errstate(invalid="ignore", divide="ignore"):
        cy = np.nan_to_num(np.corrcoef(Y.T))  # a constant synthetic column: correlation 0
    gap = np.abs(np.corrcoef(X.T) - cy)[off]
    return {
        "col_w1_mean": float(np.mean(cols)),
        "col_w1_max": float(np.max(cols)),
        "corr_max": float(gap.max()),
        "corr_mean": float(gap.mean()),
        "joint_w1": float(w1_exact(X, Y, max_pairs=X.shape[0] * Y.shape[0])),
    }


GRID_OUT = Path("benchmarks/out/small_wide_grid.jsonl")
GRID_TABLES = ("near2-d10", "near2-d30", "near3-d30", "indep-d10")
GRID_N = (500, 1000, 2000, 5000, 10000, 20000)
GRID_SUBSAMPLE = 1500


def _grid_cell(name: str, X: np.ndarray, eps: float, seed: int) -> dict:
    from benchmarks.accuracy.wide import run_ours
    from dpsynth_cli.evaluate.w1 import w1_exact
    from dpsynth_cli.mechanisms import lowdim

    rec: dict = {"table": name, "n": X.shape[0], "d": X.shape[1], "eps": eps, "seed": seed}
    rng = np.random.default_rng(seed)
    limit = lowdim.CENTRE_NOISE_LIMIT
    for method in ("projected", "full", "uniform"):
        det: dict = {}
        if method == "uniform":
            Y = np.random.default_rng(50 + seed).random(X.shape)
        else:
            lowdim.CENTRE_NOISE_LIMIT = math.inf if method == "projected" else limit
            try:
                Y = run_ours(X, eps, 100 + seed, "auto" if method == "projected" else "full", det)
            finally:
                lowdim.CENTRE_NOISE_LIMIT = limit
        m = min(GRID_SUBSAMPLE, X.shape[0], Y.shape[0])
        a, b = X[rng.choice(X.shape[0], m, False)], Y[rng.choice(Y.shape[0], m, False)]
        rec[method] = {"w1": w1_exact(a, b), **det}
    nh = rec["projected"]["noisy_rows"]
    rec["centre_noise_sd"] = lowdim.centre_noise(X.shape[1], _mechanism_eps(eps), nh, "add-remove")
    spec = rec["projected"].get("noisy_spectrum", [])[: rec["projected"].get("k", 0)]
    rec["above_noise"] = int(sum(v > rec["projected"].get("noise_norm", math.inf) for v in spec))
    return rec


def _mechanism_eps(eps: float):
    from dpsynth_cli.synth import SynthOptions, plan_budget

    return plan_budget(SynthOptions(epsilon=eps), []).mechanism


def grid() -> None:
    """Run the cells not yet in GRID_OUT, then print the summary."""
    from benchmarks.accuracy import wide_tables
    from benchmarks.accuracy.tables import SEED, _truncated

    GRID_OUT.parent.mkdir(parents=True, exist_ok=True)
    done = set()
    if GRID_OUT.exists():
        for line in GRID_OUT.read_text().splitlines():
            r = json.loads(line)
            done.add((r["table"], r["n"], r["eps"], r["seed"]))
    tables: list[tuple[str, np.ndarray]] = []
    try:
        tables += [(name, load(name)[0]) for name in ("diabetes", "cancer")]
    except ImportError:
        print("scikit-learn not installed: the real tables are left out", file=sys.stderr)
    for name in GRID_TABLES:
        tables += [
            (name, _truncated(wide_tables.SYNTHETIC[name], n, SEED + 7 * n + 30)) for n in GRID_N
        ]
    with GRID_OUT.open("a") as fh:
        for name, X in tables:
            for eps in (0.5, 1.0, 2.0):
                for seed in range(3):
                    if (name, X.shape[0], eps, seed) in done:
                        continue
                    fh.write(json.dumps(_grid_cell(name, X, eps, seed)) + "\n")
                    fh.flush()
    cells: dict[tuple, list[dict]] = {}
    for line in GRID_OUT.read_text().splitlines():
        r = json.loads(line)
        cells.setdefault((r["table"], r["n"], r["eps"]), []).append(r)
    print(
        "| centre noise sd | table | n | eps | projected / full | projected | full | uniform "
        "| directions above the noise |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for (name, n, eps), rs in sorted(cells.items(), key=lambda c: c[1][0]["centre_noise_sd"]):
        p, f, u = (np.mean([r[k]["w1"] for r in rs]) for k in ("projected", "full", "uniform"))
        above = ", ".join(f"{r['above_noise']}/{r['projected'].get('k')}" for r in rs)
        print(
            f"| {rs[0]['centre_noise_sd']:.3f} | {name} | {n} | {eps:g} | {p / f:.2f} | "
            f"{p:.3f} | {f:.3f} | {u:.3f} | {above} |"
        )


def main(argv: list[str] | None = None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    if argv[:1] == ["grid"]:
        grid()
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--eps", default="0.5,1,2")
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args(argv)
    keys = ("col_w1_mean", "col_w1_max", "corr_max", "corr_mean", "joint_w1")
    print("| table | eps | method | " + " | ".join(keys) + " | runs: mechanism, d', fallback |")
    print("|---" * (len(keys) + 4) + "|")
    for name in ("diabetes", "cancer"):
        X, _ = load(name)
        for eps in (float(e) for e in args.eps.split(",")):
            for method in ("dim-auto", "dim-full", "uniform"):
                rows, seen, t0 = [], Counter(), time.perf_counter()
                for run in range(args.runs):
                    if method == "uniform":
                        Y = np.random.default_rng(run).random(X.shape)
                    else:
                        Y, info = synth(X, eps, method.removeprefix("dim-"), 1000 + run)
                        seen[(info["mechanism"], info["dim"], info["fallback"])] += 1
                    rows.append(metrics(X, Y))
                means = [np.mean([r[k] for r in rows]) for k in keys]
                what = "; ".join(
                    f"{c}x {m} d'={d} {f or ''}".strip() for (m, d, f), c in seen.items()
                )
                print(
                    f"| {name} {X.shape[0]}x{X.shape[1]} | {eps:g} | {method} | "
                    + " | ".join(f"{v:.3f}" for v in means)
                    + f" | {what} ({time.perf_counter() - t0:.0f} s) |",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
