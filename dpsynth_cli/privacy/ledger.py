"""The privacy ledger: every spend of a run, composed, and never more than the budget.

Epsilons are exact `Fraction`s so that "the run spent at most --eps" is checked without rounding:
a budget given as a float is taken at its exact binary value and every share is rounded down.
Composition is basic sequential composition (epsilons and deltas add), which is what every step of
a dpsynth run needs: each step reads the same rows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from dpsynth_cli.errors import PrivacyRefusal, UsageError

RELATIONS = {
    "add-remove": "add or remove one row",
    "replace": "replace one row (= remove one row then add one row)",
}

# Shares are rounded down to this dyadic grid so noise scales stay small exact fractions.
EPS_GRID = 2**20


def round_down(eps: float | Fraction) -> Fraction:
    """Largest multiple of 2^-20 not above `eps`: spending less than asked is always safe."""
    return Fraction(math.floor(Fraction(eps) * EPS_GRID), EPS_GRID)


def check_epsilon(eps: float, flag: str = "--eps") -> Fraction:
    """Validate a user-supplied epsilon and return it as an exact fraction."""
    if not math.isfinite(eps) or eps <= 0:
        raise UsageError(f"{flag} must be a positive finite number")
    exact = round_down(eps)
    if exact == 0:
        raise UsageError(f"{flag} is too small (below 2^-20)")
    return exact


def histogram_sensitivity(relation: str) -> int:
    """L1 sensitivity of a histogram (or of one level of a partition) under `relation`.

    Add/remove one row changes one count by 1; replacing a row moves it between two cells, so
    two counts change by 1 each.
    """
    return 1 if relation == "add-remove" else 2


@dataclass(frozen=True)
class Spend:
    """One privacy spend: what was released, by which mechanism, at what cost."""

    step: str
    mechanism: str
    epsilon: Fraction
    sensitivity: float
    noise: dict[str, Any]
    delta: float = 0.0
    released: dict[str, Any] = field(default_factory=dict)

    def to_json(self, relation: str) -> dict[str, Any]:
        return {
            "step": self.step,
            "mechanism": self.mechanism,
            "epsilon": float(self.epsilon),
            "epsilon_exact": str(self.epsilon),
            "delta": self.delta,
            "sensitivity": self.sensitivity,
            "neighbouring_relation": relation,
            "noise": self.noise,
            "released": self.released,
        }


class Ledger:
    """Records spends and refuses any that would take the run over its budget."""

    def __init__(self, budget: Fraction, relation: str = "add-remove") -> None:
        if relation not in RELATIONS:
            raise UsageError(f"--neighboring must be one of {', '.join(RELATIONS)}")
        self.budget = Fraction(budget)
        self.relation = relation
        self.spends: list[Spend] = []

    @property
    def spent(self) -> Fraction:
        return sum((s.epsilon for s in self.spends), Fraction(0))

    @property
    def remaining(self) -> Fraction:
        return self.budget - self.spent

    def record(self, spend: Spend) -> Spend:
        if spend.epsilon <= 0:
            raise ValueError(f"spend {spend.step!r} has non-positive epsilon")
        if self.spent + spend.epsilon > self.budget:
            raise PrivacyRefusal(
                f"step '{spend.step}' would spend epsilon beyond the budget of {float(self.budget)}"
            )
        self.spends.append(spend)
        return spend

    def to_json(self) -> dict[str, Any]:
        return {
            "composition": "basic sequential composition (epsilons and deltas add)",
            "neighbouring_relation": self.relation,
            "neighbouring_relation_meaning": RELATIONS[self.relation],
            "budget_epsilon": float(self.budget),
            "total_epsilon": float(self.spent),
            "total_epsilon_exact": str(self.spent),
            "total_delta": sum(s.delta for s in self.spends),
            "entries": [s.to_json(self.relation) for s in self.spends],
        }
