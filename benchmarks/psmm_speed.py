"""PSMM solver speed: the exact sparse min-cost flow at m = 10^4 and 10^5 cells (d = 2, 3) for
every importable backend, the literal dense LP (corrected Algorithm 2) at growing m until it
passes 60 s, and (--e2e) a 10^5-row 3-D table through `psmm.run` end to end.

Instances: two Gaussian clusters, n = m rows (eps = 1, Corollary 3.7's m = eps n), noisy counts
with exact discrete Laplace noise of scale 1, normaliser n. Timings are wall-clock seconds of
one solve (network build included) on this machine; every backend's objective is printed and
must agree.

    python -m benchmarks.psmm_speed [--sizes 10000,100000] [--backends lemon,highs] [--dense]
        [--e2e]
"""

from __future__ import annotations

import argparse
import time
from fractions import Fraction

import numpy as np

from dpsynth_cli.mechanisms import psmm, transport
from dpsynth_cli.privacy import noise
from dpsynth_cli.privacy.ledger import Ledger

DENSE_LIMIT_S = 60.0


def clusters(n: int, d: int, rng: np.random.Generator) -> np.ndarray:
    centre = np.where(rng.random(n)[:, None] < 0.5, 0.3, 0.7)
    return np.clip(centre + rng.normal(0, 0.1, (n, d)), 0, 1)


def instance(m: int, d: int, seed: int) -> tuple[np.ndarray, int]:
    """Noisy counts on a k^d grid (k^d about m) for n = k^d clustered rows, and n."""
    k = round(m ** (1 / d))
    n = k**d
    counts = psmm.true_counts(clusters(n, d, np.random.default_rng(seed)), k)
    src = noise.RandomSource.seeded(seed)
    return counts + noise.discrete_laplace(src, Fraction(1), counts.size).reshape(counts.shape), n


def time_flow(counts: np.ndarray, n: int, backend: str, tie: str) -> tuple[float, float]:
    start = time.perf_counter()
    p = transport.closest_probability(counts, n, np.random.default_rng(0), tie=tie, backend=backend)
    return time.perf_counter() - start, p.objective


def time_dense(m: int, d: int) -> tuple[float, float]:
    from tests.test_psmm_transport import centres, literal_lp

    counts, n = instance(m, d, 7)
    start = time.perf_counter()
    objective, _ = literal_lp(counts.reshape(-1) / n, centres(counts.shape))
    return time.perf_counter() - start, objective


def dense_sweep(d: int) -> None:
    for m in (100, 200, 400, 800, 1600, 3200):
        seconds, objective = time_dense(m, d)
        flow_s, flow_obj = time_flow(*instance(m, d, 7), "highs", "none")
        print(
            f"dense LP d={d} m={m}: {seconds:.2f} s (objective {objective:.9g}; "
            f"flow/highs {flow_s:.2f} s, {flow_obj:.9g})",
            flush=True,
        )
        if seconds > DENSE_LIMIT_S / 4:  # the next size (4x the variables) would pass 60 s
            break


def end_to_end(rows: int = 100_000, d: int = 3) -> None:
    X = clusters(rows, d, np.random.default_rng(3))
    eps = Fraction(19, 20)  # --eps 1 less the 5% noisy-count share
    src = noise.RandomSource.seeded(5)
    start = time.perf_counter()
    out = psmm.run(
        X,
        epsilon=eps,
        noisy_rows=rows,
        relation="add-remove",
        source=src.spawn("psmm"),
        ledger=Ledger(eps),
        rng=src.spawn("post").numpy_generator(),
        rows=None,
    )
    seconds = time.perf_counter() - start
    proj = out.description["projection_result"]
    print(
        f"end to end: {rows} rows, d={d}, {out.description['cells']} cells, "
        f"backend {proj['backend']}: {seconds:.1f} s, W1 bound {out.w1_bound:.4f}",
        flush=True,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10000,100000")
    ap.add_argument("--backends", default=",".join(transport.BACKENDS))
    ap.add_argument("--dims", default="2,3")
    ap.add_argument("--dense", action="store_true")
    ap.add_argument("--e2e", action="store_true")
    args = ap.parse_args()
    backends = [b for b in args.backends.split(",") if transport.available(b)]
    for d in map(int, args.dims.split(",")):
        for m in map(int, args.sizes.split(",")):
            counts, n = instance(m, d, 1)
            for backend in backends:
                for tie in transport.TIES:
                    seconds, objective = time_flow(counts, n, backend, tie)
                    print(
                        f"flow d={d} m={counts.size} backend={backend} tie={tie}: "
                        f"{seconds:.2f} s (objective {objective:.9g})",
                        flush=True,
                    )
        if args.dense:
            dense_sweep(d)
    if args.e2e:
        end_to_end()


if __name__ == "__main__":
    main()
