"""`--mechanism marginals`: select, measure, generate on one-way and two-way marginals.

The marginal-based recipe that keeps the relationships of real tables (MST: McKenna, Miklau &
Sheldon 2021), re-derived for pure epsilon-DP with exact discrete noise, and with continuous
columns kept continuous:

1. One pass over the rows (`PairCounts`): every attribute's one-way histogram on its public grid
   (`attributes`) and every pair's two-way histogram on the pair grids (exact integers, batches
   and workers add).
2. One-way release (share ONE_WAY of epsilon): discrete Laplace noise on every cell of every
   attribute's histogram, then `hierarchy`'s pruning and integer consistency (post-processing).
3. Bins (post-processing): each attribute's values grouped into at most `bins` bins from the
   released one-way counts: quantile runs for numbers, the most frequent levels for levels, so
   two-way cells are about equally full where the data is.
4. Selection (share SELECT): a spanning tree over the attributes, Kruskal-style, each of its D - 1
   edges chosen by permute-and-flip (`noise.permute_and_flip`) among the pairs that join two
   components, scored by how far the pair's two-way histogram on the bins is from the product of
   its released one-way marginals (L1, rounded down to an integer).
5. Measurement (share PAIRS): discrete Laplace noise on every cell of the D - 1 chosen two-way
   histograms on the bins.
6. Generation (`tree_model`, post-processing): the tree model fitted to the noisy tables and
   drawn from; values inside a bin follow the one-way release.

Privacy. Neighbouring relation add/remove one row (default): the row adds or removes 1 in one
cell of each histogram (a nullable column's "missing" is a cell), so every one-way and two-way
histogram has L1 sensitivity sens = 1 (replace one row: 2, `histogram_sensitivity`). Step 2 puts
scale sens * D / eps_1 on each of the D one-way histograms (each eps_1 / D-DP; D of them compose
to eps_1). Step 4's score |H - E|_1 has sensitivity sens (E is fixed by released values; rounding
down to an integer keeps a change of at most sens), so each round of permute-and-flip at
eps_S / (D - 1) is (eps_S / (D - 1))-DP and the D - 1 rounds compose to eps_S (adaptively: each
round's candidates depend only on earlier released choices). Step 5 puts scale
sens * (D - 1) / eps_2 on each of the D - 1 histograms: eps_2. The grids, bins, the number of
edges and every scale are functions of public facts (schema, eps, D) and released values (the
noisy count, the one-way release), never of the rows. Total eps_1 + eps_S + eps_2 = epsilon
exactly (rational arithmetic; `tests/test_pairs.py`). Steps 3 and 6 read only released values.

Accuracy: no a-priori W1 bound (the tree model drops every dependence it does not measure);
measured in docs/benchmarks.md ("Real tables").
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction
from functools import partial
from itertools import combinations
from typing import Any

import numpy as np

from dpsynth_cli.engine.rows import Rows, as_rows
from dpsynth_cli.mechanisms import hierarchy, tree_model
from dpsynth_cli.mechanisms.attributes import Attribute, attributes
from dpsynth_cli.mechanisms.base import MechanismRun, Output, discrete_laplace_variance
from dpsynth_cli.privacy import noise
from dpsynth_cli.privacy.ledger import EPS_GRID, Ledger, Spend, histogram_sensitivity

ONE_WAY = Fraction(3, 10)  # shares of the mechanism's epsilon (measured: docs/benchmarks.md)
SELECT = Fraction(1, 10)
CELL_NOISE = 4.0  # bins: a pair's cells hold about CELL_NOISE noise deviations each
FIT_FLOOR = 1.0  # two-way cells below this many noise deviations are taken as empty
MIN_BINS = 2
OUTPUT_CHUNK = 1 << 16  # rows per cell of the output (all rows are alike: any split works)


def _share(epsilon: Fraction, part: Fraction) -> Fraction:
    """part of epsilon rounded down onto the ledger's grid."""
    return Fraction(math.floor(part * epsilon * EPS_GRID), EPS_GRID)


