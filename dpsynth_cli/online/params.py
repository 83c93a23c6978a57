"""Public parameters of online synthesis: time levels, per-region epsilons, thresholds.

Time levels (dissertation §5.2.3): level r covers t_r <= t < t_{r+1}, t_r = ceil(2^r / eps).
**Start time of new regions**: depth-j regions are created at t_j = ceil(2^j / eps), as the text
of §5.3 and Algorithm 11 (r0 = |theta|) say; the pseudo-code of Algorithm 12 ("while t >= 2^r /
eps: r <- r + 1") would create them one level earlier, at t >= 2^(j-1) / eps, which the privacy
proof (Lemma 5.7, Proposition 5.9) does not cover as written. The tree at time t has depth r(t).

Per-region epsilons, path budget P = eps / sens (sens = 2 under `replace`: a changed row moves
between two root-to-leaf paths; 1 under `add-remove`: one slot's row present or absent):

- d >= 2, eq. (5.3): eps_{j,r} = (1 - 1/alpha) P alpha^(j-r), alpha = 2^((1-1/d)/2). For
  P = eps/2 this is exactly C1 eps alpha^(j-r) with C1 = (1 - 1/alpha)/2, and
  sum_{j=1}^{s} eps_{j,s} = P (1 - alpha^-s) < P for every level s (eq. 5.4).
- d = 1, eq. (5.12): eps_{j} = 6 P / (pi^2 (j+1)^2) ("literal"; for P = eps/2 exactly
  3 eps / (pi^2 (j+1)^2)), whose sum over j >= 1 is only 0.39 P; "tuned" divides by
  (pi^2/6 - 1) / 0.999 instead, so the sum over all j >= 1 is 0.999 P (Proposition 5.12's own
  argument; the 0.1% keeps the exact check of the infinite sum simple).

Each eps_{j,r} is then split as Algorithm 11 and Lemma 5.7 do: eps_r/4 for the segment tests
(Algorithm 10 at eps_r/2: threshold and test noise Lap_Z(4/eps_r)), eps_r/4 for the Binary
Mechanism (Lap_Z(4 L/eps_r) per node, L = bits of the segment cap), eps_r/2 for the level totals
(Lap_Z(2/eps_r)). The segment threshold T0 and the segment cap are public constants that do not
enter the privacy proof: any values are eps-DP; they only move the accuracy.

**Allocations.** "literal": everything above as printed. "tuned": the same eps_{j,r} (the same
Proposition 5.9), but all of eps_{j,r} noises the level totals (Lap_Z(1/eps_{j,r})) and no
segment tests run. Lemma 5.7's proof composes the two parts of Algorithm 11 with any split of
eps_r, and with share 0 a row costs exactly eps_{j,r} in its level's total: same guarantee.
Measured (docs/benchmarks.md, "online-replay"): with the literal constants T0 = 9 log H / (eps_r
/ 2) is so high that segments close only in shallow regions, and when they do, the Binary
Mechanism's noise (L = log2 H nodes of Lap_Z(4 L / eps_r)) is larger than the lag it removes;
the tuned split halves the level-total noise instead. Its cost: inside a level the counts stand
at the level's start (a release at t shows the distribution of the rows before t_r, with
exactly t rows); at power-of-two checkpoints with eps = 1 (t_r = 2^r) nothing is lost.

Epsilons are exact Fractions rounded down onto 2^-40 (with a 1e-12 relative safety margin on the
float evaluation of alpha^k), scales exact Fractions rounded up: the sums are checked in exact
rational arithmetic (`check_budget`, and the tests).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from functools import cache

from dpsynth_cli.errors import UsageError
from dpsynth_cli.mechanisms.partition import split_order_text
from dpsynth_cli.privacy.noise import as_scale

ALLOCATIONS = ("literal", "tuned")
# Share of eps_{j,r} that Algorithm 10 (segment tests + Binary Mechanism) gets inside a level;
# the rest noises the level total. Algorithm 11 as printed: 1/2. "tuned": 0 (module docstring).
SPARSE_SHARE = {"literal": Fraction(1, 2), "tuned": Fraction(0)}
_GRID = 2**40
# Tuned constants (docs/privacy.md, "online-replay"): T0 = TUNED_T0 noise scales of the segment
# test; at most 2^TUNED_BM_BITS - 1 segments per level (then the level's count waits for its
# noisy total at the level's end).
TUNED_T0 = 2
TUNED_BM_BITS = 5  # (for shares strictly between 0 and 1/2)


def _down(x: float) -> Fraction:
    return Fraction(math.floor(x * (1 - 1e-12) * _GRID), _GRID)


@dataclass(frozen=True)
class LevelParams:
    """Algorithm 11's constants for one depth j at one level r (all public)."""

    epsilon: Fraction  # eps_{j,r}
    horizon: int  # H = t_{r+1} - t_r
    threshold: int  # floor(T0)
    svt_scale: Fraction  # threshold and test noise, Lap_Z(4 / eps_{j,r})
    bm_bits: int  # L: the Binary Mechanism's levels; at most 2^L - 1 segments
    bm_scale: Fraction  # Lap_Z(4 L / eps_{j,r}) per Binary Mechanism node
    total_scale: Fraction  # Lap_Z(2 / eps_{j,r}) on the level total

    @property
    def segment_cap(self) -> int:
        return (1 << self.bm_bits) - 1


