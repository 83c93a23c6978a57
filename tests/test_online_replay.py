"""online-replay as a library call: releases, report, --state resume and refusals, bad input."""

from __future__ import annotations

import hashlib
import json
import os
import sys

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from dpsynth_cli.domain import ColumnSpec
from dpsynth_cli.errors import DataError, PrivacyRefusal, UsageError
from dpsynth_cli.io import open_input
from dpsynth_cli.online.replay import REPORT_NAME, ReplayOptions, parse_checkpoints, replay
from dpsynth_cli.online.stream import from_table, open_stream
from dpsynth_cli.privacy.noise import RandomSource

replay_mod = sys.modules["dpsynth_cli.online.replay"]
SPECS = [ColumnSpec("a", "float", 0.0, 100.0), ColumnSpec("b", "integer", 0, 9)]


def table(n: int, seed: int = 0, reverse: bool = False) -> pa.Table:
    rng = np.random.default_rng(seed)
    time = np.arange(n)
    cols = {
        "time": time[::-1].copy() if reverse else time,
        "a": rng.normal(50, 10, n),
        "b": rng.integers(0, 10, n),
    }
    if reverse:
        cols["a"], cols["b"] = cols["a"][::-1].copy(), cols["b"][::-1].copy()
    return pa.table(cols)


def dirs(tmp_path):
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    return str(out), str(tmp_path / "state")


def listing(path: str) -> dict[str, bytes]:
    return {n: open(os.path.join(path, n), "rb").read() for n in sorted(os.listdir(path))}


def test_checkpoint_specs():
    assert parse_checkpoints("pow2")(0, 40) == [1, 2, 4, 8, 16, 32]
    assert parse_checkpoints("every:100")(150, 420) == [200, 300, 400]
    assert parse_checkpoints("5, 50,500")(5, 500) == [50, 500]
    for bad in ("every:0", "every:x", "0,5", "a,b"):
        with pytest.raises(UsageError):
            parse_checkpoints(bad)


def test_releases_report_and_no_hidden_row_count(tmp_path):
    out, _ = dirs(tmp_path)
    res = replay(
        table(3000),
        SPECS,
        ReplayOptions(1.0, order_by="time", output_format="csv"),
        RandomSource.seeded(1),
        out_dir=out,
    )
    names = sorted(n for n in os.listdir(out) if n.startswith("release-"))
    assert names == [f"release-{2**k:012d}.csv" for k in range(12)]  # sorted = time order
    for k in (0, 5, 11):
        with open(os.path.join(out, names[k])) as fh:
            assert sum(1 for _ in fh) == 2**k + 1  # header + exactly t rows
    text = open(os.path.join(out, REPORT_NAME)).read()
    report = json.loads(text)
    assert report["ledger"]["total_epsilon"] == 1.0 and report["seeded"] is True
    assert "public" in report["privacy_model"].lower()
    assert "3000" not in text  # the row count at the end is not a checkpoint: never reported
    assert [c["rows"] for c in report["checkpoints"]] == [2**k for k in range(12)]
    assert res.files[-1].endswith(REPORT_NAME)


def test_order_by_sorts_the_rows(tmp_path):
    """A table given in reverse time order replays exactly like the sorted one."""
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    opts = ReplayOptions(1.0, order_by="time", checkpoints="100,500")
    replay(table(600), SPECS, opts, RandomSource.seeded(4), out_dir=str(a))
    replay(table(600, reverse=True), SPECS, opts, RandomSource.seeded(4), out_dir=str(b))
    assert listing(str(a)) == listing(str(b))


def test_missing_order_by_values_are_an_error(tmp_path):
    out, st = dirs(tmp_path)
    t = table(100)
    t = t.set_column(0, "time", pa.array([None] + list(range(1, 100)), pa.int64()))
    with pytest.raises(DataError, match="missing values"):
        replay(
            t,
            SPECS,
            ReplayOptions(1.0, order_by="time"),
            RandomSource.seeded(1),
            out_dir=out,
            state_dir=st,
        )
    assert os.listdir(out) == []


