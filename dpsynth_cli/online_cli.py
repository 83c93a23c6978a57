"""`dpsynth online-replay`: the command around `online.replay` (registered on the app by `cli`).

It reads with the same strict reader as `synth` and chooses columns from declarations only
(`domain.declare_columns`); every column needs declared bounds. The --order-by column is read
too: it is the public timeline; `online.stream.open_stream` reads it alone first and streams a
file already in its order (else it sorts in memory, and a notice says so). Then it calls the
library, which writes the releases, the report and the secret state, and prints notices (and, on
a terminal, progress and a one-line summary).
"""

from __future__ import annotations

import os
from typing import Annotated

import typer

from dpsynth_cli import budget_cli, io, report, runs
from dpsynth_cli import options as opt
from dpsynth_cli.console import Feedback
from dpsynth_cli.domain import declare_columns
from dpsynth_cli.errors import UsageError
from dpsynth_cli.online import PRIVACY_MODEL
from dpsynth_cli.online.params import ALLOCATIONS
from dpsynth_cli.online.replay import MECHANISMS, REPORT_NAME, check_dirs, check_mechanism
from dpsynth_cli.privacy.ledger import check_epsilon
from dpsynth_cli.privacy.noise import RandomSource


def _opt(*names: str, metavar: str | None = None, help: str, show_default: bool = False):
    return typer.Option(*names, metavar=metavar, help=help, show_default=show_default)


Eps = Annotated[
    float,
    _opt(
        "--eps",
        metavar="EPS",
        help="Privacy budget epsilon of the whole stream: all its releases, in this run and in "
        "every run that continues --state, e.g. --eps 1 (at most 1000).",
    ),
]
OutDir = Annotated[
    str,
    _opt(
        "--out-dir",
        metavar="DIR",
        help="Directory of the releases, e.g. --out-dir releases/ (created if missing): "
        "release-<rows, 12 digits>.parquet per checkpoint (names sort in time order) and "
        f"{REPORT_NAME}. Published releases are never replaced: a run refuses (exit 3, before "
        "the spend) a DIR holding releases or a report it did not write, i.e. any, without "
        "--state or with a new --state; a run continuing --state accepts only its own stream's "
        "(a rerun needs a new --out-dir, or the old releases removed).",
    ),
]
OrderBy = Annotated[
    str | None,
    _opt(
        "--order-by",
        metavar="COL",
        help="Column that orders the rows into a stream, e.g. --order-by time (stable: ties "
        "keep the file's order). PUBLIC: its values and the order they give are the timeline, "
        "so it may not be one of the synthesised columns (refused, exit 2: their values are "
        "protected; leave it out of the schema's columns). A date or datetime column (ISO "
        "text, or a Parquet date/timestamp) also allows --checkpoints by time. CSV text sorts "
        "as numbers when "
        "every value is one, else as text (ISO 8601 times work). A missing value is an error "
        "(exit 1). Default: the file's row order. A file already in this order (checked first "
        "by reading this column alone) is streamed with memory bounded by a batch; any other "
        "is read whole and sorted in memory (a notice says so): sort big files beforehand.",
    ),
]
Checkpoints = Annotated[
    str,
    _opt(
        "--checkpoints",
        metavar="pow2|every:N|N,N,...|every:N<s|m|h|d|w>|monthly",
        show_default=True,
        help="When a synthetic table is released: by stream length (exactly that many rows), "
        "e.g. --checkpoints every:10000 or --checkpoints 1000,5000,20000; pow2: 1, 2, 4, 8, ... "
        "rows; or by time on a date or datetime --order-by column, e.g. --checkpoints every:7d "
        "(from the first time, floored to midnight) or monthly (the 1st of each month): the "
        "release at time T holds the rows before T (a public number: the timeline is public), "
        "is made once a row at or after T is seen, and is named release-<rows>-<T>.",
    ),
]
ReleaseFormat = Annotated[
    str,
    _opt(
        "--output-format",
        metavar="csv|parquet",
        show_default=True,
        help="Format of the release files, e.g. --output-format csv.",
    ),
]
State = Annotated[
    str | None,
    _opt(
        "--state",
        metavar="DIR",
        help="Keep the whole mechanism state in DIR so that the next run continues the stream "
        "with its new rows under the same eps, e.g. --state /var/lib/dpsynth/sales (created "
        "0700). SECRET: it holds exact counts and the noise drawn; never publish or share it, "
        "and keep it outside --out-dir. A run whose columns, bounds, --eps, --neighboring or "
        "--allocation differ from the state's, or whose input does not begin with the rows the "
        "state replayed, is refused (exit 3).",
    ),
]
InputMode = Annotated[
    str,
    _opt(
        "--input-mode",
        metavar="whole|new",
        show_default=True,
        help="With --state: whole (INPUT is the whole growing table; rows already replayed are "
        "checked and skipped) or new (INPUT holds only the rows since the last run), e.g. "
        "--input-mode new.",
    ),
]
Neighboring = Annotated[
    str,
    _opt(
        "--neighboring",
        metavar="replace|add-remove",
        show_default=True,
        help="Which streams are neighbours (the protected change), e.g. --neighboring "
        "add-remove. replace: one row's values changed, the row keeping its time (the "
        "dissertation's relation; also covers a row present or emptied). add-remove: one time "
        "slot holds a row in one stream and is empty in the other (half the noise). The "
        "number of rows is public under both.",
    ),
]
Allocation = Annotated[
    str,
    _opt(
        "--allocation",
        metavar="|".join(ALLOCATIONS),
        show_default=True,
        help="How each region's epsilon of eq. (5.3) is spent, e.g. --allocation literal: "
        "literal (Algorithm 11 as printed: segment tests, Binary Mechanism, level totals) or "
        "tuned (all on the level totals; same proof, measured more accurate: "
        "docs/benchmarks.md).",
    ),
]
Mechanism = Annotated[
    str,
    _opt(
        "--mechanism",
        metavar="|".join(MECHANISMS),
        show_default=True,
        help="The online synthesiser, e.g. --mechanism marginals. auto: for a new stream (with "
        "or without --state) marginals when synth's auto rule would pick it (4 to 100 "
        "columns, eps x rows / (sensitivity x columns) >= 90, rows: those of the last "
        "checkpoint this run releases, or with --row-counts-public those at the end of the "
        "run; the report's planning_rows), else partition; a continued --state keeps its "
        "stream's mechanism. partition: the binary hierarchical partition of dissertation "
        "ch. 5 (Algorithms 10-12; a-priori W1 bounds). marginals: every column's histogram and "
        "the column pairs of a privately chosen tree released continually over the stream's "
        "checkpoints (across the runs of a --state) and a tree model drawn from them, as "
        "synth's --mechanism marginals (no a-priori bound; measured more accurate on real "
        "mixed tables: docs/benchmarks.md).",
    ),
]
ReleaseAtEnd = Annotated[
    bool,
    _opt(
        "--release-at-end",
        help="Also release after the last row of this run (a calendar release, e.g. daily "
        "from cron): --release-at-end. Its size reveals the row count, so it needs "
        "--row-counts-public.",
    ),
]
RowCountsPublic = Annotated[
    bool,
    _opt(
        "--row-counts-public",
        help="Declare the number of rows at the end of each run public (not protected), e.g. "
        "--release-at-end --row-counts-public. That number then also plans the run (auto's "
        "choice; marginals' grids, bins and one-way share); without it the last checkpoint's "
        "rows do.",
    ),
]

