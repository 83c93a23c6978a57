"""What a new user hits (issue 24): silent near-empty releases, schema typos, crashes on odd
flags and streams, late errors, formats, limits, help texts, exit status and column order."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dpsynth_cli.cli import app


def invoke(runner, *args):
    return runner.invoke(app, [*map(str, args)])


def one_line_error(result, code: int) -> str:
    """The result's stderr, checked to be one error line with exit `code` and no traceback."""
    assert result.exit_code == code, result.output
    lines = result.stderr.strip().splitlines()
    assert lines and lines[-1].startswith("dpsynth: error: "), result.stderr
    assert "Traceback" not in result.output and "internal error" not in result.stderr
    return lines[-1]


# --------------------------------------------------------------------------- 2: schema typos


@pytest.mark.parametrize(
    ("column", "named"),
    [
        ({"lowr": 0, "uppr": 1}, ["'lowr' (did you mean 'lower'?)", "'uppr'"]),
        ({"type": "float", "lower": 0, "uper": 1}, ["'uper' (did you mean 'upper'?)"]),
        ({"type": "integer", "lower": 0, "upper": 9, "nulable": True}, ["'nulable'"]),
        ({"type": "category", "levels": ["x", "y"], "othr": "x"}, ["'othr'"]),
        ({"type": "float", "lower": 0, "upper": 1, "levels": ["x"]}, ["takes no 'levels'"]),
    ],
)
def test_unknown_schema_keys_are_usage_errors(runner, tmp_path, column, named):
    (tmp_path / "d.csv").write_text("a\n1\n2\n")
    (tmp_path / "s.json").write_text(json.dumps({"columns": {"a": column}}))
    result = invoke(
        runner, "synth", tmp_path / "d.csv", "--eps", 1, "--schema", tmp_path / "s.json"
    )
    line = one_line_error(result, 2)
    assert "column 'a'" in line and all(n in line for n in named), line
    assert "needs both" not in line


def test_schema_comments_are_allowed_and_top_level_typos_are_not(runner, tmp_path):
    (tmp_path / "d.csv").write_text("a\n1\n2\n")
    schema = tmp_path / "s.json"
    schema.write_text(
        json.dumps({"_note": "x", "columns": {"a": {"_why": "y", "lower": 0, "upper": 3}}})
    )
    ok = invoke(
        runner,
        "synth",
        tmp_path / "d.csv",
        "--eps",
        1,
        "--schema",
        schema,
        "-o",
        tmp_path / "o.csv",
    )
    assert ok.exit_code == 0, ok.output
    schema.write_text(json.dumps({"columns": {"a": {"lower": 0, "upper": 3}}, "colums": {}}))
    line = one_line_error(
        invoke(runner, "synth", tmp_path / "d.csv", "--eps", 1, "--schema", schema), 2
    )
    assert "'colums'" in line


# --------------------------------------------------------------------------- 3: crashes


@pytest.mark.parametrize("command", ["synth", "pca", "online-replay", "evaluate"])
def test_a_negative_seed_is_a_usage_error(runner, tmp_path, command):
    data = tmp_path / "d.csv"
    data.write_text("a,b\n1,2\n3,4\n")
    args = {
        "synth": ["--eps", 1, "--bounds", "a=0:5", "-o", tmp_path / "o.csv"],
        "pca": ["--eps", 1, "--bounds", "a=0:5", "--bounds", "b=0:5", "-k", 1],
        "online-replay": ["--eps", 1, "--bounds", "a=0:5", "--out-dir", tmp_path / "r"],
        "evaluate": [data, "--bounds", "a=0:5"],
    }[command]
    line = one_line_error(invoke(runner, command, data, *args, "--seed", -1), 2)
    assert "--seed" in line
    assert not (tmp_path / "o.csv").exists() and not (tmp_path / "r").exists()


