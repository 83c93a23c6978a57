"""PSMM solver speed: the exact sparse min-cost flow at m = 10^4 and 10^5 cells (d = 2, 3) for
every importable backend (HiGHS only up to HIGHS_MAX cells: 6-52 s at 10^4 already), the
literal dense LP (corrected Algorithm 2, 2 m^2 variables) at doubling m until a solve passes
60 s, and (--e2e) a 10^5-row 3-D table through the real CLI, `dpsynth synth --mechanism psmm`.

Instances: two Gaussian clusters, n = m rows (eps = 1, Corollary 3.7's m = eps n: the most
noise per cell psmm's grid rule gives), noisy counts with exact discrete Laplace noise of scale
1, normaliser n. Timings are wall-clock seconds of one solve (network build included) on this
machine, each printed with the load average (1 min) right after it; every backend's objective
is printed and must agree.

    python -m benchmarks.psmm_speed [--sizes 10000,100000] [--backends lemon,highs] [--dense]
        [--e2e]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from fractions import Fraction

import numpy as np

from dpsynth_cli.mechanisms import psmm, transport
from dpsynth_cli.privacy import noise

DENSE_LIMIT_S = 60.0
HIGHS_MAX = 20_000  # cells: HiGHS (the fallback) is 30-60x slower than LEMON


def load() -> str:
    return f"load {os.getloadavg()[0]:.2f}"


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


def time_dense(counts: np.ndarray, n: int) -> tuple[float, float | None]:
    """Seconds of the literal LP (None as objective when HiGHS stopped at the time limit)."""
    from tests.test_psmm_transport import centres, literal_lp

    start = time.perf_counter()
    objective = literal_lp(counts.reshape(-1) / n, centres(counts.shape), limit=DENSE_LIMIT_S)[0]
    return time.perf_counter() - start, objective


def dense_sweep(d: int) -> None:
    """Doubling m until the literal LP does not finish within DENSE_LIMIT_S."""
    m = 100
    while True:
        counts, n = instance(m, d, 7)
        seconds, objective = time_dense(counts, n)
        if objective is None:
            print(f"dense LP d={d} m={counts.size}: not finished in {seconds:.0f} s ({load()})")
            return
        flow_s, flow_obj = time_flow(counts, n, transport.default_backend(), "none")
        print(
            f"dense LP d={d} m={counts.size}: {seconds:.2f} s ({load()}; objective "
            f"{objective:.9g}; flow {flow_s:.3f} s, {flow_obj:.9g})",
            flush=True,
        )
        m *= 2


def end_to_end(rows: int = 100_000, d: int = 3) -> None:
    """`dpsynth synth --mechanism psmm` on a 10^5-row 3-D Parquet file, timed from the shell."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    X = clusters(rows, d, np.random.default_rng(3))
    with tempfile.TemporaryDirectory() as tmp:
        src, out = os.path.join(tmp, "in.parquet"), os.path.join(tmp, "out.parquet")
        pq.write_table(pa.table({f"x{j}": X[:, j] for j in range(d)}), src)
        bounds = [a for j in range(d) for a in ("--bounds", f"x{j}=0:1")]
        cmd = [sys.executable, "-m", "dpsynth_cli", "synth", src, "--eps", "1", "-o", out]
        cmd += ["--mechanism", "psmm", "--seed", "5", *bounds]
        start = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True)
        seconds = time.perf_counter() - start
        with open(out + ".report.json") as fh:
            report = fh.read()
    mech = json.loads(report)["mechanism"]
    print(
        f"end to end (CLI): {rows} rows, d={d}, {mech['cells']} cells, backend "
        f"{mech['projection_result']['backend']}: {seconds:.1f} s ({load()})",
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
                if backend == "highs" and counts.size > HIGHS_MAX:
                    continue
                for tie in transport.TIES:
                    seconds, objective = time_flow(counts, n, backend, tie)
                    print(
                        f"flow d={d} m={counts.size} backend={backend} tie={tie}: "
                        f"{seconds:.2f} s ({load()}; objective {objective:.9g})",
                        flush=True,
                    )
        if args.dense:
            dense_sweep(d)
    if args.e2e:
        end_to_end()


if __name__ == "__main__":
    main()
