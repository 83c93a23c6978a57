"""`--engine dask` (issue 11): on a LocalCluster of 2 worker processes, the statistics of every
pass equal the local engine's bit for bit, a seeded synthesis gives the same output, and the
workers write it as a directory of part files that, read in name order, is the local engine's
output (same seed, same --batch-rows), all or nothing."""

from __future__ import annotations

import contextlib
import json
import os
from functools import partial
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dpsynth_cli.constraints import parse_constraint
from dpsynth_cli.domain import ColumnSpec, complete_rows
from dpsynth_cli.engine import dask as dask_engine
from dpsynth_cli.engine.values import value_rows
from dpsynth_cli.mechanisms import grid
from dpsynth_cli.mechanisms.moments import MomentSums
from dpsynth_cli.privacy.noise import RandomSource
from dpsynth_cli.synth import SynthOptions, synthesize

SPECS = [ColumnSpec("a", "float", 0.0, 10.0), ColumnSpec("b", "integer", 0, 20)]


@pytest.fixture(scope="module")
def client():
    with dask_engine.client(None, workers=2) as c:
        yield c


def _held(client, timeout: float = 10.0) -> int:
    """How many keys the workers still hold (in memory or spilled), once the releases of
    finished work have reached them (the scheduler forgets keys asynchronously)."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        held = sum(client.run(lambda dask_worker: len(dask_worker.data)).values())
        if held == 0 or time.monotonic() > deadline:
            return held
        time.sleep(0.1)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """Three Parquet files (a dataset directory) of 4,000 rows with some missing cells, and the
    same rows as one table."""
    rng = np.random.default_rng(3)
    a = np.clip(rng.normal(5, 2, 12_000), -1, 11)
    a[rng.random(a.size) < 0.02] = np.nan
    b = rng.poisson(8, 12_000)
    table = pa.table({"a": a, "b": b})
    root = tmp_path_factory.mktemp("ds")
    for i in range(3):
        part = table.slice(4000 * i, 4000)
        pq.write_table(part, root / f"part-{i}.parquet", row_group_size=1500)
    return root, table


def _listening(pid: int) -> list[tuple[str, int]]:
    """The (address, port) pairs that process `pid` and its children listen on."""
    import psutil

    me = psutil.Process(pid)
    return [
        (c.laddr.ip, c.laddr.port)
        for p in [me, *me.children(recursive=True)]
        for c in p.net_connections(kind="inet")
        if c.status == psutil.CONN_LISTEN
    ]


def test_the_local_cluster_is_for_this_process_only(client):
    """Issue 22, finding 5: the workers read the raw input, so nobody else may reach them. The
    scheduler and every worker and nanny speak TLS on 127.0.0.1, and every listener of the
    cluster's processes is on loopback; a client without the run's temporary credentials (none,
    a TLS client without a certificate, another certificate, plain TCP) cannot connect; there is
    no dashboard and the HTTP servers serve no page (no task stream, memory or timings)."""
    import asyncio
    import ssl
    import urllib.error
    import urllib.request

    from distributed import Security
    from distributed.comm import connect

    info = client.scheduler_info()
    address = client.scheduler.address
    assert address.startswith("tls://127.0.0.1:")
    workers = info["workers"].values()
    assert len(workers) == 2
    for w in workers:
        assert w["nanny"].startswith("tls://127.0.0.1:")
    assert all(a.startswith("tls://127.0.0.1:") for a in info["workers"])
    listeners = _listening(os.getpid())
    assert len(listeners) >= 7 and {ip for ip, _ in listeners} == {"127.0.0.1"}

    async def attempt(where: str, **kwargs) -> None:
        comm = await connect(where, timeout=3, **kwargs)
        await comm.close()

    bare = ssl.create_default_context()
    bare.check_hostname, bare.verify_mode = False, ssl.CERT_NONE
    others = Security.temporary().get_connection_args("client")
    for where in [address, *info["workers"]]:
        for kwargs in ({}, {"ssl_context": bare}, others):
            with pytest.raises((OSError, TypeError, ValueError)):
                asyncio.run(attempt(where, **kwargs))
        with pytest.raises(OSError):
            asyncio.run(attempt(where.replace("tls://", "tcp://")))
    ports = [info["services"]["dashboard"]] + [w["services"]["dashboard"] for w in workers]
    for port in ports:
        for page in ("/status", "/info/main/workers.html", "/metrics", "/health"):
            with pytest.raises(urllib.error.HTTPError) as answer:
                urllib.request.urlopen(f"http://127.0.0.1:{port}{page}", timeout=3)
            assert answer.value.code == 404


def test_the_workers_directories_are_private_and_go_with_the_cluster():
    """Dask's spill to disk writes held rows as files named by their keys into each worker's
    directory: the local cluster puts those directories (and the scheduler's) in one directory
    of its own, mode 0700, which goes when the cluster stops, with whatever a worker that died
    left there."""
    import tempfile

    with dask_engine.client(None, workers=1) as c:
        (place,) = c.run(lambda dask_worker: dask_worker.local_directory).values()
        scratch = Path(place).parents[1]  # .../dpsynth-dask-*/dask-scratch-space/worker-*
        assert scratch.name.startswith("dpsynth-dask-")
        assert scratch.parent == Path(tempfile.gettempdir())
        assert scratch.stat().st_mode & 0o777 == 0o700
        (Path(place) / "storage" / "left-by-a-dead-worker").write_bytes(b"rows")
        assert {p.name for p in scratch.iterdir()} == {"dask-scratch-space"}
    assert not scratch.exists()


def test_an_existing_cluster_is_reached_with_the_tls_configuration(client, dataset, tmp_path):
    """`--scheduler tls://...` works with Dask's TLS configuration (here the fixture cluster's
    credentials, given as contents instead of file names) and fails in one line without it; a
    tcp:// scheduler gets a warning that it is neither encrypted nor authenticated."""
    import dask
    from typer.testing import CliRunner

    from dpsynth_cli.cli import app

    root, _ = dataset
    args = ["synth", str(root), "--input-format", "parquet", "--eps", "1", "--seed", "5"]
    args += ["--bounds", "a=0:10", "--bounds", "b=0:20", "--engine", "dask", "-o"]
    runner = CliRunner()
    address = client.scheduler.address
    failed = runner.invoke(app, [*args, str(tmp_path / "x.csv"), "--scheduler", address])
    assert failed.exit_code == 1 and not (tmp_path / "x.csv").exists()
    assert failed.output.strip().splitlines()[-1:] == [
        f"dpsynth: error: --scheduler {address}: cannot connect (no TLS configuration); a tls:// "
        "scheduler needs Dask's TLS configuration (distributed.comm.tls.*, docs/privacy.md)"
    ]
    sec = client.security
    config = {
        "distributed.comm.require-encryption": True,
        "distributed.comm.tls.ca-file": sec.tls_ca_file,
        "distributed.comm.tls.client.cert": sec.tls_client_cert,
        "distributed.comm.tls.client.key": sec.tls_client_key,
    }
    with dask.config.set(config):
        done = runner.invoke(app, [*args, str(tmp_path / "o.csv"), "--scheduler", address])
    assert done.exit_code == 0, done.output
    assert "not tls://" not in done.output and (tmp_path / "o.csv" / "part-00000.csv").exists()
    with dask.config.set({"distributed.comm.timeouts.connect": "1s"}):
        plain = runner.invoke(
            app, [*args, str(tmp_path / "p.csv"), "--scheduler", "tcp://127.0.0.1:1"]
        )
    assert plain.exit_code == 1
    assert "dpsynth: warning: --scheduler tcp://127.0.0.1:1 is not tls://" in plain.output


