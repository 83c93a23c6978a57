"""A tree-shaped graphical model fitted to noisy marginals, and rows drawn from it.

Post-processing of released values only (noisy one-way and two-way histograms, public grids):
no privacy cost. Given a spanning tree over the attributes, one-way marginals p_a and, on every
edge (a, b), a noisy two-way histogram, the model is

    P(x) = prod over edges T_ab(x_a, x_b) / prod over attributes p_a(x_a)^(degree(a) - 1),

the maximum-entropy distribution with those marginals (for a tree it needs no inference: the
junction tree is the tree itself, as in MST's Private-PGM step). Each edge table T_ab is the
noisy histogram with cells below a noise threshold set to zero, fitted to the one-way marginals
of both ends by iterative proportional fitting, so all tables agree on every attribute and the
model is consistent.

Rows are drawn ancestrally from a root, with systematic (low-variance) allocation instead of
independent draws: the m rows with a parent's value get a child value k floor- or ceil-of
m P(k | parent) times, unbiased, then shuffled. Values inside a bin follow the fine one-way
release the same way, and a numeric value is uniform inside its cell of the one-way grid.
Drawing n rows independently would add a multinomial error of order sqrt(cells / n) to every
marginal, as large as the noise at the sizes users have.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from dpsynth_cli.mechanisms.attributes import Attribute
from dpsynth_cli.mechanisms.placement import linear_inverse_cdf, relative_slope

IPF_ROUNDS = 60
LINK_MAX = 0.995
TAIL_SHARE = 0.0  # of a number's bins spread evenly over its released support


def quantile_bins(mass: np.ndarray, bins: int) -> np.ndarray:
    """Contiguous groups of cells (released values): cell -> bin, numbered 0.. in order. Bins
    hold about equal shares of a mixture: the mass, and (TAIL_SHARE) the span of cells with
    mass, so a long thin tail, where a number's variance and correlations live, keeps bins of
    its own. A cell heavier than 1/bins of the mixture is a bin of its own."""
    total = float(mass.sum())
    if total <= 0 or bins >= mass.size:
        return np.arange(mass.size) * min(bins, mass.size) // mass.size
    support = (mass > 0).astype(np.float64)
    weight = (1 - TAIL_SHARE) * mass / total + TAIL_SHARE * support / support.sum()
    centre = np.cumsum(weight) - weight / 2
    raw = np.minimum((centre * bins).astype(np.int64), bins - 1)
    return np.unique(raw, return_inverse=True)[1].astype(np.int64)


def level_bins(mass: np.ndarray, bins: int, keep: float = math.inf) -> np.ndarray:
    """Levels as bins; with more levels than bins, the bins - 1 most frequent (released
    counts) keep their own bin, and so does every level whose released count is at least
    `keep`; the others share the last bin. With a finite `keep` the bins refine those without
    (the same most frequent levels keep theirs; the shared bin is split)."""
    if mass.size <= bins:
        return np.arange(mass.size)
    own = np.zeros(mass.size, dtype=bool)
    own[np.argsort(-mass, kind="stable")[: bins - 1]] = True
    own |= mass >= keep
    kept = int(own.sum())
    out = np.full(mass.size, kept)
    out[own] = np.arange(kept)
    return out


def fit_pair(noisy: np.ndarray, rows: np.ndarray, cols: np.ndarray, floor: float) -> np.ndarray:
    """A non-negative table with row sums `rows` and column sums `cols` (equal totals), close
    to the noisy histogram: cells below `floor` (noise level) are zero, a trace of the
    independent table keeps every margin reachable, then iterative proportional fitting."""
    total = max(float(rows.sum()), 1e-12)
    table = np.where(noisy > floor, noisy, 0.0).astype(np.float64)
    table += 1e-6 * np.outer(rows, cols) / total
    for _ in range(IPF_ROUNDS):
        table *= (rows / np.maximum(table.sum(axis=1), 1e-300))[:, None]
        table *= (cols / np.maximum(table.sum(axis=0), 1e-300))[None, :]
    return table


def fit_triple(bp: np.ndarray, pc: np.ndarray, bc: np.ndarray) -> np.ndarray:
    """The maximum-entropy table T(b, p, c) with the three two-way margins (consistent in their
    one-way margins): from the tree's b independent of c given p, iterative proportional fitting
    over (b, c), (p, c), (b, p) in turn, then over (p, c) and (b, p) alone, so that the tree's
    margins hold (they are consistent) where noise makes the three disagree. Shape (b, p, c)."""
    given_p = pc / np.maximum(pc.sum(axis=1, keepdims=True), 1e-300)
    table = bp[:, :, None] * given_p[None, :, :] + 1e-9
    for i in range(IPF_ROUNDS):
        if i < IPF_ROUNDS // 2:  # noise can make the three margins disagree: the tree's two last
            table *= (bc / np.maximum(table.sum(axis=1), 1e-300))[:, None, :]
        table *= (pc / np.maximum(table.sum(axis=0), 1e-300))[None, :, :]
        table *= (bp / np.maximum(table.sum(axis=2), 1e-300))[:, :, None]
    return table


def _grouped(group: np.ndarray, order: np.ndarray) -> np.ndarray:
    """`order` (a permutation of the rows) regrouped by `group`, keeping its order inside
    each group (a stable sort of 16-bit keys is a radix sort: linear time)."""
    keys = group[order]
    if keys.size and keys.max() < 1 << 15:
        keys = keys.astype(np.int16)
    return order[np.argsort(keys, kind="stable")]


def allocate(group: np.ndarray, probs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A label for every row: the m rows of group g get label k floor(m p_gk) or ceil(m p_gk)
    times (systematic sampling, one uniform per group: unbiased), in a random order."""
    G, K = probs.shape
    m = np.bincount(group, minlength=G)
    edges = np.floor(np.cumsum(probs, axis=1) * m[:, None] + rng.random(G)[:, None])
    edges[:, -1] = m
    counts = np.diff(edges, axis=1, prepend=0.0).astype(np.int64)
    labels = np.repeat(np.tile(np.arange(K), G), counts.ravel())
    order = _grouped(group, rng.permutation(group.size))
    out = np.empty(group.size, dtype=np.int64)
    out[order] = labels
    return out


