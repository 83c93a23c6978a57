"""`pca --row-norm` through the real CLI on Appendix G.1's spiked model, as a table.

The k-PCA paper's setting bounds every row's norm by beta = C sqrt(lambda_1) + sigma sqrt(d
log(n / zeta)) (Appendix G, C = 1, zeta = 0.01); our tables are bounded by a box, whose half-
diagonal sqrt(d)/2 (unit cube) is what every method's noise scales with unless `--row-norm`
declares the ball. Table: x = V diag(sqrt 10, sqrt 5) g + sigma z, g ~ N(0, I_2), z ~ N(0, I_d),
V a random orthonormal d x 2 (seed DATA_SEED), clamped to the declared bounds -1..1; d = 200, k
= 2, n = 10^4, sigma = 0.025, eps = 1, delta = 0.01. On bounds -b..b the unit cube scales by 1 /
(2b), so the paper's beta is R = beta / (2b) = beta / 2 there (4.48 -> 2.24, against the box's
half-diagonal 7.07). Utility: Definition 1's captured-variance ratio <U U^T, S> / <V V^T, S>
with S = V Lambda V^T + sigma^2 I the model's covariance (equal widths: the unit-cube
directions are the original ones). Noise seeds: `--seed trial` (the report says NOT FOR
RELEASE, as every seeded run).

    python -m benchmarks.pca_rownorm [TRIALS]   (default 5; prints a markdown table)
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

D, K, N, SIGMA, EPS, DELTA, ZETA = 200, 2, 10_000, 0.025, 1.0, 0.01, 0.01
LAMS = np.array([10.0, 5.0])
DATA_SEED = 7
METHODS = ("dp-gauss-1", "k-dp-pca", "k-dp-ojas", "dp-power", "dp-gauss-2")


def paper_beta(n: int = N, d: int = D, sigma: float = SIGMA) -> float:
    return math.sqrt(LAMS[0]) + sigma * math.sqrt(d * math.log(n / ZETA))


def table(work: Path) -> tuple[Path, Path, np.ndarray]:
    rng = np.random.default_rng(DATA_SEED)
    V, _ = np.linalg.qr(rng.standard_normal((D, K)))
    X = rng.standard_normal((N, K)) @ (V * np.sqrt(LAMS)).T
    X = np.clip(X + SIGMA * rng.standard_normal((N, D)), -1, 1)
    names = [f"c{j}" for j in range(D)]
    path = work / "spiked.parquet"
    pd.DataFrame(X, columns=names).to_parquet(path)
    schema = work / "schema.json"
    cols = {c: {"type": "float", "lower": -1, "upper": 1} for c in names}
    schema.write_text(json.dumps({"columns": cols}))
    return path, schema, V


def captured(U: np.ndarray, V: np.ndarray) -> float:
    S = (V * LAMS) @ V.T + SIGMA**2 * np.eye(D)
    return float(np.trace(U @ S @ U.T) / np.linalg.eigvalsh(S)[::-1][:K].sum())


def cli(path: Path, schema: Path, method: str, seed: int, row_norm: float | None, work: Path):
    out = work / f"{method}-{seed}-{row_norm}.csv"
    cmd = [sys.executable, "-m", "dpsynth_cli", "pca", str(path), "--eps", str(EPS)]
    cmd += ["--delta", str(DELTA), "--method", method, "-k", str(K), "--schema", str(schema)]
    cmd += ["--seed", str(seed), "-o", str(out), "--quiet"]
    if row_norm is not None:
        cmd += ["--row-norm", repr(row_norm)]
    subprocess.run(cmd, check=True, capture_output=True)
    comps = pd.read_csv(out)
    assert (comps["coordinates"] == "unit-cube").all()
    return comps[[f"c{j}" for j in range(D)]].to_numpy()


def main() -> None:
    trials = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    work = Path(tempfile.mkdtemp(prefix="pca-rownorm-"))
    path, schema, V = table(work)
    R = paper_beta() / 2  # bounds -1..1: b = 1
    print(f"beta = {paper_beta():.4f}, R = beta / 2 = {R:.4f}, box half-diagonal {D**0.5 / 2:.3f}")
    print("| method | no --row-norm | --row-norm R |")
    print("|---|---:|---:|")
    for method in METHODS:
        cells = []
        for rn in (None, R):
            r = [captured(cli(path, schema, method, t, rn, work), V) for t in range(trials)]
            cells.append(f"{np.mean(r):.3f} ({min(r):.3f}-{max(r):.3f})")
        print(f"| {method} | {cells[0]} | {cells[1]} |", flush=True)


if __name__ == "__main__":
    main()
