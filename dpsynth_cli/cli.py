"""The `dpsynth` command line: each subcommand parses, calls the library, writes, reports.

Errors the user can fix become one line on stderr and an exit code (2 usage, 1 data, 3 refused
for privacy); no traceback is ever printed, since tracebacks can carry private values.
"""

from __future__ import annotations

import contextlib
import functools
import signal
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Annotated, Any

import typer

from dpsynth_cli import __version__, budget_cli, io, online_cli, pca_cli, report, runs
from dpsynth_cli import options as opt
from dpsynth_cli.console import Feedback
from dpsynth_cli.constraints import choose, describe
from dpsynth_cli.domain import (
    ColumnSpec,
    Declared,
    declare_columns,
)
from dpsynth_cli.engine import dask as dask_engine
from dpsynth_cli.engine.plan import BatchPlan
from dpsynth_cli.errors import DpsynthError, UsageError
from dpsynth_cli.mechanisms import transport
from dpsynth_cli.privacy.noise import RandomSource
from dpsynth_cli.schema_draft import draft
from dpsynth_cli.synth import (
    PLAN_RULES,
    SynthOptions,
    SynthResult,
    dim_plan,
    plan_budget,
    synthesize,
)

try:  # typer >= 0.22 carries its own copy of click
    from typer._click.exceptions import NoArgsIsHelpError
    from typer._click.exceptions import UsageError as ClickUsageError
except ImportError:  # pragma: no cover
    from click.exceptions import NoArgsIsHelpError
    from click.exceptions import UsageError as ClickUsageError


class _OneLineErrors(typer.core.TyperGroup):
    """Flag errors found by the parser (a bad --eps value, an unknown option) as one line, like
    every other error, instead of click's usage block."""

    def make_context(self, *args: Any, **kwargs: Any) -> Any:
        with _one_line_usage_errors():
            return super().make_context(*args, **kwargs)

    def invoke(self, ctx: Any) -> Any:
        with _one_line_usage_errors():
            return super().invoke(ctx)


@contextlib.contextmanager
def _one_line_usage_errors() -> Iterator[None]:
    try:
        yield
    except NoArgsIsHelpError:
        raise
    except ClickUsageError as exc:
        where = exc.ctx.command_path if exc.ctx else "dpsynth"
        typer.echo(f"dpsynth: error: {exc.format_message()} (see '{where} --help')", err=True)
        raise typer.Exit(exc.exit_code) from None


# What a script sees: the exit status of every command (README, "Exit status").
EXIT_STATUS = (
    "Exit status: 0 done (also when a reader of stdout stops early), 1 data or runtime error, "
    "2 usage error, 3 refused (privacy budget or --state conflict), 130/143 stopped by Ctrl-C "
    "or SIGTERM (nothing written)."
)


app = typer.Typer(
    name="dpsynth",
    epilog=EXIT_STATUS,
    cls=_OneLineErrors,
    help="Differentially private synthetic data with provable 1-Wasserstein accuracy.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"dpsynth {__version__}")
        raise typer.Exit()


@app.callback()
def _group(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            callback=_version,
            is_eager=True,
            help="Print the version and exit.",
        ),
    ] = False,
) -> None:
    """Differentially private synthetic data with provable 1-Wasserstein accuracy.

    Run `dpsynth COMMAND --help` for a command's options and examples.
    """


def guarded(command: Callable[..., Any]) -> Callable[..., Any]:
    """Turn library errors into one-line messages and exit codes; a closed stdout exits 0, and
    so does a stop (Ctrl-C, SIGTERM, SIGHUP) once the run's final outputs are all in place: the
    run is complete, so it must not report a failure (`io.finished`)."""

    @functools.wraps(command)
    def run(*args: Any, **kwargs: Any) -> Any:
        io.start_run()
        try:
            return command(*args, **kwargs)
        except (KeyboardInterrupt, SystemExit) as exc:
            stopped = isinstance(exc, KeyboardInterrupt) or exc.code in _STOP_CODES
            if stopped and io.finished():
                raise typer.Exit(0) from None
            raise
        except DpsynthError as exc:
            typer.echo(f"dpsynth: error: {exc}", err=True)
            raise typer.Exit(exc.exit_code) from None
        except io.OutputClosed:
            raise typer.Exit(0) from None
        except MemoryError:
            typer.echo("dpsynth: error: out of memory", err=True)
            raise typer.Exit(1) from None
        except (typer.Exit, typer.Abort):
            raise
        except Exception as exc:  # never print a traceback: it may hold private values
            typer.echo(
                f"dpsynth: internal error ({type(exc).__name__}); please report it", err=True
            )
            raise typer.Exit(1) from None

    return run