def test_dask_statistics_equal_local(client, dataset):
    root, table = dataset
    parts = dask_engine.parquet_partitions(str(root), ["a", "b"], batch_rows=700)
    assert len(parts) == 3
    local = value_rows(table, SPECS)
    with dask_engine.dask_rows(client, parts, SPECS) as remote:
        for make in (partial(grid.GridCounts, 9, 2), partial(MomentSums.empty, 2)):
            r = remote.map(complete_rows, 2).map(_unit, 2).collect(make)
            loc = local.map(_unit, 2).collect(make)
            for name in ("counts", "first", "second"):
                if hasattr(loc, name):
                    assert np.array_equal(getattr(r, name), getattr(loc, name))


def _unit(X: np.ndarray) -> np.ndarray:
    return np.clip((X - [0.0, -0.5]) / [10.0, 21.0], 0.0, 1.0)


@pytest.mark.parametrize("dim", ["full", "1"])
def test_dask_seeded_output_equals_local(client, dataset, dim):
    root, table = dataset
    one_file = root / "all.parquet"
    if not one_file.exists():
        pq.write_table(table, one_file, row_group_size=1000)
    options = SynthOptions(1.0, dim=dim)
    local = synthesize(table, SPECS, options, RandomSource.seeded(11))
    parts = dask_engine.parquet_partitions(str(one_file), ["a", "b"], batch_rows=500)
    assert len(parts) > 1
    with dask_engine.dask_rows(client, parts, SPECS) as rows:
        remote = synthesize(None, SPECS, options, RandomSource.seeded(11), rows=rows)
    assert remote.noisy_rows == local.noisy_rows
    assert remote.table.equals(local.table)


