"""Algorithm 12 on the binary partition (online-replay): privacy audit of a whole small stream
with a mutant, resumable state (same law as one run; SIGKILL during the save), and accuracy."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from dataclasses import dataclass, replace
from fractions import Fraction
from functools import partial

import numpy as np
import pytest

from dpsynth_cli.domain import ColumnSpec
from dpsynth_cli.online import state as state_io
from dpsynth_cli.online.engine import OnlineEngine, apriori_bound
from dpsynth_cli.online.params import OnlinePlan
from dpsynth_cli.privacy.noise import RandomSource
from tests.audit import audit
from tests.test_online_counters import homogeneity_p

SEED = 20_261_124


def src(name: str) -> RandomSource:
    return RandomSource.seeded(SEED).spawn(name)


@dataclass(frozen=True)
class LowThresholdPlan(OnlinePlan):
    """The real plan (eps_{j,r} of (5.3), real noise) with segment threshold T0 = 1, so that
    segments close in a short stream (T0 is public and outside the privacy proof). The mutant
    removes the threshold and test noise."""

    mutant: bool = False

    def params(self, j, r):
        p = super().params(j, r)
        return replace(p, threshold=1, svt_scale=Fraction(1, 1000) if self.mutant else p.svt_scale)


def noisy_after(plan: OnlinePlan, X: np.ndarray, runs: int, source: RandomSource) -> np.ndarray:
    """(runs, regions) released noisy counts at time len(X), one replica per run."""
    eng = OnlineEngine(plan, replicas=runs)
    eng.use(source)
    eng.feed(X)
    levels = eng.noisy_counts()[1:]
    return np.hstack([lv.reshape(runs, -1) for lv in levels])


@dataclass(frozen=True)
class TunedPlan(OnlinePlan):
    """The default allocation ("tuned": all of eps_{j,r} on the level totals); the mutant removes
    the level-total noise."""

    mutant: bool = False

    def params(self, j, r):
        p = super().params(j, r)
        return replace(p, total_scale=Fraction(1, 1000)) if self.mutant else p


@pytest.mark.parametrize(
    "plan_class, allocation, moved, mutant_runs, label",
    [(LowThresholdPlan, "literal", 32, 1_500, ""), (TunedPlan, "tuned", 19, 1_000, "t")],
)
def test_whole_stream_audit_and_mutant(plan_class, allocation, moved, mutant_runs, label):
    """Neighbouring streams differ in one row moved across the square; released counts at t = 34
    of every region. Declared eps = 1 (replace). literal: the row at time 33 (T0 = 1, so that
    segments close), mutant without threshold noise. tuned (the default): the row at time 20
    (level 4, whose level totals are released from t = 32 on), mutant without level-total
    noise."""
    X = np.full((34, 2), 0.01)
    X2 = X.copy()
    X2[moved] = 0.99
    make = partial(plan_class, Fraction(1), 2, "replace", allocation)
    audit_with_mutant(lambda m: make(mutant=m), X, X2, mutant_runs, label, f"{allocation} stream")


def audit_with_mutant(make_plan, X, X2, mutant_runs: int, label: str, what: str) -> None:
    """Released counts after X and after its neighbour X2: the real plan within eps 1 (3000
    runs a side), `make_plan(True)` (the mutant) beyond it."""
    results = {}
    for mutant, runs in ((False, 3_000), (True, mutant_runs)):
        plan = make_plan(mutant)
        a = noisy_after(plan, X, runs, src(f"{label}a{mutant}"))
        b = noisy_after(plan, X2, runs, src(f"{label}b{mutant}"))
        results[mutant] = audit(a, b)
    print(
        f"\n[online] {what} audit: {results[False].summary()}\n  mutant: {results[True].summary()}"
    )
    results[False].assert_within(1.0)
    results[True].assert_exceeds(1.0)


SPECS = [ColumnSpec("x", "float", 0.0, 1.0), ColumnSpec("y", "float", 0.0, 1.0)]


def save_and_load(tmp_path, eng: OnlineEngine) -> OnlineEngine:
    d = str(tmp_path / "state")
    ident = state_io.identity(eng.plan, SPECS)
    with state_io.locked(d):
        state_io.save(d, eng, {"identity": ident})
        loaded, _ = state_io.load(d, eng.plan, ident)
    return loaded


@pytest.mark.parametrize("allocation", ["literal", "tuned"])
def test_resume_has_the_law_of_one_run(tmp_path, allocation):
    """30 rows, state saved and loaded (fresh randomness), 18 more rows, against 48 rows in one
    run: the same law of the released counts (low T0 so that segments are open across the cut)."""
    rng = np.random.default_rng(3)
    X = np.clip(0.3 + 0.1 * rng.standard_normal((48, 2)), 0, 1)
    plan = LowThresholdPlan(Fraction(1), 2, "replace", allocation)
    runs = 3000 if allocation == "tuned" else 1500
    one = noisy_after(plan, X, runs, src(f"one{allocation}"))
    eng = OnlineEngine(plan, replicas=runs)
    eng.use(src(f"first{allocation}"))
    eng.feed(X[:30])
    eng = save_and_load(tmp_path, eng)
    eng.use(src(f"second{allocation}"))
    eng.feed(X[30:])
    two = np.hstack([lv.reshape(runs, -1) for lv in eng.noisy_counts()[1:]])
    cols = [0, 1, 2, 5, 9, 20, 40, 60]
    pvals = [homogeneity_p(one[:, c], two[:, c]) for c in cols]
    print(f"\n[online] resume ({allocation}): min p over {len(cols)} regions {min(pvals):.3f}")
    assert min(pvals) > 1e-3


def test_sigkill_during_state_write_keeps_the_previous_state(tmp_path):
    d = tmp_path / "state"
    script = textwrap.dedent(
        f"""
        import os, signal, numpy as np
        from fractions import Fraction
        from dpsynth_cli.online import state as S
        from dpsynth_cli.online.engine import OnlineEngine
        from dpsynth_cli.online.params import OnlinePlan
        from dpsynth_cli.privacy.noise import RandomSource
        from dpsynth_cli.domain import ColumnSpec
        PLAN = OnlinePlan(Fraction(1), 2)
        SPECS = [ColumnSpec(c, "float", 0.0, 1.0) for c in "xy"]
        IDENT = S.identity(PLAN, SPECS)
        eng = OnlineEngine(PLAN); eng.use(RandomSource.seeded(1))
        eng.feed(np.random.default_rng(0).random((5000, 2)))
        with S.locked({str(d)!r}):
            S.save({str(d)!r}, eng, {{"identity": IDENT}})
            eng.feed(np.random.default_rng(1).random((5000, 2)))
            real = os.fsync
            def die(fd):
                os.kill(os.getpid(), signal.SIGKILL)
            os.fsync = die  # killed after writing the new state's bytes, before the rename
            S.save({str(d)!r}, eng, {{"identity": IDENT}})
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], cwd=os.getcwd())
    assert proc.returncode == -signal.SIGKILL
    assert any(n.endswith(".tmp") for n in os.listdir(d))  # the killed write's leftover
    plan = OnlinePlan(Fraction(1), 2)
    eng, meta = state_io.load(str(d), plan, state_io.identity(plan, SPECS))
    assert eng.t == 5000  # the previous state, intact and usable
    with state_io.locked(str(d)):
        pass
    assert not any(n.endswith(".tmp") for n in os.listdir(d))  # stale temp removed
    assert oct(os.stat(d / state_io.STATE_FILE).st_mode & 0o777) == "0o600"
    assert oct(os.stat(d).st_mode & 0o777) == "0o700"


def test_d1_uses_history_and_is_accurate():
    rng = np.random.default_rng(5)
    X = rng.beta(2, 5, (20_000, 1))
    for allocation in ("literal", "tuned"):
        eng = OnlineEngine(OnlinePlan(Fraction(1), 1, "replace", allocation))
        eng.use(src(f"d1{allocation}"))
        eng.feed(X)
        Y = eng.release(np.random.default_rng(0))
        assert Y.shape == (20_000, 1)
        w1 = abs(np.sort(X[:, 0]) - np.sort(Y[:, 0])).mean()
        assert w1 < 0.05, (allocation, w1)


def test_apriori_bound_decreases_and_is_public():
    plan = OnlinePlan(Fraction(1), 2, "replace", "tuned")
    b = [apriori_bound(plan, 2**k)["w1_bound_unit_cube"] for k in (10, 14, 18, 22)]
    assert b == sorted(b, reverse=True) and b[-1] < 1