@pytest.mark.parametrize("command", ["synth - --eps 1 --bounds a=0:5", "schema draft -"])
def test_a_closed_stdin_is_a_one_line_error(command):
    done = subprocess.run(
        ["bash", "-c", f"'{sys.executable}' -m dpsynth_cli {command} <&-"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1, done.stderr
    assert (
        done.stderr
        == "dpsynth: error: cannot read <stdin>: it is closed (give a file, or pipe one in)\n"
    )


# --------------------------------------------------------------------------- 12: column order


def test_outputs_keep_the_input_column_order(runner, tmp_path):
    """A schema (or --columns) naming the columns in another order than the file: synth, pca and
    online-replay write them in the file's order, as the README says (the Dask engine takes the
    same `ColumnChoice`)."""
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"a": rng.random(300), "b": rng.integers(0, 9, 300), "c": rng.random(300)})
    frame.to_csv(tmp_path / "d.csv", index=False)
    frame.to_parquet(tmp_path / "d.parquet")
    schema = {
        "columns": {
            "c": {"lower": 0, "upper": 1},
            "a": {"lower": 0, "upper": 1},
            "b": {"type": "integer", "lower": 0, "upper": 9},
        }
    }
    (tmp_path / "s.json").write_text(json.dumps(schema))
    common = ["--eps", 1, "--schema", tmp_path / "s.json", "--seed", 1, "-q"]
    for data, out in (("d.csv", "o.csv"), ("d.parquet", "o.parquet")):
        done = invoke(runner, "synth", tmp_path / data, *common, "-o", tmp_path / out)
        assert done.exit_code == 0, done.output
        written = (
            pd.read_csv(tmp_path / out) if out.endswith("csv") else pd.read_parquet(tmp_path / out)
        )
        assert list(written.columns) == ["a", "b", "c"]
        report = json.loads((tmp_path / f"{out}.report.json").read_text())
        assert list(report["domain"]) == ["a", "b", "c"]
    flags = ["--columns", "c,a", "--bounds", "a=0:1", "--bounds", "c=0:1", "--eps", 1, "-q"]
    done = invoke(runner, "synth", tmp_path / "d.csv", *flags, "-o", tmp_path / "p.csv")
    assert done.exit_code == 0 and pd.read_csv(tmp_path / "p.csv").columns.tolist() == ["a", "c"]
    done = invoke(runner, "pca", tmp_path / "d.csv", *common, "-k", 1, "-o", tmp_path / "k.csv")
    assert done.exit_code == 0, done.output
    assert pd.read_csv(tmp_path / "k.csv").columns.tolist()[-3:] == ["a", "b", "c"]
    replay = ["online-replay", tmp_path / "d.parquet", *common, "--checkpoints", "256"]
    done = invoke(runner, *replay, "--out-dir", tmp_path / "r")
    assert done.exit_code == 0, done.output
    release = pd.read_parquet(tmp_path / "r" / "release-000000000256.parquet")
    assert release.columns.tolist() == ["a", "b", "c"]


# --------------------------------------------------------------------------- 4: text columns


def test_every_failed_bounds_estimate_is_named_with_how_to_declare_text(runner, tmp_path):
    """The headline command on a table with a text column: no row has a number in every
    column, so every estimate finds nothing; the one error names them all, says why (a text
    column leaves no complete row), how to declare text, and points to `schema draft`."""
    rng = np.random.default_rng(1)
    frame = pd.DataFrame(
        {"carat": rng.random(3000), "cut": rng.choice(["Good", "Ideal"], 3000), "depth": 60.0}
    )
    frame.to_csv(tmp_path / "d.csv", index=False)
    result = invoke(runner, "synth", tmp_path / "d.csv", "--eps", 1, "--dim", "auto", "--seed", 3)
    line = one_line_error(result, 1)
    assert "3 columns have no bounds ('carat', 'cut', 'depth')" in line
    assert "category with its 'levels'" in line and "dpsynth schema draft" in line
    assert "a number in every chosen column" in line
    assert "--bounds cut=" not in line  # no column is blamed or given a flag it cannot take