@dataclass(frozen=True)
class Plan:
    """Every public parameter of one run (from eps, relation, schema facts and noisy count)."""

    epsilon: Fraction
    one_way: Fraction
    select: Fraction
    pairs: Fraction
    sensitivity: int
    attributes: tuple[Attribute, ...]
    bins: int

    @property
    def edges(self) -> int:
        return max(len(self.attributes) - 1, 0)

    @property
    def one_way_scale(self) -> Fraction:
        return noise.as_scale(Fraction(self.sensitivity * len(self.attributes)) / self.one_way)

    @property
    def pair_scale(self) -> Fraction:
        return noise.as_scale(Fraction(self.sensitivity * max(self.edges, 1)) / self.pairs)

    @property
    def round_epsilon(self) -> Fraction:
        return self.select / max(self.edges, 1)

    def to_json(self) -> dict[str, Any]:
        return {
            "epsilon": {
                "one_way": float(self.one_way),
                "selection": float(self.select),
                "two_way": float(self.pairs),
            },
            "attributes": [
                {"cube_column": a.column, "grid": a.kind, "values": a.values}
                for a in self.attributes
            ],
            "bins_per_attribute_at_most": self.bins,
            "one_way_noise_scale": float(self.one_way_scale),
            "two_way_noise_scale": float(self.pair_scale) if self.edges else None,
            "selection": "permute-and-flip, one round per tree edge",
        }


def plan(epsilon: Fraction, noisy_n: int, rows: Rows, relation: str) -> Plan:
    """Shares, grids and bins from public quantities only."""
    sens = histogram_sensitivity(relation)
    count = rows.d - len(rows.flagged)
    one_way = epsilon if count <= 1 else _share(epsilon, ONE_WAY)
    select = Fraction(0) if count <= 1 else _share(epsilon, SELECT)
    signal = float(one_way) / max(count, 1) * max(noisy_n, 1) / sens
    attrs = attributes(rows.d, rows.lead, rows.codes, rows.flagged, signal)
    pairs = epsilon - one_way - select
    bins = MIN_BINS
    if count > 1:
        sd = math.sqrt(discrete_laplace_variance(noise.as_scale(sens * (count - 1) / pairs)))
        cells = max(noisy_n, 1) / (CELL_NOISE * sd)
        bins = int(min(max(math.isqrt(int(cells)), MIN_BINS), 64))
    return Plan(epsilon, one_way, select, pairs, sens, attrs, bins)


@dataclass
class PairCounts:
    """One pass: each attribute's one-way histogram and every pair's two-way histogram on the
    pair grids (exact integers; batches add)."""

    attributes: tuple[Attribute, ...]
    one_way: list[np.ndarray] = field(init=False)
    two_way: dict[tuple[int, int], np.ndarray] = field(init=False)

    def __post_init__(self) -> None:
        self.one_way = [np.zeros(a.values, dtype=np.int64) for a in self.attributes]
        self.two_way = {
            (i, j): np.zeros((a.pair_cells, b.pair_cells), dtype=np.int64)
            for (i, a), (j, b) in combinations(enumerate(self.attributes), 2)
        }

    def add(self, X: np.ndarray) -> None:
        values = [a.encode(X) for a in self.attributes]
        cells = [a.pair_map()[v] for a, v in zip(self.attributes, values, strict=True)]
        for i, v in enumerate(values):
            self.one_way[i] += np.bincount(v, minlength=self.one_way[i].size)
        for (i, j), table in self.two_way.items():
            k = table.shape[1]
            table += np.bincount(cells[i] * k + cells[j], minlength=table.size).reshape(table.shape)

    def merge(self, other: PairCounts) -> PairCounts:
        self.one_way = [a + b for a, b in zip(self.one_way, other.one_way, strict=True)]
        for key in self.two_way:
            self.two_way[key] += other.two_way[key]
        return self


