"""A datetime column's declared resolution (issue 36): `"resolution": "hour"` in the schema and
every written value is a whole hour of the column's wall clock ("minute", "day" likewise; the
default, "second", writes whole seconds as before), within the declared bounds. Rounding released
values is post-processing: no privacy cost. All through the real command (`dpsynth_cli.cli.app`).
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from dpsynth_cli.cli import app
from tests.test_online_cli import run

LOWER, UPPER = "2024-01-01T00:00:00", "2024-03-01T00:00:00"


def _write(tmp_path: Path, column: dict, rows: int = 300) -> tuple[Path, Path]:
    """Hourly times (what a person sees first: none with minutes) and a float column."""
    rng = np.random.default_rng(7)
    start = dt.datetime(2024, 1, 1)
    hours = rng.integers(0, 59 * 24, rows)
    lines = ["score,seen"] + [
        f"{rng.random():.3f},{(start + dt.timedelta(hours=int(h))).isoformat()}" for h in hours
    ]
    data = tmp_path / "in.csv"
    data.write_text("\n".join(lines) + "\n")
    schema = tmp_path / "schema.json"
    seen = {"type": "datetime", "lower": LOWER, "upper": UPPER, **column}
    columns = {"score": {"type": "float", "lower": 0, "upper": 1}, "seen": seen}
    schema.write_text(json.dumps({"columns": columns}))
    return data, schema


def _synth(runner, data: Path, schema: Path, out: Path) -> dict:
    args = ["synth", str(data), "--eps", "2", "--schema", str(schema), "--seed", "4"]
    result = runner.invoke(app, [*args, "--rows", "400", "-o", str(out)])
    assert result.exit_code == 0, result.output
    return json.loads(Path(f"{out}.report.json").read_text())


def _wall_seconds(column: pa.ChunkedArray) -> np.ndarray:
    """Wall-clock seconds since the epoch (a zoned column: its local time)."""
    if column.type.tz is not None:
        column = pc.local_timestamp(column)
    return pc.cast(pc.cast(column, pa.timestamp("s")), pa.int64()).to_numpy()


def _read(out: Path) -> pa.Table:
    if out.suffix == ".parquet":
        return pq.read_table(out)
    return pacsv.read_csv(out)


@pytest.mark.parametrize("suffix", ["csv", "parquet"])
def test_hour_resolution_writes_whole_hours_within_bounds(runner, tmp_path, suffix):
    data, schema = _write(tmp_path, {"resolution": "hour"})
    out = tmp_path / f"out.{suffix}"
    report = _synth(runner, data, schema, out)
    assert report["domain"]["seen"]["resolution"] == "hour"
    seen = _read(out).column("seen")
    wall = _wall_seconds(seen)
    assert len(wall) == 400 and (wall % 3600 == 0).all()
    lo, hi = (
        dt.datetime.fromisoformat(b).replace(tzinfo=dt.UTC).timestamp() for b in (LOWER, UPPER)
    )
    assert ((wall >= lo) & (wall <= hi)).all()
    assert len(np.unique(wall)) > 50  # spread over the range, not collapsed onto a few hours
    if suffix == "csv":
        cells = out.read_text().splitlines()[1:]
        assert all(c.split(",")[1].endswith(':00:00"') for c in cells), cells[:3]


def test_day_resolution_writes_midnights(runner, tmp_path):
    data, schema = _write(tmp_path, {"resolution": "day"})
    out = tmp_path / "out.parquet"
    _synth(runner, data, schema, out)
    wall = _wall_seconds(pq.read_table(out).column("seen"))
    assert (wall % 86400 == 0).all() and len(np.unique(wall)) > 20


def test_zoned_hours_are_whole_local_hours(runner, tmp_path):
    """Asia/Kolkata is UTC+05:30: its whole hours are at :30 in UTC, never on UTC's hour."""
    data, schema = _write(tmp_path, {"resolution": "hour", "timezone": "Asia/Kolkata"})
    out = tmp_path / "out.parquet"
    _synth(runner, data, schema, out)
    seen = pq.read_table(out).column("seen")
    assert seen.type.tz == "Asia/Kolkata"
    assert (_wall_seconds(seen) % 3600 == 0).all()
    utc = pc.cast(pc.cast(seen, pa.timestamp("s", "UTC")), pa.int64()).to_numpy()
    assert (utc % 3600 == 1800).all()
    _synth(runner, data, schema, tmp_path / "out.csv")
    cells = (tmp_path / "out.csv").read_text().splitlines()[1:]
    assert all(c.split(",")[1].endswith(':00:00+05:30"') for c in cells), cells[:3]