def _recorded(part: dask_engine.Partition, log: str) -> dask_engine.Partition:
    """`part` whose reader appends the partition's name to `log` each time a worker starts
    reading it (a closure: pickled by value, so it runs as is in the worker processes)."""
    read, name = part.read, part.name

    def read_and_record():
        with open(log, "a") as f:
            f.write(name + "\n")
        return read()

    return dask_engine.Partition(name, read_and_record)


@pytest.mark.parametrize("flags", [["--dim", "1"], ["--mechanism", "privtree", "--dim", "full"]])
def test_a_whole_dask_run_reads_each_partition_once(client, dataset, tmp_path, monkeypatch, flags):
    """Issue 27 on Dask: the real CLI with passes enough (undeclared bounds, then --dim 1's
    projections and the mechanism's, or PrivTree's levels) reads and parses each partition
    once, on a worker, which holds its rows for every later pass; the release is the local
    engine's (the reports agree), and the held rows are gone from the workers at the end."""
    from typer.testing import CliRunner

    from dpsynth_cli.cli import app

    root, _ = dataset
    log = tmp_path / "reads.log"
    partitions = dask_engine.parquet_partitions
    monkeypatch.setattr(
        dask_engine,
        "parquet_partitions",
        lambda *a, **k: [_recorded(p, str(log)) for p in partitions(*a, **k)],
    )
    monkeypatch.setattr(dask_engine, "client", lambda scheduler: contextlib.nullcontext(client))
    passes = []
    collect = dask_engine.DaskSource.collect

    def counted(self, make, transform):
        passes.append(make)
        return collect(self, make, transform)

    monkeypatch.setattr(dask_engine.DaskSource, "collect", counted)
    args = ["synth", str(root), "--input-format", "parquet", "--eps", "2", "--seed", "3", *flags]
    reports = []
    for engine in ("dask", "local"):
        out = tmp_path / f"{engine}.csv"
        done = CliRunner().invoke(app, [*args, "--engine", engine, "-o", str(out)])
        assert done.exit_code == 0, done.output
        report = json.loads(Path(f"{out}.report.json").read_text())
        del report["output"]["path"]
        reports.append(report)
    assert reports[0] == reports[1]
    assert len(passes) >= 2  # and the input was read once, not once a pass
    reads = log.read_text().splitlines()
    assert sorted(reads) == sorted(str(p) for p in root.glob("*.parquet"))  # once each
    assert _held(client) == 0