def test_suggested_flags_quote_names_with_spaces(runner, tmp_path):
    (tmp_path / "d.csv").write_text("bill length,b\n" + "x,1\n" * 5)
    result = invoke(runner, "synth", tmp_path / "d.csv", "--eps", 1, "--columns", "bill length")
    assert "--bounds 'bill length=LOWER:UPPER'" in one_line_error(result, 1)
    result = invoke(
        runner,
        "synth",
        tmp_path / "d.csv",
        "--eps",
        1,
        "--columns",
        "bill length",
        "--bounds-eps",
        0,
    )
    assert "--bounds 'bill length=LOWER:UPPER'" in one_line_error(result, 2)


# --------------------------------------------------------------------------- 1: near-empty


@pytest.mark.parametrize("body", ["", "x,y\n" * 40], ids=["header only", "every row dropped"])
def test_a_release_within_the_noise_of_an_empty_table_says_so(runner, tmp_path, body):
    (tmp_path / "d.csv").write_text("a,b\n" + body)
    out = tmp_path / "o.csv"
    args = ["--eps", 1, "--bounds", "a=0:1", "--bounds", "b=0:1", "--seed", 1, "-o", out]
    result = invoke(runner, "synth", tmp_path / "d.csv", *args)
    assert result.exit_code == 0, result.output
    assert "the release is mostly noise" in result.stderr
    signal = json.loads((tmp_path / "o.csv.report.json").read_text())["accuracy"]["signal"]
    assert signal["mostly_noise"] is True and signal["little_signal"] is True
    # the floor is public: eps of the count (5% of 1) -> scale 20 -> ceil(20 ln 100) = 93
    assert signal["empty_table_floor"] == 93


def test_a_release_with_rows_is_not_called_noise(runner, small_csv, tmp_path):
    out = tmp_path / "o.csv"
    args = ["--eps", 1, "--bounds", "age=0:100", "--bounds", "score=0:1", "-o", out]
    result = invoke(runner, "synth", small_csv, *args)
    assert result.exit_code == 0 and "mostly noise" not in result.stderr
    signal = json.loads((tmp_path / "o.csv.report.json").read_text())["accuracy"]["signal"]
    assert signal["mostly_noise"] is False


def test_online_replay_says_when_its_bounds_are_vacuous(runner, tmp_path):
    pd.DataFrame({"a": np.linspace(0, 1, 300)}).to_csv(tmp_path / "d.csv", index=False)
    args = ["online-replay", tmp_path / "d.csv", "--eps", 1, "--bounds", "a=0:1", "--seed", 1]
    result = invoke(runner, *args, "--out-dir", tmp_path / "r")
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "r" / "online-replay.report.json").read_text())
    assert all(c["vacuous"] for c in report["checkpoints"])
    assert result.stderr.count("vacuous a-priori W1 bound") == 1
    assert "every release of this run (up to 256 rows)" in result.stderr


# --------------------------------------------------------------------------- 5: outputs first

# A CSV whose third line is malformed: reading its rows fails, so an output error reported for
# it was found before any row was read.
BAD_ROWS = "a,b\n1,2\n3,4,5\n"


