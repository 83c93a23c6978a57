"""`--mechanism marginals`: select, measure, generate on one-way and two-way marginals.

The marginal-based recipe that keeps the relationships of real tables (MST: McKenna, Miklau &
Sheldon 2021), re-derived for pure epsilon-DP with exact discrete noise, with continuous columns
kept continuous:

1. One pass over the rows (`PairCounts`, on grids fixed by public facts, so synth takes it with
   the row count): every attribute's counts per atom and every pair's two-way histogram on the
   pair grids (`attributes`; exact integers, batches and workers add).
2. One-way release (share ONE_WAY of epsilon, ONE_WAY_LOW with little signal): the atoms summed
   into the release grid (levels, codes, or 2^b runs, b from eps and the noisy count), discrete
   Laplace noise on every cell, then `hierarchy`'s pruning and integer consistency; a number's
   runs in two stages (`one_way`: the runs, then their fine cells, a heavy run split by them).
3. Bins (post-processing): each attribute's values grouped into at most `bins` bins from the
   released counts: quantile runs for numbers, the most frequent levels for levels, so two-way
   cells are about equally full where the data is.
4. Selection (share SELECT): R = (D - 1) + T rounds of permute-and-flip
   (`noise.permute_and_flip`): first a spanning tree, Kruskal-style, among the pairs that join
   two components, scored by how far the pair's two-way histogram on the bins is from the
   product of the released one-way marginals; then (after step 5's tree tables) T = D - 2
   second parents: column c conditions also on b, a tree neighbour of its parent p, scored by
   how far the (b, c) histogram is from what the fitted tree implies. T = 0 when the bins would
   fall below SECOND_PARENT_BINS (too little signal). Scores are L1 distances rounded down.
5. Measurement (share PAIRS): discrete Laplace noise on every cell of the R chosen two-way
   histograms on the bins.
6. Generation (`tree_model`, post-processing): bin probabilities from the least-squares mix of
   the one-way and two-way releases, the tree tables and triangles fitted by iterative
   proportional fitting, rows drawn ancestrally; values inside a bin follow the one-way release,
   with a Gaussian copula along tree edges.

Privacy. Neighbouring relation add/remove one row (default): the row adds or removes 1 in one cell
of each histogram (a nullable column's "missing" is a cell), so every one-way and two-way histogram
has L1 sensitivity sens = 1 (replace one row: 2, `histogram_sensitivity`). Step 2 puts scale sens *
D / eps_1 on each of the D one-way histograms (each eps_1 / D-DP; D of them compose to eps_1); a
number's two stages split its eps_1 / D (`one_way`). Step 4's score |H - E|_1 has sensitivity sens
(E is fixed by released values; rounding down to an integer keeps a change of at most sens; `score`
computes it in integers with E on a public grid, so no float error can carry it across an integer),
so each round of permute-and-flip at eps_S / R is (eps_S / R)-DP (McKenna & Sheldon 2020, Theorem 1)
and the R rounds compose to eps_S (adaptively: each round's candidates and scores' reference tables
depend only on earlier releases). Step 5 puts scale sens * R / eps_2 on each of the R histograms:
eps_2. The grids, bins, R and every scale are functions of public facts (schema, eps, D) and
released values (the noisy count, the one-way release), never of the rows.

Many-level categories (issue 36). A level column keeps every level on its pair grid
(`attributes.keep_levels`, public). Its fine grid (`FineGrid`, post-processing of the one-way
release) gives every level with a released count of LEVEL_KEEP two-way noise deviations its own
bin. A pair of level columns whose fine grid is finer than its bins is a second candidate in
the same selection rounds (tree and second parents; no extra round, no extra budget), scored
floor(|H_F - E_F|_1) - ceil(FINE_PENALTY sd x added cells): E_F from released values, the
penalty public, so the score still moves by at most sens and each round stays
(eps_S / R)-DP. Whether a pair is measured fine is thus the released outcome of permute-and-flip;
its fine histogram gets the same scale sens * R / eps_2 (one histogram: sensitivity sens). A
schema's "determines" (public) makes the pair a tree edge measured at full resolution without a
round (`Plan.forced`: R - F rounds at eps_S / (R - F); eps_S moves to the pairs when no round is
left) and its map is the argmax of each row of that noisy table. Fitting fine tables, refining
rows inside their bins (`FinePair`) and applying the maps (`Refined`) are post-processing.
Total eps_1 + eps_S + eps_2 = epsilon exactly (rational arithmetic; `tests/test_pairs.py`).
Steps 3 and 6 read only released values.

Accuracy: no a-priori W1 bound (the model keeps only the dependences it measures); measured in
docs/benchmarks.md ("Real tables").
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from functools import partial
from itertools import combinations
from typing import Any

import numpy as np

from dpsynth_cli.engine.rows import Rows, as_rows
from dpsynth_cli.errors import UsageError
from dpsynth_cli.mechanisms import hierarchy, tree_model
from dpsynth_cli.mechanisms import one_way as one_way_release
from dpsynth_cli.mechanisms.attributes import Attribute, attributes
from dpsynth_cli.mechanisms.base import MechanismRun, Output, discrete_laplace_variance
from dpsynth_cli.privacy import noise
from dpsynth_cli.privacy.ledger import EPS_GRID, Ledger, Spend, histogram_sensitivity

ONE_WAY = Fraction(2, 5)  # shares of the mechanism's epsilon (measured: docs/benchmarks.md)
# With little signal (eps * noisy rows / (sens * columns) below ONE_WAY_SIGNAL) each column's own
# histogram matters more than pairs the noise blurs anyway: one-way share ONE_WAY_LOW (diamonds at
# 1,000 rows: per-column worst 0.114 -> 0.086, pair TVD mean 0.32 -> 0.29; at 20,000 rows 0.4
# keeps the pairs: mean 0.054 against 0.065).
ONE_WAY_LOW = Fraction(3, 5)
ONE_WAY_SIGNAL = 400.0
SELECT = Fraction(1, 10)
CELL_NOISE = 4.0  # bins: a pair's cells hold about CELL_NOISE noise deviations each
FIT_FLOOR = 1.0  # two-way cells below this many noise deviations are taken as empty
MIN_BINS = 2
ONE_WAY_KAPPA = hierarchy.KAPPA  # one-way cells below this many deviations are pruned
# Every attribute but two gets a second parent (a triangle of pairs) when the bins of the pairs
# measured then stay at least this many per attribute; else the tree alone. 6 (was 4): on the
# demo's admissions (4,000 rows, eps 1, 12 seeds) triangles on 5 bins a side cost more than
# they kept (mean correlation error 0.036 against 0.015 for the tree alone, mixed W1 0.128
# against 0.104); diamonds, flights, weather and seattle keep the same plan (docs/benchmarks.md).
SECOND_PARENT_BINS = 6
WEEKDAY_SIGNAL = 175.0  # a date's weekday is measured from this one-way signal on (`modelled`)
LINK_BINS = 4  # a copula link needs at least this many bins on both sides
LEVEL_KAPPA = 1.0  # level columns' one-way cells are pruned below this many deviations
OUTPUT_CHUNK = 1 << 16
# Every pair's two-way counts are kept (D(D-1)/2 tables of up to 65 x 65 cells) and scored in
# each selection round: up to this many columns (about 4950 pairs, 170 MB of counts).
MAX_COLUMNS = 100  # rows per cell of the output (all rows are alike: any split works)
# Fine grids of level columns (`fine_bins`): a level keeps its own fine bin when its released count
# is at least LEVEL_KEEP two-way noise deviations; a fine table's cells below FINE_FLOOR
# deviations are taken as empty (its pure-noise cells: about e^(-3 sqrt 2) / 2 = 0.7% stay), and
# a fine variant's selection score is lowered by FINE_PENALTY deviations per cell it adds.
LEVEL_KEEP = 3.0
FINE_FLOOR = 3.0
FINE_PENALTY = 1.0


def check_columns(columns: int, chosen: str | None = None) -> None:
    """A usage error when the model would have more than MAX_COLUMNS columns (`chosen` says
    how they were chosen, e.g. "--dim 150"; default "N chosen")."""
    if columns > MAX_COLUMNS:
        raise UsageError(
            f"--mechanism marginals takes at most {MAX_COLUMNS} columns "
            f"({chosen or f'{columns} chosen'}): choose fewer with --columns, or use --dim or "
            "another --mechanism"
        )


def share_of(epsilon: Fraction, part: Fraction) -> Fraction:
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
    extras: int  # second parents (each one more two-way measurement)
    kept: tuple[int, ...] = ()  # the counts' attributes measured (`modelled`); (): all
    forced: int = 0  # declared tree edges ("determines"): measured without a selection round

    @property
    def edges(self) -> int:
        return max(len(self.attributes) - 1, 0)

    @property
    def measurements(self) -> int:
        """Two-way histograms measured, and selection rounds: tree edges and second parents."""
        return self.edges + self.extras

    @property
    def one_way_scale(self) -> Fraction:
        return noise.as_scale(Fraction(self.sensitivity * len(self.attributes)) / self.one_way)

    def one_way_scales(self) -> list[one_way_release.Scales]:
        """Each attribute's one-way scales: `one_way_scale` (eps_1 / D each) in one or two
        stages (`one_way`)."""
        return [one_way_release.Scales.of(a, self.one_way_scale) for a in self.attributes]

    @property
    def pair_scale(self) -> Fraction:
        return noise.as_scale(Fraction(self.sensitivity * max(self.measurements, 1)) / self.pairs)

    @property
    def one_way_variance(self) -> float:
        """The noise variance of one released one-way cell (`online.marginals` sums nodes)."""
        return discrete_laplace_variance(self.one_way_scale)

    @property
    def pair_variance(self) -> float:
        """The noise variance of one released two-way cell."""
        return discrete_laplace_variance(self.pair_scale)

    @property
    def rounds(self) -> int:
        """Selection rounds: every measurement but the declared edges."""
        return max(self.measurements - self.forced, 0)

    @property
    def round_epsilon(self) -> Fraction:
        return self.select / max(self.rounds, 1)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": "marginals",
            "epsilon": {
                "one_way": float(self.one_way),
                "selection": float(self.select),
                "two_way": float(self.pairs),
            },
            "attributes": [
                {
                    "cube_column": a.part.clock.column if a.part else a.column,
                    **({"part": a.part.name} if a.part else {}),
                    "grid": a.kind,
                    "atoms": a.atoms,
                    "values": a.values,
                    **({"first_stage_runs": a.first} if a.first else {}),
                }
                for a in self.attributes
            ],
            "bins_per_attribute_at_most": self.bins,
            "one_way_noise_scale": float(self.one_way_scale),
            "two_way_noise_scale": float(self.pair_scale) if self.edges else None,
            "second_parents": self.extras,
            "declared_edges": self.forced,
            "selection": "permute-and-flip, one round per measured pair but declared ones",
        }


def plan(epsilon: Fraction, noisy_n: int, rows: Rows, relation: str) -> Plan:
    """Shares, grids and bins from public quantities only."""
    sens = histogram_sensitivity(relation)
    every = attributes_of(rows)
    kept = modelled(every, float(epsilon) * max(noisy_n, 1) / sens, rows.derived)
    base = tuple(every[i] for i in kept)
    count = len(base)
    low = float(epsilon) * max(noisy_n, 1) / (sens * max(count, 1)) < ONE_WAY_SIGNAL
    one_way = epsilon if count <= 1 else share_of(epsilon, ONE_WAY_LOW if low else ONE_WAY)
    select = Fraction(0) if count <= 1 else share_of(epsilon, SELECT)
    signal = float(one_way) / max(count, 1) * max(noisy_n, 1) / sens
    attrs = tuple(one_way_release.refined(a.with_size(signal)) for a in base)
    pairs = epsilon - one_way - select

    def bins_for(measurements: int) -> int:
        scale = noise.as_scale(sens * measurements / pairs)
        return bins_at(noisy_n, discrete_laplace_variance(scale))

    extras, bins = 0, MIN_BINS
    if count > 1:
        extras = max(count - 2, 0)
        bins = bins_for(count - 1 + extras)
        if bins < SECOND_PARENT_BINS:  # too little signal for triangles: the tree alone
            extras, bins = 0, bins_for(count - 1)
    forced = len(declared_edges(attrs, rows.determines)) if count > 1 else 0
    kept = () if len(kept) == len(every) else kept
    out = Plan(epsilon, one_way, select, pairs, sens, attrs, bins, extras, kept, forced)
    if count > 1 and out.rounds == 0:  # every edge declared: no selection, its share measures
        out = replace(out, select=Fraction(0), pairs=epsilon - one_way)
    return out


def modelled(
    every: tuple[Attribute, ...], signal: float, derived: tuple[int, ...] = ()
) -> tuple[int, ...]:
    """The attributes the model measures (positions in `every`), from public quantities: all
    but those of a derived column (`Rows.derived`: the derivation replaces what the model
    draws, so measuring it would spend budget on nothing), and but a date's weekday part when
    each attribute's one-way signal (eps n / sens / attributes, at the larger one-way share) is
    below WEEKDAY_SIGNAL. Its 7 noisy cells would then miss the shares by a TVD of about
    3.5 / signal > 0.02 (seattle-weather, 1,461 days, one row a day: 0.029 against 0.018 for
    days placed evenly inside weeks), more than most tables' weekly shape; left out, its
    weeks' days are drawn evenly (`wallclock.Clock.assemble`)."""

    def column(a: Attribute) -> int:
        return a.part.clock.column if a.part else a.column

    measured = [i for i, a in enumerate(every) if column(a) not in derived]
    per_attribute = signal * float(ONE_WAY_LOW) / max(len(measured), 1)
    weak = per_attribute < WEEKDAY_SIGNAL
    return tuple(
        i for i in measured if not (weak and every[i].part and every[i].part.name == "weekday")
    )