def _examples(*commands: str) -> str:
    """An epilog of example commands, one a line (click's \\b keeps it from re-wrapping), and
    the exit status."""
    return "Examples:\n\n\b\n" + "\n".join(f"  {c}" for c in commands) + "\n\n" + EXIT_STATUS


@app.command(
    epilog=_examples(
        "dpsynth synth data.csv --eps 1 --bounds age=0:120 --integer age -o synth.csv",
        "dpsynth synth data.parquet --eps 1 --schema schema.json -o synth.parquet",
        "cat data.csv | dpsynth synth - --eps 0.5 --schema schema.json --report run.json "
        "> synth.csv",
    )
)
@guarded
def synth(
    input: opt.Input,
    eps: opt.Eps,
    output: opt.Output = "-",
    input_format: opt.InputFormat = None,
    output_format: opt.OutputFormat = None,
    columns: opt.Columns = None,
    no_header: opt.NoHeader = False,
    delimiter: opt.Delimiter = None,
    decimal: opt.Decimal = None,
    bounds: opt.Bounds = None,
    integer: opt.Integer = None,
    schema: opt.Schema = None,
    bounds_eps: opt.BoundsEps = None,
    neighboring: opt.Neighboring = "add-remove",
    mechanism: opt.Mechanism = "auto",
    dim: opt.Dim = "full",
    rows: opt.Rows = None,
    seed: opt.Seed = None,
    report_path: opt.Report = None,
    diagnostics: opt.Diagnostics = None,
    dry_run: opt.DryRun = False,
    quiet: opt.Quiet = False,
    batch_rows: opt.BatchRows = None,
    engine: opt.Engine = "local",
    scheduler: opt.Scheduler = None,
    budget_file: budget_cli.BudgetOpt = None,
    no_budget: budget_cli.NoBudgetOpt = False,
    dataset: budget_cli.DatasetOpt = None,
) -> None:
    """Write DP synthetic data close to INPUT in 1-Wasserstein distance, and a JSON report."""
    feedback = Feedback(quiet)
    _check_engine(engine, scheduler, input, output)
    options = SynthOptions(
        eps, bounds_eps, neighboring, mechanism, rows, diagnostics is not None, dim
    )
    declared = declare_columns(columns, schema, bounds, integer, decimal)
    options = replace(options, determines=declared.determines)
    in_fmt = io.detect_format(input, input_format)
    io.check_decimal(declared.decimal, io.delimiter_flag(delimiter), in_fmt)
    if engine == "dask":  # a directory of part files, written by the workers
        out_fmt = io.part_directory_format(output, output_format)
    else:
        out_fmt = io.detect_format(output, output_format)
    report_file = report.report_path(report_path, output)
    if dry_run:
        plan = _dry_run_plan(options, declared)
        io.write_text_stdout(report.dumps(plan))
        return
    plan_budget(options, [])  # --eps, --rows, --mechanism: usage errors before any row is read
    early = runs.declared_specs(declared, in_fmt == "parquet")
    if early is not None:  # the columns are declared: their usage errors before the input opens
        plan_budget(options, early, declared.constraints)
    if diagnostics == "-":
        raise UsageError("--diagnostics needs a FILE: it is not private and never goes to stdout")
    table = [] if engine == "dask" else [output]  # a part directory is checked by _check_engine
    io.check_outputs([*table, report_file, diagnostics], input)
    spend = budget_cli.guard(budget_file, no_budget, dataset, input, "synth", eps)  # or exit 3
    if seed is not None:
        feedback.warning(f"--seed given: {report.NOT_FOR_RELEASE}")
    with feedback.step("reading input"):
        read = io.open_input(
            input,
            in_fmt,
            declared.names,
            header=not no_header,
            batch_rows=batch_rows,
            delimiter=io.delimiter_flag(delimiter),
        )
    choice = runs.synth_columns(read, in_fmt == "parquet", declared, feedback.notice)
    plan_budget(options, choice.specs, declared.constraints)  # usage errors: before the spend
    spend.charge()  # on disk before any row is read
    source = runs.random_source(seed)
    if scheduler and not scheduler.startswith("tls://"):
        feedback.warning(dask_engine.PLAIN_SCHEDULER.format(scheduler=scheduler))
    for notice in transport.slow_fallback_notice() if mechanism == "psmm" else []:
        feedback.notice(notice)  # before the solve, which may take long
    with contextlib.ExitStack() as running:  # a Dask cluster lives until its parts are written
        cluster = running.enter_context(dask_engine.client(scheduler)) if engine == "dask" else None
        with feedback.step("synthesising"):
            if cluster is not None:
                result = _synthesize_on_dask(
                    cluster, read, input, in_fmt, choice.specs, options, source, declared
                )
            else:
                data = feedback.passes(read.batches, read.num_rows)
                result = synthesize(
                    data, choice.specs, options, source, constraints=declared.constraints
                )
        for notice in result.notices:
            feedback.notice(notice)
        public = runs.synth_report(result, choice, seed, {"path": output, "format": out_fmt})
        # Parquet carries the mark of a seeded run in the file itself (CSV cannot)
        mark = runs.release_mark(seed)
        extra = report.files({report_file: public, diagnostics: result.diagnostics})
        private = [diagnostics] if diagnostics else []  # true counts and W1: owner-only (0600)
        if cluster is not None:
            plan = result.plan(read.batch_rows)
            with feedback.step("writing part files on the cluster"):
                final = report_file != "-"  # else the report on stdout finishes the run
                _write_on_dask(
                    cluster, result, plan, output, out_fmt, input, mark, extra, private, final
                )
        else:
            with feedback.step("writing the synthetic rows"):
                io.write_outputs(
                    _shown(
                        (t.replace_schema_metadata(mark) for t in result.batches(read.batch_rows)),
                        feedback.counter("writing"),
                        result.output_rows,
                    ),
                    output,
                    out_fmt,
                    input_path=input,
                    schema=result.domain.output_schema(mark),
                    extra=extra,
                    private=private,
                    final=report_file != "-",
                )
    if report_file == "-":  # after the files: a reader of stdout may stop at any time
        io.write_text_stdout(report.dumps(public), final=True)
    elif report_file is None:
        feedback.notice(report.no_report_notice(output))
    feedback.summary(public, output, report_file)


