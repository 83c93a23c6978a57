"""`dpsynth pca` end to end: the components table and report, usage errors, and a table that
differs in one row (the output's shape, the report and the exit status come from declarations)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dpsynth_cli import pca as pca_module
from dpsynth_cli.cli import app
from tests.conftest import SECRET

BOUNDS = ["--bounds", "a=0:10", "--bounds", "b=0:1", "--bounds", "c=-5:5"]


def pca(runner, *args):
    return runner.invoke(app, ["pca", *map(str, args)])


def line_table(tmp_path: Path, n: int = 20_000, name: str = "t.csv") -> Path:
    """Rows near the line (a, b, c) = (5, 0.5, 0) + t (4, 0.4, -4) in the bounds' box: in unit-
    cube coordinates the direction is (1, 1, -1) / sqrt(3)."""
    rng = np.random.default_rng(3)
    t = rng.uniform(-1, 1, n)
    noise = rng.normal(scale=0.01, size=(n, 3))
    frame = pd.DataFrame(
        {
            "a": 5 + 4 * t + 10 * noise[:, 0],
            "b": 0.5 + 0.4 * t + noise[:, 1],
            "c": -4 * t + 10 * noise[:, 2],
        }
    )
    path = tmp_path / name
    frame.to_csv(path, index=False)
    return path


@pytest.mark.parametrize("delta", ["0", "1e-6"])
def test_components_table_and_report(runner, tmp_path, delta):
    src = line_table(tmp_path)
    out = tmp_path / "pcs.csv"
    result = pca(runner, src, "--eps", 1, *BOUNDS, "-k", 2, "--delta", delta, "-o", out)
    assert result.exit_code == 0, result.output
    table = pd.read_csv(out)
    assert list(table.columns) == [
        "component",
        "eigenvalue_unit_cube",
        "explained_variance",
        "coordinates",
        "a",
        "b",
        "c",
    ]
    assert table["component"].tolist() == [1, 2]
    assert table["coordinates"].tolist() == ["unit-cube", "unit-cube"]
    report = json.loads((tmp_path / "pcs.csv.report.json").read_text())
    assert report["method"] == ("laplace-cov" if delta == "0" else "dp-gauss-1")
    assert report["privacy"]["total_epsilon"] <= 1.0 + 1e-9
    assert report["seeded"] is False and report["release"] == "ok"
    unit = np.array(report["components_unit_cube"])
    assert np.allclose(unit @ unit.T, np.eye(2), atol=1e-9)
    first = unit[0] * np.sign(unit[0, 0])
    assert np.allclose(first, np.array([1, 1, -1]) / np.sqrt(3), atol=0.05)
    # the file's directions are the ones computed: unit-cube coordinates, as the report's
    assert np.allclose(table[["a", "b", "c"]].to_numpy(), unit)
    assert report["units"]["written"] == "unit-cube"
    assert table["explained_variance"].iloc[0] > 0.9


def test_stdout_parquet_and_seed(runner, tmp_path):
    src = line_table(tmp_path, 2000)
    outs = []
    for name in ("x.parquet", "y.parquet"):
        out = tmp_path / name
        args = (src, "--eps", 1, *BOUNDS, "-k", 1, "--seed", 4, "-o", out)
        assert pca(runner, *args).exit_code == 0
        outs.append(pd.read_parquet(out))
        report = json.loads(Path(str(out) + ".report.json").read_text())
        assert "NOT FOR RELEASE" in report["release"]
    pd.testing.assert_frame_equal(*outs)
    result = pca(runner, src, "--eps", 1, *BOUNDS, "-k", 1)
    assert result.exit_code == 0 and result.stdout.startswith('"component"')


@pytest.mark.parametrize(
    "args, message",
    [
        (["-k", "4"], "-k must be between 1 and the number of columns (3)"),
        (["-k", "0"], "-k must be between 1"),
        (["--method", "dp-gauss-1"], "--delta must be in (0, 1)"),
        (["--method", "laplace-cov", "--delta", "0.1"], "use --delta 0"),
        (["--delta", "1"], "--delta must be in [0, 1)"),
        (["--method", "magic"], "--method must be one of"),
        (["--neighboring", "cousins"], "--neighboring must be one of"),
        (["--row-norm", "0"], "--row-norm must be a positive number"),
        (["--row-norm", "-1"], "--row-norm must be a positive number"),
        (["--row-norm", "nan"], "--row-norm must be a positive number"),
        (["--units", "metres"], "--units must be one of unit-cube, original"),
        (
            ["--units", "original", "--method", "k-dp-pca", "--delta", "1e-6"],
            "--units original re-decomposes a released covariance, which --method k-dp-pca",
        ),
    ],
)
def test_usage_errors_are_one_line_and_write_nothing(runner, tmp_path, args, message):
    src = line_table(tmp_path, 200)
    out = tmp_path / "pcs.csv"
    result = pca(runner, src, "--eps", 1, *BOUNDS, *args, "-o", out)
    assert result.exit_code == 2, result.output
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not out.exists() and not Path(str(out) + ".report.json").exists()


def test_every_column_needs_declared_bounds(runner, tmp_path):
    src = line_table(tmp_path, 200)
    args = ("--columns", "a,b,c", "--bounds", "a=0:10", "-o", tmp_path / "p.csv")
    result = pca(runner, src, "--eps", 1, *args)
    assert result.exit_code == 2
    assert "none declared for b, c" in result.stderr
    assert not (tmp_path / "p.csv").exists()


ODD_ROWS = {
    "text cell": "abc,0.5,1",
    "huge number": f"{SECRET * 1e300},0.5,1",
    "missing cell": ",0.5,1",
    "inf": "inf,-inf,nan",
}


ROW_NORM_FLAGS = {
    "box": [],
    "row-norm": ["--row-norm", "0.3"],
    "row-norm original": ["--row-norm", "0.3", "--units", "original", "--delta", "1e-6"],
}


@pytest.mark.parametrize("flags", ROW_NORM_FLAGS)
@pytest.mark.parametrize("row", ODD_ROWS)
def test_one_row_changes_nothing_outside_the_release(runner, tmp_path, monkeypatch, row, flags):
    """The real command on a table and on the same table plus one odd row, with the release fed
    the same fixed rows on both sides (and the same seed): output bytes, report, messages and
    exit status must be equal, so no column, type or error depends on a value (also with
    --row-norm, where the odd row lies far outside the ball, and --units original)."""
    real = pca_module.run_pca
    fixed = np.random.default_rng(0).random((500, 3))
    monkeypatch.setattr(pca_module, "run_pca", lambda X, **kw: real(fixed, **kw))
    base = tmp_path / "base.csv"
    base.write_text("a,b,c\n1,0.2,3\n4,0.9,-1\n")
    plus = tmp_path / "plus.csv"
    plus.write_text(base.read_text() + ODD_ROWS[row] + "\n")
    seen = []
    for src in (base, plus):
        out = tmp_path / f"{src.stem}.out.csv"
        rep = tmp_path / f"{src.stem}.json"
        args = (src, "--eps", 1, *BOUNDS, "--seed", 9, "-o", out, "--report", rep)
        result = pca(runner, *args, *ROW_NORM_FLAGS[flags])
        assert result.exit_code == 0, result.output
        report = json.loads(rep.read_text())
        report["command"] = report["output"]["path"] = None
        seen.append((result.exit_code, result.stderr, out.read_bytes(), report))
    assert seen[0] == seen[1]
    assert str(SECRET)[:6] not in json.dumps(seen[1][3])


def test_no_complete_row_still_releases_k_components(runner, tmp_path):
    src = tmp_path / "empty.csv"
    src.write_text("a,b,c\n,,\n")
    out = tmp_path / "pcs.csv"
    result = pca(runner, src, "--eps", 1, *BOUNDS, "-k", 3, "-o", out)
    assert result.exit_code == 0, result.output
    assert len(pd.read_csv(out)) == 3


def test_help_explains_every_option_with_an_example(runner):
    from typer.main import get_command

    result = runner.invoke(app, ["pca", "--help"])
    assert result.exit_code == 0 and "never a per-row" in result.output.replace("\n", " ")
    for param in get_command(app).commands["pca"].params:
        if param.param_type_name == "option" and param.name != "help":
            assert "e.g." in (param.help or ""), param.name


@pytest.mark.parametrize("method", ["dp-gauss-2", "dp-power"])
def test_baseline_methods_from_the_cli(runner, tmp_path, method):
    """The two Appendix G baselines run end to end; dp-gauss-2's eigenvalues are not released
    (empty cells and JSON null), and its report carries the PTR test's delta share."""
    src = line_table(tmp_path)
    out = tmp_path / "pcs.csv"
    result = pca(
        runner, src, "--eps", 1, *BOUNDS, "-k", 1, "--delta", "1e-6", "--method", method, "-o", out
    )
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "pcs.csv.report.json").read_text())
    assert report["method"] == method and report["privacy"]["total_epsilon"] <= 1.0 + 1e-9
    table = pd.read_csv(out)
    assert table["component"].tolist() == [1]
    if method == "dp-gauss-2":
        assert (
            report["eigenvalues_unit_cube"] == [None] and table["eigenvalue_unit_cube"].isna().all()
        )
        assert report["constants"]["PTR_DELTA_SHARE"] == 0.1


def test_a_column_named_like_the_tables_own_is_a_usage_error(runner, tmp_path):
    """The components table has columns of its own (component, coordinates, ...): an input
    column of that name would be overwritten, so it is refused before any row is read."""
    path = tmp_path / "t.csv"
    path.write_text("coordinates,b\n1,2\n3,4\n")
    result = pca(runner, path, "--eps", "1", "--bounds", "coordinates=0:5", "--bounds", "b=0:5")
    assert result.exit_code == 2
    assert "'coordinates'" in result.output and "rename" in result.output
