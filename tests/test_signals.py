"""Stopping a run (SIGTERM from `timeout` or a cron job killer, SIGHUP, Ctrl-C) leaves no partial
output and no temporary file; temporary files of a killed run (SIGKILL) are removed later."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from dpsynth_cli import io as dio


def start(tmp_path, rows: int) -> subprocess.Popen:
    src = tmp_path / "in.csv"
    src.write_text("a,b\n" + "1,0.5\n" * 100)
    cmd = [sys.executable, "-m", "dpsynth_cli", "synth", str(src), "--eps", "1"]
    cmd += ["--bounds", "a=0:9", "--bounds", "b=0:1", "--rows", str(rows)]
    cmd += ["-o", str(tmp_path / "out.csv")]
    # As a foreground run: SIGINT at its default (a shell's background job, e.g. `make test &`,
    # inherits it ignored, and then Python, rightly, does not turn Ctrl-C into KeyboardInterrupt).
    return subprocess.Popen(
        cmd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_stop_signal_during_write_leaves_nothing(tmp_path, sig):
    proc = start(tmp_path, 2_000_000)
    deadline = time.monotonic() + 60
    while not any(".dpsynth-" in n for n in os.listdir(tmp_path)):  # the write has begun
        assert proc.poll() is None and time.monotonic() < deadline, "the write never started"
        time.sleep(0.005)
    proc.send_signal(sig)
    code = proc.wait(timeout=60)
    assert code in (128 + sig, 130), proc.stderr.read()
    assert b"Traceback" not in proc.stderr.read()
    assert sorted(os.listdir(tmp_path)) == ["in.csv"]


def test_stale_temporary_files_of_dead_runs_are_removed(tmp_path):
    target = tmp_path / "out.csv"
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        text=True,
        capture_output=True,
        check=True,
    )
    stale = tmp_path / f".out.csv.dpsynth-{int(dead.stdout)}-abc.tmp"
    live = tmp_path / f".out.csv.dpsynth-{os.getpid()}-def.tmp"  # a concurrent run's: kept
    other = tmp_path / ".other.csv.dpsynth-1-x.tmp"  # another output's: not ours to judge
    for path in (stale, live, other):
        path.write_text("partial")
    dio.atomic_write_bytes(str(target), "done")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([live.name, other.name, "out.csv"])


def test_stop_while_the_temporary_file_is_opened_is_a_stop(tmp_path, monkeypatch):
    """A stop signal that lands inside `os.fdopen`, after the file object owns the descriptor
    (which it closes when it is dropped), is a stop: not an OSError from closing the
    descriptor a second time (seen as 'internal error (OSError)' under load). Here `fdopen`
    is interrupted wherever stop signals are not held."""
    from dpsynth_cli.io import atomic, stops

    real = os.fdopen

    def interrupted(fd, *args, **kwargs):
        fh = real(fd, *args, **kwargs)
        if stops._held is None:  # a signal is delivered here: the new file object is dropped
            fh.close()
            raise KeyboardInterrupt
        return fh

    monkeypatch.setattr(atomic.os, "fdopen", interrupted)
    target = tmp_path / "out.csv"
    try:
        with dio.atomic_output(str(target)) as fh:
            fh.write(b"done")
    except KeyboardInterrupt:
        assert not target.exists()
    else:
        assert target.read_bytes() == b"done"
    assert os.listdir(tmp_path) == [] or sorted(os.listdir(tmp_path)) == ["out.csv"]
