"""The statistics pass (issue 11): any split of the rows into batches, and any merge order, gives
the one-batch statistics bit for bit; the streamed pipeline gives the in-memory seeded outputs;
the output drawn in batches holds the released cell sizes exactly, in random order."""

from __future__ import annotations

from functools import partial

import numpy as np
import pyarrow as pa
import pytest

from dpsynth_cli.engine import threads
from dpsynth_cli.engine.rows import BatchesSource, Rows, as_rows
from dpsynth_cli.mechanisms import grid, partition, privtree
from dpsynth_cli.mechanisms.base import Output, split_batches
from dpsynth_cli.mechanisms.moments import MomentSums
from dpsynth_cli.synth import CountAndBounds
from tests.test_seeded_outputs import CASES, DATA, _run


def _rows(X: np.ndarray, sizes: list[int]) -> Rows:
    """X split into consecutive batches of the given sizes (the last takes the rest)."""
    cuts = np.cumsum(sizes)
    return Rows(BatchesSource(lambda: np.split(X, cuts)), X.shape[1])


def _pieces(n: int, rng: np.random.Generator) -> list[int]:
    return sorted(rng.choice(np.arange(n + 1), size=4)) if n else [0]


STATISTICS = {
    "leaf counts": (lambda d: partial(partition.LeafCounts, 14, d), lambda a: a.counts),
    "grid counts": (lambda d: partial(grid.GridCounts, 7, d), lambda a: a.counts),
    "moment sums": (
        lambda d: partial(MomentSums.empty, d),
        lambda a: np.concatenate([a.first, a.second.ravel()]),
    ),
    "subtree counts": (
        lambda d: partial(partition.SubtreeCounts, np.array([1, 2, 5]), 3, 9, d),
        lambda a: a.counts(np.arange(2 << 9, 3 << 9), 12),
    ),
    "subtree counts (dense)": (
        lambda d: partial(partition.SubtreeCounts, np.array([0]), 0, 6, d),
        lambda a: a.counts(np.arange(1 << 6), 6),
    ),
    "count and bounds": (
        lambda d: partial(CountAndBounds, tuple(sorted({0, d - 1}))),
        lambda a: np.concatenate([[a.n], a.fine[0].ravel(), a.fine[a.columns[-1]].ravel()]),
    ),
}


@pytest.mark.parametrize("name", STATISTICS)
@pytest.mark.parametrize("d", [1, 3])
def test_any_batch_split_and_merge_gives_the_one_batch_statistic(name: str, d: int) -> None:
    make, value = STATISTICS[name]
    rng = np.random.default_rng(5)
    X = rng.beta(2, 5, size=(3000, d))
    X[:7] = 1.0  # the upper faces
    whole = value(as_rows(X).collect(make(d)))
    for trial in range(5):
        sizes = _pieces(X.shape[0], rng)
        assert np.array_equal(value(_rows(X, sizes).collect(make(d))), whole), (name, sizes)
        step = 400 + 211 * trial
        parts = [as_rows(X[i : i + step]).collect(make(d)) for i in range(0, 3000, step)]
        order = rng.permutation(len(parts))
        merged = parts[order[0]]
        for i in order[1:]:
            merged = merged.merge(parts[i])
        assert np.array_equal(value(merged), whole), (name, "merge")


def test_subtree_counts_answer_every_level_they_span() -> None:
    X = np.random.default_rng(1).random((2000, 2))
    roots = np.array([3, 9, 10])  # cells at level 4
    h = as_rows(X).collect(partial(partition.SubtreeCounts, roots, 4, 5, 2))
    codes = np.sort(partition.leaf_codes(X, 9))
    for level in range(4, 10):
        cells = np.concatenate([(r << (level - 4)) + np.arange(1 << (level - 4)) for r in roots])
        shift = 9 - level
        want = np.searchsorted(codes, (cells + 1) << shift) - np.searchsorted(codes, cells << shift)
        assert np.array_equal(h.counts(cells, level), want)


