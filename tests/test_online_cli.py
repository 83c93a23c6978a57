"""`dpsynth online-replay` end to end: releases and report, --help's privacy model, resume with
--state, bad input (one line, the right exit code, nothing lost or left partial), progress only
on a terminal, and two files that differ in one row (the whole command is the mechanism)."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.main import get_command

from dpsynth_cli import online_cli
from dpsynth_cli.cli import app
from dpsynth_cli.io import InputSource
from dpsynth_cli.online.engine import OnlineEngine
from dpsynth_cli.online.replay import REPORT_NAME
from dpsynth_cli.online.stream import SORTED_IN_MEMORY

replay_mod = sys.modules["dpsynth_cli.online.replay"]
BOUNDS = ["--bounds", "x=0:1", "--bounds", "n=0:9", "--integer", "n"]


def run(runner, *args):
    return runner.invoke(app, ["online-replay", *map(str, args)])


def stream(n: int, seed: int = 0, shuffle: bool = False) -> dict[str, np.ndarray]:
    """Rows at times 1..n (shuffled in the file if asked): x in [0,1], n an integer 0..9."""
    rng = np.random.default_rng(seed)
    cols = {
        "time": np.arange(1, n + 1),
        "x": rng.beta(2, 5, n).round(6),
        "n": rng.integers(0, 10, n),
    }
    if shuffle:
        order = rng.permutation(n)
        cols = {k: v[order] for k, v in cols.items()}
    return cols


def extend(cols: dict[str, np.ndarray], n: int) -> dict[str, np.ndarray]:
    """The stream `cols` grown to n rows (the new rows from another seed)."""
    more = stream(n, seed=1)
    return {k: np.concatenate([v, more[k][len(v) :]]) for k, v in cols.items()}


def write_csv(path: Path, cols: dict[str, np.ndarray]) -> Path:
    lines = [",".join(cols)] + [",".join(map(str, row)) for row in zip(*cols.values(), strict=True)]
    path.write_text("\n".join(lines) + "\n")
    return path


def listing(path: Path) -> dict[str, bytes]:
    """Every file below `path` (relative name: content)."""
    if not path.exists():
        return {}
    return {
        str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()
    }


def one_line_error(result, code: int) -> None:
    assert result.exit_code == code, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dpsynth: error: "), result.output


def test_releases_report_and_silence_in_pipes(runner, tmp_path):
    """A CSV whose rows are not in time order (times as text: 10 must come after 9): releases at
    every:250 of exactly t rows, sorted names, and a report; on stderr in a pipe only the notices
    that the input was sorted in memory and that the a-priori bounds are vacuous."""
    src = write_csv(tmp_path / "s.csv", stream(1000, shuffle=True))
    out = tmp_path / "rel"
    args = [src, "--eps", 1, "--order-by", "time", *BOUNDS, "--checkpoints", "every:250"]
    result = run(runner, *args, "--output-format", "csv", "--out-dir", out)
    assert result.exit_code == 0 and result.output.startswith(
        f"dpsynth: note: {SORTED_IN_MEMORY}\n"
    )
    assert result.output.count("\n") == 2 and "vacuous a-priori W1 bound" in result.output
    names = [f"release-{t:012d}.csv" for t in (250, 500, 750, 1000)]
    assert sorted(os.listdir(out)) == sorted([*names, REPORT_NAME])
    for t, name in zip((250, 500, 750, 1000), names, strict=True):
        lines = (out / name).read_text().splitlines()
        assert lines[0].replace('"', "") == "x,n" and len(lines) == t + 1
        assert all(0 <= int(line.split(",")[1]) <= 9 for line in lines[1:])
    report = json.loads((out / REPORT_NAME).read_text())
    assert report["ledger"]["total_epsilon"] == 1.0 and report["release"] == "ok"
    assert report["neighbouring_relation"] == "replace" and report["mechanism"]["d"] == 2
    assert [c["rows"] for c in report["checkpoints"]] == [250, 500, 750, 1000]


def test_unsorted_file_replays_as_the_sorted_one(runner, tmp_path, monkeypatch):
    """--order-by sorts (numbers in CSV text as numbers): a shuffled file (sorted in memory, with
    a notice) = the sorted file (streamed: never read whole; "10" < "9" as text, not as numbers)."""
    seen = []
    for shuffle in (False, True):
        src = write_csv(tmp_path / f"s{shuffle}.csv", stream(300, shuffle=shuffle))
        out = tmp_path / f"out{shuffle}"
        args = [src, "--eps", 1, "--order-by", "time", *BOUNDS, "--checkpoints", "20,100,300"]
        with monkeypatch.context() as m:
            if not shuffle:
                m.setattr(InputSource, "read_all", None)  # streamed: never read whole
            result = run(runner, *args, "--seed", 5, "--out-dir", out)
        assert result.exit_code == 0, result.output
        assert (SORTED_IN_MEMORY in result.output) is shuffle
        seen.append({k: v for k, v in listing(out).items() if k != REPORT_NAME})
    assert seen[0] == seen[1] and len(seen[0]) == 3


def test_help_says_what_is_public_and_protected(runner):
    text = " ".join(runner.invoke(app, ["online-replay", "--help"]).output.split())
    text = text.replace("- ", "-")  # words that the help's wrapping broke at a hyphen
    phrases = ("PUBLIC", "PROTECTED", "number of rows up to each checkpoint", "SECRET")
    for phrase in (*phrases, "is streamed with memory bounded by a batch", "sorted in memory"):
        assert phrase in text, phrase
    assert "replace: one row's values changed" in text and "add-remove: one time" in text
    assert "the --order-by column (its values set the order; it may not be a synthesised" in text
    assert "may not be one of the synthesised columns" in text
    for param in get_command(app).commands["online-replay"].params:
        if param.param_type_name == "option" and param.name != "help":
            assert "e.g." in (param.help or ""), param.name


def test_resume_with_state(runner, tmp_path):
    """Cron: run 1 on the first 1500 rows, run 2 on the whole grown table (whole mode) or on the
    new rows only (new mode, same seeds: byte for byte the same releases). Together they
    release each checkpoint once, earlier files are untouched, the report lists them all. (That
    two runs have the law of one run is tests/test_online_engine.py's resume test.)"""
    cols = stream(2500)
    first = write_csv(tmp_path / "first.csv", {k: v[:1500] for k, v in cols.items()})
    whole = write_csv(tmp_path / "whole.csv", cols)
    new = write_csv(tmp_path / "new.csv", {k: v[1500:] for k, v in cols.items()})
    common = ["--eps", 1, "--order-by", "time", *BOUNDS, "--checkpoints", "every:500"]
    seen = {}
    for mode, second in (("whole", whole), ("new", new)):
        out, st = tmp_path / f"rel-{mode}", tmp_path / f"state-{mode}"
        assert (
            run(runner, first, *common, "--seed", 1, "--out-dir", out, "--state", st).exit_code == 0
        )
        before = listing(out)
        assert oct(st.stat().st_mode & 0o777) == "0o700"
        assert oct((st / "state.npz").stat().st_mode & 0o777) == "0o600"
        args = [second, *common, "--seed", 2, "--out-dir", out, "--state", st, "--input-mode", mode]
        result = run(runner, *args)
        assert result.exit_code == 0, result.output
        after = listing(out)
        assert all(after[k] == v for k, v in before.items() if k != REPORT_NAME)
        report = json.loads(after.pop(REPORT_NAME))
        assert report["checkpoints_this_run"] == [2000, 2500]
        assert [c["rows"] for c in report["checkpoints"]] == [500, 1000, 1500, 2000, 2500]
        assert report["seeded"] is True  # both runs seeded
        seen[mode] = after
    assert seen["whole"] == seen["new"]
    # a third run on the same table: nothing new, nothing released again
    args = [
        whole,
        *common,
        "--out-dir",
        tmp_path / "rel-whole",
        "--state",
        tmp_path / "state-whole",
    ]
    result = run(runner, *args)
    assert result.exit_code == 0
    assert "NOT FOR RELEASE" in result.output  # the state was begun by a --seed run
    assert (
        json.loads((tmp_path / "rel-whole" / REPORT_NAME).read_text())["checkpoints_this_run"] == []
    )


@pytest.fixture
def started(runner, tmp_path):
    """A stream of 1200 rows replayed with --state; returns (paths, run arguments)."""
    cols = stream(1200)
    pq.write_table(pa.table(cols), tmp_path / "s.parquet")
    out, st = tmp_path / "rel", tmp_path / "state"
    args = ["--eps", 1, "--order-by", "time", *BOUNDS, "--out-dir", out, "--state", st]
    assert run(runner, tmp_path / "s.parquet", *args).exit_code == 0
    return cols, out, st, args


def unchanged(out: Path, st: Path):
    """A context that asserts nothing in --out-dir or the state changed."""

    @contextlib.contextmanager
    def check():
        before, state = listing(out), listing(st)
        yield
        assert listing(out) == before and listing(st) == state

    return check()


def test_appended_rows_with_a_new_column(runner, tmp_path, started):
    """Parquet: the declared columns continue (the new column is not read); a schema that adds
    it to the stream is refused (exit 3: another mechanism). CSV rows with one field more than
    the header: exit 1 naming the line, nothing lost."""
    cols, out, st, args = started
    grown = extend(cols, 2100)
    pq.write_table(pa.table({**grown, "extra": np.ones(2100)}), tmp_path / "g.parquet")
    with unchanged(out, st):
        schema = {c: {"type": "float", "lower": 0, "upper": 9} for c in ("x", "n", "extra")}
        (tmp_path / "s.json").write_text(json.dumps({"columns": schema}))
        refused = run(
            runner, tmp_path / "g.parquet", *args[:4], "--schema", tmp_path / "s.json", *args[-4:]
        )
        one_line_error(refused, 3)
        assert "columns x,n" in refused.output
        bad = write_csv(tmp_path / "bad.csv", grown)
        bad.write_text(bad.read_text() + "2101,0.5,3,7\n")
        result = run(runner, bad, *args)
        one_line_error(result, 1)
        assert "line 2102" in result.output
    result = run(runner, tmp_path / "g.parquet", *args)
    assert result.exit_code == 0, result.output
    assert pq.read_table(out / "release-000000002048.parquet").column_names == ["x", "n"]


def test_state_from_another_table_is_refused(runner, tmp_path, started):
    _, out, st, args = started
    other = stream(1300, seed=9)
    pq.write_table(pa.table(other), tmp_path / "other.parquet")
    with unchanged(out, st):
        one_line_error(run(runner, tmp_path / "other.parquet", *args), 3)
        one_line_error(
            run(runner, tmp_path / "other.parquet", *args, "--neighboring", "add-remove"), 3
        )
        shorter = {k: v[:1000] for k, v in stream(1200).items()}
        pq.write_table(pa.table(shorter), tmp_path / "short.parquet")
        one_line_error(run(runner, tmp_path / "short.parquet", *args), 3)


def test_missing_order_by_values(runner, tmp_path):
    """A row without a time cannot be placed on the (public) timeline: exit 1, nothing made."""
    cols = {k: v.astype(object) for k, v in stream(50).items()}
    cols["time"][7] = ""
    src = write_csv(tmp_path / "s.csv", cols)
    out = tmp_path / "rel"
    result = run(runner, src, "--eps", 1, "--order-by", "time", *BOUNDS, "--out-dir", out)
    one_line_error(result, 1)
    assert "'time' has missing values" in result.output
    assert not out.exists()


@pytest.mark.parametrize("declare", [["--bounds", "time=0:100"], ["--schema", "s.json"]])
def test_order_by_a_synthesised_column_is_refused(runner, tmp_path, declare, monkeypatch):
    """Issue 22, finding 2: the order is public but a synthesised column's values are protected;
    one row's value would move it across the stream (privacy loss about 4-5 at eps 1). Refused
    before any row is read (exit 2, one line, nothing made); the report's model (and --help,
    above) says the --order-by column is public and not synthesised."""
    monkeypatch.chdir(tmp_path)
    schema = {c: {"type": "float", "lower": 0, "upper": 100} for c in ("time", "x")}
    Path("s.json").write_text(json.dumps({"columns": schema}))
    src = write_csv(tmp_path / "s.csv", stream(30))
    out, st = tmp_path / "rel", tmp_path / "st"
    flags = ["--bounds", "x=0:1", *declare] if declare[0] == "--bounds" else declare
    args = [src, "--eps", 1, "--order-by", "time", *flags, "--out-dir", out, "--state", st]
    result = run(runner, *args)
    one_line_error(result, 2)
    assert "--order-by time is also a synthesised column" in result.output
    assert not out.exists() and not st.exists()
    ok = run(runner, src, "--eps", 1, "--order-by", "time", "--bounds", "x=0:1", "--out-dir", out)
    assert ok.exit_code == 0, ok.output
    model = json.loads((out / REPORT_NAME).read_text())["privacy_model"]
    assert "the --order-by column" in model and "may not be a synthesised column" in model


@pytest.mark.parametrize(
    "flags, says",
    [
        (["--checkpoints", "every:0"], "--checkpoints"),
        (["--checkpoints", "10,x"], "--checkpoints"),
        (["--output-format", "xml"], "--output-format"),
        (["--neighboring", "swap"], "--neighboring"),
        (["--allocation", "best"], "--allocation"),
        (["--input-mode", "old"], "--input-mode"),
        (["--release-at-end"], "--row-counts-public"),
        (["--eps", "-1"], "eps"),
        (["--eps", "one"], "--eps"),
        (["--order-by", "when"], "when"),
        (["--bounds", "x=0:1", "--integer", "n"], "bounds"),  # n has none
        (["--columns", "x"], "bounds"),
        ([], "declared columns"),
        (["--state", "{out}/st"], "--state"),
        (["--out-dir", "{src}"], "--out-dir"),
        (["--frobnicate"], "frobnicate"),
    ],
)
def test_bad_flags_are_one_line_usage_errors(runner, tmp_path, flags, says):
    src = write_csv(tmp_path / "s.csv", stream(30))
    out = tmp_path / "rel"
    flags = [f.format(out=out, src=src) for f in flags]
    base = ["--eps", 1, "--order-by", "time", *BOUNDS, "--out-dir", out]
    if not flags or flags[0] in ("--bounds", "--columns"):
        base = ["--eps", 1, "--out-dir", out]
    result = run(runner, src, *base, *flags)
    one_line_error(result, 2)
    assert says in result.output
    assert not out.exists()


def test_sigterm_before_the_commit_shows_nothing_in_out_dir(tmp_path):
    """Issue 22, finding 3, through the real command: a cron timeout (SIGTERM) after a release
    is drawn but before the state commits. --out-dir (public) never holds a file of the run,
    not even for a moment: the draw waits in the state's 0700 staging directory, and goes with
    the stopped run; the rerun then releases the checkpoint once."""
    import signal
    import subprocess
    import time

    pq.write_table(pa.table(stream(300_000)), tmp_path / "s.parquet")
    out, st = tmp_path / "rel", tmp_path / "st"
    cmd = [sys.executable, "-m", "dpsynth_cli", "online-replay", str(tmp_path / "s.parquet")]
    cmd += ["--eps", "1", "--order-by", "time", *BOUNDS, "--checkpoints", "1000", "--quiet"]
    cmd += ["--state", str(st), "--out-dir", str(out)]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE)
    public, stopped, deadline = set(), False, time.monotonic() + 120
    while proc.poll() is None and time.monotonic() < deadline:
        public |= set(os.listdir(out)) if out.is_dir() else set()
        staging = st / "staging"
        if staging.is_dir() and "release-000000001000.parquet" in os.listdir(staging):
            assert oct(staging.stat().st_mode & 0o777) == "0o700"
            proc.send_signal(signal.SIGTERM)
            stopped = True
            break
        time.sleep(0.002)
    _, err = proc.communicate(timeout=120)
    assert public == set() and stopped, (public, err)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert listing(out) == {} and os.listdir(st / "staging") == []
    again = subprocess.run(cmd, capture_output=True, timeout=120)
    assert again.returncode == 0, again.stderr
    assert set(listing(out)) == {"release-000000001000.parquet", REPORT_NAME}