EXAMPLES = (
    "dpsynth online-replay stream.parquet --eps 1 --order-by time --schema s.json "
    "--out-dir releases/",
    "dpsynth online-replay sales.csv --eps 1 --order-by day --bounds amount=0:1000 "
    "--checkpoints every:10000 --state ~/.dpsynth/sales --out-dir sales-releases/ --quiet",
)


def online_replay(
    input: opt.Input,
    eps: Eps,
    out_dir: OutDir,
    order_by: OrderBy = None,
    checkpoints: Checkpoints = "pow2",
    output_format: ReleaseFormat = "parquet",
    state: State = None,
    input_mode: InputMode = "whole",
    neighboring: Neighboring = "replace",
    allocation: Allocation = "tuned",
    mechanism: Mechanism = "auto",
    release_at_end: ReleaseAtEnd = False,
    row_counts_public: RowCountsPublic = False,
    input_format: opt.InputFormat = None,
    columns: opt.Columns = None,
    no_header: opt.NoHeader = False,
    delimiter: opt.Delimiter = None,
    decimal: opt.Decimal = None,
    bounds: opt.Bounds = None,
    integer: opt.Integer = None,
    schema: opt.Schema = None,
    seed: opt.Seed = None,
    quiet: opt.Quiet = False,
    budget_file: budget_cli.BudgetOpt = None,
    no_budget: budget_cli.NoBudgetOpt = False,
    dataset: budget_cli.DatasetOpt = None,
) -> None:
    """Replay INPUT's rows in order as a stream and release DP synthetic data at checkpoints.

    Publish a growing table's synthetic copy every day without paying eps again (dissertation
    ch. 5, Algorithms 10-12; the privacy model below). Every column needs declared bounds; the
    schema types synth reads (category, boolean, integer, date, datetime, nullable) are
    released as such, levels split first, and the schema's constraints hold in every release.
    """
    feedback = Feedback(quiet)
    declared = declare_columns(columns, schema, bounds, integer, decimal)
    options = runs.replay_options(
        declared,
        eps,
        order_by=order_by,
        checkpoints=checkpoints,
        relation=neighboring,
        allocation=allocation,
        mechanism=mechanism,
        output_format=output_format,
        input_mode=input_mode,
        release_at_end=release_at_end,
        row_counts_public=row_counts_public,
    )
    in_fmt = io.detect_format(input, input_format)
    io.check_decimal(declared.decimal, io.delimiter_flag(delimiter), in_fmt)
    check_epsilon(eps)  # usage errors before the input is opened
    check_mechanism(options, state)
    check_dirs(out_dir, state)
    if os.path.isdir(input) and os.path.isdir(out_dir) and os.path.samefile(input, out_dir):
        raise UsageError("--out-dir is the input directory: the releases would be read as input")
    early = runs.declared_specs(declared, in_fmt == "parquet")
    if early is not None:  # the columns are declared: their usage errors now
        runs.replay_checks(early, declared, options)
    spend = budget_cli.guard(
        budget_file, no_budget, dataset, input, "online-replay", eps, state_dir=state
    )
    if seed is not None:
        feedback.warning(f"--seed given: {report.NOT_FOR_RELEASE}")
    extra = [order_by] if order_by is not None and order_by not in declared.names else []
    names = declared.names + extra
    sep = io.delimiter_flag(delimiter)
    with io.open_input(input, in_fmt, names, header=not no_header, delimiter=sep) as read:
        result, notices = runs.replay_opened(
            read,
            in_fmt == "parquet",
            declared,
            options,
            RandomSource.seeded(seed) if seed is not None else RandomSource.secure(),
            out_dir=out_dir,
            state_dir=state,
            spend=spend,
            command=runs.public_command(),  # without the private --budget FILE
            notify=feedback.notice,
            step=feedback.step,
            progress=feedback.counter("replaying the stream"),
        )
    for notice in notices + vacuous_notice(result.report):
        feedback.notice(notice)
    if seed is None and result.report["seeded"]:
        feedback.warning(f"the state was started by a --seed run: {report.NOT_FOR_RELEASE}")
    if feedback.interactive:
        this_run = result.report["checkpoints_this_run"]
        feedback.console.print(
            f"dpsynth online-replay: {len(this_run)} release{'' if len(this_run) == 1 else 's'} "
            "this run "
            f"({', '.join(map(str, this_run)) or 'no checkpoint reached'}) in {out_dir}; "
            f"epsilon {eps:g} for the whole stream; report {result.files[-1]}",
            markup=False,
            highlight=False,
        )


