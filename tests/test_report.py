"""The public report is a function of public parameters and released (noisy) values only."""

from __future__ import annotations

import json
from fractions import Fraction

import numpy as np
import pandas as pd

from dpsynth_cli.cli import app
from dpsynth_cli.mechanisms import partition, pmm
from dpsynth_cli.privacy import noise

BOUNDS = ["--bounds", "a=0:10", "--bounds", "b=-1:1"]


def run(runner, path, out, *extra):
    result = runner.invoke(
        app, ["synth", str(path), "--eps", "1", *BOUNDS, "-o", str(out), "--seed", "9", *extra]
    )
    assert result.exit_code == 0, result.output
    return json.loads(out.with_name(out.name + ".report.json").read_text())


def test_two_datasets_with_equal_released_values_give_equal_outputs(runner, tmp_path, monkeypatch):
    """Force the released noisy values to coincide; then nothing else may tell the inputs apart."""
    rng = np.random.default_rng(0)
    first = pd.DataFrame({"a": rng.integers(0, 11, 500), "b": rng.random(500)})
    second = pd.DataFrame({"a": rng.integers(5, 8, 800), "b": -rng.random(800)})
    true_rows = {}

    def count_noise(source, scale, size):
        return np.array([777 - true_rows["n"]])

    def fixed_tree(noisy, _rng):
        depth = len(noisy) - 1
        return partition.level_counts(np.arange(1 << depth) % 3, depth)

    monkeypatch.setattr(noise, "discrete_laplace", count_noise)
    monkeypatch.setattr(pmm, "make_consistent", fixed_tree)
    reports, outputs = [], []
    for name, frame in (("first", first), ("second", second)):
        path, out = tmp_path / f"{name}.csv", tmp_path / f"{name}.synth.csv"
        frame.to_csv(path, index=False)
        true_rows["n"] = len(frame)
        report = run(runner, path, out)
        del report["command"], report["output"]["path"]
        reports.append(report)
        outputs.append(out.read_bytes())
    assert reports[0] == reports[1]
    assert outputs[0] == outputs[1]


def test_report_fields_follow_from_released_values(runner, tmp_path):
    rng = np.random.default_rng(1)
    path, out = tmp_path / "in.csv", tmp_path / "out.csv"
    pd.DataFrame({"a": rng.integers(0, 11, 3000), "b": rng.random(3000)}).to_csv(path, index=False)
    report = run(runner, path, out)
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


def _numbers(obj) -> list:
    if isinstance(obj, dict):
        return [x for v in obj.values() for x in _numbers(v)]
    if isinstance(obj, list):
        return [x for v in obj for x in _numbers(v)]
    return [obj] if isinstance(obj, int | float) and not isinstance(obj, bool) else []
