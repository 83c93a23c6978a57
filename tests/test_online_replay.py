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
from dpsynth_cli.online import state as state_io
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


def listing(path: str, files_only: bool = False) -> dict[str, bytes]:
    names = sorted(os.listdir(path))
    if files_only:
        names = [n for n in names if os.path.isfile(os.path.join(path, n))]
    return {n: open(os.path.join(path, n), "rb").read() for n in names}


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


def staged(st: str) -> dict[str, bytes]:
    return listing(os.path.join(st, state_io.STAGING))


def test_crash_after_commit_is_finished_by_the_next_run(tmp_path, monkeypatch):
    """Killed between the state save (commit) and the moves into OUT_DIR: the next run (another
    seed) publishes the committed releases, the very files staged (no checkpoint drawn twice),
    and does not release those checkpoints again."""
    out, st = dirs(tmp_path)
    opts = ReplayOptions(1.0, checkpoints="every:100")

    def crash(a, b):
        raise KeyboardInterrupt

    monkeypatch.setattr(replay_mod, "move_file", crash)
    with pytest.raises(KeyboardInterrupt):
        replay(
            table(450).slice(0, 350), SPECS, opts, RandomSource.seeded(1), out_dir=out, state_dir=st
        )
    monkeypatch.undo()
    assert os.listdir(out) == []
    drawn = staged(st)
    assert sorted(drawn) == [f"release-{t:012d}.parquet" for t in (100, 200, 300)]
    res = replay(table(450), SPECS, opts, RandomSource.seeded(2), out_dir=out, state_dir=st)
    names = sorted(n for n in os.listdir(out) if n.startswith("release-"))
    assert names == [f"release-{t:012d}.parquet" for t in (100, 200, 300, 400)]
    assert all(listing(out)[n] == drawn[n] for n in drawn)
    assert res.report["checkpoints_this_run"] == [400]
    assert pq.read_table(os.path.join(out, names[-1])).num_rows == 400
    assert staged(st) == {}


def test_releases_wait_for_the_commit_where_only_the_owner_can_read(tmp_path, monkeypatch):
    """Issue 22, finding 3: at the commit point OUT_DIR holds nothing of the run; its releases
    are in STATE_DIR/staging (0700). Stopped there (SIGTERM, Ctrl-C) the run leaves nothing in
    either, and the next run draws those checkpoints from the committed state, which no
    observer can have seen drawn before."""
    out, st = dirs(tmp_path)
    opts = ReplayOptions(1.0, checkpoints="every:100")
    seen = []

    def die(state_dir, engine, meta):
        seen.append((listing(out), staged(st), os.stat(os.path.join(st, "staging")).st_mode))
        raise KeyboardInterrupt

    monkeypatch.setattr(replay_mod.state_io, "save", die)
    with pytest.raises(KeyboardInterrupt):
        replay(table(250), SPECS, opts, RandomSource.seeded(1), out_dir=out, state_dir=st)
    monkeypatch.undo()
    [(public, private, mode)] = seen
    assert public == {} and mode & 0o777 == 0o700
    assert sorted(private) == [f"release-{t:012d}.parquet" for t in (100, 200)]
    assert os.listdir(out) == [] and staged(st) == {}
    res = replay(table(250), SPECS, opts, RandomSource.seeded(2), out_dir=out, state_dir=st)
    assert res.report["checkpoints_this_run"] == [100, 200]  # the lost run released nothing
    assert set(listing(out)) == {f"release-{t:012d}.parquet" for t in (100, 200)} | {REPORT_NAME}


def test_draws_of_a_killed_run_are_deleted_unseen(tmp_path):
    """SIGKILL before the commit leaves staged files (and temporary files) behind: the next run
    deletes them, and none of their bytes reaches OUT_DIR."""
    out, st = dirs(tmp_path)
    opts = ReplayOptions(1.0, checkpoints="every:100")
    first = table(250).slice(0, 150)
    replay(first, SPECS, opts, RandomSource.seeded(1), out_dir=out, state_dir=st)
    junk = {"release-000000000200.parquet": b"killed", ".tmp-x": b"half"}
    for name, data in junk.items():
        with open(os.path.join(st, state_io.STAGING, name), "wb") as fh:
            fh.write(data)
    replay(table(250), SPECS, opts, RandomSource.seeded(2), out_dir=out, state_dir=st)
    assert staged(st) == {}
    assert pq.read_table(os.path.join(out, "release-000000000200.parquet")).num_rows == 200


