"""Algorithm 12 (online synthetic data) on the binary hierarchical partition, event-driven.

The stream's t-th row arrives at time t. At time t in level r (t_r <= t < t_{r+1},
t_r = ceil(2^r / eps)) the partition has depth r: the regions of depth j = 1..r each run an
Algorithm 11 counter (`counters.CounterBank`, one bank per depth) that started at t_j (d >= 2,
r0 = |theta|: rows before t_j are not counted there) or loaded its history with the noise
Algorithm 11 would have added (d = 1, r0 = 0). The root's count is t itself: the number of rows
is public in this model (`PRIVACY_MODEL`). A release at time t post-processes the noisy counts:
Algorithm 3's consistency (`mechanisms.consistency`) with the root fixed at t, then t points
uniform in the depth-r cells (`mechanisms.partition`), mapped back to the columns' units.

The engine holds the whole secret state: the banks, and for d = 1 the rows' codes since t_0.
`replicas` > 1 runs that many independent copies on the same rows (privacy audits and the
distribution tests): their counters sit side by side in each bank.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from dpsynth_cli.mechanisms import partition
from dpsynth_cli.mechanisms.consistency import make_consistent
from dpsynth_cli.online.counters import CounterBank
from dpsynth_cli.online.params import OnlinePlan
from dpsynth_cli.privacy.noise import RandomSource, discrete_laplace

HISTORY_BITS = 52  # d = 1: rows since t_0 kept as 52-bit grid codes (secret state)
MAX_DEPTH = 40


@dataclass
class OnlineEngine:
    """The mechanism's state after `t` rows (secret: counts and drawn noise)."""

    plan: OnlinePlan
    replicas: int = 1
    t: int = 0
    level: int = -1
    banks: list[CounterBank] = field(default_factory=list)
    history: np.ndarray | None = None
    _streams: dict[str, RandomSource] = field(default_factory=dict, repr=False)
    _source: RandomSource | None = field(default=None, repr=False)

    def use(self, source: RandomSource) -> None:
        """The randomness for this run (each run of a resumed stream gets a fresh source)."""
        self._source, self._streams = source, {}

    def _stream(self, name: str) -> RandomSource:
        if name not in self._streams:
            assert self._source is not None, "call use(source) first"
            self._streams[name] = self._source.spawn(name)
        return self._streams[name]

    # -- time ------------------------------------------------------------------------------------
    def _next_level(self) -> None:
        """End level r (Algorithm 11's S~ updates), start level r + 1 with a new depth."""
        r = self.level
        for j, bank in enumerate(self.banks, start=1):
            bank.end_level(self.plan.params(j, r), self._stream(f"depth-{j}"))
        r += 1
        if r > MAX_DEPTH:
            raise OverflowError("the stream is too long for the partition (depth 40)")
        self.level = r
        t_r = self.plan.level_start(r)
        if r >= 1:
            self.banks.append(CounterBank.create(self.replicas << r, self._history_start(r)))
        for j, bank in enumerate(self.banks, start=1):
            bank.start_level(self.plan.params(j, r), t_r, self._stream(f"depth-{j}"))

    def _history_start(self, r: int) -> np.ndarray | None:
        """d = 1 (r0 = 0): S~ of a new depth-r region = its rows in [t_0, t_r) plus the noise of
        the r level totals Algorithm 11 would have added (its earlier outputs were never shown)."""
        if self.plan.d != 1 or r == 0 or self.history is None:
            return None
        counts = np.bincount(self.history >> (HISTORY_BITS - r), minlength=1 << r)
        counts = np.tile(counts, self.replicas)
        scales = [self.plan.params(r, i).total_scale for i in range(r)]
        noise = np.zeros(counts.size, dtype=np.int64)
        for i, sc in enumerate(scales):
            noise += discrete_laplace(self._stream(f"history-{r}-{i}"), sc, counts.size)
        return counts + noise

    def feed(self, X: np.ndarray, stops: list[int] | None = None, on_stop=None) -> None:
        """Consume rows X (in [0,1]^d, stream order). `on_stop(t)` is called after the row at
        each time t in `stops` (checkpoints) has been consumed."""
        stops = sorted(s for s in (stops or []) if self.t < s <= self.t + X.shape[0])
        i = 0
        while i < X.shape[0]:
            t = self.t + 1
            while self.plan.level_start(self.level + 1) <= t:
                self._next_level()
            level_last = self.plan.level_start(self.level + 1) - 1
            cut = min(level_last, self.t + X.shape[0] - i, *(s for s in stops if s >= t))
            n = cut - self.t
            self._consume(X[i : i + n], t, cut)
            i += n
            self.t = cut
            if on_stop is not None and cut in stops:
                on_stop(cut)

    def _consume(self, X: np.ndarray, t_first: int, t_last: int) -> None:
        """Rows at times t_first..t_last, all in the current level. A row with a missing value
        (NaN) keeps its time slot and is counted in no region (an empty slot)."""
        r = self.level
        times = np.arange(t_first, t_last + 1, dtype=np.int64)
        valid = ~np.isnan(X).any(axis=1)
        if not valid.all():
            X, times = X[valid], times[valid]
        if self.plan.d == 1 and r >= 0:
            codes = partition.leaf_codes(X, HISTORY_BITS)
            self.history = codes if self.history is None else np.concatenate([self.history, codes])
        if r < 1 or times.size == 0 and not self._due(t_last):
            return
        codes_r = partition.leaf_codes(X, r, self.plan.lead)
        level_end = self.plan.level_start(r + 1) - 1
        for j, bank in enumerate(self.banks, start=1):
            ids = codes_r >> (r - j)
            tt = times
            if self.replicas > 1:
                off = (np.arange(self.replicas, dtype=np.int64) << j)[:, None]
                ids = (ids[None, :] + off).ravel()
                tt = np.tile(times, self.replicas)
            bank.advance(
                ids, tt, t_last, level_end, self.plan.params(j, r), self._stream(f"depth-{j}")
            )

    def _due(self, t_last: int) -> bool:
        return any(bool((b.fire <= t_last).any()) for b in self.banks)

    # -- release --------------------------------------------------------------------------------
    def noisy_counts(self) -> list[np.ndarray]:
        """Levels 0..r of released counts (root = t, public), replicas side by side."""
        root = np.full(self.replicas, self.t, dtype=np.int64)
        return [root] + [bank.outputs() for bank in self.banks]

    def leaf_counts(self, rng: np.random.Generator) -> np.ndarray:
        """Consistent non-negative counts of the depth-r cells summing to t (Algorithm 3)."""
        return make_consistent(self.noisy_counts(), rng)[-1]

    def release(self, rng: np.random.Generator) -> np.ndarray:
        """t synthetic points in [0,1]^d (replicas = 1): uniform in the consistent leaf cells."""
        depth = max(self.level, 0)
        counts = self.leaf_counts(rng)
        cells = np.repeat(np.arange(counts.size, dtype=np.int64), counts)
        rng.shuffle(cells)
        return partition.points_in_cells(cells, depth, self.plan.d, rng, self.plan.lead)


