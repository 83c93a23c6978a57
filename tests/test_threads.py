"""The machine's cores (issue 27): passes whose statistics merge in any order, and the output's
batches, run on several threads with exactly the one-thread results; statistics that need the
rows in order never do; an error ends the work without waiting for the rest."""

from __future__ import annotations

import threading
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dpsynth_cli.cli import app
from dpsynth_cli.engine import threads
from dpsynth_cli.engine.rows import BatchesSource, Rows, Spill
from dpsynth_cli.errors import DataError


def test_ordered_map_gives_results_in_order_taking_few_items_ahead() -> None:
    taken: list[int] = []

    def items():
        for i in range(40):
            taken.append(i)
            yield i

    def slow_square(i: int) -> int:
        time.sleep(0.002 * ((i * 7) % 5))  # later items often finish first
        return i * i

    got = []
    for r in threads.ordered_map(slow_square, items(), threads=3):
        assert len(taken) - len(got) <= 3 + 1  # a bounded window, not the whole stream
        got.append(r)
    assert got == [i * i for i in range(40)]
    assert list(threads.ordered_map(slow_square, range(5), threads=1)) == [0, 1, 4, 9, 16]


def test_ordered_map_raises_an_error_where_its_item_is_and_stops_taking_items() -> None:
    taken: list[int] = []

    def items():
        for i in range(1000):
            taken.append(i)
            yield i

    def f(i: int) -> int:
        if i == 5:
            raise DataError("item 5")
        return i

    got = []
    with pytest.raises(DataError, match="item 5"):
        for r in threads.ordered_map(f, items(), threads=2):
            got.append(r)
    assert got == [0, 1, 2, 3, 4] and len(taken) < 20


class _Counts:
    """An exact statistic (merges in any order) that records which threads added batches."""

    ANY_ORDER = True

    def __init__(self) -> None:
        self.counts = np.zeros(16, dtype=np.int64)
        self.threads: set[int] = set()

    def add(self, X: np.ndarray) -> None:
        time.sleep(0.001)  # let the other threads take batches too
        self.threads.add(threading.get_ident())
        self.counts += np.bincount((X[:, 0] * 16).astype(np.int64), minlength=16)

    def merge(self, other: _Counts) -> _Counts:
        self.counts += other.counts
        self.threads |= other.threads
        return self


class _InOrder(_Counts):
    """A statistic of the rows in stream order (as the diagnostics' first rows are)."""

    ANY_ORDER = False

    def __init__(self) -> None:
        super().__init__()
        self.first: list[float] = []

    def add(self, X: np.ndarray) -> None:
        super().add(X)
        self.first.extend(X[:, 0].tolist())


def _rows(X: np.ndarray, step: int) -> Rows:
    return Rows(BatchesSource(lambda: (X[i : i + step] for i in range(0, len(X), step))), 1)


@pytest.mark.parametrize("cores", [1, 2, 4])
def test_a_pass_on_several_threads_gives_the_one_thread_statistic(cores, monkeypatch) -> None:
    monkeypatch.setattr(threads, "cores", lambda: cores)
    X = np.random.default_rng(0).random((6000, 1))
    want = np.bincount((X[:, 0] * 16).astype(np.int64), minlength=16)
    got = _rows(X, 50).collect(_Counts)
    assert np.array_equal(got.counts, want)
    assert len(got.threads) == cores  # every thread took batches
    ordered = _rows(X, 50).collect(_InOrder)
    assert len(ordered.threads) == 1 and ordered.first == X[:, 0].tolist()


def test_an_error_in_a_pass_ends_it_and_the_threads_stop_taking_batches(monkeypatch) -> None:
    monkeypatch.setattr(threads, "cores", lambda: 4)
    taken: list[int] = []

    def batches():
        for i in range(1000):
            taken.append(i)
            if i == 10:
                raise DataError("bad batch 10")
            yield np.full((5, 1), 0.5)

    with pytest.raises(DataError, match="bad batch 10"):
        Rows(BatchesSource(batches), 1).collect(_Counts)
    assert len(taken) == 11


class _Failing(_Counts):
    """Batch 3 fails slowly, batch 7 at once: on threads, 7's error comes first in time."""

    def add(self, X: np.ndarray) -> None:
        if X[0, 0] == 3:
            time.sleep(0.2)
            raise DataError("batch 3")
        if X[0, 0] == 7:
            raise DataError("batch 7")
        super().add(X * 0)


def test_the_error_raised_is_the_earliest_failing_batchs_as_on_one_thread(monkeypatch) -> None:
    X = np.repeat(np.arange(20.0), 5)[:, None]
    for cores in (1, 4):
        monkeypatch.setattr(threads, "cores", lambda cores=cores: cores)
        with pytest.raises(DataError, match="batch 3"):
            _rows(X, 5).collect(_Failing)


def test_spills_merge_in_order_and_a_failed_one_fails_the_merge() -> None:
    a, b = Spill(), Spill()
    a.add(np.arange(6.0).reshape(3, 2))
    b.add(np.arange(6.0, 10.0).reshape(2, 2))
    merged = a.merge(b)
    assert merged.ok and merged.rows == 5 and not b.ok  # b's file is merged's now
    assert np.array_equal(np.concatenate(list(merged.batches())), np.arange(10.0).reshape(5, 2))
    broken = Spill()
    broken.close()  # as after a failed write
    assert not merged.merge(broken).ok
    merged.close()


@pytest.mark.parametrize("mechanism", ["privtree", "hierarchy", "marginals"])
def test_the_cli_writes_the_same_file_on_one_thread_or_several(
    mechanism, runner, tmp_path, monkeypatch
) -> None:
    """Every pass and many output batches (--batch-rows 300) on 1 or 3 threads: the same bytes."""
    rng = np.random.default_rng(4)
    n = 6000
    table = pa.table(
        {
            "a": rng.normal(50, 15, n).clip(0, 100),
            "b": rng.gamma(2.0, 10.0, n).clip(0, 100),
            "c": rng.integers(0, 100, n).astype(float),
            "d": rng.random(n) * 100,
        }
    )
    src = tmp_path / "in.parquet"
    pq.write_table(table, src, row_group_size=500)
    outputs = []
    for cores in (1, 3):
        monkeypatch.setattr(threads, "cores", lambda cores=cores: cores)
        out = tmp_path / f"out{cores}.csv"
        flags = [f"--bounds={c}=0:100" for c in "abcd"]
        result = runner.invoke(
            app,
            ["synth", str(src), "-o", str(out), "--eps", "5", "--seed", "3", *flags]
            + ["--mechanism", mechanism, "--batch-rows", "300", "--quiet"],
        )
        assert result.exit_code == 0, result.output
        outputs.append(out.read_bytes())
    assert outputs[0] == outputs[1] and outputs[0].count(b"\n") > 1000
