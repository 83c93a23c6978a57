"""Rows as passes over record batches: the only way a mechanism reads data.

A mechanism never holds the n x d matrix. It asks for a statistic: `rows.collect(make)` runs one
pass, feeding every batch of rows (float64, (m, d)) to an accumulator made by `make()`, and
returns it. Accumulators hold exact integers where they are counts, so any split of the rows into
batches, and any merge order across workers, gives the same statistic bit for bit; the private
release then runs on one machine over the statistic. `rows.map(f, d)` is the same rows seen
through a fixed public map (the unit-cube rescaling, `--dim`'s projection), applied batch by
batch inside the pass.

Where the batches come from is a `BatchSource`: a matrix in memory (`as_rows`), a stream of
record batches read from files (`engine.local`), or Dask partitions (`engine.dask`).
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import IO, Any, Protocol, TypeVar

import numpy as np

from dpsynth_cli.engine import threads

Transform = Callable[[np.ndarray], np.ndarray]


class Accumulator(Protocol):
    """A mergeable statistic of rows: `add` a batch (any number of times), `merge` another."""

    def add(self, X: np.ndarray) -> None: ...

    def merge(self, other: Accumulator) -> Accumulator: ...


A = TypeVar("A", bound=Accumulator)


class BatchSource(Protocol):
    """Runs one pass: every batch through `transform` into a fresh accumulator from `make`."""

    def collect(self, make: Callable[[], A], transform: Transform) -> A: ...


@dataclass(frozen=True)
class Rows:
    """The rows of a table as d columns in a known space, read only through passes."""

    source: BatchSource
    d: int
    transforms: tuple[Transform, ...] = ()
    # Statistics of exactly these rows that an earlier pass already accumulated (synth's first
    # pass computes PrivTree's first histogram and the marginals' counts with the row count: a
    # pass fewer). A mechanism that recognises one (`ahead_of`) may use it instead of a pass; a
    # map to other rows drops them.
    ahead: tuple[Any, ...] = ()
    # Bits split first for each of the first len(lead) columns: the level columns, which synth
    # puts first (`partition`, "Level columns first"). Public (the schema); a map drops it.
    lead: tuple[int, ...] = ()
    # (value column, missing flag column) of each nullable float/datetime column (`Domain`).
    flagged: tuple[tuple[int, int], ...] = ()
    # Codes of each column (`Domain.cube_codes`): a level column's levels (2 for a missing flag),
    # an integer or date column's whole codes, 0 for a float or datetime column. Public.
    codes: tuple[int, ...] = ()
    # Integer and date columns (not level columns) whose last code means "missing" (nullable).
    coded_missing: tuple[int, ...] = ()
    # Date and datetime columns' wall-clock facts (`Domain.cube_clocks`, `wallclock`). Public.
    clocks: tuple[Any, ...] = ()
    # Declared dependencies (the schema's "determines"), as (determining, determined) cube level
    # columns, whose map the marginals mechanism learns privately (`pairs.declared_edges`).
    determines: tuple[tuple[int, int], ...] = ()
    # Cube columns whose output values are derived after the mechanism (declared derivations
    # and public maps): a mechanism may leave them unmeasured. Public (the schema).
    derived: tuple[int, ...] = ()

    def ahead_of(self, kind: type[A]) -> A | None:
        """The statistic of this type that an earlier pass took, if any."""
        return next((a for a in self.ahead if isinstance(a, kind)), None)

    def collect(self, make: Callable[[], A]) -> A:
        """One pass over the rows: the statistic `make()` accumulates."""
        return self.source.collect(make, Chain(self.transforms))

    def map(self, f: Transform, d: int) -> Rows:
        """The same rows through the row-wise map f into d columns (applied inside each pass)."""
        return Rows(self.source, d, (*self.transforms, f))


@dataclass(frozen=True)
class Chain:
    """Row-wise maps applied in turn (picklable when they are: Dask ships it to workers)."""

    transforms: tuple[Transform, ...]

    def __call__(self, X: np.ndarray) -> np.ndarray:
        for f in self.transforms:
            X = f(X)
        return X


@dataclass(frozen=True)
class MatrixSource:
    """Rows already in memory: one batch (the pass is a single `add`)."""

    X: np.ndarray

    def collect(self, make: Callable[[], A], transform: Transform) -> A:
        acc = make()
        acc.add(transform(self.X))
        return acc


@dataclass(frozen=True)
class BatchesSource:
    """Rows from a re-iterable stream of batches: `batches()` starts a new pass each call.

    `parse`: what turns one item of the stream into rows (m, d), e.g. a record batch into its
    value rows; it runs on the thread that adds the batch, so batches are read in turn and
    parsed side by side."""

    batches: Callable[[], Iterable[Any]]
    parse: Transform | None = None

    def collect(self, make: Callable[[], A], transform: Transform) -> A:
        if self.parse is not None:
            transform = Chain((self.parse, transform))
        return collect_batches(self.batches(), make, transform)


def any_order(acc: Accumulator) -> bool:
    """Whether merging acc's batches in any order, split any way, gives the same statistic bit
    for bit (its class says `ANY_ORDER = True`: exact integer counts and sums). Only such
    statistics are taken on several threads (`threads.collect`)."""
    return bool(getattr(acc, "ANY_ORDER", False))


def collect_batches(batches: Iterable[Any], make: Callable[[], A], transform: Transform) -> A:
    """A pass over a stream of batches: on the machine's cores when the statistic merges in any
    order (the same result as one thread), else in one thread in stream order.

    On n threads each batch is cut into n slices (views, no copies), which the threads take in
    turn: the rows in flight stay about one batch's worth, as on one thread, rather than n."""
    first = make()
    cores = threads.cores()
    if cores <= 1 or not any_order(first):
        for X in batches:
            first.add(transform(X))
        return first
    made = [first]

    def start() -> A:
        return made.pop() if made else make()

    def add(acc: A, X: np.ndarray) -> None:
        acc.add(transform(X))

    return threads.collect(_slices(batches, cores), start, add, cores)


