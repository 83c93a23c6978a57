"""The `dpsynth` command line: each subcommand parses, calls the library, writes, reports.

Errors the user can fix become one line on stderr and an exit code (2 usage, 1 data, 3 refused
for privacy); no traceback is ever printed, since tracebacks can carry private values.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any

import typer

from dpsynth_cli import io, report
from dpsynth_cli import options as opt
from dpsynth_cli.console import Feedback
from dpsynth_cli.domain import (
    ColumnSpec,
    load_schema,
    parse_bounds_flag,
    requested_columns,
    resolve_columns,
)
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
            typer.echo(
                f"dpsynth: internal error ({type(exc).__name__}); please report it", err=True
            )
            raise typer.Exit(1) from None

    return run


@app.command(
    epilog="Examples:  dpsynth synth data.csv --eps 1 --bounds age=0:120 -o synth.csv   |   "
    "cat data.csv | dpsynth synth - --eps 0.5 --schema schema.json > synth.csv"
)
@guarded
def synth(
    input: opt.Input,
    eps: opt.Eps,
    output: opt.Output = "-",
    input_format: opt.InputFormat = None,
    output_format: opt.OutputFormat = None,
    columns: opt.Columns = None,
    bounds: opt.Bounds = None,
    schema: opt.Schema = None,
    bounds_eps: opt.BoundsEps = None,
    neighboring: opt.Neighboring = "add-remove",
    mechanism: opt.Mechanism = "pmm",
    rows: opt.Rows = None,
    seed: opt.Seed = None,
    report_path: opt.Report = None,
    diagnostics: opt.Diagnostics = None,
    dry_run: opt.DryRun = False,
    quiet: opt.Quiet = False,
) -> None:
    """Write DP synthetic data close to INPUT in 1-Wasserstein distance, and a JSON report."""
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
        result.table,
        output,
        out_fmt,
        input_path=input,
        extra={
            p: report.dumps(c)
            for p, c in ((report_file, public), (diagnostics, result.diagnostics))
            if p
        },
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
        ColumnSpec(n, "float", *declared[n])
        if n in declared
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
