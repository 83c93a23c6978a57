"""The node schedules of `online-replay --mechanism marginals` (issues 25, 38, 39): which noisy
nodes (dyadic blocks of segments, the rows between two checkpoints) a row is counted in and
which ones each release sums. Public: functions of the checkpoints' numbering only.

`Schedule`: a bounded dyadic schedule over K segments with top level h (h = floor(log2 K): the
Binary Mechanism, Chan, Shi & Song 2011 / Dwork et al. 2010; h = 0: the segments one by one),
`schedule(K)` the h with the smallest worst-release variance m^2 x (nodes summed), m the most
nodes one segment is in. `EpochSchedule`: the unbounded one a --state continues (issue 39):
epoch j holds segments 2^j .. 2^(j+1) - 1 with `schedule(2^j)` inside it (the hybrid mechanism of
Chan, Shi & Song 2011, Section 4, with the epochs' totals read from their own trees). A row lies
in one segment, so in one epoch and in at most m_j = `epoch_schedule(j).per_row` of its nodes:
the factor of the noise scales in `online.marginals` (the privacy argument is there).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache, cached_property

EPOCH_SEARCH = 12  # epochs of up to 2^12 segments pick their top level; beyond, the binary tree

Node = tuple[int, int]  # (level l, index a): segments a 2^l + 1 .. (a + 1) 2^l


def decomposition(k: int, top: int) -> list[Node]:
    """Prefix [1, k] of segments as dyadic blocks of levels <= top, largest first: k >> top
    blocks of the top level, then one block of level l < top for each bit l set in k."""
    out = [(top, a) for a in range(k >> top)]
    pos = (k >> top) << top
    for level in range(top - 1, -1, -1):
        if k >> level & 1:
            out.append((level, pos >> level))
            pos += 1 << level
    return out


@dataclass(frozen=True)
class Schedule:
    """Which noisy nodes each checkpoint sums (public: K and the top level only)."""

    checkpoints: int  # K
    top: int  # h

    def used(self, node: Node) -> bool:
        """Whether some release k <= K sums the node: a top-level block inside [1, K], or a
        lower block (l, a) with a even (bit l of k set) inside [1, K]."""
        level, a = node
        return (a + 1) << level <= self.checkpoints and (level == self.top or a % 2 == 0)

    def sums(self, k: int) -> list[Node]:
        return decomposition(k, self.top)

    def nodes_of(self, i: int) -> list[Node]:
        """The used nodes segment i (1-based) is in."""
        mine = [(lv, (i - 1) >> lv) for lv in range(self.top + 1)]
        return [n for n in mine if self.used(n)]

    @cached_property
    def per_row(self) -> int:
        """m: the most nodes one row is counted in (the scale's factor)."""
        return max((len(self.nodes_of(i)) for i in range(1, self.checkpoints + 1)), default=1)

    def worst(self) -> int:
        """The worst checkpoint's variance in units of a single measurement's."""
        mask = (1 << self.top) - 1
        summed = max(
            ((k >> self.top) + (k & mask).bit_count() for k in range(1, self.checkpoints + 1)),
            default=1,
        )
        return self.per_row**2 * summed

    @staticmethod
    def end(node: Node) -> int:
        """The segment after which the node is complete (and noised)."""
        level, a = node
        return (a + 1) << level


def schedule(checkpoints: int) -> Schedule:
    """The top level h with the smallest worst-checkpoint variance (ties: the lower)."""
    options = [Schedule(checkpoints, h) for h in range(max(checkpoints, 1).bit_length())]
    return min(options, key=lambda s: (s.worst(), s.top))


def noise_factor(checkpoints: int) -> float:
    """The noise standard deviation of the last release's counts in units of a single
    release's at the same eps, for a stream of this many checkpoints (`stream_factor`)."""
    return stream_factor(checkpoints)


EpochNode = tuple[int, int, int]  # (epoch j, level l, index a) inside epoch j's schedule


@cache
def epoch_schedule(j: int) -> Schedule:
    """Epoch j's dyadic schedule over its 2^j segments (public: j only)."""
    if j > EPOCH_SEARCH:
        return Schedule(1 << j, j)
    return schedule(1 << j)


def epoch_of(i: int) -> tuple[int, int]:
    """Segment i (1-based, across runs) -> (epoch j, position 1 .. 2^j inside it)."""
    j = i.bit_length() - 1
    return j, i - (1 << j) + 1


@dataclass(frozen=True)
class EpochSchedule:
    """The unbounded schedule (module docstring): epochs of 2^j segments, each with its own
    dyadic schedule; nothing depends on how many checkpoints will come."""

    @staticmethod
    def nodes_of(i: int) -> list[EpochNode]:
        j, p = epoch_of(i)
        return [(j, lv, a) for lv, a in epoch_schedule(j).nodes_of(p)]

    @staticmethod
    def sums(k: int) -> list[EpochNode]:
        """The nodes release k sums: every complete epoch's whole, then epoch j's prefix."""
        if k < 1:
            return []
        j, p = epoch_of(k)
        out = [(e, lv, a) for e in range(j) for lv, a in epoch_schedule(e).sums(1 << e)]
        return out + [(j, lv, a) for lv, a in epoch_schedule(j).sums(p)]

    @staticmethod
    def end(node: EpochNode) -> int:
        """The segment after which the node is complete (and noised)."""
        j, lv, a = node
        return (1 << j) - 1 + ((a + 1) << lv)

    @staticmethod
    def per_row(j: int) -> int:
        return epoch_schedule(j).per_row


def stream_factor(k: int) -> float:
    """The noise standard deviation of release k's counts in units of a single release's at the
    same eps: sqrt(sum of m_j^2 over the nodes it sums). Public: k only."""
    if k <= 1:
        return 1.0
    return math.sqrt(sum(EpochSchedule.per_row(j) ** 2 for j, _, _ in EpochSchedule.sums(k)))