def test_releases_never_go_into_the_input_directory(runner, tmp_path):
    (tmp_path / "parts").mkdir()
    pq.write_table(pa.table(stream(20)), tmp_path / "parts" / "a.parquet")
    args = [tmp_path / "parts", "--eps", 1, *BOUNDS, "--input-format", "parquet"]
    one_line_error(run(runner, *args, "--out-dir", tmp_path / "parts"), 2)
    assert os.listdir(tmp_path / "parts") == ["a.parquet"]
    assert run(runner, *args, "--out-dir", tmp_path / "rel").exit_code == 0


def test_error_mid_run_leaves_nothing_partial(runner, tmp_path, started, monkeypatch):
    """The third release of a run fails to write: exit 1, one line, none of the run's releases
    published and the state as before (the next run replays those rows)."""
    cols, out, st, args = started
    pq.write_table(pa.table(extend(cols, 5000)), tmp_path / "s.parquet")
    real, calls = replay_mod.write_outputs, []

    def failing(*a, **k):
        calls.append(1)
        if len(calls) == 3:
            raise OSError(28, "No space left on device")
        return real(*a, **k)

    monkeypatch.setattr(replay_mod, "write_outputs", failing)
    with unchanged(out, st):
        result = run(runner, tmp_path / "s.parquet", *args, "--checkpoints", "every:1000")
        assert result.exit_code == 1 and len(result.output.strip().splitlines()) == 1
    monkeypatch.undo()
    result = run(runner, tmp_path / "s.parquet", *args, "--checkpoints", "every:1000")
    report = json.loads((out / REPORT_NAME).read_text())
    assert result.exit_code == 0 and report["checkpoints_this_run"] == [2000, 3000, 4000, 5000]