def release_one_way(
    counts: list[np.ndarray], mp: Plan, source: noise.RandomSource, ledger: Ledger, rng
) -> list[np.ndarray]:
    """Noisy one-way histograms (spend recorded), pruned and made non-negative integers that
    sum to their noisy total (`hierarchy.consistent_leaf_counts`, post-processing)."""
    scale = mp.one_way_scale
    draws = noise.discrete_laplace(source, scale, sum(c.size for c in counts))
    ledger.record(
        Spend(
            step="marginals-one-way",
            mechanism="noisy one-way histograms of every column (mechanisms/pairs)",
            epsilon=mp.one_way,
            sensitivity=mp.sensitivity,
            noise={
                "distribution": "discrete Laplace",
                "scale": float(scale),
                "histograms": len(counts),
                "composition": "sequential over the columns, eps/columns each",
            },
        )
    )
    variance = discrete_laplace_variance(scale)
    out, at = [], 0
    for c in counts:
        noisy = (c + draws[at : at + c.size]).astype(np.float64)
        at += c.size
        out.append(
            hierarchy.consistent_leaf_counts(
                [noisy], [variance], [c.size], hierarchy.KAPPA, rng
            ).astype(np.float64)
        )
    return out


def value_bins(attr: Attribute, mass: np.ndarray, bins: int) -> np.ndarray:
    """Each value's bin (released mass only): numbers in quantile runs of the pair grid, levels
    by frequency; the missing value alone in the last bin."""
    grid = attr.pair_map()
    cells = np.bincount(grid, weights=mass, minlength=attr.pair_cells)
    if attr.missing:
        cells = cells[:-1]
    if attr.numeric:
        per_cell = tree_model.quantile_bins(cells, bins)
    else:
        per_cell = tree_model.level_bins(cells, bins)
    if attr.missing:
        per_cell = np.append(per_cell, per_cell.max() + 1)
    return per_cell[grid]


