"""Statistical privacy audit of PrivTree's final output (the released points), with a leaky mutant.

tests/test_privtree.py audits the release (tree structure + noisy leaf counts, steps 1-3 of
dpsynth_cli/mechanisms/privtree.py). Here ``privtree.run`` is audited as a whole: its points are
placed by post-processing (step 4: clip, zero small leaves, a linear density per leaf with slopes
from the neighbouring leaves' released densities, `placement.py`), which must not leak more than
the release. Same method, auditor (tests/audit.py) and helpers as tests/test_hierarchy_audit.py:
run the mechanism N times on X and on X' = X + ROW (fixed seeds), reduce each output to a few
statistics, choose a threshold event on half of the runs, bound its probabilities by
Clopper-Pearson on the other half and compare the implied lower bound on epsilon with the
declared one. The mutant (a leak after the noise, wrapped around ``privtree.run``) must fail.

Setting (that of the release audit where it fits): d = 1, declared eps = AUDIT_EPS = 3, the public
noisy row count held fixed at THETA on both sides; ``run`` plans with its default policy (d = 1:
structure ~0.3 + counts ~2.7, start level 1, threshold 1, max depth D = 4). X holds THETA rows
within 1e-7 of POINT = 0.3 (sharing its depth-D cell [1/4, 5/16)) and one background row in each
level-2 cell next to the cluster's (0.2 and 0.6), so that neighbouring leaves usually have a
released density and the placement in the added row's leaf has a slope (non-zero in ~88% of
runs): the audit goes through the slopes, not only through uniform placement. ``privtree.plan``
(a pure function of public inputs, ~20 ms of exact rational arithmetic) is memoised during the
runs; the memoised plan is checked equal to a fresh one.

Run with ``pytest -s tests/test_privtree_audit.py`` to see the measured bounds. Typical values
(lower bounds at 95%; they move if the plan constants, the placement or the sampler's use of
random bits change):

    audit (declared eps 3)              runs/side  bound  event
    privtree final output, correct      3000       2.01   {points in its start-level cell <= 5}
    privtree release (same runs)        3000       2.49   {noisy count of row's leaf - c <= 0}
    privtree final output, leaky        500        4.12   {points == row >= 1}: 234 vs 0 of 250
    privtree release (leaky runs)       500        2.44   (the release itself is unchanged)

(The leak's true epsilon is infinite: under X no point ever equals the row.)
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from functools import cache

import numpy as np
import pytest

from dpsynth_cli.mechanisms import partition, privtree
from dpsynth_cli.privacy.ledger import Ledger
from tests.audit import audit
from tests.test_privacy_audits import report, stream
from tests.test_privtree import AUDIT_EPS, POINT, THETA

RELATION = "add-remove"
NOISY_ROWS = THETA  # public input of the plan, the same on both sides (as in the release audit)
ROW = np.array([POINT])  # X' = X + ROW
# THETA rows in ROW's depth-D cell but never equal to it (so "points == row" sees a leak), then
# one background row in each level-2 cell next to the cluster's [1/4, 1/2).
X = np.vstack([ROW + 1e-7 * np.arange(1, THETA + 1)[:, None], [[0.2], [0.6]]])
X_PRIME = np.vstack([X, ROW[None, :]])  # the added row last: the leaky mutant's snap keeps it


def plan() -> privtree.PrivTreePlan:
    """The plan ``privtree.run`` makes from the public inputs of both sides."""
    return privtree.plan(NOISY_ROWS, AUDIT_EPS, X.shape[1], RELATION)


def cell(points: np.ndarray, depth: int, level: int) -> np.ndarray:
    """Code at ``level`` of the binary-partition cell holding each point."""
    return partition.leaf_codes(points, depth) >> (depth - level)


class FinalStats:
    """Statistics of the released points around ROW. The counts in ROW's cells follow the noisy
    count of its leaf (1 more under X' in distribution); ``points == row`` is 0 unless a real row
    leaks; the total is the sum of the post-processed leaf counts."""

    names = (
        "points in row's depth-D cell",
        "points in its depth-(D-1) cell",
        "points in its start-level cell",
        "points within 2^-(D+2) of row",
        "points == row",
        "points released",
    )

    def __init__(self, pt: privtree.PrivTreePlan) -> None:
        self.depth = pt.max_depth
        self.levels = (pt.max_depth, pt.max_depth - 1, pt.start)
        self.cells = [int(cell(ROW[None, :], self.depth, j)[0]) for j in self.levels]
        self.radius = 2.0 ** -(pt.max_depth // pt.d + 2)

    def __call__(self, Y: np.ndarray) -> tuple[float, ...]:
        assert Y.ndim == 2 and Y.shape[1] == ROW.size
        assert ((Y >= 0) & (Y <= 1)).all()
        codes = partition.leaf_codes(Y, self.depth)
        in_cells = [
            ((codes >> (self.depth - j)) == c).sum()
            for j, c in zip(self.levels, self.cells, strict=True)
        ]
        near = (np.abs(Y - ROW).max(axis=1) <= self.radius).sum()
        equal = (Y == ROW).all(axis=1).sum()
        return tuple(float(v) for v in (*in_cells, near, equal, Y.shape[0]))


RELEASE_NAMES = ("level of row's leaf", "its noisy count - its count in X")


def release_stats(rel: privtree.Release, depth: int) -> tuple[float, float]:
    """The released leaf holding ROW: its level, and its noisy count minus the true count of X
    (Z under X, 1 + Z under X')."""
    hit = np.flatnonzero(
        rel.leaves == int(cell(ROW[None, :], depth, depth)[0]) >> (depth - rel.levels)
    )
    assert hit.size == 1  # the leaves partition the cube
    i = int(hit[0])
    level = int(rel.levels[i])
    true = int((cell(X, depth, level) == rel.leaves[i]).sum())
    return float(level), float(rel.noisy_counts[i] - true)


def leaky_output(mp: pytest.MonkeyPatch) -> None:
    """Mutant leaking AFTER the noise: 'for realism' one released point per occupied depth-D cell
    is snapped onto a real row of that cell (the last one). The release is untouched. Wraps
    ``privtree.run`` as a whole, so it does not depend on the post-processing's internals."""
    real = privtree.run

    def leaky(data, **kwargs):
        out = real(data, **kwargs)
        depth = privtree.plan(
            kwargs["noisy_rows"], kwargs["epsilon"], data.shape[1], kwargs["relation"]
        ).max_depth
        Y, codes = out.points.copy(), cell(out.points, depth, depth)
        for x, c in zip(data, cell(data, depth, depth), strict=True):
            hit = np.flatnonzero(codes == c)
            if hit.size:
                Y[hit[0]] = x
        return dataclasses.replace(out, output=out.output.map(lambda _: Y, Y.shape[1]))

    mp.setattr(privtree, "run", leaky)


VARIANTS: dict[str, Callable[[pytest.MonkeyPatch], None] | None] = {
    "correct": None,
    "leaky output": leaky_output,
}


@cache
def samples(variant: str, n_runs: int) -> dict:
    """n_runs of ``privtree.run`` on X and X' per side: statistics of the released points, and of
    the release (tree + noisy leaf counts) captured on the way."""
    start = time.perf_counter()
    pt = plan()
    stats = FinalStats(pt)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(privtree, "plan", cache(privtree.plan))  # public inputs only: memoise
        assert privtree.plan(NOISY_ROWS, AUDIT_EPS, X.shape[1], RELATION) == pt
        real_release = privtree.release
        captured: list[privtree.Release] = []

        def capture(data, used, *args, **kwargs):
            assert used == pt  # run planned exactly as the statistics assume
            rel = real_release(data, used, *args, **kwargs)
            captured.append(dataclasses.replace(rel, noisy_counts=rel.noisy_counts.copy()))
            return rel

        mp.setattr(privtree, "release", capture)
        if VARIANTS[variant] is not None:
            VARIANTS[variant](mp)
        out: dict = {"plan": pt, "final": [], "release": []}
        for side, data in (("X", X), ("X'", X_PRIME)):
            root = stream(f"privtree/final/{variant}/{side}")
            src, post = root.spawn("noise"), root.spawn("post").numpy_generator()
            final, release = [], []
            for _ in range(n_runs):
                ledger = Ledger(AUDIT_EPS, RELATION)
                result = privtree.run(
                    data,
                    epsilon=AUDIT_EPS,
                    noisy_rows=NOISY_ROWS,
                    relation=RELATION,
                    source=src,
                    ledger=ledger,
                    rng=post,
                    rows=None,
                )
                final.append(stats(result.points))
                assert len(captured) == 1, "run must release once"
                release.append(release_stats(captured.pop(), pt.max_depth))
            assert ledger.spent == AUDIT_EPS
            out["final"].append(np.array(final))
            out["release"].append(np.array(release))
    out["seconds"] = time.perf_counter() - start
    return out


FINAL_N = 3_000  # runs per side (about 0.6 ms each with the plan memoised)
LEAKY_N = 500


@pytest.mark.heavy
def test_privtree_final_output_passes_the_audit():
    """The released points (post-processing of the release) must not leak more than eps."""
    s = samples("correct", FINAL_N)
    pt = s["plan"]
    assert (pt.d, pt.max_depth, pt.start, pt.threshold) == (1, 4, 1, 1)  # the documented setting
    assert s["final"][1][:, 0].mean() > 1  # the statistics see the added row's depth-D cell
    final = audit(*s["final"], names=FinalStats.names)
    release = audit(*s["release"], names=RELEASE_NAMES)
    report("privtree final output eps=3 correct", final, s["seconds"])
    report("privtree release (same runs) eps=3 correct", release)
    release.assert_within(AUDIT_EPS)
    final.assert_within(AUDIT_EPS)
    assert final.epsilon_lower > 0.5 * AUDIT_EPS  # power: the points show the leaf counts


@pytest.mark.heavy
def test_privtree_final_output_audit_catches_a_leak_after_the_noise():
    s = samples("leaky output", LEAKY_N)
    release = audit(*s["release"], names=RELEASE_NAMES)
    final = audit(*s["final"], names=FinalStats.names)
    report("privtree release eps=3 leaky output", release, s["seconds"])
    report("privtree final output eps=3 leaky output", final)
    assert s["final"][0][:, 4].max() == 0  # no point equals the row under X ...
    release.assert_within(AUDIT_EPS)  # ... the release is fine ...
    final.assert_exceeds(AUDIT_EPS)  # ... the leak is in the released points