def attributes_of(rows: Rows) -> tuple[Attribute, ...]:
    """The model's attributes from the rows' public facts (`attributes`)."""
    return attributes(rows.d, rows.lead, rows.codes, rows.flagged, rows.coded_missing, rows.clocks)


def declared_edges(
    attrs: tuple[Attribute, ...], determines: tuple[tuple[int, int], ...]
) -> list[tuple[int, int]]:
    """The declared dependencies (`Rows.determines`, cube columns) as attribute pairs
    (determining, determined) between level attributes, in order, each kept when it joins two
    components of the tree so far (public: the schema's declarations only)."""
    index = {a.column: i for i, a in enumerate(attrs) if a.kind == "level" and a.part is None}
    component = list(range(len(attrs)))
    out = []
    for x, y in determines:
        i, j = index.get(x), index.get(y)
        if i is None or j is None or component[i] == component[j]:
            continue
        out.append((i, j))
        old, new = component[j], component[i]
        component = [new if c == old else c for c in component]
    return out


def bins_at(noisy_n: float, variance: float, cell_noise: float = CELL_NOISE) -> int:
    """Bins per attribute so that a pair's cells hold about `cell_noise` noise deviations each
    (public: the noisy or public row count and the cells' noise variance)."""
    cells = max(noisy_n, 1) / (cell_noise * math.sqrt(variance))
    return int(min(max(math.isqrt(int(cells)), MIN_BINS), 64))


