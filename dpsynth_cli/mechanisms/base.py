"""What every synthesis mechanism takes and returns, so `synth` can run any of them.

A mechanism reads rows in [0,1]^d only through statistics passes (`engine.rows.Rows`), spends
exactly its epsilon through the ledger, and returns an `Output`: released cell sizes and how to
place points in the cells, which yields the synthetic points in batches of bounded size, plus a
public description for the report. It may use the noisy row count (a released value) but never
the true one.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Protocol

import numpy as np

from dpsynth_cli.engine.plan import BatchPlan, Place
from dpsynth_cli.engine.rows import Rows
from dpsynth_cli.privacy.ledger import Ledger
from dpsynth_cli.privacy.noise import RandomSource, batch_generator


@dataclass(frozen=True)
class Output:
    """A release made concrete lazily: cell sizes (released values after post-processing) and
    the placement of points in cells. `plan` fixes the batches with a copy of the generator as
    it stood after the release, so every call gives the same points, and a mechanism's points
    come out exactly as they did when it placed all of them at once (one batch)."""

    sizes: np.ndarray
    place: Place
    rng: np.random.Generator
    d: int

    @property
    def rows(self) -> int:
        return int(self.sizes.sum())

    def plan(self, batch_rows: int | None = None) -> Iterator[BatchPlan]:
        """The batches of at most `batch_rows` points (None: all at once), lazily, in order.

        One batch: every cell, with the released generator's state itself, which keeps the
        single-batch output what it always was. Several: the `split_batches` groups (a
        uniformly random row order across batches), batch i with `batch_generator(entropy, i)`
        for 256 bits of entropy drawn first; placing batch i then needs nothing from the
        batches before it.
        """
        rng = copy.deepcopy(self.rng)
        if batch_rows is None or self.rows <= batch_rows:
            yield BatchPlan(0, np.arange(self.sizes.size), self.sizes, rng)
            return
        entropy = [int(w) for w in rng.bit_generator.random_raw(4)]
        for i, (cells, counts) in enumerate(split_batches(self.sizes, batch_rows, rng)):
            yield BatchPlan(i, cells, counts, batch_generator(entropy, i))

    def batches(self, batch_rows: int | None = None) -> Iterator[np.ndarray]:
        """The points of `plan(batch_rows)`, batch by batch, placed here."""
        for batch in self.plan(batch_rows):
            yield batch.points(self.place)

    def map(self, f: Callable[[np.ndarray], np.ndarray], d: int) -> Output:
        """The same output through the row-wise map f into d columns (e.g. `--dim`'s way back)."""
        return Output(self.sizes, Mapped(self.place, f), self.rng, d)


@dataclass(frozen=True)
class Mapped:
    """A placement followed by a row-wise map (picklable when both are: Dask ships it)."""

    place: Place
    f: Callable[[np.ndarray], np.ndarray]

    def __call__(
        self, cells: np.ndarray, counts: np.ndarray, rng: np.random.Generator
    ) -> np.ndarray:
        return self.f(self.place(cells, counts, rng))


_LOW_BITS = np.array([(1 << k) - 1 for k in range(65)], dtype=np.uint64)


def fair_halves(counts: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Binomial(counts, 1/2) draws: how many of counts fair coins fall heads, counted as the
    one bits among the low counts bits of a random 64-bit word (the same law, about 10x faster
    than `rng.binomial` on the millions of small counts an output split draws); numpy's
    binomial above 64."""
    counts = np.asarray(counts, dtype=np.int64)
    if counts.size and counts.max() <= 64:  # the usual case: the same draws, fewer passes
        words = rng.bit_generator.random_raw(counts.size)
        words &= np.take(_LOW_BITS, counts)
        return np.bitwise_count(words).astype(np.int64)
    small = counts <= 64
    heads = np.empty_like(counts)
    words = rng.bit_generator.random_raw(int(small.sum()))
    heads[small] = np.bitwise_count(words & _LOW_BITS[counts[small]])
    heads[~small] = rng.binomial(counts[~small], 0.5)
    return heads


def split_batches(
    sizes: np.ndarray, batch_rows: int, rng: np.random.Generator
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(cells, sizes) of consecutive batches of at most batch_rows rows that together hold every
    row once, in a uniformly random order of the rows (post-processing).

    Each row gets a uniformly random binary key, drawn a bit at a time where needed: a group of
    rows is halved by a Binomial(count, 1/2) per cell (the rows whose next key bit is 0 go
    first) until it fits a batch; sorting rows by iid uniform keys is a uniformly random order,
    and the caller shuffles within a batch. Work is about (rows + cells) log(rows / batch_rows);
    only cells with rows are carried, and at most log2(rows / batch_rows) groups wait at once.
    """
    keep = sizes > 0
    counts = np.asarray(sizes[keep], dtype=np.int64)
    stack = [(np.flatnonzero(keep), counts, int(counts.sum()))]
    while stack:
        cells, counts, total = stack.pop()
        if cells.size == 0:  # every row of the group went to the other half
            continue
        if total <= batch_rows:
            yield cells, counts
            continue
        first = fair_halves(counts, rng)
        heads = int(first.sum())
        rest = counts - first
        some = rest > 0
        stack.append((cells[some], rest[some], total - heads))
        some = first > 0
        stack.append((cells[some], first[some], heads))


@dataclass(frozen=True)
class MechanismRun:
    """Synthetic points (lazily, in batches) and what the report may say about how they were
    made."""

    output: Output
    description: dict[str, Any]
    guarantee: str
    w1_bound: float | None = None

    @property
    def points(self) -> np.ndarray:
        """Every synthetic point at once (in memory: small outputs, tests)."""
        return next(self.output.batches())


class Mechanism(Protocol):
    def __call__(
        self,
        X: Rows | np.ndarray,
        *,
        epsilon: Fraction,
        noisy_rows: int,
        relation: str,
        source: RandomSource,
        ledger: Ledger,
        rng: np.random.Generator,
        rows: int | None,
    ) -> MechanismRun: ...


def discrete_laplace_variance(scale: Fraction) -> float:
    """Variance of the discrete Laplace with P(z) ∝ exp(-|z|/scale): 2p/(1-p)^2, p = e^(-1/s)."""
    p = math.exp(-1.0 / float(scale))
    return 2.0 * p / (1.0 - p) ** 2


def resample_counts(counts: np.ndarray, rows: int | None, rng: np.random.Generator) -> np.ndarray:
    """`--rows`: draw `rows` cells from the released counts (post-processing); None keeps them.

    A measure with no mass gives no rows here; `output_counts` replaces it by the uniform measure.
    """
    if rows is None:
        return counts
    total = int(counts.sum())
    return rng.multinomial(rows, counts / total) if total > 0 else np.zeros_like(counts)


# `settle_total`: a released total within max(TOTAL_SD * sd, TOTAL_REL * estimate) of the
# unbiased estimate is plausible and kept as it is.
TOTAL_SD = 3.0
TOTAL_REL = 0.05


def settle_total(
    sizes: np.ndarray, estimate: float, sd: float, rng: np.random.Generator
) -> np.ndarray:
    """Cell sizes whose total agrees with an unbiased released estimate of the row count.

    Clipping noisy counts at zero adds mass and zeroing small ones removes it, so the sum of
    post-processed sizes can drift far from the sum of the noisy counts it came from (`estimate`,
    an unbiased estimate of n with standard deviation `sd`, both functions of released values).
    If the drift is larger than max(TOTAL_SD * sd, TOTAL_REL * |estimate|), the sizes are scaled
    to total max(round(estimate), 0): floors of the proportional shares, the remaining units to
    the largest remainders (ties at random). Otherwise they are returned unchanged (the same
    array, no random draws). Post-processing of released values only.
    """
    current = int(sizes.sum())
    if current == 0 or abs(current - estimate) <= max(TOTAL_SD * sd, TOTAL_REL * abs(estimate)):
        return sizes
    target = max(int(round(estimate)), 0)
    share = sizes * (target / current)
    base = np.floor(share)
    short = target - int(base.sum())
    rem = share - base + rng.random(sizes.shape) * 1e-9
    out = base.astype(sizes.dtype)
    if short > 0:
        out[np.argsort(-rem, kind="stable")[:short]] += 1
    return out


def fill_empty(
    sizes: np.ndarray,
    rows: int | None,
    noisy_rows: int,
    rng: np.random.Generator,
    volumes: np.ndarray | None = None,
) -> np.ndarray:
    """Cell sizes that never leave the output empty when it should not be (post-processing).

    `sizes` are a mechanism's final cell sizes (released counts after its clipping, pruning and
    `--rows` resampling). If they have mass, or nothing is wanted, they are returned unchanged (the
    same array, no random draws). If they have no mass, the released measure says nothing about
    where the rows are, so the uniform measure on the cube stands in for it: `rows` cells (or,
    without `--rows`, max(noisy_rows, 0), the noisy count) drawn multinomially with probabilities
    proportional to `volumes` (the cells' volumes; equal if None). It reads only released sizes,
    the public geometry, `rows` and the noisy count (released by its own step): no privacy cost.
    """
    want = max(int(noisy_rows), 0) if rows is None else int(rows)
    if want == 0 or sizes.size == 0 or int(sizes.sum()) > 0:
        return sizes
    p = np.ones(sizes.size) if volumes is None else np.asarray(volumes, dtype=np.float64).ravel()
    return rng.multinomial(want, p / p.sum()).reshape(sizes.shape).astype(sizes.dtype)


def output_counts(
    counts: np.ndarray,
    rows: int | None,
    noisy_rows: int,
    rng: np.random.Generator,
    volumes: np.ndarray | None = None,
) -> np.ndarray:
    """`resample_counts`, then `fill_empty`: exactly `rows` rows when `--rows` is given, and
    without it the released counts, or the noisy count's worth of uniform rows if they are empty.
    """
    return fill_empty(resample_counts(counts, rows, rng), rows, noisy_rows, rng, volumes)
