"""`online-replay` as a library call: a table replayed in order as a stream, with releases.

The rows, ordered by `order_by` (stable: ties keep the file's order), arrive one per time step.
At each checkpoint t the run writes a synthetic table of exactly t rows (Algorithm 12 at time t)
to OUT_DIR/release-<t, 12 digits>.<csv|parquet> (names sort in time order) and, at the end, one
report OUT_DIR/online-replay.report.json. All releases of the stream, in this run and in every
run that continues its `--state`, are together eps-DP (PRIVACY_MODEL).

Commit order (nothing lost, nothing released twice, no draw seen before it is committed):
releases are first written to a staging directory that only the owner can read, STATE_DIR/
staging (0700, inside the secret state directory) or, without a state, a private temporary
directory (`tempfile.mkdtemp`, 0700); then the state is saved (the commit point: atomic, it
lists the staged releases); only then are they moved into OUT_DIR. A release is therefore
visible in OUT_DIR only once the state that produced it is committed. A run that stops before
the commit (an error, Ctrl-C, SIGTERM, SIGKILL) has published nothing and its staged draws were
readable by no one but the owner of the state, who can read the noise there anyway: they are
deleted (at once, or by the next run after SIGKILL) and the next run draws those checkpoints
from the committed state, as if the stopped run had never been. A run that stops after the
commit has its moves finished by the next run, with the same staged files: a checkpoint is
never drawn twice once a draw of it can have been seen. Without a state every run is a new
eps-DP release anyway.
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np
import pyarrow as pa

from dpsynth_cli import __version__
from dpsynth_cli.constraints import Constraint, describe
from dpsynth_cli.domain import ColumnSpec, Domain, bounds_flag
from dpsynth_cli.errors import DataError, PrivacyRefusal, UsageError
from dpsynth_cli.io import (
    FORMATS,
    atomic_write_bytes,
    check_outputs,
    move_file,
    process_alive,
    signals_held,
    write_outputs,
)
from dpsynth_cli.mechanisms import select
from dpsynth_cli.mechanisms.conditioned import Rules
from dpsynth_cli.online import state as state_io
from dpsynth_cli.online.cube import StreamCube
from dpsynth_cli.online.engine import OnlineEngine, apriori_bound
from dpsynth_cli.online.marginals import MarginalsEngine
from dpsynth_cli.online.params import ALLOCATIONS, SPARSE_SHARE, OnlinePlan
from dpsynth_cli.online.schedule import noise_factor
from dpsynth_cli.online.stream import RowStream, from_table, rebatch
from dpsynth_cli.online.timeline import Timeline, file_stamp, time_rule, time_text
from dpsynth_cli.privacy.ledger import Ledger, Spend, check_epsilon
from dpsynth_cli.privacy.noise import RandomSource
from dpsynth_cli.report import NOT_FOR_RELEASE
from dpsynth_cli.uniformity import weak_guarantee_notice

SCHEMA = "dpsynth.online-report/1"
REPORT_NAME = "online-replay.report.json"
BATCH_ROWS = 1 << 16  # rows fed per step (progress granularity)

RELATION_MEANING = {
    "replace": "one row's values changed (the row stays at its time); the dissertation's relation",
    "add-remove": "one time slot holds the row in one stream and is empty in the other (the "
    "number of slots is public)",
}
PRIVACY_MODEL = (
    "Event-level differential privacy on a stream with a public timeline (dissertation ch. 5): "
    "two streams are neighbours when they have the same length and differ in one row (replace: "
    "its values changed; add-remove: the row present in one stream, its time slot empty in the "
    "other). PROTECTED: the values of every row in the synthesised columns, and under "
    "add-remove whether a slot holds a row. PUBLIC: the timeline, i.e. the number of rows up "
    "to each checkpoint (a release at checkpoint t has exactly t rows), the --order-by column "
    "(its values set the order; it may not be a synthesised column) and so the order, and the "
    "checkpoints: by row count, or by time on that column (their times and the number of rows "
    "before each come from it and the flags only). All "
    "releases of the stream, including later runs that continue --state, are together eps-DP: "
    "no run spends eps again. Rows with a missing value keep their time slot and are counted in "
    "no region (their synthetic rows follow the others)."
)


# A synthesised column's values are protected, but the order is public: one row's value would
# move the row across the stream and shift every later row's time (issue 22: a privacy loss of
# about 4-5 against eps 1), so that combination is refused.
ORDER_BY_SYNTHESISED = (
    "--order-by {col} is also a synthesised column: its values are protected but the order is "
    "public (one row's value would move it and every later row in the stream); order by a "
    "column that is not synthesised, e.g. a time, or leave out --order-by"
)


@dataclass(frozen=True)
class ReplayOptions:
    """What the user asked for (all public). `checkpoints`: "pow2" (default: 1, 2, 4, ...),
    "every:N", or a comma-separated list of row counts."""

    epsilon: float
    order_by: str | None = None
    checkpoints: str = "pow2"
    relation: str = "replace"
    allocation: str = "tuned"
    output_format: str = "parquet"
    input_mode: str = "whole"  # "whole": the growing table (consumed rows are checked, skipped)
    release_at_end: bool = False  # a calendar release after the last row: needs the next flag
    row_counts_public: bool = False  # declares the row count at the end of each run public
    constraints: tuple[Constraint, ...] = ()  # the schema's, on chosen columns (post-processing)
    mechanism: str = "auto"  # "partition", "marginals" (`online.marginals`) or `choose_mechanism`


MECHANISMS = ("auto", "partition", "marginals")
# Privacy review, finding 2: the plan once read the number of rows at the end of the run, which
# is not released unless it is a checkpoint (30 or 3,030 rows after the last checkpoint gave
# other grids, bins, even another mechanism, and so other releases).
PLANNING = (
    "planning_rows: the number of rows of the last checkpoint this run releases (public: a "
    "release at checkpoint t has exactly t rows; 0 when it releases none) or, with "
    "--row-counts-public, the number of rows at the end of the run (declared public); the rows "
    "after the last checkpoint are never counted for the plan"
)
AUTO_RULE = (
    "auto: for a new stream (with or without --state), marginals when synth's auto rule picks "
    "marginals for these columns, eps and planning_rows (the last checkpoint's rows, or with "
    "--row-counts-public the rows at the end of the run), with --neighboring's sensitivity, "
    "otherwise partition; a run continuing a --state keeps the state's mechanism"
)
OTHER_MECHANISM = (
    "refusing to continue state {state}: it holds a --mechanism {stored} stream (another "
    "mechanism on the same stream would spend its eps again); use --mechanism {stored} or auto"
)


def check_mechanism(options: ReplayOptions, state_dir: str | None) -> None:
    """Usage errors of --mechanism (before the input is opened)."""
    if options.mechanism not in MECHANISMS:
        raise UsageError(f"--mechanism must be one of {', '.join(MECHANISMS)}")


def planning_size(options: ReplayOptions, stops: Iterable[int], end: int) -> int:
    """The number of rows that plans this run (PLANNING), a public number: with
    --row-counts-public the rows at the end (`end`, declared public), otherwise the largest of
    this run's checkpoints (`_stops`: by row count, or the rows before a checkpoint time), whose
    release has exactly that many rows; 0 when the run releases nothing."""
    if options.row_counts_public:
        return end
    return max(stops, default=0)


def choose_mechanism(
    options: ReplayOptions,
    specs: list[ColumnSpec],
    state_dir: str | None,
    rows: int,
    stored: str | None = None,
) -> str:
    """The online mechanism for `--mechanism auto` (AUTO_RULE), from public facts only: the
    flags, the declared columns and `rows`, the run's `planning_size` (never the number of rows
    at the end unless --row-counts-public declares it public).
    Measured: marginals on seattle-weather and flights (docs/benchmarks.md, "online-replay on
    real mixed tables"); partition on the numeric streams before issue 25."""
    if stored is not None:  # a continued --state: its stream's mechanism
        if options.mechanism not in ("auto", stored):
            raise PrivacyRefusal(OTHER_MECHANISM.format(state=state_dir, stored=stored))
        return stored
    if options.mechanism != "auto":
        return options.mechanism
    dom = StreamCube(tuple(specs)).domain
    levels = bool(dom.lead_bits())
    name = select.choose(
        dom.cube_dim, Fraction(options.epsilon), rows, options.relation, levels, len(specs)
    )
    return "marginals" if name == "marginals" else "partition"


# Issue 38, item 5: monthly checkpoints over 4 years (48) at eps 1 left seattle-weather's last
# release at W1 0.17-0.31 against 0.066 with every:365d (4 checkpoints), silently.
CHECKPOINT_COST = 3.0  # the noise factor (`checkpoints_factor`) above which a notice says so
CHECKPOINT_NOTICE = (
    "{k} checkpoints at eps {eps:g}: the last release's counts carry about {factor:.0f}x the "
    "noise of a single release at eps {eps:g} (--mechanism marginals measures the rows between "
    "each two checkpoints apart and sums them); fewer checkpoints (e.g. --checkpoints "
    "every:365d rather than monthly, or a larger every:N) or a larger --eps give more accurate "
    "releases"
)


def checkpoints_factor(mechanism: str, checkpoints: int) -> float:
    """How many times the noise of a single release at the same eps the last release's counts
    carry, from public facts only (the mechanism and the number of checkpoints: for marginals
    the stream's so far, across the runs of a --state): marginals, `schedule.noise_factor` of
    the epoch schedule; partition, 1 (its counters and their noise run the same whatever the
    checkpoints: a release is post-processing of them)."""
    return noise_factor(checkpoints) if mechanism == "marginals" else 1.0


def checkpoints_notice(mechanism: str, checkpoints: int, eps: float) -> list[str]:
    """A notice when the checkpoints cost most of the accuracy (`CHECKPOINT_COST`)."""
    factor = checkpoints_factor(mechanism, checkpoints)
    if factor <= CHECKPOINT_COST:
        return []
    return [CHECKPOINT_NOTICE.format(k=checkpoints, eps=eps, factor=factor)]


@dataclass
class ReplayResult:
    report: dict[str, Any]
    files: list[str]
    notices: list[str] = field(default_factory=list)


def parse_checkpoints(spec: str) -> Callable[[int, int], list[int]]:
    """checkpoints(lo, hi): the checkpoint row counts t with lo < t <= hi."""
    spec = spec.strip().lower()
    if spec in ("pow2", "powers-of-two", ""):
        return lambda lo, hi: [1 << k for k in range(64) if lo < 1 << k <= hi]
    if spec.startswith("every:"):
        try:
            n = int(spec[6:])
        except ValueError:
            n = 0
        if n < 1:
            raise UsageError("--checkpoints every:N needs a positive whole number N")
        return lambda lo, hi: list(range((lo // n + 1) * n, hi + 1, n))
    try:
        points = sorted({int(x) for x in spec.split(",") if x.strip()})
    except ValueError:
        raise UsageError("--checkpoints: pow2, every:N, or row counts like 1000,5000") from None
    if not points or points[0] < 1:
        raise UsageError("--checkpoints: row counts must be positive whole numbers")
    return lambda lo, hi: [t for t in points if lo < t <= hi]


def plan_for(options: ReplayOptions, specs: list[ColumnSpec]) -> OnlinePlan:
    """Validate the options (before any row is read) and fix the mechanism."""
    if options.output_format not in FORMATS:
        raise UsageError("--output-format must be csv or parquet")
    if options.allocation not in ALLOCATIONS:
        raise UsageError(f"--allocation must be one of {', '.join(ALLOCATIONS)}")
    if options.input_mode not in ("whole", "new"):
        raise UsageError("--input-mode must be whole or new")
    if options.release_at_end and not options.row_counts_public:
        raise UsageError(
            "--release-at-end releases the row count at the end of the run: add "
            "--row-counts-public to declare those counts public (they are not protected)"
        )
    missing = [s.name for s in specs if not s.has_bounds]
    if missing:
        raise UsageError(
            f"online-replay needs declared bounds for every column: add "
            f"{bounds_flag(missing[0])} or --schema (no DP estimate on a stream)"
        )
    if not specs:
        raise UsageError("online-replay needs at least one column")
    if options.order_by is not None and options.order_by in {s.name for s in specs}:
        raise UsageError(ORDER_BY_SYNTHESISED.format(col=options.order_by))
    if time_rule(options.checkpoints) is not None:
        if options.order_by is None:
            raise UsageError(
                f"--checkpoints {options.checkpoints} is by time: add --order-by naming a date "
                "or datetime column (the public timeline)"
            )
    else:
        parse_checkpoints(options.checkpoints)
    eps = check_epsilon(options.epsilon)
    cube = StreamCube(tuple(specs))
    return OnlinePlan(eps, cube.d, options.relation, options.allocation, cube.lead)


def _ledger(plan: OnlinePlan) -> Ledger:
    """One spend per part of Algorithm 11; they add up to eps (Proposition 5.9)."""
    ledger = Ledger(plan.epsilon, plan.relation)
    share = SPARSE_SHARE[plan.allocation]
    parts = [("online:level-totals", "Algorithm 11 level totals", 1 - share)]
    if share:
        parts = [
            ("online:segments", "Algorithm 10 segment tests (sparse vector)", share / 2),
            ("online:binary-mechanism", "Binary Mechanism on segment counts", share / 2),
        ] + parts
    for step, mech, part in parts:
        ledger.record(
            Spend(
                step=step,
                mechanism=mech + " in every region, all levels (Algorithm 12)",
                epsilon=plan.epsilon * Fraction(part),
                sensitivity=plan.sensitivity,
                noise={
                    "distribution": "discrete Laplace",
                    "per_region_epsilon": "(5.3)" if plan.d >= 2 else "(5.12)",
                    "paths_per_neighbour": plan.sensitivity,
                    "composition": "sum over one root-to-leaf path <= eps / paths "
                    "(Proposition 5.9); every release of the stream is post-processing",
                },
            )
        )
    return ledger


def replay(
    rows: pa.Table | RowStream,
    specs: list[ColumnSpec],
    options: ReplayOptions,
    source: RandomSource,
    *,
    out_dir: str,
    state_dir: str | None = None,
    command: list[str] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> ReplayResult:
    """Replay `rows` (all rows, or the new ones with input_mode "new") and write the releases.

    `rows`: a table in memory (sorted by `order_by` here) or a `stream.open_stream` of an input.
    Returns the report (also written to OUT_DIR/online-replay.report.json) and the files written.
    """
    plan = plan_for(options, specs)
    check_mechanism(options, state_dir)
    check_dirs(out_dir, state_dir)
    out_dir = os.path.abspath(out_dir)  # the state lists pending files: any working directory
    ident = state_io.identity(plan, specs)
    lock = state_io.locked(state_dir) if state_dir else contextlib.nullcontext()
    with lock:
        engine, meta = state_io.load(state_dir, plan, ident, specs) if state_dir else (None, {})
        stored = meta.get("mechanism", "partition") if meta else None  # a saved state's
        check_releases(out_dir, meta)
        if "stream" not in meta:  # a random name of the stream (seeded runs: reproducible)
            meta["stream"] = source.spawn("stream-id").numpy_generator().bytes(8).hex()
        _finish_pending(meta, out_dir, state_dir)
        if isinstance(rows, pa.Table):
            by_time = time_rule(options.checkpoints) is not None
            rows = from_table(rows, specs, options.order_by, by_time)
        start = engine.t if engine is not None else 0  # secret: never reported
        new = _new_rows(rows, start, meta, options)
        stops = _stops(options, meta, new.timeline, start, start + new.count)
        size = planning_size(options, stops, start + new.count)
        chosen = choose_mechanism(options, specs, state_dir, size, stored)
        if chosen == "marginals" and not isinstance(engine, MarginalsEngine):
            engine = MarginalsEngine(StreamCube(tuple(specs)), plan.epsilon, plan.relation)
        engine = engine or OnlineEngine(plan)
        with _created(out_dir), _staging(state_dir) as staging:
            return _run(
                engine,
                meta,
                new,
                (stops, size),
                plan,
                specs,
                options,
                source,
                (out_dir, staging),
                state_dir,
                command,
                progress,
            )


@contextlib.contextmanager
def _created(out_dir: str) -> Iterator[None]:
    """OUT_DIR exists in the block; if the block fails, an OUT_DIR it made (still empty: the
    pending releases are deleted) goes again, e.g. after a damaged file found mid-stream."""
    made = not os.path.isdir(out_dir)
    os.makedirs(out_dir, exist_ok=True)
    try:
        yield
    except BaseException:
        if made:
            with contextlib.suppress(OSError):
                os.rmdir(out_dir)
        raise


# The files a run writes into OUT_DIR (`_run`'s names) and the report.
RELEASE_FILE = re.compile(r"release-\d{12}(-[^/]*)?\.(csv|parquet)$")
NEW_STREAM = (
    "of an earlier run or another stream (a run without --state, or the first with a new "
    "--state, begins a new stream)"
)
FOREIGN_RELEASE = (
    "--out-dir {dir} already holds {name}, {whose}: a run never replaces published "
    "releases; use a new --out-dir, or remove the old releases and report from it"
)


def _stream_files(out_dir: str) -> list[str]:
    """The release files (sorted) and the report in OUT_DIR: regular files, or symbolic links
    to one (a dangling link, a device or a FIFO holds no published release: written into)."""
    try:
        names = os.listdir(out_dir)
    except OSError:
        return []
    mine = [
        n
        for n in names
        if (n == REPORT_NAME or RELEASE_FILE.match(n)) and os.path.isfile(os.path.join(out_dir, n))
    ]
    return sorted(mine, key=lambda n: (n == REPORT_NAME, n))  # the releases first


def _report_stream(path: str) -> tuple[bool, str | None]:
    """(readable as a dpsynth online report, its stream id or None)."""
    try:
        with open(path, encoding="utf-8") as fh:
            report = json.load(fh)
    except (OSError, ValueError):
        return False, None
    if not isinstance(report, dict) or report.get("schema") != SCHEMA:
        return False, None
    stream = report.get("stream")
    return True, stream.get("id") if isinstance(stream, dict) else None


def check_releases(out_dir: str, meta: dict | None) -> None:
    """Refuse (exit 3) an OUT_DIR whose releases or report this stream did not write: a run
    without --state (or the first run of a new state) needs an OUT_DIR without any release or
    report; a run continuing a --state accepts only the release files its state lists
    (`meta["checkpoints"]`, `meta["pending"]`) and a report that carries its stream id (a state
    and a report from before stream ids: a report without one). Decided by file names and the
    state's metadata only, before the spend and before any row is read: a run never replaces a
    published release, and two streams never share a report."""
    if not os.path.isdir(out_dir):
        return
    meta = meta or {}
    own = {c["file"] for c in meta.get("checkpoints", []) if isinstance(c, dict) and "file" in c}
    for entry in meta.get("pending", []):
        final = _final_name(entry) if isinstance(entry, str) else entry[1]
        own.add(os.path.basename(final))
    continued = bool(meta)  # a state that a run has saved
    for name in _stream_files(out_dir):
        if name == REPORT_NAME:
            ok, stream = _report_stream(os.path.join(out_dir, name))
            if continued and ok and stream == meta.get("stream"):
                continue
            whose = f"the report {'of another stream' if continued else NEW_STREAM}"
        elif name in own:
            continue
        else:
            whose = f"a release {'of another stream' if continued else NEW_STREAM}"
        raise PrivacyRefusal(FOREIGN_RELEASE.format(dir=out_dir, name=name, whose=whose))


def check_dirs(out_dir: str, state_dir: str | None) -> None:
    """OUT_DIR is published and the state is secret: they must not overlap. The report's path
    in an existing OUT_DIR is checked as synth's outputs are (`io.check_outputs`: a link loop
    or a directory named like it refused before any row is read; a device or a FIFO there is
    written into, a symbolic link followed, when the report is written)."""
    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        raise UsageError(f"--out-dir {out_dir} is not a directory")
    if os.path.isdir(out_dir):
        check_outputs([os.path.join(out_dir, REPORT_NAME)], None)
    if state_dir:
        out, st = os.path.realpath(out_dir), os.path.realpath(state_dir)
        if os.path.commonpath([out, st]) in (out, st):
            raise UsageError(
                "--state and --out-dir must not contain one another: the state is secret and "
                "the releases are published"
            )


@dataclass
class _NewRows:
    """The rows this run adds (`count` of them, in `batches`), and the digest to store."""

    count: int
    batches: Iterable[np.ndarray]
    prefix: _Prefix | None = None  # whole mode: the digest of every row, once they are read
    timeline: Timeline | None = None  # the --order-by times of the input's rows (by time)


CONTINUED_NEW = "this state was continued with --input-mode new: keep using it"


def check_continuation(
    out_dir: str,
    state_dir: str | None,
    plan: OnlinePlan,
    specs: list[ColumnSpec],
    options: ReplayOptions,
) -> None:
    """The refusals that the --state's metadata, OUT_DIR's file names and the flags decide,
    before the spend is recorded: a state that is damaged, of another format, made for other
    columns, bounds, --eps, --neighboring or --allocation, or continued whole after new
    (`state_io.stored`, read without its lock), and releases or a report of another run in
    OUT_DIR (`check_releases`). `replay` checks them again under the state's lock."""
    meta = state_io.stored(state_dir, state_io.identity(plan, specs)) if state_dir else None
    if meta and options.input_mode == "whole" and meta.get("t"):
        if meta.get("prefix_sha256") is None:
            raise PrivacyRefusal(CONTINUED_NEW)
    check_releases(out_dir, meta)


def _new_rows(rows: RowStream, done: int, meta: dict, options: ReplayOptions):
    """The rows this run adds to the stream after the `done` rows earlier runs replayed (whole
    mode: after checking that consumed prefix)."""
    if options.input_mode == "new":
        meta["prefix_sha256"] = None
        return _NewRows(rows.rows, rows.batches, timeline=rows.timeline)
    if done and meta.get("prefix_sha256") is None:
        raise PrivacyRefusal(CONTINUED_NEW)
    if rows.rows < done:
        raise PrivacyRefusal(
            f"the input has fewer rows than the state has already replayed ({done}); it is not "
            "the same growing table"
        )
    prefix = _Prefix(done, meta.get("prefix_sha256"))
    return _NewRows(rows.rows - done, prefix.skip(rows.batches), prefix, rows.timeline)


class _Prefix:
    """Whole mode: sha256 of the rows in [0,1]^d (float64, row-major, in stream order), computed
    batch by batch. The first `done` rows (replayed by earlier runs) must hash to `expected`
    before any row after them is passed on; the digest of all rows is stored for the next run."""

    def __init__(self, done: int, expected: str | None) -> None:
        self.done, self.expected, self.sha = done, expected, hashlib.sha256()

    def skip(self, batches: Iterable[np.ndarray]) -> Iterator[np.ndarray]:
        seen = 0
        for X in batches:
            X = np.ascontiguousarray(X)
            head = min(max(self.done - seen, 0), X.shape[0])
            self.sha.update(X[:head])
            seen += X.shape[0]
            if head and seen >= self.done and self.sha.hexdigest() != self.expected:
                raise PrivacyRefusal(
                    "the first rows of the input differ from those the state replayed (another "
                    "table, a changed row, or rows inserted before the end): refusing to continue"
                )
            self.sha.update(X[head:])
            if head < X.shape[0]:
                yield X[head:]

    def hexdigest(self) -> str:
        return self.sha.hexdigest()


# Before issue 22 releases were staged as hidden files in OUT_DIR itself, readable by anyone
# who could read OUT_DIR.
_OLD_PENDING = ".release-*.pending"
_STAGING_PREFIX = "dpsynth-staging-"  # without --state: TMPDIR/dpsynth-staging-PID-XXXX


def _finish_pending(meta: dict, out_dir: str, state_dir: str | None) -> None:
    """Finish the moves of a run that stopped after committing its state (the same staged files:
    no checkpoint is drawn again), and delete the staged draws of runs that stopped before
    (never published, never readable by anyone but the state's owner).

    Refuses (exit 3) to continue a state while OUT_DIR holds a release that an older dpsynth
    staged there and did not commit: anyone could have read it, and its checkpoint would now
    be drawn again (two independent draws: eps spent twice)."""
    listed = set()
    for entry in meta.get("pending", []):
        staged, final = (entry, _final_name(entry)) if isinstance(entry, str) else entry
        listed.add(staged)
        if os.path.exists(staged):
            _publish(staged, final)
    old = [p for p in glob.glob(os.path.join(out_dir, _OLD_PENDING)) if p not in listed]
    if old and state_dir:
        raise PrivacyRefusal(
            f"{old[0]} is a release that an interrupted run of an older dpsynth left in --out-dir "
            "before committing it: if anyone can have read it, its checkpoint must not be drawn "
            "again (eps would be spent twice), so the state cannot continue; if nobody can have "
            "read it, delete it and run again"
        )
    for path in old:
        os.unlink(path)  # without a state: a run of its own, never continued
    if state_dir:
        staging = os.path.join(state_dir, state_io.STAGING)
        for name in os.listdir(staging) if os.path.isdir(staging) else []:
            path = os.path.join(staging, name)
            if path not in listed:  # drawn by a run that stopped before its commit
                _remove(path)
    meta["pending"] = []


def _final_name(pending: str) -> str:
    d, name = os.path.split(pending)
    return os.path.join(d, re.sub(r"^\.(.*)\.pending$", r"\1", name))


def _publish(staged: str, final: str) -> None:
    """Move a committed release from the staging directory into OUT_DIR."""
    try:
        move_file(staged, final)
    except OSError as exc:
        raise DataError(
            f"cannot write {final}: {exc.strerror or type(exc).__name__} (the release is "
            "committed: the next run with this --state publishes it)"
        ) from None


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            os.unlink(path)


@contextlib.contextmanager
def _staging(state_dir: str | None) -> Iterator[str]:
    """Where this run's releases wait for the commit, readable only by their owner: STATE_DIR/
    staging, or without a state a new private temporary directory, removed at the end (a
    SIGKILLed run's is removed by a later run: its process is gone)."""
    if state_dir:
        yield state_io.staging_dir(state_dir)
        return
    tmp = tempfile.gettempdir()
    with contextlib.suppress(OSError):
        for name in os.listdir(tmp):
            pid = name[len(_STAGING_PREFIX) :].partition("-")[0]
            if name.startswith(_STAGING_PREFIX) and pid.isdigit() and not process_alive(int(pid)):
                _remove(os.path.join(tmp, name))
    path = tempfile.mkdtemp(prefix=f"{_STAGING_PREFIX}{os.getpid()}-")  # 0700
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _stops(
    options: ReplayOptions, meta: dict, timeline: Timeline | None, start: int, end: int
) -> dict[int, list[float | None]]:
    """This run's checkpoints: stream length t -> the checkpoint times released at t (None: a
    checkpoint by row count, or --release-at-end). Public: the flags, which of them the stream
    reaches (the releases show it) and, for checkpoints by time, the --order-by column
    (`timeline`); `meta["timeline"]` keeps the grid's origin and the last time seen, so that a
    continued stream keeps its grid."""
    rule = time_rule(options.checkpoints)
    stops: dict[int, list[float | None]] = {}
    if rule is None:
        for t in parse_checkpoints(options.checkpoints)(start, end):
            stops[t] = [None]
    elif timeline is not None and timeline.times.size:
        whole = options.input_mode == "whole"
        offset = 0 if whole else start  # the timeline holds every row, or this run's rows
        first = timeline.time_of_row(start if whole else 0) if end > start else None
        known = meta.get("timeline") or {}
        after = known.get("last", -np.inf)
        if not known and whole and start:  # a stream that had checkpoints by row count
            after = timeline.time_of_row(start - 1)
        if first is not None and first < after:
            raise PrivacyRefusal(
                f"--order-by {options.order_by}: the new rows begin before the last time the "
                "state replayed; a stream's new rows must come after its earlier ones"
            )
        origin = known.get("origin", float(timeline.times[0]))
        last = float(timeline.times[-1]) if end > start else after
        for tau in rule.points(origin, after, last):
            stops.setdefault(offset + timeline.rows_before(tau), []).append(tau)
        meta["timeline"] = {"origin": origin, "last": last}
    if options.release_at_end and end > start and None not in stops.get(end, []):
        stops.setdefault(end, []).append(None)
    return stops


def _run(
    engine, meta, new, planned, plan, specs, options, source, dirs, state_dir, command, progress
):
    """`planned`: this run's checkpoints (`_stops`) and its `planning_size`."""
    out_dir, staging = dirs
    stops, size = planned
    engine.use(source)
    cube = StreamCube(tuple(specs))
    rules = Rules(cube.domain, options.constraints) if options.constraints else None
    rng = source.spawn("post-processing").numpy_generator()
    start = engine.t  # rows replayed before this run (secret: never reported)
    marginal = isinstance(engine, MarginalsEngine)
    if marginal:
        engine.begin(size, state_dir is not None)
    first_run = not meta.get("identity")  # the stream's first run commits its eps
    released: list[dict[str, Any]] = []
    pending: list[list[str]] = []  # [staged, final]

    def release(t: int, tau: float | None) -> None:
        if marginal:
            engine.checkpoint(t)
            table = engine.table(rng, rules)
        elif rules is None:
            table = cube.to_table(engine.release(rng))
        else:
            table = cube.conditioned_table(engine.leaf_counts(rng), engine.level, rules, rng)
        stamp = "" if tau is None else f"-{file_stamp(tau)}"
        name = f"release-{t:012d}{stamp}.{options.output_format}"
        path = os.path.join(staging, name)
        pending.append([path, os.path.join(out_dir, name)])  # first: a stop mid-write removes it
        write_outputs(table, path, options.output_format, input_path=None)
        entry: dict[str, Any] = {"rows": t}
        if tau is not None:
            entry["time"] = time_text(tau)
        entry["file"] = name
        if not marginal:
            entry.update({"depth": max(engine.level, 0), **apriori_bound(plan, t)})
        released.append(entry)

    def on_stop(t: int) -> None:
        for tau in stops.get(t, []):
            release(t, tau)

    try:
        on_stop(start)  # checkpoints by time that only earlier runs' rows precede
        fed = 0
        for X in rebatch(new.batches, BATCH_ROWS):
            engine.feed(X, list(stops), on_stop)
            fed += X.shape[0]
            if progress is not None:
                progress(min(fed, new.count), new.count)
        if new.prefix is not None:
            meta["prefix_sha256"] = new.prefix.hexdigest()
        history = meta.get("checkpoints", []) + released
        meta.update(
            {
                "identity": state_io.identity(plan, specs),
                "checkpoints": history,
                "pending": pending,
                # noise from a --seed run is reproducible: the whole stream stays not for release
                "seeded": bool(source.seeded or meta.get("seeded")),
            }
        )
        if state_dir:
            state_io.save(state_dir, engine, meta)  # the commit point
    except BaseException:  # not committed: nothing of this run may stay (an error, Ctrl-C, TERM)
        for path, _ in pending:
            with contextlib.suppress(OSError):
                os.unlink(path)
        raise
    ledger = engine.ledger() if marginal else _ledger(plan)
    with signals_held():  # committed: a stop waits until every release is in OUT_DIR
        for path, final in pending:
            _publish(path, final)
    files = [final for _, final in pending]
    mechanism = engine.to_json() if marginal else _partition_json(plan)
    mechanism["chosen"] = {
        "requested": options.mechanism,
        "rule": AUTO_RULE,
        "planning_rows": size,
        "planning_rule": PLANNING,
    }
    accuracy = MARGINALS_ACCURACY if marginal else PARTITION_ACCURACY
    seeded = meta["seeded"]
    report = build_report(
        mechanism, specs, ledger, history, released, seeded, command, state_dir, options, accuracy
    )
    report["stream"] = {
        "id": meta["stream"],
        "note": STREAM_NOTE,
        "epsilon_this_run": float(plan.epsilon) if first_run else 0.0,
        "epsilon_note": EPSILON_NOTE,
    }
    if marginal:  # the stream's checkpoints so far (public), the epoch schedule's k
        notices = checkpoints_notice("marginals", engine.closed, options.epsilon)
    else:
        notices = checkpoints_notice("partition", len(stops), options.epsilon)
    notices += weak_guarantee_notice(options.epsilon)
    report["notices"] = notices
    report_path = os.path.join(out_dir, REPORT_NAME)
    atomic_write_bytes(report_path, json.dumps(report, indent=2) + "\n")
    if state_dir:
        meta["pending"] = []
        state_io.save(state_dir, engine, meta)
    return ReplayResult(report, files + [report_path], notices)


def _partition_json(plan: OnlinePlan) -> dict[str, Any]:
    return {
        "name": "online synthetic data (dissertation Algorithms 10-12, event-driven)",
        **plan.to_json(),
    }


EPSILON_NOTE = (
    "the ledger is the stream's: its spends add up to the stream's eps once for all runs that "
    "continue its --state; the stream's first run commits them (epsilon_this_run), a "
    "continuing run adds nothing (its releases use the noise scales and the privacy budget the "
    "first run fixed, on rows no earlier release counted in the same node)"
)
STREAM_NOTE = (
    "a random name of this stream (kept in --state): a run continuing the stream accepts only "
    "the report with its id and the releases its state lists in --out-dir, any other run "
    "refuses an --out-dir that holds releases or a report"
)
PARTITION_ACCURACY = (
    "w1_bound_mixed_metric: a-priori bound on expected W1 in the metric "
    "(`metric`: levels at distance 1, the other columns L-infinity on the unit cube; with "
    "no boolean or category column also given as w1_bound_unit_cube) from Lemma 5.10 and "
    "(5.7)-(5.9) with worst-case unseen rows, for the released points before the output "
    "rounding of integer and date columns (up to 1/(2L) more); vacuous at >= 1, weak at "
    ">= 0.5; often vacuous at small t"
)
MARGINALS_ACCURACY = (
    "--mechanism marginals: no a-priori W1 bound (the model keeps only the dependences of one "
    "tree and its second parents); measured in docs/benchmarks.md"
)


def build_report(
    mechanism, specs, ledger, history, released, seeded, command, state_dir, options, accuracy
):
    """The public report: flags, the ledger, the checkpoints and their a-priori bounds only."""
    return {
        "schema": SCHEMA,
        "tool": {"name": "dpsynth", "version": __version__},
        "command": command or [],
        "seeded": seeded,
        "release": NOT_FOR_RELEASE if seeded else "ok",
        "privacy_model": PRIVACY_MODEL,
        "neighbouring_relation": options.relation,
        "neighbouring_relation_meaning": RELATION_MEANING[options.relation],
        "mechanism": {
            **mechanism,
            "order_by": options.order_by,
            "checkpoints": options.checkpoints,
            "release_at_end": options.release_at_end,
            "row_counts_public": options.row_counts_public,
        },
        "domain": {s.name: s.to_json() for s in specs},
        "ledger": ledger.to_json(),
        "state": {
            "used": bool(state_dir),
            "note": "the state directory is SECRET (exact counts and drawn noise): never publish",
        },
        "checkpoints_this_run": [c["rows"] for c in released],
        "checkpoints": history,
        "metric": Domain(tuple(specs)).metric(),
        "constraints": describe(options.constraints) if options.constraints else None,
        "accuracy_note": accuracy,
    }
