"""The marginals mechanism's one-way release in two stages: a number's runs, then its heavy runs
split finer (issue 37, "grids for skewed counts and piled-up values").

Why. One flat grid of 2^b runs (`Attribute.with_size`, the 1-D balance of `hierarchy`) fits a smooth
column, but a count column with most of its mass on 0 (doctor visits on [0, 100]) or a reading piled
on one value (visibility at its 10-mile cap) puts that mass evenly over the run around it: a W1
error of about half a run's width times the pile's share, the largest per-column errors of the small
wide tables in docs/benchmarks.md. A finer flat grid lets noise through in the empty tail. So the
release adapts: first the runs, then every run's fine cells (REFINE of them, or its codes), which
reshape a run only where they show it uneven beyond their noise. On NMES1988 (4,406 rows, 19
columns, eps 1) the count columns' W1 fell from 0.02-0.04 to 0.003-0.009 and the mean 2-way TVD from
0.17 to 0.08 (docs/benchmarks.md, "Small wide tables and piled-up values").

Privacy. Neighbouring relation add/remove one row (default; replace one row: sensitivity 2,
`histogram_sensitivity`). An attribute's first stage is its histogram on the runs (and the missing
value) and its second stage its histogram on the fine cells (a missing row is in none): each a
partition, so each has L1 sensitivity sens. With the attribute's one-way epsilon eps_a = eps_1 / D
split as (1 - SECOND) eps_a and SECOND eps_a, the two histograms get discrete Laplace scales b / (1
- SECOND) and b / SECOND, b = sens / eps_a the one-stage scale (each rounded up, `as_scale`), and
compose to at most eps_a; the D attributes to eps_1, as the one-stage release. The second stage
measures every fine cell whatever the first stage shows, so which runs are split, and how, is
post-processing of released counts (`consistent`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from fractions import Fraction

import numpy as np

from dpsynth_cli.mechanisms import hierarchy
from dpsynth_cli.mechanisms.attributes import Attribute
from dpsynth_cli.mechanisms.base import discrete_laplace_variance
from dpsynth_cli.privacy import noise

REFINE = 8  # fine cells per run (a power of two), or a run's codes when they are fewer
SECOND = Fraction(1, 3)  # an attribute's one-way epsilon spent on its fine cells
# Two stages from this many runs on (eps n / (sens D) >= 82 or so): below it the runs' own noise
# is the larger error, and a third more of it pruned real runs (ISLR's College, 777 rows, 18
# columns, eps 1: a percentage column's mass piled into one run, W1 0.044 -> 0.099).
FROM_RUNS = 16
# A run is split where one of its fine cells is further from an even share than about PHANTOM
# runs of pure noise would be (`tail_kappa`).
PHANTOM = 0.1


def refinable(a: Attribute) -> bool:
    """A number (not a date-time part: those have their own grids) with atoms finer than its
    runs, and at least FROM_RUNS runs (a public function of its signal, `with_size`)."""
    return a.numeric and a.part is None and a.atoms > a.size >= FROM_RUNS


def refined(a: Attribute) -> Attribute:
    """The attribute with its values the fine cells and its first stage the runs (`first`)."""
    if not refinable(a):
        return a
    fine = a.size * REFINE
    return replace(a, size=a.atoms if fine >= a.atoms else fine, first=a.size)


def tail_kappa(scale: Fraction, cells: int) -> float:
    """Deviations t / sd with P(|Z| >= t) = e^(-t / scale) (about: discrete Laplace) equal to
    PHANTOM / cells: a level that about PHANTOM of `cells` noise draws exceed (union bound)."""
    b = float(scale)
    return b * math.log(max(cells, 1) / PHANTOM) / math.sqrt(discrete_laplace_variance(scale))


@dataclass(frozen=True)
class Scales:
    """The discrete Laplace scales of one attribute's stages (second None: one stage)."""

    first: Fraction
    second: Fraction | None

    @classmethod
    def of(cls, a: Attribute, scale: Fraction) -> Scales:
        """`scale`: the one-stage scale sens / eps_a; split, (1 - SECOND) and SECOND of eps_a."""
        if not a.first:
            return cls(scale, None)
        return cls(noise.as_scale(scale / (1 - SECOND)), noise.as_scale(scale / SECOND))


def stages(a: Attribute, counts: np.ndarray) -> list[np.ndarray]:
    """The attribute's histograms from its counts per value (and missing): on its runs (and
    missing), then, refined, on its fine values."""
    if not a.first:
        return [counts]
    runs = np.bincount(a.value_first(), weights=counts, minlength=a.first + a.missing)
    return [runs.astype(np.int64), counts[: a.size]]