def test_held_rows_are_released_when_the_run_fails(client, dataset):
    """An error in the middle of the passes (here after the first) still drops every partition's
    rows from the workers: nothing of the input stays on the cluster for the next run."""
    root, _ = dataset
    parts = dask_engine.parquet_partitions(str(root), ["a", "b"], batch_rows=700)
    with (
        pytest.raises(RuntimeError, match="a pass failed"),
        dask_engine.dask_rows(client, parts, SPECS) as rows,
    ):
        first = rows.map(complete_rows, 2).map(_unit, 2).collect(partial(grid.GridCounts, 9, 2))
        assert first.counts.sum() > 11_000
        assert [f.status for f in rows.source.held] == ["finished"] * len(parts)  # on workers
        raise RuntimeError("a pass failed")
    assert _held(client) == 0


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_cli_dask_engine_writes_the_local_output_as_parts(dataset, tmp_path, fmt):
    """The real CLI on a Parquet directory, a multi-batch output (about 12,000 rows in batches
    of at most 2,500): --engine dask (its own LocalCluster) writes one part per batch, and the
    parts in name order are the local engine's file: CSV byte for byte once each part's header
    is dropped after the first, Parquet value for value with the same batch sizes (the local
    file's row groups) and the seeded run's mark. The reports agree up to the output path."""
    from typer.testing import CliRunner

    from dpsynth_cli.cli import app

    root, _ = dataset
    runner = CliRunner()
    outs = {}
    for engine in ("local", "dask"):
        out = tmp_path / f"{engine}.{fmt}"
        args = ["synth", str(root), "--input-format", "parquet", "--eps", "1", "--seed", "5"]
        args += ["--bounds", "a=0:10", "--bounds", "b=0:20", "--integer", "b", "-o", str(out)]
        result = runner.invoke(app, [*args, "--engine", engine, "--batch-rows", "2500"])
        assert result.exit_code == 0, result.output
        outs[engine] = out
    local, parts = outs["local"], sorted(outs["dask"].iterdir())
    assert outs["dask"].is_dir() and [p.name for p in parts] == [
        f"part-{i:05d}.{fmt}" for i in range(len(parts))
    ]
    assert len(parts) >= 5
    if fmt == "csv":
        header, *bodies = (p.read_bytes().partition(b"\n") for p in parts)
        assert all(b[0] == header[0] for b in bodies)
        assert b"".join([header[0], b"\n", header[2], *(b[2] for b in bodies)]) == (
            local.read_bytes()
        )
    else:
        whole = pq.read_table(local)
        assert pq.read_table(outs["dask"]).equals(whole)  # a directory reads in name order
        groups = pq.ParquetFile(local).metadata
        sizes = [groups.row_group(i).num_rows for i in range(groups.num_row_groups)]
        assert [pq.ParquetFile(p).metadata.num_rows for p in parts] == sizes
        assert all(0 < s <= 2500 for s in sizes)
        mark = pq.read_schema(parts[-1]).metadata
        assert mark == pq.read_schema(local).metadata and b"dpsynth.release" in mark
    reports = [json.loads(Path(f"{outs[e]}.report.json").read_text()) for e in ("local", "dask")]
    for r in reports:
        del r["output"]["path"]
    assert reports[0] == reports[1]


# Declared constraints (issue 23): a derived column and a conditioning one, applied per batch.
CONSTRAINTS = (parse_constraint("b >= a + 2", ""), parse_constraint("a == 0.5 * b - 0.25", ""))


