"""The `dpsynth` command line: each subcommand parses, calls the library, writes, reports.

Errors the user can fix become one line on stderr and an exit code (2 usage, 1 data, 3 refused
for privacy); no traceback is ever printed, since tracebacks can carry private values.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Annotated, Any

import typer

from dpsynth_cli import io, report
from dpsynth_cli.console import Feedback
from dpsynth_cli.domain import ColumnSpec, load_schema, parse_bounds_flag, requested_columns, resolve_columns
from dpsynth_cli.errors import DpsynthError
from dpsynth_cli.privacy.noise import RandomSource
from dpsynth_cli.synth import SynthOptions, plan_budget, synthesize

app = typer.Typer(
    name="dpsynth",
    help="Differentially private synthetic data with provable 1-Wasserstein accuracy.",
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


@app.callback()
def _group() -> None:
    """Differentially private synthetic data with provable 1-Wasserstein accuracy.

    Run `dpsynth COMMAND --help` for a command's options and examples.
    """


def guarded(command: Callable[..., Any]) -> Callable[..., Any]:
    """Turn library errors into one-line messages and exit codes; a closed stdout exits 0."""

    @functools.wraps(command)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except DpsynthError as exc:
            typer.echo(f"dpsynth: error: {exc}", err=True)
            raise typer.Exit(exc.exit_code) from None
        except io.OutputClosed:
            raise typer.Exit(0) from None
        except MemoryError:
            typer.echo("dpsynth: error: out of memory", err=True)
            raise typer.Exit(1) from None
        except (typer.Exit, typer.Abort, KeyboardInterrupt):
            raise
        except Exception as exc:  # never print a traceback: it may hold private values
            typer.echo(f"dpsynth: internal error ({type(exc).__name__}); please report it", err=True)
            raise typer.Exit(1) from None

    return run


InputArg = Annotated[str, typer.Argument(metavar="INPUT", help="Input table: .csv, .csv.gz or .parquet; '-' reads CSV from stdin.", show_default=False)]
OutputOpt = Annotated[str, typer.Option("--output", "-o", metavar="PATH", help="Output path, e.g. -o synth.parquet; '-' (default) writes CSV to stdout.")]
InFormatOpt = Annotated[str | None, typer.Option("--input-format", metavar="csv|parquet", help="Override the input format chosen by extension, e.g. --input-format csv.", show_default=False)]
OutFormatOpt = Annotated[str | None, typer.Option("--output-format", metavar="csv|parquet", help="Override the output format chosen by extension, e.g. --output-format parquet.", show_default=False)]
ColumnsOpt = Annotated[str | None, typer.Option("--columns", metavar="COL,COL", help="Comma-separated columns to synthesise, e.g. --columns age,income (default: every numeric column, or the schema's).", show_default=False)]
BoundsOpt = Annotated[list[str] | None, typer.Option("--bounds", metavar="COL=LO:HI", help="Public bounds of a column, repeatable, e.g. --bounds age=0:120. Values outside are clamped.", show_default=False)]
SchemaOpt = Annotated[str | None, typer.Option("--schema", metavar="FILE", help="JSON schema with column types and bounds, e.g. --schema schema.json (format in README).", show_default=False)]
SeedOpt = Annotated[int | None, typer.Option("--seed", metavar="N", help="Reproducible noise for tests and demos, e.g. --seed 7. The report then says: not for release.", show_default=False)]
ReportOpt = Annotated[str | None, typer.Option("--report", metavar="FILE", help="Where to write the JSON report, e.g. --report run.json (default: OUTPUT.report.json for a file output; none for stdout).", show_default=False)]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="Print nothing on stderr but errors, e.g. in cron jobs: --quiet.")]


@app.command(
    epilog="Examples:  dpsynth synth data.csv --eps 1 --bounds age=0:120 -o synth.csv   |   "
    "cat data.csv | dpsynth synth - --eps 0.5 --schema schema.json > synth.csv"
)
@guarded
def synth(
    input: InputArg,
    eps: Annotated[float, typer.Option("--eps", metavar="EPS", help="Total privacy budget epsilon for the whole run, e.g. --eps 1.", show_default=False)],
    output: OutputOpt = "-",
    input_format: InFormatOpt = None,
    output_format: OutFormatOpt = None,
    columns: ColumnsOpt = None,
    bounds: BoundsOpt = None,
    schema: SchemaOpt = None,
    bounds_eps: Annotated[float | None, typer.Option("--bounds-eps", metavar="EPS", help="Budget for DP bounds of columns without declared bounds, e.g. --bounds-eps 0.05 (default: 10% of --eps; 0 makes missing bounds an error).", show_default=False)] = None,
    neighboring: Annotated[str, typer.Option("--neighboring", metavar="add-remove|replace", help="Neighbouring relation the guarantee is for, e.g. --neighboring replace (doubles histogram sensitivity). Default add-remove: add or remove one row.")] = "add-remove",
    mechanism: Annotated[str, typer.Option("--mechanism", metavar="pmm", help="Synthesiser, e.g. --mechanism pmm (Private Measure Mechanism, dissertation Algorithm 4).")] = "pmm",
    rows: Annotated[int | None, typer.Option("--rows", metavar="N", help="Number of output rows, e.g. --rows 10000, resampled from the private measure (default: its own private total).", show_default=False)] = None,
    seed: SeedOpt = None,
    report_path: ReportOpt = None,
    diagnostics: Annotated[str | None, typer.Option("--diagnostics", metavar="FILE", help="Also write NON-PRIVATE diagnostics (true W1 between input and output) to this file, e.g. --diagnostics diag.json. Never release it.", show_default=False)] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the plan (budget split, mechanism, depth rule) as JSON without reading data values, e.g. --dry-run.")] = False,
    quiet: QuietOpt = False,
) -> None:
    """Write DP synthetic data close to INPUT in 1-Wasserstein distance, plus a JSON privacy report."""
    feedback = Feedback(quiet)
    options = SynthOptions(eps, bounds_eps, neighboring, mechanism, rows, diagnostics is not None)
    schema_specs = load_schema(schema) if schema else None
    declared = {name: (lo, hi) for name, lo, hi in map(parse_bounds_flag, bounds or [])}
    names = requested_columns(columns, schema_specs)
    in_fmt = io.detect_format(input, input_format)
    out_fmt = io.detect_format(output, output_format)
    report_file = report_path or (None if output == "-" else output + ".report.json")
    if dry_run:
        typer.echo(report.dumps(_dry_run_plan(options, names, schema_specs, declared)), nl=False)
        return
    with feedback.step("reading input"):
        table = io.read_table(input, in_fmt, names)
    specs = resolve_columns(table.schema, names, schema_specs, declared, input)
    source = RandomSource.seeded(seed) if seed is not None else RandomSource.secure()
    with feedback.step("synthesising"):
        result = synthesize(table, specs, options, source)
    for notice in result.notices:
        feedback.notice(notice)
    public = report.build_report(
        command=["dpsynth", *sys.argv[1:]],
        seeded=seed is not None,
        budget=result.budget.to_json(),
        domain=result.domain,
        ledger=result.ledger,
        plan=result.plan,
        noisy_rows=result.noisy_rows,
        output_rows=result.table.num_rows,
        output={"path": output, "format": out_fmt},
    )
    io.write_outputs(
        result.table, output, out_fmt, input_path=input,
        extra={p: report.dumps(c) for p, c in
               ((report_file, public), (diagnostics, result.diagnostics)) if p},
    )
    feedback.summary(public, output, report_file)


def _dry_run_plan(
    options: SynthOptions,
    names: list[str] | None,
    schema_specs: dict[str, ColumnSpec] | None,
    declared: dict[str, tuple[float, float]],
) -> dict[str, Any]:
    """The plan from flags alone; which columns need DP bounds is known only if they are named."""
    specs = [
        ColumnSpec(n, "float", *declared[n]) if n in declared
        else (schema_specs or {}).get(n, ColumnSpec(n, "float"))
        for n in names or []
    ]
    budget = plan_budget(options, specs).to_json()
    if names is None:
        budget["note"] = (
            "columns are every numeric column of the input; those without declared bounds get a "
            "DP bounds estimate from --bounds-eps (default 10% of --eps)"
        )
    return {
        "dry_run": True,
        "mechanism": options.mechanism,
        "neighbouring_relation": options.relation,
        "columns": names or "every numeric column of the input",
        "budget_plan": budget,
        "depth_rule": "r = ceil(log2(eps_mechanism * noisy_rows / sensitivity)), minus 1 when "
        "d = 1, capped at 24 (Corollary 3.11)",
        "noise": "discrete Laplace; per-level scales by eq. (3.7)",
    }


def main() -> None:
    """Console-script entry point."""
    app()
