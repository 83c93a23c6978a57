"""The Python API (issue 26): the same release as the commands for the same seed, types from
declarations only, notices as warnings, errors as the commands' messages, and docs/api.md's
examples run as written."""

from __future__ import annotations

import inspect
import json
import re
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

import dpsynth_cli as dp
from dpsynth_cli.cli import app

# the notices of these small tables (uniform columns, vacuous bounds) are not under test here
pytestmark = pytest.mark.filterwarnings("ignore::dpsynth_cli.api.DpsynthNotice")

DOCS = Path(__file__).resolve().parent.parent / "docs" / "api.md"
README = DOCS.parent.parent / "README.md"
BOUNDS = {"age": (0, 100), "score": (0, 1)}
FLAGS = ["--bounds", "age=0:100", "--bounds", "score=0:1"]


def invoke(runner, *args):
    result = runner.invoke(app, [*map(str, args)])
    assert result.exit_code == 0, result.output
    return result


def without_command(report: dict) -> dict:
    """The report less what names the call (the command line and the output's path)."""
    return {k: v for k, v in report.items() if k not in ("command", "output")}


@pytest.mark.parametrize("as_frame", [True, False])
def test_synthesize_equals_the_command_for_the_same_seed(runner, small_csv, tmp_path, as_frame):
    out = tmp_path / "o.parquet"
    invoke(runner, "synth", small_csv, "--eps", 1, *FLAGS, "--seed", 5, "-o", out, "-q")
    data = pd.read_csv(small_csv) if as_frame else small_csv
    with pytest.warns(dp.NotForRelease):
        table, report = dp.synthesize(data, eps=1, bounds=BOUNDS, seed=5, output="arrow")
    cli_table = pq.read_table(out)
    assert table.equals(cli_table) and table.schema.metadata == cli_table.schema.metadata
    cli_report = json.loads((tmp_path / "o.parquet.report.json").read_text())
    assert without_command(report) == without_command(cli_report)
    assert report["output"]["rows"] == cli_report["output"]["rows"]


def test_pca_and_evaluate_equal_the_commands(runner, small_csv, tmp_path):
    out = tmp_path / "pcs.parquet"
    invoke(runner, "pca", small_csv, "--eps", 1, *FLAGS, "-k", 1, "--seed", 2, "-o", out, "-q")
    with pytest.warns(dp.NotForRelease):
        components, report = dp.principal_components(
            pd.read_csv(small_csv), eps=1, k=1, bounds=BOUNDS, seed=2
        )
    pd.testing.assert_frame_equal(components, pd.read_parquet(out))
    cli_report = json.loads((tmp_path / "pcs.parquet.report.json").read_text())
    assert without_command(report) == without_command(cli_report)
    synth = tmp_path / "s.csv"
    invoke(runner, "synth", small_csv, "--eps", 1, *FLAGS, "-o", synth, "-q")
    shown = invoke(runner, "evaluate", small_csv, synth, *FLAGS, "--json", "--seed", 1)
    got = dp.evaluate_synthetic(pd.read_csv(small_csv), pd.read_csv(synth), bounds=BOUNDS, seed=1)
    assert got == json.loads(shown.stdout)


def test_online_replay_equals_the_command(runner, tmp_path):
    rng = np.random.default_rng(4)
    frame = pd.DataFrame({"t": np.arange(400), "x": rng.random(400)})
    frame.to_csv(tmp_path / "s.csv", index=False)
    args = ["--eps", 1, "--bounds", "x=0:1", "--order-by", "t", "--checkpoints", "every:200"]
    invoke(
        runner, "online-replay", tmp_path / "s.csv", *args, "--seed", 3, "--out-dir", tmp_path / "a"
    )
    with pytest.warns(dp.NotForRelease):
        files, report = dp.online_replay(
            frame,
            eps=1,
            bounds={"x": (0, 1)},
            order_by="t",
            checkpoints="every:200",
            seed=3,
            out_dir=tmp_path / "b",
        )
    assert sorted(Path(f).name for f in files) == sorted(p.name for p in (tmp_path / "a").iterdir())
    for name in ("release-000000000200.parquet", "release-000000000400.parquet"):
        assert pq.read_table(tmp_path / "a" / name).equals(pq.read_table(tmp_path / "b" / name))
    cli_report = json.loads((tmp_path / "a" / "online-replay.report.json").read_text())
    assert without_command(report)["checkpoints"] == without_command(cli_report)["checkpoints"]


def test_a_dataframes_dtypes_do_not_shape_the_output(small_csv):
    """The same values as int64 or float64, or as text: the same release (declarations only)."""
    frame = pd.read_csv(small_csv)[["age", "score"]]
    outputs = []
    for age in (frame["age"], frame["age"].astype(float), frame["age"].astype(str)):
        with pytest.warns(dp.NotForRelease):
            table, report = dp.synthesize(
                frame.assign(age=age), eps=1, bounds=BOUNDS, seed=9, budget=False
            )
        outputs.append((table, report["domain"]))
    for table, domain in outputs[1:]:
        pd.testing.assert_frame_equal(table, outputs[0][0])
        assert domain == outputs[0][1] and domain["age"]["type"] == "float"


def test_notices_are_warnings_and_errors_carry_the_commands_message(runner, small_csv, tmp_path):
    with pytest.warns(dp.DpsynthNotice, match="used a private estimate"):
        dp.synthesize(small_csv, eps=1, columns=["age"])
    bad = runner.invoke(app, ["synth", str(small_csv), "--eps", "1", "--columns", "nope"])
    with pytest.raises(dp.UsageError) as raised:
        dp.synthesize(small_csv, eps=1, columns=["nope"])
    assert bad.stderr.strip() == f"dpsynth: error: {raised.value}"
    assert raised.value.exit_code == bad.exit_code == 2
    with pytest.raises(dp.UsageError, match="seed must be a whole number"):
        dp.synthesize(small_csv, eps=1, bounds=BOUNDS, seed=-1)


def test_the_api_keeps_the_budget(small_csv, tmp_path, private_budget):
    (tmp_path / "set").mkdir()
    result = (
        __import__("typer.testing")
        .testing.CliRunner()
        .invoke(app, ["budget", "set", "frame", "--eps", "1.5"])
    )
    assert result.exit_code == 0
    frame = pd.read_csv(small_csv)
    dp.synthesize(frame, eps=1, bounds=BOUNDS, dataset="frame")
    with pytest.raises(dp.PrivacyRefusal, match="spent eps 1 of its total eps 1.5"):
        dp.synthesize(frame, eps=1, bounds=BOUNDS, dataset="frame")
    assert dp.budget_status(dataset="frame")[0]["spent_epsilon"] == 1
    dp.synthesize(frame, eps=1, bounds=BOUNDS, dataset="frame", budget=False)  # opted out


def test_every_public_name_has_a_docstring_and_is_documented():
    docs = DOCS.read_text()
    assert sorted(dp.__all__) == dp.__all__
    for name in dp.__all__:
        obj = getattr(dp, name)
        assert inspect.getdoc(obj), name
        assert f"`{name}`" in docs, name
        if inspect.isfunction(obj):
            hints = inspect.signature(obj)
            assert hints.return_annotation is not inspect.Signature.empty, name
    assert "docs/api.md" in README.read_text()


def test_the_docs_examples_run_as_written(tmp_path, monkeypatch):
    blocks = re.findall(r"```python\n(.*?)```", DOCS.read_text(), re.S)
    assert len(blocks) >= 5
    monkeypatch.chdir(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exec(compile("\n".join(blocks), str(DOCS), "exec"), {"__name__": "docs_api"})
