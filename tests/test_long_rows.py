"""Issue 22, finding 1: a row of any length, through every subcommand.

pyarrow parses a CSV record only if it fits in its blocks (2 MiB), so one long row failed the
whole run, and between 2 and 4 MiB whether it did depended on where the row fell, i.e. on the
other rows' sizes. Now a field longer than `io.field_limit` (public: from the header and the
block size) is read as missing, so every row with the header's field count is read in bounded
memory whatever its length. Each case runs the real CLI on a file with one long field and on
the same file with that field short (or, for a column that is read, empty): the exit status,
the outputs, the reports and the messages must be the same.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from dpsynth_cli import io as dio
from dpsynth_cli.cli import app

MIB = 1 << 20
BLOCK = dio.CSV_BLOCK_BYTES
HEADER = "t,x,y,note\n"


def rows(n: int = 200) -> list[str]:
    rng = np.random.default_rng(4)
    return [
        f"{i},{rng.random():.5f},{rng.random():.5f},ok{i}" for i in range(n)
    ]  # t: the time (online-replay)


def table(body: list[str], at: int, row: str, start: int | None = None) -> bytes:
    """`body` with `row` inserted after `at` rows; `start` puts the row at that byte offset
    (counted from the header's start) by padding the previous row's unread note."""
    lines = list(body)
    if start is not None:
        before = len(HEADER) + sum(len(r) + 1 for r in lines[:at])
        pad = start - before
        assert pad > 0
        lines[at - 1] += "p" * pad
    lines.insert(at, row)
    return (HEADER + "\n".join(lines) + "\n").encode()


COMMANDS = {
    "synth": ["synth", "in.csv", "--columns", "x,y", "--bounds", "x=0:1", "--bounds", "y=0:1"]
    + ["--eps", "1", "--seed", "3", "-o", "out.csv"],
    "pca": ["pca", "in.csv", "--columns", "x,y", "--bounds", "x=0:1", "--bounds", "y=0:1"]
    + ["--eps", "1", "--seed", "3", "-k", "1", "-o", "out.csv"],
    "online-replay": ["online-replay", "in.csv", "--order-by", "t", "--bounds", "x=0:1"]
    + ["--bounds", "y=0:1", "--eps", "1", "--seed", "3", "--checkpoints", "64,128"]
    + ["--out-dir", "rel", "--output-format", "csv"],
    "evaluate": ["evaluate", "in.csv", "in.csv", "--columns", "x,y", "--bounds", "x=0:1"]
    + ["--bounds", "y=0:1", "--json", "--seed", "1"],
}


def run(runner, workdir: Path, monkeypatch, data: bytes, command: list[str]) -> dict:
    """One run in `workdir` on `data` as in.csv: exit code, messages and every file made."""
    workdir.mkdir()
    (workdir / "in.csv").write_bytes(data)
    monkeypatch.chdir(workdir)
    result = runner.invoke(app, command)
    made = {
        str(p.relative_to(workdir)): p.read_bytes()
        for p in sorted(workdir.rglob("*"))
        if p.is_file() and p.name != "in.csv"
    }
    return {"exit": result.exit_code, "messages": result.output, "files": made}


def same_runs(runner, tmp_path, monkeypatch, long: bytes, short: bytes, command) -> dict:
    a = run(runner, tmp_path / "long", monkeypatch, long, command)
    b = run(runner, tmp_path / "short", monkeypatch, short, command)
    assert a["exit"] == 0, a["messages"]
    assert a == b
    return a


@pytest.mark.parametrize(
    ("length", "start"),
    [
        (5 * MIB, None),  # the case: exited 1 before
        (BLOCK + 40, BLOCK - 10),  # a little over a block, starting just before a block's end
        (BLOCK - 40, BLOCK - 10),  # a little under a block, across a block boundary
        (3 * MIB, BLOCK // 2),  # between one and two blocks, from the middle of one
    ],
)
def test_a_long_unread_field_changes_nothing(runner, tmp_path, monkeypatch, length, start):
    body = rows()
    long = table(body, 100, f"100.5,0.5,0.5,{'z' * length}", start)
    short = table(body, 100, "100.5,0.5,0.5,z", start)
    done = same_runs(runner, tmp_path, monkeypatch, long, short, COMMANDS["synth"])
    report = json.loads(done["files"]["out.csv.report.json"])
    assert report["ledger"]["total_epsilon"] <= 1


@pytest.mark.parametrize("command", ["pca", "online-replay", "evaluate"])
def test_every_subcommand_reads_a_long_row(runner, tmp_path, monkeypatch, command):
    body = rows()
    long = table(body, 100, f"100.5,0.5,0.5,{'z' * 5 * MIB}")
    short = table(body, 100, "100.5,0.5,0.5,z")
    same_runs(runner, tmp_path, monkeypatch, long, short, COMMANDS[command])


def test_a_long_read_field_is_missing(runner, tmp_path, monkeypatch):
    """A field in a column that is read, longer than the limit: that cell is missing (the row is
    then dropped, as for any cell that is not a number), whatever else the row holds."""
    body = rows()
    digits = "0." + "5" * (3 * MIB)  # a number, but longer than the limit
    long = table(body, 100, f"100.5,{digits},0.5,note")
    short = table(body, 100, "100.5,,0.5,note")
    same_runs(runner, tmp_path, monkeypatch, long, short, COMMANDS["synth"])


def test_the_field_cap_follows_the_delimiter(runner, tmp_path, monkeypatch):
    """A ';'-separated file (--delimiter): fields end at ';', so a long unread field is capped
    there too (with commas as the field ends, the whole row would be one field)."""
    body = [r.replace(",", ";") for r in rows()]
    long = table(body, 100, f"100.5;0.5;0.5;{'z,' * (3 * MIB)}").replace(
        b"t,x,y,note", b"t;x;y;note"
    )
    short = table(body, 100, "100.5;0.5;0.5;z").replace(b"t,x,y,note", b"t;x;y;note")
    same_runs(runner, tmp_path, monkeypatch, long, short, [*COMMANDS["synth"], "--delimiter", ";"])