def vacuous_notice(report: dict) -> list[str]:
    """Once per run, in plain words, when this run's releases carry a vacuous a-priori bound
    (the report's `"vacuous": true`: >= 1, the metric's largest distance) or a weak one
    (`"weak": true`, >= 0.5): a function of the public checkpoints and plan only."""
    history, n = report["checkpoints"], len(report["checkpoints_this_run"])
    this_run = history[len(history) - n :]  # this run's releases come last
    vacuous = [c["rows"] for c in this_run if c.get("vacuous")]
    weak = [c["rows"] for c in this_run if c.get("weak") and not c.get("vacuous")]
    if not vacuous and not weak:
        return []
    help = "later checkpoints, a larger --eps or fewer columns help"
    if not vacuous:
        which = "every release" if len(weak) == len(this_run) else f"{len(weak)} releases"
        return [
            f"{which} of this run (up to {max(weak)} rows) has a weak a-priori W1 bound (0.5 "
            "or more, where 1 is the largest distance between two rows; the report's "
            f'"weak": true): expect large errors in those releases; {help}'
        ]
    which = "every release" if len(vacuous) == len(this_run) else f"{len(vacuous)} releases"
    more = f"; {len(weak)} more have a weak one (0.5 or more)" if weak else ""
    return [
        f"{which} of this run (up to {max(vacuous)} rows) has a vacuous a-priori W1 bound "
        '(>= 1, the report\'s "vacuous": true): at those stream lengths the releases are '
        f"mostly noise{more}; {help}"
    ]


# The privacy model is part of the interface: --help shows the text the report carries.
online_replay.__doc__ = f"{online_replay.__doc__}\n\n    {PRIVACY_MODEL}\n"
