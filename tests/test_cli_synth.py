"""`dpsynth synth` end to end: outputs, report, streams, and bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dpsynth_cli import io
from dpsynth_cli.cli import app
from dpsynth_cli.mechanisms import pmm
from dpsynth_cli.report import NOT_FOR_RELEASE
from tests.conftest import SAMPLE, SECRET

BOUNDS = ["--bounds", "age=0:100", "--bounds", "score=0:1", "--integer", "age"]


def synth(runner, *args):
    return runner.invoke(app, ["synth", *map(str, args)])


def test_file_to_file_with_report(runner, small_csv, tmp_path):
    out = tmp_path / "out.parquet"
    result = synth(runner, small_csv, "--eps", 1, *BOUNDS, "-o", out, "--seed", 1)
    assert result.exit_code == 0, result.output
    table = pd.read_parquet(out)
    assert list(table.columns) == ["age", "score"]
    assert table["age"].dtype.kind == "i" and table["age"].between(0, 100).all()
    assert table["score"].between(0, 1).all()
    report = json.loads((tmp_path / "out.parquet.report.json").read_text())
    assert report["seeded"] is True and "NOT FOR RELEASE" in report["release"]
    assert report["ledger"]["total_epsilon"] <= 1.0
    assert report["output"]["rows"] == len(table)
    chosen = report["mechanism"]["name"]
    assert report["mechanism"]["selected_by"]["chosen"] == chosen  # the default is auto
    steps = {e["step"] for e in report["ledger"]["entries"]}
    assert "count" in steps and all(s.startswith(chosen) for s in steps - {"count"})


def test_seed_reproduces_and_rows_resamples(runner, small_csv, tmp_path):
    outs = []
    for name in ("a.csv", "b.csv"):
        out = tmp_path / name
        assert synth(runner, small_csv, "--eps", 1, *BOUNDS, "-o", out, "--seed", 5).exit_code == 0
        outs.append(out.read_bytes())
    assert outs[0] == outs[1]
    out = tmp_path / "c.csv"
    assert synth(runner, small_csv, "--eps", 1, *BOUNDS, "-o", out, "--rows", 1234).exit_code == 0
    assert len(pd.read_csv(out)) == 1234


def test_stdin_to_stdout_in_a_pipe(small_csv):
    cmd = [sys.executable, "-m", "dpsynth_cli", "synth", "-", "--eps", "1", *BOUNDS, "--seed", "2"]
    cmd += ["--columns", "age,score", "--quiet"]
    with open(small_csv, "rb") as stdin:
        done = subprocess.run(cmd, stdin=stdin, capture_output=True, check=False)
    assert done.returncode == 0
    assert done.stderr == b"dpsynth: warning: --seed given: " + NOT_FOR_RELEASE.encode() + b"\n"
    lines = done.stdout.decode().splitlines()
    assert lines[0] == '"age","score"' and len(lines) > 100


def test_closed_pipe_downstream_exits_quietly(small_csv):
    script = (
        f"{sys.executable} -m dpsynth_cli synth - --eps 1 --bounds age=0:100 "
        f"--bounds score=0:1 --columns age,score --rows 200000 < '{small_csv}' | head -n 2"
    )
    done = subprocess.run(
        ["bash", "-o", "pipefail", "-c", script], capture_output=True, check=False
    )
    assert done.returncode == 0 and done.stderr == b""
    assert len(done.stdout.splitlines()) == 2


def test_missing_bounds_are_estimated_with_a_notice(runner, tmp_path):
    out = tmp_path / "o.csv"
    result = synth(
        runner,
        SAMPLE / "patients.csv",
        "--eps",
        2,
        "--columns",
        "age,cholesterol",
        "--bounds",
        "age=18:90",
        "-o",
        out,
        "--seed",
        4,
    )
    assert result.exit_code == 0, result.output
    assert "column 'cholesterol' has no declared bounds" in result.output
    report = json.loads((tmp_path / "o.csv.report.json").read_text())
    chol = report["domain"]["cholesterol"]
    assert chol["bounds_source"] == "dp_estimate"
    assert 64 <= chol["lower"] <= 192 and 256 <= chol["upper"] <= 512
    assert report["ledger"]["total_epsilon"] <= 2.0
    steps = {e["step"] for e in report["ledger"]["entries"]} - {"bounds:cholesterol", "count"}
    assert steps and all(s.startswith(report["mechanism"]["name"]) for s in steps)


def test_dry_run_reads_no_data(runner, tmp_path):
    ghost = tmp_path / "never-read.csv"
    result = synth(runner, ghost, "--eps", 1, "--columns", "a,b", "--bounds", "a=0:1", "--dry-run")
    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout)
    assert plan["dry_run"] and set(plan["budget_plan"]["bounds_estimate_epsilon"]) == {"b"}


def test_diagnostics_go_to_a_separate_labelled_file(runner, small_csv, tmp_path):
    out, diag = tmp_path / "o.csv", tmp_path / "diag.json"
    assert (
        synth(runner, small_csv, "--eps", 1, *BOUNDS, "-o", out, "--diagnostics", diag).exit_code
        == 0
    )
    block = json.loads(diag.read_text())
    assert block["NOT_DIFFERENTIALLY_PRIVATE"] is True
    assert "w1" in json.dumps(block).lower()
    public = (tmp_path / "o.csv.report.json").read_text()
    assert "NOT_DIFFERENTIALLY_PRIVATE" not in public and '"w1_unit_cube"' not in public


def test_diagnostics_are_owner_only(runner, small_csv, tmp_path):
    """They hold the true row count and W1 (issue 22, finding 4): 0600 under the usual umask,
    also when they replace a world-readable file, while the output and report keep the umask's
    mode; the same through the part-directory writer of --engine dask."""
    old = os.umask(0o022)
    try:
        out, diag = tmp_path / "o.csv", tmp_path / "diag.json"
        diag.write_text("{}")
        diag.chmod(0o644)
        args = ("--eps", 1, *BOUNDS, "-o", out, "--diagnostics", diag, "--seed", 1)
        assert synth(runner, small_csv, *args).exit_code == 0
        assert diag.stat().st_mode & 0o777 == 0o600
        assert out.stat().st_mode & 0o777 == 0o644
        assert (tmp_path / "o.csv.report.json").stat().st_mode & 0o777 == 0o644
        parts, side, public = tmp_path / "p.csv", tmp_path / "d2.json", tmp_path / "r.json"

        def fill(tmp: str) -> int:
            (Path(tmp) / io.part_name(0, ".csv")).write_text("a\n1\n")
            return 1

        extra = {str(side): "{}", str(public): "{}"}
        io.write_part_directory(
            fill, str(parts), "csv", input_path=None, extra=extra, private=[str(side)]
        )
        assert side.stat().st_mode & 0o777 == 0o600 and public.stat().st_mode & 0o777 == 0o644
    finally:
        os.umask(old)


def test_help_explains_every_option_with_an_example(runner):
    result = runner.invoke(app, ["synth", "--help"])
    assert result.exit_code == 0
    from typer.main import get_command

    for param in get_command(app).commands["synth"].params:
        if param.param_type_name == "option" and param.name != "help":
            assert "e.g." in (param.help or ""), param.name


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    "make_args,code,words",
    [
        (lambda p: [p / "nope.csv", "--eps", 1], 1, "nope.csv"),
        (lambda p: [write(p, "empty.csv", ""), "--eps", 1], 1, "empty.csv"),
        (lambda p: [write(p, "t.csv", "a,b\nx,y\n"), "--eps", 1], 1, "no bounds ('a', 'b')"),
        (lambda p: [write(p, "t.csv", "1,2\n3,4\n"), "--eps", 1], 1, "--no-header"),
        (lambda p: [write(p, "t.csv", "1,2\n"), "--eps", 1, "--no-header"], 2, "--columns"),
        (
            lambda p: [write(p, "t.csv", "1,2\n"), "--eps", 1, "--no-header", "--columns", "a"],
            2,
            "2 fields",
        ),
        (lambda p: [write(p, "t.csv", "a\n1\n"), "--eps", 1, "--integer", "a,zz"], 2, "'zz'"),
        (lambda p: [write(p, "t.csv", "a\n1\n"), "--eps", 1, "--columns", "zz"], 2, "'zz'"),
        (lambda p: [write(p, "t.csv", "a\n1\n"), "--eps", 1, "--bounds", "a=5:1"], 2, "--bounds"),
        (lambda p: [write(p, "t.csv", "a\n1\n"), "--eps", 1, "--bounds", "a=x:1"], 2, "--bounds"),
        (lambda p: [write(p, "t.csv", "a\n1\n"), "--eps", 0], 2, "--eps"),
        (lambda p: [write(p, "t.csv", "a\n1\n"), "--eps", "inf"], 2, "--eps"),
        (lambda p: [write(p, "t.csv", "a\n1\n"), "--eps", 1, "--bounds-eps", 0], 2, "'a'"),
        (lambda p: [write(p, "t.csv", f"a\n{SECRET}\n1,2\n"), "--eps", 1], 1, "line 3"),
        (
            lambda p: [
                write(p, "t.csv", "a\n1\n"),
                "--eps",
                1,
                "--bounds",
                "a=0:9",
                "--neighboring",
                "swap",
            ],
            2,
            "--neighboring",
        ),
    ],
)
def test_bad_input_is_one_line_with_exit_code_and_no_output(
    runner, tmp_path, make_args, code, words
):
    out = tmp_path / "out" / "o.csv"
    out.parent.mkdir()
    result = synth(runner, *make_args(tmp_path), "-o", out)
    assert result.exit_code == code, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0] and "Traceback" not in result.output
    assert str(SECRET) not in result.output
    assert list(out.parent.iterdir()) == []


def test_output_over_input_is_refused(runner, small_csv):
    before = small_csv.read_bytes()
    result = synth(runner, small_csv, "--eps", 1, *BOUNDS, "-o", small_csv)
    assert result.exit_code == 2 and small_csv.read_bytes() == before


def test_demo_sample_runs(runner, tmp_path):
    out = tmp_path / "p.csv"
    result = synth(
        runner,
        SAMPLE / "patients.csv",
        "--eps",
        1,
        "--schema",
        SAMPLE / "patients.schema.json",
        "-o",
        out,
        "--seed",
        0,
    )
    assert result.exit_code == 0, result.output
    assert list(pd.read_csv(out).columns) == ["age", "systolic_bp", "cholesterol"]


def test_replace_relation_doubles_the_noise(runner, small_csv, tmp_path):
    for relation, sensitivity in (("add-remove", 1), ("replace", 2)):
        out = tmp_path / f"{relation}.csv"
        args = [small_csv, "--eps", 1, *BOUNDS, "-o", out, "--seed", 3, "--neighboring", relation]
        args += ["--mechanism", "pmm"]
        assert synth(runner, *args).exit_code == 0
        report = json.loads((tmp_path / f"{relation}.csv.report.json").read_text())
        assert report["neighbouring_relation"] == relation
        pmm_spend = next(e for e in report["ledger"]["entries"] if e["step"] == "pmm")
        assert pmm_spend["sensitivity"] == sensitivity
        depth = report["mechanism"]["depth"]
        unit = pmm.level_scales(Fraction(pmm_spend["epsilon_exact"]), depth, 2, 1)
        assert report["mechanism"]["level_noise_scales"] == [float(sensitivity * s) for s in unit]


def test_terminal_gets_progress_and_summary(monkeypatch):
    from rich.console import Console

    from dpsynth_cli import console

    feedback = console.Feedback(quiet=False)
    feedback.console = Console(stderr=True, force_terminal=True, record=True, width=100)
    feedback.interactive = True
    with feedback.step("synthesising"):
        pass
    report = {
        "ledger": {"total_epsilon": 1.0, "budget_epsilon": 1.0},
        "neighbouring_relation": "add-remove",
        "mechanism": {"name": "pmm"},
        "output": {"rows": 10},
        "accuracy": {"w1_bound_unit_cube": 0.5},
        "seeded": True,
    }
    feedback.summary(report, "out.csv", "out.csv.report.json")
    text = feedback.console.export_text()
    assert "epsilon spent" in text and "NOT FOR RELEASE" in text and "out.csv" in text


def test_no_complete_rows_is_a_valid_release(runner, tmp_path):
    """n is private: an input with no complete rows gets a release like any other, not an error."""
    path = write(tmp_path, "t.csv", "a,b\n,1\n2,\nx,3\n")
    out = tmp_path / "o.parquet"
    args = [path, "--eps", 1, "--bounds", "a=0:9", "--bounds", "b=0:9", "--integer", "a"]
    result = synth(runner, *args, "-o", out, "--rows", 0)
    assert result.exit_code == 0, result.output
    table = pq.read_table(out)
    assert table.num_rows == 0 and table.schema.types == [pa.int64(), pa.float64()]
    report = json.loads((tmp_path / "o.parquet.report.json").read_text())
    assert report["output"]["rows"] == 0


def test_headerless_csv_with_named_columns(runner, tmp_path):
    path = write(tmp_path, "t.csv", "1,2.5\n3,4.5\n")
    args = [path, "--eps", 1, "--no-header", "--columns", "a,b", "--bounds", "a=0:9"]
    result = synth(runner, *args, "--bounds", "b=0:9", "--rows", 5)
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[0] == '"a","b"'


def test_columns_left_out_are_named_on_stderr_and_in_the_report(runner, tmp_path):
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"x": [1.5, 2.5], "species": ["a", "b"], "day": [1, 2]}), path)
    out = tmp_path / "o.csv"
    result = synth(runner, path, "--eps", 1, "--bounds", "x=0:9", "-o", out, "--quiet")
    assert result.exit_code == 0 and result.stderr == ""
    result = synth(runner, path, "--eps", 1, "--bounds", "x=0:9", "-o", out)
    assert "2 columns left out (not named by --bounds/--integer): 'species', 'day'" in result.stderr
    report = json.loads((tmp_path / "o.csv.report.json").read_text())
    assert report["domain_source"]["columns_from"] == "--bounds/--integer"
    assert list(report["domain_source"]["left_out"]) == ["species", "day"]
    assert report["domain"]["x"]["type_source"] == "Parquet schema"


def test_seeded_runs_say_not_for_release_everywhere(runner, small_csv, tmp_path):
    out = tmp_path / "o.parquet"
    result = synth(runner, small_csv, "--eps", 1, *BOUNDS, "-o", out, "--seed", 1, "--quiet")
    assert result.exit_code == 0
    assert result.stderr == f"dpsynth: warning: --seed given: {NOT_FOR_RELEASE}\n"
    assert pq.read_table(out).schema.metadata[b"dpsynth.release"] == NOT_FOR_RELEASE.encode()
    assert synth(runner, small_csv, "--eps", 1, *BOUNDS, "-o", out).exit_code == 0
    assert pq.read_table(out).schema.metadata is None  # an unseeded output carries no mark


def test_stdout_output_says_no_report_was_written(runner, small_csv):
    result = synth(runner, small_csv, "--eps", 1, *BOUNDS, "--columns", "age,score")
    assert result.exit_code == 0
    assert "no report written (the output went to stdout): add --report FILE" in result.stderr


def test_version_short_help_and_completion(runner):
    from dpsynth_cli import __version__

    assert runner.invoke(app, ["--version"]).stdout == f"dpsynth {__version__}\n"
    short = runner.invoke(app, ["synth", "-h"])
    assert short.exit_code == 0 and "--eps" in short.stdout
    top = runner.invoke(app, ["-h"]).stdout
    assert "--install-completion" in top and "--version" in top


def test_help_examples_are_separate_commands(runner):
    text = runner.invoke(app, ["synth", "--help"]).stdout
    examples = text[text.index("Examples:") :].splitlines()
    commands = [line.strip() for line in examples if line.strip().startswith(("dpsynth", "cat "))]
    assert len(commands) == 3 and all("|   " not in c for c in commands)


@pytest.mark.parametrize(
    "args, words",
    [
        (["--eps", "abc"], "Invalid value for '--eps'"),
        (["--eps", "1", "--bogus"], "No such option: --bogus"),
    ],
)
def test_flag_errors_are_one_line(runner, small_csv, args, words):
    result = runner.invoke(app, ["synth", str(small_csv), *args])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dpsynth: error: ") and words in lines[0]


def test_directory_input_is_named_a_directory(runner, tmp_path):
    for path in (tmp_path / "data", tmp_path / "data.csv"):
        path.mkdir()
        result = synth(runner, path, "--eps", 1)
        assert result.exit_code in (1, 2) and f"{path} is a directory" in result.stderr


def test_notices_are_not_wrapped_in_logs(small_csv, tmp_path):
    """A notice is one line whatever the terminal width (cron logs, pipes)."""
    cmd = [sys.executable, "-m", "dpsynth_cli", "synth", str(small_csv), "--eps", "1"]
    cmd += ["--bounds", "age=0:100", "--bounds", "score=0:1", "-o", str(tmp_path / "o.csv")]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False, env={"COLUMNS": "40"})
    assert done.returncode == 0, done.stderr
    notes = done.stderr.splitlines()
    assert notes and all(line.startswith("dpsynth: ") for line in notes)
    assert any(len(line) > 80 for line in notes)
