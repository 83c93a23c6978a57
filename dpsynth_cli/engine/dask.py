"""`--engine dask`: the statistics passes run as Dask tasks over the input's partitions.

Each partition (a Parquet file of a dataset directory, one row group range of a Parquet file, a
CSV file) is read and parsed once, in the first pass, by a worker with the same reader and the
same per-cell parsing as the local engine, into its value rows (float64, exact: what the local
engine's passes see before their transform), which the worker keeps (`DaskSource.held`: Dask
futures of the first pass's `_load` tasks; issue 27). Every pass, the first one too, maps its
accumulator over the held rows on the workers and merges the statistics pairwise on the
cluster (`_tree_merge`), and only the merged statistic travels to the client. They are exact
integers, so the release on the client sees the statistics of the local engine bit for bit,
and a seeded run gives the same output. Workers never see noise or released values: the
release runs on the client. The held rows are released when the passes end, however they end
(`dask_rows`), before the output is written.

Held rows are private rows, and Dask may write them to disk: a worker whose memory passes
`distributed.worker.memory.target` / `.spill` (0.6 / 0.7 of its limit by default) pickles
values into files named by their keys (`_load-<id>#<n>`) in `<its directory>/storage`; a
file is unlinked (not overwritten) when its value is read back or released, and the worker's
directory is removed when the worker closes. A worker that dies (killed, out of memory, its
machine lost) leaves its directory behind until another worker starts in the same scratch
space; Dask recomputes its held rows elsewhere from their lineage (the partition is read
again). The local cluster puts every worker's (and the scheduler's) directory in a directory of
this run's own, mode 0700, removed when the cluster stops (`local_cluster`); on an existing
cluster the workers' directories and their spill settings are the cluster's (docs/privacy.md).
Dask may also copy a held partition to another worker (work stealing, a lost worker), over the
cluster's connections.

The output is written by the workers too (`write_output`): the client plans the output batches
(cells, counts and a generator of its own for each: `Output.plan`), and each batch goes to a
worker with the release's placement and the map back to original units (`synth.BatchTables`),
which places its points and writes them as one part file of a directory. What is shipped is
released values, public geometry and post-processing seeds, never rows; batch i's rows are the
local engine's batch i for the same seed and `--batch-rows`, so the parts in name order are the
local engine's output.

`--scheduler ADDRESS` connects to a running cluster (`dask scheduler` / `dask worker`, or any
deployment of distributed) with the security of Dask's configuration (for `tls://` addresses:
`distributed.comm.tls.*`, docs/privacy.md); without it a LocalCluster of `workers` processes runs
on this machine, which only this process can use (`local_cluster`). Dask is an optional extra:
`pip install 'dpsynth-cli[dask]'`.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import tempfile
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np

from dpsynth_cli import io
from dpsynth_cli.domain import ColumnSpec, tallied_matrix
from dpsynth_cli.engine.plan import BatchPlan
from dpsynth_cli.engine.rows import A, Rows, Transform
from dpsynth_cli.errors import DpsynthError, UsageError

DEFAULT_WORKERS = 2
PLAIN_SCHEDULER = (
    "--scheduler {scheduler} is not tls://: the connection is neither encrypted nor "
    "authenticated, and whoever can reach that scheduler can run code on the workers, which "
    "read the input; use tls:// with Dask's TLS configuration (docs/privacy.md)"
)


@dataclass(frozen=True)
class Partition:
    """One unit of work: a reader that starts a pass over one part of the input."""

    name: str
    read: Callable[[], Any]  # () -> iterable of pa.RecordBatch / pa.Table


def _load(part: Partition, specs: list[ColumnSpec]) -> tuple[np.ndarray, ...]:
    """On a worker: read and parse one partition once, into its rows as `tallied_matrix` gives
    them (float64, exact: the values, then the first unusable column; synth's first pass counts
    the dropped rows per column, later passes keep the complete ones), batch by batch as read.
    Read-only, so that no pass can change what the next one reads."""
    held = []
    for batch in part.read():
        X = tallied_matrix(batch, specs).reshape(-1, len(specs) + 1)
        X.flags.writeable = False
        held.append(X)
    return tuple(held)


def _statistic(held: tuple[np.ndarray, ...], make: Callable[[], A], transform: Transform) -> A:
    """On a worker: one pass's statistic of one partition's held rows."""
    acc = make()
    for X in held:
        acc.add(transform(X))
    return acc


def _merge(a: A, b: A) -> A:
    return a.merge(b)


def _tree_merge(client: Any, stats: list[Any]) -> Any:
    """The merge of the statistics' futures, pairwise on the cluster (depth log2 of their
    number); each statistic is merged once, so `merge` may change its first argument."""
    while len(stats) > 1:
        pairs = [
            client.submit(_merge, a, b, pure=False)
            for a, b in zip(stats[::2], stats[1::2], strict=False)
        ]
        stats = pairs + stats[2 * len(pairs) :]
    return stats[0]


@dataclass
class DaskSource:
    """A `BatchSource` whose first pass reads every partition once on a worker and holds its
    value rows there (`held`: Dask futures, in the workers' memory or Dask's spill to disk);
    every pass maps its accumulator over the held rows and merges on the cluster."""

    client: Any
    parts: list[Partition]
    specs: list[ColumnSpec]
    held: list[Any] = field(default_factory=list)

    def collect(self, make: Callable[[], A], transform: Transform) -> A:
        if not self.held:  # the first pass reads the input; no pass after it does
            self.held = [
                self.client.submit(_load, part, self.specs, pure=False) for part in self.parts
            ]
        stats = [
            self.client.submit(_statistic, rows, make, transform, pure=False) for rows in self.held
        ]
        return _tree_merge(self.client, stats).result()

    def release(self) -> None:
        """Drop the held rows from the workers (and from their spill directories)."""
        held, self.held = self.held, []
        if held:
            self.client.cancel(held)


@contextlib.contextmanager
def dask_rows(client: Any, parts: list[Partition], specs: list[ColumnSpec]) -> Iterator[Rows]:
    """The rows of the partitions as `tallied_matrix` gives them (d + 1 columns), read once on
    the workers and held there until the block ends (however it ends)."""
    if not parts:
        raise UsageError("the dask engine found no input partitions")
    source = DaskSource(client, parts, specs)
    try:
        yield Rows(source, len(specs) + 1)
    finally:
        source.release()


NEEDS_DASK = "--engine dask needs Dask: pip install 'dpsynth-cli[dask]' (or dask[distributed])"
NEEDS_CRYPTOGRAPHY = (
    "--engine dask needs the cryptography package for its local cluster's TLS: pip install "
    "'dpsynth-cli[dask]'"
)


def check_installed(scheduler: str | None) -> None:
    """The packages `client` will import are installed: a usage error before the input is
    opened and the spend recorded (`client` itself runs after them)."""
    from importlib.util import find_spec

    if find_spec("distributed") is None:
        raise UsageError(NEEDS_DASK)
    if not scheduler and find_spec("cryptography") is None:
        raise UsageError(NEEDS_CRYPTOGRAPHY)


@contextlib.contextmanager
def client(scheduler: str | None, workers: int = DEFAULT_WORKERS) -> Iterator[Any]:
    """A distributed Client: to `scheduler` if given (security from Dask's configuration), else
    to a LocalCluster started here that only this process can use (`local_cluster`)."""
    try:
        from distributed import Client
    except ImportError:
        raise UsageError(NEEDS_DASK) from None
    if scheduler:
        try:
            connected = Client(scheduler)
        except (OSError, TypeError, ValueError) as exc:  # e.g. tls:// without a configuration
            reason = "no TLS configuration" if isinstance(exc, TypeError) else type(exc).__name__
            raise DpsynthError(
                f"--scheduler {scheduler}: cannot connect ({reason}); a tls:// scheduler needs "
                "Dask's TLS configuration (distributed.comm.tls.*, docs/privacy.md)"
            ) from None
        with connected as c:
            yield c
        return
    with local_cluster(workers) as cluster, Client(cluster, security=cluster.security) as c:
        yield c


# The HTTP servers that every scheduler and worker starts serve these modules (Dask's defaults:
# the dashboard's information pages, Prometheus metrics of tasks and memory, ...). The local
# cluster serves none of them: its HTTP servers answer 404 to everything.
_NO_HTTP_ROUTES = {"distributed.scheduler.http.routes": [], "distributed.worker.http.routes": []}


@contextlib.contextmanager
def local_cluster(workers: int = DEFAULT_WORKERS) -> Iterator[Any]:
    """A LocalCluster of `workers` processes that only this process can use.

    The workers read the raw input, so whoever can talk to the scheduler or a worker can read
    it (by submitting a task). Every listener is bound to 127.0.0.1 and speaks TLS with
    temporary credentials (`Security.temporary`: a key and self-signed certificate made here,
    kept in memory, handed to the worker processes through their pipes), and both ends of
    every connection must present that certificate, so another local user cannot connect. No
    dashboard, and the HTTP servers serve no pages (`_NO_HTTP_ROUTES`)."""
    import dask
    from distributed import LocalCluster, Security

    try:
        security = Security.temporary()
    except ImportError:
        raise UsageError(NEEDS_CRYPTOGRAPHY) from None
    # The workers' directories (Dask's spill files among them) in a directory of this run's
    # own, mode 0700, removed when the cluster has stopped: a worker that died leaves nothing.
    scratch = tempfile.mkdtemp(prefix="dpsynth-dask-")
    try:
        with (
            dask.config.set({**_NO_HTTP_ROUTES, "temporary-directory": scratch}),
            LocalCluster(
                n_workers=workers,
                threads_per_worker=1,
                processes=True,
                host="127.0.0.1",
                protocol="tls://",
                security=security,
                dashboard_address=None,
                worker_dashboard_address=None,
                # no dashboard; the scheduler's (empty) HTTP server on a free loopback port
                scheduler_kwargs={"dashboard": False, "dashboard_address": "127.0.0.1:0"},
                silence_logs=50,
                local_directory=scratch,
            ) as cluster,
        ):
            yield cluster
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _parquet_part(path: str, columns: list[str], row_groups: list[int] | None, batch_rows: int):
    import pyarrow.parquet as pq

    return pq.ParquetFile(path, pre_buffer=False).iter_batches(  # as io: bounded memory
        batch_size=batch_rows, row_groups=row_groups, columns=columns
    )


def parquet_partitions(
    path: str, columns: list[str], batch_rows: int, parts_per_file: int = 4
) -> list[Partition]:
    """A Parquet file as ranges of its row groups (about `parts_per_file` of them), or a
    directory of Parquet files (sorted by name) as one partition per file."""
    import pyarrow.parquet as pq

    if os.path.isdir(path):
        files = io.parquet_files(path)
        return [Partition(f, partial(_parquet_part, f, columns, None, batch_rows)) for f in files]
    groups = list(range(pq.ParquetFile(path).num_row_groups))
    step = max(1, -(-len(groups) // parts_per_file))
    return [
        Partition(
            f"{path}#{lo}",
            partial(_parquet_part, path, columns, groups[lo : lo + step], batch_rows),
        )
        for lo in range(0, max(len(groups), 1), step)
    ]


def write_output(
    client: Any,
    tables: Callable[[BatchPlan], Any],
    plan: Iterable[BatchPlan],
    path: str,
    fmt: str,
    schema: Any,
    *,
    input_path: str | None,
    extra: Mapping[str, str | bytes] | None = None,
    private: Collection[str] = (),
    window: int | None = None,
    final: bool = False,
) -> int:
    """Write the output as a directory of part files, part i = batch i of `plan`, each placed
    and written by a worker (`tables(batch)`: placement and map back), all or nothing with the
    `extra` files after it (`io.write_part_directory`; those in `private` owner-only). Returns
    the number of parts.

    `plan` is consumed lazily and at most `window` batches (default: twice the workers' threads)
    are out at once, so the client holds a few batch plans, never the output. `final`: the
    run's last outputs (`io.write_outputs`).
    """
    suffix = io.part_suffix(path, fmt)

    def fill(tmp: str) -> int:
        return _write_parts(client, tables, iter(plan), tmp, path, suffix, fmt, schema, window)

    return io.write_part_directory(
        fill, path, fmt, input_path=input_path, extra=extra, private=private, final=final
    )


def _write_parts(
    client: Any,
    tables: Callable[[BatchPlan], Any],
    plan: Iterator[BatchPlan],
    tmp: str,
    path: str,
    suffix: str,
    fmt: str,
    schema: Any,
    window: int | None,
) -> int:
    """Submit one task per batch as earlier ones finish; the first failure cancels the rest."""
    from distributed import as_completed

    window = window or max(2, 2 * sum(client.nthreads().values()))
    shipped = client.scatter(tables, broadcast=True, hash=False)  # the geometry once per worker
    parts = 0
    running: set[Any] = set()
    done = as_completed()

    def submit(batch: BatchPlan) -> None:
        nonlocal parts
        name = io.part_name(batch.index, suffix)
        where, shown = os.path.join(tmp, name), os.path.join(path, name)
        future = client.submit(_write_part, shipped, batch, where, fmt, schema, shown, pure=False)
        running.add(future)
        done.add(future)
        parts += 1

    try:
        for batch in itertools.islice(plan, window):
            submit(batch)
        for future in done:
            running.discard(future)
            future.result()  # a worker's error is raised here
            batch = next(plan, None)
            if batch is not None:
                submit(batch)
    except BaseException:
        client.cancel(list(running))
        raise
    finally:
        client.cancel([shipped])
    return parts


def _write_part(
    tables: Callable[[BatchPlan], Any],
    batch: BatchPlan,
    where: str,
    fmt: str,
    schema: Any,
    name: str,
) -> int:
    """On a worker: place one batch, map it back and write it as a part file."""
    return io.write_part(tables(batch), where, fmt, schema, name)