@pytest.mark.parametrize(
    ("dim", "constraints"), [("full", ()), ("1", ()), ("full", CONSTRAINTS), ("1", CONSTRAINTS)]
)
def test_workers_place_and_map_back_as_the_local_engine(
    client, dataset, tmp_path, dim, constraints
):
    """Library level, on the shared cluster: the workers place each planned batch and map it
    back (`--dim`'s map and the Domain's, shipped with the plan, and the declared constraints'
    rejection from the whole release) with the local engine's code, in any order they finish;
    the parts are the local batches one for one."""
    _, table = dataset
    options, source = SynthOptions(1.0, dim=dim), RandomSource.seeded(2)
    result = synthesize(table, SPECS, options, source, constraints=constraints)
    local = list(result.batches(1700))
    assert len(local) > 4
    out = tmp_path / "synth.parquet"
    schema = result.domain.output_schema()
    parts = dask_engine.write_output(
        client, result.tables, result.plan(1700), str(out), "parquet", schema, input_path=None
    )
    assert parts == len(local)
    for i, want in enumerate(local):
        assert pq.read_table(out / f"part-{i:05d}.parquet").equals(want)
        a, b = (want.column(c).to_numpy() for c in ("a", "b"))
        assert not constraints or ((b >= a + 2).all() and np.array_equal(a, 0.5 * b - 0.25))
    assert sorted(os.listdir(tmp_path)) == ["synth.parquet"]


@pytest.mark.parametrize(
    ("mechanism", "dim"),
    [
        ("pmm", "full"),
        ("privtree", "full"),
        ("hierarchy", "full"),
        ("psmm", "full"),
        ("auto", "1"),
        ("marginals", "full"),
    ],
)
def test_what_workers_receive_holds_no_rows(dataset, mechanism, dim):
    """The placement and map back shipped to the workers, and a batch plan, pickle (as Dask
    does) without meeting any rows or anything that could read them: no Rows, no table, no
    record batch, no input source; only released values, public geometry and seeds."""
    import io as pyio

    import cloudpickle

    from dpsynth_cli import io as dio
    from dpsynth_cli.engine.rows import Rows

    forbidden = (Rows, pa.Table, pa.RecordBatch, dio.InputSource)

    class Guard(cloudpickle.CloudPickler):
        def reducer_override(self, obj):
            assert not isinstance(obj, forbidden), type(obj)
            return super().reducer_override(obj)

    _, table = dataset
    options = SynthOptions(1.0, mechanism=mechanism, dim=dim)
    result = synthesize(table, SPECS, options, RandomSource.seeded(6), constraints=CONSTRAINTS)
    for shipped in (result.tables, next(result.plan(2000))):
        Guard(pyio.BytesIO()).dump(shipped)


def test_batches_are_independent_of_each_other():
    """Batch i's points depend only on its own plan (cells, counts, generator): placed alone, in
    reverse order, twice, they are the batches of one sequential pass; a single batch is placed
    with the released generator itself, as before batches had generators of their own."""
    rng = np.random.default_rng(8)
    table = pa.table({"a": rng.uniform(0, 10, 5000), "b": rng.integers(0, 21, 5000)})
    result = synthesize(table, SPECS, SynthOptions(1.0), RandomSource.seeded(9))
    output = result.run.output
    plans = list(output.plan(900))
    assert len(plans) > 3 and [p.index for p in plans] == list(range(len(plans)))
    alone = [p.points(output.place) for p in reversed(plans)][::-1]
    for got, want in zip(alone, output.batches(900), strict=True):
        assert np.array_equal(got, want)
    (one,) = output.plan(None)
    assert np.array_equal(one.cells, np.arange(output.sizes.size))
    assert one.rng.bit_generator.state == output.rng.bit_generator.state


