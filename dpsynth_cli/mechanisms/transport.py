"""The d_BL-closest probability measure on a grid of cubic cells, as an integer min-cost flow.

Dissertation Algorithm 2, corrected (shared/seeds/README.md, point 6). The proof of Proposition
3.5 dualises max sum_i (nu_i - tau_i) f_i over |f_i - f_j| <= d_ij, -1 <= f_i <= 1: the
multiplier u_ij of f_i - f_j <= d_ij enters row i with +1 and row j with -1, so the LP is

    min  sum_{i != j} d_ij u_ij + 2 sum_i v_i
    s.t. sum_j u_ij - sum_j u_ji + v_i + tau_i >= nu_i   (every cell i)
         sum_i tau_i = 1,  u, v, tau >= 0,

and its optimum is d_BL(nu, tau*) + nu(Omega) - 1. Read as a flow: the positive mass of a cell
(plus what flows in) is sent on (u, cost d_ij per unit), deleted (v, cost 2 = twice the sup-norm
bound of the test functions) or kept (tau); a negative cell absorbs up to |nu_i| for free (the
row is then slack) and the slack of ">=" is free creation. `tests/test_psmm_transport.py` solves
this LP literally (all m^2 pairs) and checks that the flow below reaches the same optimum.

Reduction to a sparse integer flow. With nu_i = c_i / N (c_i integer noisy counts, N the
integer noisy normaliser), cubic cells of side 1/k and representatives at their centres, d_ij is
the L-infinity distance |a_i - a_j|_inf / k of the grid indices, which is exactly the
shortest-path length in the king-move graph with unit steps of 1/k. So transport needs only the
3^d - 1 arcs to neighbouring cells. Costs in units of 1/(k N) are integers: a step costs 1, a
deletion 2k. Further, an optimal flow never keeps or deletes mass away from its cell of origin
(moving first only adds cost), so keep and delete arcs leave the positive cells only and absorb
arcs enter the negative cells only. The network (supplies c_i^+ at positive cells, one sink):

    positive i --keep (cost 0 + tie)--> K --(capacity N)--> sink
    positive i --delete (cost 2k)-----------------------> sink
    negative j --absorb (capacity -c_j, cost 0)---------> sink
    i --step (cost 1)--> king neighbour of i

is totally unimodular, so an optimal vertex is integral: kept[i] are whole units of 1/N and
PSMM outputs whole points without Algorithm 1's "rational approximation".

Ties. The optimum is not unique, in two ways:
1. When sum c^+ <= N nothing needs to move (cost 0) and N - sum c^+ units are *created*; the LP
   lets them go anywhere. `creation="proportional"` (default) splits them over the kept mass by
   largest remainders (random ties), i.e. rescales the measure; "uniform" spreads them over all
   cells. (benchmarks/psmm_speed.py --ties measures both.)
2. When sum c^+ > N, which positive units are cancelled or deleted at equal cost is the
   solver's choice. `tie="keep-dense"` (default) makes it deliberate with a lexicographic
   secondary cost on the keep arcs: keeping a unit at a cell with a small noisy count costs
   up to S = TIE_LEVELS extra, so among primary optima the flow cancels mass where counts are
   small (likely noise) and keeps it where counts are large (likely data). Primary costs are
   multiplied by W = S * N + 1 > any secondary difference, so the primary optimum is unchanged
   (checked against the literal LP). "none" leaves it to the solver; it is also used when
   W times the total cost would pass 2^60 (huge N and k), where integer solvers could overflow.

Backends, all exact, fastest first (benchmarks/psmm_speed.py): LEMON's network simplex (package
`pylmcf`, a core dependency; `slow_fallback_notice` says when it cannot be imported), else HiGHS
(bundled with scipy) on the same network LP, dual simplex, whose basic optimum is integral; its
flows are checked to be whole numbers and to conserve mass before use. (OR-Tools' cost scaling
was measured too: 3-5x slower than LEMON at 10^4 cells in 2-D, and not worth a dependency.) Both
are exact, so there is no optimality gap to report (`Projection.gap` = 0).
"""

from __future__ import annotations

import importlib
import itertools
from dataclasses import dataclass

import numpy as np

TIE_LEVELS = 8  # S: secondary cost range of the keep arcs (see "Ties")
COST_LIMIT = 1 << 60  # above this total cost the tie rule is dropped (W = 1), never overflow
TIES = ("keep-dense", "none")
CREATIONS = ("proportional", "uniform")


