"""Statistical privacy audits of the hierarchy mechanism, each with mutants the audit must reject.

Same method, auditor (tests/audit.py) and helpers as the PMM audits in tests/test_privacy_audits.py:
run the real mechanism N times on X and on a neighbour X' (fixed seeds), choose a threshold event
on half of the runs, bound its probabilities by Clopper-Pearson on the other half, and check the
implied lower bound on epsilon against the declared epsilon. Mutants are monkeypatched into the
real code path (``hierarchy.level_scales``, ``hierarchy.histogram_sensitivity``, a leak wrapped
around ``hierarchy.run``) and must be rejected.

Privacy argument audited (module docstring of dpsynth_cli/mechanisms/hierarchy.py): every measured
level is a partition, adding a row changes one count per level by 1 (replace: one down, one up,
sensitivity 2), level i gets discrete Laplace noise of scale sigma_i, sum_i sens / sigma_i = eps.
The root is never measured in a band of >= 2 levels, so under replace (a row moved to a cell that
differs at every measured level) the counts pin the full eps, unlike the PMM.

The audits depend only on the pre-noise part of the mechanism (``plan``, ``true_level_counts``,
``noisy_level_counts``, ``level_scales``) and on ``run``'s signature: the final-output audit uses
post-processing as a black box, so it holds whatever the post-processing does (it cannot leak more
than the counts) and only needs the release to be points in [0,1]^d.

``noisy_rows`` is a public input of the plan (the noisy row count is its own release, audited
elsewhere) and is held fixed on both sides; it is chosen so that the plan measures >= 2 levels.

Run with ``pytest -s tests/test_hierarchy_audit.py`` to see the measured bounds. Typical values
(lower bounds at 95%; d = 2, eps = 2.7, plan k = (8, 16) per axis, scales (10/9, 5/9); they move
if the plan constants or the sampler's use of random bits change):

    audit (declared eps)              runs/side  correct  mutants
    hierarchy counts (2.7)            12000      2.592    scales x0.9 (30000 runs): 2.864
    hierarchy final output (2.7)      2000       0.336    leaky output: 3.94 (500 runs)
    hierarchy replace (2.7)           2000       2.097    sensitivity 1: 3.798

(Mutant true epsilons: scales x0.9 -> 3.0; sensitivity 1 under replace -> 5.4; leak -> inf.)
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from fractions import Fraction
from functools import cache

import numpy as np
import pytest

from dpsynth_cli.mechanisms import hierarchy
from dpsynth_cli.privacy.ledger import Ledger, histogram_sensitivity
from tests.audit import audit
from tests.test_privacy_audits import ReplaceStats, report, sensitivity_halved, stream

# eps near 3 for the same reason as the PMM audits (the 0.9 x mutant's gap is 0.11 eps while the
# all-levels tail event keeps a usable probability), and 27/10 rather than 3 for speed: with two
# levels the scales are (10/9, 5/9), so the 0.9 x mutant, which needs the most runs, draws at
# scales (1, 1/2), and the exact sampler is about 3x faster at integer numerator 1 (no rejection
# loop for U) than at numerators 9 or 10.
EPS = Fraction(27, 10)
D = 2
# Public noisy row counts tried in turn: the first giving a band of >= 2 measured levels is used.
NOISY_ROWS_CANDIDATES = (100, 200, 400, 800, 1600, 3200, 10_000)

# add/remove: X' = X + ADDED. 33/100 and 71/100 are never on a cell boundary j/k (k = 2^a 3^b),
# so the 4-row cluster within 1e-6 of ADDED shares its cell at every level: the added row's leaf
# is occupied, which gives the final-output statistics something to see.
ADDED = np.array([0.71, 0.33])
ADD_X = np.vstack(
    [
        np.random.default_rng(7).random((36, D)),
        ADDED + 1e-7 * np.arange(1, 5)[:, None] * np.array([1.0, -1.0]),
    ]
)
# replace: X' = X with row MOVED_FROM moved to MOVED_TO (opposite corners: different cells at
# every level with k >= 2 cells per axis).
REPLACE_X = np.vstack([[0.1, 0.1], np.random.default_rng(8).random((39, D))])
MOVED_FROM, MOVED_TO = 0, np.array([0.9, 0.9])


@cache
def noisy_rows(relation: str) -> int:
    for n in NOISY_ROWS_CANDIDATES:
        if len(hierarchy.plan(n, EPS, D, relation).cells_per_axis) >= 2:
            return n
    raise AssertionError(f"no candidate noisy_rows gives >= 2 measured levels ({relation})")


def cell_codes(P: np.ndarray, k: int) -> np.ndarray:
    """Flat (C order) index of the cell of a k^d grid holding each point (x = 1: last cell)."""
    idx = np.clip((P * k).astype(np.int64), 0, k - 1)
    return np.ravel_multi_index(tuple(idx.T), (k,) * P.shape[1])


def path(point: np.ndarray, hp: hierarchy.HierarchyPlan) -> list[tuple[int, ...]]:
    """The cell holding ``point`` at every measured level, from the mechanism's own counts."""
    cells = [
        np.unravel_index(int(c.argmax()), c.shape)
        for c in hierarchy.true_level_counts(point[None, :], hp)
    ]
    for cell, k in zip(cells, hp.cells_per_axis, strict=True):  # cell_codes agrees with it
        assert np.ravel_multi_index(cell, (k,) * hp.d) == cell_codes(point[None, :], k)[0]
    return [tuple(int(i) for i in cell) for cell in cells]