def test_resume_continues_and_refuses_other_tables(tmp_path):
    out, st = dirs(tmp_path)
    full = table(2500)
    opts = ReplayOptions(1.0, order_by="time")
    replay(full.slice(0, 1500), SPECS, opts, RandomSource.seeded(1), out_dir=out, state_dir=st)
    first = listing(out)
    # appended rows with a new column: the declared columns continue
    grown = full.append_column("c", pa.array(np.ones(2500)))
    res = replay(grown, SPECS, opts, RandomSource.seeded(2), out_dir=out, state_dir=st)
    assert res.report["checkpoints_this_run"] == [2048]
    assert {k: v for k, v in listing(out).items() if k in first and k != REPORT_NAME} == {
        k: v for k, v in first.items() if k != REPORT_NAME
    }  # earlier releases untouched, never released again
    state_bytes = open(os.path.join(st, "state.npz"), "rb").read()
    before = listing(out)
    refusals = [
        (table(2600, seed=9), SPECS, opts, "differ"),  # another table
        (full.slice(0, 2000), SPECS, opts, "fewer rows"),
        (grown, SPECS + [ColumnSpec("c", "float", 0.0, 1.0)], opts, "columns"),
        (full, [SPECS[0], ColumnSpec("b", "integer", 0, 20)], opts, "bounds"),
        (full, SPECS, ReplayOptions(2.0, order_by="time"), "--eps"),
        (full, SPECS, ReplayOptions(1.0, order_by="time", allocation="literal"), "allocation"),
    ]
    for tbl, specs, o, why in refusals:
        with pytest.raises(PrivacyRefusal, match=why) as err:
            replay(tbl, specs, o, RandomSource.seeded(3), out_dir=out, state_dir=st)
        assert "\n" not in str(err.value)
    assert open(os.path.join(st, "state.npz"), "rb").read() == state_bytes  # nothing lost
    assert listing(out) == before


def test_calendar_release_needs_public_counts(tmp_path):
    out, st = dirs(tmp_path)
    with pytest.raises(UsageError, match="row-counts-public"):
        replay(
            table(50),
            SPECS,
            ReplayOptions(1.0, release_at_end=True),
            RandomSource.seeded(1),
            out_dir=out,
        )
    opts = ReplayOptions(1.0, release_at_end=True, row_counts_public=True, checkpoints="10")
    res = replay(table(50), SPECS, opts, RandomSource.seeded(1), out_dir=out)
    assert [c["rows"] for c in res.report["checkpoints"]] == [10, 50]


def test_crash_after_commit_is_finished_by_the_next_run(tmp_path, monkeypatch):
    """Killed between the state save (commit) and the renames: the next run publishes the
    committed releases and does not release those checkpoints again."""
    out, st = dirs(tmp_path)
    opts = ReplayOptions(1.0, checkpoints="every:100")
    real = os.replace

    def crash(a, b):
        if str(a).endswith(".pending"):
            raise KeyboardInterrupt
        return real(a, b)

    monkeypatch.setattr(replay_mod.os, "replace", crash)
    with pytest.raises(KeyboardInterrupt):
        replay(
            table(450).slice(0, 350), SPECS, opts, RandomSource.seeded(1), out_dir=out, state_dir=st
        )
    monkeypatch.setattr(replay_mod.os, "replace", real)
    assert not [n for n in os.listdir(out) if n.startswith("release-")]
    res = replay(table(450), SPECS, opts, RandomSource.seeded(2), out_dir=out, state_dir=st)
    names = sorted(n for n in os.listdir(out) if n.startswith("release-"))
    assert names == [f"release-{t:012d}.parquet" for t in (100, 200, 300, 400)]
    assert res.report["checkpoints_this_run"] == [400]
    assert pq.read_table(os.path.join(out, names[-1])).num_rows == 400


