"""The README's commands work as written: the Use block and the penguins walk-through."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd

README = Path(__file__).resolve().parent.parent / "README.md"


def block_after(heading: str) -> str:
    """The first ```sh block after `heading` in the README."""
    text = README.read_text()
    start = text.index(heading)
    match = re.search(r"```sh\n(.*?)```", text[start:], re.S)
    assert match, heading
    return match.group(1)


def run_block(block: str, cwd: Path) -> subprocess.CompletedProcess:
    """Run the block with bash -e, `dpsynth` and `python` being this interpreter's."""
    prelude = f'dpsynth() {{ "{sys.executable}" -m dpsynth_cli "$@"; }}\n'
    prelude += f'python() {{ "{sys.executable}" "$@"; }}\nset -euo pipefail\n'
    return subprocess.run(
        ["bash", "-c", prelude + block], cwd=cwd, capture_output=True, text=True, check=False
    )


def test_use_block_runs_as_written(tmp_path):
    rng = np.random.default_rng(0)
    frame = pd.DataFrame(
        {
            "age": rng.integers(18, 90, 2000),
            "income": rng.lognormal(10, 0.6, 2000).round(2),
            "city": rng.choice(["Bern", "Basel"], 2000),
            "day": rng.integers(1, 366, 2000),
        }
    )
    frame.to_csv(tmp_path / "data.csv", index=False)
    frame.to_parquet(tmp_path / "data.parquet")
    schema = {
        "columns": {
            "age": {"type": "integer", "lower": 0, "upper": 120},
            "income": {"type": "float", "lower": 0, "upper": 500000},
        }
    }
    (tmp_path / "schema.json").write_text(json.dumps(schema))
    # 12,000 rows (was 3,000): with fewer, --dim auto's covariance noise would reach above the
    # table's top eigenvalue (0.14) and it would synthesise all columns (issue 37)
    wide = pd.DataFrame(rng.random((12000, 2)) @ rng.random((2, 12)), columns=list("abcdefghijkl"))
    wide.to_parquet(tmp_path / "wide.parquet")
    bounds = {c: {"lower": 0, "upper": 2} for c in wide.columns}
    (tmp_path / "wide.json").write_text(json.dumps({"columns": bounds}))
    done = run_block(block_after("## Use"), tmp_path)
    assert done.returncode == 0, done.stderr
    assert "NOT differentially private" in done.stdout  # evaluate's summary, last
    for name in ("synth.csv", "synth.csv.report.json", "synth.parquet", "run.json"):
        assert (tmp_path / name).exists(), name
    report = json.loads((tmp_path / "wide.synth.parquet.report.json").read_text())
    assert report["mechanism"]["name"] == "lowdim"
    for name in ("wide.synth.parquet", "releases/release-000000001024.parquet"):
        assert (tmp_path / name).exists(), name


def test_online_replay_section_runs_as_written(tmp_path):
    """The two runs of the online-replay section (the second continues the state: nothing new)."""
    rng = np.random.default_rng(1)
    sales = pd.DataFrame({"day": rng.integers(1, 60, 2500), "amount": rng.gamma(2, 50, 2500)})
    sales.to_parquet(tmp_path / "sales.parquet")
    schema = {"columns": {"amount": {"type": "float", "lower": 0, "upper": 1000}}}
    (tmp_path / "sales.json").write_text(json.dumps(schema))
    done = run_block(block_after("## Continual release: `online-replay`"), tmp_path)
    assert done.returncode == 0, done.stderr
    report = json.loads((tmp_path / "releases" / "online-replay.report.json").read_text())
    assert [c["rows"] for c in report["checkpoints"]] == [1000, 2000]
    assert report["checkpoints_this_run"] == []
    assert oct((tmp_path / "state" / "sales").stat().st_mode & 0o777) == "0o700"


def test_penguins_walk_through(tmp_path):
    import palmerpenguins  # noqa: F401  (the test extra; make test installs it)

    done = run_block(block_after("### Worked example: the Palmer penguins"), tmp_path)
    assert done.returncode == 0, done.stderr
    assert "3 columns left out" in done.stderr and "'species'" in done.stderr
    synth = pd.read_csv(tmp_path / "penguins.synth.csv")
    assert list(synth.columns) == [
        "bill_length_mm",
        "bill_depth_mm",
        "flipper_length_mm",
        "body_mass_g",
        "year",
    ]
    assert synth["year"].between(2007, 2009).all() and synth["year"].dtype.kind == "i"
    assert "whole table, W1 on the 0-1 cube" in done.stdout


def test_mixed_tables_section_runs_as_written(tmp_path):
    """The schema draft and the mixed-table synth of the README (the `make demo` table)."""
    sample = Path(__file__).resolve().parent.parent / "sample_data"
    (tmp_path / "sample_data").mkdir()
    for name in ("admissions.csv", "admissions.schema.json"):
        (tmp_path / "sample_data" / name).write_bytes((sample / name).read_bytes())
    done = run_block(block_after("### Mixed tables: categories, booleans, dates"), tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "draft.json").read_text())["columns"]["ward"]["type"].startswith(
        "FILL IN"
    )
    synth = pd.read_csv(tmp_path / "admissions.synth.csv", keep_default_na=False)
    assert list(synth.columns) == list(pd.read_csv(sample / "admissions.csv", nrows=0).columns)
    assert set(synth["ward"]) <= {"cardiology", "surgery", "maternity", "oncology", "other"}
    assert set(synth["smoker"]) <= {"true", "false", ""}
