"""The public report is a function of public parameters and released (noisy) values only."""

from __future__ import annotations

import json
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest

from dpsynth_cli.cli import app
from dpsynth_cli.mechanisms import hierarchy, partition, pmm, select
from dpsynth_cli.privacy import noise

BOUNDS = ["--bounds", "a=0:10", "--bounds", "b=-1:1"]


def run(runner, path, out, *extra):
    result = runner.invoke(
        app, ["synth", str(path), "--eps", "1", *BOUNDS, "-o", str(out), "--seed", "9", *extra]
    )
    assert result.exit_code == 0, result.output
    return json.loads(out.with_name(out.name + ".report.json").read_text())


def fixed_release(monkeypatch, mechanism: str) -> None:
    """Make the mechanism's released noisy values a fixed function of public quantities."""
    if mechanism == "pmm":

        def fixed_tree(noisy, _rng):
            depth = len(noisy) - 1
            return partition.level_counts(np.arange(1 << depth) % 3, depth)

        monkeypatch.setattr(pmm, "make_consistent", fixed_tree)
        return
    real = hierarchy.noisy_level_counts

    def fixed_levels(X, hp, source, ledger):  # spends as usual, then releases fixed counts
        counts = real(X, hp, source, ledger)
        return [np.arange(c.size).reshape(c.shape) % 4 for c in counts]

    monkeypatch.setattr(hierarchy, "noisy_level_counts", fixed_levels)


SECOND_TABLES = {  # the first table's partner: another table, or a neighbour (one row added)
    "other table": lambda first, rng: pd.DataFrame(
        {"a": rng.integers(5, 8, 800), "b": -rng.random(800)}
    ),
    "plus a fraction in an integer column": lambda first, rng: pd.concat(
        [first, pd.DataFrame({"a": [5.5], "b": [0.5]})]
    ),
    "plus a text cell": lambda first, rng: pd.concat(
        [first.astype({"a": object}), pd.DataFrame({"a": ["abc"], "b": [0.5]})]
    ),
}


@pytest.mark.parametrize("second_table", SECOND_TABLES)
@pytest.mark.parametrize("mechanism", ["pmm", "hierarchy"])
def test_two_datasets_with_equal_released_values_give_equal_outputs(
    runner, tmp_path, monkeypatch, mechanism, second_table
):
    """Force the released noisy values to coincide; then nothing else may tell the inputs apart."""
    rng = np.random.default_rng(0)
    first = pd.DataFrame({"a": rng.integers(0, 11, 500), "b": rng.random(500)})
    second = SECOND_TABLES[second_table](first, rng)
    true_rows = {}

    def count_noise(source, scale, size):  # the count, then the rows dropped at a and at b
        if size == 1:
            return np.array([777 - true_rows["n"]])
        return 3 - np.array(true_rows["dropped"])

    monkeypatch.setattr(noise, "discrete_laplace", count_noise)
    fixed_release(monkeypatch, mechanism)
    reports, outputs = [], []
    for name, frame in (("first", first), ("second", second)):
        path, out = tmp_path / f"{name}.csv", tmp_path / f"{name}.synth.csv"
        frame.to_csv(path, index=False)
        numbers = frame.apply(pd.to_numeric, errors="coerce")
        true_rows["n"] = len(numbers.dropna())
        at_a = numbers["a"].isna()
        true_rows["dropped"] = [int(at_a.sum()), int((numbers["b"].isna() & ~at_a).sum())]
        report = run(runner, path, out, "--mechanism", mechanism)
        del report["command"], report["output"]["path"]
        reports.append(report)
        outputs.append(out.read_bytes())
    assert reports[0] == reports[1]
    assert outputs[0] == outputs[1]


def released_table(tmp_path):
    rng = np.random.default_rng(1)
    path, out = tmp_path / "in.csv", tmp_path / "out.csv"
    pd.DataFrame({"a": rng.integers(0, 11, 3000), "b": rng.random(3000)}).to_csv(path, index=False)
    return path, out


def test_report_fields_follow_from_released_values(runner, tmp_path):
    path, out = released_table(tmp_path)
    report = run(runner, path, out, "--mechanism", "pmm")
    entries = {e["step"]: e for e in report["ledger"]["entries"]}
    noisy_rows = entries["count"]["released"]["noisy_rows"]
    eps_pmm = Fraction(entries["pmm"]["epsilon_exact"])
    plan = pmm.plan(noisy_rows, eps_pmm, 2, "add-remove")
    assert report["mechanism"]["depth"] == plan.depth
    assert report["mechanism"]["level_noise_scales"] == [float(s) for s in plan.level_scales]
    assert report["accuracy"]["w1_bound_unit_cube"] == pmm.theorem_bound(plan, noisy_rows)
    assert report["accuracy"]["evaluated_at_rows"] == noisy_rows
    assert report["output"]["rows"] == len(pd.read_csv(out))
    assert sum(Fraction(e["epsilon_exact"]) for e in entries.values()) <= 1
    assert 3000 not in _numbers(report)  # the true row count appears nowhere


def test_auto_choice_and_plan_follow_from_released_values(runner, tmp_path):
    path, out = released_table(tmp_path)
    report = run(runner, path, out)
    entries = {e["step"]: e for e in report["ledger"]["entries"]}
    noisy_rows = entries["count"]["released"]["noisy_rows"]
    chosen = report["mechanism"]["selected_by"]["chosen"]
    eps = sum(Fraction(e["epsilon_exact"]) for k, e in entries.items() if k.startswith(chosen))
    assert chosen == select.choose(2, eps, noisy_rows, "add-remove")
    described = {k: v for k, v in report["mechanism"].items() if k != "selected_by"}
    if chosen == "hierarchy":
        assert described == hierarchy.plan(noisy_rows, eps, 2, "add-remove").to_json()
    else:
        assert described["name"] == "privtree"
    assert "w1_bound_unit_cube" not in report["accuracy"]  # no a-priori bound is claimed
    assert 3000 not in _numbers(report)


def _numbers(obj) -> list:
    if isinstance(obj, dict):
        return [x for v in obj.values() for x in _numbers(v)]
    if isinstance(obj, list):
        return [x for v in obj for x in _numbers(v)]
    return [obj] if isinstance(obj, int | float) and not isinstance(obj, bool) else []
