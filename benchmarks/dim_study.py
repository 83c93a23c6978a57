"""Measurements behind `--dim`'s design choices: `python -m benchmarks.dim_study [spectrum|box]`.

- `spectrum`: n = 10^5, d = 30, eps = 1 on the near-subspace tables: the true covariance's
  spectrum, the private one from `moments.release` (our sums, sensitivity d(d+1)/8, the
  SECOND_MOMENT_SHARE of the mechanism epsilon), and the covariance with Algorithm 6's literal
  noise (Laplace of scale 3d^2/(eps n) on every entry of the upper triangle, mirrored), at the same
  epsilon and at the whole eps = 1. Also the subspace error ||sin Theta|| between the true and the
  noisy top-k eigenvectors and the mean L-infinity distance of the rows to the noisy subspace
  through the private centre (the projection's share of W1).
- `box`: the exact range of each projected coordinate over the unit cube (`lowdim.subspace_box`)
  against the dissertation's cube of side 2R, R = sqrt(d) + ||centre|| (monkeypatched), for fixed
  d' = k on the near-subspace tables, W1 - floor by the wide benchmark's estimator.
"""

from __future__ import annotations

import argparse
import math
import sys
from fractions import Fraction

import numpy as np

from benchmarks.accuracy import wide, wide_tables
from dpsynth_cli.mechanisms import lowdim, moments
from dpsynth_cli.privacy.ledger import Ledger
from dpsynth_cli.privacy.noise import RandomSource

EPS = 1.0
COUNT_SHARE = Fraction(1, 20)  # as synth.py: the noisy count's share


def _mech_eps(eps: float) -> Fraction:
    return Fraction(eps).limit_denominator(1000) * (1 - COUNT_SHARE)


def _sin_theta(U: np.ndarray, V: np.ndarray) -> float:
    """Spectral norm of sin Theta between the column spaces of orthonormal U and V."""
    return float(np.linalg.norm(U - V @ (V.T @ U), 2))


def spectrum(seeds: int = 5) -> str:
    lines = [
        f"n = 10^5, d = 30, eps = {EPS:g} (mechanism epsilon {float(_mech_eps(EPS)):.3f}); "
        f"mean over {seeds} noise draws. Ours: `moments.release` with the second-moment share "
        f"{lowdim.SECOND_MOMENT_SHARE} and first-moment share {lowdim.FIRST_MOMENT_SHARE}. "
        "Algorithm 6 literal: Laplace(3 d^2 / (eps_2 n)) on each entry of the upper triangle "
        "of the covariance, mirrored (the true n, which is private, given to it for free).",
        "",
        "| table | covariance | top 5 eigenvalues | 6th-30th (range) | noise norm | "
        "sin Theta (top k) | mean L-inf distance to the subspace |",
        "|---|---|---|---|---:|---:|---:|",
    ]
    for name, k in (("near2-d30", 2), ("near3-d30", 3)):
        X = wide_tables.load(name).X
        n, d = X.shape
        true_cov = np.cov(X.T, bias=True)
        mean = X.mean(axis=0)
        sub = X[np.random.default_rng(1).choice(n, 4000, replace=False)]
        eps_m = _mech_eps(EPS)
        eps_1, eps_2, _ = lowdim.split(eps_m)

        def dist(centre: np.ndarray, basis: np.ndarray, sub: np.ndarray = sub) -> float:
            Z = sub - centre
            return float(np.abs(Z - Z @ basis @ basis.T).max(axis=1).mean())

        w, V = np.linalg.eigh(true_cov)
        w, V = w[::-1], V[:, ::-1]
        variants = {"true": [(true_cov, mean)]}
        for label, e2 in (
            (f"ours, eps_2 = {float(eps_2):.3f}", eps_2),
            (f"Algorithm 6, eps_2 = {float(eps_2):.3f}", eps_2),
            (f"Algorithm 6, eps_2 = {EPS:g} (all)", Fraction(EPS).limit_denominator(1000)),
        ):
            draws = []
            for s in range(seeds):
                if label.startswith("ours"):
                    ledger = Ledger(Fraction(1000), "add-remove")
                    rel = moments.release(X, eps_1, e2, RandomSource.seeded(s), ledger)
                    draws.append((rel.covariance(n), rel.mean(n)))
                else:
                    rng = np.random.default_rng(s)
                    iu = np.triu_indices(d)
                    A = np.zeros((d, d))
                    A[iu] = rng.laplace(0.0, 3 * d * d / (float(e2) * n), iu[0].size)
                    A = A + np.triu(A, 1).T
                    draws.append((true_cov + A, mean))
            variants[label] = draws
        for label, draws in variants.items():
            eig, norms, sins, dists = [], [], [], []
            for cov, centre in draws:
                e, U = np.linalg.eigh(cov)
                e, U = e[::-1], U[:, ::-1]
                eig.append(e)
                norms.append(np.linalg.norm(cov - true_cov, 2))
                sins.append(_sin_theta(V[:, :k], U[:, :k]))
                dists.append(dist(centre, U[:, :k]))
            e = np.mean(eig, axis=0)
            lines.append(
                f"| {name} | {label} | {', '.join(f'{x:.4f}' for x in e[:5])} | "
                f"{e[5:].min():.4f} to {e[5:].max():.4f} | {np.mean(norms):.4f} | "
                f"{np.mean(sins):.2f} | {np.mean(dists):.4f} |"
            )
    return "\n".join(lines)


