"""diamonds' principal components through the real `dpsynth pca`, in the units it writes.

The table and its public bounds are `make bench-dim`'s real-diamonds-10d (benchmarks/accuracy/
wide_tables.py: plotnine's diamonds, 53,940 rows, cut/color/clarity as grade numbers). Runs
`dpsynth pca --eps 1 --delta 1e-6 -k 2` (dp-gauss-1) with `--units unit-cube` (the default) and
`--units original`, and prints the written components beside non-private PCA in the same
coordinates, and the mapping the tool wrote before issue 25 (unit-cube direction x column width,
renormalised), which is not a principal direction of anything.

    python -m benchmarks.pca_diamonds [CSV]
CSV: the 10 columns as a file (else loaded through plotnine, e.g. in the bench environment).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

from benchmarks.accuracy import wide_tables

SOURCE = wide_tables.REAL["real-diamonds-10d"]
BOUNDS = {name: (lo, hi) for name, lo, hi in SOURCE.columns}
NAMES = list(BOUNDS)


def top2(S: np.ndarray) -> np.ndarray:
    vals, vecs = np.linalg.eigh(S)
    U = vecs[:, ::-1][:, :2].T
    return U * np.sign(U[np.arange(2), np.abs(U).argmax(axis=1)])[:, None]


def cli(csv: Path, work: Path, units: str) -> tuple[pd.DataFrame, dict]:
    schema = work / "diamonds.json"
    cols = {c: {"type": "float", "lower": lo, "upper": hi} for c, (lo, hi) in BOUNDS.items()}
    schema.write_text(json.dumps({"columns": cols}))
    out = work / f"pcs-{units}.csv"
    cmd = [sys.executable, "-m", "dpsynth_cli", "pca", str(csv), "--eps", "1", "--delta", "1e-6"]
    cmd += ["-k", "2", "--schema", str(schema), "--units", units, "--seed", "1", "-o", str(out)]
    subprocess.run(cmd + ["--quiet"], check=True, capture_output=True)
    return pd.read_csv(out), json.loads(Path(str(out) + ".report.json").read_text())


def show(title: str, U: np.ndarray) -> None:
    U = U * np.sign(U[np.arange(len(U)), np.abs(U).argmax(axis=1)])[:, None]
    print(f"| {title} | " + " | ".join(f"{v:+.2f}" for v in U[0]) + " |")
    print("| | " + " | ".join(f"{v:+.2f}" for v in U[1]) + " |")


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="pca-diamonds-"))
    if len(sys.argv) > 1:
        csv = Path(sys.argv[1])
        X = pd.read_csv(csv)[NAMES].to_numpy(float)
    else:
        X = SOURCE.loader()[NAMES].to_numpy(float)
        csv = work / "diamonds.csv"
        pd.DataFrame(X, columns=NAMES).to_csv(csv, index=False)
    lo = np.array([BOUNDS[c][0] for c in NAMES])
    width = np.array([BOUNDS[c][1] - BOUNDS[c][0] for c in NAMES])
    unit_cov = np.cov((X - lo) / width, rowvar=False)
    print("| components | " + " | ".join(NAMES) + " |")
    print("|---|" + "---:|" * len(NAMES))
    table, report = cli(csv, work, "unit-cube")
    show("dpsynth pca (unit-cube, written)", table[NAMES].to_numpy())
    show("non-private PCA, unit cube", top2(unit_cov))
    old = table[NAMES].to_numpy() * width
    show("before issue 25: unit-cube x width", old / np.linalg.norm(old, axis=1, keepdims=True))
    table_o, report_o = cli(csv, work, "original")
    show("dpsynth pca --units original", table_o[NAMES].to_numpy())
    show("non-private PCA, original units", top2(np.cov(X, rowvar=False)))
    print()
    print("explained variance (unit cube):", table["explained_variance"].round(3).tolist())
    print("explained variance (original):", table_o["explained_variance"].round(4).tolist())
    print("method:", report["method"], "eps:", report["privacy"]["total_epsilon"])


if __name__ == "__main__":
    main()
