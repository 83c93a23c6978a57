"""`online-replay --mechanism marginals`: the marginals mechanism released continually (issue 25).

The offline `marginals` mechanism (`mechanisms.pairs`) measures one-way and two-way histograms;
histograms are counts, so the Binary Mechanism (dissertation ch. 5) releases them on a stream.

Public before any row is read (no --state: the whole run is one stream): the K checkpoints of
this run (`replay._stops`, from the flags and the public timeline), the planning size n
(`replay.planning_size`: the row count of the last checkpoint, whose release has exactly n rows;
with --row-counts-public the number of rows at the end, declared public; never the rows after
the last checkpoint, which are not released), eps, the relation and the schema. From them alone:
- every attribute's grid (`mechanisms.attributes`, release grid for n), eps_1 for the one-way
  histograms (pairs' ONE_WAY / ONE_WAY_LOW rule with n), eps_2 = eps - eps_1 for the two-way
  histograms of EVERY pair of attributes (P = D(D-1)/2 pairs: no private selection), and the
  bins per attribute (`pairs.bins_at` for n and the final release's noise);
- the tree of nodes (`Schedule`): segment i is the rows between checkpoints i-1 and i; a node
  (l, a) is the dyadic block of segments a 2^l + 1 .. (a + 1) 2^l, for levels l <= h; the release
  at checkpoint k sums the nodes of [1, k]'s greedy dyadic decomposition. h = floor(log2 K) is
  the Binary Mechanism; h = 0 sums the segments one by one. h is chosen to minimise the worst
  checkpoint's noise variance, m^2 * (nodes summed), m = the most nodes one segment is in: for
  fewer than a few hundred checkpoints that is h = 0 (m = 1, k nodes at checkpoint k; the
  binary tree's m = log2 K + 1 multiplies every node's scale), beyond, the binary tree.

Measured (all noise from `privacy.noise`, discrete Laplace): when a node's last segment ends,
each of its D one-way histograms (value grid) gets Lap_Z(sens D m / eps_1) on every cell and
each of its P two-way histograms (on the bins) Lap_Z(sens P m / eps_2). The bins are fixed at
the first checkpoint from its released one-way counts (post-processing; `pairs.coarse_bins`).

Privacy. Neighbouring streams (PRIVACY_MODEL): add-remove, one time slot holds the row or is
empty (a row with a missing value in a non-nullable column is counted nowhere, an empty slot);
replace, the row's values change. The row lies in one segment, so in at most m nodes (the
nodes a segment is in are fixed by K and h only); in each node it adds or removes 1 in one cell
of each of the D + P histograms (add-remove: L1 sensitivity sens = 1 per histogram; replace: 2,
`ledger.histogram_sensitivity`). Node noise of scale sens D m / eps_1 on each one-way histogram
makes the m D one-way histograms the row is in (eps_1 / (m D))-DP each: eps_1 together (basic
composition); the same for the two-way ones: eps_2. The bins and the node schedule depend only
on public facts and released values. So all releases of the run are (eps_1 + eps_2) = eps-DP,
exact in rational arithmetic (tests/test_online_marginals.py). Every release is post-processing
of the noisy nodes: the one-way counts made consistent (`pairs.consistent_one_way`), the
marginals mixed (`pairs.combined_marginals`), every pair's table fitted (`pairs.fit_pairs`), a
maximum spanning tree of the fitted tables' distances from independence and second parents
chosen from them (no budget: every pair is released), the model built and sampled
(`pairs.build_model`, `tree_model`), with exactly t rows (public), the schema's constraints by
rejection (`mechanisms.conditioned`).

Without --state only: a state would continue the stream with more checkpoints than the first
run planned, which the fixed node schedule does not cover (a usage error says so).
Accuracy: no a-priori W1 bound (as the offline mechanism); measured in docs/benchmarks.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from fractions import Fraction
from functools import cached_property
from itertools import combinations
from typing import Any

import numpy as np
import pyarrow as pa

from dpsynth_cli.mechanisms import pairs, tree_model
from dpsynth_cli.mechanisms.attributes import attributes
from dpsynth_cli.mechanisms.base import Output, discrete_laplace_variance
from dpsynth_cli.mechanisms.conditioned import Rules, conditioned
from dpsynth_cli.online.cube import StreamCube
from dpsynth_cli.privacy import noise
from dpsynth_cli.privacy.ledger import Ledger, Spend, histogram_sensitivity

# Measured on seattle-weather and flights (docs/benchmarks.md): the continual noise leaves
# coarser bins than offline, and a copula link on 2-3 bins still keeps most of a strong
# correlation between two numbers (temp_max-temp_min: error 0.38 -> 0.03).
LINK_BINS = 2
CELL_NOISE = 1.5  # a pair's cells hold about this many noise deviations each (offline: 4)
# Two-way cells are only clipped at 0 before the fit (offline: below 1 deviation set to 0): on
# 2-3 bins a zeroed cell makes a table look deterministic and its copula link saturate
# (seattle seed 2: precipitation's correlations off by 0.55 -> 0.24).
FIT_FLOOR = 0.0

Node = tuple[int, int]  # (level l, index a): segments a 2^l + 1 .. (a + 1) 2^l


def decomposition(k: int, top: int) -> list[Node]:
    """Prefix [1, k] of segments as dyadic blocks of levels <= top, largest first: k >> top
    blocks of the top level, then one block of level l < top for each bit l set in k."""
    out = [(top, a) for a in range(k >> top)]
    pos = (k >> top) << top
    for level in range(top - 1, -1, -1):
        if k >> level & 1:
            out.append((level, pos >> level))
            pos += 1 << level
    return out


@dataclass(frozen=True)
class Schedule:
    """Which noisy nodes each checkpoint sums (public: K and the top level only)."""

    checkpoints: int  # K
    top: int  # h

    def used(self, node: Node) -> bool:
        """Whether some release k <= K sums the node: a top-level block inside [1, K], or a
        lower block (l, a) with a even (bit l of k set) inside [1, K]."""
        level, a = node
        return (a + 1) << level <= self.checkpoints and (level == self.top or a % 2 == 0)

    def sums(self, k: int) -> list[Node]:
        return decomposition(k, self.top)

    def nodes_of(self, i: int) -> list[Node]:
        """The used nodes segment i (1-based) is in."""
        mine = [(lv, (i - 1) >> lv) for lv in range(self.top + 1)]
        return [n for n in mine if self.used(n)]

    @cached_property
    def per_row(self) -> int:
        """m: the most nodes one row is counted in (the scale's factor)."""
        return max((len(self.nodes_of(i)) for i in range(1, self.checkpoints + 1)), default=1)

    def worst(self) -> int:
        """The worst checkpoint's variance in units of a single measurement's."""
        mask = (1 << self.top) - 1
        summed = max(
            ((k >> self.top) + (k & mask).bit_count() for k in range(1, self.checkpoints + 1)),
            default=1,
        )
        return self.per_row**2 * summed

    @staticmethod
    def end(node: Node) -> int:
        """The segment after which the node is complete (and noised)."""
        level, a = node
        return (a + 1) << level


def schedule(checkpoints: int) -> Schedule:
    """The top level h with the smallest worst-checkpoint variance (ties: the lower)."""
    options = [Schedule(checkpoints, h) for h in range(max(checkpoints, 1).bit_length())]
    return min(options, key=lambda s: (s.worst(), s.top))


def noise_factor(checkpoints: int) -> float:
    """The noise standard deviation of the last release's counts in units of a single
    release's at the same eps (K = 1, as synth's one release): every node is measured at
    `per_row` times a single release's scale and the last checkpoint sums `sums(K)` of them,
    so m sqrt(nodes summed). Public: K only (the shares and grids cancel out)."""
    if checkpoints <= 1:
        return 1.0
    sched = schedule(checkpoints)
    return sched.per_row * math.sqrt(len(sched.sums(checkpoints)))


@dataclass(frozen=True)
class ContinualPlan(pairs.Plan):
    """`pairs.Plan` with every pair measured in `per_row` nodes, a release summing `summed`."""

    per_row: int = 1
    summed: int = 1
    measured: int = 0  # two-way histograms per node: every pair

    @property
    def measurements(self) -> int:
        return self.measured

    @property
    def one_way_scale(self) -> Fraction:
        d = len(self.attributes)
        return noise.as_scale(Fraction(self.sensitivity * d * self.per_row) / self.one_way)

    @property
    def pair_scale(self) -> Fraction:
        m = max(self.measured, 1) * self.per_row
        return noise.as_scale(Fraction(self.sensitivity * m) / max(self.pairs, Fraction(1, 2**40)))

    @property
    def one_way_variance(self) -> float:
        return self.summed * discrete_laplace_variance(self.one_way_scale)

    @property
    def pair_variance(self) -> float:
        return self.summed * discrete_laplace_variance(self.pair_scale)


def continual_plan(epsilon: Fraction, rows: int, cube: StreamCube, relation: str, sched: Schedule):
    """Shares, grids and bins from eps, the public planning size `rows` (`replay.planning_size`:
    the last checkpoint's row count, or the count at the end if declared public), the schema
    and K."""
    dom = cube.domain
    sens = histogram_sensitivity(relation)
    base = attributes(
        dom.cube_dim,
        dom.lead_bits(),
        dom.cube_codes(),
        dom.cube_flags(),
        dom.cube_coded_missing(),
        dom.cube_clocks(),
    )
    count = len(base)
    n = max(rows, 1)
    low = float(epsilon) * n / (sens * count) < pairs.ONE_WAY_SIGNAL
    one_way = (
        epsilon
        if count <= 1
        else pairs._share(epsilon, pairs.ONE_WAY_LOW if low else pairs.ONE_WAY)
    )
    worst = sched.worst()
    signal = float(one_way) / count * n / sens / math.sqrt(worst)
    attrs = tuple(a.with_size(signal) for a in base)
    measured = count * (count - 1) // 2
    mp = ContinualPlan(
        epsilon, one_way, Fraction(0), epsilon - one_way, sens, attrs, pairs.MIN_BINS, 0,
        per_row=sched.per_row, summed=worst // sched.per_row**2, measured=measured,
    )  # fmt: skip
    if count <= 1:
        return mp
    bins = pairs.bins_at(n, mp.pair_variance, CELL_NOISE)
    extras = count - 2 if bins >= pairs.SECOND_PARENT_BINS else 0
    return replace(mp, bins=bins, extras=extras)


@dataclass
class MarginalsEngine:
    """The continual marginals mechanism over one run's checkpoints (secret state in memory)."""

    cube: StreamCube
    epsilon: Fraction
    relation: str
    t: int = 0
    plan: ContinualPlan | None = None
    sched: Schedule | None = None
    ends: list[int] = field(default_factory=list)  # the checkpoints' row counts (segment ends)
    closed: int = 0  # segments closed so far
    _segment: pairs.PairCounts | None = None
    _open: dict[Node, pairs.PairCounts] = field(default_factory=dict)
    _one: dict[Node, list[np.ndarray]] = field(default_factory=dict)  # noisy one-way per node
    _two: dict[Node, dict[tuple[int, int], np.ndarray]] = field(default_factory=dict)
    _bins: list[np.ndarray] | None = None  # coarse cell -> bin, fixed at the first checkpoint
    _source: noise.RandomSource | None = None
    # spawned from _source by `prepare`: the bins' post-processing, the two noise streams
    _bins_rng: np.random.Generator | None = None
    _one_src: noise.RandomSource | None = None
    _two_src: noise.RandomSource | None = None

    def use(self, source: noise.RandomSource) -> None:
        self._source = source

    def prepare(self, stops: list[int], rows: int) -> None:
        """Fix the node schedule and the plan from the run's checkpoints and planning size
        (`replay.planning_size`; both public)."""
        self.ends = sorted({t for t in stops if t > self.t})
        self.sched = schedule(len(self.ends))
        self.plan = continual_plan(self.epsilon, rows, self.cube, self.relation, self.sched)
        self._segment = pairs.PairCounts(self.plan.attributes)
        self._bins_rng = self._source.spawn("bins").numpy_generator()
        self._one_src = self._source.spawn("one-way")
        self._two_src = self._source.spawn("two-way")

    # -- rows -----------------------------------------------------------------------------------
    def feed(self, X: np.ndarray, stops: list[int] | None = None, on_stop=None) -> None:
        """Consume rows X (cube points, stream order); close a segment at each checkpoint."""
        stops = sorted(s for s in (stops or []) if self.t < s <= self.t + X.shape[0])
        i = 0
        for s in stops:
            self._add(X[i : i + s - self.t])
            i += s - self.t
            self.t = s
            if s in self.ends:
                self._close()
            if on_stop is not None:
                on_stop(s)
        self._add(X[i:])
        self.t += X.shape[0] - i

    def _add(self, X: np.ndarray) -> None:
        if self.closed >= len(self.ends):
            return  # after the last checkpoint: never released
        X = X[~np.isnan(X).any(axis=1)][:, : self.cube.domain.cube_dim]
        if X.shape[0]:
            self._segment.add(X)

    def _close(self) -> None:
        """End segment i: add it to its nodes; noise the nodes it completes."""
        self.closed += 1
        i = self.closed
        for node in self.sched.nodes_of(i):
            held = self._open.get(node)
            self._open[node] = _copy(self._segment) if held is None else held.merge(self._segment)
        done = [n for n in self.sched.nodes_of(i) if Schedule.end(n) == i]
        for node in done:
            self._one[node] = self._noisy_one_way(self._open[node])
        if self._bins is None:
            self._bins = self._fix_bins()
        for node in done:
            self._two[node] = self._noisy_two_way(self._open.pop(node))
        self._segment = pairs.PairCounts(self.plan.attributes)

    def _noisy_one_way(self, counts: pairs.PairCounts) -> list[np.ndarray]:
        mp = self.plan
        exact = [
            np.bincount(a.atom_value(), weights=c, minlength=a.values).astype(np.int64)
            for a, c in zip(mp.attributes, counts.one_way, strict=True)
        ]
        return pairs.add_noise(exact, mp.one_way_scale, self._one_src)

    def _fix_bins(self) -> list[np.ndarray]:
        """Bins from the first checkpoint's released one-way counts (post-processing)."""
        mp = self._at(1)
        one_way = pairs.consistent_one_way(self._summed_one_way(1), mp, self._bins_rng)
        return [
            pairs.coarse_bins(a, m, mp.bins) for a, m in zip(mp.attributes, one_way, strict=True)
        ]

    def _noisy_two_way(self, counts: pairs.PairCounts) -> dict[tuple[int, int], np.ndarray]:
        mp = self.plan
        pair_bin = [b[a.pair_coarse()] for a, b in zip(mp.attributes, self._bins, strict=True)]
        k = [int(b.max()) + 1 for b in self._bins]
        tables = pairs.binned_tables(counts.two_way, pair_bin, k)
        return pairs.measure(tables, list(counts.two_way), mp, self._two_src)

    # -- releases -------------------------------------------------------------------------------
    def _at(self, k: int) -> ContinualPlan:
        return replace(self.plan, summed=len(self.sched.sums(k)))

    def _summed_one_way(self, k: int) -> list[np.ndarray]:
        nodes = self.sched.sums(k)
        return [sum(self._one[n][a] for n in nodes) for a in range(len(self.plan.attributes))]

    def table(self, rng: np.random.Generator, rules: Rules | None) -> pa.Table:
        """The release at the current checkpoint: exactly t rows (post-processing)."""
        dom = self.cube.domain
        k = self.closed
        if k == 0 or self.t == 0:
            return dom.from_unit(np.zeros((0, len(self.cube.specs))))
        mp = self._at(k)
        attrs = mp.attributes
        noisy_one = self._summed_one_way(k)
        one_way = pairs.consistent_one_way(noisy_one, mp, rng)
        value_bin = [b[a.value_coarse()] for a, b in zip(attrs, self._bins, strict=True)]
        kb = [int(b.max()) + 1 for b in self._bins]
        nodes = self.sched.sums(k)
        noisy = {e: sum(self._two[n][e] for n in nodes) for e in combinations(range(len(attrs)), 2)}
        total = float(self.t)
        marg = pairs.combined_marginals(noisy_one, value_bin, kb, noisy, mp)
        fitted = pairs.fit_pairs(noisy, marg, total, mp, FIT_FLOOR)
        model = _model(mp, dom.cube_dim, value_bin, one_way, marg, fitted, total)
        output = Output(np.array([self.t], dtype=np.int64), model, rng, dom.cube_dim)
        if self.cube.lead:
            output = output.map(dom.cube_to_unit, len(self.cube.specs))
        if rules is not None:
            output = conditioned(output, rules)
        return dom.from_unit(np.concatenate(list(output.batches())))

    # -- report ---------------------------------------------------------------------------------
    def ledger(self) -> Ledger:
        mp = self.plan
        ledger = Ledger(self.epsilon, self.relation)
        parts = [("one-way", mp.one_way, mp.one_way_scale, len(mp.attributes))]
        if mp.measured:
            parts.append(("two-way", mp.pairs, mp.pair_scale, mp.measured))
        for name, eps, scale, count in parts:
            ledger.record(
                Spend(
                    step=f"online-marginals:{name}",
                    mechanism=f"noisy {name} histograms of every "
                    f"{'column' if name == 'one-way' else 'column pair'} in every node of the "
                    "checkpoints' dyadic tree (online/marginals)",
                    epsilon=eps,
                    sensitivity=mp.sensitivity,
                    noise={
                        "distribution": "discrete Laplace",
                        "scale": float(scale),
                        "histograms_per_node": count,
                        "nodes_per_row": mp.per_row,
                        "composition": "a row is in at most nodes_per_row nodes and one cell of "
                        "each histogram there: sequential over them, eps / (histograms x "
                        "nodes_per_row) each; every release is post-processing",
                    },
                )
            )
        return ledger

    def to_json(self) -> dict[str, Any]:
        mp, sched = self.plan, self.sched
        return {
            **mp.to_json(),
            "name": "online marginals: every one-way and two-way histogram released "
            "continually by dyadic nodes over the checkpoints (online/marginals)",
            "epsilon_total": float(self.epsilon),
            "neighbouring_relation": self.relation,
            "pairs_measured": mp.measured,
            "two_way_noise_scale": float(mp.pair_scale) if mp.measured else None,
            "second_parents_at_most": mp.extras,
            "selection": "post-processing: a maximum spanning tree of the released (fitted) "
            "pair tables' L1 distance from independence, then second parents, at each release",
            "node_schedule": {
                "checkpoints": sched.checkpoints,
                "top_level": sched.top,
                "nodes_per_row": sched.per_row,
                "rule": "top level minimising nodes_per_row^2 x the most nodes a checkpoint "
                "sums (0: segments summed one by one; floor(log2 K): the Binary Mechanism)",
            },
        }


def _copy(counts: pairs.PairCounts) -> pairs.PairCounts:
    out = pairs.PairCounts(counts.attributes)
    return out.merge(counts)


def _model(mp, d, value_bin, one_way, marg, fitted, total) -> tree_model.TreeModel:
    """A tree (and second parents) chosen from the released fitted tables, and its model."""
    D = len(mp.attributes)

    def table(a: int, b: int) -> np.ndarray:
        return fitted[(a, b)] if a < b else fitted[(b, a)].T

    score = {e: float(np.abs(fitted[e] - total * np.outer(marg[e[0]], marg[e[1]])).sum())
             for e in fitted}  # fmt: skip
    component, edges = list(range(D)), []
    for e in sorted(score, key=lambda e: (-score[e], e)):
        if component[e[0]] != component[e[1]]:
            edges.append(e)
            old, new = component[e[1]], component[e[0]]
            component = [new if c == old else c for c in component]
    order, parent = tree_model.bfs_order(edges, D)
    joints = {(parent[a], a): table(parent[a], a) for a in order if parent[a] >= 0}
    both = {**fitted, **{(b, a): t.T for (a, b), t in fitted.items()}}
    pairs_, gains = pairs.second_candidates(both, joints, order, parent)
    candidates = sorted(((g, c, b) for (c, b), g in zip(pairs_, gains, strict=True)), reverse=True)
    chosen: dict[int, int] = {}
    for gain, c, b in candidates:
        if len(chosen) < mp.extras and c not in chosen and gain > 0:
            chosen[c] = b
    extra = {(b, c): table(b, c) for c, b in chosen.items()}
    return pairs.build_model(
        mp.attributes, d, value_bin, one_way, marg, order, parent, joints, extra, LINK_BINS
    )
