"""The privacy ledger: every spend of a run, composed, and never more than the budget.

Epsilons are exact `Fraction`s so that "the run spent at most --eps" is checked without rounding:
a budget given as a float is taken at its exact binary value and every share is rounded down.
Composition is basic sequential composition (epsilons and deltas add), which is what every step of
a dpsynth run needs: each step reads the same rows.

(eps, delta) runs (`pca`'s Gaussian methods) add zero-concentrated DP (zCDP) spends: a spend with
``rho > 0`` is rho-zCDP (``delta`` > 0 on it: delta-approximately rho-zCDP, Bun & Steinke 2016
Def. 8.1). The rule, written once for every subcommand (docs/privacy.md, "(eps, delta)"):

    rho   = sum of the zCDP spends' rho   (zCDP composes additively, adaptively; BS16 Lemma 2.3)
    delta = budget_delta                       (sum of the spends' own deltas + the conversion's)
    eps   = sum of the pure spends' epsilon + eps_rho,
    eps_rho = the smallest epsilon that rho-zCDP gives at delta_conv = budget_delta - sum(deltas)
              (Canonne, Kamath & Steinke 2020, Corollary 13), then basic composition of the pure
              part and the converted part.

A run with no zCDP spend and budget_delta = 0 is pure epsilon-DP and its report is unchanged.
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


# The largest epsilon a run accepts. Beyond it the guarantee says nothing (a likelihood ratio up
# to e^1000) and every noise scale is far below one count, so a larger one changes no release;
# near 10^4 exact noise scales underflow (hierarchy's least-squares weights divide by a zero
# variance) and online-replay's counters fire at every step (10x slower at 1000 than at 1).
MAX_EPSILON = 1000


def check_epsilon(eps: float, flag: str = "--eps") -> Fraction:
    """Validate a user-supplied epsilon and return it as an exact fraction."""
    if not math.isfinite(eps) or eps <= 0:
        raise UsageError(f"{flag} must be a positive finite number")
    if eps > MAX_EPSILON:
        raise UsageError(
            f"{flag} {eps:g} is above {MAX_EPSILON}: no privacy is left (a factor up to e^eps) "
            f"and the noise is already far below one count; use at most {MAX_EPSILON}"
        )
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
    rho: float = 0.0

    def to_json(self, relation: str) -> dict[str, Any]:
        out = {
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
        if self.rho > 0:
            out["rho"] = self.rho
            out["privacy"] = "rho-zCDP" + (" (delta-approximate)" if self.delta > 0 else "")
        return out


class Ledger:
    """Records spends and refuses any that would take the run over its budget."""

    def __init__(
        self, budget: Fraction, relation: str = "add-remove", budget_delta: float = 0.0
    ) -> None:
        if relation not in RELATIONS:
            raise UsageError(f"--neighboring must be one of {', '.join(RELATIONS)}")
        if not (0.0 <= budget_delta < 1.0):
            raise UsageError("--delta must be in [0, 1)")
        self.budget = Fraction(budget)
        self.relation = relation
        self.budget_delta = float(budget_delta)
        self.spends: list[Spend] = []

    @property
    def pure_spent(self) -> Fraction:
        return sum((s.epsilon for s in self.spends), Fraction(0))

    @property
    def rho(self) -> float:
        return math.fsum(s.rho for s in self.spends)

    @property
    def spent_delta(self) -> float:
        return math.fsum(s.delta for s in self.spends)

    @property
    def spent(self) -> Fraction:
        """Total epsilon: pure spends plus the converted zCDP part (module docstring)."""
        if self.rho == 0:
            return self.pure_spent
        eps_rho = zcdp_epsilon(self.rho, self.budget_delta - self.spent_delta)
        return self.pure_spent + Fraction(eps_rho)

    @property
    def remaining(self) -> Fraction:
        return self.budget - self.spent

    def record(self, spend: Spend) -> Spend:
        if spend.epsilon < 0 or spend.rho < 0 or spend.delta < 0:
            raise ValueError(f"spend {spend.step!r} has a negative privacy parameter")
        if spend.epsilon == 0 and spend.rho == 0:
            raise ValueError(f"spend {spend.step!r} has non-positive epsilon")
        if spend.rho > 0 and self.budget_delta == 0:
            raise PrivacyRefusal(f"step '{spend.step}' needs delta > 0 (a Gaussian step)")
        self.spends.append(spend)
        over_delta = self.spent_delta >= self.budget_delta and (
            self.rho > 0 or self.spent_delta > self.budget_delta
        )
        if over_delta or self.spent > self.budget:
            self.spends.pop()
            raise PrivacyRefusal(
                f"step '{spend.step}' would spend epsilon beyond the budget of {float(self.budget)}"
            )
        return spend

    def to_json(self) -> dict[str, Any]:
        out = {
            "composition": "basic sequential composition (epsilons and deltas add)",
            "neighbouring_relation": self.relation,
            "neighbouring_relation_meaning": RELATIONS[self.relation],
            "budget_epsilon": float(self.budget),
            "total_epsilon": float(self.spent),
            "total_epsilon_exact": str(self.spent),
            "total_delta": sum(s.delta for s in self.spends),
            "entries": [s.to_json(self.relation) for s in self.spends],
        }
        if self.budget_delta == 0 and self.rho == 0:
            return out  # pure epsilon-DP: byte-identical to the pure-epsilon ledger
        delta_conv = self.budget_delta - self.spent_delta
        out["composition"] = (
            "zCDP spends add their rho (Bun & Steinke 2016), converted once to (eps, delta) at "
            "delta_conv (Canonne, Kamath & Steinke 2020, Cor. 13); pure spends add their "
            "epsilon and approximate spends their delta (basic composition)"
        )
        out["budget_delta"] = self.budget_delta
        out["total_delta"] = self.budget_delta if self.rho > 0 else self.spent_delta
        out["total_rho"] = self.rho
        out["pure_epsilon"] = float(self.pure_spent)
        if self.rho > 0:
            out["zcdp_conversion"] = {
                "rho": self.rho,
                "delta_conv": delta_conv,
                "epsilon": zcdp_epsilon(self.rho, delta_conv),
            }
        return out


# -- zCDP <-> (eps, delta) --------------------------------------------------------------------

_SAFETY = 1e-9  # relative margin on float conversions, always in the safe direction


def _eps_at(rho: float, delta: float, alpha: float) -> float:
    """eps such that rho-zCDP gives (eps, delta)-DP through order alpha (CKS 2020, Cor. 13):
    delta = exp((alpha-1)(alpha rho - eps)) (1 - 1/alpha)^alpha / (alpha - 1), solved for eps."""
    lead = alpha * math.log1p(-1.0 / alpha) - math.log(alpha - 1.0) - math.log(delta)
    return alpha * rho + lead / (alpha - 1.0)


def zcdp_epsilon(rho: float, delta: float) -> float:
    """The smallest eps (searched over the order alpha) with rho-zCDP => (eps, delta)-DP.

    Every alpha > 1 gives a valid eps, so a search that misses the exact minimum only loses
    tightness, never validity. Also never above Bun & Steinke's rho + 2 sqrt(rho log(1/delta)).
    """
    if rho <= 0:
        return 0.0
    if not (0.0 < delta < 1.0):
        raise ValueError("delta must be in (0, 1) to convert zCDP")
    from scipy.optimize import minimize_scalar

    res = minimize_scalar(
        lambda la: _eps_at(rho, delta, 1.0 + math.exp(la)), bounds=(-20.0, 20.0), method="bounded"
    )
    best = _eps_at(rho, delta, 1.0 + math.exp(res.x))
    bs16 = rho + 2.0 * math.sqrt(rho * math.log(1.0 / delta))
    return max(0.0, min(best, bs16)) * (1.0 + _SAFETY)


def zcdp_delta(rho: float, eps: float) -> float:
    """The delta that rho-zCDP gives at eps (CKS 2020, Cor. 13), minimised over alpha."""
    from scipy.optimize import minimize_scalar

    def log_delta(la: float) -> float:
        a = 1.0 + math.exp(la)
        return (a - 1.0) * (a * rho - eps) + a * math.log1p(-1.0 / a) - math.log(a - 1.0)

    res = minimize_scalar(log_delta, bounds=(-20.0, 20.0), method="bounded")
    return min(1.0, math.exp(log_delta(res.x)) * (1.0 + _SAFETY))


def rho_for(eps: float, delta: float) -> float:
    """The largest rho (to 1e-12 relative, rounded down) with zcdp_epsilon(rho, delta) <= eps."""
    lo, hi = 0.0, max(eps, 1e-300)
    while zcdp_epsilon(hi, delta) <= eps:
        lo, hi = hi, 2 * hi
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if zcdp_epsilon(mid, delta) <= eps:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-12 * hi:
            break
    return lo
