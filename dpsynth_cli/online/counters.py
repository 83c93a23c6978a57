"""Algorithm 11 (inhomogeneous sparse counting) for many independent counters, event-driven.

One `CounterBank` holds the counters of every region at one depth j of the online partition
(they share eps_{j,r}, so one set of `LevelParams` per level), and, for audits, R independent
replicas of them. Each counter follows Algorithm 11 with Algorithm 10 inside a level:

    at every time t of level r:  while N + lambda'_t > T~:  close the segment (Binary
                                 Mechanism on its count N), N <- 0, new T~ = T0 + lambda;
                                 N <- N + 1[X_t in region];  output S~ + (Binary Mechanism sum)
    at the end of level r:       S~ <- S~ + (the level's true count) + Lap_Z(2 / eps_r)

**Event-driven** (seeds/README.md point 7): while a counter's N and T~ are unchanged its tests
are i.i.d. Bernoulli(q(T~ - N)), so the time of the next firing is drawn directly
(`geometric.first_fire`, exact) and redrawn when N changes (an arrival) or T~ changes (a
firing). A drawn firing time later than the next arrival is discarded (memorylessness: the
tests up to the arrival all passed). A counter no row touches costs one draw per level, so a
level costs O(regions + rows x depth) draws instead of O(regions x steps). `literal.py` is the
step-by-step version; the tests show both give the same distribution.

Privacy per counter (Lemma 5.7): a row at level r >= r0 costs eps_r: eps_r/4 for the segment
decisions (AboveThreshold on a monotone count with Lap_Z(4/eps_r) on threshold and tests),
eps_r/4 for the Binary Mechanism (one segment count changes by 1, in <= L nodes, Lap_Z(4L/eps_r)
each), eps_r/2 for the level total. A level stops testing after 2^L - 1 segments (a rule on the
released segment count, so it costs nothing; the rest of the level reaches the output through
its noisy total at the level's end).

The state (every array, including the drawn noise and pending firing times) is secret.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from dpsynth_cli.online.geometric import first_fire
from dpsynth_cli.online.params import LevelParams
from dpsynth_cli.privacy.noise import RandomSource, discrete_laplace

NEVER = np.int64(1) << np.int64(60)  # no firing scheduled in this level
_ARRAYS = ("s_tilde", "level_count", "seg", "thresh", "fire", "bm_k", "bm_out", "bm_row")
_MIN_WINDOW = 64
_POOL = 4096


@dataclass
class CounterBank:
    """n counters (secret state). Arrays are int64, one entry per counter."""

    n: int
    s_tilde: np.ndarray
    level_count: np.ndarray
    seg: np.ndarray
    thresh: np.ndarray
    fire: np.ndarray
    bm_k: np.ndarray
    bm_out: np.ndarray
    bm_row: np.ndarray
    bm_alpha: np.ndarray = field(default_factory=lambda: np.zeros((0, 1), dtype=np.int64))
    bm_hat: np.ndarray = field(default_factory=lambda: np.zeros((0, 1), dtype=np.int64))

    @classmethod
    def create(cls, n: int, s_tilde: np.ndarray | None = None) -> CounterBank:
        z = [np.zeros(n, dtype=np.int64) for _ in _ARRAYS]
        bank = cls(n, *z)
        if s_tilde is not None:
            bank.s_tilde[:] = s_tilde
        return bank

    # -- levels ---------------------------------------------------------------------------------
    def start_level(self, p: LevelParams, t_start: int, source: RandomSource) -> None:
        """A new Algorithm 10 run for every counter: N = 0, fresh thresholds, first firings."""
        self.level_count[:] = 0
        self.seg[:] = 0
        self.bm_k[:] = 0
        self.bm_out[:] = 0
        self.bm_row[:] = -1
        self.__dict__["_bm_used"] = 0
        self.bm_alpha = np.zeros((0, p.bm_bits), dtype=np.int64)
        self.bm_hat = np.zeros((0, p.bm_bits), dtype=np.int64)
        if p.segment_cap == 0:  # no segment tests in this allocation: S~ only
            self.thresh[:] = 0
            self.fire[:] = NEVER
            return
        self.thresh[:] = p.threshold + discrete_laplace(source, p.svt_scale, self.n)
        level_end = t_start + p.horizon - 1
        every = np.arange(self.n)
        self._schedule(every, np.full(self.n, t_start), np.full(self.n, level_end), p, source)

    def end_level(self, p: LevelParams, source: RandomSource) -> None:
        """S~ <- S~ + level total + Lap_Z(2 / eps_r) (Algorithm 11's update)."""
        self.s_tilde += self.level_count + discrete_laplace(source, p.total_scale, self.n)

    def outputs(self) -> np.ndarray:
        """The released noisy counts S~ + c_t."""
        return self.s_tilde + self.bm_out

    # -- events ---------------------------------------------------------------------------------
    def _schedule(
        self, idx: np.ndarray, u: np.ndarray, end: np.ndarray, p: LevelParams, src: RandomSource
    ) -> None:
        """Next firing of counters idx among the tests at times u..end (their N, T~ fixed)."""
        live = self.bm_k[idx] < p.segment_cap
        w = np.zeros(idx.size, dtype=np.int64)
        if live.any():
            gap = self.thresh[idx[live]] - self.seg[idx[live]]
            w[live] = first_fire(src, gap, p.svt_scale, end[live] - u[live] + 1)
        self.fire[idx] = np.where(w > 0, u + w - 1, NEVER)

    def _close(self, idx: np.ndarray, p: LevelParams, src: RandomSource) -> None:
        """Close the current segment of counters idx: Binary Mechanism step on its count."""
        x = self.seg[idx]
        k = self.bm_k[idx] + 1
        self.bm_k[idx] = k
        new = idx[self.bm_row[idx] < 0]
        if new.size:  # rows of the Binary Mechanism table, allocated on a counter's first close
            used = self.__dict__.get("_bm_used")
            if used is None:
                used = int(self.bm_row.max()) + 1 if self.bm_row.size else 0
            if used + new.size > self.bm_alpha.shape[0]:
                grow = max(used + new.size, 2 * self.bm_alpha.shape[0], 64)
                for name in ("bm_alpha", "bm_hat"):
                    bigger = np.zeros((grow, p.bm_bits), dtype=np.int64)
                    bigger[:used] = getattr(self, name)[:used]
                    setattr(self, name, bigger)
            self.bm_row[new] = used + np.arange(new.size)
            self.__dict__["_bm_used"] = used + new.size
        rows = self.bm_row[idx]
        low = np.log2((k & -k).astype(np.float64)).astype(np.int64)  # lowest set bit of k
        below = np.arange(p.bm_bits)[None, :] < low[:, None]
        alpha, hat = self.bm_alpha[rows], self.bm_hat[rows]
        total = np.where(below, alpha, 0).sum(axis=1) + x
        alpha[below] = 0
        hat[below] = 0
        r = np.arange(idx.size)
        alpha[r, low] = total
        hat[r, low] = total + self._noise(src, p.bm_scale, idx.size)
        self.bm_alpha[rows], self.bm_hat[rows] = alpha, hat
        self.bm_out[idx] = hat.sum(axis=1)
        self.seg[idx] = 0
        self.thresh[idx] = p.threshold + self._noise(src, p.svt_scale, idx.size)

    def _noise(self, src: RandomSource, scale, n: int) -> np.ndarray:
        """n discrete Laplace draws of `scale`, taken in order from a pre-drawn pool (i.i.d.
        draws used in order have the same law as drawing them one call at a time)."""
        pool = self.__dict__.setdefault("_pool", {})
        buf, pos = pool.get((id(src), scale), (np.zeros(0, dtype=np.int64), 0))
        if pos + n > buf.size:
            buf = np.concatenate([buf[pos:], discrete_laplace(src, scale, max(n, _POOL))])
            pos = 0
        pool[(id(src), scale)] = (buf, pos + n)
        return buf[pos : pos + n]

    def advance(
        self,
        ids: np.ndarray,
        times: np.ndarray,
        t_end: int,
        level_end: int,
        p: LevelParams,
        source: RandomSource,
    ) -> None:
        """Consume arrivals (counter `ids[i]` gets a row at time `times[i]`, all <= t_end, in time
        order) and apply every firing at a time <= t_end."""
        order = _by_counter(ids, times)
        ids, times = ids[order], times[order]
        if ids.size:
            start = np.flatnonzero(np.concatenate(([True], ids[1:] != ids[:-1])))
            uniq = ids[start]
            count = np.diff(np.append(start, ids.size))
        else:
            uniq = start = count = np.zeros(0, dtype=np.int64)
        due = np.flatnonzero(self.fire <= t_end)
        active = np.union1d(uniq, due).astype(np.int64)
        ptr = np.zeros(active.size, dtype=np.int64)
        stop = np.zeros(active.size, dtype=np.int64)
        if uniq.size:
            pos = np.minimum(np.searchsorted(uniq, active), uniq.size - 1)
            has = uniq[pos] == active
            ptr[has] = start[pos[has]]
            stop[has] = start[pos[has]] + count[pos[has]]
        if times.size == 0:
            times = np.zeros(1, dtype=np.int64)  # never read: every ptr == stop
        while active.size:
            more = ptr < stop
            nxt = np.where(more, times[np.minimum(ptr, times.size - 1)], level_end)
            f = self.fire[active]
            firing = (f <= nxt) & (f <= t_end)
            if firing.any():
                c = active[firing]
                self._close(c, p, source)
                self._schedule(c, f[firing], nxt[firing], p, source)
            walk = ~firing & more
            if walk.any():
                ptr[walk] = self._walk(
                    active[walk], ptr[walk], stop[walk], times, level_end, p, source
                )
            keep = firing | (ptr < stop) | (self.fire[active] <= t_end)
            active, ptr, stop = active[keep], ptr[keep], stop[keep]

    def _walk(
        self,
        idx: np.ndarray,
        ptr: np.ndarray,
        stop: np.ndarray,
        times: np.ndarray,
        level_end: int,
        p: LevelParams,
        src: RandomSource,
    ) -> np.ndarray:
        """Consume a window of arrivals of counters idx up to their first firing: one exact draw
        per interval between arrivals. Returns the new arrival pointers."""
        gap0 = self.thresh[idx] - self.seg[idx]
        testing = self.bm_k[idx] < p.segment_cap
        window = np.minimum(
            stop - ptr, np.where(testing, 2 * np.maximum(gap0, 0) + _MIN_WINDOW, stop - ptr)
        )
        owner = np.repeat(np.arange(idx.size), window)
        first = np.cumsum(window) - window
        local = np.arange(owner.size) - first[owner]  # 0.. window-1
        i = ptr[owner] + local  # flat arrival index
        after = i + 1
        end = np.where(after < stop[owner], times[np.minimum(after, times.size - 1)], level_end)
        u = times[i] + 1
        counts = self.seg[idx][owner] + local + 1
        live = self.bm_k[idx][owner] < p.segment_cap
        w = np.zeros(owner.size, dtype=np.int64)
        if live.any():
            gap = self.thresh[idx][owner] - counts
            w[live] = first_fire(src, gap[live], p.svt_scale, (end - u + 1)[live])
        big = np.int64(1) << 40
        hit = np.where(w > 0, local, big)
        first_hit = np.minimum.reduceat(hit, first) if owner.size else hit
        fired = first_hit < big
        taken = np.where(fired, first_hit + 1, window)
        self.seg[idx] += taken
        self.level_count[idx] += taken
        at = first + np.where(fired, first_hit, 0)
        self.fire[idx] = np.where(fired, u[at] + w[at] - 1, NEVER)
        return ptr + taken

    # -- persistence ----------------------------------------------------------------------------
    def arrays(self) -> dict[str, np.ndarray]:
        out = {name: getattr(self, name) for name in _ARRAYS}
        out["bm_alpha"], out["bm_hat"] = self.bm_alpha, self.bm_hat
        return out

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray]) -> CounterBank:
        n = int(arrays["s_tilde"].shape[0])
        return cls(
            n,
            *(np.array(arrays[k], dtype=np.int64) for k in _ARRAYS),
            bm_alpha=np.array(arrays["bm_alpha"], dtype=np.int64),
            bm_hat=np.array(arrays["bm_hat"], dtype=np.int64),
        )


def _by_counter(ids: np.ndarray, times: np.ndarray) -> np.ndarray:
    """Order of arrivals by counter, then time (rows come in time order)."""
    if ids.size == 0:
        return np.zeros(0, dtype=np.int64)
    top = int(ids.max())
    if top < 1 << 16:
        return np.argsort(ids.astype(np.uint16), kind="stable")  # radix sort
    span = int(times.max() - times.min()) + 1
    if top < (1 << 62) // span:
        return np.argsort(ids * span + (times - times.min()))  # unique keys: any sort is stable
    return np.lexsort((times, ids))