def test_progress_and_summary_on_a_terminal(runner, tmp_path, monkeypatch):
    from rich.console import Console

    class Status:
        texts: list[str] = []

        def update(self, text: str) -> None:
            self.texts.append(text)

    class Terminal(online_cli.Feedback):
        def __init__(self, quiet: bool) -> None:
            super().__init__(quiet)
            self.console = Console(stderr=True, force_terminal=True, record=True, width=200)
            self.interactive = True
            Terminal.last = self

        @contextlib.contextmanager
        def step(self, what):
            self._status = Status()
            yield

    monkeypatch.setattr(online_cli, "Feedback", Terminal)
    monkeypatch.setattr(replay_mod, "BATCH_ROWS", 100)
    src = write_csv(tmp_path / "s.csv", stream(300))
    args = [src, "--eps", 1, *BOUNDS, "--checkpoints", "100,200", "--out-dir", tmp_path / "o"]
    assert run(runner, *args).exit_code == 0
    assert Status.texts[-1].startswith("replaying the stream: 300 of 300 rows")
    assert "2 releases this run (100, 200)" in Terminal.last.console.export_text()


NEIGHBOUR_ROWS = {
    "text cell": ("abc", "3"),
    "fraction in the integer column": ("0.5", "2.5"),
    "beyond int64": ("0.5", "99999999999999999999"),
    "inf and nan": ("inf", "nan"),
    "empty cells": ("", ""),
    "beyond float range": ("1e999", "-1e999"),
}


