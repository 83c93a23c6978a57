"""Outputs that are not regular files (privacy review, finding 6): a device or a FIFO is written
into, never replaced by a regular file (run as root, `--report /dev/null` made a world-writable
/dev/null); a write error there fails the run; a symbolic link is followed (the file it names is
replaced, the link stays), never replaced itself.

Devices are tested with FIFOs made here; the real /dev/full only once the code in use is known to
write into devices (`test_report_to_dev_full_fails_in_one_line`), and /dev/null never."""

from __future__ import annotations

import json
import os
import select
import stat
import subprocess
import sys
import threading

import pyarrow as pa
import pytest

import dpsynth_cli
from dpsynth_cli import io as dio
from dpsynth_cli.errors import PrivacyRefusal, UsageError
from dpsynth_cli.io import atomic
from dpsynth_cli.online.replay import REPORT_NAME, ReplayOptions, replay
from dpsynth_cli.privacy.noise import RandomSource
from tests.test_online_replay import SPECS
from tests.test_online_replay import table as replay_table

BOUNDS = ["--bounds", "age=0:100", "--bounds", "score=0:1", "--integer", "age"]
BOUNDS += ["--columns", "age,score", "--seed", "3", "--quiet"]
ROOT = os.path.dirname(os.path.dirname(dpsynth_cli.__file__))


def synth(*args) -> subprocess.CompletedProcess:
    """The real CLI in a fresh Python (the budget file is the test's own: conftest)."""
    cmd = [sys.executable, "-m", "dpsynth_cli", "synth", *map(str, args), "--eps", "1", *BOUNDS]
    env = dict(os.environ, PYTHONPATH=ROOT)
    return subprocess.run(cmd, capture_output=True, text=True, check=False, env=env, timeout=300)


class FifoReader:
    """A FIFO at `path` and a thread reading it. The test holds it open read-write, so that
    opening it for writing never blocks and nothing here hangs if a run replaces the FIFO
    instead of writing into it (it then reads nothing)."""

    def __init__(self, path) -> None:
        os.mkfifo(path)
        self.path = path
        self.fd = os.open(path, os.O_RDWR | os.O_NONBLOCK)
        self.chunks: list[bytes] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        while True:
            ready, _, _ = select.select([self.fd], [], [], 0.05)
            if ready:
                try:
                    self.chunks.append(os.read(self.fd, 1 << 16))
                except BlockingIOError:
                    pass
            elif self.stop.is_set():
                return

    def data(self) -> bytes:
        self.stop.set()
        self.thread.join(30)
        os.close(self.fd)
        return b"".join(self.chunks)


def is_fifo(path) -> bool:
    return stat.S_ISFIFO(os.lstat(path).st_mode)


def test_report_to_a_fifo_is_written_into(small_csv, tmp_path):
    fifo = FifoReader(tmp_path / "report.pipe")
    done = synth(small_csv, "-o", tmp_path / "out.csv", "--report", fifo.path)
    data = fifo.data()
    assert done.returncode == 0, done.stderr
    assert is_fifo(fifo.path)
    report = json.loads(data)
    assert report["ledger"]["total_epsilon"] <= 1.0
    assert sorted(os.listdir(tmp_path)) == ["out.csv", "report.pipe", "small.csv"]


def test_csv_output_to_a_fifo_is_written_into(small_csv, tmp_path):
    fifo = FifoReader(tmp_path / "out.csv")
    done = synth(small_csv, "-o", fifo.path, "--report", tmp_path / "r.json")
    data = fifo.data()
    assert done.returncode == 0, done.stderr
    assert is_fifo(fifo.path)
    lines = data.decode().splitlines()
    assert lines[0] == '"age","score"' and len(lines) > 100
    assert json.loads((tmp_path / "r.json").read_text())["output"]["rows"] == len(lines) - 1