def _shown(
    tables: Iterator[Any], show: Callable[[int, int], None] | None, total: int
) -> Iterator[Any]:
    """The output's batches, with the rows written so far in the status line (a terminal)."""
    done = 0
    for table in tables:
        yield table
        done += table.num_rows
        if show is not None:
            show(done, total)


def _check_engine(engine: str, scheduler: str | None, input: str, output: str) -> None:
    if engine not in ("local", "dask"):
        raise UsageError("--engine must be local or dask")
    if scheduler and engine != "dask":
        raise UsageError("--scheduler is for --engine dask")
    if engine == "dask" and input == "-":
        raise UsageError("--engine dask reads files its workers can open, not stdin")
    if engine == "dask":  # before any pass: the output must be a directory it may write
        io.check_part_directory(output, input)
        dask_engine.check_installed(scheduler)  # before the spend: `client` imports them


def _synthesize_on_dask(
    client: Any,
    read: io.InputSource,
    path: str,
    fmt: str,
    specs: list[ColumnSpec],
    options: SynthOptions,
    source: RandomSource,
    declared: Declared,
) -> SynthResult:
    """`synthesize` with its passes on Dask: Parquet by files / row groups, CSV as one part,
    each read once by a worker and held there until the release is made."""
    columns = [s.name for s in specs]
    parts = (
        dask_engine.parquet_partitions(path, columns, read.batch_rows)
        if fmt == "parquet"
        else [dask_engine.Partition(read.name, read.batches)]
    )
    with dask_engine.dask_rows(client, parts, specs) as rows:  # released when the passes end
        return synthesize(None, specs, options, source, rows=rows, constraints=declared.constraints)


