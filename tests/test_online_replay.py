"""online-replay as a library call: releases, report, --state resume and refusals, bad input."""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dpsynth_cli.domain import ColumnSpec
from dpsynth_cli.errors import DataError, PrivacyRefusal, UsageError
from dpsynth_cli.online.replay import REPORT_NAME, ReplayOptions, parse_checkpoints, replay
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