def _slices(batches: Iterable[Any], n: int) -> Iterator[Any]:
    """Each batch (rows first: an array, a record batch, a table) as n consecutive slices."""
    for batch in batches:
        step = max(1, -(-len(batch) // n))
        for lo in range(0, len(batch), step):
            yield batch[lo : lo + step]


def as_rows(X: Rows | np.ndarray) -> Rows:
    """`X` itself if it is Rows; an in-memory matrix (m, d) as one-batch Rows."""
    if isinstance(X, Rows):
        return X
    X = np.asarray(X, dtype=np.float64)
    return Rows(MatrixSource(X), X.shape[1])


SPILL_BATCH_BYTES = 1 << 24  # what a pass over a spill reads at a time (16 MiB)


class Spill:
    """Rows written once by the first pass, read back by later passes instead of the input.

    The input is parsed, checked, rescaled and encoded once (issue 27): a later pass reads the
    rows (cube coordinates, or PrivTree's cell codes) from here at the speed of the page cache.
    Each file is unnamed (`TemporaryFile`: O_TMPFILE, or unlinked at once), so the rows never
    have a name in the file system and go with the process, however it ends. Spills of one
    process merge (the threads of a pass each write their own: `threads.collect`); a spill
    belongs to local passes (Dask workers keep their partitions themselves). A failed write (a
    full disk) drops the spill and the later passes read the input again, so the outcome never
    depends on how much was written. The rows come back in file order, which passes whose
    statistics merge in any order (`any_order`) do not see.
    """

    def __init__(self, dtype: type = np.float64) -> None:
        self.dtype = np.dtype(dtype)
        self.shape: tuple[int, ...] = ()  # of one row: () for a value per row, else (d,)
        self.rows = 0
        # (file, rows in it); unbuffered: every write reaches the system at once, so a full
        # disk raises here.
        self.files: list[tuple[IO[bytes], int]] | None = None
        with contextlib.suppress(OSError):  # no usable $TMPDIR: no spill
            self.files = [(tempfile.TemporaryFile(prefix="dpsynth-", buffering=0), 0)]

    def add(self, X: np.ndarray) -> None:
        if self.files is None:
            return
        if self.rows == 0:
            self.shape = X.shape[1:]
        if X.size == 0:
            return
        data = memoryview(np.ascontiguousarray(X, dtype=self.dtype)).cast("B")
        file, rows = self.files[-1]
        try:
            while data:  # a raw write may take part of the buffer
                data = data[file.write(data) :]
        except OSError:
            self.close()
            return
        self.files[-1] = (file, rows + X.shape[0])
        self.rows += X.shape[0]

    def merge(self, other: Spill) -> Spill:
        """Both spills' rows (this one's first); not ok if either is not."""
        if self.files is None or other.files is None:
            self.close()
            other.close()
            return self
        if other.rows:
            if self.rows and other.shape != self.shape:
                raise ValueError("spills of rows of different shapes do not merge")
            self.shape = other.shape
        self.files += other.files
        self.rows += other.rows
        other.files = None  # the files are this spill's now
        return self

    @property
    def ok(self) -> bool:
        """Whether every row written is here (no write failed, not closed)."""
        return self.files is not None

    def close(self) -> None:
        for file, _ in self.files or ():
            file.close()
        self.files = None

    def batches(self) -> Iterator[np.ndarray]:
        """The rows as written, in batches of about SPILL_BATCH_BYTES."""
        if self.files is None:
            raise RuntimeError("the spill is closed")
        width = int(np.prod(self.shape, dtype=np.int64))
        step = max(1, SPILL_BATCH_BYTES // (self.dtype.itemsize * max(width, 1)))
        for file, rows in self.files:
            file.seek(0)
            for lo in range(0, rows, step):
                m = min(step, rows - lo)
                X = np.empty((m, *self.shape), dtype=self.dtype)
                view = memoryview(X).cast("B")
                while view:
                    got = file.readinto(view)
                    if not got:
                        raise OSError("a spill file ended early")
                    view = view[got:]
                yield X


@dataclass(frozen=True)
class SpillSource:
    """Passes over a `Spill` of rows (m, d)."""

    spill: Spill

    def collect(self, make: Callable[[], A], transform: Transform) -> A:
        return collect_batches(self.spill.batches(), make, transform)