def cells(a: Attribute, value: int) -> list[int]:
    """The cell of each of `stages` that a row of this value (a.size: missing) is counted in;
    none in the fine stage for a missing row."""
    first = int(a.value_first()[value])
    return [first, value] if a.first and value < a.size else [first]


@dataclass(frozen=True)
class Release:
    """One attribute's noisy one-way histograms: on its runs (plus missing) and, when refined,
    on its fine values (no missing)."""

    attribute: Attribute
    scales: Scales
    first: np.ndarray
    second: np.ndarray | None

    @property
    def histograms(self) -> list[np.ndarray]:
        """The noisy histograms, in the order of `stages`."""
        return [self.first] if self.second is None else [self.first, self.second]

    def consistent(self, kappa: float, rng: np.random.Generator) -> np.ndarray:
        """Counts per value (and missing), non-negative, summing to the noisy total: the runs
        pruned and made integer (`hierarchy.consistent_leaf_counts`); then a run's fine cells
        their least-squares counts under its total, clipped at 0, where one of them is further
        from an even share than about PHANTOM of pure-noise runs would be (`tail_kappa`);
        evenly otherwise."""
        v1 = discrete_laplace_variance(self.scales.first)
        a = self.attribute
        runs = hierarchy.consistent_leaf_counts(
            [self.first.astype(np.float64)], [v1], [self.first.size], kappa, rng
        ).astype(np.float64)
        if self.second is None:
            return runs
        run = a.value_first()[: a.size]
        width = np.bincount(run, minlength=a.first).astype(np.float64)
        fine = self.second.astype(np.float64)
        # least squares under the run's released total, then the run's deviation from even
        given = runs[: a.first]
        fitted = fine + ((given - np.bincount(run, weights=fine, minlength=a.first)) / width)[run]
        even = (given / width)[run]
        sd = math.sqrt(discrete_laplace_variance(self.scales.second))
        limit = tail_kappa(self.scales.second, REFINE) * sd
        uneven = np.zeros(a.first, dtype=bool)
        np.logical_or.at(uneven, run, np.abs(fitted - even) >= limit)
        weights = np.maximum(fitted, 0.0)
        mass = np.bincount(run, weights=weights, minlength=a.first)
        split = uneven & (mass > 0)
        share = np.where(split[run], weights / np.where(mass > 0, mass, 1.0)[run], 1 / width[run])
        values = given[run] * share
        return np.append(values, runs[a.first :])  # the missing value's count, if any

    def for_mix(self, counts: np.ndarray) -> tuple[np.ndarray, float]:
        """What the least-squares mix of one-way and two-way marginals takes for this attribute
        (`pairs.combined_marginals`), per value: the noisy histogram and one cell's noise
        variance; refined, the consistent counts with the runs' variance spread over their
        values (an approximation of a post-processed estimate)."""
        v1 = discrete_laplace_variance(self.scales.first)
        if self.second is None:
            return self.first.astype(np.float64), v1
        return counts, v1 * self.attribute.first / self.attribute.size


def measure(
    exact: list[np.ndarray],
    attrs: tuple[Attribute, ...],
    scales: list[Scales],
    source: noise.RandomSource,
) -> list[Release]:
    """Every attribute's histograms (`stages` of its exact counts per value and missing) plus
    noise: the first stages in one batch from `source`, then the fine ones in a second."""
    first, fine = [], []
    for a, c in zip(attrs, exact, strict=True):
        h = stages(a, c)
        first.append(h[0])
        fine.append(h[1] if len(h) > 1 else None)
    noisy = _noisy(first, [s.first for s in scales], source)
    refined_at = [i for i, f in enumerate(fine) if f is not None]
    more = dict(
        zip(
            refined_at,
            _noisy(
                [fine[i] for i in refined_at],
                [scales[i].second for i in refined_at],
                source,
            ),
            strict=True,
        )
    )
    return [
        Release(a, s, h, more.get(i))
        for i, (a, s, h) in enumerate(zip(attrs, scales, noisy, strict=True))
    ]


def _noisy(
    arrays: list[np.ndarray], scales: list[Fraction | None], source: noise.RandomSource
) -> list[np.ndarray]:
    """Each array plus discrete Laplace noise of its scale, drawn in one batch, in order."""
    if not arrays:
        return []
    sizes = [a.size for a in arrays]
    draws = noise.discrete_laplace_mixed(source, scales, sizes)
    ends = np.cumsum(sizes)[:-1]
    return [a + z for a, z in zip(arrays, np.split(draws, ends), strict=True)]
