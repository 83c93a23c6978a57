"""Mixed tables with many levels (issue 15, Build 3): where does the category embedding break?

Tables of n rows: `c` category columns of L levels each (Zipf-like shares, level order random
with respect to frequency) and one float column that depends on the first category. For each
(c, L): synth (eps 1, auto, the CLI's library call) time, the mean per-column TVD of the
category columns, the float column's W1 on [0,1], and the joint W1 in the mixed metric rho
(docs/privacy.md, "Mixed tables": levels at distance 1, `Domain.to_mixed`; too many rows for the
exact solver, so the mean exact W1 of 2000-row subsamples, which sits above the full tables'),
against the same figures of an eps-free "floor" (a fresh
sample of the same size from the generating law).

    .venv/bin/python -m benchmarks.mixed_levels            # prints a Markdown table
    .venv/bin/python -m benchmarks.mixed_levels --small    # privtree against marginals on 2-4
                                                           # columns (select.py's column limit)
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pyarrow as pa

from dpsynth_cli.domain import ColumnSpec, Domain, value_matrix
from dpsynth_cli.evaluate.categorical import categorical_columns
from dpsynth_cli.evaluate.w1 import w1_1d, w1_summary
from dpsynth_cli.privacy.noise import RandomSource
from dpsynth_cli.synth import SynthOptions, synthesize


def table(rng: np.random.Generator, n: int, c: int, levels: int) -> pa.Table:
    """n rows of the law fixed by (c, levels); `rng` draws the rows only."""
    shares = 1 / np.arange(1, levels + 1)
    shares = np.random.default_rng(levels).permutation(shares / shares.sum())
    cols = {f"c{j}": rng.choice(levels, n, p=shares) for j in range(c)}
    centre = (cols["c0"] % 5) / 5 + 0.1
    x = np.clip(centre + rng.normal(0, 0.05, n), 0, 1)
    return pa.table({**{k: v.astype(str) for k, v in cols.items()}, "x": x})


def specs(c: int, levels: int) -> list[ColumnSpec]:
    names = tuple(str(i) for i in range(levels))
    cats = [ColumnSpec(f"c{j}", "category", 0.0, float(levels - 1), levels=names) for j in range(c)]
    return [*cats, ColumnSpec("x", "float", 0.0, 1.0)]


def measure(real: pa.Table, synth: pa.Table, cols: list[ColumnSpec]) -> dict[str, float]:
    domain = Domain(tuple(cols))
    X, Y = value_matrix(real, cols), value_matrix(synth, cols)
    tvd = categorical_columns(X, Y, cols)
    rng = np.random.default_rng(0)
    joint = w1_summary(domain.to_mixed(X), domain.to_mixed(Y), rng=rng, floor=False)
    return {
        "tvd": float(np.mean([v["tvd"] for v in tvd.values()])),
        "w1_x": w1_1d(X[:, -1], Y[:, -1]),
        "joint": joint["exact"] if "exact" in joint else joint["subsample"]["mean"],
    }


SMALL = (
    (1, 4, 300),
    (1, 4, 500),
    (1, 4, 1000),
    (1, 16, 1000),
    (2, 4, 600),
    (2, 4, 1500),
    (3, 4, 1000),
    (1, 4, 20_000),
    (2, 16, 20_000),
)


def small(seeds: int = 3) -> None:
    """Tables of 2-4 columns at eps 1: privtree against marginals (the means over `seeds`)."""
    print("| cat. columns | levels L | rows | method | mean TVD | W1 x | joint W1 mixed |")
    print("|---|---|---|---|---|---|---|")
    for c, levels, n in SMALL:
        cols = specs(c, levels)
        for mechanism in ("privtree", "marginals"):
            got = []
            for seed in range(seeds):
                real = table(np.random.default_rng(seed * 100 + c * 10 + levels), n, c, levels)
                options = SynthOptions(epsilon=1.0, mechanism=mechanism)
                out = synthesize(real, cols, options, RandomSource.seeded(seed)).table
                got.append(list(measure(real, out, cols).values()))
            tvd, w1_x, joint = np.mean(got, axis=0)
            print(
                f"| {c} | {levels} | {n:,} | {mechanism} | {tvd:.3f} | {w1_x:.3f} | {joint:.3f} |",
                flush=True,
            )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--small", action="store_true")
    args = parser.parse_args()
    if args.small:
        small()
        return
    print(
        "| cat. columns | levels L | synth s | mean TVD (floor) | W1 x (floor) "
        "| joint W1 mixed, 2000-row subsamples (floor) |"
    )
    print("|---|---|---|---|---|---|")
    for c, levels in ((1, 2), (1, 16), (1, 256), (1, 4096), (2, 16), (4, 16), (2, 256)):
        rng = np.random.default_rng(c * 10_000 + levels)
        real = table(rng, args.rows, c, levels)
        fresh = table(rng, args.rows, c, levels)  # same law, independent rows
        cols = specs(c, levels)
        start = time.process_time()
        result = synthesize(real, cols, SynthOptions(epsilon=1.0), RandomSource.seeded(1))
        synth = result.table
        seconds = time.process_time() - start
        got, floor = measure(real, synth, cols), measure(real, fresh, cols)
        print(
            f"| {c} | {levels} | {seconds:.1f} | {got['tvd']:.3f} ({floor['tvd']:.3f}) | "
            f"{got['w1_x']:.3f} ({floor['w1_x']:.3f}) | {got['joint']:.3f} "
            f"({floor['joint']:.3f}) |",
            flush=True,
        )


if __name__ == "__main__":
    main()