@pytest.mark.parametrize("command", ["synth", "pca"])
def test_output_paths_are_checked_before_any_row_is_read(runner, tmp_path, command):
    data = tmp_path / "d.csv"
    data.write_text(BAD_ROWS)
    flags = ["--eps", 1, "--bounds", "a=0:5", "--bounds", "b=0:5"]
    flags += ["-k", 1] if command == "pca" else []
    missing = invoke(runner, command, data, *flags, "-o", tmp_path / "nowhere" / "o.csv")
    assert "directory" in one_line_error(missing, 2) and "does not exist" in missing.stderr
    onto = invoke(runner, command, data, *flags, "-o", data)
    assert "refusing to overwrite the input" in one_line_error(onto, 2)
    same = invoke(
        runner, command, data, *flags, "-o", tmp_path / "o.csv", "--report", tmp_path / "o.csv"
    )
    assert "same file" in one_line_error(same, 2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.csv"]


def test_a_read_only_output_directory_fails_before_the_work(runner, tmp_path, monkeypatch):
    """A directory where no file can be created: by its mode, or (root may write anywhere) by
    the operating system's refusal to create the temporary file there."""
    (tmp_path / "d.csv").write_text(BAD_ROWS)
    read_only = tmp_path / "ro"
    read_only.mkdir(mode=0o555)
    if os.geteuid() == 0:
        make = tempfile.mkstemp

        def refuse(*args, dir=None, **kwargs):
            if dir == str(read_only):
                raise PermissionError(13, "Permission denied")
            return make(*args, dir=dir, **kwargs)

        monkeypatch.setattr(tempfile, "mkstemp", refuse)
    out = read_only / "o.csv"
    result = invoke(runner, "synth", tmp_path / "d.csv", "--eps", 1, "--bounds", "a=0:5", "-o", out)
    assert one_line_error(result, 1).endswith(f"cannot write {out}: Permission denied")
    assert os.listdir(read_only) == []


# --------------------------------------------------------------------------- 6: formats, stdio


def test_report_to_stdout_with_a_file_output(runner, small_csv, tmp_path):
    args = ["--eps", 1, "--bounds", "age=0:100", "--bounds", "score=0:1", "-q"]
    done = invoke(runner, "synth", small_csv, *args, "-o", tmp_path / "o.csv", "--report", "-")
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)["output"]["path"] == str(tmp_path / "o.csv")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o.csv", "small.csv"]
    both = invoke(runner, "synth", small_csv, *args, "--report", "-")
    assert "both go to stdout" in one_line_error(both, 2)
    pca = invoke(
        runner, "pca", small_csv, *args, "-k", 1, "-o", tmp_path / "k.csv", "--report", "-"
    )
    assert pca.exit_code == 0 and json.loads(pca.stdout)["k"] == 1


def test_a_closed_stdout_is_named_before_the_work(small_csv):
    cmd = f"'{sys.executable}' -m dpsynth_cli synth '{small_csv}' --eps 1 --bounds age=0:100 >&-"
    done = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, check=False)
    assert done.returncode == 1
    assert done.stderr.endswith(
        "dpsynth: error: cannot write <stdout>: it is closed (give -o FILE, or redirect it)\n"
    )
    assert "left out" not in done.stderr  # refused before the input was opened


def test_a_directory_of_parquet_parts_needs_no_input_format(runner, tmp_path):
    parts = tmp_path / "parts"
    parts.mkdir()
    for i in range(2):
        pd.DataFrame({"a": np.linspace(0, 1, 200)}).to_parquet(parts / f"p{i}.parquet")
    out = tmp_path / "o.csv"
    done = invoke(runner, "synth", parts, "--eps", 1, "--bounds", "a=0:1", "-o", out, "-q")
    assert done.exit_code == 0, done.output
    (parts / "x.csv").write_text("a\n1\n")
    mixed = invoke(runner, "synth", parts, "--eps", 1, "--bounds", "a=0:1", "-o", out)
    assert "--input-format" in one_line_error(mixed, 2)


def test_a_gzip_stream_on_stdin_is_decompressed(small_csv):
    cmd = f"gzip -c '{small_csv}' | '{sys.executable}' -m dpsynth_cli synth - --eps 1 "
    cmd += "--bounds age=0:100 --bounds score=0:1 --seed 1 -q"
    done = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == '"age","score"'