@dataclass(frozen=True)
class Projection:
    """The optimal integral measure: `kept + created` units of 1/N per cell (sum N)."""

    multiplicities: np.ndarray  # int64, shape (k,)*d
    steps: int  # total transport, in grid steps (units of 1/k) times units of 1/N
    deleted: int  # units of 1/N deleted
    created: int  # units of 1/N created
    k: int
    normaliser: int
    backend: str
    gap: float = 0.0

    @property
    def objective(self) -> float:
        """The corrected Algorithm 2 LP's optimum: (steps/k + 2 deleted) / N."""
        return (self.steps / self.k + 2 * self.deleted) / self.normaliser

    def to_json(self) -> dict:
        return {
            "lp_objective": self.objective,
            "transport_steps": self.steps,
            "deleted_units": self.deleted,
            "created_units": self.created,
            "backend": self.backend,
            "optimality_gap": self.gap,
        }


def king_arcs(shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """(tails, heads) of all arcs between cells of a C-order grid that differ by a king move."""
    idx = np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape)
    tails, heads = [], []
    for delta in itertools.product((-1, 0, 1), repeat=len(shape)):
        if not any(delta):
            continue
        src = tuple(slice(max(0, -s), n - max(0, s)) for s, n in zip(delta, shape, strict=True))
        dst = tuple(slice(max(0, s), n - max(0, -s)) for s, n in zip(delta, shape, strict=True))
        tails.append(idx[src].ravel())
        heads.append(idx[dst].ravel())
    return np.concatenate(tails), np.concatenate(heads)


def keep_costs(counts: np.ndarray, tie: str) -> np.ndarray:
    """Secondary cost of keeping one unit at each positive cell: S - min(c, S), or 0."""
    if tie == "none":
        return np.zeros(counts.size, dtype=np.int64)
    return TIE_LEVELS - np.minimum(counts, TIE_LEVELS)


@dataclass(frozen=True)
class Network:
    """The sparse flow network of the module docstring, integer data, arcs grouped by kind."""

    nodes: int
    tails: np.ndarray
    heads: np.ndarray
    capacity: np.ndarray
    cost: np.ndarray
    supply: np.ndarray
    positive: np.ndarray  # cell index of each keep arc (and delete arc), in order
    n_steps: int  # arcs [0, n_steps) are king steps
    weight: int  # W: primary costs are multiplied by it

    @property
    def keep_slice(self) -> slice:
        return slice(self.n_steps, self.n_steps + self.positive.size)

    @property
    def delete_slice(self) -> slice:
        return slice(self.n_steps + self.positive.size, self.n_steps + 2 * self.positive.size)


def build_network(counts: np.ndarray, normaliser: int, tie: str) -> Network:
    """The integer network for noisy counts on a k^d grid (counts.shape = (k,)*d)."""
    c = counts.reshape(-1).astype(np.int64)
    m, k = c.size, counts.shape[0]
    pos, neg = np.flatnonzero(c > 0), np.flatnonzero(c < 0)
    total_pos, total_neg = int(c[pos].sum()), int(-c[neg].sum())
    big = max(min(total_pos, total_neg), 1)
    secondary = keep_costs(c[pos], tie)
    weight = int(secondary.max(initial=0)) * normaliser + 1
    tails, heads = king_arcs(counts.shape)
    if weight * (tails.size + 2 * k * pos.size) > COST_LIMIT:  # solvers sum costs: no overflow
        secondary, weight = np.zeros_like(secondary), 1
    hub, sink = m, m + 1
    n_steps = tails.size
    tails = np.concatenate([tails, pos, pos, [hub], neg])
    heads = np.concatenate([heads, np.full(pos.size, hub), np.full(pos.size + 1 + neg.size, sink)])
    capacity = np.concatenate(
        [np.full(n_steps, big), c[pos], c[pos], [normaliser], -c[neg]]
    ).astype(np.int64)
    cost = np.concatenate(
        [
            np.full(n_steps, weight),
            secondary,
            np.full(pos.size, 2 * k * weight),
            [0],
            np.zeros(neg.size),
        ]
    ).astype(np.int64)
    supply = np.zeros(m + 2, dtype=np.int64)
    supply[pos] = c[pos]
    supply[sink] = -total_pos
    return Network(m + 2, tails, heads, capacity, cost, supply, pos, n_steps, weight)


def solve_lemon(net: Network) -> np.ndarray:
    """Arc flows by LEMON's network simplex (package `pylmcf`; exact integers)."""
    import pylmcf

    order = np.lexsort((net.heads, net.tails))  # pylmcf wants arcs sorted by (tail, head)
    graph = pylmcf.Graph(net.nodes, net.tails[order], net.heads[order])
    graph.set_node_supply(net.supply)
    graph.set_edge_capacities(net.capacity[order])
    graph.set_edge_costs(net.cost[order])
    graph.solve()
    flows = np.empty(net.tails.size, dtype=np.int64)
    flows[order] = graph.result()
    return flows


