"""`evaluate` at read speed (issue 40): one pass of exact statistics whose figures do not depend
on the batches, the threads or the Dask workers; the joint W1 on samples (or skipped), said in
the report; memory bounded by a batch."""

from __future__ import annotations

import json
from functools import partial

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from dpsynth_cli.cli import app
from dpsynth_cli.domain import ColumnSpec, complete_rows
from dpsynth_cli.engine import threads
from dpsynth_cli.evaluate import compare
from dpsynth_cli.evaluate.fidelity import as_values, fidelity

SPECS = [
    ColumnSpec("x", "float", 0.0, 1.0, "declared"),
    ColumnSpec("k", "integer", 0, 9, "declared"),
    ColumnSpec("c", "category", 0, 2, "declared", levels=("a", "b", "c")),
]


def frames(n=3000, m=2500, seed=3):
    rng = np.random.default_rng(seed)
    real = pd.DataFrame(
        {
            "x": rng.random(n) ** 2,
            "k": rng.integers(0, 10, n),
            "c": rng.choice(["a", "b", "c"], n, p=[0.5, 0.3, 0.2]),
        }
    )
    real["x"] = np.clip(real["x"] + 0.02 * real["k"], 0, 1)
    synth = pd.DataFrame(
        {"x": rng.random(m), "k": rng.integers(0, 10, m), "c": rng.choice(["a", "b", "c"], m)}
    )
    return real, synth


def batches(frame, size):
    table = pa.Table.from_pandas(frame, preserve_index=False)
    return lambda: table.to_batches(max_chunksize=size)


def report(real, synth, size, limits=None, joint="sample"):
    limits = limits or compare.Limits()
    return compare.evaluate(batches(real, size), batches(synth, size), SPECS, 1, limits, joint)


def without_joint(r):
    """A report without the joint W1's figures (those of samples, which the limits change)."""
    drop = ("w1_unit_cube", "w1_mixed_metric", "joint_w1", "streamed")
    return {k: v for k, v in r.items() if k not in drop}


@pytest.mark.parametrize("cores", [1, 2])
def test_tiny_batches_and_threads_give_the_same_report_bit_for_bit(monkeypatch, cores):
    """Exact counts, sums, minima and maxima and a value-keyed sample: 7-row batches (the
    memory of a batch, never of the table) on one or two threads give the report of one
    batch, to the last bit."""
    real, synth = frames()
    whole = report(real, synth, 10**6).report
    monkeypatch.setattr(threads, "cores", lambda: cores)
    tiny = report(real, synth, 7).report
    assert json.dumps(tiny) == json.dumps(whole)


def test_the_figures_are_the_in_memory_ones():
    """Tables within the samples: per-column W1, quantiles, level shares and pair TVDs as the
    rows in memory give them; means, standard deviations and correlations to 1e-9."""
    real, synth = frames()
    got = report(real, synth, 500).report
    X, Y = (as_values(f, SPECS) for f in (real, synth))
    want = compare.per_column(X, Y, SPECS)
    for name in ("x", "k"):
        col, exact = got["per_column"][name], want[name]
        assert col["w1"] == pytest.approx(exact["w1"], abs=1e-12)
        assert col["w1_bounds"]["lower"] == pytest.approx(col["w1_bounds"]["upper"], abs=1e-12)
        assert col["quantiles"] == exact["quantiles"]
        for stat in ("mean", "std"):
            for side in ("real", "synthetic"):
                assert col[stat][side] == pytest.approx(exact[stat][side], rel=1e-9)
    figures = fidelity(X, Y, SPECS)
    assert got["pair_tvd"] == figures["pair_tvd"]
    assert got["column_errors"]["c"] == figures["column_errors"]["c"]
    r = np.corrcoef(X[:, :2], rowvar=False)[0, 1]
    assert got["correlation"]["real"][0][1] == pytest.approx(r, abs=1e-9)
    assert got["joint_w1"]["rows"] == "all" and "exact" in got["w1_unit_cube"]


