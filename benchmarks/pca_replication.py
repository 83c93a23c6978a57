"""Appendix G.1 replication (scaled down): spiked covariance A_i = V Lambda V^T + z z^T,
k = 2, d = 200, Lambda = diag(10, 5) (the paper leaves lambda_2 open), eps = 1, delta = 0.01.
Utility: captured-variance ratio tr(U^T S U) / (lam_1 + lam_2) (Definition 1). n is public here,
as in the paper. Usage: python -m benchmarks.pca_replication [trials] [n ...]"""

from __future__ import annotations

import sys
import time

import numpy as np

from dpsynth_cli.pca import methods
from dpsynth_cli.pca.stream import Stream
from dpsynth_cli.privacy import noise
from dpsynth_cli.privacy.ledger import rho_for

D, K, LAMS, EPS, DELTA, ZETA = 200, 2, np.array([10.0, 5.0]), 1.0, 0.01, 0.01


def spiked(n, sigma, rng):
    V, _ = np.linalg.qr(rng.standard_normal((D, K)))
    return V * np.sqrt(LAMS), sigma * rng.standard_normal((n, D)), V


def ratio(U, V, sigma):
    S = (V * LAMS) @ V.T + sigma**2 * np.eye(D)
    return float(np.trace(U @ S @ U.T) / np.linalg.eigvalsh(S)[::-1][:K].sum())


def one(method, n, sigma, trial):
    rng = np.random.default_rng(1000 * trial + n)
    F, Z, V = spiked(n, sigma, rng)
    beta = np.sqrt(LAMS[0]) + sigma * np.sqrt(D * np.log(n / ZETA))  # Appendix G, C = 1
    st = Stream.of(Z, beta**2, F)
    src = noise.RandomSource.seeded(trial).spawn(f"{method}{n}{sigma}")
    rho = rho_for(EPS, DELTA)
    t0 = time.perf_counter()
    if method == "dp-gauss-1":
        res = methods.dp_gauss_1(st, K, rho, "add-remove", src)
    elif method == "k-dp-ojas":
        res = methods.k_dp_ojas(st, K, rho, "add-remove", n, src)
    else:
        res = methods.k_dp_pca(st, K, rho, "add-remove", n, src)
    return ratio(res.components, V, sigma), time.perf_counter() - t0


def main() -> None:
    trials = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    ns = [int(a) for a in sys.argv[2:]] or [500, 2000, 10_000]
    print("| sigma | n | method | mean ratio | min | s/run |")
    print("|---|---|---|---|---|---|")
    for sigma in (0.001, 0.1):
        for n in ns:
            for method in ("dp-gauss-1", "k-dp-ojas", "k-dp-pca"):
                r = [one(method, n, sigma, t) for t in range(trials)]
                v = np.array([a for a, _ in r])
                secs = np.mean([b for _, b in r])
                print(
                    f"| {sigma} | {n} | {method} | {v.mean():.3f} | {v.min():.3f} | {secs:.2f} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