class AddStats:
    """Statistics of one run for the add/remove pair: counts along the added row's path.

    With c_i the true count of X in the added row's level-i cell and y_i its released noisy count,
    o_i = y_i - c_i is Z_i under X and 1 + Z_i under X'. ``min_i o_i >= k`` (k >= 1) is a product
    of one tail event per level, likelihood ratio exactly prod_i e^(1/sigma_i) = e^eps; the
    1/sigma_i-weighted sum and each level's o_i alone are kept as candidates.
    """

    final_names = ("points in added row's leaf", "points in its coarsest cell", "points == row")

    def __init__(self, hp: hierarchy.HierarchyPlan, X: np.ndarray, row: np.ndarray) -> None:
        self.cells = path(row, hp)
        true = hierarchy.true_level_counts(X, hp)
        self.c = np.array([true[i][cell] for i, cell in enumerate(self.cells)])
        self.inv = np.array([1 / float(s) for s in hp.level_scales])
        self.ks = (hp.cells_per_axis[0], hp.cells_per_axis[-1])
        self.flat = [cell_codes(row[None, :], k)[0] for k in self.ks]
        self.row = row
        self.count_names = ("min_i o_i", "sum_i o_i/sigma_i") + tuple(
            f"o_{i} (k={k})" for i, k in enumerate(hp.cells_per_axis)
        )

    def counts(self, noisy: list[np.ndarray]) -> tuple[float, ...]:
        o = np.array([noisy[i][cell] for i, cell in enumerate(self.cells)]) - self.c
        return (float(o.min()), float(o @ self.inv), *(float(x) for x in o))

    def final(self, Y: np.ndarray) -> tuple[float, ...]:
        assert Y.ndim == 2 and Y.shape[1] == len(self.row)
        leaf, top = (
            int((cell_codes(Y, k) == f).sum()) for k, f in zip(self.ks, self.flat, strict=True)
        )
        return float(leaf), float(top), float((Y == self.row).all(1).sum())


class HierReplaceStats(ReplaceStats):
    """The PMM's replace statistics (``min u,v`` and ``sum (u+v)/sigma_i``, see ReplaceStats) on
    the hierarchy's measured levels; every level differs here, so ``min u,v >= 1`` has ratio
    exactly exp(sum_i 2/sigma_i) = e^eps."""

    def __init__(self, hp: hierarchy.HierarchyPlan, X: np.ndarray, src, dst) -> None:
        a, b = path(src, hp), path(dst, hp)
        self.levels = [i for i in range(len(a)) if a[i] != b[i]]
        true = hierarchy.true_level_counts(X, hp)
        self.a = [(i, a[i], true[i][a[i]]) for i in self.levels]
        self.b = [(i, b[i], true[i][b[i]]) for i in self.levels]
        self.inv = np.array([1 / float(hp.level_scales[i]) for i in self.levels])