@pytest.mark.parametrize("lookup_bits", [0, 2, 5, 24])
def test_subtree_counts_find_the_roots_with_any_lookup_table(lookup_bits, monkeypatch) -> None:
    """Rows are matched to their root through a table over the roots' ancestors at level
    LOOKUP_BITS (one root below an ancestor: compared; several: binary search): the counts are
    the same whatever the table's level, roots alone or crowded under one ancestor."""
    monkeypatch.setattr(partition.SubtreeCounts, "LOOKUP_BITS", lookup_bits)
    X = np.random.default_rng(2).beta(0.5, 0.5, size=(5000, 2))
    roots = np.array([0, 1, 2, 7, 40, 41, 63])  # cells at level 6, some sharing ancestors
    h = as_rows(X).collect(partial(partition.SubtreeCounts, roots, 6, 3, 2))
    codes = np.sort(partition.leaf_codes(X, 9))
    cells = np.concatenate([(r << 3) + np.arange(8) for r in roots])
    want = np.searchsorted(codes, cells + 1) - np.searchsorted(codes, cells)
    assert np.array_equal(h.counts(cells, 9), want)
    assert np.array_equal(h.counts(roots, 6), [np.sum(codes >> 3 == r) for r in roots])


def _streamed(monkeypatch, reads: list[int]) -> None:
    """synth reads every in-memory table as record batches of 97 rows, counting its reads."""
    import dpsynth_cli.synth as synth

    real = synth.tallied_rows

    def streamed(data, specs):
        if isinstance(data, pa.Table):

            def batches():
                reads.append(1)
                return data.to_batches(max_chunksize=97)

            return real(batches, specs)
        return real(data, specs)

    monkeypatch.setattr(synth, "tallied_rows", streamed)


@pytest.mark.parametrize("cores", [1, 4])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_streamed_pipeline_gives_the_stored_seeded_outputs(case, cores, monkeypatch) -> None:
    """The real pipeline on record batches of 97 rows, PrivTree allowed only 2^6 cells per pass
    (so deep trees take many passes) and finding roots through a table of 2^3 ancestors, gives
    the outputs stored before the refactor, and reads the input once (issue 27: the later
    passes read the first pass's spill, cube rows or cell codes), on one thread or several
    (`threads`: each takes batches into its own statistic and spill; they merge)."""
    monkeypatch.setattr(threads, "cores", lambda: cores)
    monkeypatch.setattr(privtree, "PASS_BITS", 6)
    monkeypatch.setattr(partition.SubtreeCounts, "LOOKUP_BITS", 3)
    reads: list[int] = []
    _streamed(monkeypatch, reads)
    stored = np.load(DATA)
    for key, value in _run(case).items():
        np.testing.assert_array_equal(value, stored[key], err_msg=key)
    assert len(reads) == 1


def _no_temporary_file(**_):
    raise PermissionError("no usable temporary directory")


@pytest.mark.parametrize(
    "make", [lambda **_: open("/dev/full", "w+b", buffering=0), _no_temporary_file]
)
def test_a_failed_spill_reads_the_input_again_with_the_same_release(make, monkeypatch) -> None:
    """A spill that cannot be written (a full disk: /dev/full) or made (no usable $TMPDIR) is
    dropped, and the later passes read the input again: the same outputs, so the outcome never
    depends on the disk."""
    from dpsynth_cli.engine import rows as rows_module

    monkeypatch.setattr(privtree, "PASS_BITS", 6)
    monkeypatch.setattr(rows_module.tempfile, "TemporaryFile", make)
    stored = np.load(DATA)
    for name in ("privtree-3d-deep", "dim2-5d", "bounds-2d"):
        reads: list[int] = []
        _streamed(monkeypatch, reads)
        for key, value in _run(next(c for c in CASES if c[0] == name)).items():
            np.testing.assert_array_equal(value, stored[key], err_msg=key)
        assert len(reads) > 1, name


