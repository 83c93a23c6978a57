"""Statistical privacy audits of `--dim`: the noisy sufficient statistics (``moments.release``) and
the whole ``lowdim.run`` pipeline with ``dim = 2``, each with mutants the audit must reject.

Same method, auditor (tests/audit.py) and helpers as tests/test_privacy_audits.py: run the real
code N times on X and on a neighbour X' (fixed seeds), reduce each output to a few statistics,
choose a threshold event on half of the runs, bound its probabilities by Clopper-Pearson on the
other half, and compare the implied lower bound on epsilon with the declared one. Mutants are
monkeypatched into the real code path and must be rejected.

Privacy argument audited (module docstring of dpsynth_cli/mechanisms/moments.py): S1 = sum of the
quantised centred rows q (|q_j| <= h = 2^(STAT_BITS-1) grid units), S2 = upper triangle of
sum q q^T; L1 sensitivities d h and d(d+1) h^2 / 2 under add/remove, doubled under replace; exact
discrete Laplace noise of scale sensitivity / eps on each. A cube corner has |q_j| = h in every
coordinate, so adding it moves every entry of S1 by h and every entry of S2 by h^2: both
sensitivities are attained. Moving a row from the corner 0 to the opposite corner 1 moves every
entry of S1 by 2h (the replace sensitivity) and leaves S2 unchanged (q q^T is the same).

Statistics. The released sums are integers, so with s(X), s(X') the true sums and y the noisy
ones, ``sum_j |y_j - s_j(X)| - |y_j - s_j(X')|`` (an integer) is the privacy loss times the scale:
the most powerful events are its thresholds. Its maximum is attained exactly on "every noisy entry
is at or above its value under X'" (``min_j y_j - s_j(X') >= 0``), whose likelihood ratio is
exactly e^eps for any threshold k >= 0; both are candidates, with the mirror event
``max_j y_j - s_j(X) <= 0``. S1 and S2 are audited separately against their own epsilons (the
events of one are events of its own noisy sums only) and jointly against the sum.

The pipeline (d = 3, dim 2, inner ``hierarchy.run``, declared eps 1, public noisy row count held
fixed at PIPE_NOISY_ROWS on both sides): its report publishes ``centre_unit_cube``,
``noisy_spectrum`` and ``basis`` (``run.description``), from which the noisy S1 and S2 are
recovered *exactly* (with d' = d - 1 the last eigenvector is the complement of the basis;
``test_the_description_reveals_the_noisy_sums_exactly``), so the moment audits are repeated on
the pipeline's output against the ledger's moment spends. The data-derived-centre mutant (the
projection centred at the true mean of X instead of the private one) is caught through the
description (centre, subspace box) and through the points alone: every released point that was
not clipped lies on the plane centre + span(basis), so a plane fitted to the interior points
reveals the centre's offset along the normal.

Runs. ``moments.release`` takes ~0.3 ms of Python per call (exact Fractions, ledger) but the
exact sampler costs ~1 ms per *call* whatever its size, so during the runs
``noise.discrete_laplace`` and ``noise.discrete_laplace_mixed`` are served from one seeded stream
per side drawn in bulk by the real exact sampler, at exactly the scale each call asks for (draws
are i.i.d., so batching changes nothing but the cost; mutants of ``noise.as_scale`` change the
scale asked for). The ``source`` the code receives is a stand-in that only hands out child names
(each once, as ``RandomSource.spawn`` does) and cannot be drawn from.

Run with ``pytest -s tests/test_lowdim_audit.py`` to see the measured bounds. Typical values
(lower bounds at 95%; they move if the sampler's use of random bits changes):

    audit (declared eps)                       runs/side  correct  mutants
    moments S1, corner added, d=2 (2.5)        12000      2.378    noise x0.8: 2.712
    moments S2, corner added, d=2 (2.5)        12000      2.163    noise x0.8: 2.650
    moments S1+S2 jointly (5)                  12000      3.537    noise x0.8: 4.120 (no power)
    moments S1, corner moved to opposite (2.5) 8000       2.175    noise x0.8: 2.743;
                                                                   planned as add-remove
                                                                   (2000 runs): 3.849
    moments S2, same move (2.5)                8000       -0.002   (S2 does not move)
    lowdim dim 2, whole output (1)             600        -0.024   data-derived centre
                                                                   (150 runs): 2.988
      the published centre alone (1)           600        -0.012   2.988
      the subspace box (with basis) alone (1)  600        -0.024   2.988
      the points alone (1)                     600        -0.012   2.835
      noisy S1, S2 from the description        600        -0.012, -0.012 (eps 0.05, 0.25: no
                                                                   power at these epsilons)

Events chosen: the correct S1 and the mutants' S1/S2 pin eps on the all-entries tail events
({min_j y_j - s_j(X') >= k} or {max_j y_j - s_j(X) <= k}) or thresholds of the loss column; the
data-derived centre on {|centre - mean(X)| >= 0.15} (75 of 75 runs of X' vs 0 of X),
{|box shift - mean(X).V| >= 0.034} and {offset of mean(X) from the points' plane == 0} (68 of 75
vs 0: the other runs had fewer than three unclipped points). The noise x0.8 mutant has no power
on the whole pipeline against its declared eps: the moments carry 0.3 eps (0.375 eps mutated),
and the inner mechanism's 0.7 eps is seen only through post-processed points (the hierarchy's
final-output audit reaches 0.34 of 2.7), so it is audited on ``moments.release`` directly.

Replace and S2: moving a row q -> p changes S2's upper triangle by at most d(d+1) h^2 / 2 in L1,
the add/remove sensitivity, not twice it. With u = q - p, v = q + p: qq^T - pp^T =
(u v^T + v u^T) / 2 has entrywise L1 at most |u|_1 |v|_1 <= d^2 h^2 (|u_j| + |v_j| =
2 max(|q_j|, |p_j|) <= 2h), its diagonal q_j^2 - p_j^2 = u_j v_j at most d h^2, and the upper
triangle is half the sum. So under replace S2 gets twice the noise it needs and loses at most
eps_second / 2 for any move (conservative, not a leak); only S1 is audited for power there.
Run time: 26-40 s for the file (about 26 s of CPU) on 2 cores shared with other jobs.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from functools import cache

import numpy as np
import pytest

from dpsynth_cli.engine.rows import as_rows
from dpsynth_cli.mechanisms import hierarchy, lowdim, moments
from dpsynth_cli.privacy import noise
from dpsynth_cli.privacy.ledger import Ledger
from tests.audit import AuditResult, audit
from tests.test_privacy_audits import report, scale_as_scale, stream

H = 1 << (moments.STAT_BITS - 1)  # the largest |q_j| in grid units
UNIT = float(1 << moments.STAT_BITS)

# -- harness: the real code, the real sampler in bulk ------------------------------------------

REAL_MIXED = noise.discrete_laplace_mixed  # captured before any patch (the bulk draws use it)


class Spawns:
    """Stand-in for the ``RandomSource`` handed to the code under audit: ``spawn`` gives a child
    (each name at most once, as ``RandomSource.spawn``); it has no bits, so any draw that does not
    go through the pooled samplers fails loudly."""

    def __init__(self) -> None:
        self.names: set[str] = set()

    def spawn(self, name: str) -> Spawns:
        assert name not in self.names, f"stream {name!r} spawned twice"
        self.names.add(name)
        return Spawns()


class Pool:
    """Exact discrete Laplace draws of one side: the real sampler on one seeded stream, in bulk,
    per scale; calls are served in order (i.i.d. draws, so this is the same distribution)."""

    CHUNK = 1 << 15

    def __init__(self, source: noise.RandomSource) -> None:
        self.source = source
        self.pools: dict[Fraction, tuple[np.ndarray, int]] = {}

    def take(self, scale: Fraction, size: int) -> np.ndarray:
        arr, pos = self.pools.get(scale, (np.empty(0, dtype=np.int64), 0))
        if pos + size > arr.size:
            fresh = REAL_MIXED(self.source, [scale], [max(self.CHUNK, size)])
            arr, pos = np.concatenate([arr[pos:], fresh]), 0
        self.pools[scale] = (arr, pos + size)
        return arr[pos : pos + size].copy()

    def install(self, mp: pytest.MonkeyPatch) -> None:
        mp.setattr(noise, "discrete_laplace", lambda src, scale, size: self.take(scale, size))
        mp.setattr(
            noise,
            "discrete_laplace_mixed",
            lambda src, scales, sizes: np.concatenate(
                [self.take(s, n) for s, n in zip(scales, sizes, strict=True)]
            ),
        )


def loss_columns(y: np.ndarray, s_x: np.ndarray, s_xp: np.ndarray) -> np.ndarray:
    """Per run (rows of y, integers): sum_j |y_j - s_j(X)| - |y_j - s_j(X')| (the privacy loss
    times the scale), min_j y_j - s_j(X') and max_j y_j - s_j(X)."""
    a, b = y - s_x, y - s_xp
    return np.column_stack([(np.abs(a) - np.abs(b)).sum(axis=1), b.min(axis=1), a.max(axis=1)])


def true_sums(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    sums = moments.MomentSums.of(X)
    return sums.first, sums.second[np.triu_indices(X.shape[1])]


# -- 1. moments.release on neighbouring tables -------------------------------------------------

# eps 5/2 each: the 0.8 x mutant's true epsilon is eps / 0.8, a gap of eps / 4, while the
# all-entries tail events keep probabilities 1/4 (S1, 2 entries) and 1/8 (S2, 3 entries) under
# the larger side. Measured on a stand-in sampler, 5/2 gave the most reliable margin for both.
D = 2
EPS_FIRST = Fraction(5, 2)
EPS_SECOND = Fraction(5, 2)
UPPER = np.triu_indices(D)
CORNER = np.ones(D)
# add/remove: X' = X + CORNER. replace: row 0 (the corner 0) of REPLACE_X moved to CORNER.
ADD_X = np.array([[0.2, 0.7], [0.9, 0.1], [0.4, 0.4]])
REPLACE_X = np.array([[0.0, 0.0], [0.3, 0.8], [0.6, 0.2]])


def moment_pair(relation: str) -> tuple[np.ndarray, np.ndarray]:
    if relation == "add-remove":
        return ADD_X, np.vstack([ADD_X, CORNER])
    moved = REPLACE_X.copy()
    if relation == "replace":
        moved[0] = CORNER
        return REPLACE_X, moved
    # "replace-S2": the corner row moved to the centre, which moves S2 by its full replace
    # sensitivity d(d+1)h^2/2 (q q^T from h^2 everywhere to 0), the same as under add/remove
    moved[0], start = 0.5, REPLACE_X.copy()
    start[0] = CORNER
    return start, moved


def relation_ignored(mp: pytest.MonkeyPatch) -> None:
    """Mutant: both sensitivities computed as under add/remove whatever the relation."""
    first, second = moments.first_sensitivity, moments.second_sensitivity
    mp.setattr(moments, "first_sensitivity", lambda d, relation, r=None: first(d, "add-remove", r))
    mp.setattr(
        moments, "second_sensitivity", lambda d, relation, r=None: second(d, "add-remove", r)
    )


MOMENT_VARIANTS: dict[str, Callable[[pytest.MonkeyPatch], None] | None] = {
    "correct": None,
    "noise x0.8": lambda mp: scale_as_scale(mp, Fraction(4, 5)),
    "replace planned as add-remove": relation_ignored,
}


@cache
def moment_samples(variant: str, relation: str, n_runs: int) -> dict:
    """n_runs of ``moments.release`` per side: the noisy S1 and S2 (upper triangle)."""
    start = time.perf_counter()
    X, Xp = moment_pair(relation)
    out: dict = {"first": [], "second": []}
    with pytest.MonkeyPatch.context() as mp:
        if MOMENT_VARIANTS[variant] is not None:
            MOMENT_VARIANTS[variant](mp)
        for side, data in (("X", X), ("X'", Xp)):
            Pool(stream(f"lowdim-audit/moments/{variant}/{relation}/{side}")).install(mp)
            first = np.empty((n_runs, D), dtype=np.int64)
            second = np.empty((n_runs, UPPER[0].size), dtype=np.int64)
            for i in range(n_runs):
                ledger = Ledger(EPS_FIRST + EPS_SECOND, relation.removesuffix("-S2"))
                released = moments.release(data, EPS_FIRST, EPS_SECOND, Spawns(), ledger)
                first[i], second[i] = released.first, released.second[UPPER]
            out["first"].append(first)
            out["second"].append(second)
        out["scales"] = tuple(s.noise["scale_grid_units"] for s in ledger.spends)
        out["epsilons"] = tuple(s.epsilon for s in ledger.spends)
    out["seconds"] = time.perf_counter() - start
    return out


def declared_scales(relation: str, factor: Fraction = Fraction(1)) -> tuple[Fraction, Fraction]:
    """The scales the correct mechanism uses (S1, S2), in grid units; ``factor``: a mutant's."""
    relation = relation.removesuffix("-S2")
    return (
        noise.as_scale(Fraction(moments.first_sensitivity(D, relation)) / EPS_FIRST * factor),
        noise.as_scale(Fraction(moments.second_sensitivity(D, relation)) / EPS_SECOND * factor),
    )


S1_NAMES = ("S1 loss x scale", "S1 min y-s(X')", "S1 max y-s(X)")
S2_NAMES = ("S2 loss x scale", "S2 min y-s(X')", "S2 max y-s(X)")


def moment_audits(s: dict, relation: str, label: str) -> dict[str, AuditResult]:
    """Audits of S1 (vs eps_first), S2 (vs eps_second) and of the joint loss (vs their sum)."""
    X, Xp = moment_pair(relation)
    (f_x, s_x), (f_xp, s_xp) = true_sums(X), true_sums(Xp)
    one = [loss_columns(y, f_x, f_xp) for y in s["first"]]
    two = [loss_columns(y, s_x, s_xp) for y in s["second"]]
    sc1, sc2 = (float(x) for x in declared_scales(relation))
    joint = [a[:, 0] / sc1 + b[:, 0] / sc2 for a, b in zip(one, two, strict=True)]
    results = {
        "S1": audit(*one, names=S1_NAMES),
        "S2": audit(*two, names=S2_NAMES),
        "S1+S2": audit(*joint, names=("joint privacy loss",)),
    }
    for part, result in results.items():
        report(f"moments {part} d={D} {relation} {label}", result, s["seconds"])
    return results


DECLARED = {"S1": EPS_FIRST, "S2": EPS_SECOND, "S1+S2": EPS_FIRST + EPS_SECOND}
ADD_N = 12_000  # runs per side; S2's three entries need the most
REPLACE_N = 8_000
RELATION_N = 2_000


def test_the_neighbouring_tables_attain_the_sensitivities():
    """The designs are worst cases: the corner added moves S1 and S2 by their full add/remove
    sensitivities; the corner moved to the opposite one moves S1 by its replace sensitivity (and
    leaves S2 unchanged)."""
    (f_x, s_x), (f_xp, s_xp) = (true_sums(t) for t in moment_pair("add-remove"))
    assert (f_xp - f_x == H).all() and (s_xp - s_x == H * H).all()
    assert np.abs(f_xp - f_x).sum() == moments.first_sensitivity(D, "add-remove")
    assert np.abs(s_xp - s_x).sum() == moments.second_sensitivity(D, "add-remove")
    (f_x, s_x), (f_xp, s_xp) = (true_sums(t) for t in moment_pair("replace"))
    assert (f_xp - f_x == 2 * H).all() and (s_xp == s_x).all()
    assert np.abs(f_xp - f_x).sum() == moments.first_sensitivity(D, "replace")


def test_the_harness_runs_the_real_release():
    """The pooled sampler and the stand-in source give what a real run records (same steps,
    epsilons and scales), and the release's sums are the true ones plus integer noise."""
    X = ADD_X
    real = Ledger(EPS_FIRST + EPS_SECOND)
    moments.release(X, EPS_FIRST, EPS_SECOND, noise.RandomSource.seeded(1), real)
    pooled = Ledger(EPS_FIRST + EPS_SECOND)
    with pytest.MonkeyPatch.context() as mp:
        Pool(stream("lowdim-audit/harness")).install(mp)
        released = moments.release(X, EPS_FIRST, EPS_SECOND, Spawns(), pooled)
    assert [(s.step, s.epsilon, s.noise) for s in real.spends] == [
        (s.step, s.epsilon, s.noise) for s in pooled.spends
    ]
    assert [s.noise["scale_grid_units"] for s in pooled.spends] == [
        float(x) for x in declared_scales("add-remove")
    ]
    assert released.first.dtype == np.int64 and (released.second == released.second.T).all()


@pytest.mark.heavy
def test_moments_pass_the_audit_add_remove():
    s = moment_samples("correct", "add-remove", ADD_N)
    assert s["epsilons"] == (EPS_FIRST, EPS_SECOND)
    results = moment_audits(s, "add-remove", "correct")
    for part, result in results.items():
        result.assert_within(DECLARED[part])
    for part in ("S1", "S2"):  # power: the all-entries tail events pin each epsilon
        assert results[part].epsilon_lower > 0.75 * DECLARED[part]


@pytest.mark.heavy
def test_moments_noise_x08_fails_the_audit_add_remove():
    s = moment_samples("noise x0.8", "add-remove", ADD_N)
    mutant = declared_scales("add-remove", Fraction(4, 5))
    assert s["scales"] == tuple(float(x) for x in mutant)  # the mutant is live
    results = moment_audits(s, "add-remove", "noise x0.8")
    results["S1"].assert_exceeds(EPS_FIRST)
    results["S2"].assert_exceeds(EPS_SECOND)


@pytest.mark.heavy
def test_moments_replace_passes_and_its_mutants_fail():
    """Replace one row: S1 passes and pins eps_first; noise x0.8 and sensitivities planned as
    add/remove fail. (S2 does not move under this pair: its audit only has to pass.)"""
    good = moment_samples("correct", "replace", REPLACE_N)
    ok = moment_audits(good, "replace", "correct")
    for part, result in ok.items():
        result.assert_within(DECLARED[part])
    assert ok["S1"].epsilon_lower > 0.75 * EPS_FIRST
    x08 = moment_samples("noise x0.8", "replace", REPLACE_N)
    moment_audits(x08, "replace", "noise x0.8")["S1"].assert_exceeds(EPS_FIRST)
    half = moment_samples("replace planned as add-remove", "replace", RELATION_N)
    assert half["scales"] == tuple(float(x) for x in declared_scales("add-remove"))  # live
    moment_audits(half, "replace", "planned as add-remove")["S1"].assert_exceeds(EPS_FIRST)


# -- 2. the whole --dim 2 pipeline --------------------------------------------------------------

PIPE_D = 3
PIPE_DIM = 2
PIPE_EPS = Fraction(1)
# Public noisy row count, the same on both sides. Large enough that the private centre is never
# clipped into the cube (|noisy S1_j| < PIPE_NOISY_ROWS * h: the S1 noise would need 16 scales),
# so the description gives the noisy sums back exactly.
PIPE_NOISY_ROWS = 1000
# Few rows far apart, so that one row moves the true mean visibly: X' = X + the corner 1.
PIPE_X = np.array([[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
PIPE_ROW = np.ones(PIPE_D)
PIPE_XP = np.vstack([PIPE_X, PIPE_ROW])
EPS_SPLIT = lowdim.split(PIPE_EPS)  # (first, second, inner)


@dataclass(frozen=True)
class TrueCentre(moments.NoisyMoments):
    """The mutant's moments: the noisy sums as released, but the mean is the true one."""

    true_mean: np.ndarray | None = None

    def mean(self, noisy_rows: int) -> np.ndarray:
        assert self.true_mean is not None
        return self.true_mean


def data_derived_centre(mp: pytest.MonkeyPatch) -> None:
    """Mutant: the centre of the projection (and of the box, the way back and the description)
    is the true mean of X instead of the private one. Wraps ``moments.release`` as lowdim sees it;
    the noisy sums themselves are untouched."""
    real = moments.release

    class Mean:  # the true mean of the rows, read through a pass as the mechanisms read them
        def __init__(self) -> None:
            self.total, self.n = 0.0, 0

        def add(self, X: np.ndarray) -> None:
            self.total, self.n = self.total + X.sum(axis=0), self.n + X.shape[0]

    def leaky(X, *args, **kwargs):
        out = real(X, *args, **kwargs)
        mean = as_rows(X).collect(Mean)
        return TrueCentre(
            out.first, out.second, out.second_scale, out.first_scale, true_mean=mean.total / mean.n
        )

    mp.setattr(moments, "release", leaky)


PIPE_VARIANTS: dict[str, Callable[[pytest.MonkeyPatch], None] | None] = {
    "correct": None,
    "data-derived centre": data_derived_centre,
}


def recovered_sums(description: dict, noisy_rows: int) -> tuple[np.ndarray, np.ndarray]:
    """The noisy S1 and S2 (upper triangle, grid units) from the published description.

    centre = 1/2 + S1 / (n 2^b) (not clipped here); the covariance S2 / (n 4^b) - m1 m1^T is
    V diag(top spectrum) V^T + (last eigenvalue) (I - V V^T) when d' = d - 1."""
    centre = np.array(description["centre_unit_cube"])
    assert ((centre > 0) & (centre < 1)).all(), "clipped centre: S1 is not recoverable"
    n = max(noisy_rows, 1)
    first = np.rint((centre - 0.5) * (n * UNIT)).astype(np.int64)
    V = np.array(description["basis"]).T
    spectrum = np.array(description["noisy_spectrum"])
    d, k = V.shape
    assert k == d - 1
    cov = (V * spectrum[:k]) @ V.T + spectrum[k] * (np.eye(d) - V @ V.T)
    m1 = first / (n * UNIT)
    second = np.rint((cov + np.outer(m1, m1)) * (n * UNIT * UNIT)).astype(np.int64)
    return first, second[np.triu_indices(d)]


ROUNDING = 1e-12  # distances below this are float rounding (~1e-16 here): reported as 0


def exact_zero(x: float) -> float:
    return 0.0 if x < ROUNDING else x


def plane_offset(points: np.ndarray, point: np.ndarray) -> float:
    """Distance of ``point`` from the plane through the released points strictly inside the cube
    (those the final clipping did not move lie on centre + span(basis)); +inf if fewer than three
    interior points span a plane. Reads the points only."""
    inner = points[((points > 0) & (points < 1)).all(axis=1)]
    if len(inner) < 3:
        return np.inf
    mid = inner.mean(axis=0)
    _, sv, vt = np.linalg.svd(inner - mid, full_matrices=False)
    if sv[1] < 1e-9:
        return np.inf
    return exact_zero(float(abs((point - mid) @ vt[-1])))


PIPE_NAMES = (
    "S1 loss x scale (from centre)",
    "S2 loss x scale (from spectrum, basis)",
    "|centre - mean(X)|",
    "|box shift - mean(X).V|",
    "plane of the points: offset of mean(X)",
    "mean of the points' coordinate sums",
    "points near the added corner",
)


class PipeStats:
    def __init__(self) -> None:
        self.sums = [true_sums(PIPE_X), true_sums(PIPE_XP)]
        self.mean_x = PIPE_X.mean(axis=0)

    def __call__(self, out) -> tuple[float, ...]:
        desc = out.description
        first, second = recovered_sums(desc, PIPE_NOISY_ROWS)
        (f_x, s_x), (f_xp, s_xp) = self.sums
        l1 = loss_columns(first[None, :], f_x, f_xp)[0, 0]
        l2 = loss_columns(second[None, :], s_x, s_xp)[0, 0]
        centre = np.array(desc["centre_unit_cube"])
        V = np.array(desc["basis"]).T
        lo = np.array(desc["subspace_box"]["lower"])
        shift = np.minimum(V, 0).sum(axis=0) - lo  # = centre . V (lowdim.subspace_box)
        P = out.points
        return (
            float(l1),
            float(l2),
            exact_zero(float(np.abs(centre - self.mean_x).max())),
            exact_zero(float(np.abs(shift - self.mean_x @ V).max())),
            plane_offset(P, self.mean_x),
            float(P.sum(axis=1).mean()) if len(P) else -np.inf,
            float((P >= 0.75).all(axis=1).sum()),
        )


@cache
def pipe_samples(variant: str, n_runs: int) -> dict:
    """n_runs of ``lowdim.run`` (dim 2, inner hierarchy) per side: PipeStats columns."""
    start = time.perf_counter()
    stats = PipeStats()
    out: dict = {"stats": []}
    with pytest.MonkeyPatch.context() as mp:
        if PIPE_VARIANTS[variant] is not None:
            PIPE_VARIANTS[variant](mp)
        for side, data in (("X", PIPE_X), ("X'", PIPE_XP)):
            root = stream(f"lowdim-audit/pipeline/{variant}/{side}")
            Pool(root.spawn("noise")).install(mp)
            post = root.spawn("post").numpy_generator()
            rows = []
            for _ in range(n_runs):
                ledger = Ledger(PIPE_EPS)
                run = lowdim.run(
                    data,
                    epsilon=PIPE_EPS,
                    noisy_rows=PIPE_NOISY_ROWS,
                    relation="add-remove",
                    source=Spawns(),
                    ledger=ledger,
                    rng=post,
                    rows=None,
                    dim=PIPE_DIM,
                    inner=hierarchy.run,
                )
                assert run.description["dim"] == PIPE_DIM
                rows.append(stats(run))
            assert ledger.spent <= PIPE_EPS
            out["stats"].append(np.array(rows))
        out["steps"] = [(s.step, s.epsilon) for s in ledger.spends]
        out["last"] = run
    out["seconds"] = time.perf_counter() - start
    return out


PIPE_PARTS = {  # groups of PipeStats columns audited together
    "output": tuple(range(len(PIPE_NAMES))),
    "S1": (0,),
    "S2": (1,),
    "centre": (2,),
    "box": (3,),
    "points": (4, 5, 6),
}


def pipe_audits(s: dict, label: str, parts: tuple[str, ...]) -> dict[str, AuditResult]:
    """Audits of the chosen groups of PipeStats columns (PIPE_PARTS)."""
    a, b = s["stats"]
    results = {}
    for part in parts:
        c = PIPE_PARTS[part]
        results[part] = audit(a[:, c], b[:, c], names=[PIPE_NAMES[i] for i in c])
        report(f"lowdim dim=2 d=3 eps=1 {label}, {part}", results[part], s["seconds"])
    return results


PIPE_N = 600
PIPE_MUTANT_N = 150


def test_the_description_reveals_the_noisy_sums_exactly():
    """With a real seeded source: the sums recovered from the description are those released."""
    captured = []
    real = moments.release

    def capture(*args, **kwargs):
        captured.append(real(*args, **kwargs))
        return captured[-1]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(moments, "release", capture)
        run = lowdim.run(
            PIPE_XP,
            epsilon=PIPE_EPS,
            noisy_rows=PIPE_NOISY_ROWS,
            relation="add-remove",
            source=noise.RandomSource.seeded(5),
            ledger=Ledger(PIPE_EPS),
            rng=np.random.default_rng(5),
            rows=None,
            dim=PIPE_DIM,
            inner=hierarchy.run,
        )
    first, second = recovered_sums(run.description, PIPE_NOISY_ROWS)
    (released,) = captured
    assert (first == released.first).all()
    assert (second == released.second[np.triu_indices(PIPE_D)]).all()


@pytest.mark.heavy
def test_lowdim_pipeline_passes_the_audit():
    """The whole output (points and published description) within eps; the moments recovered
    from the description within the moment spends of the ledger."""
    s = pipe_samples("correct", PIPE_N)
    eps_first, eps_second, _ = EPS_SPLIT
    assert s["steps"][:2] == [("moments:first", eps_first), ("moments:second", eps_second)]
    results = pipe_audits(s, "correct", tuple(PIPE_PARTS))
    for part in ("output", "centre", "box", "points"):
        results[part].assert_within(PIPE_EPS)
    results["S1"].assert_within(eps_first)
    results["S2"].assert_within(eps_second)


@pytest.mark.heavy
def test_lowdim_pipeline_data_derived_centre_fails_the_audit():
    """Centre = true mean: caught through the published centre, through the subspace box (with
    the basis) and through the points alone."""
    s = pipe_samples("data-derived centre", PIPE_MUTANT_N)
    centre = np.array(s["last"].description["centre_unit_cube"])
    assert np.array_equal(centre, PIPE_XP.mean(axis=0))  # the mutant is live
    # (the S1 and S2 columns read the centre, which is no longer the noisy S1: not audited)
    parts = ("output", "centre", "box", "points")
    results = pipe_audits(s, "data-derived centre", parts)
    for part in parts:  # each of the centre, the box and the points alone reveals the leak
        results[part].assert_exceeds(PIPE_EPS)


@pytest.mark.heavy
def test_second_moments_under_replace_need_no_more_noise_than_add_remove():
    """S2 under replace is calibrated to the add/remove sensitivity (moments.py's proof): a row
    moved from a corner to the centre attains it, the audit passes, and noise x0.8 fails."""
    (_, s_x), (_, s_xp) = (true_sums(t) for t in moment_pair("replace-S2"))
    assert np.abs(s_xp - s_x).sum() == moments.second_sensitivity(D, "replace")
    good = moment_audits(moment_samples("correct", "replace-S2", ADD_N), "replace-S2", "correct")
    good["S2"].assert_within(EPS_SECOND)
    assert good["S2"].epsilon_lower > 0.75 * EPS_SECOND
    x08 = moment_samples("noise x0.8", "replace-S2", ADD_N)
    moment_audits(x08, "replace-S2", "noise x0.8")["S2"].assert_exceeds(EPS_SECOND)