def level_scales_x(factor: Fraction) -> Callable[[pytest.MonkeyPatch], None]:
    """Mutant: every hierarchy level scale multiplied by factor (wraps hierarchy.level_scales)."""

    def patch(mp: pytest.MonkeyPatch) -> None:
        real = hierarchy.level_scales
        mp.setattr(
            hierarchy, "level_scales", lambda *a, **k: tuple(s * factor for s in real(*a, **k))
        )

    return patch


def leaky_output(mp: pytest.MonkeyPatch) -> None:
    """Mutant leaking AFTER the noise: 'for realism' one released point per occupied leaf is
    snapped onto a real row of that leaf (the last one). The noisy counts are untouched. Wraps
    ``hierarchy.run`` as a whole, so it does not depend on the post-processing's internals."""
    real = hierarchy.run

    def leaky(X, **kwargs):
        out = real(X, **kwargs)
        hp = hierarchy.plan(kwargs["noisy_rows"], kwargs["epsilon"], X.shape[1], kwargs["relation"])
        k = hp.cells_per_axis[-1]
        Y, codes = out.points.copy(), cell_codes(out.points, k)
        for x, c in zip(X, cell_codes(X, k), strict=True):
            hit = np.flatnonzero(codes == c)
            if hit.size:
                Y[hit[0]] = x
        return dataclasses.replace(out, output=out.output.map(lambda _: Y, Y.shape[1]))

    mp.setattr(hierarchy, "run", leaky)


VARIANTS: dict[str, Callable[[pytest.MonkeyPatch], None] | None] = {
    "correct": None,
    "level scales x0.9": level_scales_x(Fraction(9, 10)),
    "sensitivity halved": sensitivity_halved(hierarchy),
    "leaky output": leaky_output,
}


@cache
def samples(variant: str, relation: str, n_runs: int, full: bool) -> dict:
    """n_runs of the hierarchy on X and X' per side: count statistics, and (full) final-output
    ones. ``full`` runs ``hierarchy.run`` to the end and captures the noisy counts on the way."""
    start = time.perf_counter()
    rows = noisy_rows(relation)  # fixed before any mutant: the same public input for all variants
    with pytest.MonkeyPatch.context() as mp:
        if VARIANTS[variant] is not None:
            VARIANTS[variant](mp)
        hp = hierarchy.plan(rows, EPS, D, relation)
        if relation == "add-remove":
            stats = AddStats(hp, ADD_X, ADDED)
            datasets = (ADD_X, np.vstack([ADD_X, ADDED[None, :]]))
        else:
            stats = HierReplaceStats(hp, REPLACE_X, REPLACE_X[MOVED_FROM], MOVED_TO)
            moved = REPLACE_X.copy()
            moved[MOVED_FROM] = MOVED_TO
            datasets = (REPLACE_X, moved)
        captured: list[list[np.ndarray]] = []
        if full:
            real = hierarchy.noisy_level_counts

            def capture(X, plan, *args, **kwargs):
                assert plan == hp  # run planned exactly as the statistics assume
                noisy = real(X, plan, *args, **kwargs)
                captured.append([c.copy() for c in noisy])  # as released, whatever comes next
                return noisy

            mp.setattr(hierarchy, "noisy_level_counts", capture)
        out: dict = {"plan": hp, "stats": stats, "counts": [], "final": []}
        for side, data in zip(("X", "X'"), datasets, strict=True):
            root = stream(f"hierarchy/{variant}/{relation}/{side}")
            src, post = root.spawn("noise"), root.spawn("post").numpy_generator()
            counts, final = [], []
            for _ in range(n_runs):
                ledger = Ledger(EPS, relation)
                if full:
                    release = hierarchy.run(
                        data,
                        epsilon=EPS,
                        noisy_rows=rows,
                        relation=relation,
                        source=src,
                        ledger=ledger,
                        rng=post,
                        rows=None,
                    )
                    final.append(stats.final(release.points))
                    assert len(captured) == 1, "run must release noisy_level_counts once"
                    noisy = captured.pop()
                else:
                    noisy = hierarchy.noisy_level_counts(data, hp, src, ledger)
                counts.append(stats.counts(noisy))
            assert ledger.spent == EPS
            out["counts"].append(np.array(counts))
            out["final"].append(np.array(final))
    out["seconds"] = time.perf_counter() - start
    return out