def test_a_failing_worker_leaves_no_partial_output(client, dataset, tmp_path):
    """One batch's task fails on its worker after others have written their parts: the error
    reaches the client, the temporary directory goes, and the previous output at the path and
    its report stay exactly as they were (nothing half-replaced, no new report)."""
    _, table = dataset
    result = synthesize(table, SPECS, SynthOptions(1.0), RandomSource.seeded(4))
    out, report = tmp_path / "synth.parquet", tmp_path / "synth.parquet.report.json"
    schema = result.domain.output_schema()
    dask_engine.write_output(
        client,
        result.tables,
        result.plan(3000),
        str(out),
        "parquet",
        schema,
        input_path=None,
        extra={str(report): "old report"},
    )
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    tables = result.tables

    def failing(batch):  # a closure: pickled by value, so it runs as is on the workers
        if batch.index == 3:
            raise RuntimeError("worker failed")
        return tables(batch)

    with pytest.raises(RuntimeError, match="worker failed"):
        dask_engine.write_output(
            client,
            failing,
            result.plan(1000),
            str(out),
            "parquet",
            schema,
            input_path=None,
            extra={str(report): "new report"},
            window=3,
        )
    assert sorted(os.listdir(tmp_path)) == ["synth.parquet", "synth.parquet.report.json"]
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert report.read_text() == "old report"


def test_an_interrupted_part_write_leaves_nothing(tmp_path):
    """Ctrl-C (KeyboardInterrupt) while parts are being written: no directory at the path, no
    report, no temporary directory."""
    from dpsynth_cli import io as dio

    out = tmp_path / "synth.csv"
    table = pa.table({"a": [1.0, 2.0]})

    def fill(tmp: str) -> int:
        dio.write_part(table, os.path.join(tmp, dio.part_name(0, ".csv")), "csv", table.schema, "p")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        dio.write_part_directory(
            fill, str(out), "csv", input_path=None, extra={str(tmp_path / "r.json"): "{}"}
        )
    assert os.listdir(tmp_path) == []


def test_parts_are_checked_cleaned_and_renumbered_to_sort(tmp_path, monkeypatch):
    """After the workers: a missing part is an error (workers writing where this machine does
    not see), a dead task's temporary file is dropped, and past 10^PART_DIGITS parts every name
    gets the wider number, so that the names still sort in row order."""
    from dpsynth_cli import io as dio
    from dpsynth_cli.errors import DataError
    from dpsynth_cli.io import parts

    monkeypatch.setattr(parts, "PART_DIGITS", 1)
    table = pa.table({"a": [1.0]})

    def fill(parts: int, skip: int | None = None):
        def write(tmp: str) -> int:
            for i in range(parts):
                if i != skip:
                    where = os.path.join(tmp, dio.part_name(i, ".csv"))
                    dio.write_part(table, where, "csv", table.schema, "p")
            (Path(tmp) / "part-3.csv.77-dead.tmp").write_text("half")
            return parts

        return write

    out = tmp_path / "synth.csv"
    with pytest.raises(DataError, match="part-4.csv of .* is not in"):
        dio.write_part_directory(fill(6, skip=4), str(out), "csv", input_path=None)
    assert os.listdir(tmp_path) == []
    assert dio.write_part_directory(fill(12), str(out), "csv", input_path=None) == 12
    assert sorted(os.listdir(out)) == [f"part-{i:02d}.csv" for i in range(12)]