@dataclass
class PairCounts:
    """One pass: each attribute's counts per atom and every pair's two-way histogram on the
    pair grids (exact integers; batches add). Its grids come from public facts alone, so synth
    takes it in its first pass, before the noisy count (`Rows.ahead`)."""

    ANY_ORDER = True  # exact integers: any split and merge order, the same statistic

    attributes: tuple[Attribute, ...]
    one_way: list[np.ndarray] = field(init=False)
    two_way: dict[tuple[int, int], np.ndarray] = field(init=False)

    def __post_init__(self) -> None:
        self.one_way = [np.zeros(a.atoms + a.missing, dtype=np.int64) for a in self.attributes]
        self.two_way = {
            (i, j): np.zeros((a.pair_cells, b.pair_cells), dtype=np.int64)
            for (i, a), (j, b) in combinations(enumerate(self.attributes), 2)
        }

    @classmethod
    def of(cls, rows: Rows) -> PairCounts:
        """The counts for these rows' public facts (the grids `run` expects)."""
        return cls(attributes_of(rows))

    def add(self, X: np.ndarray) -> None:
        atoms = [a.encode(X) for a in self.attributes]
        cells = [a.atom_pair()[v] for a, v in zip(self.attributes, atoms, strict=True)]
        for i, v in enumerate(atoms):
            self.one_way[i] += np.bincount(v, minlength=self.one_way[i].size)
        for (i, j), table in self.two_way.items():
            k = table.shape[1]
            table += np.bincount(cells[i] * k + cells[j], minlength=table.size).reshape(table.shape)

    def subset(self, kept: tuple[int, ...]) -> PairCounts:
        """The counts of the attributes at these positions only (the plan's `kept`)."""
        out = PairCounts(tuple(self.attributes[i] for i in kept))
        out.one_way = [self.one_way[i] for i in kept]
        out.two_way = {
            (a, b): self.two_way[(i, j)] for (a, i), (b, j) in combinations(enumerate(kept), 2)
        }
        return out

    def merge(self, other: PairCounts) -> PairCounts:
        self.one_way = [a + b for a, b in zip(self.one_way, other.one_way, strict=True)]
        for key in self.two_way:
            self.two_way[key] += other.two_way[key]
        return self


def measure_one_way(
    exact: list[np.ndarray], mp: Plan, source: noise.RandomSource, ledger: Ledger
) -> list[one_way_release.Release]:
    """Every attribute's one-way histograms plus noise, in one or two stages (spend recorded)."""
    releases = one_way_release.measure(exact, mp.attributes, mp.one_way_scales(), source)
    record_one_way(mp, ledger)
    return releases


def record_one_way(mp: Plan, ledger: Ledger) -> None:
    """The one-way spend: eps_1 over the attributes, each in one or two stages (`one_way`)."""
    scales = mp.one_way_scales()
    two = [s for s in scales if s.second is not None]
    stages = (
        {
            "two_stage_attributes": len(two),
            "first_stage_scale": float(two[0].first),
            "second_stage_scale": float(two[0].second),
            "second_stage_share": float(one_way_release.SECOND),
        }
        if two
        else {}
    )
    ledger.record(
        Spend(
            step="marginals-one-way",
            mechanism="noisy one-way histograms of every column (mechanisms/pairs)",
            epsilon=mp.one_way,
            sensitivity=mp.sensitivity,
            noise={
                "distribution": "discrete Laplace",
                "scale": float(mp.one_way_scale),
                "histograms": len(mp.attributes),
                "composition": "sequential over the columns, eps/columns each",
                **stages,
            },
        )
    )


def add_noise(
    arrays: list[np.ndarray], scale: Fraction, source: noise.RandomSource
) -> list[np.ndarray]:
    """Each array plus discrete Laplace noise of `scale`, drawn in one batch, in order."""
    if not arrays:
        return []
    draws = noise.discrete_laplace(source, scale, sum(a.size for a in arrays))
    ends = np.cumsum([a.size for a in arrays])[:-1]
    return [a + z.reshape(a.shape) for a, z in zip(arrays, np.split(draws, ends), strict=True)]