def test_a_semicolon_file_gets_a_hint_and_reads_with_delimiter(runner, tmp_path):
    data = tmp_path / "d.csv"
    data.write_text("age;income;ward\n" + "".join(f"{i % 90};{i * 10};a\n" for i in range(300)))
    flags = ["--eps", 1, "--bounds", "age=0:100", "-q"]
    line = one_line_error(invoke(runner, "synth", data, *flags), 2)
    assert line.endswith("the header is one field holding ';': give --delimiter ';'")
    out = tmp_path / "o.csv"
    done = invoke(runner, "synth", data, *flags, "--delimiter", ";", "-o", out)
    assert done.exit_code == 0, done.output
    assert pd.read_csv(out).columns.tolist() == ["age"]
    draft = invoke(runner, "schema", "draft", data, "--delimiter", ";")
    assert list(json.loads(draft.stdout)["columns"]) == ["age", "income", "ward"]
    # a quote opens a field after the delimiter, so the line numbers of errors stay right
    data.write_text('a;b\n1;"x\n2;3\n')
    bad = invoke(runner, "synth", data, "--eps", 1, "--bounds", "a=0:9", "--delimiter", ";")
    assert "line 2: unterminated quoted field" in one_line_error(bad, 1)
    wrong = invoke(runner, "synth", data, "--eps", 1, "--delimiter", '"')
    assert "--delimiter" in one_line_error(wrong, 2)


# --------------------------------------------------------------------------- 9: help and docs


def _epilog_examples() -> list[str]:
    """Every example command at the end of every `--help` (after "Examples:")."""
    from typer.main import get_command

    group = get_command(app)
    commands = [*group.commands.values(), *group.commands["schema"].commands.values()]
    examples = []
    for command in commands:
        text = (command.epilog or "").split("Exit status:")[0]
        examples += [
            line.strip()
            for line in text.splitlines()
            if line.strip().startswith(("dpsynth", "cat "))
        ]
    return examples


def test_every_help_example_runs_as_written(runner, tmp_path, monkeypatch):
    """The examples of every --help, run in order in one directory, on tables that have the
    columns they name."""
    rng = np.random.default_rng(5)
    n = 3000
    frame = pd.DataFrame(
        {
            "age": rng.integers(18, 90, n),
            "income": rng.gamma(2, 20000, n).round(2),
            "a": rng.random(n),
            "b": rng.random(n) * 10,
        }
    )
    frame.to_csv(tmp_path / "data.csv", index=False)
    frame.to_parquet(tmp_path / "data.parquet")
    schema = {
        "columns": {
            "age": {"type": "integer", "lower": 0, "upper": 120},
            "income": {"lower": 0, "upper": 500000},
        }
    }
    (tmp_path / "schema.json").write_text(json.dumps(schema))
    stream = pd.DataFrame({"time": np.arange(n), "x": rng.random(n)})
    stream.to_parquet(tmp_path / "stream.parquet")
    (tmp_path / "s.json").write_text(json.dumps({"columns": {"x": {"lower": 0, "upper": 1}}}))
    sales = pd.DataFrame({"day": np.sort(rng.integers(1, 60, n)), "amount": rng.gamma(2, 50, n)})
    sales.to_csv(tmp_path / "sales.csv", index=False)
    examples = _epilog_examples()
    assert len(examples) >= 10 and any(e.startswith("dpsynth pca") for e in examples)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))
    for example in examples:  # in this process: `cat FILE |` is stdin, `> FILE` is stdout
        words = [os.path.expanduser(w) for w in shlex.split(example)]
        stdin = None
        if words[0] == "cat":
            stdin, words = Path(words[1]).read_bytes(), words[3:]
        target = words[words.index(">") + 1] if ">" in words else None
        words = words[1 : words.index(">")] if target else words[1:]
        done = runner.invoke(app, words, input=stdin)
        assert done.exit_code == 0, (example, done.output)
        if target:
            Path(target).write_bytes(done.stdout_bytes)


