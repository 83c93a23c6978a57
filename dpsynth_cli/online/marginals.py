"""`online-replay --mechanism marginals`: the marginals mechanism released continually (issues
25, 39), continued across runs with --state.

The offline `marginals` mechanism (`mechanisms.pairs`) measures one-way and two-way histograms;
histograms are counts, so a tree of noisy nodes (dissertation ch. 5) releases them on a stream.
Issue 39: the node schedule no longer needs the number of checkpoints in advance, so a state
continues it; the pairs it measures are chosen privately once and reused.

Public facts (never a raw count): the stream's checkpoints, each with its row count (a release
at t holds t rows); eps (the stream's declared total: a continued state must have the same);
the relation, the schema; whether the stream has a --state (a flag); and the planning size n of
the run that makes the stream's FIRST release (`replay.planning_size`: its last checkpoint's row
count, or with --row-counts-public its count at the end). From them alone, once, at the
stream's first checkpoint (`stream_plan`, stored in the state as its n): every attribute's grid,
the shares eps_1 (one-way), eps_S (selection), eps_2 = eps - eps_1 - eps_S (two-way), the bins
per attribute, R (the two-way histograms measured: tree edges and second parents), and the
selection checkpoint: the first checkpoint with at least `select_at` rows (`SELECT_SIGNAL`:
eps_S t / (sens R) rows' worth of signal per selection round, or a quarter of n if fewer). A
--state stream is planned for n at least HORIZON x those rows, so neither its plan nor its
selection depends on how small its first run was.

The unbounded schedule (`schedule.EpochSchedule`): segment i is the rows between the stream's
checkpoints i-1 and i, numbered across runs. Epoch j holds the segments 2^j .. 2^(j+1) - 1 (2^j
of them: a size known when the epoch begins, whatever the number of checkpoints to come), and
inside it the dyadic schedule that `schedule(2^j)` picks for 2^j checkpoints (h = 0, the
segments one by one, for epochs up to 2^10 segments; the Binary Mechanism's tree beyond).
Release k sums the nodes of every complete epoch's whole and of its own epoch's prefix. A row
lies in one segment, so in one epoch and in at most m_j = `schedule(2^j).per_row` of its nodes.
This is the hybrid mechanism (Chan, Shi & Song 2011) with the epochs' totals read from their own
trees; for fewer than about 2,000 checkpoints it is exactly the segments one by one, which the
bounded rule picked too.

Selection (issue 39, item 2), once: until the selection checkpoint c, nodes measure one-way
histograms only and every pair's exact two-way counts of the rows so far are kept (secret, in the
state). At c: the bins are fixed from the released one-way sums at c (post-processing); permute-
and-flip (`pairs.select_tree`, `pairs.select_seconds`, R rounds at eps_S / R, the offline scores)
chooses the tree and second parents on the prefix's tables; the R chosen tables of the prefix are
measured as one node at scale sens R / eps_2. From then on each node measures only those R pairs
(for the rows after c), at scale sens R m_j / (eps_2 + eps_S). The choice is stored in the state
and reused by every later run (post-processing of the selection's output).

Privacy (PRIVACY_MODEL; add-remove: sens = 1 per histogram, replace: 2). A row before c (or at
c): one-way, in m_j nodes, D histograms each at scale sens D m_j / eps_1: eps_1; selection: each
round's score moves by at most sens, R rounds at eps_S / R: eps_S; the prefix node, R histograms
at sens R / eps_2: eps_2. A row after c: one-way eps_1; in m_j nodes, R pair histograms each at
scale sens R m_j / (eps_2 + eps_S): eps_2 + eps_S; it is in no selection and no prefix node.
Each row: eps_1 + eps_S + eps_2 = eps exactly (rational arithmetic; tests/
test_online_marginals.py), for the whole stream across all runs: the schedule, c, the grids, the
bins, R and the scales depend only on the public facts above and released values, and no row is
counted in a node twice (a run continuing the state finishes the open segment and nodes with the
rows the state kept). Releases are post-processing of the noisy nodes: the one-way counts made
consistent (`pairs.consistent_one_way`), the marginals mixed (`pairs.combined_marginals`), the
chosen tables fitted (`pairs.fit_pairs`) and the model built and sampled (`pairs.build_model`) on
the chosen tree and second parents; before c, the columns independent (the one-way releases only);
exactly t rows (public); the schema's constraints by rejection (`mechanisms.conditioned`).
Accuracy: no a-priori W1 bound (as the offline mechanism); measured in docs/benchmarks.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any

import numpy as np
import pyarrow as pa

from dpsynth_cli.mechanisms import pairs, tree_model
from dpsynth_cli.mechanisms.attributes import attributes
from dpsynth_cli.mechanisms.base import Output, discrete_laplace_variance
from dpsynth_cli.mechanisms.conditioned import Rules, conditioned
from dpsynth_cli.online.cube import StreamCube
from dpsynth_cli.online.schedule import EpochNode, EpochSchedule
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
SELECT = Fraction(1, 10)  # eps_S: the share of the selection (offline's)
# The selection checkpoint (issue 39, measured on flights: docs/benchmarks.md). A round of
# permute-and-flip at eps_S / R picks the pair furthest from independence when the score gap,
# about t x (its L1 gap per row), is well above sens R / eps_S: the first checkpoint with
# eps_S t / (sens R) >= SELECT_SIGNAL (`select_at`), or with a quarter of the planning size if
# fewer. At 1,024 flights (0.15 of that) the tree missed dep_delay-arr_delay in 2 of 3 seeds,
# also without any Laplace noise (their correlation 0.04 against 0.91); at 8,192 (1.2) it is
# chosen in every seed.
SELECT_SIGNAL = 50.0
# A stream continued with --state is planned for at least HORIZON x select_at rows (its size
# when three quarters of its rows are measured after the selection), not for its first run's
# planning size alone: a first run of 4,096 flights would fix 6 bins for a stream of 32,768.
HORIZON = 4
# The plan's grids and bins take a release to sum about this many nodes' noise (public).
SUMMED = 4
GRID_SUMMED = 1  # the grids as offline synth's for n rows (measured: docs/benchmarks.md)


@dataclass(frozen=True)
class StreamPlan(pairs.Plan):
    """`pairs.Plan` of the stream (fixed at its first checkpoint), with the selection's
    threshold; `v1`, `v2`: a release's cell variances (sums of its nodes')."""

    rows: int = 0  # the planning size n that fixed it
    select_at: int = 0  # the selection checkpoint: the first with at least this many rows
    v1: float = 0.0
    v2: float = 0.0

    @property
    def after(self) -> Fraction:
        """The pair budget of a row after the selection checkpoint: eps_2 + eps_S."""
        return self.pairs + self.select

    def one_scale(self, m: int) -> Fraction:
        return noise.as_scale(Fraction(self.sensitivity * len(self.attributes) * m) / self.one_way)

    def prefix_scale(self) -> Fraction:
        return noise.as_scale(Fraction(self.sensitivity * max(self.measurements, 1)) / self.pairs)

    def node_pair_scale(self, m: int) -> Fraction:
        return noise.as_scale(
            Fraction(self.sensitivity * max(self.measurements, 1) * m) / self.after
        )

    @property
    def one_way_variance(self) -> float:
        return self.v1 or discrete_laplace_variance(self.one_scale(1)) * SUMMED

    @property
    def pair_variance(self) -> float:
        return self.v2 or discrete_laplace_variance(self.node_pair_scale(1)) * SUMMED


def base_attributes(cube: StreamCube) -> tuple:
    dom = cube.domain
    return attributes(
        dom.cube_dim,
        dom.lead_bits(),
        dom.cube_codes(),
        dom.cube_flags(),
        dom.cube_coded_missing(),
        dom.cube_clocks(),
    )


def stream_plan(
    epsilon: Fraction, rows: int, cube: StreamCube, relation: str, continued: bool = False
) -> StreamPlan:
    """Shares, grids, bins, R and the selection threshold from eps, the planning size `rows`
    of the run making the stream's first release (`replay.planning_size`), the schema and the
    relation: public facts only. `continued` (a --state stream): planned for at least HORIZON x
    its selection checkpoint's rows (the plan's `rows` is then that size; `from_state` replans
    from it with `continued` False and gets the same plan)."""
    mp = _plan_for(epsilon, rows, cube, relation)
    while continued and mp.measurements and mp.rows < HORIZON * select_rows(mp):
        # R (and so select_rows) only grows with the rows (second parents come with more
        # bins): the fixed point is the same from any first run's size below it
        mp = _plan_for(epsilon, HORIZON * select_rows(mp), cube, relation)
    return mp


def select_rows(mp: StreamPlan) -> int:
    """The rows at which the selection has SELECT_SIGNAL (public: the plan's eps_S, R, sens)."""
    return math.ceil(SELECT_SIGNAL * mp.sensitivity * max(mp.rounds, 1) / float(mp.select))


def _plan_for(epsilon: Fraction, rows: int, cube: StreamCube, relation: str) -> StreamPlan:
    sens = histogram_sensitivity(relation)
    base = base_attributes(cube)
    count = len(base)
    n = max(rows, 1)
    low = float(epsilon) * n / (sens * count) < pairs.ONE_WAY_SIGNAL
    if count <= 1:
        one_way, select = epsilon, Fraction(0)
    else:
        one_way = pairs.share_of(epsilon, pairs.ONE_WAY_LOW if low else pairs.ONE_WAY)
        select = pairs.share_of(epsilon, SELECT)
    signal = float(one_way) / count * n / sens / math.sqrt(GRID_SUMMED)
    attrs = tuple(a.with_size(signal) for a in base)
    mp = StreamPlan(
        epsilon, one_way, select, epsilon - one_way - select, sens, attrs, pairs.MIN_BINS, 0,
        rows=n,
    )  # fmt: skip
    if count <= 1:
        return mp
    extras = count - 2
    bins = pairs.bins_at(n, replace(mp, extras=extras).pair_variance, CELL_NOISE)
    if bins < pairs.SECOND_PARENT_BINS:
        extras = 0
        bins = pairs.bins_at(n, mp.pair_variance, CELL_NOISE)
    mp = replace(mp, bins=bins, extras=extras)
    return replace(mp, select_at=min(select_rows(mp), max(n // 4, 1)))


# The state's arrays (`arrays`, `from_state`): exact counts and noisy nodes by these names.
def _key(node: EpochNode) -> str:
    return ".".join(map(str, node))


def _node(key: str) -> EpochNode:
    j, lv, a = (int(x) for x in key.split("."))
    return j, lv, a


@dataclass
class MarginalsEngine:
    """The continual marginals mechanism of one stream (secret state in memory and in --state):
    open segment and nodes (exact counts), the noisy nodes, the bins and the chosen pairs."""

    cube: StreamCube
    epsilon: Fraction
    relation: str
    t: int = 0
    closed: int = 0  # segments closed (the stream's checkpoints so far)
    last_end: int = 0  # the row count at the last closed segment's end
    plan: StreamPlan | None = None
    select_segment: int = 0  # c, once the selection is made
    tree: list[tuple[int, int]] = field(default_factory=list)  # (parent, child)
    seconds: list[tuple[int, int]] = field(default_factory=list)  # (second parent, child)
    bins: list[np.ndarray] | None = None  # coarse cell -> bin, fixed at c
    _segment: pairs.PairCounts | None = None
    _prefix: pairs.PairCounts | None = None  # every row until c (exact; dropped at c)
    _open_one: dict[EpochNode, list[np.ndarray]] = field(default_factory=dict)  # exact atoms
    _open_two: dict[EpochNode, dict[tuple[int, int], np.ndarray]] = field(default_factory=dict)
    _one: dict[EpochNode, list[np.ndarray]] = field(default_factory=dict)  # noisy one-way
    _two: dict[EpochNode, dict[tuple[int, int], np.ndarray]] = field(default_factory=dict)
    _two_prefix: dict[tuple[int, int], np.ndarray] = field(default_factory=dict)
    _source: noise.RandomSource | None = None
    _rng: np.random.Generator | None = None  # post-processing inside the mechanism (bins)

    def __post_init__(self) -> None:
        self._base = base_attributes(self.cube)
        if self._segment is None:
            self._segment = pairs.PairCounts(self._base)
        if self._prefix is None and not self.select_segment:
            self._prefix = pairs.PairCounts(self._base)

    @property
    def sched(self) -> EpochSchedule:
        return EpochSchedule()

    def use(self, source: noise.RandomSource) -> None:
        self._source = source
        self._rng = source.spawn("bins").numpy_generator()

    def begin(self, rows: int, continued: bool = False) -> None:
        """This run's planning size (`replay.planning_size`, public) and whether the stream has
        a --state (public: the flags): they fix the plan if the stream has made no release yet."""
        self._rows = rows
        self._continued = continued

    def _spawn(self, what: str, node: EpochNode | None = None) -> noise.RandomSource:
        return self._source.spawn(what if node is None else f"{what}:{_key(node)}")

    # -- rows -----------------------------------------------------------------------------------
    def feed(self, X: np.ndarray, stops: list[int] | None = None, on_stop=None) -> None:
        """Consume rows X (cube points, stream order); `on_stop(t)` at each stop inside them
        (the caller's release closes the segment there: `checkpoint`)."""
        stops = sorted(s for s in (stops or []) if self.t < s <= self.t + X.shape[0])
        i = 0
        for s in stops:
            self._add(X[i : i + s - self.t])
            i += s - self.t
            self.t = s
            if on_stop is not None:
                on_stop(s)
            else:
                self.checkpoint(s)
        self._add(X[i:])
        self.t += X.shape[0] - i

    def _add(self, X: np.ndarray) -> None:
        X = X[~np.isnan(X).any(axis=1)][:, : self.cube.domain.cube_dim]
        if X.shape[0]:
            self._segment.add(X)

    def checkpoint(self, t: int) -> None:
        """A checkpoint at t = the rows so far: close the segment since the last one."""
        if t != self.t or t <= self.last_end and self.closed:
            return
        if self.plan is None:
            rows = getattr(self, "_rows", 0) or t
            continued = getattr(self, "_continued", False)
            self.plan = stream_plan(self.epsilon, rows, self.cube, self.relation, continued)
        self.closed += 1
        self.last_end = t
        i = self.closed
        seg = self._segment
        before = not self.select_segment  # the segment's pairs go to the prefix
        if before:
            self._prefix.merge(seg)
        for node in EpochSchedule.nodes_of(i):
            held = self._open_one.get(node)
            self._open_one[node] = (
                [c.copy() for c in seg.one_way]
                if held is None
                else [a + b for a, b in zip(held, seg.one_way, strict=True)]
            )
            if not before:
                two = self._open_two.setdefault(node, {})
                for e in self._measured():
                    i0, j0 = min(e), max(e)
                    two[(i0, j0)] = two.get((i0, j0), 0) + seg.two_way[(i0, j0)]
        done = [n for n in EpochSchedule.nodes_of(i) if EpochSchedule.end(n) == i]
        for node in done:
            self._one[node] = self._noisy_one_way(node, self._open_one.pop(node))
            exact = self._open_two.pop(node, None)
            if exact:
                self._two[node] = self._noisy_two_way(node, exact)
        if before and len(self._base) > 1 and t >= self.plan.select_at:
            self._select()
        self._segment = pairs.PairCounts(self._base)

    def _measured(self) -> list[tuple[int, int]]:
        return self.tree + self.seconds

    def _noisy_one_way(self, node: EpochNode, atoms: list[np.ndarray]) -> list[np.ndarray]:
        mp = self.plan
        exact = [
            np.bincount(a.atom_value(), weights=c, minlength=a.values).astype(np.int64)
            for a, c in zip(mp.attributes, atoms, strict=True)
        ]
        scale = mp.one_scale(EpochSchedule.per_row(node[0]))
        return pairs.add_noise(exact, scale, self._spawn("one-way", node))

    def _binning(self):
        attrs = self.plan.attributes
        pair_bin = [b[a.pair_coarse()] for a, b in zip(attrs, self.bins, strict=True)]
        value_bin = [b[a.value_coarse()] for a, b in zip(attrs, self.bins, strict=True)]
        return pair_bin, value_bin, [int(b.max()) + 1 for b in self.bins]

    def _noisy_two_way(self, node: EpochNode, exact: dict) -> dict[tuple[int, int], np.ndarray]:
        pair_bin, _, k = self._binning()
        tables = pairs.binned_tables(exact, pair_bin, k)
        scale = self.plan.node_pair_scale(EpochSchedule.per_row(node[0]))
        wanted = self._measured()
        noisy = pairs.add_noise([tables[e] for e in wanted], scale, self._spawn("two-way", node))
        return dict(zip(wanted, noisy, strict=True))

    def _select(self) -> None:
        """At c: bins from the released one-way sums, the pairs chosen by permute-and-flip on
        the prefix's tables, the chosen tables of the prefix measured (one node)."""
        mp = self.plan
        noisy_one, v1 = self._summed_one_way(self.closed)
        rp = replace(mp, v1=v1, v2=discrete_laplace_variance(mp.prefix_scale()))
        one_way = pairs.consistent_one_way(noisy_one, rp, self._rng)
        self.bins = [
            pairs.coarse_bins(a, m, mp.bins) for a, m in zip(mp.attributes, one_way, strict=True)
        ]
        pair_bin, value_bin, k = self._binning()
        tables = pairs.binned_tables(self._prefix.two_way, pair_bin, k)
        total = float(self.t)
        marg = pairs.combined_marginals(noisy_one, value_bin, k, {}, rp)
        select, measure = self._spawn("select"), self._spawn("two-way-prefix")
        edges, _ = pairs.select_tree(tables, marg, total, mp, select)
        order, parent = tree_model.bfs_order(edges, len(mp.attributes))
        tree = [(parent[a], a) for a in order if parent[a] >= 0]
        noisy_tree = pairs.measure(tables, tree, mp, measure)
        marg = pairs.combined_marginals(noisy_one, value_bin, k, noisy_tree, rp)
        joints = pairs.fit_pairs(noisy_tree, marg, total, rp, FIT_FLOOR)
        seconds, _ = pairs.select_seconds(tables, joints, order, parent, mp, select)
        wanted = [(b, c) for c, b in seconds.items()]
        extra = pairs.measure(tables, wanted, mp, measure)
        self.tree, self.seconds = tree, wanted
        self._two_prefix = {**noisy_tree, **extra}
        self.select_segment = self.closed
        self._prefix = None  # no longer needed: the prefix's rows are measured

    # -- releases -------------------------------------------------------------------------------
    def _summed_one_way(self, k: int) -> tuple[list[np.ndarray], float]:
        nodes = EpochSchedule.sums(k)
        D = len(self.plan.attributes)
        out = [sum(self._one[n][a] for n in nodes) for a in range(D)]
        var = sum(
            discrete_laplace_variance(self.plan.one_scale(EpochSchedule.per_row(n[0])))
            for n in nodes
        )
        return out, var

    def _summed_two_way(self, k: int) -> tuple[dict[tuple[int, int], np.ndarray], float]:
        mp = self.plan
        out = dict(self._two_prefix)
        var = discrete_laplace_variance(mp.prefix_scale())
        for n in EpochSchedule.sums(k):
            if n in self._two:
                for e, t in self._two[n].items():
                    out[e] = out[e] + t
                var += discrete_laplace_variance(mp.node_pair_scale(EpochSchedule.per_row(n[0])))
        return out, var

    def table(self, rng: np.random.Generator, rules: Rules | None) -> pa.Table:
        """The release at the current checkpoint: exactly t rows (post-processing)."""
        dom = self.cube.domain
        k = self.closed
        if k == 0 or self.t == 0:
            return dom.from_unit(np.zeros((0, len(self.cube.specs))))
        mp = self.plan
        attrs = mp.attributes
        D = len(attrs)
        noisy_one, v1 = self._summed_one_way(k)
        noisy, v2 = self._summed_two_way(k) if self.select_segment else ({}, 0.0)
        rp = replace(mp, v1=v1, v2=v2)
        one_way = pairs.consistent_one_way(noisy_one, rp, rng)
        bins = self.bins or [
            pairs.coarse_bins(a, m, mp.bins) for a, m in zip(attrs, one_way, strict=True)
        ]
        value_bin = [b[a.value_coarse()] for a, b in zip(attrs, bins, strict=True)]
        kb = [int(b.max()) + 1 for b in bins]
        total = float(self.t)
        marg = pairs.combined_marginals(noisy_one, value_bin, kb, noisy, rp)
        if noisy:
            fitted = pairs.fit_pairs(noisy, marg, total, rp, FIT_FLOOR)
            order, parent = tree_model.bfs_order(self.tree, D)
            joints = {e: fitted[e] for e in self.tree}
            extra = {e: fitted[e] for e in self.seconds}
        else:  # before the selection: the columns independent
            order, parent, joints, extra = list(range(D)), [-1] * D, {}, {}
        model = pairs.build_model(
            attrs, dom.cube_dim, value_bin, one_way, marg, order, parent, joints, extra, LINK_BINS
        )
        output = Output(np.array([self.t], dtype=np.int64), model, rng, dom.cube_dim)
        if self.cube.lead:
            output = output.map(dom.cube_to_unit, len(self.cube.specs))
        if rules is not None:
            output = conditioned(output, rules)
        return dom.from_unit(np.concatenate(list(output.batches())))

    # -- report ---------------------------------------------------------------------------------
    def ledger(self) -> Ledger:
        """The stream's spends (the same in every run's report: they add up to eps once for
        all runs of the stream; `replay` says which run committed them)."""
        rows, continued = getattr(self, "_rows", 0), getattr(self, "_continued", False)
        mp = self.plan or stream_plan(self.epsilon, rows, self.cube, self.relation, continued)
        ledger = Ledger(self.epsilon, self.relation)
        D = len(mp.attributes)
        ledger.record(
            Spend(
                step="online-marginals:one-way",
                mechanism="noisy one-way histograms of every column in every node of the "
                "stream's epoch schedule (online/marginals)",
                epsilon=mp.one_way,
                sensitivity=mp.sensitivity,
                noise={
                    "distribution": "discrete Laplace",
                    "scale": f"sens x {D} x m_j / eps_1 (m_j: nodes per row in epoch j)",
                    "scale_epoch_0": float(mp.one_scale(1)),
                    "histograms_per_node": D,
                    "composition": "a row is in one segment, one epoch, at most m_j of its "
                    "nodes and one cell of each histogram there: eps_1 / (D m_j) each",
                },
            )
        )
        if D <= 1:
            return ledger
        ledger.record(
            Spend(
                step="online-marginals:select",
                mechanism="permute-and-flip: a spanning tree then second parents, once, on the "
                "rows up to the selection checkpoint (mechanisms/pairs)",
                epsilon=mp.select,
                sensitivity=mp.sensitivity,
                noise={
                    "distribution": "permute-and-flip (exponential-mechanism family)",
                    "rounds": mp.rounds,
                    "epsilon_per_round": float(mp.round_epsilon),
                    "rows": "those up to the selection checkpoint (the first with at least "
                    f"{mp.select_at} rows)",
                },
            )
        )
        ledger.record(
            Spend(
                step="online-marginals:two-way",
                mechanism="noisy two-way histograms of the chosen pairs: the rows up to the "
                "selection checkpoint in one node, the later rows in the epoch schedule's nodes",
                epsilon=mp.pairs,
                sensitivity=mp.sensitivity,
                noise={
                    "distribution": "discrete Laplace",
                    "histograms_per_node": mp.measurements,
                    "prefix_scale": float(mp.prefix_scale()),
                    "scale_epoch_0": float(mp.node_pair_scale(1)),
                    "composition": "a row up to the selection checkpoint: one node at sens R / "
                    "eps_2 (eps_2); a later row is in no selection round and at most m_j nodes "
                    "at sens R m_j / (eps_2 + eps_S): eps_2 + eps_S. Either row: eps in all",
                },
            )
        )
        return ledger

    def to_json(self) -> dict[str, Any]:
        mp = self.plan
        out: dict[str, Any] = {
            "name": "online marginals: one-way histograms and the privately chosen pairs "
            "released continually by an unbounded schedule of epochs (online/marginals)",
            "epsilon_total": float(self.epsilon),
            "neighbouring_relation": self.relation,
            "node_schedule": {
                "rule": "epochs of 2^j segments (the stream's checkpoints, across runs), each "
                "with the dyadic schedule for 2^j checkpoints: the segments one by one up to "
                "epochs of 2^10, the binary tree beyond; unbounded (a --state continues it)",
                "checkpoints_so_far": self.closed,
            },
        }
        if mp is None:
            return out
        out.update(mp.to_json())
        out.update(
            {
                "name": "online marginals: one-way histograms and the privately chosen pairs "
                "released continually by an unbounded schedule of epochs (online/marginals)",
                "planning_rows_of_the_stream": mp.rows,
                "pairs_measured": mp.measurements,
                "selection": {
                    "when": "at the stream's first checkpoint with at least "
                    f"{mp.select_at} rows: eps_S t / (sens R) >= {SELECT_SIGNAL:g}, or a "
                    "quarter of planning_rows_of_the_stream if fewer (public: eps, the "
                    "columns, the first run's planning size; with --state at least "
                    f"{HORIZON} x the former)",
                    "made": bool(self.select_segment),
                    "at_checkpoint": self.select_segment or None,
                    "from": "the exact two-way tables of the rows up to that checkpoint, by "
                    "permute-and-flip (eps_S); kept in the state and reused by every later "
                    "node and run (post-processing)",
                    "tree_edges": [list(e) for e in self.tree],
                    "second_parent_edges": [list(e) for e in self.seconds],
                },
            }
        )
        return out

    # -- the state (secret) ---------------------------------------------------------------------
    def state_meta(self) -> dict[str, Any]:
        return {
            "mechanism": "marginals",
            "t": self.t,
            "closed": self.closed,
            "last_end": self.last_end,
            "planned_rows": self.plan.rows if self.plan else None,
            "select_segment": self.select_segment,
            "tree": [list(e) for e in self.tree],
            "seconds": [list(e) for e in self.seconds],
        }

    def arrays(self) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}

        def counts(prefix: str, c: pairs.PairCounts) -> None:
            for a, arr in enumerate(c.one_way):
                out[f"{prefix}.one.{a}"] = arr
            for (i, j), arr in c.two_way.items():
                out[f"{prefix}.two.{i}.{j}"] = arr

        counts("m.segment", self._segment)
        if self._prefix is not None:
            counts("m.prefix", self._prefix)
        for node, arrs in self._open_one.items():
            for a, arr in enumerate(arrs):
                out[f"m.open_one.{_key(node)}.{a}"] = arr
        for name, store in (("m.open_two", self._open_two), ("m.two", self._two)):
            for node, tables in store.items():
                for (i, j), arr in tables.items():
                    out[f"{name}.{_key(node)}.{i}.{j}"] = np.asarray(arr)
        for node, arrs in self._one.items():
            for a, arr in enumerate(arrs):
                out[f"m.one.{_key(node)}.{a}"] = arr
        for (i, j), arr in self._two_prefix.items():
            out[f"m.two_prefix.{i}.{j}"] = arr
        for a, arr in enumerate(self.bins or []):
            out[f"m.bins.{a}"] = arr
        return out

    @classmethod
    def from_state(cls, cube, epsilon, relation, meta, files) -> MarginalsEngine:
        eng = cls(cube, epsilon, relation, t=int(meta["t"]), closed=int(meta["closed"]),
                  last_end=int(meta["last_end"]), select_segment=int(meta["select_segment"]),
                  tree=[tuple(e) for e in meta["tree"]],
                  seconds=[tuple(e) for e in meta["seconds"]])  # fmt: skip
        if meta.get("planned_rows") is not None:
            eng.plan = stream_plan(epsilon, int(meta["planned_rows"]), cube, relation)
        D = len(eng._base)
        m = {k[2:]: v for k, v in files.items() if k.startswith("m.")}

        def counts(prefix: str) -> pairs.PairCounts:
            c = pairs.PairCounts(eng._base)
            c.one_way = [m[f"{prefix}.one.{a}"] for a in range(D)]
            c.two_way = {(i, j): m[f"{prefix}.two.{i}.{j}"] for i, j in c.two_way}
            return c

        eng._segment = counts("segment")
        eng._prefix = counts("prefix") if "prefix.one.0" in m else None
        for k, v in m.items():
            parts = k.split(".")
            if parts[0] in ("open_one", "one"):
                node, a = _node(".".join(parts[1:4])), int(parts[4])
                store = eng._open_one if parts[0] == "open_one" else eng._one
                store.setdefault(node, [None] * D)[a] = v
            elif parts[0] in ("open_two", "two"):
                node, e = _node(".".join(parts[1:4])), (int(parts[4]), int(parts[5]))
                store = eng._open_two if parts[0] == "open_two" else eng._two
                store.setdefault(node, {})[e] = v
            elif parts[0] == "two_prefix":
                eng._two_prefix[(int(parts[1]), int(parts[2]))] = v
        bins = sorted((int(k.split(".")[1]), v) for k, v in m.items() if k.startswith("bins."))
        eng.bins = [v for _, v in bins] or None
        return eng