def consistent_one_way(
    noisy: list[np.ndarray], mp: Plan, rng: np.random.Generator
) -> list[np.ndarray]:
    """Noisy one-way histograms pruned (cells below kappa deviations) and made non-negative
    integers that sum to their noisy total (`hierarchy.consistent_leaf_counts`)."""
    variance = mp.one_way_variance
    out = []
    for a, h in zip(mp.attributes, noisy, strict=True):
        kappa = ONE_WAY_KAPPA if a.numeric else LEVEL_KAPPA
        leaves = hierarchy.consistent_leaf_counts(
            [h.astype(np.float64)], [variance], [h.size], kappa, rng
        )
        out.append(leaves.astype(np.float64))
    return out


def combined_marginals(
    noisy_one_way: list[np.ndarray],
    value_bin: list[np.ndarray],
    k: list[int],
    measured: dict[tuple[int, int], np.ndarray],
    mp: Plan,
    variances: Sequence[float] | None = None,
    support: Sequence[np.ndarray] | None = None,
) -> list[np.ndarray]:
    """Each attribute's bin probabilities: the inverse-variance mix of its noisy one-way
    histogram summed into bins and the row (column) sums of every noisy two-way table it is
    in (independent noise, so this is the least-squares estimate from them), clipped at 0.
    `variances`: one value's noise variance per attribute (default: the plan's one-way).
    `support`: the consistent one-way counts; a bin of a two-stage number (`one_way`) where
    they are all pruned gets nothing: its rows would be placed evenly over the bin, up to a fifth
    of a count column's rows over its empty tail (a thinly spread column with less signal keeps
    its pair sums: a nullable date-time's present values, all below the pruning, would go)."""
    v2 = mp.pair_variance if mp.edges else 0.0
    out = []
    for a, (h, b) in enumerate(zip(noisy_one_way, value_bin, strict=True)):
        v1 = mp.one_way_variance if variances is None else variances[a]
        width = np.bincount(b, minlength=k[a])
        num = np.bincount(b, weights=h, minlength=k[a]) / (width * v1)
        den = 1.0 / (width * v1)
        for (x, y), t in measured.items():
            if a in (x, y):
                sums, other = (t.sum(axis=1), t.shape[1]) if x == a else (t.sum(axis=0), t.shape[0])
                num, den = num + sums / (other * v2), den + 1.0 / (other * v2)
        m = np.maximum(num / den, 0.0)
        if support is not None and mp.attributes[a].first:
            held = np.bincount(b, weights=support[a], minlength=k[a]) > 0
            m = np.where(held, m, 0.0) if held.any() else m
        out.append(m / m.sum() if m.sum() > 0 else np.full(k[a], 1.0 / k[a]))
    return out


def fit_pairs(
    noisy: dict[tuple[int, int], np.ndarray],
    marg: list[np.ndarray],
    total: float,
    mp: Plan,
    fit_floor: float = FIT_FLOOR,
) -> dict[tuple[int, int], np.ndarray]:
    """Every noisy two-way table fitted to the marginals of its two attributes (cells below
    `fit_floor` noise deviations taken as empty)."""
    if not noisy:
        return {}
    floor = fit_floor * math.sqrt(mp.pair_variance)
    return {
        e: tree_model.fit_pair(t, total * marg[e[0]], total * marg[e[1]], floor)
        for e, t in noisy.items()
    }