def test_help_texts_say_each_thing_once_and_truly(runner):
    replay = " ".join(invoke(runner, "online-replay", "--help").output.split())
    assert replay.count("together eps-DP") == 1
    evaluate = " ".join(invoke(runner, "evaluate", "--help").output.split())
    assert "(and written)" not in evaluate
    from dpsynth_cli import domain, schema_draft

    assert domain.NULLABLE == domain.KINDS and "'nullable': true (any type" in schema_draft.NOTE


def test_exit_codes_are_documented(runner):
    from typer.main import get_command

    group = get_command(app)
    commands = [*group.commands, *(f"schema {c}" for c in group.commands["schema"].commands)]
    for name in ["", *commands]:
        text = " ".join(invoke(runner, *name.split(), "--help").output.split())
        assert "Exit status: 0 done" in text and "2 usage error" in text, name
    readme = " ".join((Path(__file__).parent.parent / "README.md").read_text().split())
    assert "**Exit status**" in readme and "3 refused" in readme


def test_uniform_data_at_a_large_eps_is_not_called_a_thin_budget(runner, tmp_path):
    rng = np.random.default_rng(6)
    frame = pd.DataFrame({"a": rng.random(2000), "b": rng.random(2000)})
    frame.to_csv(tmp_path / "u.csv", index=False)
    args = ["--eps", 1000, "--bounds", "a=0:1", "--bounds", "b=0:1", "--seed", 2]
    result = invoke(runner, "synth", tmp_path / "u.csv", *args, "-o", tmp_path / "o.csv")
    assert result.exit_code == 0, result.output
    assert "spread too thin" not in result.stderr
    assert "data are probably close to uniform" in result.stderr


def test_the_package_metadata_builds_without_deprecation_warnings():
    """`license` in the SPDX string form (setuptools >= 77), not the deprecated table."""
    import tomllib

    meta = tomllib.loads((Path(__file__).parent.parent / "pyproject.toml").read_text())
    assert meta["project"]["license"] == "MIT"
    assert meta["build-system"]["requires"] == ["setuptools>=77"]


def test_sample_ages_are_not_uniform_and_the_samples_regenerate():
    """`make demo`'s patients have a bell of ages (a uniform one made the demo's only message
    say that a column came out uniform); `make_samples.py` writes the bundled files exactly."""
    import importlib.util

    from dpsynth_cli.uniformity import uniform_columns

    sample = Path(__file__).parent.parent / "sample_data"
    spec = importlib.util.spec_from_file_location("make_samples", sample / "make_samples.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    rng = np.random.default_rng(module.SEED)
    for name, make in (
        ("two_clusters", module.two_clusters),
        ("patients", module.patients),
        ("admissions", module.admissions),
    ):
        assert make(rng).to_csv(index=False) == (sample / f"{name}.csv").read_text(), name
    ages = pd.read_csv(sample / "patients.csv")["age"].to_numpy()
    assert uniform_columns(((ages - 17.5) / 73)[:, None]) == []


# --------------------------------------------------------------------------- 7: sanity limits


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (["--rows", 10**12], "--rows 1000000000000: at most 1e+11 (more than a day of writing"),
        (["--eps", 1e6], "--eps 1e+06 is above 1000"),
    ],
)
def test_absurd_values_are_refused_before_the_work(runner, tmp_path, flags, words):
    data = tmp_path / "d.csv"
    data.write_text(BAD_ROWS)  # reading its rows fails: the refusal comes first
    args = ["--eps", 1, "--bounds", "a=0:5", "--bounds", "b=0:5", *flags, "-o", tmp_path / "o.csv"]
    assert words in one_line_error(invoke(runner, "synth", data, *args), 2)
    assert "1000" in " ".join(invoke(runner, "synth", "--help").output.split())


def test_pca_and_online_replay_refuse_an_absurd_eps(runner, tmp_path):
    data = tmp_path / "d.csv"
    data.write_text(BAD_ROWS)
    bounds = ["--bounds", "a=0:5", "--bounds", "b=0:5", "--eps", 1e5]
    pca = invoke(runner, "pca", data, *bounds, "-k", 1)
    replay = invoke(runner, "online-replay", data, *bounds, "--out-dir", tmp_path / "r")
    for result in (pca, replay):
        assert "is above 1000" in one_line_error(result, 2)


