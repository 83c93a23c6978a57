"""make bench (pca): wall time of run_pca per method on uniform-plus-structure rows in [0,1]^d.
Usage: python -m benchmarks.pca_speed [n] [d ...]"""

from __future__ import annotations

import sys
import time

import numpy as np

from dpsynth_cli.pca import run_pca
from dpsynth_cli.privacy import noise

METHODS = (("laplace-cov", 0.0), ("dp-gauss-1", 1e-6), ("k-dp-ojas", 1e-6), ("k-dp-pca", 1e-6))


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    for d in [int(a) for a in sys.argv[2:]] or [200]:
        rng = np.random.default_rng(0)
        X = np.clip(0.5 + 0.1 * rng.standard_normal((n, 3)) @ rng.standard_normal((3, d)), 0, 1)
        for method, delta in METHODS:
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
            print(f"n={n} d={d} {method}: {time.perf_counter() - t0:.2f} s", flush=True)


if __name__ == "__main__":
    main()