def coarse_bins(attr: Attribute, mass: np.ndarray, bins: int, keep: float = math.inf) -> np.ndarray:
    """Each coarse cell's bin (released mass per value only): numbers in quantile runs, levels
    by frequency (and a level with released mass at least `keep` in a bin of its own: the fine
    grid, `fine_bins`); the missing value alone in the last bin."""
    cells = np.bincount(attr.value_coarse(), weights=mass, minlength=attr.coarse)
    if attr.missing:
        cells = cells[:-1]
    if attr.numeric:
        per_cell = tree_model.quantile_bins(cells, bins)
    else:
        per_cell = tree_model.level_bins(cells, bins, keep)
    if attr.missing:
        per_cell = np.append(per_cell, per_cell.max() + 1)
    return per_cell


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
    """One statistics pass, one-way release, tree selection and measurement, second parents
    selected and measured, model."""
    X = as_rows(X)
    check_columns(X.d - len(X.flagged))  # checked before any spend too (`synth.plan_budget`)
    mp = plan(epsilon, noisy_rows, X, relation)
    attrs = mp.attributes
    stats = X.ahead_of(PairCounts) or X.collect(partial(PairCounts.of, X))
    if mp.kept:
        stats = stats.subset(mp.kept)
    exact = [
        np.bincount(a.atom_value(), weights=c, minlength=a.values).astype(np.int64)
        for a, c in zip(attrs, stats.one_way, strict=True)
    ]
    releases = measure_one_way(exact, mp, source.spawn("one-way"), ledger)
    one_way = [
        r.consistent(ONE_WAY_KAPPA if r.attribute.numeric else LEVEL_KAPPA, rng) for r in releases
    ]
    noisy_one_way, variances = zip(
        *(r.for_mix(c) for r, c in zip(releases, one_way, strict=True)), strict=True
    )
    noisy_one_way = list(noisy_one_way)
    coarse_bin = [coarse_bins(a, m, mp.bins) for a, m in zip(attrs, one_way, strict=True)]
    value_bin = [b[a.value_coarse()] for a, b in zip(attrs, coarse_bin, strict=True)]
    pair_bin = [b[a.pair_coarse()] for a, b in zip(attrs, coarse_bin, strict=True)]
    k = [int(b.max()) + 1 for b in coarse_bin]
    total = max(float(noisy_rows), 1.0)
    marg = combined_marginals(noisy_one_way, value_bin, k, {}, mp)
    tables = binned_tables(stats.two_way, pair_bin, k)
    record_spends(mp, ledger)
    declared = declared_edges(attrs, X.determines)
    grid = FineGrid.of(mp, one_way, coarse_bin, declared)
    fine_tables = binned_tables(
        {e: stats.two_way[e] for e in grid.pairs(k)}, grid.pair_bins(), grid.k
    )
    fine_scores = grid.scores(fine_tables, noisy_one_way, k, total, declared)
    select_source, measure_source = source.spawn("select"), source.spawn("two-way")
    edges, on_fine = select_tree(tables, marg, total, mp, select_source, fine_scores, declared)
    on_fine |= {(min(e), max(e)) for e in declared}
    order, parent = tree_model.bfs_order(edges, len(attrs))
    tree = [(parent[a], a) for a in order if parent[a] >= 0]
    fine_edges = [e for e in tree if (min(e), max(e)) in on_fine]
    chosen = {e: fine_tables[e] if e in fine_edges else tables[e] for e in tree}
    noisy_all = measure(chosen, tree, mp, measure_source)
    noisy = {e: t for e, t in noisy_all.items() if e not in fine_edges}
    noisy_fine = {e: noisy_all[e] for e in fine_edges}
    marg = combined_marginals(noisy_one_way, value_bin, k, noisy, mp, variances, one_way)
    joints = {**fit_pairs(noisy, marg, total, mp), **grid.fit(noisy_fine, marg, total, k)}
    fine_tables = {e: t for e, t in fine_tables.items() if e not in tree}  # (b, c) candidates
    seconds, fine_c = select_seconds(
        tables, joints, order, parent, mp, select_source, grid, fine_tables
    )
    wanted = [(b, c) for c, b in seconds.items()]
    chosen = {e: fine_tables[e] if e[1] in fine_c else tables[e] for e in wanted}
    extra = measure(chosen, wanted, mp, measure_source)
    fine_edges += [e for e in wanted if e[1] in fine_c]
    noisy_fine.update({e: extra.pop(e) for e in wanted if e[1] in fine_c})
    marg = combined_marginals(
        noisy_one_way, value_bin, k, {**noisy, **extra}, mp, variances, one_way
    )
    fitted = grid.fit(noisy_fine, marg, total, k)
    joints = {**fit_pairs(noisy, marg, total, mp), **{e: fitted[e] for e in tree if e in fitted}}
    extra = {**fit_pairs(extra, marg, total, mp), **{e: fitted[e] for e in wanted if e in fitted}}
    model = build_model(attrs, X.d, value_bin, one_way, marg, order, parent, joints, extra)
    maps = learned_maps(noisy_fine, declared)
    place = grid.refined(model, value_bin, noisy_fine, marg, total, maps)
    want = max(int(noisy_rows), 0) if rows is None else int(rows)
    sizes = np.full(want // OUTPUT_CHUNK, OUTPUT_CHUNK, dtype=np.int64)
    if want % OUTPUT_CHUNK:
        sizes = np.append(sizes, want % OUTPUT_CHUNK)
    description = {
        **mp.to_json(),
        "bins": k,
        "tree_edges": [[parent[a], a] for a in order if parent[a] >= 0],
        "second_parent_edges": [[b, c] for c, b in seconds.items()],
        "fine_edges": [[p, c, int(grid.k[p]), int(grid.k[c])] for p, c in fine_edges],
        "learned_maps": [[i, j] for i, j in maps],
    }
    return MechanismRun(
        output=Output(sizes, place, rng, X.d),
        description=description,
        guarantee="no a-priori W1 bound (the model keeps only the dependences it measures); "
        "epsilon-DP by the sensitivity argument in mechanisms/pairs",
        w1_bound=None,
    )


def binned_tables(
    two_way: dict[tuple[int, int], np.ndarray], pair_bin: list[np.ndarray], k: list[int]
) -> dict[tuple[int, int], np.ndarray]:
    """Every pair's exact two-way histogram on the bins (private: for scores and noise only),
    under both orders of the pair."""
    out = {}
    for (i, j), t in two_way.items():
        out[(i, j)] = np.zeros((k[i], k[j]), dtype=np.int64)  # exact counts
        np.add.at(out[(i, j)], (pair_bin[i][:, None], pair_bin[j][None, :]), t)
        out[(j, i)] = out[(i, j)].T
    return out


def record_spends(mp: Plan, ledger: Ledger) -> None:
    """The selection and two-way spends, each recorded once for all its rounds."""
    if not mp.edges:
        return
    if mp.select:
        record_select(mp, ledger)
    ledger.record(
        Spend(
            step="marginals-two-way",
            mechanism="noisy two-way histograms of the chosen column pairs (mechanisms/pairs)",
            epsilon=mp.pairs,
            sensitivity=mp.sensitivity,
            noise={
                "distribution": "discrete Laplace",
                "scale": float(mp.pair_scale),
                "histograms": mp.measurements,
                "composition": "sequential over the pairs, eps/pairs each",
            },
        )
    )


def record_select(mp: Plan, ledger: Ledger) -> None:
    ledger.record(
        Spend(
            step="marginals-select",
            mechanism="a spanning tree of column pairs, then second parents, by "
            "permute-and-flip (mechanisms/pairs)",
            epsilon=mp.select,
            sensitivity=mp.sensitivity,
            noise={
                "distribution": "permute-and-flip (exponential-mechanism family)",
                "rounds": mp.rounds,
                "epsilon_per_round": float(mp.round_epsilon),
                "score": "L1 distance of a pair's two-way histogram from what the model "
                "released so far implies (the product of one-way marginals for the tree), "
                "rounded down (a level pair on its fine grid: less a public penalty)",
            },
        )
    )


def _pick(source: noise.RandomSource, scores: list[int], mp: Plan) -> int:
    q = np.array(scores, dtype=np.int64)
    return noise.permute_and_flip(source, q, mp.round_epsilon, mp.sensitivity)


REFERENCE_BITS = 20  # the reference table of a score, on the grid of 2^-20 (public)


def score(counts: np.ndarray, reference: np.ndarray) -> int:
    """floor(|counts - R|_1) in exact integer arithmetic, R the `reference` (a function of
    released values) rounded to the 2^-REFERENCE_BITS grid, itself post-processing. A row moves
    |counts - R|_1 by at most sens exactly (triangle inequality), so the floor by at most sens:
    no float rounding can carry a score across an integer (issue 35, finding 7). Exact for up
    to 2^42 rows in a cell; the sum is split in 32-bit halves so it cannot overflow."""
    one = 1 << REFERENCE_BITS
    grid = np.rint(np.asarray(reference, dtype=np.float64) * one).astype(np.int64)
    gap = np.abs(np.asarray(counts, dtype=np.int64) * one - grid)
    high, low = int((gap >> 32).sum()), int((gap & 0xFFFFFFFF).sum())
    return ((high << 32) + low) >> REFERENCE_BITS


def select_tree(
    tables: dict[tuple[int, int], np.ndarray],
    marg: list[np.ndarray],
    total: float,
    mp: Plan,
    source: noise.RandomSource,
    fine: dict[tuple[int, int], int] | None = None,
    forced: list[tuple[int, int]] = (),
) -> tuple[list[tuple[int, int]], set[tuple[int, int]]]:
    """The `forced` (declared) edges, then D - 1 - len(forced) rounds of permute-and-flip among
    the pairs joining two components: the tree of the pairs furthest from independence, as
    MST chooses it. `fine`: more candidates, a level pair on its fine grid with its score;
    returns the edges and those of them chosen on the fine grid."""
    D = len(marg)
    pairs = [(i, j) for i in range(D) for j in range(i + 1, D)]
    scores = [score(tables[p], total * np.outer(marg[p[0]], marg[p[1]])) for p in pairs]
    options = [(p, False) for p in pairs] + [(p, True) for p in fine or {}]
    scores += list((fine or {}).values())
    component = list(range(D))
    edges: list[tuple[int, int]] = []
    chosen_fine: set[tuple[int, int]] = set()

    def join(pick: tuple[int, int]) -> None:
        nonlocal component
        edges.append(pick)
        old, new = component[pick[1]], component[pick[0]]
        component = [new if c == old else c for c in component]

    for pick in forced:
        join(pick)
    for _ in range(D - 1 - len(forced)):
        open_ = [n for n, ((a, b), _f) in enumerate(options) if component[a] != component[b]]
        pick, on_fine = options[open_[_pick(source, [scores[n] for n in open_], mp)]]
        if on_fine:
            chosen_fine.add(pick)
        join(pick)
    return edges, chosen_fine


def second_candidates(
    tables: dict[tuple[int, int], np.ndarray],
    joints: dict[tuple[int, int], np.ndarray],
    order: list[int],
    parent: list[int],
    reference: bool = False,
) -> tuple[list[tuple[int, int]], list[int]]:
    """The (c, b) pairs that may give c a second parent b (a tree neighbour of c's parent p
    placed before c) and each one's score: the L1 distance of the (b, c) table in `tables`
    (both orders) from what the tree's `joints` imply."""
    position = {a: i for i, a in enumerate(order)}
    nbrs: dict[int, list[int]] = {a: [] for a in order}
    for p, c in joints:
        nbrs[p].append(c)
        nbrs[c].append(p)
    candidates, scores = [], []
    for c in order:
        p = parent[c]
        if p < 0:
            continue
        given_p = tree_model.normalised(joints[(p, c)], np.zeros(joints[(p, c)].shape[1]))
        for b in nbrs[p]:
            if b != c and position[b] < position[c]:
                bp = joints[(b, p)] if (b, p) in joints else joints[(p, b)].T
                candidates.append((c, b))
                if reference:  # the implied tables themselves (`FineGrid.second`)
                    candidates[-1] = ((c, b), bp @ given_p)
                else:
                    scores.append(score(tables[(b, c)], bp @ given_p))
    return candidates, scores


def select_seconds(
    tables: dict[tuple[int, int], np.ndarray],
    joints: dict[tuple[int, int], np.ndarray],
    order: list[int],
    parent: list[int],
    mp: Plan,
    source: noise.RandomSource,
    grid: FineGrid | None = None,
    fine_tables: dict[tuple[int, int], np.ndarray] | None = None,
) -> tuple[dict[int, int], set[int]]:
    """`mp.extras` rounds of permute-and-flip: attribute c gets a second parent b, a tree
    neighbour of its parent placed before it (so (b, parent, c) is a triangle the sampler can
    condition on), scored by how far the (b, c) histogram is from what the tree implies; with
    a `grid`, a level pair with a fine table is also a candidate on it (`FineGrid.second`).
    Returns c -> b and the c whose (b, c) is measured on the fine grid."""
    candidates, scores = second_candidates(tables, joints, order, parent)
    options = [(c, b, False) for c, b in candidates]
    if grid is not None and fine_tables:
        more = grid.second(fine_tables, joints, order, parent)
        options += [(c, b, True) for c, b in more]
        scores += list(more.values())
    chosen: dict[int, int] = {}
    on_fine: set[int] = set()
    for _ in range(mp.extras):
        open_ = [n for n, (c, _b, _f) in enumerate(options) if c not in chosen]
        if not open_:
            break
        c, b, fine = options[open_[_pick(source, [scores[n] for n in open_], mp)]]
        chosen[c] = b
        if fine:
            on_fine.add(c)
    return chosen, on_fine


def measure(
    tables: dict[tuple[int, int], np.ndarray],
    pairs: list[tuple[int, int]],
    mp: Plan,
    source: noise.RandomSource,
) -> dict[tuple[int, int], np.ndarray]:
    """These pairs' two-way histograms on the bins plus discrete Laplace noise of the plan's
    scale (the spend is recorded by `record_spends`)."""
    if not pairs:  # nothing measured (no pair budget to scale by)
        return {}
    noisy = add_noise([tables[e] for e in pairs], mp.pair_scale, source)
    return dict(zip(pairs, noisy, strict=True))


def build_model(
    attrs: tuple[Attribute, ...],
    d: int,
    value_bin: list[np.ndarray],
    one_way: list[np.ndarray],
    marg: list[np.ndarray],
    order: list[int],
    parent: list[int],
    joints: dict[tuple[int, int], np.ndarray],
    extra: dict[tuple[int, int], np.ndarray],
    link_bins: int = LINK_BINS,
) -> tree_model.TreeModel:
    """The model from released values (post-processing): each attribute's parents and
    P(bin | parents' bins), within-bin quantiles, copula links along tree edges (between two
    numbers with at least `link_bins` bins each)."""
    quantiles = [
        tree_model.Quantiles.of(b, m, a.size if a.kind == "cell" else 0)
        for a, b, m in zip(attrs, value_bin, one_way, strict=True)
    ]
    second = {c: b for b, c in extra}
    parents, conditional, link = [], [], []
    for a in range(len(attrs)):
        p = parent[a]
        if p < 0:
            parents.append(())
            conditional.append(marg[a][None, :])
            link.append(0.0)
            continue
        pc = joints[(p, a)]
        both = attrs[a].numeric and attrs[p].numeric and min(pc.shape) >= link_bins
        link.append(tree_model.link_correlation(pc) if both else 0.0)
        if a in second:
            b = second[a]
            bp = joints[(b, p)] if (b, p) in joints else joints[(p, b)].T
            joint = tree_model.fit_triple(bp, pc, extra[(b, a)])
            parents.append((b, p))
            conditional.append(tree_model.normalised(joint.reshape(-1, pc.shape[1]), marg[a]))
        else:
            parents.append((p,))
            conditional.append(tree_model.normalised(pc, marg[a]))
    return tree_model.TreeModel(
        attrs, d, tuple(order), tuple(parents), tuple(conditional), tuple(quantiles), tuple(link)
    )


@dataclass(frozen=True)
class FineGrid:
    """Level attributes on their fine grid (post-processing of the one-way release): the
    coarse bins refined so that every level whose released count is at least LEVEL_KEEP
    two-way noise deviations keeps its own bin, the small levels pooled (`level_bins`); a
    declared pair's two columns keep every level. Numbers keep their coarse bins. A pair of
    level attributes whose fine grid is finer than its coarse one is a second candidate of
    the tree's selection, scored on its fine table less a public penalty, FINE_PENALTY noise
    deviations per extra cell (the L1 noise the extra cells bring), so the fine table wins
    only where the dependence it shows beyond the coarse table's outweighs its noise: a
    strong dependence (one category nearly determining another)."""

    plan: Plan
    one_way: list[np.ndarray]  # released one-way counts (consistent), per value
    bins: list[np.ndarray]  # coarse cell -> fine bin
    to_coarse: list[np.ndarray]  # fine bin -> coarse bin
    full: frozenset[int]  # attributes of declared pairs: every level

    @classmethod
    def of(
        cls,
        mp: Plan,
        one_way: list[np.ndarray],
        coarse_bin: list[np.ndarray],
        declared: list[tuple[int, int]],
    ) -> FineGrid:
        full = frozenset(a for e in declared for a in e)
        keep = LEVEL_KEEP * math.sqrt(mp.pair_variance) if mp.edges else math.inf
        bins, to_coarse = [], []
        for i, (a, m, c) in enumerate(zip(mp.attributes, one_way, coarse_bin, strict=True)):
            f = c if a.numeric else coarse_bins(a, m, mp.bins, -math.inf if i in full else keep)
            t = np.zeros(int(f.max()) + 1, dtype=np.int64)
            t[f] = c
            bins.append(f)
            to_coarse.append(t)
        return cls(mp, one_way, bins, to_coarse, full)

    @property
    def k(self) -> list[int]:
        return [t.size for t in self.to_coarse]

    def pair_bins(self) -> list[np.ndarray]:
        return [f[a.pair_coarse()] for a, f in zip(self.plan.attributes, self.bins, strict=True)]

    def value_bins(self) -> list[np.ndarray]:
        return [f[a.value_coarse()] for a, f in zip(self.plan.attributes, self.bins, strict=True)]

    def pairs(self, k: list[int]) -> list[tuple[int, int]]:
        """The level pairs with a fine grid finer than their coarse bins `k` (and the declared
        pairs): the pairs whose fine tables are counted."""
        attrs, kf = self.plan.attributes, self.k
        return [
            (i, j)
            for i, j in combinations(range(len(attrs)), 2)
            if not attrs[i].numeric
            and not attrs[j].numeric
            and attrs[i].part is None  # a weekday: written through its date (`wallclock`)
            and attrs[j].part is None
            and (kf[i] > k[i] or kf[j] > k[j] or {i, j} <= self.full)
        ]

    def scores(
        self,
        tables: dict[tuple[int, int], np.ndarray],
        noisy_one_way: list[np.ndarray],
        k: list[int],
        total: float,
        declared: list[tuple[int, int]],
    ) -> dict[tuple[int, int], int]:
        """Each fine candidate's score: floor(|H - E|_1) on the fine grid, E the product of the
        noisy one-way marginals on it (released), less ceil(FINE_PENALTY deviations x the cells
        it adds), a public integer: the score keeps sensitivity sens (`score`)."""
        if not self.plan.edges:
            return {}
        kf = self.k
        marg = combined_marginals(noisy_one_way, self.value_bins(), kf, {}, self.plan)
        penalty = FINE_PENALTY * math.sqrt(self.plan.pair_variance)
        skip = {(min(e), max(e)) for e in declared}
        return {
            (i, j): score(tables[(i, j)], total * np.outer(marg[i], marg[j]))
            - math.ceil(penalty * (kf[i] * kf[j] - k[i] * k[j]))
            for i, j in self.pairs(k)
            if (i, j) not in skip
        }

    def second(
        self,
        tables: dict[tuple[int, int], np.ndarray],
        joints: dict[tuple[int, int], np.ndarray],
        order: list[int],
        parent: list[int],
    ) -> dict[tuple[int, int], int]:
        """Second-parent candidates (c, b) between level attributes with a fine table, each
        scored as `second_candidates` does on the fine grid: the tree's implied (b, c) table
        split into fine bins by the released one-way shares, less the fine penalty."""
        candidates, _ = second_candidates({}, joints, order, parent, reference=True)
        kf = self.k
        penalty = FINE_PENALTY * math.sqrt(self.plan.pair_variance)
        out = {}
        for (c, b), implied in candidates:
            if (b, c) not in tables:
                continue
            sb, sc = self.shares(b), self.shares(c)
            tb, tc = self.to_coarse[b], self.to_coarse[c]
            fine = implied[tb][:, tc] * sb[:, None] * sc[None, :]
            cells = kf[b] * kf[c] - implied.size
            out[(c, b)] = score(tables[(b, c)], fine) - math.ceil(penalty * cells)
        return out

    def shares(self, a: int) -> np.ndarray:
        """Each fine bin's share of its coarse bin (released one-way counts)."""
        ones = np.ones(int(self.to_coarse[a].max()) + 1)
        return self.marginal(a, ones)

    def marginal(self, a: int, marg: np.ndarray) -> np.ndarray:
        """Attribute a's fine-bin probabilities: its coarse bins' (`marg`) split by the
        one-way release."""
        t = self.to_coarse[a]
        w = np.bincount(
            self.value_bins()[a], weights=np.maximum(self.one_way[a], 0.0), minlength=t.size
        )
        w = w + 1e-9 * max(float(w.sum()), 1.0) / t.size
        per = np.bincount(t, weights=w, minlength=marg.size)
        return marg[t] * w / per[t]

    def joints(
        self, noisy: dict[tuple[int, int], np.ndarray], marg: list[np.ndarray], total: float
    ) -> dict[tuple[int, int], np.ndarray]:
        """Every noisy fine table fitted to the fine marginals of its two attributes, cells
        below FINE_FLOOR noise deviations taken as empty."""
        if not noisy:
            return {}
        floor = FINE_FLOOR * math.sqrt(self.plan.pair_variance)
        return {
            (p, c): tree_model.fit_pair(
                t, total * self.marginal(p, marg[p]), total * self.marginal(c, marg[c]), floor
            )
            for (p, c), t in noisy.items()
        }

    def fit(
        self,
        noisy: dict[tuple[int, int], np.ndarray],
        marg: list[np.ndarray],
        total: float,
        k: list[int],
    ) -> dict[tuple[int, int], np.ndarray]:
        """The fitted fine tables summed into the coarse bins (the tree model's tables)."""
        out = {}
        for (p, c), t in self.joints(noisy, marg, total).items():
            table = np.zeros((k[p], k[c]))
            np.add.at(table, (self.to_coarse[p][:, None], self.to_coarse[c][None, :]), t)
            out[(p, c)] = table
        return out

    def within(self, a: int) -> np.ndarray:
        """P(value | fine bin) of attribute a: (fine bins, values), from the one-way release."""
        f = self.value_bins()[a]
        w = np.maximum(self.one_way[a], 0.0) + 1e-9
        out = np.zeros((self.to_coarse[a].size, f.size))
        out[f, np.arange(f.size)] = w
        return out / out.sum(axis=1, keepdims=True)

    def refined(
        self,
        model: tree_model.TreeModel,
        value_bin: list[np.ndarray],
        noisy: dict[tuple[int, int], np.ndarray],
        marg: list[np.ndarray],
        total: float,
        maps: dict[tuple[int, int], np.ndarray],
    ) -> tree_model.TreeModel | Refined:
        """The model with its fine edges' values placed from their fine tables, and the
        declared maps applied (post-processing); the model itself without any."""
        if not noisy:
            return model
        fitted = self.joints(noisy, marg, total)
        fine_of = self.value_bins()
        pairs_ = tuple(
            FinePair(
                p,
                c,
                fitted[(p, c)],
                (value_bin[p], value_bin[c]),
                (self.to_coarse[p], self.to_coarse[c]),
                (self.within(p), self.within(c)),
                (self.marginal(p, marg[p]), self.marginal(c, marg[c])),
            )  # fmt: skip
            for p, c in fitted
        )
        laws = []
        for (i, j), best in maps.items():  # fine bin of i -> fine bin of j -> j's likeliest value
            value = np.argmax(self.within(j), axis=1)
            laws.append((i, j, value[best[fine_of[i]]]))
        return Refined(model, pairs_, tuple(laws))


def learned_maps(
    noisy: dict[tuple[int, int], np.ndarray], declared: list[tuple[int, int]]
) -> dict[tuple[int, int], np.ndarray]:
    """Each declared pair (i, j)'s map, fine bin of i -> fine bin of j: the largest cell of
    each row of its noisy full-resolution table (post-processing of that release)."""
    out = {}
    for i, j in declared:
        t = noisy[(i, j)] if (i, j) in noisy else noisy[(j, i)].T
        out[(i, j)] = np.argmax(t, axis=1)
    return out


@dataclass(frozen=True)
class FinePair:
    """A tree edge measured on the fine grids: given the rows' coarse bins (p, c) drawn by the
    tree model, their fine bins are drawn from the fitted fine table's block (p, c), and the
    values from the one-way release inside them, so the dependence below the coarse bins is
    kept (a block without mass: the product of the fine marginals)."""

    p: int
    c: int
    joint: np.ndarray  # fitted fine table
    coarse_of: tuple[np.ndarray, np.ndarray]  # value -> coarse bin
    to_coarse: tuple[np.ndarray, np.ndarray]  # fine bin -> coarse bin
    within: tuple[np.ndarray, np.ndarray]  # (fine bins, values): P(value | fine bin)
    mass: tuple[np.ndarray, np.ndarray]  # fine marginals

    def place(self, attrs: tuple[Attribute, ...], out: np.ndarray, rng: np.random.Generator):
        a, b = attrs[self.p], attrs[self.c]
        n = out.shape[0]
        if not n:
            return
        ca = self.coarse_of[0][a.atom_value()[a.encode(out)]]
        cb = self.coarse_of[1][b.atom_value()[b.encode(out)]]
        kb = int(self.to_coarse[1].max()) + 1
        block = ca * kb + cb
        order = np.argsort(block, kind="stable")
        starts = np.flatnonzero(np.diff(block[order], prepend=-1))
        fa, fb = np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64)
        for rows in np.split(order, starts[1:]):
            g = int(block[rows[0]])
            ia = np.flatnonzero(self.to_coarse[0] == g // kb)
            ib = np.flatnonzero(self.to_coarse[1] == g % kb)
            sub = self.joint[np.ix_(ia, ib)].ravel()
            if not sub.sum() > 0:
                sub = np.outer(self.mass[0][ia], self.mass[1][ib]).ravel() + 1e-300
            label = tree_model.allocate(
                np.zeros(rows.size, dtype=np.int64), (sub / sub.sum())[None, :], rng
            )
            fa[rows], fb[rows] = ia[label // ib.size], ib[label % ib.size]
        zero = np.zeros(n)
        a.write(out, tree_model.allocate(fa, self.within[0], rng), zero)
        b.write(out, tree_model.allocate(fb, self.within[1], rng), zero)


@dataclass(frozen=True)
class Refined:
    """The tree model's rows with the fine edges' values refined (`FinePair`) and each declared
    map (i, j, value of i -> value of j) applied: j's value set from i's (post-processing)."""

    model: tree_model.TreeModel
    pairs: tuple[FinePair, ...]
    maps: tuple[tuple[int, int, np.ndarray], ...]

    def __call__(
        self, cells: np.ndarray, counts: np.ndarray, rng: np.random.Generator
    ) -> np.ndarray:
        out = self.model(cells, counts, rng)
        attrs = self.model.attributes
        for pair in self.pairs:
            pair.place(attrs, out, rng)
        for i, j, law in self.maps:
            a = attrs[i]
            attrs[j].write(out, law[a.atom_value()[a.encode(out)]], np.zeros(out.shape[0]))
        return out
