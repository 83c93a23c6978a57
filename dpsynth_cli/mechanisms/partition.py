"""The binary hierarchical partition of [0,1]^d (dissertation Definition 2.7), vectorised.

Level j (1-based) halves coordinate (j-1) mod d, so coordinates are split in turn. A cell at level
j is named by the j bits chosen so far, most significant first (Morton / bit-interleaved order):
the parent of cell `c` at level j is `c >> 1`, its children are `2c` and `2c + 1`. A cell at level
j has side 2^-ceil(j/d) along the first (j mod d) coordinates and 2^-floor(j/d) along the others,
so its L-infinity diameter is 2^-floor(j/d).

Level columns first (issue 15). A table's boolean and category columns (public: the schema) are
top-level splits: `lead` gives, for the first len(lead) coordinates, how many bits each is split
into before any other coordinate (`Domain` puts a column of L levels on 2^ceil(log2 L) slots, so
those bits separate its levels). The first B = sum(lead) levels halve the lead coordinates in
turn (one bit each while it has bits left), then the other d - len(lead) coordinates are halved
in turn as above. A cell code is then the B lead bits followed by the Morton code of the rest.
Under the mixed metric (levels at distance 1, the rest by L-infinity) a cell above level B spans
two levels or the whole numeric cube, so its diameter is 1; below B, 2^-floor((j - B)/(d - m)).
Any binary hierarchical partition serves PMM and PrivTree: their privacy arguments need only
that one row lies in one cell per level.

Nothing here adds noise: these are the exact counts and the geometry that mechanisms use.

Speed: the bits of coordinate c are those of code positions (depth-1-c) mod d + k*d, so codes are
built (and taken apart) one coordinate at a time with O(log bits) whole-array shift-and-mask steps
("bit spreading"), never one Python iteration per level; all values stay below 2**depth.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial

import numpy as np

from dpsynth_cli.engine.rows import Rows, as_rows

Lead = tuple[int, ...]  # bits split first, for each of the first len(lead) coordinates


def lead_order(lead: Lead) -> list[int]:
    """The coordinate halved at each of the first sum(lead) levels: the lead ones in turn."""
    left, order = list(lead), []
    while any(left):
        for c, b in enumerate(left):
            if b:
                order.append(c)
                left[c] -= 1
    return order


def depth_limit(d: int, lead: Lead, depth: int) -> int:
    """`depth`, or sum(lead) if every coordinate is a lead one (nothing is left to halve)."""
    return min(depth, sum(lead)) if lead and len(lead) == d else depth


def split_order_text(lead: Lead) -> str:
    """The partition's split order, for the report."""
    turn = "coordinates halved in turn (level j splits coordinate (j-1) mod d)"
    if not lead:
        return turn
    return (
        f"level columns first: {sum(lead)} levels split the {len(lead)} boolean/category "
        "columns and missing flags of nullable float/datetime columns into their levels "
        f"({', '.join(map(str, lead))} bits each, in turn); then the other columns halved in turn"
    )


def _split(depth: int, d: int, lead: Lead) -> tuple[list[int], int, int]:
    """(lead levels within depth, levels left for the other coordinates, how many others)."""
    order = lead_order(lead)[:depth]
    rest = d - len(lead)
    if depth > len(order) and rest <= 0:
        raise ValueError("a partition of only level columns is at most sum(lead) levels deep")
    return order, depth - len(order), rest