def test_larger_tables_get_the_joint_w1_on_samples_and_say_so(runner, tmp_path):
    """Past the samples: the per-column and pair figures stay those of every row (the same as
    with samples holding the tables); the joint W1 is the tables' proven lower bound and the
    samples' bracket, and the report and the summary say so; `skip` and `full` too."""
    real, synth = frames()
    small = compare.Limits(sample_rows=400)
    sampled = report(real, synth, 300, small).report
    assert without_joint(sampled) == without_joint(report(real, synth, 300).report)
    cube = sampled["w1_unit_cube"]
    assert sampled["joint_w1"]["rows"] == "sample" and sampled["joint_w1"]["sample_rows"] == 400
    assert cube["sample"]["rows"] == [400, 400] and "upper" not in cube
    assert cube["lower"] <= cube["sample"]["upper"]
    assert sampled["w1_mixed_metric"]["sample"]["kind"] == "sample_bracket"
    exact = report(real, synth, 300).report["w1_unit_cube"]["exact"]
    assert cube["lower"] <= exact + 1e-12  # proven for the whole tables
    full = report(real, synth, 300, small, "full").report
    assert full["w1_unit_cube"]["lower"] == cube["lower"]
    assert full["w1_unit_cube"]["lower"] <= exact <= full["w1_unit_cube"]["upper"] + 1e-12
    assert "partition" in full["streamed"] and full["joint_w1"]["rows"] == "full"
    skipped = report(real, synth, 300, small, "skip").report
    assert skipped["w1_unit_cube"]["skipped"] and skipped["joint_w1"]["rows"] == "none"
    assert "w1_mixed_metric" not in skipped
    real.to_csv(tmp_path / "real.csv", index=False)
    synth.to_csv(tmp_path / "synth.csv", index=False)
    declared = {
        "x": {"type": "float", "lower": 0, "upper": 1},
        "k": {"type": "integer", "lower": 0, "upper": 9},
        "c": {"type": "category", "levels": ["a", "b", "c"]},
    }
    (tmp_path / "s.json").write_text(json.dumps({"columns": declared}))
    args = ["evaluate", str(tmp_path / "real.csv"), str(tmp_path / "synth.csv")]
    args += ["--schema", str(tmp_path / "s.json")]
    out = runner.invoke(app, [*args, "--joint-w1", "skip"])
    assert out.exit_code == 0, out.output
    assert "the rest skipped (--joint-w1 skip)" in out.stdout
    bad = runner.invoke(app, [*args, "--joint-w1", "most"])
    assert bad.exit_code != 0 and "--joint-w1 must be one of sample, full, skip" in bad.stderr


def test_dask_workers_give_the_local_report(tmp_path):
    """The passes on a LocalCluster of 2 workers, the Parquet file cut into 3 partitions:
    the same report as the local engine, to the last bit."""
    pytest.importorskip("distributed")
    from dpsynth_cli.engine import dask as dask_engine

    real, synth = frames()
    limits = compare.Limits(sample_rows=400)
    paths = []
    for name, frame in (("real", real), ("synth", synth)):
        path = tmp_path / f"{name}.parquet"
        frame.to_parquet(path, row_group_size=1000)
        paths.append(str(path))
    local = report(real, synth, 1000, limits).report
    names = [s.name for s in SPECS]
    with dask_engine.client(None, workers=2) as client:
        parts = [dask_engine.parquet_partitions(p, names, 1000, 3) for p in paths]
        with (
            dask_engine.dask_rows(client, parts[0], SPECS) as r,
            dask_engine.dask_rows(client, parts[1], SPECS) as s,
        ):
            rows = [x.map(partial(complete_rows), len(SPECS)) for x in (r, s)]
            remote = compare.evaluate(*rows, SPECS, 1, limits).report
    assert json.dumps(remote) == json.dumps(local)