def _abs_mean(scale) -> float:
    """E|Z| for the discrete Laplace of `scale`: 2p / (1 - p^2), p = e^(-1/scale)."""
    p = math.exp(-1.0 / float(scale))
    return 2 * p / (1 - p * p)


def _variance(scale) -> float:
    p = math.exp(-1.0 / float(scale))
    return 2 * p / (1 - p) ** 2


def apriori_bound(plan: OnlinePlan, t: int) -> dict:
    """A-priori bound on E W1 at time t, from Lemma 5.10 and (5.7)-(5.9), in the mixed metric
    (levels at distance 1, the rest L-infinity on the unit cube): the lemma holds for any binary
    hierarchical partition with its cells' diameters, here `partition.diameter` with the level
    columns split first (a cell above their levels has diameter 1).

    (2 sqrt 2 / t) sum_{j=1}^{r} diam(j-1) [2^j E_j + lag_j + H_j] + diam(r), where E_j bounds the
    expected error of one depth-j count from the noise (level totals and Binary Mechanism, by
    Jensen: the root of the summed variances), plus the rows not yet counted: literal, an open
    segment (T0 + the mean size of the threshold and test noise + 1 per region; assumes the
    segment cap is not reached); tuned, the rows since t_r; and H_j = t_j - 1 rows depth-j
    regions never counted (d >= 2; d = 1: t_0 - 1). Public: depends only on plan and t.
    """
    r = plan.level_of(t)
    if r < 1:
        return _bound_block(plan, r, 1.0)
    total = 0.0
    t_r = plan.level_start(r)
    for j in range(1, r + 1):
        p = plan.params(j, r)
        first = 0 if plan.d == 1 else j
        var = sum(_variance(plan.params(j, i).total_scale) for i in range(first, r))
        if p.segment_cap:  # literal: Binary Mechanism noise and an open segment's lag
            var += p.bm_bits * _variance(p.bm_scale)
            lag = 2**j * (p.threshold + 2 * _abs_mean(p.svt_scale) + 1)
        else:  # tuned: the rows of the current level are not counted yet
            lag = t - t_r + 1
        missed = max(plan.level_start(first) - 1, 0)
        total += partition.diameter(j - 1, plan.d, plan.lead) * (
            2**j * math.sqrt(var) + lag + missed
        )
    bound = 2 * math.sqrt(2) / t * total + partition.diameter(r, plan.d, plan.lead)
    return _bound_block(plan, r, bound)


WEAK_BOUND = 0.5  # half the largest distance of the metric: a notice says so (issue 25)


def _bound_block(plan: OnlinePlan, r: int, bound: float) -> dict:
    """The report's entries: the bound in the mixed metric (`Domain.metric`; with no level
    column it is the L-infinity unit cube's, also under its old name), vacuous (>= 1, the
    metric's diameter) or weak (>= WEAK_BOUND)."""
    out: dict = {"level": r, "w1_bound_mixed_metric": bound}
    if not plan.lead:
        out["w1_bound_unit_cube"] = bound
    return {**out, "vacuous": bound >= 1.0, "weak": bound >= WEAK_BOUND}