@pytest.mark.parametrize("row", [*NEIGHBOUR_ROWS, "not forced"])
def test_files_one_row_apart_are_indistinguishable(runner, tmp_path, monkeypatch, row):
    """Neighbouring streams (replace: the row at time 601 of 1100 changed to an adversarial one),
    seeded alike, with the values the mechanism counts forced equal: the releases, the report,
    the messages and the exit code must be the same, or a value leaked outside the ledger.
    "not forced" (the text cell, values not forced equal) shows that the comparison can fail."""
    if row != "not forced":
        feed = OnlineEngine.feed
        monkeypatch.setattr(
            OnlineEngine, "feed", lambda self, X, *a, **k: feed(self, np.full_like(X, 0.3), *a, **k)
        )
    seen = []
    for side in ("base", "neighbour"):
        work = tmp_path / side
        work.mkdir()
        lines = ["t,x,n"] + [f"{i},0.25,{i % 10}" for i in range(1100)]
        if side == "neighbour":
            lines[601] = "600," + ",".join(NEIGHBOUR_ROWS.get(row, ("abc", "3")))
        (work / "s.csv").write_text("\n".join(lines) + "\n")
        monkeypatch.chdir(work)
        args = ["s.csv", "--eps", 1, "--order-by", "t", *BOUNDS, "--seed", 3, "--state", "st"]
        result = run(runner, *args, "--checkpoints", "10,600,1024,1100", "--out-dir", "rel")
        seen.append((result.exit_code, result.output, listing(work / "rel")))
    assert seen[0][0] == 0 and len(seen[0][2]) == 5
    if row == "not forced":
        assert (
            seen[0][2]["release-000000001024.parquet"] != seen[1][2]["release-000000001024.parquet"]
        )
    else:
        assert seen[0] == seen[1]


