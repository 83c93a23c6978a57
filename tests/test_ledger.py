"""The ledger composes spends exactly and refuses to exceed the budget."""

from fractions import Fraction

import pytest

from dpsynth_cli.errors import PrivacyRefusal, UsageError
from dpsynth_cli.privacy.ledger import Ledger, Spend, check_epsilon, round_down


def spend(eps, step="s"):
    return Spend(step=step, mechanism="m", epsilon=Fraction(eps), sensitivity=1, noise={})


def test_spends_compose_and_refuse_overspend():
    ledger = Ledger(Fraction(1))
    ledger.record(spend(Fraction(1, 2)))
    ledger.record(spend(Fraction(1, 2)))
    assert ledger.spent == 1 and ledger.remaining == 0
    with pytest.raises(PrivacyRefusal):
        ledger.record(spend(Fraction(1, 2**20)))
    assert ledger.to_json()["total_epsilon"] == 1.0


def test_rounding_is_down_and_validation():
    assert round_down(0.1) <= Fraction(0.1)
    assert Fraction(0.1) - round_down(0.1) < Fraction(1, 2**20)
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(UsageError):
            check_epsilon(bad)


def test_unknown_relation_is_a_usage_error():
    with pytest.raises(UsageError):
        Ledger(Fraction(1), "swap")