def test_without_state_releases_wait_in_a_private_temporary_directory(tmp_path, monkeypatch):
    """No --state: the releases wait in a new 0700 directory outside OUT_DIR, removed when the
    run ends or stops; one left by a killed run (its process gone) is removed by the next."""
    out, _ = dirs(tmp_path)
    monkeypatch.setattr(replay_mod.tempfile, "tempdir", str(tmp_path / "tmp"))
    os.makedirs(tmp_path / "tmp" / "dpsynth-staging-999999999-x")
    real, where = replay_mod.write_outputs, []

    def write(data, path, *a, **k):
        where.append((os.path.dirname(path), listing(out)))
        if len(where) == 2:
            raise KeyboardInterrupt
        return real(data, path, *a, **k)

    monkeypatch.setattr(replay_mod, "write_outputs", write)
    opts = ReplayOptions(1.0, checkpoints="every:100")
    with pytest.raises(KeyboardInterrupt):
        replay(table(250), SPECS, opts, RandomSource.seeded(1), out_dir=out)
    directory = where[0][0]
    assert os.path.dirname(directory) == str(tmp_path / "tmp") and where[1][1] == {}
    assert os.listdir(out) == [] and os.listdir(tmp_path / "tmp") == []
    monkeypatch.setattr(replay_mod, "write_outputs", real)
    replay(table(250), SPECS, opts, RandomSource.seeded(1), out_dir=out)
    assert len(listing(out)) == 3 and os.listdir(tmp_path / "tmp") == []


def test_an_uncommitted_release_of_an_older_version_stops_the_state(tmp_path):
    """Before issue 22 releases were staged as readable hidden files in OUT_DIR. One left by a
    run killed before its commit may have been read: continuing the state would draw its
    checkpoint again, so the run is refused (exit 3) until the user deletes it. One the state
    lists (killed after the commit) is published as before."""
    out, st = dirs(tmp_path)
    opts = ReplayOptions(1.0, checkpoints="every:100")
    first = table(250).slice(0, 150)
    replay(first, SPECS, opts, RandomSource.seeded(1), out_dir=out, state_dir=st)
    leftover = os.path.join(out, ".release-000000000200.parquet.pending")
    with open(leftover, "wb") as fh:
        fh.write(b"seen?")
    before = listing(st, files_only=True)
    with pytest.raises(PrivacyRefusal, match="older dpsynth"):
        replay(table(250), SPECS, opts, RandomSource.seeded(2), out_dir=out, state_dir=st)
    assert listing(st, files_only=True) == before and os.path.exists(leftover)
    plan = replay_mod.plan_for(opts, SPECS)
    engine, meta = state_io.load(st, plan, state_io.identity(plan, SPECS))
    os.unlink(leftover)
    committed = os.path.join(out, ".release-000000000100.parquet.pending")
    with open(committed, "wb") as fh:
        fh.write(b"committed")
    state_io.save(st, engine, {**meta, "pending": [committed]})  # as an older run committed it
    replay(table(250), SPECS, opts, RandomSource.seeded(2), out_dir=out, state_dir=st)
    assert listing(out)["release-000000000100.parquet"] == b"committed"
    fresh = os.path.join(tmp_path, "fresh")  # a run without --state needs its own --out-dir
    os.makedirs(fresh)
    leftover = os.path.join(fresh, ".release-000000000200.parquet.pending")
    with open(leftover, "wb") as fh:
        fh.write(b"never committed")
    replay(table(250), SPECS, opts, RandomSource.seeded(2), out_dir=fresh)  # no state: removed
    assert not os.path.exists(leftover)


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