def test_text_that_is_not_utf8_is_a_one_line_encoding_error(runner, tmp_path):
    """A Parquet string column holding bytes that are not UTF-8 (Parquet does not check on
    read) is an encoding error naming the column, exit 1, nothing released: structure, as in
    synth, never an internal error."""
    bad = pa.Array.from_buffers(
        pa.string(),
        3,
        [None, pa.py_buffer(np.array([0, 3, 4, 7], np.int32)), pa.py_buffer(b"0.5\xff0.1")],
    )
    path = tmp_path / "s.parquet"
    pq.write_table(pa.table({"x": bad}), path)
    out = tmp_path / "out"
    result = run(runner, path, "--eps", "1", "--bounds", "x=0:1", "--out-dir", out)
    one_line_error(result, 1)
    assert "'x'" in result.output and "UTF-8" in result.output
    assert not out.exists() or not any(out.iterdir())


def test_published_releases_are_never_replaced(runner, tmp_path, private_budget):
    """Issue 38, item 4: a rerun without --state, a new --state, or another stream's --state
    into an --out-dir that holds releases or a report it did not write is refused (exit 3, one
    line naming the first such file and what to do) before the spend is recorded and before
    anything is staged or written; the stream's own --state still continues there."""
    src = write_csv(tmp_path / "s.csv", stream(300))
    grown = write_csv(tmp_path / "g.csv", extend(stream(300), 500))
    common = ["--eps", 1, "--order-by", "time", *BOUNDS, "--checkpoints", "every:100"]
    out, st = tmp_path / "rel", tmp_path / "state"
    first = run(runner, src, *common, "--out-dir", out)
    assert first.exit_code == 0, first.output
    assert len(listing(out)) == 4
    refusals = [
        [src, *common, "--out-dir", out],  # the same command again
        [src, *common, "--out-dir", out, "--state", st],  # a new stream with a state
        [src, *common, "--checkpoints", "50", "--out-dir", out],  # another checkpoint only
    ]
    for args in refusals:
        spent = private_budget.read_bytes()
        with unchanged(out, tmp_path / "nothing"):
            result = run(runner, *args)
        one_line_error(result, 3)
        assert "release-000000000100.parquet" in result.output
        assert "use a new --out-dir, or remove the old releases" in result.output
        assert private_budget.read_bytes() == spent  # refused before the charge
        assert not st.exists()
    # two streams with a state each: the second never takes over the first's report
    mine, theirs = tmp_path / "mine", tmp_path / "theirs"
    assert run(runner, src, *common, "--out-dir", mine, "--state", st).exit_code == 0
    report = json.loads((mine / REPORT_NAME).read_text())
    assert len(report["stream"]["id"]) == 16
    for old in mine.glob("release-*"):
        old.unlink()  # only the stream's report is left
    with unchanged(mine, st):
        other = run(runner, src, *common, "--out-dir", mine, "--state", theirs)
    one_line_error(other, 3)
    assert f"{REPORT_NAME}, the report of an earlier run or another" in other.output
    with unchanged(mine, st):
        one_line_error(run(runner, src, *common, "--out-dir", mine), 3)
    # a third stream with a state of its own, then the first continues its own --out-dir
    third = run(runner, src, *common, "--out-dir", tmp_path / "third", "--state", theirs)
    assert third.exit_code == 0, third.output
    with unchanged(mine, st):
        crossed = run(runner, grown, *common, "--out-dir", mine, "--state", theirs)
    one_line_error(crossed, 3)
    assert f"{REPORT_NAME}, the report of another stream" in crossed.output
    again = run(runner, grown, *common, "--out-dir", mine, "--state", st)
    assert again.exit_code == 0, again.output
    continued = json.loads((mine / REPORT_NAME).read_text())["stream"]
    assert continued["id"] == report["stream"]["id"]  # the same stream, its eps spent before
    assert continued["epsilon_this_run"] == 0 and report["stream"]["epsilon_this_run"] == 1
    assert json.loads((mine / REPORT_NAME).read_text())["checkpoints_this_run"] == [400, 500]
    assert sorted(p.name for p in mine.glob("release-*")) == [
        "release-000000000400.parquet",
        "release-000000000500.parquet",
    ]


