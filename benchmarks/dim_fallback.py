"""`--dim auto` against `--dim full` (issue 37 item 4): per-column W1 and the joint W1 on the
wide benchmark's near-subspace tables at larger n, where the full-dimensional default (the
marginals mechanism) is strong per column.

    python -m benchmarks.dim_fallback --tables near2-d30,near3-d30 --n 20000,200000 --eps 1

Prints a markdown table: mean per-column W1 (all rows, unit cube), joint W1 (exact,
L-infinity, between 2,000-row subsamples), what `--dim auto` did (d', fallback) and how many
of its kept directions the spectrum rule puts above the noise.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pyarrow as pa

SUBSAMPLE = 2000


def synth(X: np.ndarray, eps: float, dim: str, seed: int) -> tuple[np.ndarray, dict]:
    """`dpsynth synth --eps EPS --dim DIM` with bounds [0, 1] on the unit-cube table."""
    from dpsynth_cli.domain import ColumnSpec
    from dpsynth_cli.mechanisms.lowdim import report_block
    from dpsynth_cli.privacy.noise import RandomSource
    from dpsynth_cli.synth import SynthOptions, synthesize

    names = [f"x{j}" for j in range(X.shape[1])]
    table = pa.table({n: X[:, j] for j, n in enumerate(names)})
    specs = [ColumnSpec(n, "float", 0.0, 1.0) for n in names]
    res = synthesize(table, specs, SynthOptions(epsilon=eps, dim=dim), RandomSource.seeded(seed))
    block = report_block(dim, res.run.description or {}, len(names))
    signal = block.get("signal") or (block.get("fallback") or {}).get("signal") or {}
    info = {
        "used": block["used"],
        "fallback": (block.get("fallback") or {}).get("decided", "")[:6],
        "above": f"{signal.get('components_above_noise', '-')}/{len(signal.get('above_noise', []))}"
        if signal
        else "",
    }
    Y = np.column_stack([res.table.column(n).to_numpy(zero_copy_only=False) for n in names])
    return np.asarray(Y, dtype=np.float64), info


def metrics(X: np.ndarray, Y: np.ndarray, seed: int) -> dict[str, float]:
    from scipy.stats import wasserstein_distance

    from dpsynth_cli.evaluate.w1 import w1_exact

    cols = [wasserstein_distance(X[:, j], Y[:, j]) for j in range(X.shape[1])]
    rng = np.random.default_rng(seed)
    xs = X[rng.choice(len(X), min(SUBSAMPLE, len(X)), replace=False)]
    ys = Y[rng.choice(len(Y), min(SUBSAMPLE, len(Y)), replace=False)]
    return {
        "col_w1_mean": float(np.mean(cols)),
        "joint_w1": float(w1_exact(xs, ys, max_pairs=len(xs) * len(ys))),
    }


def load(name: str, n: int) -> np.ndarray:
    """A wide benchmark table, or `scale-d30`: `make bench-scale`'s 30-column table (a 2-D
    latent mixture plus sd 3 noise on [0, 100]) in the unit cube."""
    from benchmarks.accuracy.wide_tables import load as wide

    if name != "scale-d30":
        return wide(name, n).X
    from benchmarks.scale import wide_columns

    columns = wide_columns(np.random.default_rng(5), n, 30)
    return np.column_stack(list(columns.values())) / 100.0


FLAGS = {"tables": "near2-d30,near3-d30", "n": "20000,200000", "eps": "1", "methods": "auto,full"}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for flag, default in FLAGS.items():  # comma-separated lists
        p.add_argument(f"--{flag}", default=default)
    p.add_argument("--seeds", type=int, default=2)
    a = p.parse_args(argv)
    print("| table | n | eps | method | per-column W1 | joint W1 | runs: d', fallback, above |")
    print("|---|---:|---:|---|---:|---:|---|")
    for name in a.tables.split(","):
        for n in (int(v) for v in a.n.split(",")):
            X = load(name, n)
            for eps in (float(v) for v in a.eps.split(",")):
                for method in a.methods.split(","):
                    found, runs, t0 = [], [], time.time()
                    for seed in range(1000, 1000 + a.seeds):
                        Y, info = synth(X, eps, method, seed)
                        found.append(metrics(X, Y, seed))
                        runs.append(f"{info['used']} {info['fallback']} {info['above']}".strip())
                    col = np.mean([f["col_w1_mean"] for f in found])
                    joint = np.mean([f["joint_w1"] for f in found])
                    print(
                        f"| {name} | {n} | {eps:g} | {method} | {col:.4f} | {joint:.4f} | "
                        f"{'; '.join(runs)} ({(time.time() - t0) / a.seeds:.0f} s/run) |",
                        flush=True,
                    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
