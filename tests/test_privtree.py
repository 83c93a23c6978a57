"""PrivTree mechanism: exact budget, the discrete-noise proof checked numerically, output shape,
stratified placement, a privacy audit with mutants, and a fixed-seed accuracy margin.

Audit (d = 1, declared eps 3, depth 3; lower bounds at 95%, `pytest -s` prints them), measured:

    variant                                     runs/side  bound
    correct (structure 2.7 + counts 0.3)        6000       2.48  (root decision: 1/lambda = 2.4)
    bias removed (every level costs 1/lambda)   1000       4.65
    leaf count noise x0.5 (counts 2.25 -> 4.5)  2000       3.85
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from fractions import Fraction

import numpy as np
import pytest

from dpsynth_cli.mechanisms import partition, pmm, privtree
from dpsynth_cli.privacy import noise
from dpsynth_cli.privacy.ledger import Ledger
from tests.audit import AuditResult, audit

SEED = 20_260_202


def stream(name: str) -> noise.RandomSource:
    return noise.RandomSource.seeded(SEED).spawn(name)


def report(label: str, result: AuditResult, seconds: float) -> None:
    print(f"\n[audit] {label}: {result.summary()} [{seconds:.1f} s of runs]")


# -- the proof, checked numerically -------------------------------------------------------------


def test_exp_lower_is_a_tight_lower_bound():
    for u in (Fraction(0), Fraction(1, 7), Fraction(1), Fraction(5, 2), Fraction(9)):
        value = float(privtree.exp_lower(u))
        assert value <= math.exp(float(u))
        low = float(privtree.exp_neg_lower(u))
        assert low <= math.exp(-float(u))
        if u <= 3:  # the range where they set lambda for eps up to ~10
            assert value == pytest.approx(math.exp(float(u)), 1e-3)
            assert low == pytest.approx(math.exp(-float(u)), abs=1e-4)


def split_costs(lam: float, delta: int, theta: int, top: int) -> np.ndarray:
    """rho(x) = log P[x+1 clamped + Z > theta] / P[x clamped + Z > theta] for x = -top..top,
    from the discrete Laplace pmf summed directly (independent of the closed forms)."""
    z = np.arange(-4000, 4001)
    pmf = np.exp(-np.abs(z) / lam)
    pmf /= pmf.sum()
    tail = np.cumsum(pmf[::-1])[::-1]  # tail[i] = P[Z >= z[i]]

    def p_split(b):
        return tail[np.searchsorted(z, theta - b + 1)]

    x = np.arange(-top, top + 1)
    floor = theta - delta + 1
    return x, np.log(p_split(np.maximum(x + 1, floor)) / p_split(np.maximum(x, floor)))


@pytest.mark.parametrize("lam,delta,theta", [(3.0, 2, 0), (6.5, 4, 5), (1.2, 1, 3), (20.0, 14, 0)])
def test_structure_bound_covers_the_worst_path(lam, delta, theta):
    """Max over every non-increasing path of counts of the summed split costs (dynamic
    programming over count sequences) stays below the bound used for the budget."""
    scale = noise.as_scale(lam)
    lam = float(scale)
    top, steps = 300, 60
    x, rho = split_costs(lam, delta, theta, top)
    counts = np.arange(0, top + 1)
    best = np.zeros(counts.size)  # best total from step t on, given the count at step t
    for t in range(steps - 1, -1, -1):
        here = rho[np.clip(counts - t * delta + top, 0, 2 * top)]
        best = here + np.maximum.accumulate(best)  # next count <= this count
    worst = best.max()
    p = math.exp(-1 / lam)
    closed = 1 / lam + (1 - p) * p / (1 - p**delta)
    bound = float(privtree.structure_epsilon(scale, delta, "add-remove"))
    assert worst <= closed + 1e-9 <= bound + 1e-9
    assert bound <= closed * 1.001 + 1e-6  # tight: no budget wasted


@pytest.mark.parametrize("relation", ["add-remove", "replace"])
@pytest.mark.parametrize(
    "eps", [Fraction(1, 10), Fraction(1), Fraction(3), Fraction(912_345, 2**20)]
)
@pytest.mark.parametrize("d", [1, 2, 3, 5])
def test_plan_budget_is_exact(relation, eps, d):
    pt = privtree.plan(2000, eps, d, relation)
    assert pt.structure_epsilon + pt.count_epsilon == eps  # exact rational identity
    assert pt.structure_bound <= pt.structure_epsilon
    assert pt.structure_bound >= pt.structure_epsilon * Fraction(95, 100)  # budget not wasted
    exact = privtree.structure_epsilon(pt.scale, pt.bias, relation)
    assert exact <= pt.structure_bound
    sens = 1 if relation == "add-remove" else 2
    assert pt.count_sensitivity == sens and pt.count_scale >= sens / pt.count_epsilon
    assert 0 <= pt.start <= pt.max_depth <= privtree.MAX_DEPTH


def test_tiny_epsilon_still_plans_and_one_grid_unit_is_refused():
    pt = privtree.plan(100, Fraction(3, 2**20), 2, "add-remove")
    assert pt.structure_epsilon == Fraction(1, 2**20) and pt.count_epsilon == Fraction(2, 2**20)
    with pytest.raises(ValueError):
        privtree.plan(100, Fraction(1, 2**20), 2, "add-remove")


def test_replace_costs_one_more_unit_shift():
    lam = Fraction(5)
    assert privtree.structure_epsilon(lam, 3, "replace") == privtree.structure_epsilon(
        lam, 3, "add-remove"
    ) + Fraction(1, 5)


def test_plan_uses_public_inputs_only_and_caps_depth():
    a = privtree.plan(10**12, Fraction(2), 3, "add-remove")
    assert a.max_depth == privtree.MAX_DEPTH
    assert privtree.plan(0, Fraction(1), 2, "add-remove").max_depth >= 0
    assert privtree.plan(5000, Fraction(1), 2, "add-remove") == privtree.plan(
        5000, Fraction(1), 2, "add-remove"
    )


# -- the release and its post-processing --------------------------------------------------------


def sample(n: int, d: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.clip(rng.normal(0.4, 0.08, (n, d)) ** 1.5 + 0.1 * rng.random((n, d)), 0, 1)


def run(X, eps=Fraction(1), relation="add-remove", rows=None, seed=1):
    ledger = Ledger(eps, relation)
    src = noise.RandomSource.seeded(seed)
    out = privtree.run(
        X,
        epsilon=eps,
        noisy_rows=X.shape[0],
        relation=relation,
        source=src.spawn("m"),
        ledger=ledger,
        rng=src.spawn("post").numpy_generator(),
        rows=rows,
    )
    return out, ledger


@pytest.mark.parametrize("relation", ["add-remove", "replace"])
@pytest.mark.parametrize("d", [1, 2, 3])
def test_run_spends_exactly_epsilon_and_returns_points_in_the_cube(d, relation):
    X = sample(3000, d)
    out, ledger = run(X, relation=relation)
    assert [s.step for s in ledger.spends] == ["privtree-structure", "privtree-counts"]
    assert ledger.spent == Fraction(1)
    assert out.points.shape[1] == d and out.points.shape[0] > 2000
    assert (out.points >= 0).all() and (out.points <= 1).all()
    assert out.w1_bound is None
    json.dumps(out.description)
    json.dumps([s.to_json(relation) for s in ledger.spends])
    again, _ = run(X, relation=relation)
    assert np.array_equal(again.points, out.points)  # seeded: reproducible


def test_rows_resamples_and_empty_release_is_fine():
    X = sample(2000, 2)
    out, _ = run(X, rows=777)
    assert out.points.shape == (777, 2)
    pt = privtree.plan(10, Fraction(1), 2, "add-remove")
    empty = privtree.Release(np.zeros(1, np.int64), np.zeros(1, np.int64), np.array([-3]))
    sizes = privtree.leaf_sizes(empty, pt, np.random.default_rng(0), 50)
    assert sizes.tolist() == [0]


def test_leaves_partition_the_cube():
    X = sample(5000, 2)
    pt = privtree.plan(5000, Fraction(2), 2, "add-remove")
    codes = np.sort(partition.leaf_codes(X, pt.max_depth))
    leaves, levels = privtree.grow(codes, pt, stream("partition"))
    assert leaves.size > 10
    volume = sum(Fraction(1, 2 ** int(j)) for j in levels)
    assert volume == 1
    lo = leaves << (pt.max_depth - levels)
    hi = (leaves + 1) << (pt.max_depth - levels)
    order = np.argsort(lo)
    assert np.array_equal(lo[order][1:], hi[order][:-1])  # contiguous and disjoint
    counts = np.searchsorted(codes, hi) - np.searchsorted(codes, lo)
    assert counts.sum() == X.shape[0]


def test_leaf_boxes_and_slopes_follow_the_released_densities():
    # d = 1, depth 3: leaves [0, 1/2) (level 1), [1/2, 3/4) and [3/4, 1) (level 2)
    leaves, levels = np.array([0, 2, 3]), np.array([1, 2, 2])
    lower, width = privtree.leaf_boxes(leaves, levels, 1)
    assert lower[:, 0].tolist() == [0.0, 0.5, 0.75] and width[:, 0].tolist() == [0.5, 0.25, 0.25]
    sizes = np.array([10, 10, 20])  # densities 20, 40, 80
    slopes = privtree.leaf_slopes(leaves, levels, sizes, lower, width, 3)[:, 0]
    # leaf 0: left is the face (itself, 20), right at 0.75 + ... is leaf 2 (80): (80-20)/40 -> 1.5
    # leaf 1: 20 and 80 around 40 -> 0.75; leaf 2: 40 and the face (80) -> 0.25
    np.testing.assert_allclose(slopes, [1.5, 0.75, 0.25])


@pytest.mark.parametrize("d", [1, 2, 3])
def test_placement_puts_each_leafs_points_inside_it(d):
    pt = privtree.plan(1000, Fraction(1), d, "add-remove", max_depth=12)
    leaves = np.array([0, 2, 3], dtype=np.int64)
    levels = np.array([1, 2, 2], dtype=np.int64)
    sizes = np.array([37, 0, 11])
    pts = privtree.place_points(leaves, levels, sizes, pt, np.random.default_rng(3))
    codes = partition.leaf_codes(pts, 12)
    assert pts.shape == (48, d)
    assert ((codes >> 11) == 0).sum() == 37 and ((codes >> 10) == 3).sum() == 11


@pytest.mark.heavy
def test_a_million_rows_in_two_dimensions_is_fast():
    X = np.random.default_rng(5).random((1_000_000, 2)) ** 2
    start = time.perf_counter()
    out, _ = run(X, eps=Fraction(1))
    seconds = time.perf_counter() - start
    print(f"\n[privtree] n=1e6 d=2 eps=1: {seconds:.2f} s, {out.description['leaf_cells']} leaves")
    assert seconds < 10 and abs(out.points.shape[0] - 1_000_000) < 50_000


# -- privacy audit: X = THETA copies of one point, X' = X plus one more copy --------------------
#
# d = 1, eps = 3, depth 3, no forced levels, threshold THETA: under X the root's biased count is
# exactly theta (split probability S(1)), under X' theta + 1 (S(0)): the root decision alone
# costs 1/lambda, most of the structure's share. Deeper levels are clamped for the correct
# mechanism, so they cost nothing; the bias-removed mutant pays 1/lambda at every level.

AUDIT_EPS = Fraction(3)
THETA = 4
POINT = 0.3


def audit_plan(structure: float) -> privtree.PrivTreePlan:
    return privtree.plan(
        THETA,
        AUDIT_EPS,
        1,
        "add-remove",
        structure=structure,
        start=0.0,
        threshold=THETA,
        max_depth=3,
    )


def bias_removed(mp: pytest.MonkeyPatch) -> None:
    """Mutant: the split decisions ignore the per-level bias (the clamp is kept)."""
    mp.setattr(
        privtree, "biased_counts", lambda c, step, pt: np.maximum(c, pt.threshold - pt.bias + 1)
    )


def release_stats(pt: privtree.PrivTreePlan, X: np.ndarray, src) -> tuple[float, float]:
    """(level of the leaf holding POINT, its noisy count minus THETA)."""
    rel = privtree.release(X, pt, src, Ledger(AUDIT_EPS))
    code = int(partition.leaf_codes(np.array([[POINT]]), pt.max_depth)[0])
    hit = np.flatnonzero(rel.leaves == code >> (pt.max_depth - rel.levels))
    assert hit.size == 1
    i = int(hit[0])
    return float(rel.levels[i]), float(rel.noisy_counts[i] - THETA)


def audit_samples(label: str, pt: privtree.PrivTreePlan, runs: int, mutant=None):
    X = np.full((THETA, 1), POINT)
    Xp = np.full((THETA + 1, 1), POINT)
    start = time.perf_counter()
    with pytest.MonkeyPatch.context() as mp:
        if mutant is not None:
            mutant(mp)
        sides = []
        for side, data in (("X", X), ("X'", Xp)):
            src = stream(f"privtree/{label}/{side}")
            sides.append(np.array([release_stats(pt, data, src) for _ in range(runs)]))
    return sides, time.perf_counter() - start


NAMES = ("leaf level", "noisy count - theta")


@pytest.mark.heavy
def test_privtree_release_passes_the_audit():
    pt = audit_plan(0.9)
    assert pt.threshold == THETA and pt.start == 0 and pt.max_depth == 3
    (a, b), secs = audit_samples("correct", pt, 6_000)
    result = audit(a, b, names=NAMES)
    report("privtree eps=3 correct", result, secs)
    result.assert_within(AUDIT_EPS)
    assert result.epsilon_lower > 0.8 / float(pt.scale)  # power: the root decision shows


@pytest.mark.heavy
def test_privtree_audit_catches_the_bias_removed_mutant():
    (a, b), secs = audit_samples("bias removed", audit_plan(0.9), 1_000, bias_removed)
    result = audit(a, b, names=NAMES)
    report("privtree eps=3 bias removed", result, secs)
    result.assert_exceeds(AUDIT_EPS)


@pytest.mark.heavy
def test_privtree_audit_catches_halved_leaf_noise():
    pt = audit_plan(0.25)
    mutant = dataclasses.replace(pt, count_scale=pt.count_scale / 2)
    (a, b), secs = audit_samples("count noise x0.5", mutant, 2_000)
    result = audit(a, b, names=NAMES)
    report("privtree eps=3 leaf count noise x0.5", result, secs)
    result.assert_exceeds(AUDIT_EPS)


# -- accuracy: clustered data, where the adaptive partition has a clear margin -----------------


def grid_peer(X: np.ndarray, eps: Fraction, src, rng) -> np.ndarray:
    """The uniform grid: k = round((eps n)^(1/(d+1))) cells per axis, discrete Laplace(1/eps)
    per cell, clipped at 0, that many points uniform in each cell."""
    n, d = X.shape
    k = max(1, round((float(eps) * n) ** (1 / (d + 1))))
    idx = np.minimum((X * k).astype(np.int64), k - 1)
    counts = np.bincount(np.ravel_multi_index(idx.T, (k,) * d), minlength=k**d)
    counts = np.maximum(counts + noise.discrete_laplace(src, noise.as_scale(1 / eps), k**d), 0)
    cells = np.array(np.unravel_index(np.repeat(np.arange(k**d), counts), (k,) * d)).T
    return (cells + rng.random(cells.shape)) / k


@pytest.mark.heavy
def test_clustered_table_beats_grid_and_pmm_by_a_wide_margin():
    from dpsynth_cli.evaluate.w1 import w1_exact

    rng = np.random.default_rng(8)
    centres = rng.uniform(0.1, 0.9, (4, 2))
    X = np.clip(centres[rng.integers(0, 4, 2000)] + rng.normal(0, 0.015, (2000, 2)), 0, 1)
    eps = Fraction(1)
    totals = {"privtree": [], "grid": [], "pmm": []}
    for r in range(3):
        src = noise.RandomSource.seeded(100 + r)
        post = src.spawn("post").numpy_generator()
        totals["grid"].append(w1_exact(X, grid_peer(X, eps, src.spawn("grid"), post)))
        for name, mech in (("privtree", privtree.run), ("pmm", pmm.run)):
            out = mech(
                X,
                epsilon=eps,
                noisy_rows=2000,
                relation="add-remove",
                source=src.spawn(name),
                ledger=Ledger(eps),
                rng=post,
                rows=None,
            )
            totals[name].append(w1_exact(X, out.points))
    mean = {k: float(np.mean(v)) for k, v in totals.items()}
    print(f"\n[privtree] clustered 2-D n=2000 eps=1 mean W1: {mean}")
    assert mean["privtree"] < 0.6 * min(mean["grid"], mean["pmm"])