def test_symlink_to_a_fifo_is_written_into(small_csv, tmp_path):
    fifo = FifoReader(tmp_path / "report.pipe")
    link = tmp_path / "report.json"
    link.symlink_to(fifo.path)
    done = synth(small_csv, "-o", tmp_path / "out.csv", "--report", link)
    data = fifo.data()
    assert done.returncode == 0, done.stderr
    assert link.is_symlink() and os.readlink(link) == str(fifo.path)
    assert is_fifo(fifo.path)
    assert "ledger" in json.loads(data)


def test_symlink_to_a_file_is_followed(small_csv, tmp_path):
    """The link stays; the file it names gets the new output (the README says "followed")."""
    (tmp_path / "real").mkdir()
    target, report = tmp_path / "real" / "synth.csv", tmp_path / "real" / "run.json"
    target.write_text("old\n")
    report.write_text("{}")
    os.chmod(target, 0o640)
    link, link_report = tmp_path / "synth.csv", tmp_path / "run.json"
    link.symlink_to(target)
    link_report.symlink_to(os.path.join("real", "run.json"))  # relative, as `ln -s` makes
    done = synth(small_csv, "-o", link, "--report", link_report)
    assert done.returncode == 0, done.stderr
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert link_report.is_symlink() and os.readlink(link_report) == "real/run.json"
    assert target.read_text().startswith('"age","score"\n')
    assert stat.S_IMODE(target.stat().st_mode) == 0o640  # the replaced file's mode, as before
    assert json.loads(report.read_text())["output"]["rows"] > 100
    assert sorted(os.listdir(tmp_path / "real")) == ["run.json", "synth.csv"]  # no temp files


def test_dangling_symlink_is_followed_or_refused_before_reading(small_csv, tmp_path):
    link = tmp_path / "run.json"
    link.symlink_to(tmp_path / "new.json")
    done = synth(small_csv, "-o", tmp_path / "out.csv", "--report", link)
    assert done.returncode == 0, done.stderr
    assert link.is_symlink() and "ledger" in json.loads((tmp_path / "new.json").read_text())
    nowhere = tmp_path / "nowhere.json"
    nowhere.symlink_to(tmp_path / "missing" / "r.json")
    loop = tmp_path / "loop.json"
    loop.symlink_to(loop)
    for bad, why in [(nowhere, "whose directory does not exist"), (loop, "symbolic links")]:
        # refused before the input is opened: it does not even exist
        done = synth(tmp_path / "not-read.csv", "-o", tmp_path / "o2.csv", "--report", bad)
        assert done.returncode == 2, done.stderr
        lines = done.stderr.splitlines()
        assert len(lines) == 1 and why in lines[0] and str(bad) in lines[0]
        assert os.path.islink(bad) and not (tmp_path / "o2.csv").exists()
    assert not (tmp_path / "missing").exists()


def test_report_to_dev_full_fails_in_one_line(small_csv, tmp_path):
    """A write error in a device fails the run (exit 1, one line, no traceback) and commits
    nothing. Run only once the code writes into devices: older code renamed its temporary
    file over /dev/full (checked here first, so that this test can never do that)."""
    if not os.path.exists("/dev/full") or not stat.S_ISCHR(os.stat("/dev/full").st_mode):
        pytest.skip("no /dev/full")
    assert atomic._check_output_path("/dev/full")[2] is True  # written in place, never replaced
    out = tmp_path / "out.csv"
    done = synth(small_csv, "-o", out, "--report", "/dev/full")
    assert stat.S_ISCHR(os.stat("/dev/full").st_mode)
    assert done.returncode == 1
    seeded, error = done.stderr.splitlines()  # --seed's warning, then the one error line
    assert seeded.startswith("dpsynth: warning: --seed given")
    assert error == "dpsynth: error: cannot write /dev/full: No space left on device"
    assert not out.exists() and sorted(os.listdir(tmp_path)) == ["small.csv"]