# --------------------------------------------------------------------------- 10: exit status


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_during_the_final_renames_finishes_the_run(
    runner, small_csv, tmp_path, sig, monkeypatch
):
    """A stop signal that arrives while the outputs are renamed into place is held; the renames
    complete, so the run is complete: exit 0 with the output and the report, not 130/143."""
    from dpsynth_cli.cli import _terminate

    previous = signal.signal(signal.SIGTERM, _terminate)  # as `main` installs it
    replace = os.replace
    sent = []

    def replace_and_stop(src, dst):
        if not sent:
            sent.append(sig)
            signal.raise_signal(sig)  # held: recorded, raised or dropped after the renames
        replace(src, dst)

    monkeypatch.setattr(os, "replace", replace_and_stop)
    out = tmp_path / "o.csv"
    args = ["--eps", 1, "--bounds", "age=0:100", "--bounds", "score=0:1", "-o", out, "-q"]
    try:
        result = invoke(runner, "synth", small_csv, *args)
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert sent == [sig]
    assert result.exit_code == 0, result.output
    assert out.exists() and (tmp_path / "o.csv.report.json").exists()


def test_a_ctrl_c_after_the_outputs_are_written_exits_0(runner, small_csv, tmp_path, monkeypatch):
    from dpsynth_cli.console import Feedback

    def interrupted(*_args, **_kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(Feedback, "summary", interrupted)
    out = tmp_path / "o.csv"
    args = ["--eps", 1, "--bounds", "age=0:100", "--bounds", "score=0:1", "-o", out]
    result = invoke(runner, "synth", small_csv, *args)
    assert result.exit_code == 0 and out.exists()
    # the same stop before anything is written: 130, nothing there
    monkeypatch.setattr("dpsynth_cli.cli.synthesize", interrupted)
    result = invoke(runner, "synth", small_csv, *args[:-1], tmp_path / "p.csv")
    assert result.exit_code == 130 and not (tmp_path / "p.csv").exists()


# --------------------------------------------------------------------------- 11: the fast solver


def test_the_fast_solver_is_a_core_dependency():
    import tomllib

    meta = tomllib.loads((Path(__file__).parent.parent / "pyproject.toml").read_text())
    assert any(d.startswith("pylmcf") for d in meta["project"]["dependencies"])


def test_psmm_says_before_the_solve_when_it_falls_back(runner, small_csv, tmp_path, monkeypatch):
    from dpsynth_cli import synth
    from dpsynth_cli.console import Feedback
    from dpsynth_cli.mechanisms import transport

    monkeypatch.setattr(transport, "available", lambda name: name != "lemon")
    said = []
    notice = Feedback.notice
    monkeypatch.setattr(
        Feedback, "notice", lambda self, text: [said.append(text), notice(self, text)]
    )
    solve = synth.MECHANISMS["psmm"]

    def run(*args, **kwargs):
        said.append("solve")
        return solve(*args, **kwargs)

    monkeypatch.setitem(synth.MECHANISMS, "psmm", run)
    args = ["--eps", 1, "--bounds", "age=0:100", "--bounds", "score=0:1", "--mechanism", "psmm"]
    result = invoke(runner, "synth", small_csv, *args, "-o", tmp_path / "o.csv")
    assert result.exit_code == 0, result.output
    (fallback,) = [i for i, text in enumerate(said) if "falls back to scipy's HiGHS" in text]
    assert "pip install pylmcf" in said[fallback] and said[fallback + 1] == "solve"
    monkeypatch.setattr(transport, "available", lambda name: True)
    result = invoke(runner, "synth", small_csv, *args, "-o", tmp_path / "p.csv")
    assert "HiGHS" not in result.stderr