# Runs per side. The correct counts (about 0.9 ms a run at scales (10/9, 5/9)) only have to pass
# and pin eps to 10%; the 0.9 x mutant (about 0.3 ms) has to clear eps by a margin 0.3 wide.
COUNTS_N = 12_000
MUTANT_N = 30_000
REPLACE_N = 2_000
FINAL_N = 2_000  # full runs (about 1.3 ms each)
LEAKY_N = 500


@pytest.mark.heavy
def test_hierarchy_counts_pass_the_audit():
    """The noisy counts of the measured band (>= 2 levels), d = 2, eps = 2.7, are eps-DP."""
    s = samples("correct", "add-remove", COUNTS_N, False)
    hp = s["plan"]
    assert len(hp.cells_per_axis) >= 2 and hp.sensitivity == 1
    assert sum(Fraction(hp.sensitivity) / x for x in hp.level_scales) == EPS
    result = audit(*s["counts"], names=s["stats"].count_names)
    report(f"hierarchy counts eps=2.7 correct (k={hp.cells_per_axis})", result, s["seconds"])
    result.assert_within(EPS)
    assert result.epsilon_lower > 0.9 * EPS  # power: the all-levels tail event pins eps


@pytest.mark.heavy
def test_hierarchy_level_scales_x09_fails_the_audit():
    s = samples("level scales x0.9", "add-remove", MUTANT_N, False)
    hp = s["plan"]
    real = hierarchy.level_scales(EPS, len(hp.cells_per_axis), 1)
    assert hp.level_scales == tuple(x * Fraction(9, 10) for x in real)  # the mutant is live
    result = audit(*s["counts"], names=s["stats"].count_names)
    report("hierarchy counts eps=2.7 level scales x0.9", result, s["seconds"])
    result.assert_exceeds(EPS)


@pytest.mark.heavy
def test_hierarchy_replace_relation_passes_and_sensitivity_one_fails():
    """Replace-one: sensitivity 2 passes; planning as add-remove (sensitivity 1) fails."""
    good = samples("correct", "replace", REPLACE_N, False)
    bad = samples("sensitivity halved", "replace", REPLACE_N, False)
    assert good["plan"].sensitivity == histogram_sensitivity("replace") == 2
    assert bad["plan"].sensitivity == 1
    for s in (good, bad):  # the moved row changes cells at every measured level
        assert len(s["plan"].cells_per_axis) >= 2
        assert s["stats"].levels == list(range(len(s["plan"].cells_per_axis)))
    ok = audit(*good["counts"], names=HierReplaceStats.names)
    mutant = audit(*bad["counts"], names=HierReplaceStats.names)
    report(
        f"hierarchy replace eps=2.7 correct (k={good['plan'].cells_per_axis})", ok, good["seconds"]
    )
    report(
        f"hierarchy replace eps=2.7 sensitivity 1 (k={bad['plan'].cells_per_axis})",
        mutant,
        bad["seconds"],
    )
    ok.assert_within(EPS)
    mutant.assert_exceeds(EPS)


@pytest.mark.heavy
def test_hierarchy_final_output_passes_the_audit():
    """The released points (post-processing of the counts) must not leak more than eps."""
    s = samples("correct", "add-remove", FINAL_N, True)
    assert len(s["plan"].cells_per_axis) >= 2
    assert s["final"][1][:, 0].mean() > 0  # the statistics see the added row's leaf
    final = audit(*s["final"], names=AddStats.final_names)
    report("hierarchy final output eps=2.7 correct", final, s["seconds"])
    final.assert_within(EPS)


@pytest.mark.heavy
def test_hierarchy_final_output_audit_catches_a_leak_after_the_noise():
    s = samples("leaky output", "add-remove", LEAKY_N, True)
    counts = audit(*s["counts"], names=s["stats"].count_names)
    final = audit(*s["final"], names=AddStats.final_names)
    report("hierarchy counts eps=2.7 leaky output", counts, s["seconds"])
    report("hierarchy final output eps=2.7 leaky output", final)
    counts.assert_within(EPS)  # the noisy counts are fine ...
    final.assert_exceeds(EPS)  # ... the leak is in the released points