def normalised(table: np.ndarray, fallback: np.ndarray) -> np.ndarray:
    """Rows of `table` scaled to sum to 1; a row without mass is `fallback`."""
    sums = table.sum(axis=1, keepdims=True)
    out = np.divide(table, sums, out=np.zeros_like(table, dtype=np.float64), where=sums > 0)
    out[sums[:, 0] <= 0] = fallback
    return out


@dataclass(frozen=True)
class Quantiles:
    """Where inside its bin a row's value lies, from the one-way release: the values sorted by
    bin (`order`), their cumulative released mass (every value has a trace of mass, so each bin
    has some), and each bin's run in that order."""

    order: np.ndarray  # values, sorted by bin
    cdf: np.ndarray  # cumulative mass over `order`, cdf[0] = 0, cdf[-1] = 1
    lo: np.ndarray  # bin -> position in `order` of its first value
    hi: np.ndarray  # bin -> one past its last
    slope: np.ndarray  # value -> slope of its linear density (0: uniform)

    @classmethod
    def of(cls, value_bin: np.ndarray, mass: np.ndarray, cells: int = 0) -> Quantiles:
        """`cells`: how many of the values are equal cells of a number, in order (their
        density inside a cell follows the neighbours' released masses); 0 for levels and codes."""
        order = np.argsort(value_bin, kind="stable")
        m = np.maximum(mass[order], 0.0) + 1e-9 * max(float(mass.sum()), 1.0) / mass.size
        cdf = np.concatenate([[0.0], np.cumsum(m)]) / m.sum()
        sorted_bins = value_bin[order]
        k = int(value_bin.max()) + 1
        lo = np.searchsorted(sorted_bins, np.arange(k), side="left")
        hi = np.searchsorted(sorted_bins, np.arange(k), side="right")
        slope = np.zeros(mass.size)
        if cells > 1:
            c = np.maximum(mass[:cells], 0.0)
            padded = np.concatenate([c[:1], c, c[-1:]])
            slope[:cells] = relative_slope(padded[:-2], c, padded[2:])
        return cls(order, cdf, lo, hi, slope)

    def place(self, bins: np.ndarray, u: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The value at within-bin quantile u of each row's bin, the position inside that
        value's cell (0..1) and the overall quantile of the point."""
        base, top = self.cdf[self.lo[bins]], self.cdf[self.hi[bins]]
        t = base + u * (top - base)
        at = np.clip(
            np.searchsorted(self.cdf, t, side="right") - 1, self.lo[bins], self.hi[bins] - 1
        )
        width = self.cdf[at + 1] - self.cdf[at]
        frac = np.clip((t - self.cdf[at]) / width, 0.0, 1.0 - 1e-12)
        values = self.order[at]
        return values, linear_inverse_cdf(self.slope[values], frac), t


def within_bin_ranks(bins: np.ndarray, latent: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """u in (0, 1) for every row: its rank by `latent` among the rows of its bin, stratified
    (the m rows of a bin get one point in each 1/m of it)."""
    n = bins.size
    order = _grouped(bins, np.argsort(latent))
    counts = np.bincount(bins)
    start = np.cumsum(counts) - counts
    rank = np.empty(n)
    rank[order] = np.arange(n) - np.repeat(start, counts)
    return (rank + rng.random(n)) / np.maximum(counts[bins], 1)


@dataclass(frozen=True)
class TreeModel:
    """Released model (picklable: Dask workers place batches from it): the attributes, each
    attribute's parent and P(bin | parent's bin) (a root's: its bins' probabilities), the
    within-bin quantiles, and `link`, the normal-scores correlation of each edge's fitted table
    (0 where a level column is involved): inside bins a child's rows are ordered by their
    parent's position through a Gaussian copula of that correlation, so a near-deterministic
    relation (carat and x in diamonds) stays near-deterministic below the bins' resolution
    instead of becoming independent there."""

    attributes: tuple[Attribute, ...]
    d: int  # cube columns
    order: tuple[int, ...]  # attributes, parents before children
    parents: tuple[tuple[int, ...], ...]  # () for a root; (p,) or (b, p): p the tree parent
    conditional: tuple[np.ndarray, ...]  # (product of parents' bins, bins); a root's (1, bins)
    quantiles: tuple[Quantiles, ...]
    link: tuple[float, ...]

    def __call__(
        self, cells: np.ndarray, counts: np.ndarray, rng: np.random.Generator
    ) -> np.ndarray:
        """`counts.sum()` rows drawn from the model as points of the cube (cells are batches of
        rows: all rows are alike)."""
        from scipy.special import ndtri  # here: scipy is a sixth of every command's start-up

        n = int(np.asarray(counts).sum())
        bins = [np.zeros(n, dtype=np.int64)] * len(self.attributes)
        score = [np.zeros(n)] * len(self.attributes)  # normal score of each placed value
        out = np.zeros((n, max([self.d] + [a.column + 1 for a in self.attributes])))
        for a in self.order:
            group = np.zeros(n, dtype=np.int64)
            for p in self.parents[a]:
                group = group * self.conditional[p].shape[1] + bins[p]
            bins[a] = allocate(group, self.conditional[a], rng)
            p, r = (self.parents[a] or (-1,))[-1], self.link[a]
            latent = rng.standard_normal(n)
            if p >= 0 and r != 0.0:
                latent = r * score[p] + math.sqrt(1.0 - r * r) * latent
            u = within_bin_ranks(bins[a], latent, rng)
            values, frac, t = self.quantiles[a].place(bins[a], u)
            self.attributes[a].write(out, values, frac)
            score[a] = ndtri(np.clip(t, 1e-12, 1.0 - 1e-12))
        assemble(self.attributes, out, rng)
        return out[:, : self.d]


def assemble(attributes: tuple[Attribute, ...], out: np.ndarray, rng: np.random.Generator) -> None:
    """Each date or datetime column drawn as wall-clock parts (`wallclock`) written into its
    cube column (and missing flag) from the parts' scratch columns of `out`."""
    parts: dict = {}
    for a in attributes:
        if a.part is not None:
            parts.setdefault(a.part.clock, {})[a.part.name] = out[:, a.column]
    for clock, fractions in parts.items():
        unit = clock.assemble(fractions, rng)
        out[:, clock.column] = unit
        if clock.flag is not None:
            out[:, clock.flag] = np.where(np.isnan(fractions[clock.parts()[0][0]]), 0.75, 0.25)


HERMITE_TERMS = 16


def _scores(p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The bins' normal scores s (mid-quantiles under bin probabilities p) and the Hermite
    coefficients c_k = E[s(Z) He_k(Z)], k = 1..HERMITE_TERMS, of a standard normal Z binned at
    the bins' quantiles (the integral of He_k phi over a bin is a difference of He_(k-1) phi at
    its edges)."""
    from scipy.special import ndtri

    edges = np.concatenate([[0.0], np.cumsum(p)])
    z = ndtri(np.clip(edges, 1e-12, 1 - 1e-12))
    s = ndtri(np.clip((edges[:-1] + edges[1:]) / 2, 1e-9, 1 - 1e-9))
    density = np.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)
    c, previous, current = [], np.zeros_like(z), np.ones_like(z)  # He_(k-2), He_(k-1)
    for k in range(1, HERMITE_TERMS + 1):
        at_edges = current * density
        c.append(s @ (at_edges[:-1] - at_edges[1:]))
        previous, current = current, z * current - (k - 1) * previous
    return s, np.array(c)


def link_correlation(table: np.ndarray) -> float:
    """The Gaussian copula correlation r behind a fitted table of two numbers' bins: for a
    bivariate normal binned at the bins' quantiles the covariance of the normal scores is
    sum_k r^k c_k(x) c_k(y) / k! (Mehler's expansion), so r solves that for the table's
    covariance (bisection; the sum increases in r for comonotone scores). Rows then keep the
    measured dependence below the bins' resolution."""
    total = table.sum()
    if total <= 0:
        return 0.0
    p = table / total
    px, py = p.sum(axis=1), p.sum(axis=0)
    (x, cx), (y, cy) = _scores(px), _scores(py)
    cov = x @ p @ y - (px @ x) * (py @ y)
    terms = cx * cy / np.cumprod(np.arange(1.0, HERMITE_TERMS + 1))
    powers = np.arange(1, HERMITE_TERMS + 1)

    def model(r: float) -> float:
        return float(terms @ r**powers)

    lo, hi = -LINK_MAX, LINK_MAX
    if cov >= model(hi) or cov <= model(lo):
        return hi if cov >= model(hi) else lo
    for _ in range(50):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if model(mid) < cov else (lo, mid)
    return (lo + hi) / 2


def bfs_order(edges: list[tuple[int, int]], k: int, root: int = 0) -> tuple[list[int], list[int]]:
    """Attributes in breadth-first order from `root` over the tree's edges, and each one's
    parent (-1 for the root)."""
    nbrs: list[list[int]] = [[] for _ in range(k)]
    for a, b in edges:
        nbrs[a].append(b)
        nbrs[b].append(a)
    parent, order, seen = [-1] * k, [root], {root}
    for a in order:
        for b in sorted(nbrs[a]):
            if b not in seen:
                seen.add(b)
                parent[b] = a
                order.append(b)
    for a in range(k):  # a forest: other components hang off nothing (their own roots)
        if a not in seen:
            order.append(a)
            seen.add(a)
    return order, parent
