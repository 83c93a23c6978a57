"""The release conditioned on declared constraints (issue 23), by rejection: post-processing.

A mechanism's `Output` places its released measure mu as points. With constraints
(`Rules`), each batch's points get their derived columns computed, and every point
that breaks a constraint as written is replaced, in its place in the batch's random row order,
by a fresh point of the whole release: a cell drawn with probability proportional to the
released sizes (`Output.sizes`), placed by the mechanism's own placement (for the marginals
mechanism, whose cells are chunks of alike rows, a fresh model row), kept if it satisfies the
constraints. The points kept from the batch are mu's restricted to the constraint set C and the
fresh ones are draws of mu conditioned on C, so the output's expected empirical measure is
(rows) mu|C. It reads only released values, declarations and the batch's own generator
(reproducible under --seed, whichever process places the batch): no privacy cost. If C holds for
too few of the model's rows (under MIN_ACCEPTANCE of the draws), the run stops with an error;
that depends on released values only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from dpsynth_cli.constraints import Constraint, evaluate
from dpsynth_cli.domain import DISCRETE, ColumnSpec, Domain
from dpsynth_cli.errors import DataError, UsageError
from dpsynth_cli.mechanisms.base import Output, Place

# Below this share of accepted draws a batch gives up (after at least SLACK draws beyond it).
MIN_ACCEPTANCE = 0.01
SLACK = 10_000
# Fresh candidates per round at most (bounded memory whatever the acceptance).
ROUND_ROWS = 1 << 18
SECONDS_PER_DAY = 86400.0


@dataclass(frozen=True)
class Rules:
    """Constraints bound to a `Domain`: derive and check rows given in the unit coordinates the
    release is placed in, judging each row by the values `Domain.from_unit` writes for it.
    Holds declarations and public bounds only (picklable: Dask workers apply it)."""

    domain: Domain
    constraints: tuple[Constraint, ...]

    @cached_property
    def _columns(self) -> dict[str, int]:
        """The constrained columns' indices in the domain (every one must be chosen)."""
        names = [c.name for c in self.domain.columns]
        used = dict.fromkeys(n for c in self.constraints for n in c.columns)
        for name in used:
            if name not in names:
                raise UsageError(f"constraint column '{name}' is not among the chosen columns")
        return {n: names.index(n) for n in used}

    @cached_property
    def _zones(self) -> dict[str, str]:
        """The declared time zone of each constrained zoned datetime column (calendar parts are
        read on its wall clock)."""
        specs = (self.domain.columns[j] for j in self._columns.values())
        return {s.name: s.timezone for s in specs if s.kind == "datetime" and s.timezone}

    def values(self, unit: np.ndarray) -> dict[str, np.ndarray]:
        """Each constrained column of the rows in constraint units, as written (NaN: missing)."""
        columns = self._columns
        codes = self.domain.written_codes(unit, list(columns.values()))
        out = {}
        for k, (name, j) in enumerate(columns.items()):
            kind = self.domain.columns[j].kind
            out[name] = codes[:, k] / SECONDS_PER_DAY if kind == "datetime" else codes[:, k]
        return out

    def apply(self, unit: np.ndarray) -> np.ndarray:
        """Derive the derived columns in place (in `unit`); return which rows satisfy every
        constraint as written (a derived value outside its bounds fails its row)."""
        values = self.values(unit)
        ok = np.ones(unit.shape[0], dtype=bool)
        derivations = [c for c in self.constraints if c.derives]
        for c in derivations:
            ok &= self._derive(c, values, unit)
        if derivations:
            values = self.values(unit)  # as written: what the checks judge
        for c in self.constraints:
            found = evaluate(c, values, self._zones)
            applies = ~np.isnan(found)
            if c.derives:
                target = values[c.target]
                good = np.isnan(target) | (target == self._rounded(c.target, found))
            elif c.op == "<":
                good = found < 0
            else:
                good = found <= 0
            ok &= ~applies | good
        return ok

    def _derive(self, c: Constraint, values: dict[str, np.ndarray], unit: np.ndarray):
        """Write the derived column's unit coordinate where the derivation applies and lands
        in bounds; return False for rows whose derived value is out of bounds."""
        j = self._columns[c.target]
        spec = self.domain.columns[j]
        found = self._rounded(c.target, evaluate(c, values, self._zones))
        applies = ~np.isnan(found) & ~np.isnan(values[c.target])
        lower, upper = _bounds(spec)
        inside = (found >= lower) & (found <= upper)
        write = applies & inside
        codes = found[write] * (SECONDS_PER_DAY if spec.kind == "datetime" else 1.0)
        unit[write, j] = self.domain.unit_of_codes(j, codes)
        return ~applies | inside

    def _rounded(self, name: str, found: np.ndarray) -> np.ndarray:
        """A derived value as its column is written (constraint units)."""
        spec = self.domain.columns[self._columns[name]]
        if spec.kind in DISCRETE:
            return np.floor(found + 0.5)
        if spec.kind == "datetime":
            return np.round(found * SECONDS_PER_DAY) / SECONDS_PER_DAY
        return np.round(found, self.domain.decimals()[name])