def test_cli_dask_output_must_be_a_directory_it_may_write(tmp_path):
    """Refused in one line before any input is read or any cluster started: stdout, a file, a
    directory with other files, a name that says no format; a previous part directory is not."""
    from typer.testing import CliRunner

    from dpsynth_cli.cli import app

    data = tmp_path / "in.csv"
    data.write_text("a\n1\n2\n")
    (tmp_path / "old.csv").write_text("a\n1\n")
    (tmp_path / "mine.parquet").mkdir()
    (tmp_path / "mine.parquet" / "notes.txt").write_text("keep")
    cases = {
        "-": "not stdout",
        str(tmp_path / "old.csv"): "is a file",
        str(tmp_path / "mine.parquet"): "a directory with other files",
        str(tmp_path / "synth"): "cannot tell the part files' format",
    }
    for out, message in cases.items():
        args = ["synth", str(data), "--eps", "1", "--bounds", "a=0:3", "--engine", "dask"]
        result = CliRunner().invoke(app, [*args, "-o", out])
        assert result.exit_code == 2 and message in result.output, (out, result.output)
        assert len(result.output.strip().splitlines()) == 1
    assert (tmp_path / "mine.parquet" / "notes.txt").read_text() == "keep"


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--batch-rows", "0"], "--batch-rows"),
        (["--scheduler", "tcp://127.0.0.1:1"], "--scheduler is for --engine dask"),
        (["--engine", "spark"], "--engine must be local or dask"),
    ],
)
def test_cli_engine_flags_are_checked(tmp_path, flags, message):
    from typer.testing import CliRunner

    from dpsynth_cli.cli import app

    data = tmp_path / "in.csv"
    data.write_text("a\n1\n2\n")
    result = CliRunner().invoke(
        app, ["synth", str(data), "--eps", "1", "--bounds", "a=0:3", *flags]
    )
    assert result.exit_code == 2 and message in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_stale_part_directories_of_dead_runs_are_removed(tmp_path):
    """A part directory left by a killed run (its process gone) goes when the output is next
    written; a live run's is kept."""
    import subprocess
    import sys

    from dpsynth_cli import io as dio

    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        text=True,
        capture_output=True,
        check=True,
    )
    stale = tmp_path / f".synth.csv.dpsynth-{int(dead.stdout)}-abc.tmp"
    live = tmp_path / f".synth.csv.dpsynth-{os.getpid()}-def.tmp"
    for d in (stale, live):
        d.mkdir()
        (d / "part-00000.csv").write_text("a\n1\n")
    table = pa.table({"a": [1.0]})

    def fill(tmp: str) -> int:
        dio.write_part(table, os.path.join(tmp, dio.part_name(0, ".csv")), "csv", table.schema, "p")
        return 1

    assert dio.write_part_directory(fill, str(tmp_path / "synth.csv"), "csv", input_path=None) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == [live.name, "synth.csv"]


def test_dask_seeded_output_equals_local_on_a_mixed_table(client, tmp_path):
    """Declared category, boolean (nullable), date and datetime columns (issue 15) go through
    the Dask passes like numbers: the workers code each cell by its declared type, so the
    statistics and the seeded output equal the local engine's."""
    from dpsynth_cli.domain import schema_column

    declared = {
        "ward": {"type": "category", "levels": ["a", "b", "c"], "other": "c"},
        "smoker": {"type": "boolean", "nullable": True},
        "day": {"type": "date", "lower": "2024-01-01", "upper": "2024-12-31"},
        "at": {"type": "datetime", "lower": "2024-01-01T00:00:00", "upper": "2025-01-01T00:00:00"},
    }
    specs = [schema_column("schema.json", name, c) for name, c in declared.items()]
    rng = np.random.default_rng(8)
    n = 3000
    table = pa.table(
        {
            "ward": rng.choice(["a", "b", "x", None], n, p=[0.5, 0.3, 0.1, 0.1]),
            "smoker": pa.array(rng.choice([True, False, None], n, p=[0.3, 0.6, 0.1])),
            "day": pa.array(np.datetime64("2024-01-01") + rng.integers(0, 366, n)),
            "at": pa.array(np.datetime64("2024-01-01T00:00:00") + rng.integers(0, 3e7, n)),
        }
    )
    path = tmp_path / "mixed.parquet"
    pq.write_table(table, path, row_group_size=700)
    options = SynthOptions(1.0)
    local = synthesize(table, specs, options, RandomSource.seeded(4))
    parts = dask_engine.parquet_partitions(str(path), list(declared), batch_rows=500)
    assert len(parts) > 1
    with dask_engine.dask_rows(client, parts, specs) as rows:
        remote = synthesize(None, specs, options, RandomSource.seeded(4), rows=rows)
    assert remote.noisy_rows == local.noisy_rows
    assert remote.table.equals(local.table)
    assert [f.type for f in local.table.schema] == [
        pa.string(),
        pa.bool_(),
        pa.date32(),
        pa.timestamp("s"),
    ]
