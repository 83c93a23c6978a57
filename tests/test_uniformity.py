"""The signal check: uniform synthetic columns and vacuous bounds are reported, never hidden."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from dpsynth_cli.cli import app
from dpsynth_cli.uniformity import signal_block, uniform_columns, weak_guarantee_notice


def test_uniform_and_clustered_columns_are_told_apart():
    rng = np.random.default_rng(0)
    points = np.column_stack([rng.random(2000), 0.3 + 0.05 * rng.random(2000)])
    assert uniform_columns(points) == [0]
    assert uniform_columns(points[:10]) is None  # too few rows to tell


def test_uniform_samples_pass_at_the_stated_level():
    """A uniform column is called uniform in about 99% of samples (the KS critical value)."""
    rng = np.random.default_rng(1)
    hits = sum(len(uniform_columns(rng.random((500, 20)))) for _ in range(100))
    assert 0.975 * 2000 <= hits <= 2000  # binomial(2000, 0.99): mean 1980, sd 4.5


def test_little_signal_is_said_and_recorded():
    rng = np.random.default_rng(2)
    block, notes = signal_block(rng.random((1000, 3)), ["a", "b", "c"], None)
    assert block["little_signal"] and block["uniform_columns"] == ["a", "b", "c"]
    assert "little signal" in notes[0] and "--columns" in notes[0]
    block, notes = signal_block(0.5 + 0.01 * rng.random((1000, 2)), ["a", "b"], 1.7)
    assert block["little_signal"] and "vacuous" in notes[0]
    block, notes = signal_block(0.5 + 0.01 * rng.random((1000, 2)), ["a", "b"], 0.1)
    assert not block["little_signal"] and notes == []
    assert weak_guarantee_notice(10) == [] and "weak" in weak_guarantee_notice(10.5)[0]


def test_wide_table_release_says_it_is_noise(runner, tmp_path):
    """20 columns, 2000 rows, pmm: the a-priori bound is vacuous; the user is told, on stderr and
    in the report."""
    rng = np.random.default_rng(3)
    frame = pd.DataFrame(rng.normal(5, 1, (2000, 20)), columns=[f"c{i}" for i in range(20)])
    path, out = tmp_path / "w.csv", tmp_path / "o.csv"
    frame.to_csv(path, index=False)
    bounds = [arg for i in range(20) for arg in ("--bounds", f"c{i}=0:10")]
    args = ["synth", str(path), "--eps", "20", *bounds, "--mechanism", "pmm", "-o", str(out)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "release carries little signal" in result.stderr and "weak" in result.stderr
    report = json.loads((tmp_path / "o.csv.report.json").read_text())
    assert report["accuracy"]["signal"]["little_signal"] is True
