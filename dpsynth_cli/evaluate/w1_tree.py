"""Certified upper bounds on W1 (L-infinity metric) from the dyadic partition of [0, 1]^d.

Time O(N log N) for N = n + m points (one sort), memory O(N d): usable on 10^7 rows where the
exact solver's n*m cost matrix is out of reach.
"""

from __future__ import annotations

import numpy as np

from dpsynth_cli.evaluate._w1_input import (
    W1InputError,
    as_pair,
    as_weights,
    uniform_or,
)

_FLOAT_BITS = 52  # x * 2**k is exact and floor(.) fits a float64 mantissa for k <= 52
WORD_BITS = 63  # payload bits per uint64 sort word (top bit kept clear)


def default_depth(d: int) -> int:
    """Deepest partition used by default: 63 levels in one sort word when d <= 4 (31 bits per
    coordinate in 2-D), 15 bits per coordinate beyond. Deeper is never worse (see
    `dyadic_bounds`), so the default is as deep as is cheap."""
    return d * min(_FLOAT_BITS, max(WORD_BITS // d, 15))


def w1_upper_bound(
    X: object,
    Y: object,
    depth: int | None = None,
    *,
    x_weights: object | None = None,
    y_weights: object | None = None,
) -> float:
    """Certified upper bound on W1(mu, nu) for the L-infinity metric.

    The smaller of two transport plans' costs, both built on the dyadic partition (see
    `dyadic_bounds`): any feasible plan's cost bounds W1 from above. O(N log N), N = n + m.
    """
    return min(dyadic_bounds(X, Y, depth, x_weights=x_weights, y_weights=y_weights))


def dyadic_bounds(
    X: object,
    Y: object,
    depth: int | None = None,
    *,
    x_weights: object | None = None,
    y_weights: object | None = None,
) -> tuple[float, float]:
    """Two upper bounds on W1 (L-inf) from the dyadic partition: (tree, curve).

    Partition: a level-j cell splits coordinate j mod d in half (Morton / bit-interleaved
    order), down to `depth` levels (default `default_depth(d)`), starting from [0, 1]^d (or from
    the data's bounding box if some point lies outside the cube: the bound holds for any
    partition, as diameters are measured on the data). Per cell C: the signed excess
    e(C) = mu(C) - nu(C), the mass mu(C) + nu(C), and the bounding box of the data points in C,
    of L-inf diameter D(C) <= 2**-floor(j/d) at level j (usually far smaller).

    tree = sum_{leaves L} D(L) (mu(L) + nu(L) - |e(L)|) / 2
           + sum_{internal cells P, children C0, C1} R(P) (|e(C0)| + |e(C1)| - |e(P)|) / 2,
    R(P) = largest L-inf distance between the two children's boxes (<= D(P)).

    Proof that tree >= W1 (it is the cost bound of an explicit plan, built bottom-up): in each
    leaf L match min(mu(L), nu(L)) = (mu(L) + nu(L) - |e(L)|) / 2 of mass inside L, each unit
    moving at most D(L). What is left unmatched in a cell is one-signed, of mass |e(C)|. In P,
    the leftovers of C0 and C1 are matched against each other when their signs differ:
    min(|e0|, |e1|) = (|e0| + |e1| - |e0 + e1|) / 2 units, each moving from a point of C0 to a
    point of C1, so at most R(P); the leftover |e0 + e1| = |e(P)| goes up. At the root e = 0
    (equal total masses), so all of mu is matched to all of nu: a coupling of cost <= tree.

    Depth: splitting a leaf L into children C0, C1 changes tree by at most
    sum_i (D(L) - D(Ci)) (|e(Ci)| - mu(Ci) - nu(Ci)) / 2 <= 0 (using D(Ci), R(L) <= D(L)), so
    deeper partitions never give a larger bound: the default is the deepest cheap one.

    curve = exact cost of the monotone (north-west corner) coupling of mu and nu along the
    Morton order: also a feasible plan. It is exact for data on a monotone curve and beats
    `tree` when the cells' excesses cancel along the order; `tree` wins on spread-out data.

    Implementation: one sort of the Morton codes; the level at which sorted neighbours part
    is read off their integer coordinates; cells merge bottom-up, one vectorised step per
    level (a cell merges at most once per level), O(N d) after the sort.
    """
    X, Y = as_pair(X, Y)
    n, m = X.shape[0], Y.shape[0]
    d = X.shape[1]
    a = uniform_or(as_weights(x_weights, n, "x_weights"), n)
    b = uniform_or(as_weights(y_weights, m, "y_weights"), m)
    r = default_depth(d) if depth is None else int(depth)
    if not 0 <= r <= _FLOAT_BITS * d:
        raise W1InputError(f"depth must be between 0 and {_FLOAT_BITS * d} for {d} columns")
    bits = level_bits(r, d)

    low = np.minimum(X.min(axis=0), Y.min(axis=0))
    high = np.maximum(X.max(axis=0), Y.max(axis=0))
    if low.min() >= 0.0 and high.max() <= 1.0:  # the unit cube's own dyadic grid
        ints = [grid_ints(np.concatenate((X[:, c], Y[:, c])), bits[c]) for c in range(d)]
    else:  # the data's bounding box instead: any partition gives a valid bound
        span = np.where(high > low, high - low, 1.0)
        ints = [
            grid_ints((np.concatenate((X[:, c], Y[:, c])) - low[c]) / span[c], bits[c])
            for c in range(d)
        ]
    perm = _morton_order(ints, bits, r)
    lcp = _parting_level(ints, bits, perm, r)
    del ints
    uniform = x_weights is None and y_weights is None
    curve = _curve_plan_cost(X, Y, None if uniform else (a, b), perm)

    # Leaves: runs of sorted points that no level < r separates.
    starts = np.concatenate(([0], np.flatnonzero(lcp < r) + 1))
    signed = np.concatenate((a, -b))[perm]
    excess = np.add.reduceat(signed, starts)
    matched = np.add.reduceat(np.abs(signed), starts)
    del signed
    matched -= np.abs(excess)  # twice the mass matched inside each leaf
    lo, hi = [], []
    diam = np.zeros(starts.size)
    for c in range(d):
        col = np.concatenate((X[:, c], Y[:, c]))[perm]
        lo.append(np.minimum.reduceat(col, starts))
        hi.append(np.maximum.reduceat(col, starts))
        np.maximum(diam, hi[c] - lo[c], out=diam)
    del perm, col, starts
    total = float(np.dot(diam, matched))
    del matched, diam

    levels = lcp[lcp < r]  # level at which leaf q and leaf q + 1 part, q = 0 .. R-2
    del lcp
    total += merge_up(levels, excess, lo, hi, r)
    return 0.5 * total, curve


def _curve_plan_cost(
    X: np.ndarray, Y: np.ndarray, weights: tuple[np.ndarray, np.ndarray] | None, perm: np.ndarray
) -> float:
    """Exact cost of the monotone coupling of mu and nu along the Morton order `perm`.

    Walk the curve and pair the k-th unit of mass of mu with the k-th unit of nu (north-west
    corner rule): a feasible plan, so its cost is an upper bound on W1; at most n + m - 1 pairs.
    With uniform weights the cumulative masses are integers in units of 1/(n m): no rounding.
    """
    n = X.shape[0]
    on_x = perm < n
    xo, yo = perm[on_x], perm[~on_x] - n
    del on_x
    if weights is None:
        flow, i, j = count_coupling(np.ones(xo.size, np.int64), np.ones(yo.size, np.int64))
    else:
        flow, i, j = _weight_coupling(weights[0][xo], weights[1][yo])
    xi, yj = xo[i], yo[j]
    del i, j
    dist = np.zeros(xi.size)
    for c in range(X.shape[1]):
        np.maximum(dist, np.abs(X[xi, c] - Y[yj, c]), out=dist)
    return float(np.dot(flow, dist))


def count_coupling(
    count_x: np.ndarray, count_y: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The north-west corner coupling of two sequences of integer masses (totals n and m, each
    side normalised to 1): its flows, and for each flow the index of its x and its y item.

    Cumulative masses are integers in units of 1/(n m), so breakpoints carry no rounding (while
    n m < 2**62; beyond, float weights). Items of mass 0 receive no flow (`searchsorted` finds
    the first item whose cumulative mass reaches a breakpoint, which has positive mass).
    """
    n, m = int(count_x.sum()), int(count_y.sum())
    if n * m >= 2**62:
        return _weight_coupling(count_x / n, count_y / m)
    cum_x, cum_y = np.cumsum(count_x) * m, np.cumsum(count_y) * n
    ends = _merge_unique(cum_x, cum_y)
    flow = np.diff(ends, prepend=0).astype(np.float64) / (n * m)
    return flow, np.searchsorted(cum_x, ends), np.searchsorted(cum_y, ends)


def _weight_coupling(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`count_coupling` for float masses a, b (each summing to 1 up to rounding)."""
    cum_x, cum_y = np.cumsum(a), np.cumsum(b)
    ends = _merge_unique(cum_x[:-1], cum_y[:-1])
    ends = np.append(ends[ends < 1.0], 1.0)
    flow = np.diff(ends, prepend=0.0)
    mid = ends - flow / 2
    i = np.minimum(np.searchsorted(cum_x, mid), a.size - 1)
    j = np.minimum(np.searchsorted(cum_y, mid), b.size - 1)
    return flow, i, j


def _merge_unique(u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Sorted distinct values of two sorted arrays, by a linear merge (no re-sort)."""
    pos = np.searchsorted(u, v) + np.arange(v.size)
    out = np.empty(u.size + v.size, dtype=np.result_type(u, v))
    out[pos] = v
    keep = np.ones(out.size, dtype=bool)
    keep[pos] = False
    out[keep] = u
    keep[:] = True
    keep[1:] = out[1:] != out[:-1]
    return out[keep]


def level_bits(r: int, d: int) -> list[int]:
    """How many of the first r levels split coordinate c (level t splits coordinate t mod d)."""
    return [max(0, -(-(r - c) // d)) for c in range(d)]


def grid_ints(v: np.ndarray, k: int) -> np.ndarray:
    """floor(v * 2**k) for v in [0, 1], as uint64 in [0, 2**k - 1] (v = 1 joins the top cell)."""
    if k == 0:
        return np.zeros(v.size, dtype=np.uint64)
    q = np.floor(v * float(2**k)).astype(np.uint64)
    np.minimum(q, np.uint64(2**k - 1), out=q)
    return q


def _spread_table(d: int, k: int) -> np.ndarray:
    """table[v] puts bit i of v (v < 2**min(8, k)) at bit i * d."""
    size = 2 ** min(8, k)
    rows = [sum(((v >> i) & 1) << (i * d) for i in range(8)) for v in range(size)]
    return np.array(rows, dtype=np.uint64)


def _morton_order(ints: list[np.ndarray], bits: list[int], r: int) -> np.ndarray:
    """Permutation sorting the points by their first r interleaved bits (level t = bit t)."""
    d, size = len(ints), ints[0].size
    if r == 0:
        return np.arange(size)
    if r <= WORD_BITS:
        return np.argsort(morton_codes(ints, bits, r))
    words = np.zeros((-(-r // WORD_BITS), size), dtype=np.uint64)
    for t in range(r):
        c, level_bit = t % d, t // d
        bit = (ints[c] >> np.uint64(bits[c] - 1 - level_bit)) & np.uint64(1)
        words[t // WORD_BITS] |= bit << np.uint64(WORD_BITS - 1 - t % WORD_BITS)
    return np.lexsort(words[::-1])


def morton_codes(ints: list[np.ndarray], bits: list[int], r: int) -> np.ndarray:
    """The first r <= 63 interleaved bits of each point as one uint64: level t is bit r - 1 - t,
    so codes sort in the partition's order and dropping the lowest bit drops the deepest level."""
    d, size = len(ints), ints[0].size
    # Bit i (from the low end) of coordinate c sits at level t = (bits[c] - 1 - i) * d + c,
    # i.e. at position r - 1 - t = i * d + off_c of the code.
    code = np.zeros(size, dtype=np.uint64)
    table = _spread_table(d, max(bits))
    for c, q in enumerate(ints):
        if bits[c] == 0:
            continue
        off = r - 1 - c - (bits[c] - 1) * d
        for byte in range(-(-bits[c] // 8)):
            chunk = table[(q >> np.uint64(8 * byte)) & np.uint64(255)]
            code |= chunk << np.uint64(8 * byte * d + off)
    return code


def _parting_level(ints: list[np.ndarray], bits: list[int], perm: np.ndarray, r: int) -> np.ndarray:
    """For sorted neighbours p, p + 1: the first level whose split separates them (r if none).

    Coordinate c first differs at its bit l = bits[c] - bit_length(xor), which is level
    l * d + c; the pair parts at the smallest such level.
    """
    d = len(ints)
    out = np.full(max(perm.size - 1, 0), r, dtype=np.int64)
    for c, q in enumerate(ints):
        if bits[c] == 0:
            continue
        qs = q[perm]
        diff = qs[1:] ^ qs[:-1]
        del qs
        _, blen = np.frexp(diff.astype(np.float64))  # exact: diff < 2**52
        level = (bits[c] - blen.astype(np.int64)) * d + c
        np.minimum(out, np.where(diff != 0, level, r), out=out)
    return out


def merge_up(
    levels: np.ndarray,
    excess: np.ndarray,
    lo: list[np.ndarray],
    hi: list[np.ndarray],
    r: int,
) -> float:
    """Twice the cost of the matches made in internal cells, merging leaves bottom-up.

    A current cell is a run of leaves [s, end[s]]; its data live at index s (`lo[c]`, `hi[c]`:
    bounding box, per coordinate). The boundary after leaf q at level t joins the two children
    of one level-t cell: the one ending at q and the one starting at q + 1. A cell has one
    parent, so no cell takes part in two joins of the same level.
    """
    count = excess.size
    end = np.arange(count)  # end[s]: last leaf of the cell starting at s
    start = np.arange(count)  # start[e]: first leaf of the cell ending at e
    small = levels.astype(np.int16) if r < 2**15 else levels  # 16-bit keys: radix sort
    order = np.argsort(small, kind="stable")
    bounds = np.searchsorted(small[order], np.arange(r + 1))
    del small
    total = 0.0
    for t in range(r - 1, -1, -1):
        q = order[bounds[t] : bounds[t + 1]]
        if q.size == 0:
            continue
        left, right = start[q], q + 1
        last = end[right]
        reach = np.zeros(q.size)  # largest distance from a point of one child to the other
        for lo_c, hi_c in zip(lo, hi, strict=True):
            lo_l, lo_r, hi_l, hi_r = lo_c[left], lo_c[right], hi_c[left], hi_c[right]
            np.maximum(reach, np.maximum(hi_r - lo_l, hi_l - lo_r), out=reach)
            lo_c[left], hi_c[left] = np.minimum(lo_l, lo_r), np.maximum(hi_l, hi_r)
        e_left, e_right = excess[left], excess[right]
        merged = e_left + e_right
        matched = np.abs(e_left) + np.abs(e_right) - np.abs(merged)
        total += float(np.dot(reach, matched))
        excess[left] = merged
        end[left] = last
        start[last] = left
    return total
