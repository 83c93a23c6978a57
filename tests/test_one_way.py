"""The marginals mechanism's two-stage one-way release (mechanisms/one_way): its grids nest, its
scales compose to the attribute's share, its consistent counts keep a pile-up and leave an even
run even, and a privacy audit with the mutant that forgets to split the share."""

from __future__ import annotations

import math
import time
from dataclasses import replace
from fractions import Fraction

import numpy as np
import pytest

from dpsynth_cli.engine.rows import as_rows
from dpsynth_cli.mechanisms import one_way, pairs
from dpsynth_cli.mechanisms.attributes import ATOMS, Attribute
from dpsynth_cli.privacy import noise
from dpsynth_cli.privacy.ledger import Ledger
from tests.audit import audit
from tests.test_pairs import one_way_audit_samples
from tests.test_privacy_audits import report


@pytest.mark.parametrize(
    ("kind", "atoms", "size"), [("code", 101, 16), ("code", 21, 16), ("cell", ATOMS, 32)]
)
def test_refined_values_nest_in_the_runs(kind, atoms, size):
    """Every atom's fine value lies in the run the one-stage release would put it in."""
    plain = Attribute(0, kind, atoms, size)
    fine = one_way.refined(plain)
    assert fine.first == size and fine.size == min(atoms, size * one_way.REFINE)
    assert np.array_equal(fine.value_first()[fine.atom_value()], plain.atom_value())


def test_levels_fine_grids_and_coarse_runs_stay_one_stage():
    assert one_way.refined(Attribute(0, "level", 40, 40)).first == 0
    assert one_way.refined(Attribute(0, "code", 16, 16)).first == 0
    assert one_way.refined(Attribute(0, "cell", ATOMS, one_way.FROM_RUNS // 2)).first == 0


@pytest.mark.parametrize("scale", [Fraction(3), Fraction(47, 2), Fraction(1, 7)])
def test_two_stages_compose_to_the_one_stage_share(scale):
    s = one_way.Scales.of(one_way.refined(Attribute(0, "code", 101, 16)), scale)
    assert 1 / s.first + 1 / s.second <= 1 / scale  # (rational arithmetic: exact)
    assert 1 / s.first + 1 / s.second > Fraction(99, 100) / scale  # nothing wasted


def release(first: np.ndarray, second: np.ndarray, scale: Fraction) -> one_way.Release:
    a = one_way.refined(Attribute(0, "code", 101, 16))
    return one_way.Release(a, one_way.Scales.of(a, scale), first, second)


def test_a_pile_up_is_kept_and_an_even_run_stays_even():
    """Counts on 101 codes: 3,000 rows on code 0 and 60 on each of codes 1-99 (runs of 6-7
    codes); released without noise (scale small). The first run keeps its pile on code 0; the
    others, even, stay even; the total is kept."""
    counts = np.append(np.r_[3000, np.full(99, 60), 0], 0)[:101]
    a = one_way.refined(Attribute(0, "code", 101, 16))
    first, fine = one_way.stages(a, counts)
    out = release(first, fine, Fraction(1, 64)).consistent(2.0, np.random.default_rng(0))
    assert out.sum() == pytest.approx(counts.sum())
    assert out[0] == pytest.approx(3000, abs=1)
    run = a.value_first()[: a.size]
    for r in range(1, 15):
        inside = out[run == r]
        assert np.allclose(inside, inside.mean())


def test_noise_alone_does_not_split_a_run():
    """An even column (200 rows a code) under second-stage noise: at most about PHANTOM of
    its runs are split (the rule's union bound; 640 runs: 3 binomial deviations of slack)."""
    a = one_way.refined(Attribute(0, "code", 128, 16))
    counts = np.full(128, 200)
    scales = one_way.Scales.of(a, Fraction(4))
    split = 0
    src = noise.RandomSource.seeded(5)
    for _ in range(40):
        (r,) = one_way.measure([counts], (a,), [scales], src)
        out = r.consistent(2.0, np.random.default_rng(1))
        inside = out.reshape(16, 8)
        split += int(np.sum(np.ptp(inside, axis=1) > 1e-9))
    rate = one_way.PHANTOM
    assert split / (40 * 16) <= rate + 3 * math.sqrt(rate / (40 * 16))


# -- audit ------------------------------------------------------------------------------------

AUDIT_EPS = Fraction(6)
AUDIT_RUNS = 4000  # a side: the mutant lands near 5.5 (of 3.6), the correct near 3.2


def audit_rows():
    """X: 40 rows of two integers of 64 codes each; X' = X plus one row; with a public noisy
    count of 100 the runs are 16 a column, refined to the 64 codes."""
    rng = np.random.default_rng(4)
    X = (rng.integers(0, 64, (40, 2)) + 0.5) / 64
    added = np.array([[62.5 / 64, 0.5 / 64]])
    rows = replace(as_rows(X), codes=(64, 64))
    return rows, replace(rows, source=type(rows.source)(np.vstack([X, added]))), added


def forget_the_split(mp: pytest.MonkeyPatch) -> None:
    """Mutant: the fine stage noised for the attribute's whole share, as if it were alone."""
    real = one_way.Scales.of

    def of(a, scale):
        s = real(a, scale)
        return replace(s, second=scale) if s.second is not None else s

    mp.setattr(one_way.Scales, "of", staticmethod(of))


@pytest.mark.heavy
@pytest.mark.parametrize("variant", ["correct", "fine stage unsplit"])
def test_two_stage_one_way_audit(variant, monkeypatch):
    """The two-stage release of two numbers stays within the one-way share (with power: above
    0.6 of it); noising the fine stage for the whole share (5/3 of it) exceeds it."""
    if variant != "correct":
        forget_the_split(monkeypatch)
    begin = time.perf_counter()
    rows, plus, added = audit_rows()
    plan = pairs.plan(AUDIT_EPS, 100, rows, "add-remove")
    attrs = plan.attributes
    assert [(a.first, a.size) for a in attrs] == [(16, 64), (16, 64)]
    value = [int(a.atom_value()[a.encode(added)[0]]) for a in attrs]

    sides = one_way_audit_samples(plan, rows, plus, value, f"one_way/{variant}", AUDIT_RUNS)
    result = audit(sides[0], sides[1], names=["one-way excess"])
    share = float(plan.one_way)
    report(f"two-stage one-way eps={share:.2f} {variant}", result, time.perf_counter() - begin)
    if variant == "correct":
        result.assert_within(plan.one_way)
        assert result.epsilon_lower > 0.6 * share
    else:
        result.assert_exceeds(plan.one_way)
    assert math.isfinite(share)


def test_spends_sum_to_epsilon_with_two_stages():
    rows, _, _ = audit_rows()
    for eps, noisy in ((Fraction(1, 2), 1000), (Fraction(1), 500), (Fraction(7, 3), 250)):
        mp = pairs.plan(eps, noisy, rows, "add-remove")
        assert all(a.first for a in mp.attributes)
        ledger = Ledger(eps)
        zeros = [np.zeros(a.values, dtype=np.int64) for a in mp.attributes]
        pairs.measure_one_way(zeros, mp, noise.RandomSource.seeded(1), ledger)
        pairs.record_spends(mp, ledger)
        assert sum(s.epsilon for s in ledger.spends) == eps
