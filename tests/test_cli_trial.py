"""Issue 38, item 7: the smaller things a new user's trial met (hints on input files, help
texts, API messages, notices, --dry-run, a closed stdout)."""

from __future__ import annotations

import pandas as pd
import pytest

from dpsynth_cli.cli import app
from tests.test_cli_newuser import invoke, one_line_error


def test_a_semicolon_header_without_delimiter_says_which_to_give(runner, tmp_path):
    """No column named: the header line alone (one field holding ';') says --delimiter ';'."""
    data = tmp_path / "d.csv"
    data.write_text("age;income\n" + "".join(f"{i % 90};{i * 10}\n" for i in range(300)))
    hint = "d.csv looks separated by ';' (its header is one field holding ';'): add --delimiter ';'"
    for args in (
        ["synth", data, "--eps", 1, "-o", tmp_path / "o.csv"],
        ["schema", "draft", data],
        ["evaluate", data, data],
    ):
        assert hint in one_line_error(invoke(runner, *args), 2), args
    done = invoke(runner, "evaluate", data, data, "--delimiter", ";", "--json")
    assert done.exit_code == 0, done.output
    # given, a comma reads the header as one column (a name may hold ';')
    draft = invoke(runner, "schema", "draft", data, "--delimiter", ",")
    assert draft.exit_code == 0 and '"age;income"' in draft.stdout


def test_a_parquet_file_named_csv_is_said_to_be_parquet(runner, tmp_path):
    data = tmp_path / "d.csv"
    pd.DataFrame({"a": [1.0, 2.0, 3.0]}).to_parquet(data)
    for args in (
        ["synth", data, "--eps", 1, "--bounds", "a=0:9", "-o", tmp_path / "o.csv"],
        ["schema", "draft", data],
        ["evaluate", data, data],
    ):
        line = one_line_error(invoke(runner, *args), 1)
        assert line.endswith(
            f"{data} looks like a Parquet file: use --input-format parquet or rename it"
        ), line
        assert "UTF-8" not in line
    done = invoke(
        runner, "schema", "draft", data, "--input-format", "parquet"
    )  # the format given: read as Parquet
    assert done.exit_code == 0, done.output
    done = invoke(runner, "evaluate", data, data, "--input-format", "parquet", "--json")
    assert done.exit_code == 0, done.output