def test_crash_before_commit_publishes_nothing(tmp_path, monkeypatch):
    out, st = dirs(tmp_path)
    opts = ReplayOptions(1.0, checkpoints="every:100")

    def die(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(replay_mod.state_io, "save", die)
    with pytest.raises(KeyboardInterrupt):
        replay(table(250), SPECS, opts, RandomSource.seeded(1), out_dir=out, state_dir=st)
    monkeypatch.undo()
    res = replay(table(250), SPECS, opts, RandomSource.seeded(2), out_dir=out, state_dir=st)
    assert res.report["checkpoints_this_run"] == [100, 200]  # the lost run released nothing
    assert not [n for n in os.listdir(out) if n.endswith(".pending")]


def test_undeclared_bounds_and_bad_flags_are_refused_before_reading(tmp_path):
    out, _ = dirs(tmp_path)
    with pytest.raises(UsageError, match="bounds"):
        replay(
            table(10),
            [ColumnSpec("a", "float")],
            ReplayOptions(1.0),
            RandomSource.seeded(1),
            out_dir=out,
        )
    with pytest.raises(UsageError):
        replay(
            table(10),
            SPECS,
            ReplayOptions(1.0, allocation="x"),
            RandomSource.seeded(1),
            out_dir=out,
        )


def state_entries(st: str) -> dict[str, bytes]:
    """The state's arrays and metadata (the zip's own timestamps aside)."""
    with np.load(os.path.join(st, "state.npz")) as z:
        return {k: z[k].tobytes() for k in z.files}


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
@pytest.mark.parametrize("mode", ["whole", "new"])
def test_streamed_input_replays_as_the_table_in_memory(tmp_path, monkeypatch, fmt, mode):
    """A sorted input streamed in batches of 97 rows (fed in steps of 64) gives byte for byte
    the releases, report and state of the same input read whole, in two runs with --state (the
    first 700 rows, then the rest): the whole-mode digest, computed batch by batch across a
    batch boundary, is sha256 of all the rows in [0,1]^d, as when it was computed at once."""
    monkeypatch.setattr(replay_mod, "BATCH_ROWS", 64)
    full = table(1500)
    parts = [full.slice(0, 700), full if mode == "whole" else full.slice(700)]
    paths = [str(tmp_path / f"in{i}.{fmt}") for i in range(2)]
    for part, path in zip(parts, paths, strict=True):
        (pacsv.write_csv if fmt == "csv" else pq.write_table)(part, path)
    opts = ReplayOptions(
        1.0,
        order_by="time",
        checkpoints="every:200",
        input_mode=mode,
        release_at_end=True,
        row_counts_public=True,
    )
    seen = {}
    for how in ("memory", "stream"):
        out, st = str(tmp_path / how / "out"), str(tmp_path / how / "state")
        for i, path in enumerate(paths):
            with open_input(path, fmt, ["time", "a", "b"], batch_rows=97) as src:
                rows = src.read_all() if how == "memory" else open_stream(src, SPECS, "time")
                assert how == "memory" or not rows.sorted_in_memory
                replay(rows, SPECS, opts, RandomSource.seeded(i + 1), out_dir=out, state_dir=st)
        seen[how] = listing(out), state_entries(st)
    assert seen["memory"] == seen["stream"]
    assert len(seen["stream"][0]) == 10  # every:200 to 1400, 700 and 1500 at the ends, report
    meta = json.loads(seen["stream"][1]["meta"])
    with open_input(paths[1], fmt, ["time", "a", "b"]) as src:
        [unit] = from_table(src.read_all(), SPECS, None).batches
    whole = hashlib.sha256(unit.tobytes()).hexdigest()
    assert meta["prefix_sha256"] == (whole if mode == "whole" else None)


@pytest.mark.parametrize(
    "times, in_order",
    [
        (["1", "2", "9", "10", "10"], True),  # numbers in text, ties: streamed
        (["1", "10", "2"], False),  # sorted as text, not as numbers
        (["2026-01-02", "2026-01-02T10:00", "2026-02-01", "2026-10-01"], True),
        (["b", "a10"], False),
        ([3, 4, 1, 2], False),  # each batch of two rises, but not across the batches
        ([1.0, 1.5, 2.0, 7.0], True),
    ],
)
def test_inputs_in_order_are_streamed(tmp_path, times, in_order):
    """The pass over the --order-by column alone streams a file exactly when the in-memory
    sort would keep it as it is (read in batches of two rows)."""
    path = str(tmp_path / "s.parquet")
    n = len(times)
    pq.write_table(pa.table({"time": times, "a": np.linspace(0, 100, n), "b": [1] * n}), path)
    with open_input(path, "parquet", ["time", "a", "b"], batch_rows=2) as src:
        rows = open_stream(src, SPECS, "time")
        assert rows.rows == n and rows.sorted_in_memory is not in_order
        streamed = np.concatenate(list(rows.batches))
        assert streamed.tobytes() == from_table(src.read_all(), SPECS, "time").batches[0].tobytes()


def test_missing_times_are_found_before_the_stream_starts(tmp_path):
    path = str(tmp_path / "s.csv")
    (tmp_path / "s.csv").write_text("time,a,b\n1,5,1\n2,6,2\n,7,3\n4,8,4\n")
    with open_input(path, "csv", ["time", "a", "b"], batch_rows=2) as src:
        with pytest.raises(DataError, match="'time' has missing values"):
            open_stream(src, SPECS, "time")


def test_a_file_that_changes_between_the_passes_is_an_error(tmp_path):
    """The row count comes from the first pass; a file rewritten before the second ends in an
    error (before the run could commit anything), not in a stream of another length."""
    path = str(tmp_path / "s.parquet")
    pq.write_table(table(10), path)
    with open_input(path, "parquet", ["time", "a", "b"]) as src:
        rows = open_stream(src, SPECS, "time")
        pq.write_table(table(12), path)
        with pytest.raises(DataError, match="changed while it was read"):
            list(rows.batches)