def test_output_checks_for_devices_and_links(tmp_path):
    """`check_outputs` (before any row is read) accepts a FIFO, makes no temporary file beside
    it, and refuses a directory reached through a link, a socket and a link loop."""
    fifo = tmp_path / "p"
    os.mkfifo(fifo)  # never opened here: no reader needed
    dio.check_outputs([str(fifo)], None)
    assert os.listdir(tmp_path) == ["p"]
    (tmp_path / "d").mkdir()
    (tmp_path / "dlink").symlink_to(tmp_path / "d")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    for bad in ("dlink", "loop"):
        with pytest.raises(UsageError):
            dio.check_outputs([str(tmp_path / bad)], None)


def test_write_outputs_into_a_fifo_and_through_a_link(tmp_path):
    fifo = FifoReader(tmp_path / "t.csv")
    real = tmp_path / "real.json"
    real.write_text("old")
    (tmp_path / "r.json").symlink_to(real)
    table = pa.table({"x": [1, 2, 3]})
    dio.write_outputs(
        table, str(fifo.path), "csv", input_path=None, extra={str(tmp_path / "r.json"): "{}"}
    )
    assert fifo.data() == b'"x"\n1\n2\n3\n' and is_fifo(fifo.path)
    assert (tmp_path / "r.json").is_symlink() and real.read_text() == "{}"


def test_move_file_follows_links_and_writes_into_fifos(tmp_path):
    src = tmp_path / "a"
    src.write_bytes(b"release")
    real, link = tmp_path / "real.csv", tmp_path / "link.csv"
    real.write_bytes(b"old")
    link.symlink_to(real)
    dio.move_file(str(src), str(link))
    assert link.is_symlink() and real.read_bytes() == b"release" and not src.exists()
    fifo = FifoReader(tmp_path / "p.csv")
    src.write_bytes(b"second")
    dio.move_file(str(src), str(fifo.path))
    assert fifo.data() == b"second" and is_fifo(fifo.path) and not src.exists()


def test_online_replay_follows_a_link_named_like_its_report(tmp_path):
    """Links named like the report and a release, to files not written yet, are followed; once
    their files exist they are published releases, never replaced (issue 38, item 4)."""
    out = tmp_path / "out"
    out.mkdir()
    real = tmp_path / "kept" / "report.json"
    real.parent.mkdir()
    (out / REPORT_NAME).symlink_to(real)
    release = tmp_path / "kept" / "first.csv"
    (out / "release-000000000100.csv").symlink_to(release)
    opts = ReplayOptions(1.0, order_by="time", output_format="csv", checkpoints="100,500")
    replay(replay_table(600), SPECS, opts, RandomSource.seeded(2), out_dir=str(out))
    assert (out / REPORT_NAME).is_symlink()
    assert json.loads(real.read_text())["ledger"]["total_epsilon"] == 1.0
    assert (out / "release-000000000100.csv").is_symlink()
    assert len(release.read_text().splitlines()) == 101
    with pytest.raises(PrivacyRefusal, match="already holds release-000000000100.csv"):
        replay(replay_table(600), SPECS, opts, RandomSource.seeded(3), out_dir=str(out))
    assert len(release.read_text().splitlines()) == 101


def test_no_default_report_beside_a_fifo(small_csv, tmp_path):
    """`-o FIFO` without --report: no FIFO.report.json beside it (as `-o /dev/null` must not
    make /dev/null.report.json in /dev), and a notice says so, as for stdout."""
    fifo = FifoReader(tmp_path / "out.csv")
    cmd = [sys.executable, "-m", "dpsynth_cli", "synth", str(small_csv), "-o", str(fifo.path)]
    cmd += ["--eps", "1", *BOUNDS[:-1]]  # not --quiet: the notice
    env = dict(os.environ, PYTHONPATH=ROOT)
    done = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env, timeout=300)
    assert fifo.data().startswith(b'"age","score"\n')
    assert done.returncode == 0, done.stderr
    assert sorted(os.listdir(tmp_path)) == ["out.csv", "small.csv"] and is_fifo(fifo.path)
    assert f"no report written ({fifo.path} is not a regular file)" in done.stderr
