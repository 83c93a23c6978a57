"""Statistical privacy audits of PSMM (tests/audit.py), each with a mutant that must fail.

Counts (Proposition 3.4). A row changes one cell's count (add/remove) or two (replace); every
other cell's released count has the same distribution under X and X', independent of the rest,
so the privacy loss of the whole release is that of the changed cells' counts. The audit draws
them in batches: in one run of `noisy_counts` on a k-cell grid, cell j plays the changed cell of
its own neighbouring pair (X' has one more row in cell j; under replace, cell pair (2j, 2j+1)
and the row moves from 2j to 2j+1), and the cells are independent replicates. So 50 runs of a
2000-cell grid give 10^5 replicates per side through the real code path (plan, true counts,
sampler, ledger). Mutants: noise scale x0.9, and sensitivity 1 under replace.

Final output (heavy): the whole mechanism (projection, tie-breaking, placement) on a table and
its neighbour, with statistics of the released points; a mutant that snaps one synthetic point
onto a real row must fail.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from dpsynth_cli.mechanisms import psmm
from dpsynth_cli.privacy import noise
from dpsynth_cli.privacy.ledger import Ledger
from tests.audit import audit

SEED = 20_261_201
EPS = Fraction(1)
CELLS = 2000
RUNS = 50


def stream(name: str) -> noise.RandomSource:
    return noise.RandomSource.seeded(SEED).spawn(name)


def grid_plan(relation: str) -> psmm.PsmmPlan:
    """The real plan at a noisy count for which the 1-D grid rule gives CELLS cells."""
    sens = 2 if relation == "replace" else 1
    factor, power = psmm.GRID_RULE[1]
    pp = psmm.plan(round((CELLS / factor) ** (1 / power)) * sens, EPS, 1, relation)
    assert pp.k == CELLS
    return pp


def centres_of(cells: np.ndarray) -> np.ndarray:
    return ((cells + 0.5) / CELLS)[:, None]


def replicates(relation: str, name: str) -> tuple[np.ndarray, np.ndarray]:
    """Statistics of the changed cells under X and X' (one value per replicate)."""
    pp = grid_plan(relation)
    base = centres_of(np.arange(CELLS))  # one row in every cell
    if relation == "add-remove":
        sides = (base, np.vstack([base, base]))  # cell j: c_j = 1 under X, 2 under X'
    else:
        moved = base.copy()
        moved[0::2] = centres_of(np.arange(1, CELLS, 2))  # the row of 2j moves to 2j + 1
        sides = (base, moved)
    true = psmm.true_counts(base, CELLS)
    out = []
    for side, X in zip(("X", "X'"), sides, strict=True):
        src = stream(f"{name}/{relation}/{side}")
        stats = []
        for _ in range(RUNS):
            o = psmm.noisy_counts(X, pp, src, Ledger(EPS, relation)) - true
            stats.append(o if relation == "add-remove" else np.minimum(o[1::2], -o[0::2]))
        out.append(np.concatenate(stats).astype(float))
    return out[0], out[1]


def test_counts_pass_the_audit_add_remove_and_replace():
    for relation in ("add-remove", "replace"):
        result = audit(*replicates(relation, "correct"))
        print(f"\n[audit] psmm counts {relation} eps=1: {result.summary()}")
        result.assert_within(EPS)
        assert result.epsilon_lower > 0.9  # power: eps is pinned


def test_noise_x09_mutant_fails(monkeypatch):
    real = psmm.PsmmPlan.scale.fget
    monkeypatch.setattr(psmm.PsmmPlan, "scale", property(lambda p: real(p) * Fraction(9, 10)))
    result = audit(*replicates("add-remove", "x0.9"))
    print(f"\n[audit] psmm counts noise x0.9: {result.summary()}")
    result.assert_exceeds(EPS)


def test_replace_with_sensitivity_one_fails(monkeypatch):
    monkeypatch.setattr(psmm, "histogram_sensitivity", lambda relation: 1)
    monkeypatch.setattr(psmm, "plan", lambda n, e, d, r: psmm.PsmmPlan(d, CELLS, e, 1, n))
    result = audit(*replicates("replace", "sens1"))
    print(f"\n[audit] psmm counts replace, sensitivity 1: {result.summary()}")
    result.assert_exceeds(EPS)


# -- final output (heavy) ---------------------------------------------------------------------

FINAL_EPS = Fraction(3)
FINAL_X = np.array([[0.2], [0.6]])
ROW = np.array([0.8])
FINAL_N = 4000


def final_stats(Y: np.ndarray, k: int) -> tuple[float, float, float]:
    cell = min(int(ROW[0] * k), k - 1)
    in_cell = np.minimum((Y[:, 0] * k).astype(int), k - 1) == cell
    return float(in_cell.sum()), float((Y[:, 0] >= 0.5).sum()), float((Y == ROW).all(1).sum())


def final_samples(leaky: bool) -> tuple[np.ndarray, np.ndarray]:
    out = []
    for side, X in (("X", FINAL_X), ("X'", np.vstack([FINAL_X, ROW[None, :]]))):
        root = stream(f"final/{leaky}/{side}")
        src, post = root.spawn("noise"), root.spawn("post").numpy_generator()
        stats = []
        for _ in range(FINAL_N):
            run = psmm.run(
                X,
                epsilon=FINAL_EPS,
                noisy_rows=3,
                relation="add-remove",
                source=src,
                ledger=Ledger(FINAL_EPS),
                rng=post,
                rows=None,
            )
            Y = run.points
            if leaky and Y.shape[0] and X.shape[0] == 3:  # "realism": snap a point onto a row
                Y = Y.copy()
                Y[0] = X[-1]
            stats.append(final_stats(Y, run.description["cells_per_axis"]))
        out.append(np.array(stats))
    return out[0], out[1]


@pytest.mark.heavy
def test_final_output_passes_and_a_leaky_placement_fails():
    ok = audit(*final_samples(False))
    bad = audit(*final_samples(True))
    print(f"\n[audit] psmm final output eps=3: {ok.summary()}\n[audit] leaky: {bad.summary()}")
    ok.assert_within(FINAL_EPS)
    bad.assert_exceeds(FINAL_EPS)
