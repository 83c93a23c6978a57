"""The paper's stochastic matrices A_i, and the random slots that make deflation compose.

Each sample is A_i = c_i (F F^T + z_i z_i^T): a shared factor F (d x r; empty for tabular rows)
and one row z_i, scaled by c_i = min(1, beta^2 / Tr(F F^T + z_i z_i^T)) (trace clipping of
Appendix G; c_i = 1 whenever beta^2 is the public bound of the box). Tabular rows are z_i = x_i -
centre with a public or private centre and F empty; the spiked-covariance model of Appendix G.1
is F = V Lambda^(1/2), z_i ~ N(0, sigma^2 I). A_i w = c_i (F (F^T w) + z_i (z_i . w)) costs O(dr).

Slots (why rounds and batches compose in parallel): every row gets an independent uniform label
in {0..slots-1} from the mechanism's own stream; step s uses only the rows labelled s. The output
law does not depend on the row order, so for neighbours D, D + {x} the labels of the common rows
can be coupled, and x changes one slot only; the other slots' mechanisms see identical data.
Each slot's mechanism is rho-zCDP for one added/removed row, so the whole run is rho-zCDP
(Renyi divergence of a mixture is at most the largest component's; adaptivity through the
released steps is covered by adaptive composition of the one slot that differs). Under replace
the removed and the added row can fall in two slots: each slot calibrated to replace
sensitivity (2x) costs rho/4 for one add/remove, so two slots cost rho/2 <= rho.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dpsynth_cli.privacy import noise


@dataclass
class Stream:
    """n samples A_i = c_i (F F^T + z_i z_i^T) (module docstring)."""

    Z: np.ndarray  # (n, d) rows
    F: np.ndarray  # (d, r) shared factor, r >= 0
    c: np.ndarray  # (n,) trace-clipping factors in (0, 1]
    beta2: float  # public bound on Tr(A_i) after clipping (>= c_i Tr(F F^T + z z^T))
    box: np.ndarray | None = None  # public |z_ij| <= box_j (tabular, the caller clips), else None

    @classmethod
    def of(cls, Z: np.ndarray, beta2: float, F: np.ndarray | None = None, box=None) -> Stream:
        Z = np.ascontiguousarray(Z, dtype=np.float64)
        F = np.zeros((Z.shape[1], 0)) if F is None else np.asarray(F, dtype=np.float64)
        if box is not None and F.shape[1] == 0 and float(np.square(box).sum()) <= beta2:
            c = np.ones(Z.shape[0])  # rows inside the box: Tr(z z^T) <= sum box^2 <= beta^2
        else:
            tr = float((F * F).sum()) + np.einsum("ij,ij->i", Z, Z)
            with np.errstate(divide="ignore"):
                c = np.minimum(1.0, beta2 / np.maximum(tr, 1e-300))
        return cls(Z, F, c, float(beta2), None if box is None else np.asarray(box, float))

    @property
    def n(self) -> int:
        return self.Z.shape[0]

    @property
    def d(self) -> int:
        return self.Z.shape[1]

    def grads(self, idx: np.ndarray, w: np.ndarray) -> np.ndarray:
        """Rows A_i w for i in idx, shape (len(idx), d)."""
        z = self.Z[idx]
        shared = self.F @ (self.F.T @ w)
        return self.c[idx, None] * (shared[None, :] + z * (z @ w)[:, None])


def slot_labels(source: noise.RandomSource, n: int, slots: int) -> np.ndarray:
    """An independent uniform slot in {0..slots-1} for each of n rows (exact, from `source`)."""
    return noise.uniform_below(source, np.full(n, max(1, int(slots)), dtype=np.int64))


def slot_members(labels: np.ndarray, slots: int) -> list[np.ndarray]:
    """Row indices of each slot, in a stable order (a post-processing of the labels)."""
    order = np.argsort(labels, kind="stable")
    cuts = np.searchsorted(labels[order], np.arange(slots + 1))
    return [order[cuts[s] : cuts[s + 1]] for s in range(slots)]
