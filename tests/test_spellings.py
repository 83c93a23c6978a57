"""Values written as the input spells them (issue 38, item 3): a boolean's declared "true" /
"false" text is read and written (CSV and Parquet); without one the report says what a boolean
is written as; a zoned datetime is written with an ISO 8601 offset (-05:00, not -0500).

All through the real command (`dpsynth_cli.cli.app`). `schema draft` reads no value, so it
proposes no spellings (tests/test_mixed_types.py::test_schema_draft_reads_no_value).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from dpsynth_cli.cli import app


def _write(tmp_path: Path, answers: list[str], schema: dict) -> tuple[Path, Path]:
    rng = np.random.default_rng(3)
    lines = ["score,answer"] + [f"{rng.random():.3f},{a}" for a in answers]
    data = tmp_path / "in.csv"
    data.write_text("\n".join(lines) + "\n")
    path = tmp_path / "schema.json"
    path.write_text(json.dumps(schema))
    return data, path


YES_NO = {
    "columns": {
        "score": {"type": "float", "lower": 0, "upper": 1},
        "answer": {"type": "boolean", "true": "yes", "false": "no"},
    }
}


def _synth(runner, data: Path, schema: Path, out: Path, *extra: str):
    args = ["synth", str(data), "--eps", "2", "--schema", str(schema), "--seed", "4"]
    result = runner.invoke(app, [*args, "--rows", "300", "-o", str(out), *extra])
    assert result.exit_code == 0, result.output
    return json.loads(Path(f"{out}.report.json").read_text())


@pytest.mark.parametrize("suffix", ["csv", "parquet"])
def test_declared_spellings_round_trip(runner, tmp_path, suffix):
    """yes/no in, yes/no out (a text column in Parquet too), never true/false; the report
    states the declared spellings."""
    answers = ["yes"] * 200 + ["no"] * 100 + ["YES", " No "]
    data, schema = _write(tmp_path, answers, YES_NO)
    out = tmp_path / f"out.{suffix}"
    report = _synth(runner, data, schema, out)
    if suffix == "csv":
        text = out.read_text()
        assert "true" not in text.lower() and "false" not in text.lower()
        table = pacsv.read_csv(out, convert_options=pacsv.ConvertOptions(strings_can_be_null=True))
    else:
        table = pq.read_table(out)
    assert table.schema.field("answer").type == pa.string()
    values = table.column("answer").to_pylist()
    assert set(values) == {"yes", "no"}  # both sides kept (eps 2, 2:1 shares)
    assert values.count("yes") > values.count("no")
    assert report["domain"]["answer"]["written"] == {"true": "yes", "false": "no"}
    assert report["domain"]["answer"]["written_source"] == "schema"


def test_a_declared_spelling_wins_over_the_other_sides_default(runner, tmp_path):
    """ "false": "y" makes "y" false (by default it is true) and "true": "n" makes "n" true:
    every cell below is false, so the output is almost all "y"."""
    schema = {
        "columns": {
            "score": {"type": "float", "lower": 0, "upper": 1},
            "answer": {"type": "boolean", "true": "n", "false": "y"},
        }
    }
    data, path = _write(tmp_path, ["y", "Y", "no", "0"] * 100, schema)
    out = tmp_path / "out.csv"
    _synth(runner, data, path, out, "--eps", "4")
    values = pacsv.read_csv(out).column("answer").to_pylist()
    assert values.count("y") > 0.9 * len(values)


def test_without_spellings_the_report_says_what_was_written(runner, tmp_path):
    schema = {
        "columns": {
            "score": {"type": "float", "lower": 0, "upper": 1},
            "answer": {"type": "boolean"},
        }
    }
    data, path = _write(tmp_path, ["Y", "N", "Y"] * 100, schema)
    report = _synth(runner, data, path, tmp_path / "out.csv")
    assert report["domain"]["answer"]["written"] == {"true": "true", "false": "false"}
    assert report["domain"]["answer"]["written_source"] == "default"
    assert set(pacsv.read_csv(tmp_path / "out.csv").column("answer").to_pylist()) <= {True, False}
    text = (tmp_path / "out.csv").read_text().splitlines()[1:]
    assert {line.split(",")[1] for line in text} <= {"true", "false"}


def test_zoned_datetimes_are_written_with_an_iso_offset(runner, tmp_path):
    rng = np.random.default_rng(5)
    lines = ["seen"] + [f"2024-01-{d:02d}T10:00:00-05:00" for d in rng.integers(1, 29, 200)]
    data = tmp_path / "t.csv"
    data.write_text("\n".join(lines) + "\n")
    schema = tmp_path / "t.json"
    bounds = {"lower": "2024-01-01T00:00:00-05:00", "upper": "2024-02-01T00:00:00-05:00"}
    schema.write_text(json.dumps({"columns": {"seen": {"type": "datetime", **bounds}}}))
    out = tmp_path / "out.csv"
    _synth(runner, data, schema, out)
    cells = [c.strip('"') for c in out.read_text().splitlines()[1:]]
    assert cells and all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d-05:00", c) for c in cells), (
        cells[:3]
    )


@pytest.mark.parametrize(
    ("column", "message"),
    [
        ({"true": "yes"}, "declare both 'true' and 'false' spellings"),
        ({"false": "no"}, "declare both 'true' and 'false' spellings"),
        ({"true": "", "false": "no"}, "'true' must be a non-empty string"),
        ({"true": "yes", "false": 0}, "'false' must be a non-empty string"),
        ({"true": " yes", "false": "no"}, "'true' must be a non-empty string without outer"),
        ({"true": "Yes", "false": "yes"}, "'true' and 'false' must be different"),
    ],
)
def test_bad_spellings_are_one_line_usage_errors(runner, tmp_path, column, message):
    data, path = _write(
        tmp_path, ["yes", "no"] * 10, {"columns": {"answer": {"type": "boolean", **column}}}
    )
    result = runner.invoke(app, ["synth", str(data), "--eps", "1", "--schema", str(path)])
    assert result.exit_code == 2, result.output
    assert len(result.output.strip().splitlines()) == 1
    assert "column 'answer'" in result.output and message in result.output


def test_spellings_belong_to_booleans(runner, tmp_path):
    schema = {"columns": {"answer": {"type": "category", "levels": ["a"], "true": "a"}}}
    data, path = _write(tmp_path, ["a"] * 10, schema)
    result = runner.invoke(app, ["synth", str(data), "--eps", "1", "--schema", str(path)])
    assert result.exit_code == 2 and "a category column takes no 'true'" in result.output


def test_evaluate_reads_the_spellings_from_the_schema_and_the_report(runner, tmp_path):
    """Spellings that are no default text (si/non) are read back by evaluate, with the schema
    or with the synth report (--from-report), and name the levels."""
    schema = {
        "columns": {
            "score": {"type": "float", "lower": 0, "upper": 1},
            "answer": {"type": "boolean", "true": "si", "false": "non"},
        }
    }
    data, path = _write(tmp_path, ["si"] * 150 + ["non"] * 150, schema)
    out = tmp_path / "out.csv"
    report = _synth(runner, data, path, out)
    assert report["domain"]["answer"]["true"] == "si"
    for flags in (["--schema", str(path)], ["--from-report", f"{out}.report.json"]):
        result = runner.invoke(app, ["evaluate", str(data), str(out), *flags, "--json"])
        assert result.exit_code == 0, result.output
        levels = json.loads(result.stdout)["column_errors"]["answer"]["levels"]
        assert set(levels) == {"si", "non"}
        assert abs(levels["si"]["real"] - 0.5) < 1e-9 and levels["si"]["synthetic"] > 0.2