def _bounds(spec: ColumnSpec) -> tuple[float, float]:
    """A column's bounds in constraint units (whole codes for an integer or date)."""
    if spec.kind in DISCRETE:
        return float(math.ceil(spec.lower)), float(math.floor(spec.upper))
    if spec.kind == "datetime":
        return spec.lower / SECONDS_PER_DAY, spec.upper / SECONDS_PER_DAY
    return float(spec.lower), float(spec.upper)


@dataclass(frozen=True)
class Accepted:
    """A conditioned batch and how many candidate rows it took (released values only)."""

    points: np.ndarray
    drawn: int
    accepted: int


@dataclass(frozen=True)
class Conditioned:
    """A placement conditioned on `rules` by rejection (picklable: Dask workers place with it).
    `sizes` are the release's cell sizes, from which replacement rows are drawn."""

    place: Place
    sizes: np.ndarray
    rules: Rules

    @cached_property
    def _cumulative(self) -> np.ndarray:
        return np.cumsum(np.asarray(self.sizes, dtype=np.int64).ravel())

    def __call__(
        self, cells: np.ndarray, counts: np.ndarray, rng: np.random.Generator
    ) -> np.ndarray:
        return self.sample(cells, counts, rng).points

    def sample(self, cells: np.ndarray, counts: np.ndarray, rng: np.random.Generator) -> Accepted:
        """The batch's points with every breaking row replaced (see the module docstring)."""
        points = self.place(cells, counts, rng)
        ok = self.rules.apply(points)
        need = points.shape[0]
        holes = np.flatnonzero(~ok)
        drawn, accepted = need, need - holes.size
        while holes.size:
            if drawn >= need / MIN_ACCEPTANCE + SLACK:
                raise DataError(
                    "the declared constraints hold for too few rows of the released model "
                    f"({accepted} of {drawn} drawn, below {MIN_ACCEPTANCE:.0%}): check them "
                    "against the columns' bounds, or synthesise without them"
                )
            rate = max(accepted / drawn, MIN_ACCEPTANCE)
            m = min(math.ceil(1.2 * holes.size / rate) + 64, ROUND_ROWS)
            fresh = self.draw(m, rng)
            good = fresh[self.rules.apply(fresh)]
            take = min(good.shape[0], holes.size)
            points[holes[:take]] = good[:take]
            holes = holes[take:]
            drawn, accepted = drawn + m, accepted + good.shape[0]
        return Accepted(points, drawn, accepted)

    def draw(self, m: int, rng: np.random.Generator) -> np.ndarray:
        """m fresh points of the whole release: cells with probability proportional to their
        released sizes, placed (in random order) by the mechanism's placement."""
        total = int(self._cumulative[-1]) if self._cumulative.size else 0
        if total == 0:
            return self.place(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), rng)
        picks = np.searchsorted(self._cumulative, rng.integers(0, total, m), side="right")
        cells, counts = np.unique(picks, return_counts=True)
        return self.place(cells, counts, rng)


def conditioned(output: Output, rules: Rules) -> Output:
    """The same release, its points conditioned on the rules."""
    return Output(
        output.sizes, Conditioned(output.place, output.sizes, rules), output.rng, output.d
    )
