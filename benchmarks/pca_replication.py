"""Appendix G.1 replication: spiked covariance A_i = V Lambda V^T + z z^T, k = 2, d = 200,
Lambda = diag(10, 5) (the paper leaves lambda_2 open), eps = 1, delta = 0.01, every method.
Utility: Definition 1's captured-variance ratio <U U^T, S> / <V_k V_k^T, S> and zeta =
sqrt(1 - ratio). n is public here, as in the paper.

    python -m benchmarks.pca_replication run FIRST LAST N [N ...]  (trials FIRST..LAST-1 -> OUT)
    python -m benchmarks.pca_replication dims FIRST LAST N D [D ...]  (sigma 0.001 -> OUT_DIMS)
    python -m benchmarks.pca_replication report   (tables + docs/img plot from OUT, OUT_DIMS)
"""

from __future__ import annotations

import csv
import sys
import time
from fractions import Fraction
from pathlib import Path

import numpy as np

from dpsynth_cli.pca import methods
from dpsynth_cli.pca.stream import Stream
from dpsynth_cli.privacy import noise
from dpsynth_cli.privacy.ledger import rho_for, round_down

D, K, LAMS, EPS, DELTA, ZETA = 200, 2, np.array([10.0, 5.0]), 1.0, 0.01, 0.01
SIGMAS = (0.001, 0.025, 0.1)
METHODS = ("dp-gauss-1", "dp-gauss-2", "dp-power", "k-dp-ojas", "k-dp-pca")
OUT = Path("benchmarks/out/pca_replication.csv")
OUT_DIMS = Path("benchmarks/out/pca_replication_dims.csv")
PLOT = Path("docs/img/pca_replication.png")


def spiked(n, sigma, rng, d=D):
    V, _ = np.linalg.qr(rng.standard_normal((d, K)))
    return V * np.sqrt(LAMS), sigma * rng.standard_normal((n, d)), V


def ratio(U, V, sigma):
    S = (V * LAMS) @ V.T + sigma**2 * np.eye(V.shape[0])
    return float(np.trace(U @ S @ U.T) / np.linalg.eigvalsh(S)[::-1][:K].sum())


def one(method, n, sigma, trial, d=D):
    rng = np.random.default_rng(1000 * trial + n + (d != D) * d)
    F, Z, V = spiked(n, sigma, rng, d)
    beta = np.sqrt(LAMS[0]) + sigma * np.sqrt(d * np.log(n / ZETA))  # Appendix G, C = 1
    st = Stream.of(Z, beta**2, F)
    src = noise.RandomSource.seeded(trial).spawn(f"{method}{n}{sigma}")
    rel = "add-remove"
    t0 = time.perf_counter()
    if method == "dp-gauss-2":
        eps_gap = round_down(EPS * methods.GAP_EPS_SHARE)
        delta_p = DELTA * methods.PTR_DELTA_SHARE
        rho = rho_for(float(Fraction(EPS) - eps_gap), DELTA - delta_p)
        res = methods.dp_gauss_2(st, K, eps_gap, delta_p, rho, rel, src)
    else:
        rho = rho_for(EPS, DELTA)
        if method == "dp-gauss-1":
            res = methods.dp_gauss_1(st, K, rho, rel, src)
        elif method == "dp-power":
            res = methods.dp_power(st, K, rho, rel, src)
        elif method == "k-dp-ojas":
            res = methods.k_dp_ojas(st, K, rho, rel, n, src)
        else:
            res = methods.k_dp_pca(st, K, rho, rel, n, src)
    return ratio(res.components, V, sigma), time.perf_counter() - t0


def run(trials: range, ns: list[int]) -> None:
    OUT.parent.mkdir(parents=True, exist_ok=True)
    new = not OUT.exists()
    with OUT.open("a", newline="") as fh:
        w = csv.writer(fh)
        if new:
            w.writerow(["sigma", "n", "method", "trial", "ratio", "seconds"])
        for n in ns:
            for sigma in SIGMAS:
                for trial in trials:
                    for method in METHODS:
                        r, secs = one(method, n, sigma, trial)
                        w.writerow([sigma, n, method, trial, f"{r:.6f}", f"{secs:.3f}"])
                        fh.flush()