def _write_on_dask(
    client: Any,
    result: SynthResult,
    plan: Iterator[BatchPlan],
    path: str,
    fmt: str,
    input_path: str,
    mark: dict[str, str] | None,
    extra: dict[str, str],
    private: list[str],
    final: bool,
) -> None:
    """The output as a directory of part files, batch i placed and written by a worker from
    the released plan: the local engine's batches for the same seed and --batch-rows."""
    schema = result.domain.output_schema(mark)
    dask_engine.write_output(
        client,
        result.tables,
        plan,
        path,
        fmt,
        schema,
        input_path=input_path,
        extra=extra,
        private=private,
        final=final,
    )


def _dry_run_plan(options: SynthOptions, declarations: Declared) -> dict[str, Any]:
    """The plan from flags alone; which columns need DP bounds is known only if they are named."""
    names, schema_specs = declarations.names, declarations.schema
    declared = declarations.bounds
    specs = [
        ColumnSpec(n, "float", *declared[n])
        if n in declared
        else (schema_specs or {}).get(n, ColumnSpec(n, "float"))
        for n in names or []
    ]
    planned = plan_budget(options, specs)
    budget = planned.to_json()
    if names is None:
        budget["note"] = (
            "columns are every column of a CSV header (parsed as numbers) or every numeric "
            "column a Parquet file declares; those without declared bounds get a DP bounds "
            "estimate from --bounds-eps (default 10% of --eps)"
        )
    plan = {
        "dry_run": True,
        "mechanism": options.mechanism,
        "neighbouring_relation": options.relation,
        "columns": names or "every column of a CSV header, or every numeric Parquet column",
        "budget_plan": budget,
        "plan_rule": PLAN_RULES[options.mechanism],
        "noise": "discrete Laplace, exact rational scales",
        **dim_plan(options.dim),
    }
    if options.mechanism == "auto" and specs and plan["dim"] == "full":
        # the rule applied to the declared columns: what auto picks, by the noisy count
        from dpsynth_cli.domain import CONTINUOUS, LEVEL_KINDS
        from dpsynth_cli.mechanisms import select

        flags = sum(s.kind in CONTINUOUS and s.nullable for s in specs)
        levels = flags > 0 or any(s.kind in LEVEL_KINDS for s in specs)
        plan["auto_choice"] = select.planned(
            len(specs) + flags, planned.mechanism, options.relation, levels, len(specs)
        )
    if declarations.constraints:  # how each will be enforced; those on unchosen columns left out
        plan["constraints"] = describe(*choose(declarations.constraints, specs))
    return plan