def _paper_box(basis: np.ndarray, centre: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """§4.3: every a = V^T (x - m) has |a_k| <= ||x - m|| <= sqrt(d) + ||m|| = R."""
    r = math.sqrt(basis.shape[0]) + float(np.linalg.norm(centre))
    return np.full(basis.shape[1], -r), np.full(basis.shape[1], r)


def box(runs: int = 1) -> str:
    cells = [("near2-d10", 2), ("near2-d30", 2), ("near3-d10", 3), ("near3-d30", 3)]
    known = {  # floors already measured by the wide benchmark (a function of the table alone)
        r["table"]: r["floor"]
        for r in wide.read_raw(wide.DEFAULT_OUT / "raw.jsonl")
        if r["method"] == "floor" and r["status"] == "ok"
    }
    floors = {t: known[t] if t in known else wide.table_floor(t)[0] for t, _ in cells}
    lines = [
        "W1 - floor for fixed `--dim k` (k = the subspace's dimension), eps = 1, "
        f"{runs} run(s), the same seeds for both boxes:",
        "",
        "| table | k | exact box (ours) | cube of side 2R (paper) | ratio |",
        "|---|---:|---:|---:|---:|",
    ]
    original = lowdim.subspace_box
    for t, k in cells:
        X = wide_tables.load(t).X
        res = {}
        for label, fn in (("exact", original), ("paper", _paper_box)):
            lowdim.subspace_box = fn
            try:
                vals = []
                for r in range(runs):
                    seed = wide._seed(t, f"{EPS:g}", r)
                    Y = wide.run_ours(X, EPS, seed, str(k), {})
                    vals.append(
                        wide.w1_estimate(X, Y, wide._seed(t, r, "x"), wide._seed(t, EPS, r, "y"))
                    )
            finally:
                lowdim.subspace_box = original
            res[label] = float(np.mean(vals)) - floors[t]
        ratio = res["paper"] / res["exact"] if res["exact"] > 0 else math.inf
        lines.append(f"| {t} | {k} | {res['exact']:.4f} | {res['paper']:.4f} | {ratio:.1f} |")
        print(lines[-1], file=sys.stderr, flush=True)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.dim_study", description=__doc__)
    p.add_argument("what", choices=("spectrum", "box"))
    p.add_argument("--runs", type=int, default=1)
    args = p.parse_args(argv)
    print(spectrum() if args.what == "spectrum" else box(args.runs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