def binned(table: np.ndarray, a_map: np.ndarray, b_map: np.ndarray, ka: int, kb: int):
    """A pair-grid table summed into bins (pair cell -> bin maps)."""
    out = np.zeros((ka, kb))
    np.add.at(out, (a_map[:, None], b_map[None, :]), table)
    return out


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
    """One statistics pass, one-way release, tree selection, two-way measurement, model."""
    X = as_rows(X)
    mp = plan(epsilon, noisy_rows, X, relation)
    attrs = mp.attributes
    stats = X.collect(partial(PairCounts, attrs))
    one_way = release_one_way(stats.one_way, mp, source.spawn("one-way"), ledger, rng)
    value_bin = [value_bins(a, m, mp.bins) for a, m in zip(attrs, one_way, strict=True)]
    k = [int(b.max()) + 1 for b in value_bin]
    # pair cell -> bin: every value of a pair cell lies in one bin (bins are unions of cells)
    cell_bin = []
    for a, b in zip(attrs, value_bin, strict=True):
        m = np.zeros(a.pair_cells, dtype=np.int64)
        m[a.pair_map()] = b
        cell_bin.append(m)
    total = max(float(noisy_rows), 1.0)
    marg = []
    for m, b, kk in zip(one_way, value_bin, k, strict=True):
        p = np.bincount(b, weights=m, minlength=kk)
        marg.append(p / p.sum() if p.sum() > 0 else np.full(kk, 1.0 / kk))
    binned_two_way = {
        (i, j): binned(t, cell_bin[i], cell_bin[j], k[i], k[j])
        for (i, j), t in stats.two_way.items()
    }
    edges = select_tree(binned_two_way, marg, total, mp, source.spawn("select"), ledger)
    noisy = measure(binned_two_way, edges, mp, source.spawn("two-way"), ledger)
    model = build_model(attrs, X.d, value_bin, one_way, marg, noisy, edges, total, mp)
    want = max(int(noisy_rows), 0) if rows is None else int(rows)
    sizes = np.full(want // OUTPUT_CHUNK, OUTPUT_CHUNK, dtype=np.int64)
    if want % OUTPUT_CHUNK:
        sizes = np.append(sizes, want % OUTPUT_CHUNK)
    description = {**mp.to_json(), "bins": k, "tree_edges": [list(e) for e in edges]}
    return MechanismRun(
        output=Output(sizes, model, rng, X.d),
        description=description,
        guarantee="no a-priori W1 bound (a tree of two-way marginals keeps only the "
        "dependences it measures); epsilon-DP by the sensitivity argument in mechanisms/pairs",
        w1_bound=None,
    )


def select_tree(
    tables: dict[tuple[int, int], np.ndarray],
    marg: list[np.ndarray],
    total: float,
    mp: Plan,
    source: noise.RandomSource,
    ledger: Ledger,
) -> list[tuple[int, int]]:
    """D - 1 rounds of permute-and-flip among the pairs joining two components (spend
    recorded): the tree of the most dependent pairs, as MST chooses it."""
    D = len(marg)
    if D < 2:
        return []
    pairs = list(tables)
    scores = np.array(
        [
            math.floor(float(np.abs(tables[p] - total * np.outer(marg[p[0]], marg[p[1]])).sum()))
            for p in pairs
        ],
        dtype=np.int64,
    )
    ledger.record(
        Spend(
            step="marginals-select",
            mechanism="spanning tree of column pairs by permute-and-flip (mechanisms/pairs)",
            epsilon=mp.select,
            sensitivity=mp.sensitivity,
            noise={
                "distribution": "permute-and-flip (exponential-mechanism family)",
                "rounds": D - 1,
                "epsilon_per_round": float(mp.round_epsilon),
                "score": "L1 distance of the two-way histogram from the product of the "
                "released one-way marginals, rounded down",
            },
        )
    )
    component = list(range(D))
    edges: list[tuple[int, int]] = []
    for _ in range(D - 1):
        open_ = [n for n, (a, b) in enumerate(pairs) if component[a] != component[b]]
        pick = pairs[
            open_[noise.permute_and_flip(source, scores[open_], mp.round_epsilon, mp.sensitivity)]
        ]
        edges.append(pick)
        old, new = component[pick[1]], component[pick[0]]
        component = [new if c == old else c for c in component]
    return edges


def measure(
    tables: dict[tuple[int, int], np.ndarray],
    edges: list[tuple[int, int]],
    mp: Plan,
    source: noise.RandomSource,
    ledger: Ledger,
) -> dict[tuple[int, int], np.ndarray]:
    """The chosen pairs' two-way histograms on the bins plus discrete Laplace noise."""
    if not edges:
        return {}
    scale = mp.pair_scale
    sizes = [tables[e].size for e in edges]
    draws = noise.discrete_laplace(source, scale, sum(sizes))
    ledger.record(
        Spend(
            step="marginals-two-way",
            mechanism="noisy two-way histograms of the tree's column pairs (mechanisms/pairs)",
            epsilon=mp.pairs,
            sensitivity=mp.sensitivity,
            noise={
                "distribution": "discrete Laplace",
                "scale": float(scale),
                "histograms": len(edges),
                "composition": "sequential over the pairs, eps/pairs each",
            },
        )
    )
    out, at = {}, 0
    for e, size in zip(edges, sizes, strict=True):
        out[e] = tables[e] + draws[at : at + size].reshape(tables[e].shape)
        at += size
    return out


def build_model(
    attrs: tuple[Attribute, ...],
    d: int,
    value_bin: list[np.ndarray],
    one_way: list[np.ndarray],
    marg: list[np.ndarray],
    noisy: dict[tuple[int, int], np.ndarray],
    edges: list[tuple[int, int]],
    total: float,
    mp: Plan,
) -> tree_model.TreeModel:
    """The tree model from released values: fitted edge tables, conditionals, within-bin
    value shares (post-processing)."""
    D = len(attrs)
    order, parent = tree_model.bfs_order(edges, D)
    floor = FIT_FLOOR * math.sqrt(discrete_laplace_variance(mp.pair_scale)) if edges else 0.0
    quantiles = [tree_model.Quantiles.of(b, m) for b, m in zip(value_bin, one_way, strict=True)]
    conditional, link = [], []
    for a in range(D):
        p = parent[a]
        if p < 0:
            conditional.append(marg[a][None, :])
            link.append(0.0)
            continue
        table = noisy[(p, a)] if (p, a) in noisy else noisy[(a, p)].T
        fitted = tree_model.fit_pair(table, total * marg[p], total * marg[a], floor)
        conditional.append(tree_model.normalised(fitted, marg[a]))
        both = attrs[a].numeric and attrs[p].numeric
        link.append(
            tree_model.link_correlation(fitted, quantiles[p], quantiles[a]) if both else 0.0
        )
    return tree_model.TreeModel(
        attrs, d, tuple(order), tuple(parent), tuple(conditional), tuple(quantiles), tuple(link)
    )