def daily_weather(path: Path) -> Path:
    """A seattle-weather-like table: 1,461 days (2012-2015), four numbers and a category."""
    rng = np.random.default_rng(0)
    days = np.arange(np.datetime64("2012-01-01"), np.datetime64("2016-01-01"))
    season = np.cos(2 * np.pi * (np.arange(days.size) - 200) / 365.25)
    temp_max = (15 + 10 * season + rng.normal(0, 3, days.size)).round(1)
    rain = np.where(rng.random(days.size) < 0.45, rng.gamma(0.6, 5, days.size), 0).round(1)
    cols = {
        "date": days.astype(str),
        "precipitation": rain,
        "temp_max": temp_max,
        "temp_min": (temp_max - 6 - np.abs(rng.normal(0, 2, days.size))).round(1),
        "wind": np.abs(rng.normal(3, 1.5, days.size)).round(1),
        "weather": np.where(rain > 0, "rain", rng.choice(["sun", "fog", "drizzle"], days.size)),
    }
    return write_csv(path, cols)


WEATHER_SCHEMA = {
    "columns": {
        "precipitation": {"type": "float", "lower": 0, "upper": 130},
        "temp_max": {"type": "float", "lower": -20, "upper": 45},
        "temp_min": {"type": "float", "lower": -20, "upper": 45},
        "wind": {"type": "float", "lower": 0, "upper": 20},
        "weather": {"type": "category", "levels": ["drizzle", "rain", "sun", "snow", "fog"]},
    }
}