@pytest.mark.parametrize("command", ["set", "show", "reset"])
def test_budget_commands_help_says_which_file_not_synths_release(runner, command):
    """`budget set/show/reset --budget` names the file they read or change, not the text of
    synth's --budget (record this release, refuse the run)."""
    result = runner.invoke(app, ["budget", command, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    text = " ".join(result.stdout.split())
    assert "The privacy budget FILE to read or change" in text
    assert "Record this release" not in text and "refuse the run" not in text
    synth = runner.invoke(app, ["synth", "--help"], env={"COLUMNS": "200"})
    assert "Record this release" in " ".join(synth.stdout.split())


def test_api_errors_name_keywords_not_flags(runner, tmp_path):
    """The API's errors come from the command's checks, their flags in the API's keywords."""
    import warnings

    import dpsynth_cli as dp

    frame = pd.DataFrame({"a": [1.0, 2.0, 3.0] * 50, "b": [1.0, 2.0, 3.0] * 50})
    bounds = {"a": (0, 9), "b": (0, 9)}
    cases = [
        (dp.synthesize, {"eps": -1}, "eps= must be a positive finite number"),
        (dp.synthesize, {"eps": 1, "bounds_eps": 5}, "bounds_eps= must be smaller than eps="),
        (dp.synthesize, {"eps": 1, "dim": "3", "bounds": bounds}, "dim=3: must be between 1"),
        (dp.synthesize, {"eps": 1, "seed": -1}, "seed must be a whole number >= 0"),
        (dp.principal_components, {"eps": 1, "k": 0, "bounds": bounds}, "k= must be between"),
        (
            dp.principal_components,
            {"eps": 1, "row_norm": -1, "bounds": bounds},
            "row_norm= must be a positive number, e.g. row_norm=2.2",
        ),
        (
            dp.synthesize,
            {"eps": 1, "columns": ["a"], "bounds_eps": 0.01},
            "bounds={'a': (LOWER, UPPER)} or in schema=",
        ),
    ]
    for function, kwargs, words in cases:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with pytest.raises(dp.DpsynthError) as raised:
                function(
                    frame.assign(a=["x"] * 150) if "columns" in kwargs else frame,
                    budget=False,
                    **kwargs,
                )
        assert words in str(raised.value), (kwargs, str(raised.value))
        assert "--" not in str(raised.value)
        assert isinstance(raised.value, dp.DataError if "columns" in kwargs else dp.UsageError)
    data = tmp_path / "d.csv"
    frame.to_csv(data, index=False)
    command = invoke(runner, "synth", data, "--eps", -1, "--no-budget")
    assert "--eps must be a positive finite number" in one_line_error(command, 2)


def test_dim_notice_gives_a_value_for_every_component_it_lists(runner, tmp_path):
    """`--dim 5` on noise: the notice says none of the 5 components can be told from noise and
    gives 5 released values (before: 3 values for 5 components)."""
    import re

    import numpy as np

    rng = np.random.default_rng(1)
    data = tmp_path / "d.csv"
    pd.DataFrame(rng.random((400, 8)), columns=[f"c{j}" for j in range(8)]).to_csv(
        data, index=False
    )
    bounds = [a for j in range(8) for a in ("--bounds", f"c{j}=0:1")]
    args = ["synth", data, "--eps", 1, *bounds, "--dim", 5, "--seed", 1, "--no-budget"]
    result = invoke(runner, *args, "-o", tmp_path / "o.csv")
    assert result.exit_code == 0, result.output
    text = " ".join(result.stderr.split())
    assert "none of the 5 components can be told from noise" in text, text
    found = re.search(r"released values ([-0-9.e, ]+?) for components ([0-9, ]+) are not", text)
    assert found, text
    values = found.group(1).split(", ")
    assert len(values) == 5 and found.group(2) == "1, 2, 3, 4, 5"


def test_dry_run_says_what_auto_picks_for_a_category_table(runner, tmp_path):
    """--dry-run on declared columns with categories: marginals from the noisy count the rule
    needs (not "privtree" from reading the rule's level clause), and a run picks it."""
    import json

    import numpy as np

    schema = tmp_path / "schema.json"
    columns = {
        "a": {"type": "category", "levels": ["x", "y"]},
        "b": {"type": "category", "levels": ["p", "q", "r"]},
        "c": {"type": "float", "lower": 0, "upper": 1},
        "d": {"type": "integer", "lower": 0, "upper": 9},
    }
    schema.write_text(json.dumps({"columns": columns}))
    rng = np.random.default_rng(2)
    data = tmp_path / "d.csv"
    pd.DataFrame(
        {
            "a": rng.choice(["x", "y"], 2000),
            "b": rng.choice(["p", "q", "r"], 2000),
            "c": rng.random(2000),
            "d": rng.integers(0, 10, 2000),
        }
    ).to_csv(data, index=False)
    args = ["synth", data, "--eps", 1, "--schema", schema, "--no-budget"]
    plan = invoke(runner, *args, "--dry-run")
    assert plan.exit_code == 0, plan.output
    choice = json.loads(plan.stdout)["auto_choice"]
    assert choice.startswith("auto on these 4 columns with level columns")
    assert "marginals from a noisy count of 379 rows; below it privtree" in choice
    report = tmp_path / "r.json"
    done = invoke(runner, *args, "--seed", 1, "-o", tmp_path / "o.csv", "--report", report)
    assert done.exit_code == 0, done.output
    assert json.loads(report.read_text())["mechanism"]["name"] == "marginals"
    numbers = invoke(runner, "synth", data, "--eps", 1, "--bounds", "c=0:1", "--dry-run")
    assert (
        json.loads(numbers.stdout)["auto_choice"]
        == "auto on this column of numbers only: hierarchy"
    )


def test_uniform_notice_does_not_name_a_balanced_two_level_column(runner, tmp_path):
    """A 50/50 boolean/category column comes out 'uniform' by construction (a level's mass is
    spread over its slot): not named in the notice; a uniform number still is."""
    import json

    import numpy as np

    rng = np.random.default_rng(4)
    n = 20_000
    data = tmp_path / "d.csv"
    pd.DataFrame(
        {
            "sex": rng.choice(["f", "m"], n),
            "age": np.clip(rng.normal(40, 8, n), 0, 100).round(1),
            "u": rng.random(n),
        }
    ).to_csv(data, index=False)
    schema = tmp_path / "schema.json"
    columns = {
        "sex": {"type": "category", "levels": ["f", "m"]},
        "age": {"type": "float", "lower": 0, "upper": 100},
        "u": {"type": "float", "lower": 0, "upper": 1},
    }
    schema.write_text(json.dumps({"columns": columns}))
    report = tmp_path / "r.json"
    args = ["synth", data, "--eps", 1, "--schema", schema, "--no-budget", "--seed", 1]
    result = invoke(runner, *args, "-o", tmp_path / "o.csv", "--report", report)
    assert result.exit_code == 0, result.output
    assert "uniform on their bounds: 'u' (either" in result.stderr, result.stderr
    assert "'sex'" not in result.stderr
    # the report still records the test's verdict on every column
    assert "sex" in json.loads(report.read_text())["accuracy"]["signal"]["uniform_columns"]


def test_opening_a_csv_leaves_no_pyarrow_thread_reading_it(tmp_path, monkeypatch):
    """The cause of `schema draft ... | head` printing "terminate called without an active
    exception" (rarely): the header was read by pyarrow's streaming reader over the Python
    feed, whose read-ahead went on in pyarrow's IO threads, calling into Python, after the
    reader was closed and while the command ended. The header now comes from memory: opening
    reads the feed on the calling thread only."""
    import threading

    from dpsynth_cli import io
    from dpsynth_cli.io import csv_read

    monkeypatch.setattr(csv_read, "CSV_BLOCK_BYTES", 1 << 12)  # many blocks to read ahead
    data = tmp_path / "d.csv"
    data.write_text("a,b\n" + "".join(f"{i},{i * 2}\n" for i in range(20_000)))
    threads = []
    read = csv_read._CsvFeed.read

    def recorded(self, n=-1):
        threads.append(threading.current_thread() is threading.main_thread())
        return read(self, n)

    monkeypatch.setattr(csv_read._CsvFeed, "read", recorded)
    with io.open_input(str(data), "csv", None) as source:
        assert source.all_columns == ["a", "b"]
    assert threads and all(threads), threads


def test_schema_draft_into_a_closed_pipe_is_quiet(tmp_path):
    """`schema draft ... | head -c 10`: stdout closed early, stderr stays clean and the exit
    status is the other commands' for a closed stdout (0)."""
    import subprocess
    import sys

    wide = tmp_path / "wide.csv"  # a draft far larger than a pipe's buffer
    wide.write_text(",".join(f"column_{j}" for j in range(3000)) + "\n" + "1," * 2999 + "1\n")
    big = tmp_path / "big.csv"
    big.write_text("a,b\n" + "".join(f"{i},{i}\n" for i in range(200_000)))
    for path in (wide, big):
        cmd = f"'{sys.executable}' -m dpsynth_cli schema draft '{path}' | head -c 10"
        cmd += "; exit ${PIPESTATUS[0]}"
        done = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, check=False)
        assert done.stderr == "" and done.returncode == 0, (path, done)
        assert len(done.stdout) == 10


def test_synth_shows_progress_while_writing(runner, tmp_path, monkeypatch, status_texts):
    """The write phase (seconds at millions of rows) has its own status line with the rows
    written so far, on a terminal (before: nothing after 'synthesising')."""
    from dpsynth_cli.console import Feedback

    texts = status_texts
    monkeypatch.setattr(Feedback, "summary", lambda *args: None)
    data = tmp_path / "d.csv"
    pd.DataFrame({"a": [i % 10 for i in range(3000)]}).to_csv(data, index=False)
    args = ["synth", data, "--eps", 1, "--bounds", "a=0:9", "--rows", 2500, "--no-budget"]
    result = invoke(runner, *args, "--batch-rows", 1000, "-o", tmp_path / "o.csv")
    assert result.exit_code == 0, result.output
    start = texts.index("writing the synthetic rows")
    written = [t for t in texts[start:] if t.startswith("writing:")]
    assert written[-1].startswith("writing: 2,500 of 2,500 rows") and written[-1].endswith("done")
    assert len(written) >= 2  # one per output batch


def test_api_reads_paths_with_commas_and_names_the_parquet_keyword(tmp_path):
    """The API has no delimiter keyword: a path is read with commas as before (a header that
    is one field holding ';' is one column); a Parquet file named .csv is said in keywords."""
    import dpsynth_cli as dp

    data = tmp_path / "d.csv"
    pd.DataFrame({"a": [1.0, 2.0, 3.0]}).to_parquet(data)
    with pytest.raises(dp.DataError) as raised:
        dp.evaluate_synthetic(data, data)
    assert str(raised.value).endswith("use input_format='parquet' or rename it")
    semi = tmp_path / "s.csv"
    semi.write_text("a;b\n" + "".join(f"{i};{i}\n" for i in range(100)))
    with pytest.raises(dp.DpsynthError) as raised:
        dp.evaluate_synthetic(semi, semi)
    assert "looks separated" not in str(raised.value)


def test_a_pass_left_early_stops_pyarrows_read_ahead(tmp_path, monkeypatch):
    """A pass a caller stops (or an error ends) stops its feed: pyarrow's read-ahead then
    reads nothing more (no IO thread keeps calling into Python while the command ends)."""
    from dpsynth_cli import io
    from dpsynth_cli.io import csv_read

    monkeypatch.setattr(csv_read, "CSV_BLOCK_BYTES", 1 << 12)
    data = tmp_path / "d.csv"
    data.write_text("a,b\n" + "".join(f"{i},{i * 2}\n" for i in range(20_000)))
    stopped = []
    stop = csv_read._CsvFeed.stop
    monkeypatch.setattr(csv_read._CsvFeed, "stop", lambda self: [stopped.append(self), stop(self)])
    with io.open_input(str(data), "csv", None, batch_rows=100) as source:
        passes = source.batches()
        assert next(passes).num_rows == 100
        passes.close()
    assert len(stopped) == 1 and stopped[0].read(10) == b""