def dims(trials: range, n: int, ds: list[int], sigma: float = 0.001) -> None:
    """The growth-with-d claim (Figure 1(c)): fixed n and sigma, d varied (OUT_DIMS)."""
    new = not OUT_DIMS.exists()
    with OUT_DIMS.open("a", newline="") as fh:
        w = csv.writer(fh)
        if new:
            w.writerow(["d", "n", "sigma", "method", "trial", "ratio", "seconds"])
        for d in ds:
            for trial in trials:
                for method in METHODS:
                    r, secs = one(method, n, sigma, trial, d)
                    w.writerow([d, n, sigma, method, trial, f"{r:.6f}", f"{secs:.3f}"])
                    fh.flush()


def report_dims() -> None:
    cells: dict = {}
    for r in csv.DictReader(OUT_DIMS.open()):
        key = (int(r["d"]), int(r["n"]), float(r["sigma"]), r["method"])
        cells.setdefault(key, []).append(float(r["ratio"]))
    print("| d | n | sigma | trials | " + " | ".join(METHODS) + " |")
    print("|---:|---:|---:|---:|" + "---:|" * len(METHODS))
    for d, n, sigma in sorted({k[:3] for k in cells}):
        got = [cells.get((d, n, sigma, m), []) for m in METHODS]
        vals = [
            f"{np.mean(v):.4f} ({np.sqrt(max(0, 1 - np.mean(v))):.3f})" if v else "-" for v in got
        ]
        print(f"| {d} | {n} | {sigma} | {min(len(v) for v in got)} | " + " | ".join(vals) + " |")


def report() -> None:
    rows = list(csv.DictReader(OUT.open()))
    cells: dict = {}
    for r in rows:
        cells.setdefault((float(r["sigma"]), int(r["n"]), r["method"]), []).append(
            float(r["ratio"])
        )
    ns = sorted({n for _, n, _ in cells})
    print("| sigma | n | trials | " + " | ".join(METHODS) + " |")
    print("|---|---:|---:|" + "---:|" * len(METHODS))
    for sigma in SIGMAS:
        for n in ns:
            got = [cells.get((sigma, n, m), []) for m in METHODS]
            if not any(got):
                continue
            vals = [
                f"{np.mean(v):.3f} ({np.sqrt(max(0, 1 - np.mean(v))):.2f})" if v else "-"
                for v in got
            ]
            print(f"| {sigma} | {n} | {min(len(v) for v in got)} | " + " | ".join(vals) + " |")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(SIGMAS), figsize=(5 * len(SIGMAS), 4), sharey=True)
    for ax, sigma in zip(axes, SIGMAS, strict=True):
        for m in METHODS:
            pts = [(n, cells[(sigma, n, m)]) for n in ns if (sigma, n, m) in cells]
            if not pts:
                continue
            x = [n for n, _ in pts]
            mean = np.array([np.mean(v) for _, v in pts])
            half = np.array([1.96 * np.std(v) / np.sqrt(len(v)) for _, v in pts])
            ax.plot(x, mean, marker="o", label=m)
            ax.fill_between(x, mean - half, mean + half, alpha=0.2)
        ax.set_xscale("log")
        ax.set_title(f"sigma = {sigma}")
        ax.set_xlabel("n")
    axes[0].set_ylabel("captured-variance ratio (Definition 1)")
    axes[0].legend()
    fig.tight_layout()
    PLOT.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(PLOT, dpi=100)


def main() -> None:
    if sys.argv[1:2] == ["report"]:
        report()
        if OUT_DIMS.exists():
            report_dims()
    elif sys.argv[1:2] == ["dims"]:
        a = [int(x) for x in sys.argv[2:]]
        dims(range(a[0], a[1]), a[2], a[3:])
    else:
        run(range(int(sys.argv[2]), int(sys.argv[3])), [int(a) for a in sys.argv[4:]])


if __name__ == "__main__":
    main()