def solve_highs(net: Network) -> np.ndarray:
    """Arc flows by HiGHS dual simplex on the network LP; checked integral and conserving."""
    from scipy.optimize import linprog
    from scipy.sparse import csr_array

    n_arcs = net.tails.size
    cols = np.arange(n_arcs)
    rows = np.concatenate([net.tails, net.heads])
    vals = np.concatenate([np.ones(n_arcs), -np.ones(n_arcs)])
    A = csr_array((vals, (rows, np.concatenate([cols, cols]))), shape=(net.nodes, n_arcs))
    res = linprog(
        net.cost.astype(np.float64),
        A_eq=A,
        b_eq=net.supply.astype(np.float64),
        bounds=np.column_stack([np.zeros(n_arcs), net.capacity.astype(np.float64)]),
        method="highs-ds",
    )
    if res.status != 0:
        raise RuntimeError(f"HiGHS failed: {res.message}")
    flows = np.rint(res.x).astype(np.int64)
    if np.abs(res.x - flows).max(initial=0.0) > 1e-6:
        raise RuntimeError("HiGHS returned a fractional flow (not a basic solution)")
    balance = np.bincount(net.tails, flows, net.nodes) - np.bincount(net.heads, flows, net.nodes)
    if not np.array_equal(balance.astype(np.int64), net.supply):
        raise RuntimeError("HiGHS flow does not conserve mass")
    return flows


BACKENDS = {"lemon": solve_lemon, "highs": solve_highs}
MODULES = {"lemon": "pylmcf", "highs": "scipy"}


def slow_fallback_notice() -> list[str]:
    """What to tell a user before PSMM's solve when LEMON cannot be imported (a platform without
    a pylmcf wheel): the HiGHS fallback is exact but 70-270x slower."""
    if available("lemon"):
        return []
    return [
        "--mechanism psmm: the fast exact solver (LEMON, package pylmcf) cannot be imported, so "
        "the min-cost flow falls back to scipy's HiGHS, 70-270x slower (a 10^5-row table of 3 "
        "columns did not finish in 10 minutes); install it with: pip install pylmcf"
    ]


def available(name: str) -> bool:
    """Whether backend `name` can be imported here."""
    try:
        importlib.import_module(MODULES[name])
    except ImportError:
        return False
    return True


def default_backend() -> str:
    """The fastest importable backend (measured: lemon, then highs)."""
    return next(name for name in BACKENDS if available(name))


def create(kept: np.ndarray, units: int, creation: str, rng: np.random.Generator) -> np.ndarray:
    """Place `units` created units of 1/N: over the kept mass (largest remainders) or uniformly."""
    if units <= 0:
        return kept
    weights = kept.astype(np.float64) if creation == "proportional" and kept.sum() > 0 else None
    if weights is None:
        weights = np.ones(kept.size)
    share = weights / weights.sum() * units
    base = np.floor(share).astype(np.int64)
    left = units - int(base.sum())
    order = np.lexsort((rng.random(kept.size), -(share - base)))  # largest remainder, random ties
    base[order[:left]] += 1
    return kept + base


def closest_probability(
    counts: np.ndarray,
    normaliser: int,
    rng: np.random.Generator,
    *,
    tie: str = "keep-dense",
    creation: str = "proportional",
    backend: str | None = None,
) -> Projection:
    """Integer optimum of the corrected Algorithm 2 for nu = counts / normaliser on a k^d grid.

    counts: integer noisy counts, shape (k,)*d, C order; normaliser: N >= 1 (the noisy row
    count). Returns N whole units placed on the cells.
    """
    if normaliser < 1:
        raise ValueError("normaliser must be >= 1")
    if tie not in TIES or creation not in CREATIONS:
        raise ValueError("unknown tie or creation rule")
    c = counts.reshape(-1).astype(np.int64)
    k = counts.shape[0]
    if int(c[c > 0].sum()) <= normaliser:  # nothing has to move: cost 0
        name, kept, steps, deleted = "none (no mass to remove)", np.maximum(c, 0), 0, 0
    else:
        name = backend or default_backend()
        net = build_network(counts, normaliser, tie)
        flows = BACKENDS[name](net)
        kept = np.zeros(c.size, dtype=np.int64)
        kept[net.positive] = flows[net.keep_slice]
        steps, deleted = int(flows[: net.n_steps].sum()), int(flows[net.delete_slice].sum())
    created = normaliser - int(kept.sum())
    out = create(kept, created, creation, rng)
    return Projection(out.reshape(counts.shape), steps, deleted, created, k, normaliser, name)
