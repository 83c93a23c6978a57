"""`--mechanism auto`: a choice from public quantities that changes nothing but the name."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from dpsynth_cli.mechanisms import select
from dpsynth_cli.privacy import noise
from dpsynth_cli.privacy.ledger import Ledger


def test_choice_depends_on_eps_times_noisy_rows_per_unit_of_sensitivity(monkeypatch):
    monkeypatch.setattr(select, "PRIVTREE_FROM", {2: 1000.0})
    monkeypatch.setattr(select, "PRIVTREE_FROM_DEFAULT", float("inf"))
    assert select.choose(2, Fraction(1), 999, "add-remove") == "hierarchy"
    assert select.choose(2, Fraction(1), 1000, "add-remove") == "privtree"
    assert select.choose(2, Fraction(1, 2), 2000, "add-remove") == "privtree"
    assert select.choose(2, Fraction(1), 1000, "replace") == "hierarchy"  # sensitivity 2
    assert select.choose(2, Fraction(1), 2000, "replace") == "privtree"
    assert select.choose(3, Fraction(10), 10**9, "add-remove") == "hierarchy"
    assert select.choose(2, Fraction(1), -5, "add-remove") == "hierarchy"  # noisy counts can be < 0
    assert "; d=2: privtree when eps*noisy_rows/sensitivity >= 1000" in select.rule_text()
    # Level columns (public, from the schema): privtree, which splits them first, while each
    # column's share of eps n is below MARGINALS_SIGNAL (90) or the table has fewer than four
    # columns (privtree keeps the whole joint there); marginals from there on.
    assert select.choose(2, Fraction(1), 180, "add-remove", levels=True) == "privtree"
    assert select.choose(3, Fraction(10), 10**9, "add-remove", levels=True) == "privtree"
    assert select.choose(4, Fraction(1), 359, "add-remove", levels=True) == "privtree"
    assert select.choose(4, Fraction(1), 360, "add-remove", levels=True) == "marginals"
    assert select.choose(5, Fraction(1, 10), 10, "replace", levels=True) == "privtree"
    assert select.choose(5, Fraction(1), 900, "replace", levels=True) == "marginals"
    assert select.choose(5, Fraction(1), 899, "replace", levels=True) == "privtree"
    # Four columns or more, numbers only: marginals with enough signal, up to its column limit.
    assert select.choose(4, Fraction(10), 10**9, "add-remove") == "marginals"
    assert select.choose(3, Fraction(10), 10**9, "add-remove") == "hierarchy"
    assert select.choose(101, Fraction(10), 10**9, "add-remove") == "hierarchy"
    # hidden missing flags are no columns: 5 cube columns, 4 table columns
    assert select.choose(5, Fraction(1), 360, "add-remove", True, columns=4) == "marginals"
    assert select.choose(5, Fraction(1), 359, "add-remove", True, columns=4) == "privtree"
    assert select.rule_text().startswith("marginals with 4 to 100 columns")
    # From MARGINALS_WIDE (12) columns on: marginals from a signal of 8 a column.
    assert select.choose(11, Fraction(1), 500, "add-remove", levels=True) == "privtree"
    assert select.choose(12, Fraction(1), 500, "add-remove", levels=True) == "marginals"
    assert select.choose(12, Fraction(1), 96, "add-remove", levels=True) == "marginals"
    assert select.choose(12, Fraction(1), 95, "add-remove", levels=True) == "privtree"
    assert select.choose(31, Fraction(1, 2), 496, "add-remove") == "marginals"
    assert select.choose(20, Fraction(1), 50, "add-remove") != "marginals"
    assert select.choose(101, Fraction(1), 500, "add-remove") == "hierarchy"
    assert ">= 8 from 12 columns on" in select.rule_text()
    assert "marginals from a noisy count of 248 rows" in select.planned(
        31, Fraction(1), "add-remove", False, 31
    )


def force(monkeypatch, name: str) -> None:
    """Make `choose` pick `name` for any table of two or more columns."""
    marginals = name == "marginals"
    monkeypatch.setattr(select, "MARGINALS_FROM_COLUMNS", 2)
    monkeypatch.setattr(select, "MARGINALS_SIGNAL", 0.0 if marginals else float("inf"))
    monkeypatch.setattr(select, "MARGINALS_WIDE", 10**9)
    threshold = 0.0 if name == "privtree" else 1e18
    monkeypatch.setattr(select, "PRIVTREE_FROM", {2: threshold})
    monkeypatch.setattr(select, "PRIVTREE_FROM_DEFAULT", threshold)


@pytest.mark.parametrize("name", sorted(select.CANDIDATES))
def test_auto_output_and_spends_are_the_chosen_mechanisms(monkeypatch, name):
    force(monkeypatch, name)
    X = np.random.default_rng(0).beta(2, 5, (1500, 2))
    runs = []
    for mechanism in (select.run, select.CANDIDATES[name]):
        src, ledger = noise.RandomSource.seeded(4), Ledger(Fraction(1), "add-remove")
        out = mechanism(
            X,
            epsilon=Fraction(1),
            noisy_rows=1500,
            relation="add-remove",
            source=src.spawn("m"),
            ledger=ledger,
            rng=src.spawn("post").numpy_generator(),
            rows=None,
        )
        runs.append((out, [s.to_json("add-remove") for s in ledger.spends]))
    (auto, auto_spends), (direct, direct_spends) = runs
    assert np.array_equal(auto.points, direct.points)
    assert auto_spends == direct_spends
    assert auto.description["selected_by"]["chosen"] == name
    assert {k: v for k, v in auto.description.items() if k != "selected_by"} == direct.description
    assert auto.w1_bound == direct.w1_bound and auto.guarantee == direct.guarantee


@pytest.mark.parametrize("name", sorted(select.CANDIDATES))
def test_auto_in_high_dimensions_is_the_chosen_mechanism(monkeypatch, name):
    """d = 40 (past the old 32-column crash of hierarchy): auto still runs exactly the chosen
    mechanism, and the output has the d columns."""
    d = 40
    force(monkeypatch, name)
    X = np.random.default_rng(1).random((800, d))
    runs = []
    for mechanism in (select.run, select.CANDIDATES[name]):
        src, ledger = noise.RandomSource.seeded(5), Ledger(Fraction(1), "add-remove")
        runs.append(
            mechanism(
                X,
                epsilon=Fraction(1),
                noisy_rows=800,
                relation="add-remove",
                source=src.spawn("m"),
                ledger=ledger,
                rng=src.spawn("post").numpy_generator(),
                rows=None,
            )
        )
    auto, direct = runs
    assert auto.description["selected_by"]["chosen"] == name
    assert np.array_equal(auto.points, direct.points) and auto.points.shape[1] == d
    assert abs(auto.points.shape[0] - 800) < 200


def test_psmm_was_measured_and_is_never_chosen():
    """Issue 12: PSMM is behind auto's choice in the accuracy benchmark (select.py docstring);
    the rule in the report names it."""
    assert "never psmm" in select.rule_text()
    for d in (1, 2, 3, 8):
        for noisy in (-3, 0, 10, 400, 10**4, 10**8):
            assert select.choose(d, Fraction(1), noisy, "add-remove") in select.CANDIDATES
    assert "psmm" not in select.CANDIDATES
