"""PrivTree on the binary hierarchical partition, with exact discrete noise.

An adaptive partition in the spirit of PrivTree (Zhang, Xiao & Xie, SIGMOD 2016): the tree of
the binary partition of [0,1]^d (`partition.py`: level j halves coordinate (j-1) mod d) is grown
top-down, each split decided by a *biased* noisy count against a threshold, so that the privacy
cost of the whole structure does not grow with its depth; then the leaves get noisy counts, and
points are placed in the leaves. This is a re-derivation for integer counts and discrete Laplace
noise (the paper's proof is for continuous Laplace noise); nothing here is copied from its code.

Algorithm (all parameters public, fixed by `plan` from epsilon, d, relation and the noisy row
count only):

1. Levels 0 .. s-1 are split unconditionally (a public "start" level s, no noise, no cost).
2. At level j = s + t (decision step t), every active node v with true count c(v) gets
   ``b(v) = max(c(v) - t*delta, theta - delta + 1)`` and ``y(v) = b(v) + Z_v``, Z_v discrete
   Laplace of scale lambda (P(z) ~ exp(-|z|/lambda)), all nodes of the level in one vectorised
   batch; v splits iff ``y(v) > theta``. Nodes at the maximum depth D are leaves without a
   decision. If a level's splits would take the tree above `MAX_LEAVES` leaves, no node of that
   level splits (a rule on released decisions only).
3. Every leaf of the tree T gets its count plus discrete Laplace noise of scale sens/eps_C.
4. Post-processing: clip at 0, zero the leaves whose noisy count is below ``zero_below`` (empty
   regions otherwise collect noise mass far from the data), optionally resample ``rows``, and
   place each leaf's points by a per-axis linear density whose slope is the central difference
   of the released densities (count / volume) one leaf width away on either side
   (`leaf_slopes`, `placement.py`), as low-discrepancy points. Only released values, the public
   geometry and `rng` are used. Output size (no `rows`): clipping and zeroing move the total away
   from the sum of the noisy leaf counts (unbiased for n); beyond 3 of its standard deviations
   and 5%, the sizes are rescaled to it (`base.settle_total`). Sizes with no mass are replaced by
   the uniform measure on the cube (`base.fill_empty`: `rows`, or the noisy count's rows).
   High d: only coordinates below min(d, D) can be halved (level j halves coordinate
   (j-1) mod d), so for d > D the other columns are uniform on [0, 1] in every leaf.

Privacy. Neighbouring relation add/remove one row (default): X' = X + {r}. The sensitivity of
every count is 1, and r changes the count of exactly one node per level: the nodes on its path.

*Structure (steps 1-2).* Given X, the decisions are independent, so P[T | X] is the product over
the decided nodes of T of P[outcome]. Only the decided nodes on r's path differ between X and X';
call them v_0, v_1, ... (decision steps 0, 1, ...), all split except possibly the last. Write
x_t = c(v_t) - t*delta for X; then x_{t+1} <= x_t - delta (counts do not grow down a path and the
bias grows by delta per step). Let p = exp(-1/lambda) and S(m) = P[Z >= m], so S(m) = p^m/(1+p)
for m >= 1 and S(-m) = 1 - p^(m+1)/(1+p) for m >= 0. Node v_t splits iff Z > theta - b.

(a) X' over X. A "no split" outcome is less likely under X' (b' >= b). A split of v_t costs
    rho_t = log S(theta + 1 - b'_t) / S(theta + 1 - b_t):
    - x_t <= theta - delta: b_t = b'_t = theta - delta + 1 (the clamp), rho_t = 0;
    - theta - delta + 1 <= x_t <= theta: rho_t = log S(theta - x_t)/S(theta - x_t + 1) = 1/lambda;
    - x_t >= theta + 1, u = x_t - theta: rho_t = log(1 + p^u (1-p)/(1 + p - p^u)) <= (1-p) p^u.
    The x_t are integers falling by >= delta per step: at most one lies in the window of delta
    integers [theta-delta+1, theta], and those above theta have u >= 1, 1+delta, 1+2 delta, ...
    So  log P[T|X']/P[T|X] <= 1/lambda + (1-p) p / (1 - p^delta) =: eps_add.
(b) X over X'. Splits are less likely under X; the one "no split" on the path costs at most
    log P[Z <= m]/P[Z <= m-1] <= 1/lambda (a unit shift of discrete Laplace noise).
So T is eps_add-DP, whatever its (data dependent) shape and number of noise draws: the proof
conditions on T and charges only r's path. (Formally the raw decisions are released and T is a
function of them: the leaf cap turns raw splits of a level into leaves by a rule on that level's
released decisions, which changes neither (a) nor (b). Undecided nodes, forced splits above s and
forced leaves at D, cost nothing.) tests/test_privtree.py checks the path bound numerically by
dynamic programming over all non-increasing count sequences, with `biased_counts` itself (a clamp
one lower, theta - delta, lets two steps cost 1/lambda and breaks the bound when delta = 1), and
audits the release under add/remove and replace.
`structure_epsilon` bounds eps_add from above in exact rationals: 1 - p <= min(1/lambda,
1 - L(1/lambda)), p <= 1/E(1/lambda) and p^delta <= 1/E(delta/lambda), where E(u) =
sum_{k<=12} u^k/k! <= e^u and L(u) = sum_{k<=13} (-u)^k/k! <= e^-u (Taylor with an odd last
degree). `plan` picks lambda (on the 2^-20 grid, rounded up) so that
this bound is at most the structure's share eps_T, and records eps_T.

Replace one row (X' = X - {a} + {b}): through Y = X - {a}, log P[T|X]/P[T|X'] =
log P[T|Y+a]/P[T|Y] + log P[T|Y]/P[T|Y+b] <= eps_add + 1/lambda (and symmetrically), so lambda
is fitted to eps_add + 1/lambda <= eps_T.

*Leaf counts (step 3).* The leaves of T partition [0,1]^d, so given T one row changes one leaf
count by 1 (two counts under replace): discrete Laplace of scale sens/eps_C is eps_C-DP. By
adaptive sequential composition the release (T, noisy leaf counts) is (eps_T + eps_C)-DP with
eps_T + eps_C equal to the mechanism's epsilon exactly; both spends are in the ledger. Step 4
is post-processing. Noise comes only from `privacy.noise` with exact Fraction scales; the draws
are one batch per level plus one for the leaves (sizes are functions of T, which is released).

Level columns first (issue 15). With `Rows.lead` (boolean/category columns and missing flags,
public from the schema) the tree grows on the partition that splits those first (`partition`);
the proof above needs only that every level partitions the cube and one row lies in one cell per
level, so it holds unchanged. Before the tree, `marginals.SHARE` of epsilon releases each
splittable column's one-column histogram (`marginals`: sensitivity 1 per histogram, sequential
composition, its own ledger spend); the structure and the leaf counts share the rest as above.
Placement draws a leaf side wider than a histogram cell from that histogram (post-processing).

Parameters (`POLICY`, chosen on benchmarks, functions of public d, epsilon and noisy count n^):
with eps_C n^ = m and the grid level g = d log2(m)/(d+1) (the level of the uniform grid with
m^(1/(d+1)) cells per axis): start s = round(start * g), threshold theta = round(theta_rel *
n^ / 2^g) (a fraction of that grid's mean cell count), delta = round(ln 2 * lambda) (so an empty
node splits with probability about 1/4 and false splits die out: two children, each 1/4),
structure share eps_T = structure * eps (10-35%: structure is pure overhead on smooth data), max
depth D = min(60, d ceil(log2 m)), zero_below = 1.5 count-noise scales.

Accuracy: no a-priori W1 bound (the tree is data dependent; PrivTree's guarantees are for range
counting); `w1_bound` is None. Measured (mean exact W1, L-inf, 5 seeded runs, n = 2000 and 20000,
eps 0.1-2, d = 1-3) against the uniform grid (k = round((eps n)^(1/(d+1))) per axis, full eps,
true n) and the PMM: geometric-mean ratio to the better peer 0.61 over 104 cells, <= 0.8 in 72;
0.3-0.6 on clustered, skewed and real tables; 0.85-1.4 on a smooth ring+blob, where an adaptive
structure has nothing to find and costs its epsilon share. The linear in-leaf density (instead of
stratified uniform points) lowered mean W1 by 2-27% (geometric mean 9%) on 24 cells of the
benchmark tables at n = 2000, most on smooth ones; no cell got worse.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from fractions import Fraction
from functools import partial
from typing import Any

import numpy as np

from dpsynth_cli.engine import threads
from dpsynth_cli.engine.rows import BatchesSource, Rows, Spill, SpillSource, as_rows
from dpsynth_cli.mechanisms import daily, marginals, partition, placement
from dpsynth_cli.mechanisms.base import (
    MechanismRun,
    Output,
    Place,
    discrete_laplace_variance,
    fill_empty,
    resample_counts,
    settle_total,
)
from dpsynth_cli.privacy import noise
from dpsynth_cli.privacy.ledger import EPS_GRID, Ledger, Spend, histogram_sensitivity

MAX_DEPTH = 60  # leaf codes are int64 (at most 62 bits here)
PASS_BITS = 24  # one statistics pass counts at most 2^24 cells (128 MiB dense): `NodeCounts`
MAX_LEAVES = 1 << 22  # bounds memory: a level whose splits would pass it splits nothing
EXP_TERMS = 12  # Taylor terms of the rational lower bound on e^u
GAMMA = math.log(2)  # delta / lambda
ZERO_BELOW = 1.5  # leaves with noisy count below this many count-noise scales are emptied

# d -> (structure share of epsilon, start level / grid level, theta / grid cell count)
POLICY: dict[int, tuple[float, float, float]] = {
    1: (0.1, 0.7, 1.0),
    2: (0.35, 0.5, 0.0),
    3: (0.35, 0.8, 0.0),
}


def exp_lower(u: Fraction, terms: int = EXP_TERMS) -> Fraction:
    """sum_{k <= terms} u^k / k!, a rational lower bound on e^u for u >= 0."""
    total = term = Fraction(1)
    for k in range(1, terms + 1):
        term = term * u / k
        total += term
    return total


def exp_neg_lower(u: Fraction, terms: int = EXP_TERMS) -> Fraction:
    """sum_{k <= terms+1} (-u)^k / k! (an odd last degree), a rational lower bound on e^-u.

    Taylor's remainder after an odd degree is e^-xi u^(2m+2)/(2m+2)! >= 0 for u >= 0.
    """
    degree = terms + 1 if terms % 2 == 0 else terms
    total = term = Fraction(1)
    for k in range(1, degree + 1):
        term = -term * u / k
        total += term
    return total


def structure_epsilon(scale: Fraction, bias: int, relation: str) -> Fraction:
    """Exact rational upper bound on the epsilon of the tree structure (module docstring).

    add/remove: 1/lambda + (1-p) p/(1-p^delta) with p = e^(-1/lambda), bounded by rationals:
    1 - p <= min(1/lambda, 1 - exp_neg_lower(1/lambda)), p <= 1/E(1/lambda) and
    p^delta <= 1/E(delta/lambda), E = exp_lower. Replace adds 1/lambda.
    """
    if scale <= 0 or bias < 1:
        raise ValueError("need lambda > 0 and delta >= 1")
    inv = 1 / Fraction(scale)
    one_minus_p = min(inv, 1 - exp_neg_lower(inv))
    q = 1 / exp_lower(inv)
    q_delta = 1 / exp_lower(bias * inv)
    add = inv + one_minus_p * q / (1 - q_delta)
    return add + inv if relation == "replace" else add


def _smallest_scale(eps_structure: Fraction, bias: int, relation: str) -> Fraction:
    """About the smallest lambda (2^-20 grid) with structure_epsilon(lambda, bias) <= share."""
    lo = noise.as_scale(1 / eps_structure)  # the bound exceeds 1/lambda: infeasible
    hi = noise.as_scale(4 / eps_structure)
    while structure_epsilon(hi, bias, relation) > eps_structure:
        hi = noise.as_scale(2 * hi)
    for _ in range(40):  # bisection; every candidate is checked exactly
        mid = noise.as_scale((lo + hi) / 2)
        if mid >= hi:
            break
        if structure_epsilon(mid, bias, relation) <= eps_structure:
            hi = mid
        else:
            lo = mid
    return hi


def fit_scale(eps_structure: Fraction, relation: str) -> tuple[Fraction, int, Fraction]:
    """(lambda, delta, bound) with bound = structure_epsilon(lambda, delta) <= eps_structure.

    delta is the integer nearest to GAMMA * lambda among floor/ceil of a first estimate; the
    bound is rounded up to the 2^-40 grid (still <= eps_structure, which lies on the 2^-20 grid).
    """
    guess = (1 + 1 / (1 - math.exp(-GAMMA)) + (relation == "replace")) / float(eps_structure)
    best = None
    for bias in {max(1, math.floor(GAMMA * guess)), max(1, math.ceil(GAMMA * guess))}:
        lam = _smallest_scale(eps_structure, bias, relation)
        miss = abs(math.log(bias / float(lam) / GAMMA))
        if best is None or miss < best[0]:
            best = (miss, lam, bias)
    _, lam, bias = best
    exact = structure_epsilon(lam, bias, relation)
    grid = 1 << 40
    bound = Fraction(-(-exact.numerator * grid // exact.denominator), grid)
    assert bound <= eps_structure
    return lam, bias, bound


@dataclass(frozen=True)
class PrivTreePlan:
    """Public parameters of one run (everything the report says about the mechanism)."""

    d: int
    relation: str
    epsilon: Fraction
    structure_epsilon: Fraction
    count_epsilon: Fraction
    scale: Fraction  # lambda
    bias: int  # delta
    threshold: int  # theta
    start: int  # first decision level
    max_depth: int  # D
    count_scale: Fraction
    count_sensitivity: int
    structure_bound: Fraction  # exact bound on the structure's epsilon, <= structure_epsilon
    zero_below: float
    lead: partition.Lead = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "name": "privtree",
            "algorithm": "PrivTree-style adaptive binary partition (Zhang, Xiao & Xie 2016), "
            "re-derived for discrete Laplace noise",
            "split_order": partition.split_order_text(self.lead),
            "structure_epsilon": float(self.structure_epsilon),
            "count_epsilon": float(self.count_epsilon),
            "split_noise_scale": float(self.scale),
            "bias_per_level": self.bias,
            "threshold": self.threshold,
            "start_level": self.start,
            "max_depth": self.max_depth,
            "leaf_cap": MAX_LEAVES,
            "count_noise_scale": float(self.count_scale),
            "noise": "discrete Laplace, exact rational scales",
            "post_processing": f"clip at 0, zero leaves below {self.zero_below:g} count scales, "
            "a linear density per leaf (central differences of released densities), "
            "low-discrepancy points",
        }


def plan(
    noisy_n: int,
    epsilon: Fraction,
    d: int,
    relation: str,
    *,
    structure: float | None = None,
    start: float | None = None,
    theta_rel: float | None = None,
    threshold: int | None = None,
    max_depth: int | None = None,
    zero_below: float = ZERO_BELOW,
    lead: partition.Lead = (),
) -> PrivTreePlan:
    """Fix every parameter from public quantities only (epsilon, d, relation, noisy count).

    The keyword overrides exist for tuning and tests; `run` uses the defaults of `POLICY`.
    """
    sens = histogram_sensitivity(relation)
    epsilon = Fraction(epsilon)
    pol = POLICY.get(d, POLICY[3])
    share = pol[0] if structure is None else structure
    eps_t = Fraction(max(1, math.floor(Fraction(share) * epsilon * EPS_GRID)), EPS_GRID)
    if not 0 < eps_t < epsilon:
        raise ValueError("the structure share must leave both steps a positive epsilon")
    eps_c = epsilon - eps_t
    lam, bias, bound = fit_scale(eps_t, relation)
    count_scale = noise.as_scale(Fraction(sens) / eps_c)
    m = max(float(eps_c) * max(noisy_n, 1), 2.0)
    if max_depth is None:  # the lead bits, then every other coordinate to the grid of m cells
        depth = sum(lead) + (d - len(lead)) * math.ceil(math.log2(m))
        depth = partition.depth_limit(d, lead, min(MAX_DEPTH, depth))
    else:
        depth = max_depth
    grid_level = d * math.log2(m) / (d + 1)
    s = min(depth, max(0, round((pol[1] if start is None else start) * grid_level)))
    if threshold is None:
        rel = pol[2] if theta_rel is None else theta_rel
        threshold = round(rel * max(noisy_n, 1) / 2**grid_level)
    return PrivTreePlan(
        d,
        relation,
        epsilon,
        eps_t,
        eps_c,
        lam,
        bias,
        int(threshold),
        s,
        int(depth),
        count_scale,
        sens,
        bound,
        zero_below,
        tuple(lead),
    )


def clamp_floor(pt: PrivTreePlan) -> int:
    """theta - delta + 1, the lowest biased count: at most one step of a path lies in the window
    [floor, theta] where a split costs 1/lambda (module docstring, (a)); one lower, two can."""
    return pt.threshold - pt.bias + 1


def biased_counts(counts: np.ndarray, step: int, pt: PrivTreePlan) -> np.ndarray:
    """b = max(c - step*delta, theta - delta + 1): the clamp makes low counts cost nothing."""
    return np.maximum(counts - step * pt.bias, clamp_floor(pt))


class CodedCounts:
    """A pass's node counts (`partition.SubtreeCounts`) fed with each row's cell at the deepest
    level any plan reaches (`deep`), which it also writes to a spill when they lie inside its
    roots: the next pass reads those codes instead of the rows (the nodes still splitting lie
    inside the roots). The counts are the same integers as from the rows; the threads of a pass
    each count and spill their own, which merge (the next pass reads codes in any order)."""

    ANY_ORDER = True

    def __init__(self, counts: partition.SubtreeCounts, deep: int) -> None:
        self.counts, self.deep = counts, deep
        self.spill = Spill(np.int64)

    def add(self, X: np.ndarray) -> None:
        self.add_codes(partition.leaf_codes(X, self.deep, self.counts.lead))

    def add_codes(self, codes: np.ndarray) -> None:
        h = self.counts
        inside = h.add_codes(codes >> (self.deep - h.top - h.k))
        self.spill.add(codes if inside is None else codes[inside])

    def merge(self, other: CodedCounts) -> CodedCounts:
        self.counts.merge(other.counts)
        self.spill.merge(other.spill)
        return self


def deepest(d: int, lead: partition.Lead) -> int:
    """The deepest level any plan can reach (`plan`'s D is at most this)."""
    return partition.depth_limit(d, lead, MAX_DEPTH)


@dataclass
class FirstHistogram:
    """The rows per cell at level PASS_BITS of the whole cube: every count NodeCounts' first
    pass needs (whatever the plan: levels start..min(D, PASS_BITS) of every cell), so synth can
    accumulate it in its first pass, before the noisy count fixes the plan (`Rows.ahead`).
    With `spill` (a local pass over streamed input) the cell codes go to a spill as well
    (`CodedCounts`): no later pass reads, parses or encodes the input (issue 27)."""

    ANY_ORDER = True

    d: int
    lead: partition.Lead = ()
    spill: bool = False
    counts: partition.SubtreeCounts | None = field(init=False)
    coded: CodedCounts | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        roots = np.zeros(1, dtype=np.int64)
        k = partition.depth_limit(self.d, self.lead, PASS_BITS)
        self.counts = partition.SubtreeCounts(roots, 0, k, self.d, self.lead)
        if self.spill:
            self.coded = CodedCounts(self.counts, deepest(self.d, self.lead))

    @property
    def codes(self) -> Spill | None:
        return None if self.coded is None else self.coded.spill

    def add(self, X: np.ndarray) -> None:
        (self.coded or self.counts).add(X)

    def merge(self, other: FirstHistogram) -> FirstHistogram:
        self.counts.merge(other.counts)
        if self.coded is not None and other.coded is not None:
            self.coded.spill.merge(other.coded.spill)
        return self

    def take(self) -> partition.SubtreeCounts:
        """The histogram, handed over once (its memory goes with the pass that uses it)."""
        counts, self.counts = self.counts, None
        if counts is None:
            raise RuntimeError("FirstHistogram was already used")
        if self.coded is not None:  # its spill stays for the next pass
            self.coded.counts = None
        return counts


class NodeCounts:
    """Exact row counts of the tree's nodes, from as few statistics passes as memory allows.

    A pass (`partition.SubtreeCounts`) counts the rows in every cell k levels below the nodes
    active at some level, with len(active) * 2^k <= 2^PASS_BITS entries; it answers the next k
    levels of decisions, then the next pass starts from the nodes still splitting. On a tree of
    depth at most PASS_BITS that is one pass whatever the data; deeper trees (D up to MAX_DEPTH)
    take more passes only where nodes keep splitting. The counts are exactly the rows in each
    node, so the release has the same law (and, seeded, the same values) as counting sorted
    depth-D codes in memory; the number of passes depends only on the released split decisions.

    On streamed rows (a local pass), a pass that may have a successor also spills the cell codes
    inside its roots (`CodedCounts`), and the next pass reads those instead of the rows: the
    rows are read and encoded once, and each pass reads fewer codes than the one before.
    """

    def __init__(self, rows: Rows, max_depth: int) -> None:
        self.rows = rows
        self.max_depth = max_depth
        self.hist: partition.SubtreeCounts | None = None
        self.codes: Spill | None = None  # the previous pass's codes, if it spilled them
        self.deep = deepest(rows.d, rows.lead)
        self.local = isinstance(rows.source, (BatchesSource, SpillSource))

    def __call__(self, cells: np.ndarray, level: int) -> np.ndarray:
        h = self.hist
        first = self.rows.ahead_of(FirstHistogram)
        if h is None and first is not None:
            if level <= PASS_BITS:
                # The first pass asks for every cell at the start level down to level
                # min(D, PASS_BITS): the whole-cube histogram at PASS_BITS answers them.
                self.hist = h = first.take()
            self._keep(first.codes)  # every row's codes
        if h is None or level > h.top + h.k:
            room = PASS_BITS - max(int(cells.size - 1).bit_length(), 0)
            k = max(1, min(self.max_depth - level, room)) if level < self.max_depth else 0
            rows = self.rows
            make = partial(partition.SubtreeCounts, np.sort(cells), level, k, rows.d, rows.lead)
            if self.codes is not None:
                coded = threads.collect(
                    self.codes.batches(),
                    lambda: CodedCounts(make(), self.deep),
                    CodedCounts.add_codes,
                )
                self._keep(coded.spill)
                h = coded.counts
            elif self.local and level + k < self.max_depth <= self.deep:
                coded = self.rows.collect(lambda: CodedCounts(make(), self.deep))
                self._keep(coded.spill)
                h = coded.counts
            else:
                h = self.rows.collect(make)
            self.hist = h
        return h.counts(cells, level)

    def _keep(self, spill: Spill | None) -> None:
        """The codes the next pass reads: the newest complete spill, the old one dropped."""
        self.close()
        if spill is not None and spill.ok and self.max_depth <= self.deep:
            self.codes = spill
        elif spill is not None:
            spill.close()

    def close(self) -> None:
        """Drop the spilled codes (the tree is grown, or a newer pass spilled)."""
        if self.codes is not None:
            self.codes.close()
            self.codes = None


def grow(
    rows: Rows, pt: PrivTreePlan, source: noise.RandomSource
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Steps 1-2 on the rows in [0,1]^d: the leaves of T as (codes at their level, levels), and
    each leaf's exact row count (for step 3).

    One loop iteration per level, never per node or row; one noise batch per decision level.
    """
    D = pt.max_depth
    counter = NodeCounts(rows, D)
    active = np.zeros(1, dtype=np.int64)
    leaf_codes, leaf_levels, leaf_counts = [], [], []
    n_leaves = 0
    for j in range(D + 1):
        if j < pt.start:
            split = np.ones(active.size, dtype=bool)
        else:
            counts = counter(active, j)
            if j == D:
                split = np.zeros(active.size, dtype=bool)
            else:
                b = biased_counts(counts, j - pt.start, pt)
                split = b + noise.discrete_laplace(source, pt.scale, active.size) > pt.threshold
        if n_leaves + active.size + int(split.sum()) > MAX_LEAVES:
            split[:] = False  # depends on released decisions only
        done = active[~split]
        leaf_codes.append(done)
        leaf_levels.append(np.full(done.size, j, dtype=np.int64))
        leaf_counts.append(counts[~split] if j >= pt.start else np.zeros(0, dtype=np.int64))
        n_leaves += done.size
        parents = active[split]
        active = np.stack([2 * parents, 2 * parents + 1], axis=1).reshape(-1)
        if active.size == 0:
            break
    counter.close()
    return np.concatenate(leaf_codes), np.concatenate(leaf_levels), np.concatenate(leaf_counts)


@dataclass(frozen=True)
class Release:
    """What the DP steps release: the leaves of T and their noisy counts."""

    leaves: np.ndarray  # code of each leaf at its own level
    levels: np.ndarray
    noisy_counts: np.ndarray  # int64, may be negative


def release(
    X: Rows | np.ndarray, pt: PrivTreePlan, source: noise.RandomSource, ledger: Ledger
) -> Release:
    """Steps 1-3: the tree T (eps_T) and its noisy leaf counts (eps_C), both spends recorded."""
    ledger.record(
        Spend(
            step="privtree-structure",
            mechanism="PrivTree split decisions on biased noisy counts (Zhang, Xiao & Xie 2016), "
            "proof redone for discrete Laplace noise",
            epsilon=pt.structure_epsilon,
            sensitivity=pt.count_sensitivity,
            noise={
                "distribution": "discrete Laplace",
                "scale": float(pt.scale),
                "scale_exact": str(pt.scale),
                "bias_per_level": pt.bias,
                "threshold": pt.threshold,
                "start_level": pt.start,
                "max_depth": pt.max_depth,
                "epsilon_bound_exact": str(pt.structure_bound),
            },
        )
    )
    leaves, levels, true = grow(as_rows(X), pt, source)
    ledger.record(
        Spend(
            step="privtree-counts",
            mechanism="noisy counts of the leaves of the PrivTree partition",
            epsilon=pt.count_epsilon,
            sensitivity=pt.count_sensitivity,
            noise={"distribution": "discrete Laplace", "scale": float(pt.count_scale)},
            released={"leaf_cells": int(leaves.size)},
        )
    )
    noisy = true + noise.discrete_laplace(source, pt.count_scale, leaves.size)
    return Release(leaves, levels, noisy)


def leaf_sizes(
    rel: Release, pt: PrivTreePlan, rng: np.random.Generator, rows: int | None
) -> np.ndarray:
    """Post-processing: clip at 0, empty leaves below the zeroing threshold, resample `rows`."""
    m = np.maximum(rel.noisy_counts, 0)
    m[m < pt.zero_below * float(pt.count_scale)] = 0
    return resample_counts(m, rows, rng)


def leaf_boxes(
    leaves: np.ndarray, levels: np.ndarray, d: int, lead: partition.Lead = ()
) -> tuple[np.ndarray, np.ndarray]:
    """Lower corner and side lengths (both (k, d)) of every leaf; one pass per distinct level."""
    lower = np.zeros((leaves.size, d))
    width = np.ones((leaves.size, d))
    for j in np.unique(levels):
        at = levels == j
        bits = partition.bits_per_coordinate(int(j), d, lead)
        side = np.exp2(-bits.astype(np.float64))
        lower[at] = partition.cell_grid_index(leaves[at], int(j), d, lead) * side
        width[at] = side
    return lower, width


def leaf_slopes(
    leaves: np.ndarray,
    levels: np.ndarray,
    sizes: np.ndarray,
    lower: np.ndarray,
    width: np.ndarray,
    max_depth: int,
    lead: partition.Lead = (),
) -> np.ndarray:
    """Per-axis relative slopes (k, d) of each leaf's linear density: central differences of the
    released densities (size / volume) found one leaf width away on either side (the leaf that
    holds that point, by binary search over the leaves' Morton intervals); a face of the cube
    counts as the leaf itself. Level columns (the first len(lead)) get no slope: their axis is
    a list of levels, where a neighbour is no nearer than any other level."""
    k, d = lower.shape
    density = sizes / np.prod(width, axis=1)
    starts = leaves << (max_depth - levels)  # leaves tile the depth-D Morton codes in intervals
    order = np.argsort(starts)
    sorted_starts = starts[order]
    centre = lower + width / 2.0
    slopes = np.zeros((k, d))
    for c in range(len(lead), d):
        side = []
        for step in (-1.0, 1.0):
            probe = centre.copy()
            probe[:, c] += step * width[:, c]
            outside = (probe[:, c] < 0.0) | (probe[:, c] >= 1.0)
            np.clip(probe, 0.0, 1.0, out=probe)
            codes = partition.leaf_codes(probe, max_depth, lead)
            hit = np.searchsorted(sorted_starts, codes, "right")
            side.append(np.where(outside, density, density[order[hit - 1]]))
        slopes[:, c] = placement.relative_slope(side[0], density, side[1])
    return slopes


def place_points(
    leaves: np.ndarray,
    levels: np.ndarray,
    sizes: np.ndarray,
    pt: PrivTreePlan,
    rng: np.random.Generator,
) -> np.ndarray:
    """sizes[i] points in leaf i under its linear density (`placement`), in random order."""
    return placer(leaves, levels, sizes, pt)(np.arange(sizes.size), sizes, rng)


def splittable(pt: PrivTreePlan) -> int:
    """How many leading columns the tree can halve: min(d, D), or with lead columns those and
    the first D - sum(lead) others (the rest are uniform in every leaf)."""
    lead = pt.lead
    return len(lead) + min(pt.d - len(lead), max(pt.max_depth - sum(lead), 0))


def placer(
    leaves: np.ndarray,
    levels: np.ndarray,
    sizes: np.ndarray,
    pt: PrivTreePlan,
    shapes: dict[int, placement.Pooled] | None = None,
    days: tuple[daily.DailyShape, ...] = (),
) -> Place:
    """How points go into the leaves (final `sizes`): a linear density per leaf (`placement`),
    random order; `Output` calls it once, or once per batch of (leaves, sizes). `shapes`: per
    column, the density a side wider than its cells draws from (`marginals`).

    Boxes and slopes are computed on the `splittable` columns (the same geometry as on all d),
    and the other columns, which every leaf spans, are uniform on [0, 1] (`uniform_columns`).
    """
    cut = splittable(pt)
    lower, width = leaf_boxes(leaves, levels, cut, pt.lead)
    slopes = leaf_slopes(leaves, levels, sizes, lower, width, pt.max_depth, pt.lead)

    def place(cells: np.ndarray, counts: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        box = [np.take(a, cells, axis=0) for a in (lower, width, slopes)]  # faster than a[cells]
        points = placement.place_in_boxes(*box, counts, rng, shapes)
        if days:  # a date-time's time of day and weekday in leaves that span days (`daily`)
            at = placement.point_cells(counts)
            for shape in days:
                c = shape.clock.column
                if c < cut:
                    side = (np.take(box[0][:, c], at), np.take(box[1][:, c], at))
                    shape.apply(points, *side, rng)
        return placement.uniform_columns(placement.shuffled(points, rng), pt.d, rng)

    return place


def run(
    X: Rows | np.ndarray,
    *,
    epsilon: Fraction,
    noisy_rows: int,
    relation: str,
    source: noise.RandomSource,
    ledger: Ledger,
    rng: np.random.Generator,
    rows: int | None,
) -> MechanismRun:
    """Plan from public quantities, release (T, noisy leaf counts), place points. With level
    columns (`X.lead`), `marginals.SHARE` of epsilon first measures the splittable columns'
    histograms, which shape the wide leaves; the tree runs on the rest."""
    X = as_rows(X)
    shares = marginals.share(epsilon) if X.lead else Fraction(0)
    clocks = daily.shaped(X.clocks)
    day_share = daily.share(epsilon) if clocks else Fraction(0)
    pt = plan(noisy_rows, epsilon - shares - day_share, X.d, relation, lead=X.lead)
    rel = release(X, pt, source, ledger)
    sizes = leaf_sizes(rel, pt, rng, rows)
    if rows is None:  # the sum of the noisy leaf counts is unbiased for n (a partition)
        sd = math.sqrt(rel.leaves.size * discrete_laplace_variance(pt.count_scale))
        sizes = settle_total(sizes, float(rel.noisy_counts.sum()), sd, rng)
    sizes = fill_empty(sizes, rows, noisy_rows, rng, np.exp2(-rel.levels.astype(np.float64)))
    description = pt.to_json() | {"leaf_cells": int(rel.leaves.size)}
    shapes = None
    if X.lead:
        mp = marginals.plan(shares, X.lead, splittable(pt), noisy_rows, relation, X.flagged)
        shapes = marginals.release(X, mp, source, ledger)
        description["marginals"] = mp.to_json()
    days: tuple[daily.DailyShape, ...] = ()
    if clocks:
        dp = daily.plan(day_share, clocks, noisy_rows, relation)
        days = daily.release(X, dp, source.spawn("time-of-day"), ledger)
        description["time_of_day"] = dp.to_json()
    place = placer(rel.leaves, rel.levels, sizes, pt, shapes, days)
    return MechanismRun(
        output=Output(sizes, place, copy.deepcopy(rng), pt.d),
        description=description,
        guarantee="none a-priori: the PrivTree partition is data dependent and no W1 bound is "
        "proved for it (accuracy is measured, not guaranteed)",
        w1_bound=None,
    )