def test_spilled_rows_never_have_a_name_and_go_with_the_run(monkeypatch, tmp_path) -> None:
    """The spill files are unnamed (O_TMPFILE or unlinked at once): the temporary directory
    stays empty while rows are spilled and read back, and every spill is closed at the end."""
    from dpsynth_cli.engine import rows as rows_module

    monkeypatch.setattr(rows_module.tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(privtree, "PASS_BITS", 6)
    made, seen = [], []
    real_init, real_batches = rows_module.Spill.__init__, rows_module.Spill.batches

    def init(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        made.append(self)

    def batches(self):
        seen.append(sorted(p.name for p in tmp_path.iterdir()))
        yield from real_batches(self)

    monkeypatch.setattr(rows_module.Spill, "__init__", init)
    monkeypatch.setattr(rows_module.Spill, "batches", batches)
    _streamed(monkeypatch, [])
    _run(next(c for c in CASES if c[0] == "privtree-3d-deep"))
    _run(next(c for c in CASES if c[0] == "dim2-5d"))
    assert made and seen and all(names == [] for names in seen)
    assert all(not spill.ok for spill in made)
    assert list(tmp_path.iterdir()) == []


def _output(sizes: np.ndarray, d: int = 2) -> Output:
    def place(cells, counts, rng):
        pts = np.repeat(cells, counts).astype(np.float64)[:, None] + np.zeros((1, d))
        return pts[rng.permutation(pts.shape[0])]

    return Output(sizes, place, np.random.default_rng(3), d)


def test_output_in_batches_holds_every_released_row_once_and_is_repeatable() -> None:
    sizes = np.random.default_rng(0).poisson(3.0, size=5000)
    sizes[::7] = 0
    out = _output(sizes)
    batches = list(out.batches(1000))
    assert all(0 < b.shape[0] <= 1000 for b in batches)
    cells = np.concatenate(batches)[:, 0].astype(np.int64)
    assert np.array_equal(np.bincount(cells, minlength=sizes.size), sizes)
    again = np.concatenate(list(out.batches(1000)))
    assert np.array_equal(np.concatenate(batches), again)  # a copy of the generator each time
    whole = next(out.batches())
    assert whole.shape[0] == sizes.sum()


def test_split_batches_puts_rows_in_uniformly_random_order() -> None:
    """The first batch is a uniform random subset of the rows: its share of a cell's rows has
    the hypergeometric mean and variance (2000 splits, 4 cells of 600/300/80/20 rows)."""
    sizes = np.array([600, 300, 80, 20])
    rng = np.random.default_rng(11)
    firsts = []
    for _ in range(2000):
        cells, counts = next(split_batches(sizes, 250, rng))
        row = np.zeros(4)
        row[cells] = counts
        firsts.append(row)
    firsts = np.array(firsts)
    m = firsts.sum(axis=1, keepdims=True)  # the first batch's size varies (binary halving)
    share = (firsts / m).mean(axis=0)
    se = np.sqrt(sizes / 1000 * (1 - sizes / 1000) / m.mean() / 2000)
    assert np.all(np.abs(share - sizes / 1000) < 4.5 * se + 1e-9), share


@pytest.mark.parametrize("c", [0, 1, 7, 40, 64, 65, 300])
def test_fair_halves_are_binomial_half(c: int) -> None:
    """Popcount of c random bits (c <= 64) and numpy's binomial (c > 64) both draw
    Binomial(c, 1/2): chi-square against the exact pmf over 100,000 draws (p > 1e-4), the
    mean and variance within 5 standard errors. A wrong mask (one bit too many) fails."""
    from scipy import stats

    from dpsynth_cli.mechanisms.base import fair_halves

    draws = fair_halves(np.full(100_000, c), np.random.default_rng(c))
    assert draws.min() >= 0 and draws.max() <= c
    assert abs(draws.mean() - c / 2) < 5 * np.sqrt(c / 4 / draws.size) + 1e-12
    if c:
        pmf = stats.binom.pmf(np.arange(c + 1), c, 0.5)
        keep = pmf * draws.size >= 5  # cells with enough expected counts; the rest pooled
        seen = np.bincount(draws, minlength=c + 1)
        observed = np.r_[seen[keep], seen[~keep].sum()]
        expected = np.r_[pmf[keep], pmf[~keep].sum()] * draws.size
        nonzero = expected > 0
        chi2 = stats.chisquare(observed[nonzero], expected[nonzero])
        assert chi2.pvalue > 1e-4, chi2


def test_progress_counts_rows_per_pass_on_a_terminal_and_is_silent_otherwise() -> None:
    from dpsynth_cli.console import Feedback

    table = pa.table({"a": np.arange(250)})
    batches = lambda: table.to_batches(max_chunksize=100)  # noqa: E731
    quiet = Feedback(quiet=True)
    assert [b.num_rows for b in quiet.passes(batches, 250)()] == [100, 100, 50]

    class Status:
        texts: list[str] = []

        def update(self, text: str) -> None:
            self.texts.append(text)

    shown = Feedback(quiet=False)
    shown.interactive, shown._status = True, Status()
    wrapped = shown.passes(batches, 250)
    assert sum(b.num_rows for b in wrapped()) == 250
    assert sum(b.num_rows for b in wrapped()) == 250
    texts = Status.texts
    assert "(pass 1): 250 rows" in texts[2] and "(pass 2): 100 rows" in texts[4]
    assert all("rows/s" in t and "left" in t for t in texts[:2])
    assert "(pass 1): all 250 rows read; working" in texts[3]  # not "about 0 s left"