@app.command(
    epilog=_examples(
        "dpsynth evaluate data.csv synth.csv --from-report synth.csv.report.json",
        "dpsynth evaluate data.parquet synth.parquet --bounds age=0:120 --json > utility.json",
    )
)
@guarded
def evaluate(
    real: Annotated[str, typer.Argument(metavar="REAL", help="The real (private) table.")],
    synthetic: Annotated[
        str, typer.Argument(metavar="SYNTHETIC", help="The synthetic table to compare with it.")
    ],
    from_report: Annotated[
        str | None,
        typer.Option(
            "--from-report",
            metavar="FILE",
            show_default=False,
            help="Use exactly the columns and bounds of a synth run, e.g. "
            "--from-report synth.csv.report.json.",
        ),
    ] = None,
    columns: opt.Columns = None,
    bounds: opt.Bounds = None,
    schema: opt.Schema = None,
    report_path: Annotated[
        str | None,
        typer.Option(
            "--report",
            metavar="FILE",
            show_default=False,
            help="Write the JSON report to FILE, e.g. --report utility.json.",
        ),
    ] = None,
    json_out: opt.Json = False,
    plot: Annotated[
        str | None,
        typer.Option(
            "--plot",
            metavar="PNG",
            show_default=False,
            help="Draw real vs synthetic to PNG, e.g. --plot cmp.png: a panel per column "
            "(levels by name) and the pairs that differ most as heat maps (needs the 'plot' "
            "extra: matplotlib).",
        ),
    ] = None,
    plot_columns: Annotated[
        str | None,
        typer.Option(
            "--plot-columns",
            metavar="A,B",
            show_default=False,
            help="A pair to draw first, e.g. --plot-columns age,income (a scatter of two "
            "numbers; default: only the worst pairs).",
        ),
    ] = None,
    seed: Annotated[
        int | None,
        typer.Option(
            "--seed",
            metavar="N",
            min=0,
            show_default=False,
            help="Seed for the subsample W1 estimate on large tables, e.g. --seed 1.",
        ),
    ] = None,
    joint_w1: Annotated[
        str,
        typer.Option(
            "--joint-w1",
            metavar="HOW",
            help="The whole table's W1 for tables larger than its samples (2^16 rows): sample "
            "(on uniform samples, with the tables' proven lower bound), full (proven bounds "
            "from every row: slower), skip (the lower bound only). The report says which.",
        ),
    ] = "sample",
    target: Annotated[
        str | None,
        typer.Option(
            "--target",
            metavar="COL",
            show_default=False,
            help="Model utility: a gradient-boosting model (scikit-learn, the 'utility' extra) "
            "trained on SYNTHETIC and the same model trained on REAL, both scored on real rows: "
            "AUC for a category or boolean (COL=LEVEL: that level against the rest; COL: each "
            "level against the rest, averaged), R^2 for a number (log(COL): of ln(1 + value)). "
            "E.g. --target cut=Ideal, --target 'log(price)'. Score on rows the synthesiser "
            "did not read: --holdout FILE; without it a random 25% of REAL is held out from "
            "the real-trained model, but the synthetic one may score too well on rows it was "
            "made from.",
        ),
    ] = None,
    holdout: Annotated[
        str | None,
        typer.Option(
            "--holdout",
            metavar="FILE",
            show_default=False,
            help="With --target: real rows that were NOT synthesised (same columns as REAL), "
            "the rows both models are scored on, e.g. --holdout test.csv; the real-trained "
            "model then learns from all of REAL.",
        ),
    ] = None,
    batch_rows: opt.BatchRows = None,
    input_format: opt.InputFormat = None,
    delimiter: opt.Delimiter = None,
    quiet: opt.Quiet = False,
) -> None:
    """Compare REAL and SYNTHETIC: W1, per-column and pair figures, and with --target a
    model's utility. NOT private: do not release."""
    # scipy and POT (and scikit-learn for --target): only evaluate pays for them
    from dpsynth_cli.evaluate import compare, utility
    from dpsynth_cli.evaluate.plot import plot_comparison
    from dpsynth_cli.evaluate.summary import print_evaluation

    feedback = Feedback(quiet)
    sep = io.delimiter_flag(delimiter)
    wanted = utility.request(target, holdout is not None)
    specs = None
    if from_report:
        specs = compare.specs_from_report(from_report)
        declared = Declared([s.name for s in specs], "report", None, {}, [])
    else:
        declared = declare_columns(columns, schema, bounds)
    with contextlib.ExitStack() as inputs:
        with feedback.step("opening tables"):
            real_fmt = io.detect_format(real, input_format)
            real_in = inputs.enter_context(
                io.open_input(real, real_fmt, declared.names, batch_rows=batch_rows, delimiter=sep)
            )

        def open_synthetic(names: list[str]) -> io.InputSource:
            fmt = io.detect_format(synthetic, input_format)
            return inputs.enter_context(
                io.open_input(synthetic, fmt, names, batch_rows=batch_rows, delimiter=sep)
            )

        held: list[io.InputSource] = []

        def check(chosen: list[ColumnSpec]) -> None:
            """--target's column and kind, and --holdout opened, before the comparison."""
            if wanted is not None:
                utility.resolve(wanted, chosen)
            if holdout is not None:
                fmt = io.detect_format(holdout, input_format)
                names = [s.name for s in chosen]
                held.append(
                    inputs.enter_context(
                        io.open_input(holdout, fmt, names, batch_rows=batch_rows, delimiter=sep)
                    )
                )

        result, specs, names = runs.compare_tables(
            real_in,
            real_fmt == "parquet",
            open_synthetic,
            declared,
            specs,
            seed,
            passes=lambda source: feedback.passes(source.batches, source.num_rows),
            step=feedback.step,
            joint=joint_w1,
            check=check,
        )
        if wanted is not None:
            with feedback.step("training the models: real and synthetic"):
                rows = feedback.passes(held[0].batches, held[0].num_rows) if held else None
                block = runs.model_utility(result, specs, wanted, rows, seed)
            result.report["utility"] = block
    if plot:
        pair = _plot_pair(plot_columns, names)
        plot_comparison(
            plot,
            result.real,
            result.synthetic,
            specs,
            result.report,
            pair,
            seed,
            sampled=result.sampled,
        )
    if report_path:
        io.atomic_write_bytes(report_path, report.dumps(result.report))
    if json_out:
        io.write_text_stdout(report.dumps(result.report))
    else:
        print_evaluation(result.report)
        for line in utility.summary_lines(result.report["utility"]) if wanted else []:
            typer.echo(line)