def test_second_is_the_default_and_changes_nothing(runner, tmp_path):
    """ "second" declared writes what no resolution writes (same seed: the same file), whole
    seconds, most of them off the hour; the report carries the declaration only when made."""
    data, schema = _write(tmp_path, {"resolution": "second"})
    declared = _synth(runner, data, schema, tmp_path / "second.parquet")
    assert declared["domain"]["seen"]["resolution"] == "second"
    data, schema = _write(tmp_path, {})
    default = _synth(runner, data, schema, tmp_path / "default.parquet")
    assert "resolution" not in default["domain"]["seen"]
    table = pq.read_table(tmp_path / "default.parquet")
    assert table.equals(pq.read_table(tmp_path / "second.parquet"))
    assert (_wall_seconds(table.column("seen")) % 3600 != 0).mean() > 0.9


@pytest.mark.parametrize(
    ("name", "column", "message"),
    [
        ("seen", {"resolution": "week"}, '\'resolution\' must be one of "second", "minute"'),
        ("seen", {"resolution": 3600}, "'resolution' must be one of"),
        ("score", {"resolution": "hour"}, "a float column takes no 'resolution'"),
        (
            "seen",
            {"upper": "2024-01-01T00:30:00", "lower": "2024-01-01T00:10:00", "resolution": "hour"},
            "its bounds contain no whole hour",
        ),
    ],
)
def test_bad_resolutions_are_one_line_usage_errors(runner, tmp_path, name, column, message):
    data, schema = _write(tmp_path, {})
    spec = json.loads(schema.read_text())
    spec["columns"][name].update(column)
    schema.write_text(json.dumps(spec))
    result = runner.invoke(app, ["synth", str(data), "--eps", "1", "--schema", str(schema)])
    assert result.exit_code == 2, result.output
    assert len(result.output.strip().splitlines()) == 1, result.output
    assert f"column '{name}'" in result.output and message in result.output


def test_online_replay_releases_on_the_resolution(runner, tmp_path, monkeypatch):
    """online-replay: every release writes the column on its declared resolution; a state
    continued with another resolution is refused like other declaration changes."""
    data, schema = _write(tmp_path, {"resolution": "hour"}, rows=600)
    monkeypatch.chdir(tmp_path)
    common = ["--eps", "1", "--schema", "schema.json", "--seed", "3", "--state", "st"]
    result = run(runner, "in.csv", *common, "--checkpoints", "every:200", "--out-dir", "rel")
    assert result.exit_code == 0, result.output
    releases = sorted((tmp_path / "rel").glob("release-*.parquet"))
    assert len(releases) == 3
    for path in releases:
        wall = _wall_seconds(pq.read_table(path).column("seen"))
        assert wall.size and (wall % 3600 == 0).all()
    other = json.loads(schema.read_text())
    other["columns"]["seen"]["resolution"] = "day"
    schema.write_text(json.dumps(other))
    refused = run(runner, "in.csv", *common, "--checkpoints", "every:200", "--out-dir", "rel")
    assert refused.exit_code == 3 and "resolution of column 'seen'" in refused.output


def test_evaluate_reads_the_resolution_from_the_report(runner, tmp_path):
    """The report's domain carries the declaration, and `evaluate --from-report` accepts it."""
    data, schema = _write(tmp_path, {"resolution": "minute"})
    out = tmp_path / "out.csv"
    report = _synth(runner, data, schema, out)
    assert report["domain"]["seen"]["resolution"] == "minute"
    flags = ["--from-report", f"{out}.report.json", "--json"]
    result = runner.invoke(app, ["evaluate", str(data), str(out), *flags])
    assert result.exit_code == 0, result.output
    assert "seen" in json.loads(result.stdout)["column_errors"]
