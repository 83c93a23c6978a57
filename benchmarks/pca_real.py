"""pca on real tables with public bounds (issue 13): every method's captured-variance
ratio (Definition 1 of the k-DP-PCA paper: tr(U S U^T) over the sum of S's top-k eigenvalues,
S the table's covariance in unit-cube coordinates, i.e. against non-private PCA), k = 2 and 3,
eps in {0.5, 1, 2}; Gaussian methods at delta = 1e-6, laplace-cov at delta = 0.

Tables: the real wide tables of `make bench-dim` (benchmarks/accuracy/wide_tables.py: diamonds
from plotnine, randhie from statsmodels), so run it in the benchmark environment:
`.venv-bench/bin/python -m benchmarks.pca_real [trials]`. Prints a Markdown table.
"""

from __future__ import annotations

import sys
import time

import numpy as np

from benchmarks.accuracy import wide_tables
from dpsynth_cli import pca
from dpsynth_cli.privacy import noise

TABLES = tuple(wide_tables.REAL)
EPS = (0.5, 1.0, 2.0)
KS = (2, 3)
DELTA = 1e-6


def captured(U: np.ndarray, S: np.ndarray, k: int) -> float:
    return float(np.trace(U @ S @ U.T) / np.linalg.eigvalsh(S)[::-1][:k].sum())


def main() -> None:
    trials = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    methods = [m for m in pca.METHODS if m != "auto"]
    print(f"{trials} trials per cell; mean (min) captured-variance ratio; seconds per run\n")
    print("| table | n | k | eps | " + " | ".join(methods) + " |")
    print("|---|---:|---:|---:|" + "---:|" * len(methods))
    for name in TABLES:
        X = wide_tables.load(name).X
        S = np.cov(X, rowvar=False)
        for k in KS:
            for eps in EPS:
                cells = []
                for method in methods:
                    delta = 0.0 if method == "laplace-cov" else DELTA
                    ratios, secs = [], []
                    for t in range(trials):
                        t0 = time.perf_counter()
                        res = pca.run_pca(
                            X,
                            k=k,
                            method=method,
                            epsilon=eps,
                            delta=delta,
                            relation="add-remove",
                            source=noise.RandomSource.seeded(100 * t + k),
                        )
                        secs.append(time.perf_counter() - t0)
                        ratios.append(captured(res.components, S, k))
                    r = np.array(ratios)
                    cells.append(f"{r.mean():.3f} ({r.min():.3f}), {np.mean(secs):.2f} s")
                print(f"| {name} | {X.shape[0]} | {k} | {eps:g} | " + " | ".join(cells) + " |")
                sys.stdout.flush()


if __name__ == "__main__":
    main()
