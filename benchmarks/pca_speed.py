"""make bench (pca): wall time of run_pca per method on rows in [0,1]^d near a 3-d subspace
(k = 2, eps = 1, delta = 1e-6 for the Gaussian methods), against issue 13's targets.

One untimed warm-up call on a tiny table first, so one-time imports (scipy.optimize for the zCDP
conversion, about 0.5-2 s) are not charged to the first method; then one timed call per method.
Prints the load average before and after: the machine is shared, timings are inflated under load.
BLAS threads: on a loaded 2-core machine OpenBLAS's threads spin against other jobs (the sum of
outer products took 4-8 s with 2 threads and 0.5 s with one); set OPENBLAS_NUM_THREADS=1 there.
Usage: python -m benchmarks.pca_speed [n] [d ...]"""

from __future__ import annotations

import os
import sys
import time

import numpy as np

from dpsynth_cli.pca import run_pca
from dpsynth_cli.privacy import noise

METHODS = (
    ("laplace-cov", 0.0),
    ("dp-gauss-1", 1e-6),
    ("dp-gauss-2", 1e-6),
    ("dp-power", 1e-6),
    ("k-dp-ojas", 1e-6),
    ("k-dp-pca", 1e-6),
)


def target(method: str, d: int) -> float:
    if d > 200:
        return 60.0
    return 1.0 if method in ("laplace-cov", "dp-gauss-1") else 10.0


def timed(X: np.ndarray, method: str, delta: float) -> float:
    t0 = time.perf_counter()
    run_pca(
        X,
        k=2,
        method=method,
        epsilon=1.0,
        delta=delta,
        relation="add-remove",
        source=noise.RandomSource.seeded(0),
    )
    return time.perf_counter() - t0


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    threads = os.environ.get("OPENBLAS_NUM_THREADS", "default")
    print(f"pca speed: OPENBLAS_NUM_THREADS={threads}; load average {os.getloadavg()}")
    for method, delta in METHODS:
        timed(np.full((50, 3), 0.5), method, delta)  # warm-up: imports
    for d in [int(a) for a in sys.argv[2:]] or [200, 1000]:
        rng = np.random.default_rng(0)
        X = np.clip(0.5 + 0.1 * rng.standard_normal((n, 3)) @ rng.standard_normal((3, d)), 0, 1)
        for method, delta in METHODS:
            secs, goal = timed(X, method, delta), target(method, d)
            verdict = "met" if secs <= goal else "MISSED"
            print(f"n={n} d={d} {method}: {secs:.2f} s (target <= {goal:g} s: {verdict})")
        print(f"load average {os.getloadavg()}", flush=True)


if __name__ == "__main__":
    main()
