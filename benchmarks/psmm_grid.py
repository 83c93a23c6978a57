"""PSMM grid size: mean exact W1 for m = c * eps * n / sens cells at several factors c, and
for the adopted rule (`psmm.GRID_RULE`, factor "rule").

Corollary 3.7 takes m = eps n (c = 1); the constant, and below d = 3 the order, are ours to
choose (psmm.py's docstring). Each cell of the study runs `psmm.run` (keep-dense ties, linear
placement) on a benchmark table (benchmarks/accuracy/tables.py) with the noisy count set to n,
the same noise seed for every factor, and measures the exact W1 (L-infinity, unit cube) to the
table.

    python -m benchmarks.psmm_grid [--dims 1,2,3] [--eps 0.5,1,2] [--n 2000] [--seeds 3]
        [--factors rule,1,0.5,0.25] [--tables smooth,clustered,real-randhie-2d] [--jobs 2]
"""

from __future__ import annotations

import argparse
import os
import time
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor
from fractions import Fraction

import numpy as np

from benchmarks.accuracy import tables
from dpsynth_cli.mechanisms import psmm

ADOPTED = (dict(psmm.GRID_RULE), psmm.GRID_RULE_DEFAULT)


def one(job: tuple[str, int, float, str, int]) -> tuple[tuple, float, int]:
    """(table, n, eps, factor, seed) -> exact W1 and the number of cells used."""
    from dpsynth_cli.evaluate.w1 import w1_exact
    from dpsynth_cli.privacy import noise
    from dpsynth_cli.privacy.ledger import Ledger

    name, n, eps, factor, seed = job
    X = tables.load(name, n).X
    linear = ({}, (float(factor), 1.0)) if factor != "rule" else ADOPTED
    psmm.GRID_RULE, psmm.GRID_RULE_DEFAULT = linear  # worker processes run many jobs
    src = noise.RandomSource.seeded(1000 * seed + n)  # same noise stream for every factor
    e = Fraction(eps).limit_denominator(1000)
    out = psmm.run(
        X,
        epsilon=e,
        noisy_rows=n,
        relation="add-remove",
        source=src.spawn("psmm"),
        ledger=Ledger(e),
        rng=src.spawn("post").numpy_generator(),
        rows=None,
    )
    w1 = w1_exact(X, out.points, max_pairs=X.shape[0] * out.points.shape[0])
    return job, float(w1), int(out.description["cells"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dims", default="1,2,3")
    ap.add_argument("--eps", default="0.5,1,2")
    ap.add_argument("--n", default="2000")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--factors", default="rule,1,0.5,0.25")
    ap.add_argument("--tables", default="smooth,clustered")
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    factors = args.factors.split(",")
    names = [  # a kind of synthetic table in each d, or a table's full name (its own d)
        name
        for d in map(int, args.dims.split(","))
        for kind in args.tables.split(",")
        for name in [kind if kind in tables.ALL_TABLES else f"{kind}-{d}d"]
        if tables.dim(name) == d
    ]
    jobs = [
        (name, n, float(eps), c, s)
        for name in names
        for n in map(int, args.n.split(","))
        for eps in args.eps.split(",")
        for c in factors
        for s in range(args.seeds)
    ]
    print(f"load average at start: {os.getloadavg()}", flush=True)
    start = time.perf_counter()
    w1s: dict[tuple, list[float]] = defaultdict(list)
    cells: dict[tuple, int] = {}
    with ProcessPoolExecutor(args.jobs) as pool:
        for (name, n, eps, c, _), w1, m in pool.map(one, jobs):
            w1s[(name, n, eps, c)].append(w1)
            cells[(name, n, eps, c)] = m
    head = " | ".join(c if c == "rule" else f"c = {c}" for c in factors)
    print(f"| table | n | eps | {head} | best c |")
    print("|---|---:|---:|" + "---:|" * (len(factors) + 1))
    for name, n, eps in dict.fromkeys(k[:3] for k in w1s):
        means = [float(np.mean(w1s[(name, n, eps, c)])) for c in factors]
        row = " | ".join(
            f"{w:.4f} ({cells[(name, n, eps, c)]})" for w, c in zip(means, factors, strict=True)
        )
        print(f"| {name} | {n} | {eps:g} | {row} | {factors[int(np.argmin(means))]} |")
    print(f"wall {time.perf_counter() - start:.0f} s; load average at end {os.getloadavg()}")


if __name__ == "__main__":
    main()