def test_too_many_checkpoints_get_a_notice(runner, tmp_path, monkeypatch):
    """Issue 38, item 5: the README's example (a daily table, --checkpoints monthly, eps 1: 47
    checkpoints, auto picks marginals) says that its releases carry about 7x the noise of one
    release, on stderr and in the report; every:365d (4 checkpoints: 2x) does not."""
    monkeypatch.chdir(tmp_path)
    daily_weather(tmp_path / "seattle-weather.csv")
    (tmp_path / "weather.json").write_text(json.dumps(WEATHER_SCHEMA))
    args = ["seattle-weather.csv", "--eps", 1, "--order-by", "date", "--schema", "weather.json"]
    for checkpoints, out in (("monthly", "monthly"), ("every:365d", "yearly")):
        result = run(runner, *args, "--checkpoints", checkpoints, "--out-dir", out)
        assert result.exit_code == 0, result.output
        report = json.loads((tmp_path / out / REPORT_NAME).read_text())
        assert report["mechanism"]["chosen"]["requested"] == "auto"
        assert report["mechanism"]["node_schedule"]["checkpoints_so_far"] == len(
            report["checkpoints"]
        )
        said = [line for line in result.output.splitlines() if "checkpoints at eps" in line]
        if checkpoints == "monthly":
            assert len(said) == 1 and said[0].startswith("dpsynth: note: 47 checkpoints at eps 1:")
            assert "about 7x the noise of a single release" in said[0]
            assert "--checkpoints every:365d" in said[0] and "larger --eps" in said[0]
            assert report["notices"] == [said[0].removeprefix("dpsynth: note: ")]
        else:
            assert len(report["checkpoints"]) == 4
            assert said == [] and report["notices"] == []