@dataclass(frozen=True)
class OnlinePlan:
    """Everything public that fixes the mechanism: eps, d, relation and the allocation."""

    epsilon: Fraction
    d: int
    relation: str = "replace"
    allocation: str = "literal"
    # Bits split first for each of the first len(lead) cube coordinates: the boolean/category
    # columns and missing flags of a mixed table (`Domain.lead_bits`, `partition`). Only the
    # geometry: one row still lies in one region per depth, so the privacy proof is unchanged.
    lead: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.allocation not in ALLOCATIONS:
            raise UsageError(f"--allocation must be one of {', '.join(ALLOCATIONS)}")
        if self.relation not in ("replace", "add-remove"):
            raise UsageError("--neighboring must be replace or add-remove")
        if self.d < 1:
            raise UsageError("online-replay needs at least one column")

    @property
    def sensitivity(self) -> int:
        """Root-to-leaf paths a neighbouring stream changes (replace: 2, add-remove: 1)."""
        return 2 if self.relation == "replace" else 1

    @property
    def path_budget(self) -> Fraction:
        return self.epsilon / self.sensitivity

    def level_start(self, r: int) -> int:
        """t_r = ceil(2^r / eps), exactly."""
        e = self.epsilon
        return -((-(2**r) * e.denominator) // e.numerator)

    def level_of(self, t: int) -> int:
        """The level r with t_r <= t < t_{r+1}; -1 before t_0 (no regions yet)."""
        r = -1
        while self.level_start(r + 1) <= t:
            r += 1
        return r

    @property
    def start_level(self) -> int:
        """r0 of Algorithm 12: |theta| for d >= 2, 0 for d = 1 (every region loads history)."""
        return 0 if self.d == 1 else -1

    def epsilon_jr(self, j: int, r: int) -> Fraction:
        return _epsilon_jr(self.epsilon, self.d, self.sensitivity, self.allocation, j, r)

    def params(self, j: int, r: int) -> LevelParams:
        return _params(self.epsilon, self.d, self.sensitivity, self.allocation, j, r)

    def to_json(self) -> dict:
        return {
            "epsilon": float(self.epsilon),
            "d": self.d,
            "neighbouring_relation": self.relation,
            "paths_per_neighbour": self.sensitivity,
            "path_budget": float(self.path_budget),
            "allocation": self.allocation,
            "region_start": "depth-j regions start at t_j = ceil(2^j / eps) (Algorithm 11, "
            "r0 = |theta|), not at 2^(j-1)/eps as Algorithm 12's pseudo-code reads",
            "epsilon_rule": "(5.3)" if self.d >= 2 else "(5.12)",
            "split_order": split_order_text(self.lead),
        }


@cache
def _epsilon_jr(eps: Fraction, d: int, sens: int, allocation: str, j: int, r: int) -> Fraction:
    path = eps / sens
    if d == 1:
        c = 6 / math.pi**2 if allocation == "literal" else 0.999 / (math.pi**2 / 6 - 1)
        return _down(float(path) * c / (j + 1) ** 2)
    alpha = 2 ** ((1 - 1 / d) / 2)
    return _down(float(path) * (1 - 1 / alpha) * alpha ** (j - r))


@cache
def _params(eps: Fraction, d: int, sens: int, allocation: str, j: int, r: int) -> LevelParams:
    plan = OnlinePlan(eps, d, "replace" if sens == 2 else "add-remove", allocation)
    e = _epsilon_jr(eps, d, sens, allocation, j, r)
    horizon = plan.level_start(r + 1) - plan.level_start(r)
    share = SPARSE_SHARE[allocation]
    if share == 0:  # no segment tests: the whole eps_{j,r} goes to the level total
        return LevelParams(e, horizon, 0, Fraction(1), 0, Fraction(1), as_scale(1 / e))
    es = e * share  # Algorithm 10 runs at es: segment tests es/2, Binary Mechanism es/2
    svt = as_scale(2 / es)
    if allocation == "literal":
        t0 = math.floor(9 * math.log(max(horizon, 2)) / float(es))  # T0 = 9 log H / es
        bits = max(horizon, 1).bit_length()
    else:  # a share between 0 and 1/2 (not used by the shipped allocations; kept general)
        bits = TUNED_BM_BITS
        t0 = math.floor(TUNED_T0 * float(svt))
    return LevelParams(
        epsilon=e,
        horizon=horizon,
        threshold=t0,
        svt_scale=svt,
        bm_bits=bits,
        bm_scale=as_scale(2 * bits / es),
        total_scale=as_scale(1 / (e - es)),
    )


def check_budget(plan: OnlinePlan, levels: int = 64) -> Fraction:
    """The largest per-path sum over levels s < `levels` (exact); must be <= the path budget.

    d >= 2: sum_{j=1}^{s} eps_{j,s}. d = 1: sum over all j >= 1 of eps_j, bounded by its first
    `levels` terms plus the exact tail bound sum_{j >= J} c/(j+1)^2 <= c/J.
    """
    if plan.d == 1:
        head = sum((plan.epsilon_jr(j, 0) for j in range(1, levels)), Fraction(0))
        c = plan.epsilon_jr(1, 0) * 4  # eps_1 = c / 4 (rounded down, so c is an upper bound)
        return head + (c + Fraction(1, _GRID) * 4) / levels
    return max(
        sum((plan.epsilon_jr(j, s) for j in range(1, s + 1)), Fraction(0)) for s in range(1, levels)
    )
