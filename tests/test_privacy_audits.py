"""Statistical privacy audits of the mechanisms, each with mutants the audit must reject.

Method (docs PRIVACY.md, "Testing privacy (statistical audits)"; auditor: tests/audit.py): run the
real mechanism N times on X and on a neighbour X' (fixed seeds, so nothing flakes), choose a
threshold event on half of the runs, bound its probabilities by Clopper-Pearson on the other half,
and check that the implied lower bound on epsilon does not exceed the declared epsilon. Every audit
also runs *mutants* (noise x 0.9, sensitivity halved, ...), built by monkeypatching the real code
path (``noise.as_scale``, ``noise.discrete_laplace``, ``pmm.level_scales``,
``*.histogram_sensitivity``), and requires the audit to reject them: an audit that passes its
mutant has no power.

Runs of one side share one seeded stream, drawn from in sequence: successive draws of a PRNG are
independent, and a fresh ``RandomSource`` per run would cost a 1 MiB refill each. X and X' (and
every variant) get their own streams.

Run with ``pytest -s tests/test_privacy_audits.py`` to see the measured bounds. Typical values
(lower bounds at 95%; they move slightly if the sampler's use of random bits changes):

    audit (declared eps)              runs/side  correct  mutants
    noisy_count (1)                   100000     0.974    x0.9: 1.089, sens/2: 1.956
    estimate_bounds find (16/15)      6000       0.911    noise/2: 1.986, sens/2: 1.946
    estimate_bounds refine (16; 1)    3000       0.867    noise/2: 1.848 (vs the step's eps 1)
    PMM counts, d=1 depth 2 (3)       40000      2.864    scales x0.9: 3.258
    PMM final output (3)              40000      2.063    leaky sampler: 5.9 (5000 runs)
    PMM replace (3; at most 2 here)   15000      1.913    sensitivity 1: 3.802

(Under replace the root count never changes, so the counts leak at most eps (1 - w_0/S) = 2.)
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from fractions import Fraction
from functools import cache

import numpy as np
import pytest

from dpsynth_cli.errors import DataError
from dpsynth_cli.mechanisms import bounds, partition, pmm
from dpsynth_cli.mechanisms.count import noisy_count
from dpsynth_cli.privacy import noise
from dpsynth_cli.privacy.ledger import Ledger
from tests.audit import AuditResult, audit, cp_lower, cp_upper, epsilon_lower_bound

SEED = 20_260_101


def stream(name: str) -> noise.RandomSource:
    """The seeded stream of one (audit, variant, side)."""
    return noise.RandomSource.seeded(SEED).spawn(name)


def report(label: str, result: AuditResult, seconds: float | None = None) -> None:
    took = f" [{seconds:.1f} s of runs]" if seconds is not None else ""
    print(f"\n[audit] {label}: {result.summary()}{took}")


def scale_as_scale(mp: pytest.MonkeyPatch, factor: Fraction) -> None:
    """Mutant: every noise scale computed through ``noise.as_scale`` is multiplied by factor."""
    real = noise.as_scale
    mp.setattr(noise, "as_scale", lambda x, *a, **k: real(Fraction(x) * factor, *a, **k))


# -- the auditor itself (fast) ----------------------------------------------------------------


def test_clopper_pearson_bounds():
    # Known values: 0 of 10 -> upper 1 - 0.05**(1/10); 10 of 10 -> lower 0.05**(1/10).
    assert float(cp_upper(0, 10, 0.05)) == pytest.approx(1 - 0.05**0.1)
    assert float(cp_lower(10, 10, 0.05)) == pytest.approx(0.05**0.1)
    assert float(cp_lower(0, 10, 0.05)) == 0.0 and float(cp_upper(10, 10, 0.05)) == 1.0
    lo, hi = float(cp_lower(500, 1000, 0.025)), float(cp_upper(500, 1000, 0.025))
    assert lo < 0.5 < hi and hi - lo == pytest.approx(2 * 1.96 * math.sqrt(0.25 / 1000), rel=0.02)
    assert float(epsilon_lower_bound(0, 100, 5, 100)) == -math.inf


def test_auditor_on_the_exact_sampler():
    """The vectorised sampler directly: the auditor pins eps = 1 and rejects 0.9 x noise."""
    n = 100_000
    results = {}
    for factor in (Fraction(1), Fraction(9, 10)):
        scale = noise.as_scale(factor)
        a = 100 + noise.discrete_laplace(stream(f"sampler/{factor}/X"), scale, n)
        b = 101 + noise.discrete_laplace(stream(f"sampler/{factor}/X'"), scale, n)
        results[factor] = audit(a, b)
        report(f"discrete_laplace scale {float(factor)}", results[factor])
    results[Fraction(1)].assert_within(1)
    assert results[Fraction(1)].epsilon_lower > 0.95
    results[Fraction(9, 10)].assert_exceeds(1)
    # Identical distributions: no event separates them.
    same = audit(
        noise.discrete_laplace(stream("sampler/same/X"), Fraction(1), 20_000),
        noise.discrete_laplace(stream("sampler/same/X'"), Fraction(1), 20_000),
    )
    assert same.epsilon_lower < 0.05


def test_auditor_encodes_errors_and_checks_shapes():
    # Half the runs of M(X) raised an error (encoded +inf), none of M(X'): a clear leak.
    a = np.array([1.0, math.inf] * 200)
    b = np.array([1.0] * 400)
    res = audit(a, b)
    assert res.event(np.array([math.inf]))[0] and not res.event(np.array([1.0]))[0]
    assert res.direction == "a/b" and res.hits_den == 0 and res.epsilon_lower > 2
    with pytest.raises(ValueError):
        audit(np.array([np.nan, 1.0]), np.array([1.0, 1.0]))
    with pytest.raises(ValueError):
        audit(np.zeros((4, 2)), np.zeros((4, 3)))


# -- a. noisy count (noise sampler) -------------------------------------------------------------

COUNT_EPS = Fraction(1)
COUNT_ROWS = 100  # far from 0, so clipping at 0 never matters
COUNT_N = 100_000  # runs per side
COUNT_VARIANTS = {
    "correct": Fraction(1),
    "noise x0.9": Fraction(9, 10),
    "sensitivity halved": Fraction(1, 2),
}


@cache
def count_samples(variant: str) -> tuple[np.ndarray, np.ndarray, float, float]:
    """noisy_count on n and n + 1 rows, COUNT_N runs each; the recorded scale; seconds."""
    start = time.perf_counter()
    factor = COUNT_VARIANTS[variant]
    with pytest.MonkeyPatch.context() as mp:
        if factor != 1:
            scale_as_scale(mp, factor)
        sides = []
        for side, rows in (("X", COUNT_ROWS), ("X'", COUNT_ROWS + 1)):
            src = stream(f"count/{variant}/{side}")
            out = np.empty(COUNT_N, dtype=np.int64)
            for i in range(COUNT_N):
                ledger = Ledger(COUNT_EPS)
                out[i] = noisy_count(rows, COUNT_EPS, src, ledger)
            sides.append(out)
    recorded = ledger.spends[0].noise["scale"]
    return sides[0], sides[1], recorded, time.perf_counter() - start


@pytest.mark.heavy
def test_noisy_count_passes_the_audit():
    a, b, scale, secs = count_samples("correct")
    assert scale == 1.0
    result = audit(a, b)
    report("noisy_count eps=1 correct", result, secs)
    result.assert_within(COUNT_EPS)


@pytest.mark.heavy
def test_noisy_count_audit_has_power():
    """(d) The audited bound of the correct mechanism is not absurdly low: eps is pinned."""
    a, b, _, _ = count_samples("correct")
    assert audit(a, b).epsilon_lower > 0.9


@pytest.mark.heavy
@pytest.mark.parametrize("variant", ["noise x0.9", "sensitivity halved"])
def test_noisy_count_mutants_fail_the_audit(variant):
    a, b, scale, secs = count_samples(variant)
    assert scale == pytest.approx(float(COUNT_VARIANTS[variant]), rel=1e-5)  # mutant is live
    result = audit(a, b)
    report(f"noisy_count eps=1 {variant}", result, secs)
    result.assert_exceeds(COUNT_EPS)


# -- b. bounds estimate (find: 15/16 of eps on the grid; refine: 1/16 on sub-bins of edge bins) --

EXTREME = -1e15  # clipped to -2^41: the leftmost bin of the public grid, sub-bin 0
# Find: eps 16/15 gives the grid eps 1 (scale 1: the sampler's fast path); refine gets 1/15.
FIND_EPS = Fraction(16, 15)
FIND_N = 6_000  # copies per side, one batched release (independent runs of the mechanism)
# Refine: eps 16 gives the sub-bins eps 1 (scale 1); the grid (eps 15, scale 1/15) is then
# all but deterministic on the pair below, so the pair's leak is the refine step's eps.
REFINE_EPS = Fraction(16)
REFINE_N = 3_000  # the grid's scale 1/15 samples slowly (about 1 s per 10^6 draws)


def find_pair(p: bounds.Plan) -> tuple[np.ndarray, np.ndarray]:
    """T rows alone at the extreme left against T + 1, T the grid's single-bin threshold.

    The bin passes ``noisy > T`` iff its noise is >= 1 with T rows, >= 0 with T + 1: tail events
    of discrete Laplace noise, ratio exactly e^eps_find (0.27 / 0.73 at scale 1). Release or
    DataError (encoded lower = +inf) is the event. The sub-bin threshold is far above T + 1, so
    the refine step never moves the bounds here.
    """
    t = p.windows[0][1]
    return np.full(t, EXTREME), np.full(t + 1, EXTREME)


def refine_pair(p: bounds.Plan) -> tuple[np.ndarray, np.ndarray]:
    """An edge bin with t rows in its sub-bin 2 and 40 in sub-bin 15, against t + 1 in sub-bin 2.

    t is the sub-bin threshold: sub-bin 2 passes iff its noise is >= 1 (X) or >= 0 (X'), and
    then the lower bound is its left edge ({lower == edge} has ratio exactly e^eps_refine). The
    grid finds the bin (47 rows against a threshold of 1 at scale 1/15, empty bins stay below the
    extension threshold) with the same outcome on both sides but with probability below 1e-6,
    and the trim allowance 0.02 * 47 vs 0.02 * 48 rounds to the same integer cut for every j.
    """
    t = p.sub_bin
    edges = bounds.bin_edges()
    b = int(np.searchsorted(edges, 1.1, side="right")) - 1
    w = (edges[b + 1] - edges[b]) / bounds.SUB_BINS
    at2, at15 = edges[b] + 2.5 * w, edges[b] + 15.5 * w
    rest = np.full(40, at15)
    return np.concatenate([np.full(t, at2), rest]), np.concatenate([np.full(t + 1, at2), rest])


def noise_halved_threshold_kept(mp: pytest.MonkeyPatch) -> None:
    """Mutant: every noise draw at half the scale; the thresholds still use the declared scale."""
    real = noise.discrete_laplace
    mp.setattr(noise, "discrete_laplace", lambda src, scale, size: real(src, scale / 2, size))


def sensitivity_halved(module) -> Callable[[pytest.MonkeyPatch], None]:
    """Mutant: ``module.histogram_sensitivity`` returns half the true sensitivity."""

    def patch(mp: pytest.MonkeyPatch) -> None:
        real = module.histogram_sensitivity
        mp.setattr(module, "histogram_sensitivity", lambda rel: Fraction(real(rel), 2))

    return patch


BOUNDS_VARIANTS: dict[str, Callable[[pytest.MonkeyPatch], None] | None] = {
    "correct": None,
    "noise x0.5, threshold kept": noise_halved_threshold_kept,
    "sensitivity halved": sensitivity_halved(bounds),
}
BOUNDS_PAIRS = {  # name: (eps, copies per side, pair built from the variant's own plan)
    "find": (FIND_EPS, FIND_N, find_pair),
    "refine": (REFINE_EPS, REFINE_N, refine_pair),
}


@cache
def bounds_samples(variant: str, pair: str) -> tuple[np.ndarray, np.ndarray, bounds.Plan, float]:
    """(lower, upper) of ``copies`` releases on X and on X'; DataError is (+inf, -inf)."""
    start = time.perf_counter()
    eps, copies, build = BOUNDS_PAIRS[pair]
    with pytest.MonkeyPatch.context() as mp:
        if BOUNDS_VARIANTS[variant] is not None:
            BOUNDS_VARIANTS[variant](mp)
        p = bounds.plan(eps, "add-remove")  # the mutant's plan: pairs sit at its thresholds
        sides = []
        for side, data in zip(("X", "X'"), build(p), strict=True):
            src = stream(f"bounds/{variant}/{pair}/{side}")
            lo, hi, _ = bounds.release(data, eps, "add-remove", src, copies=copies)
            sides.append(
                np.column_stack([np.nan_to_num(lo, nan=math.inf), np.nan_to_num(hi, nan=-math.inf)])
            )
    return sides[0], sides[1], p, time.perf_counter() - start


def bounds_audit(variant: str, pair: str) -> tuple[AuditResult, bounds.Plan]:
    a, b, p, secs = bounds_samples(variant, pair)
    result = audit(a, b, names=("lower", "upper"))
    report(
        f"estimate_bounds {pair} pair, eps={float(BOUNDS_PAIRS[pair][0]):g}, {variant}",
        result,
        secs,
    )
    return result, p


def test_bounds_audit_runs_the_real_estimate():
    """The batched release the audits drive is estimate_bounds, copy for copy."""
    for data in find_pair(bounds.plan(FIND_EPS, "add-remove")):
        batch = bounds.release(data, FIND_EPS, "add-remove", stream("bounds/same"), copies=1)
        try:
            one = bounds.estimate_bounds(data, "x", FIND_EPS, stream("bounds/same"), Ledger(2))
        except DataError:
            one = (math.nan, math.nan)
        np.testing.assert_array_equal([batch[0][0], batch[1][0]], one)


@pytest.mark.heavy
def test_bounds_find_step_passes_the_audit():
    result, p = bounds_audit("correct", "find")
    assert p.epsilon_find == 1 and p.scale_find == 1
    result.assert_within(FIND_EPS)
    assert result.epsilon_lower > 0.85  # power: the pair pins the find step's eps = 1


@pytest.mark.heavy
def test_bounds_refine_step_passes_the_audit():
    result, p = bounds_audit("correct", "refine")
    assert p.epsilon_refine == 1 and p.scale_refine == 1
    result.assert_within(REFINE_EPS)  # the DP promise
    result.assert_within(p.epsilon_refine)  # this pair's leak is the refine step's (docstring)
    assert result.epsilon_lower > 0.8


@pytest.mark.heavy
@pytest.mark.parametrize(
    "variant, pair",
    [
        ("noise x0.5, threshold kept", "find"),
        ("sensitivity halved", "find"),
        ("noise x0.5, threshold kept", "refine"),
    ],
)
def test_bounds_mutants_fail_the_audit(variant, pair):
    result, p = bounds_audit(variant, pair)
    if variant == "sensitivity halved":  # the mutant is live: smaller scales and thresholds
        assert p.scale_find == Fraction(1, 2) and p.sensitivity == Fraction(1, 2)
    # find: eps_find doubles to 2 > 16/15; refine: eps_refine doubles to 2 > 1
    declared = FIND_EPS if pair == "find" else p.epsilon_refine
    result.assert_exceeds(declared)


# -- c. PMM noisy counts (Theorem 3.8) and its final output -----------------------------------

# eps = 3, not 1: the 0.9 x mutant's true epsilon is eps / 0.9, a gap of 0.11 eps, while the
# all-levels tail event keeps a usable probability (0.39 vs 0.02). At eps = 1 and 4e4 runs per side
# the expected mutant bound is only ~1.03 (margin 0.03); at eps = 3 it is ~3.2 (measured 3.26).
PMM_EPS = Fraction(3)
PMM_D = 1

# add/remove: X' = X + ADDED; noisy_n = 2 gives depth 2 (3 levels) at eps = 3, d = 1.
PMM_X = np.array([[0.2], [0.6]])
PMM_ADDED = np.array([0.8])
PMM_NOISY_N = 2
# replace: X' = X with MOVED_FROM moved to MOVED_TO (different halves: all levels but the root).
REPLACE_X = np.array([[0.1], [0.3], [0.45], [0.7]])
MOVED_FROM, MOVED_TO = 0, np.array([0.9])


def path(point: np.ndarray, depth: int) -> list[int]:
    """The cell holding ``point`` at every level 0..depth."""
    leaf = int(partition.leaf_codes(point[None, :], depth)[0])
    return [leaf >> (depth - j) for j in range(depth + 1)]


def level_scales_x(factor: Fraction) -> Callable[[pytest.MonkeyPatch], None]:
    """Mutant: every PMM level scale multiplied by factor (wraps pmm.level_scales)."""

    def patch(mp: pytest.MonkeyPatch) -> None:
        real = pmm.level_scales
        mp.setattr(pmm, "level_scales", lambda *a: tuple(s * factor for s in real(*a)))

    return patch


def leaky_sampler(mp: pytest.MonkeyPatch) -> None:
    """Mutant leaking AFTER the noise: 'for realism' one synthetic point per occupied leaf is
    snapped onto a real row of that leaf. The noisy counts are untouched."""
    real_leaves, real_sample = pmm.consistent_leaf_counts, pmm.sample_points
    seen: dict[str, np.ndarray] = {}

    def leaves(X, *args, **kwargs):
        seen["X"] = X
        return real_leaves(X, *args, **kwargs)

    def leaky(leaf_counts, plan, rng, rows=None):
        Y = real_sample(leaf_counts, plan, rng, rows)
        codes = partition.leaf_codes(Y, plan.depth)
        for x, c in zip(seen["X"], partition.leaf_codes(seen["X"], plan.depth), strict=True):
            hit = np.flatnonzero(codes == c)
            if hit.size:
                Y[hit[0]] = x
        return Y

    mp.setattr(pmm, "consistent_leaf_counts", leaves)
    mp.setattr(pmm, "sample_points", leaky)


class PmmStats:
    """Statistics of one run, for the add/remove pair: counts along the added row's path.

    With c_j the true count of X in the added row's level-j cell and y_j the released noisy count,
    o_j = y_j - c_j is Z_j under X and 1 + Z_j under X'. ``min_j o_j >= k`` (k >= 1) is a product
    of one tail event per level, so its likelihood ratio is *exactly* prod_j e^(1/sigma_j) =
    e^eps: the most powerful events for Theorem 3.8. (The 1/sigma_j-weighted sum of o_j, the
    brief's suggestion, is kept as a candidate; its tail ratio only tends to e^eps.)
    """

    count_names = ("min_j o_j", "sum_j o_j/sigma_j", "o_leaf")
    final_names = ("points in added row's leaf", "points in its level-1 cell", "points == row")

    def __init__(self, plan: pmm.PmmPlan, X: np.ndarray, row: np.ndarray) -> None:
        self.plan = plan
        self.cells = path(row, plan.depth)
        true = partition.true_level_counts(X, plan.depth)
        self.c = np.array([true[j][cell] for j, cell in enumerate(self.cells)])
        self.inv = np.array([1 / float(s) for s in plan.level_scales])
        self.row = row

    def counts(self, noisy: list[np.ndarray]) -> tuple[float, ...]:
        o = np.array([noisy[j][cell] for j, cell in enumerate(self.cells)]) - self.c
        return float(o.min()), float(o @ self.inv), float(o[-1])

    def final(self, Y: np.ndarray) -> tuple[float, ...]:
        codes = partition.leaf_codes(Y, self.plan.depth)
        in_leaf = codes == self.cells[-1]
        in_half = (codes >> (self.plan.depth - 1)) == self.cells[1]
        return float(in_leaf.sum()), float(in_half.sum()), float((Y == self.row).all(1).sum())


class ReplaceStats:
    """Statistics for the replace pair: a row moves from cell A to cell B.

    At every level where A's and B's cells differ, X' has one row fewer in A and one more in B:
    with u = y_B - c_B and v = c_A - y_A (c from X), ``min(u, v over those levels) >= k`` (k >= 1)
    has ratio exactly exp(sum 2/sigma_j over those levels) = e^(eps (1 - w_0/S)), eps short of
    the root's share because the root count does not change under replace.
    """

    names = ("min u,v", "sum (u+v)/sigma_j")

    def __init__(self, plan: pmm.PmmPlan, X: np.ndarray, src: np.ndarray, dst: np.ndarray):
        a, b = path(src, plan.depth), path(dst, plan.depth)
        self.levels = [j for j in range(plan.depth + 1) if a[j] != b[j]]
        true = partition.true_level_counts(X, plan.depth)
        self.a = [(j, a[j], true[j][a[j]]) for j in self.levels]
        self.b = [(j, b[j], true[j][b[j]]) for j in self.levels]
        self.inv = np.array([1 / float(plan.level_scales[j]) for j in self.levels])

    def counts(self, noisy: list[np.ndarray]) -> tuple[float, ...]:
        u = np.array([noisy[j][cell] - c for j, cell, c in self.b])
        v = np.array([c - noisy[j][cell] for j, cell, c in self.a])
        return float(min(u.min(), v.min())), float((u + v) @ self.inv)


PMM_VARIANTS: dict[str, Callable[[pytest.MonkeyPatch], None] | None] = {
    "correct": None,
    "level scales x0.9": level_scales_x(Fraction(9, 10)),
    "sensitivity halved": sensitivity_halved(pmm),
    "leaky sampler": leaky_sampler,
}


@cache
def pmm_samples(variant: str, relation: str, n_runs: int, full: bool) -> dict:
    """n_runs of the PMM on X and X' per side: count statistics, and (full) final-output ones.

    ``full`` runs Algorithm 4 to the end (consistent_leaf_counts, then sample_points) and
    captures the noisy counts on the way, so both audits see the same runs.
    """
    start = time.perf_counter()
    with pytest.MonkeyPatch.context() as mp:
        if PMM_VARIANTS[variant] is not None:
            PMM_VARIANTS[variant](mp)
        if relation == "add-remove":
            plan = pmm.plan(PMM_NOISY_N, PMM_EPS, PMM_D, relation)
            stats = PmmStats(plan, PMM_X, PMM_ADDED)
            datasets = (PMM_X, np.vstack([PMM_X, PMM_ADDED[None, :]]))
        else:
            plan = pmm.plan(len(REPLACE_X), PMM_EPS, PMM_D, relation)
            stats = ReplaceStats(plan, REPLACE_X, REPLACE_X[MOVED_FROM], MOVED_TO)
            moved = REPLACE_X.copy()
            moved[MOVED_FROM] = MOVED_TO
            datasets = (REPLACE_X, moved)
        captured: list[list[np.ndarray]] = []
        if full:
            real = pmm.noisy_level_counts

            def capture(*args, **kwargs):
                captured.append(real(*args, **kwargs))
                return captured[-1]

            mp.setattr(pmm, "noisy_level_counts", capture)
        out: dict = {"plan": plan, "counts": [], "final": []}
        for side, data in zip(("X", "X'"), datasets, strict=True):
            root = stream(f"pmm/{variant}/{relation}/{side}")
            src, post = root.spawn("noise"), root.spawn("post").numpy_generator()
            counts, final = [], []
            for _ in range(n_runs):
                ledger = Ledger(PMM_EPS, relation)
                if full:
                    leaves = pmm.consistent_leaf_counts(data, plan, src, ledger, post)
                    final.append(stats.final(pmm.sample_points(leaves, plan, post)))
                    noisy = captured.pop()
                else:
                    noisy = pmm.noisy_level_counts(data, plan, src, ledger)
                counts.append(stats.counts(noisy))
            out["counts"].append(np.array(counts))
            out["final"].append(np.array(final))
    out["seconds"] = time.perf_counter() - start
    return out


PMM_N = 40_000  # runs per side for the add/remove audits (about 0.3 ms each)
REPLACE_N = 15_000
LEAKY_N = 5_000


@pytest.mark.heavy
def test_pmm_counts_and_final_output_pass_the_audit():
    """Theorem 3.8 on d=1, depth 2, eps=3: the noisy counts of all levels are eps-DP; the final
    output (consistency + sampling, post-processing) must not leak more."""
    s = pmm_samples("correct", "add-remove", PMM_N, True)
    assert s["plan"].depth == 2 and s["plan"].sensitivity == 1
    counts = audit(*s["counts"], names=PmmStats.count_names)
    final = audit(*s["final"], names=PmmStats.final_names)
    report("pmm counts eps=3 correct", counts, s["seconds"])
    report("pmm final output eps=3 correct", final)
    counts.assert_within(PMM_EPS)
    final.assert_within(PMM_EPS)
    assert counts.epsilon_lower > 0.9 * PMM_EPS  # power


@pytest.mark.heavy
def test_pmm_level_scales_x09_fails_the_audit():
    s = pmm_samples("level scales x0.9", "add-remove", PMM_N, False)
    real = pmm.level_scales(PMM_EPS, s["plan"].depth, PMM_D, 1)
    assert s["plan"].level_scales == tuple(x * Fraction(9, 10) for x in real)  # mutant is live
    result = audit(*s["counts"], names=PmmStats.count_names)
    report("pmm counts eps=3 level scales x0.9", result, s["seconds"])
    result.assert_exceeds(PMM_EPS)


@pytest.mark.heavy
def test_pmm_final_output_audit_catches_a_leak_after_the_noise():
    s = pmm_samples("leaky sampler", "add-remove", LEAKY_N, True)
    counts = audit(*s["counts"], names=PmmStats.count_names)
    final = audit(*s["final"], names=PmmStats.final_names)
    report("pmm counts eps=3 leaky sampler", counts, s["seconds"])
    report("pmm final output eps=3 leaky sampler", final)
    counts.assert_within(PMM_EPS)  # the noisy counts are fine ...
    final.assert_exceeds(PMM_EPS)  # ... the leak is in the post-processing


@pytest.mark.heavy
def test_pmm_replace_relation_passes_and_sensitivity_one_fails():
    """Replace-one: scales doubled (sensitivity 2) pass; the sensitivity-1 mutant fails."""
    good = pmm_samples("correct", "replace", REPLACE_N, False)
    bad = pmm_samples("sensitivity halved", "replace", REPLACE_N, False)
    assert good["plan"].sensitivity == 2 and bad["plan"].sensitivity == 1
    ok = audit(*good["counts"], names=ReplaceStats.names)
    mutant = audit(*bad["counts"], names=ReplaceStats.names)
    report(f"pmm replace eps=3 correct (depth {good['plan'].depth})", ok, good["seconds"])
    report(f"pmm replace eps=3 sensitivity 1 (depth {bad['plan'].depth})", mutant, bad["seconds"])
    ok.assert_within(PMM_EPS)
    mutant.assert_exceeds(PMM_EPS)