def _plot_pair(text: str | None, names: list[str]) -> tuple[int, int] | None:
    if text is None:
        return None  # the worst pairs only
    pair = [c.strip() for c in text.split(",")]
    if len(pair) != 2 or not all(c in names for c in pair):
        raise UsageError(
            "--plot-columns: give two of the compared columns, e.g. --plot-columns a,b"
        )
    return names.index(pair[0]), names.index(pair[1])


app.command(epilog=_examples(*pca_cli.EXAMPLES))(guarded(pca_cli.pca))
app.command(epilog=_examples(*online_cli.EXAMPLES))(guarded(online_cli.online_replay))
schema_app = typer.Typer(
    cls=_OneLineErrors,
    help="Schema files: column types, bounds and levels (public declarations).",
    epilog=EXIT_STATUS,
    no_args_is_help=True,
)
app.add_typer(schema_app, name="schema")
budget_app = typer.Typer(
    cls=_OneLineErrors,
    help="The privacy budget across runs: what each dataset has spent, and its total (a "
    "private file: see --budget).",
    epilog=EXIT_STATUS,
    no_args_is_help=True,
)
app.add_typer(budget_app, name="budget")
budget_app.command(
    "show", epilog=_examples("dpsynth budget show", "dpsynth budget show sales --json")
)(guarded(budget_cli.show))
budget_app.command(
    "set",
    epilog=_examples(
        "dpsynth budget set sales --eps 3", "dpsynth budget set --input data.csv --eps 2"
    ),
)(guarded(budget_cli.set_total))
budget_app.command("reset", epilog=_examples("dpsynth budget reset sales"))(
    guarded(budget_cli.reset)
)


@schema_app.command(
    "draft",
    epilog=_examples(
        "dpsynth schema draft data.csv > schema.json",
        "dpsynth schema draft data.parquet > schema.json",
    ),
)
@guarded
def schema_draft(
    input: opt.Input,
    input_format: opt.InputFormat = None,
    delimiter: opt.Delimiter = None,
) -> None:
    """Write a starting schema for INPUT to stdout: column names, and the types a Parquet file
    declares; types of CSV columns, bounds and category levels are left as FILL IN placeholders
    (reading them from the values would not be private). No row is read."""
    fmt = io.detect_format(input, input_format)
    with io.open_input(input, fmt, None, delimiter=io.delimiter_flag(delimiter)) as read:
        drafted = draft(read.schema, typed=fmt == "parquet")
    io.write_text_stdout(report.dumps(drafted))


_STOP_CODES = {128 + signal.SIGTERM, 128 + signal.SIGHUP}  # `_terminate`'s exit codes


def _terminate(signum: int, _frame: Any) -> None:
    """SIGTERM / SIGHUP (timeout, cron, a closed terminal) end the run like Ctrl-C: exceptions
    unwind, so temporary output files are removed and nothing partial is left behind."""
    raise SystemExit(128 + signum)


def main() -> None:
    """Console-script entry point."""
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _terminate)
    app()
