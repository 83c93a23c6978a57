"""The figures of one synthetic table against the real one (FIDELITY.md), as a flat record.

Per column (worst, mean), every pair's 2-way TVD (worst, mean), the numeric pairs' correlation
error (worst), from `dpsynth_cli.evaluate.fidelity` (what `dpsynth evaluate` reports), and the
joint W1 in the mixed metric: exact between 2,000-row subsamples, mean of 3 (exact on the whole
tables when both are that small). NOT private: benchmark figures on raw data.
"""

from __future__ import annotations

import numpy as np

from dpsynth_cli.domain import ColumnSpec, Domain
from dpsynth_cli.evaluate.fidelity import fidelity
from dpsynth_cli.evaluate.w1 import w1_exact

SUBSAMPLE = 2000
REPEATS = 3
METRICS = ("col_worst", "col_mean", "pair_worst", "pair_mean", "corr_worst", "w1_mixed")


def figures(X: np.ndarray, Y: np.ndarray, specs: list[ColumnSpec], seed: int) -> dict:
    """The record for real codes X and synthetic codes Y (value codes, `value_matrix`)."""
    if X.shape[0] == 0 or Y.shape[0] == 0:
        return {"status": "empty"}
    summary = fidelity(X, Y, specs)["summary"]
    col, pair, corr = summary["column_error"], summary["pair_tvd"], summary["correlation_error"]
    return {
        "col_worst": col["worst"],
        "col_worst_name": col["column"],
        "col_mean": col["mean"],
        "pair_worst": pair["worst"],
        "pair_worst_name": " x ".join(pair["pair"] or []),
        "pair_mean": pair["mean"],
        "corr_worst": corr["worst"],
        "corr_worst_name": " x ".join(corr["pair"] or []),
        "w1_mixed": mixed_w1(X, Y, specs, seed),
    }


def mixed_w1(X: np.ndarray, Y: np.ndarray, specs: list[ColumnSpec], seed: int) -> float:
    domain = Domain(tuple(specs))
    A, B = domain.to_mixed(X), domain.to_mixed(Y)
    if A.shape[0] <= SUBSAMPLE and B.shape[0] <= SUBSAMPLE:
        return w1_exact(A, B)
    rng = np.random.default_rng([seed, 7])
    values = []
    for _ in range(REPEATS):
        a = A[rng.choice(A.shape[0], min(SUBSAMPLE, A.shape[0]), replace=False)]
        b = B[rng.choice(B.shape[0], min(SUBSAMPLE, B.shape[0]), replace=False)]
        values.append(w1_exact(a, b))
    return float(np.mean(values))


def halves(X: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Two disjoint halves of the real rows (the floor: the figures between them)."""
    order = np.random.default_rng([seed, 11]).permutation(X.shape[0])
    half = X.shape[0] // 2
    return X[order[:half]], X[order[half : 2 * half]]
