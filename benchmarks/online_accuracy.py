"""Accuracy of online-replay against offline `synth` at the same total eps, at every checkpoint.

Run as ``python -m benchmarks.online_accuracy`` (``--rows``, ``--seeds``). The stream is the
table of ``benchmarks.online_speed`` (10^6 rows, d = 2, 5 Gaussian clusters, sd 0.05, clipped to
the unit square), replayed in order; the checkpoints are the powers of two. At each checkpoint t:

* online, ``--allocation literal`` (Algorithm 11 as printed, (5.3)) and ``tuned`` (same (5.3),
  all of eps_{j,r} on the level totals: docs/privacy.md, "online-replay"): one pass each, all
  checkpoints, eps = 1 for the whole stream;
* offline ``synth`` on the first t rows with eps = 1 (``--mechanism auto`` and ``pmm``): each of
  these alone spends eps = 1, so releasing all of them would cost eps x (number of checkpoints);
  it is the accuracy the online guarantee is compared with (Theorem 5.1: a log t factor).

W1 (L-infinity, unit square): exact for t <= 2000; above, the mean of 3 exact W1 between random
2000-row subsamples of the input and the release, minus the same estimator's floor (two disjoint
subsamples of the input, 2000 rows or half the input), so that "0" means "as close as another
sample of the data".
Beside it a certified lower bound on W1 from the full sets: the largest exact W1 of one column
(|x_c - y_c| <= ||x - y||_inf) or the tree bound, whichever is larger; at large t the subsample
estimate sits at its floor and only this bound still separates the methods. Also the a-priori
bound the report gives. Prints a markdown table (mean over seeds).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from benchmarks.online_speed import make_input

SUB = 2000


def w1_pair(X: np.ndarray, Y: np.ndarray, rng: np.random.Generator) -> tuple[float, float]:
    """(W1 - floor by subsamples, certified lower bound: max(marginal W1s, tree bound))."""
    from dpsynth_cli.evaluate.w1 import w1_1d, w1_lower_bound

    marginal = max(w1_1d(X[:, c], Y[:, c]) for c in range(X.shape[1]))
    return w1_minus_floor(X, Y, rng), max(marginal, w1_lower_bound(X, Y))


def w1_minus_floor(X: np.ndarray, Y: np.ndarray, rng: np.random.Generator) -> float:
    from dpsynth_cli.evaluate.w1 import w1_exact

    if X.shape[0] <= SUB:
        return w1_exact(X, Y)
    est, floor = [], []
    size = min(SUB, X.shape[0] // 2)
    for _ in range(3):
        xi = rng.choice(X.shape[0], 2 * size, replace=False)
        yi = rng.choice(Y.shape[0], size, replace=False)
        est.append(w1_exact(X[xi[:size]], Y[yi]))
        floor.append(w1_exact(X[xi[:size]], X[xi[size:]]))
    return float(np.mean(est) - np.mean(floor))


def online_w1(X, allocation, seed, stops):
    from fractions import Fraction

    from dpsynth_cli.online.engine import OnlineEngine, apriori_bound
    from dpsynth_cli.online.params import OnlinePlan
    from dpsynth_cli.privacy.noise import RandomSource

    plan = OnlinePlan(Fraction(1), X.shape[1], "replace", allocation)
    eng = OnlineEngine(plan)
    eng.use(RandomSource.seeded(seed))
    rng = np.random.default_rng(seed)
    out = {}

    def stop(t):
        out[t] = (
            *w1_pair(X[:t], eng.release(rng), rng),
            apriori_bound(plan, t)["w1_bound_unit_cube"],
        )

    eng.feed(X, stops, stop)
    return out


def offline_w1(X, mechanism, seed, t):
    import pyarrow as pa

    from dpsynth_cli.domain import ColumnSpec
    from dpsynth_cli.privacy.noise import RandomSource
    from dpsynth_cli.synth import SynthOptions, synthesize

    specs = [ColumnSpec(c, "float", 0.0, 1.0) for c in ("x", "y")]
    table = pa.table({"x": X[:t, 0], "y": X[:t, 1]})
    res = synthesize(
        table, specs, SynthOptions(1.0, mechanism=mechanism), RandomSource.seeded(seed)
    )
    Y = np.column_stack([res.table.column(c).to_numpy() for c in ("x", "y")])
    return w1_pair(X[:t], Y, np.random.default_rng(seed))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--from-power", type=int, default=6)
    ap.add_argument("--every", type=int, default=0, help="checkpoints every N rows instead")
    ap.add_argument("--drift", action="store_true", help="cluster centres move 0.3 over the stream")
    args = ap.parse_args()
    import os
    import tempfile

    import pyarrow.parquet as pq

    path = os.path.join(tempfile.mkdtemp(), "stream.parquet")
    make_input(path, args.rows)
    t = pq.read_table(path)
    X = np.column_stack([t.column("x").to_numpy(), t.column("y").to_numpy()])
    if args.drift:  # a table whose distribution moves with time (late rows shifted right/up)
        X = np.clip(X + 0.3 * np.linspace(0, 1, X.shape[0])[:, None] - 0.15, 0, 1)
    stops = [2**k for k in range(args.from_power, 40) if 2**k <= args.rows]
    if args.every:
        stops = list(range(args.every, args.rows + 1, args.every))
    if args.rows not in stops:
        stops.append(args.rows)  # the end of the stream: mid-level unless a power of two
    start = time.time()
    rows = {s: {} for s in stops}
    for alloc in ("literal", "tuned"):
        per_seed = [online_w1(X, alloc, seed, stops) for seed in range(args.seeds)]
        for s in stops:
            rows[s][alloc] = np.mean([p[s][:2] for p in per_seed], axis=0)
            rows[s][f"bound_{alloc}"] = per_seed[0][s][2]
    for mech in ("auto", "pmm"):
        for s in stops:
            per = [offline_w1(X, mech, seed, s) for seed in range(args.seeds)]
            rows[s][mech] = np.mean(per, axis=0)
    print(
        f"{args.rows} rows{' (drifting)' if args.drift else ''}, d = 2, eps = 1, "
        f"mean of {args.seeds} seeds "
        f"({time.time() - start:.0f} s). Each cell: W1 - floor (subsample estimate) / certified "
        "lower bound on W1 (max of the exact marginal W1s and the tree bound); unit square, "
        "L-inf\n"
    )
    print(
        "| t | online literal | online tuned | offline synth auto | offline synth pmm | "
        "a-priori bound literal | a-priori bound tuned |"
    )
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for s in stops:
        r = rows[s]
        cells = " | ".join(
            f"{r[k][0]:.4f} / {r[k][1]:.4f}" for k in ("literal", "tuned", "auto", "pmm")
        )
        print(f"| {s} | {cells} | {r['bound_literal']:.3g} | {r['bound_tuned']:.3g} |")


if __name__ == "__main__":
    main()