def bits_per_coordinate(depth: int, d: int, lead: Lead = ()) -> np.ndarray:
    """How many times each coordinate is halved in a partition of the given depth."""
    if lead:
        order, r, rest = _split(depth, d, lead)
        head = np.bincount(np.asarray(order, dtype=np.int64), minlength=len(lead))
        return np.concatenate([head, bits_per_coordinate(r, rest)]).astype(np.int64)
    c = np.arange(d)
    return np.where(depth > c, (depth - c - 1) // d + 1, 0).astype(np.int64)


def diameter(level: int, d: int, lead: Lead = ()) -> float:
    """Diameter of a cell at `level`: L-infinity, or the mixed metric with lead columns."""
    if lead:
        head, rest = sum(lead), d - len(lead)
        if level < head:
            return 1.0
        return 2.0 ** -((level - head) // rest) if rest else 0.0
    return 2.0 ** -(level // d)


def level_diameter_sums(depth: int, d: int, lead: Lead = ()) -> list[float]:
    """Delta_j = sum of cell diameters at level j (eq. 3.6), for j = -1..depth, Delta_-1 = 1."""
    return [1.0] + [2.0**j * diameter(j, d, lead) for j in range(depth + 1)]


def _spread_masks(nbits: int, d: int) -> list[tuple[int, int]]:
    """(shift, mask) steps that move bit i of an nbits-bit value to bit i*d (d >= 2).

    Groups of g consecutive bits sit at positions j*g*d; each step halves g: the upper half of
    every group moves left by g*(d-1), and the mask keeps only the new groups. Masks cover only
    the nbits useful bits, so every value (and mask) stays below 2**((nbits-1)*d + 1).
    """
    steps = []
    g = 1 << max(nbits - 1, 0).bit_length()  # smallest power of two >= nbits
    while g > 1:
        g //= 2
        mask = 0
        for j in range(-(-nbits // g)):  # groups of g bits at j*g*d, clipped to nbits bits
            width = min(g, nbits - j * g)
            mask |= ((1 << width) - 1) << (j * g * d)
        steps.append((g * (d - 1), mask))
    return steps


def _spread(q: np.ndarray, nbits: int, d: int) -> np.ndarray:
    """Bits 0..nbits-1 of q (int64) moved to positions 0, d, 2d, ... (a new int64 array)."""
    x = q & ((1 << nbits) - 1)
    if d == 1:
        return x
    tmp = np.empty_like(x)
    for shift, mask in _spread_masks(nbits, d):
        np.left_shift(x, shift, out=tmp)
        x |= tmp
        x &= mask
    return x


def _compact(x: np.ndarray, nbits: int, d: int) -> np.ndarray:
    """Inverse of `_spread`: bits 0, d, ..., (nbits-1)d of x (int64) packed into bits 0..nbits-1."""
    steps = _spread_masks(nbits, d) if d > 1 else []
    if not steps:  # d == 1 or a single bit: nothing to move
        return x & ((1 << nbits) - 1)
    x = x & steps[-1][1]  # the bits at positions i*d, i < nbits
    merged = [mask for _, mask in steps[-2::-1]] + [(1 << nbits) - 1]  # groups of 2, 4, .. bits
    tmp = np.empty_like(x)
    for (shift, _), mask in zip(steps[::-1], merged, strict=True):
        np.right_shift(x, shift, out=tmp)
        x |= tmp
        x &= mask
    return x


def leaf_codes(X: np.ndarray, depth: int, lead: Lead = ()) -> np.ndarray:
    """Index (in Morton order) of the depth-`depth` cell holding each row of X in [0,1]^d."""
    if not lead:
        return _morton(X, depth)
    order, r, _ = _split(depth, X.shape[1], lead)
    codes = _morton(X[:, len(lead) :], r) if r else np.zeros(X.shape[0], dtype=np.int64)
    done = [0] * len(lead)
    for j, c in enumerate(order):  # level j + 1 halves lead coordinate c: its next bit
        q = _grid(X[:, c], lead[c])
        done[c] += 1
        q >>= lead[c] - done[c]
        q &= 1
        q <<= depth - 1 - j
        codes |= q
    return codes


def _grid(x: np.ndarray, bits: int) -> np.ndarray:
    """Index of each value's cell among 2^bits equal cells of [0, 1] (1 is in the last)."""
    q = (x * float(1 << bits)).astype(np.int64)
    return np.minimum(q, (1 << bits) - 1, out=q)


def _morton(X: np.ndarray, depth: int) -> np.ndarray:
    """Cell index at `depth` of each row, coordinates halved in turn (no lead columns)."""
    n, d = X.shape
    bits = bits_per_coordinate(depth, d)
    codes = np.zeros(n, dtype=np.int64)
    for c in range(min(d, depth)):  # coordinates >= depth are never halved
        b = int(bits[c])
        if b == 0:  # coordinate never split at this depth
            continue
        spread = _spread(_grid(X[:, c], b), b, d)
        spread <<= (depth - 1 - c) % d  # where coordinate c's last bit sits in the code
        codes |= spread
    return codes


def _grid_index(codes: np.ndarray, depth: int, d: int, c: int, nbits: int) -> np.ndarray:
    """Grid index along coordinate c (nbits bits) of each cell code: one column of the inverse."""
    return _compact(codes >> ((depth - 1 - c) % d), nbits, d)


def cell_grid_index(codes: np.ndarray, depth: int, d: int, lead: Lead = ()) -> np.ndarray:
    """Inverse of the interleaving: per-coordinate grid index (m, d) of each cell code."""
    codes = np.asarray(codes, dtype=np.int64)
    if lead:
        order, r, rest = _split(depth, d, lead)
        q = np.zeros((codes.shape[0], d), dtype=np.int64)
        if r:
            q[:, len(lead) :] = cell_grid_index(codes & ((1 << r) - 1), r, rest)
        for j, c in enumerate(order):
            q[:, c] = (q[:, c] << 1) | ((codes >> (depth - 1 - j)) & 1)
        return q
    bits = bits_per_coordinate(depth, d)
    q = np.zeros((codes.shape[0], d), dtype=np.int64)
    for c in range(min(d, depth)):  # coordinates >= depth are never halved
        if bits[c]:
            q[:, c] = _grid_index(codes, depth, d, c, int(bits[c]))
    return q


def level_counts(leaf_counts: np.ndarray, depth: int) -> list[np.ndarray]:
    """Counts at every level 0..depth from the leaf counts, by pairwise sums of siblings."""
    counts = [leaf_counts]
    for _ in range(depth):
        counts.append(_sibling_sums(counts[-1]))
    return counts[::-1]


def _sibling_sums(a: np.ndarray) -> np.ndarray:
    """a.reshape(-1, 2).sum(axis=1): same values and dtype, without the slow axis-1 reduction."""
    if a.dtype in (np.int64, np.float64) and a.ndim == 1 and a.size % 2 == 0:
        return a[0::2] + a[1::2]
    return a.reshape(-1, 2).sum(axis=1)


def true_level_counts(X: Rows | np.ndarray, depth: int) -> list[np.ndarray]:
    """Exact number of rows of X in every cell of every level (private: feed only to noise)."""
    rows = as_rows(X)
    leaves = rows.collect(partial(LeafCounts, depth, rows.d, rows.lead)).counts
    return level_counts(leaves, depth)


@dataclass
class LeafCounts:
    """Rows per cell at `depth` (dense, int64, 2^depth cells): PMM's statistic; batches add."""

    ANY_ORDER = True  # exact integers: any split and merge order, the same statistic

    depth: int
    d: int
    lead: Lead = ()
    counts: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        self.counts = np.zeros(1 << self.depth, dtype=np.int64)

    def add(self, X: np.ndarray) -> None:
        codes = leaf_codes(X, self.depth, self.lead)
        self.counts += np.bincount(codes, minlength=1 << self.depth)

    def merge(self, other: LeafCounts) -> LeafCounts:
        self.counts = self.counts + other.counts
        return self


@dataclass
class SubtreeCounts:
    """Rows per cell k levels below each of `roots` (sorted codes of cells at level `top`): the
    cells at level top + k inside the roots, as a histogram of len(roots) * 2^k entries, kept
    sparse (sorted keys and counts) while few entries are filled, dense past DENSE_FILL of them.
    Either way the counts are exact integers, and any split of the rows into batches gives the
    same histogram. `counts(cells, level)` answers for any cell at a level in [top, top + k]
    inside a root. PrivTree's statistic: one pass answers the tree's decisions over k levels.
    """

    ANY_ORDER = True  # exact integers: any split and merge order, the same statistic

    roots: np.ndarray
    top: int
    k: int
    d: int
    lead: Lead = ()
    _keys: np.ndarray = field(init=False)
    _vals: np.ndarray = field(init=False)
    _dense: np.ndarray | None = field(init=False, default=None)
    _cum: np.ndarray | None = field(init=False, default=None)
    _slot: np.ndarray | None = field(init=False, default=None)
    _runs: np.ndarray | None = field(init=False, default=None)

    # Dense (8 bytes a cell, at most 2^24 cells a pass) once a batch or the merged keys fill
    # this share: past it, sorting keys (np.unique) costs more than adding into the array.
    DENSE_FILL = 1 / 64
    # The ancestors' table: 2^25 entries at most (128 MiB of int32). PrivTree's second pass
    # starts at level 25 (its first histogram answers levels up to 24), so its roots are found
    # by one lookup a row: 86 -> 16 ns a row on 10^8 rows (docs/benchmarks.md, "One pass").
    LOOKUP_BITS = 25

    def __post_init__(self) -> None:
        self._keys = np.zeros(0, dtype=np.int64)
        self._vals = np.zeros(0, dtype=np.int64)

    @property
    def size(self) -> int:
        return self.roots.size << self.k

    def __getstate__(self) -> dict:
        """Without the lookup table (rebuilt where needed): statistics travel light."""
        return {**self.__dict__, "_slot": None, "_runs": None}

    def _positions(self, cells: np.ndarray) -> np.ndarray:
        """Index in `roots` of each cell at level `top`, -1 for cells outside every root.

        A table over the cells' ancestors at level min(top, LOOKUP_BITS) names the run of roots
        below each ancestor (at most 2^shift of them, shift = top - LOOKUP_BITS); a binary search
        inside that run takes at most shift + 1 steps over a few neighbouring roots, where a
        search of all roots took log2(len(roots)) steps over the whole array (the second pass of
        a 10^8-row PrivTree has 775,000 roots, two or one below each ancestor).
        """
        shift = max(self.top - self.LOOKUP_BITS, 0)
        if self._slot is None:
            prefix = self.roots >> shift
            starts = np.flatnonzero(np.r_[True, prefix[1:] != prefix[:-1]])
            self._slot = np.full(1 << (self.top - shift), -1, dtype=np.int32)
            self._slot[prefix[starts]] = np.arange(starts.size, dtype=np.int32)
            self._runs = np.r_[starts, prefix.size]  # run i: roots[_runs[i]:_runs[i + 1]]
        run = np.take(self._slot, cells >> shift).astype(np.int64)
        if not shift:  # one root per ancestor, so run i is root i (-1: no root)
            return run
        pos = np.full(cells.size, -1, dtype=np.int64)
        have = np.flatnonzero(run >= 0)
        lo, end = self._runs[run[have]], self._runs[run[have] + 1]
        c = cells[have]
        full = end - lo == 1 << shift  # every cell below the ancestor is a root: direct
        lo[full] += c[full] & ((1 << shift) - 1)
        # Otherwise the first root >= c in [lo, end): halve the pending ranges until empty.
        pending = np.flatnonzero(end - lo > 1)
        hi = end[pending]
        while pending.size:
            l_ = lo[pending]
            mid = (l_ + hi) >> 1
            below = self.roots[mid] < c[pending]
            lo[pending] = np.where(below, mid + 1, l_)
            hi = np.where(below, hi, mid)
            left = lo[pending] < hi
            pending, hi = pending[left], hi[left]
        hit = lo < end
        hit[hit] = self.roots[lo[hit]] == c[hit]
        pos[have[hit]] = lo[hit]
        return pos

    def add(self, X: np.ndarray) -> None:
        self.add_codes(leaf_codes(X, self.top + self.k, self.lead))

    def add_codes(self, codes: np.ndarray) -> np.ndarray | None:
        """Count rows given by their cells at level top + k; returns which lie inside the roots
        (None: all of them)."""
        inside = None
        if self.roots.size == 1 << self.top:  # every cell of the level: codes are the keys
            keys = codes
        else:
            pos = self._positions(codes >> self.k)
            inside = pos >= 0
            keys = (pos[inside] << self.k) | (codes[inside] & ((1 << self.k) - 1))
        self._count(keys)
        return inside

    def _count(self, keys: np.ndarray) -> None:
        if self._dense is not None or keys.size > self.DENSE_FILL * self.size:
            if self._dense is None:
                self._dense = np.zeros(self.size, dtype=np.int64)
                self._dense[self._keys] = self._vals
                self._keys = self._vals = np.zeros(0, dtype=np.int64)
            self._cum = None
            np.add.at(self._dense, keys, 1)  # no size-long temporary per batch
            return
        self._add_keys(*np.unique(keys, return_counts=True))

    def _add_keys(self, keys: np.ndarray, vals: np.ndarray) -> None:
        """Add counts `vals` at distinct sorted `keys`."""
        self._cum = None
        if keys.size == 0:
            return
        if self._dense is not None:
            self._dense[keys] += vals
            return
        keys = np.concatenate([self._keys, keys])
        vals = np.concatenate([self._vals, vals.astype(np.int64)])
        order = np.argsort(keys, kind="stable")
        keys, vals = keys[order], vals[order]
        first = np.r_[True, keys[1:] != keys[:-1]]
        self._keys = keys[first]
        self._vals = np.add.reduceat(vals, np.flatnonzero(first)) if vals.size else vals
        if self._keys.size > self.DENSE_FILL * self.size:
            self._dense = np.zeros(self.size, dtype=np.int64)
            self._dense[self._keys] = self._vals
            self._keys = self._vals = np.zeros(0, dtype=np.int64)

    def merge(self, other: SubtreeCounts) -> SubtreeCounts:
        if other._dense is not None:
            keys = np.flatnonzero(other._dense)
            self._add_keys(keys, other._dense[keys])
        else:
            self._add_keys(other._keys, other._vals)
        return self

    def counts(self, cells: np.ndarray, level: int) -> np.ndarray:
        """Rows in each cell (codes at `level`, top <= level <= top + k, inside the roots)."""
        below = self.top + self.k - level
        root = np.searchsorted(self.roots, cells >> (level - self.top))
        sub = cells & ((1 << (level - self.top)) - 1)
        lo = (root << self.k) | (sub << below)
        hi = lo + (1 << below)
        if self._cum is None:
            self._cum = np.concatenate(
                [[0], np.cumsum(self._vals if self._dense is None else self._dense)]
            )
        if self._dense is not None:
            return self._cum[hi] - self._cum[lo]
        at = np.searchsorted
        return self._cum[at(self._keys, hi)] - self._cum[at(self._keys, lo)]


def points_in_cells(
    codes: np.ndarray, depth: int, d: int, rng: np.random.Generator, lead: Lead = ()
) -> np.ndarray:
    """One point drawn uniformly in each listed cell (post-processing: looks at no data)."""
    bits = bits_per_coordinate(depth, d, lead)
    codes = np.asarray(codes, dtype=np.int64)
    points = rng.random((codes.shape[0], d))
    if lead:
        points += cell_grid_index(codes, depth, d, lead)
    else:  # the same values as above, one coordinate at a time, in place
        for c in range(min(d, depth)):  # coordinates >= depth are never halved
            if bits[c]:
                points[:, c] += _grid_index(codes, depth, d, c, int(bits[c]))
    points /= np.exp2(bits)
    return points
