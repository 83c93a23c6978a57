"""Small wide tables (issue 23, item 3): `--dim auto` and `--dim full` against uniform noise on the
bounds, on sklearn's diabetes (442 x 11) and breast cancer (569 x 31) tables.

Both tables ship inside scikit-learn's wheel (no download). Each column is mapped onto [0, 1] by
PUBLIC bounds written below (never the data's min/max), values outside are clamped. Metrics in
that unit cube, against the real table: per-column W1 (mean and largest over the columns), the
correlation error (largest and mean absolute difference of the Pearson correlation matrices,
off the diagonal) and the joint W1 (exact, L-infinity). `uniform` is the same number of rows
drawn uniformly on the bounds' box.

    python -m benchmarks.small_wide [--eps 0.5,1,2] [--runs 5]   (needs scikit-learn)
"""

from __future__ import annotations

import argparse
import time
from collections import Counter

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


def main(argv: list[str] | None = None) -> int:
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
