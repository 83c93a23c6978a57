"""Command-line options, defined once and shared by the subcommands that take them.

Every option's help says what it does and gives an example (`tests/test_cli_synth.py` checks).
"""

from __future__ import annotations

from typing import Annotated

import typer


def _opt(*names: str, metavar: str | None = None, help: str, show_default: bool = False):
    return typer.Option(*names, metavar=metavar, help=help, show_default=show_default)


Input = Annotated[
    str,
    typer.Argument(
        metavar="INPUT",
        help="Input table: .csv, .csv.gz or .parquet; '-' reads CSV from stdin.",
        show_default=False,
    ),
]
Output = Annotated[
    str,
    _opt(
        "--output",
        "-o",
        metavar="PATH",
        help="Output path, e.g. -o synth.parquet; '-' (the default) writes CSV to stdout.",
    ),
]
InputFormat = Annotated[
    str | None,
    _opt(
        "--input-format",
        metavar="csv|parquet",
        help="Override the input format chosen by extension, e.g. --input-format csv.",
    ),
]
OutputFormat = Annotated[
    str | None,
    _opt(
        "--output-format",
        metavar="csv|parquet",
        help="Override the output format chosen by extension, e.g. --output-format parquet.",
    ),
]
Columns = Annotated[
    str | None,
    _opt(
        "--columns",
        metavar="COL,COL",
        help="Comma-separated columns to use, e.g. --columns age,income "
        "(default: the schema's columns, else every column of a CSV header, or every numeric "
        "column a Parquet file declares).",
    ),
]
NoHeader = Annotated[
    bool,
    _opt(
        "--no-header",
        help="The CSV has no header line: --columns names every field in order, e.g. "
        "--no-header --columns age,income.",
    ),
]
Decimal = Annotated[
    str | None,
    _opt(
        "--decimal",
        metavar="CHAR",
        help="The decimal separator of float and integer cells in text (CSV) input: '.' "
        "(default) or ',' (e.g. '3,5'; needs --delimiter other than a comma). Thousands "
        "separators such as '1.234,5' are not read (the cell is missing). A schema's top-level "
        '"decimal": "," says the same.',
    ),
]
Delimiter = Annotated[
    str | None,
    _opt(
        "--delimiter",
        metavar="CHAR",
        help="The character between a CSV input's fields, e.g. --delimiter ';' (tab: --delimiter "
        "tab). Default: a comma. CSV outputs always use commas.",
    ),
]
Integer = Annotated[
    str | None,
    _opt(
        "--integer",
        metavar="COL,COL",
        help="Columns written back as whole numbers, e.g. --integer age,year (CSV columns are "
        "float unless declared; a schema's type or a Parquet integer type also declares it).",
    ),
]
Bounds = Annotated[
    list[str] | None,
    _opt(
        "--bounds",
        metavar="COL=LO:HI",
        help="Public bounds of a column, repeatable, e.g. --bounds age=0:120. "
        "Values outside are clamped.",
    ),
]
Schema = Annotated[
    str | None,
    _opt(
        "--schema",
        metavar="FILE",
        help="JSON file declaring each column's type (float, integer, boolean with the text "
        "it is written as, category with its levels, date, datetime), public bounds and "
        "nullable, e.g. --schema schema.json "
        "(format in README; `dpsynth schema draft DATA` writes one to fill in).",
    ),
]
Seed = Annotated[
    int | None,
    typer.Option(
        "--seed",
        metavar="N",
        min=0,  # a negative seed is a one-line usage error, not numpy's ValueError
        show_default=False,
        help="Reproducible noise for tests and demos, e.g. --seed 7 (a whole number >= 0); the "
        "report then says NOT FOR RELEASE. Default: the operating system's secure generator.",
    ),
]
Report = Annotated[
    str | None,
    _opt(
        "--report",
        metavar="FILE",
        help="Where to write the JSON report, e.g. --report run.json, or --report - for stdout "
        "(with -o FILE) (default: OUTPUT.report.json next to a file output; none for stdout).",
    ),
]
Quiet = Annotated[
    bool,
    _opt("--quiet", "-q", help="Print nothing on stderr but errors, e.g. in cron jobs: --quiet."),
]
Eps = Annotated[
    float,
    _opt(
        "--eps",
        metavar="EPS",
        help="Total privacy budget epsilon of the whole run, e.g. --eps 1 (at most 1000: beyond "
        "it no privacy is left and the noise is already far below one count).",
    ),
]
BoundsEps = Annotated[
    float | None,
    _opt(
        "--bounds-eps",
        metavar="EPS",
        help="Part of --eps spent on DP bounds of columns without declared bounds, e.g. "
        "--bounds-eps 0.05 (default: 10% of --eps; 0 makes a missing bound an error).",
    ),
]
Neighboring = Annotated[
    str,
    _opt(
        "--neighboring",
        metavar="add-remove|replace",
        show_default=True,
        help="Neighbouring relation of the guarantee, e.g. --neighboring replace (one row "
        "changed; doubles histogram sensitivity). add-remove: one row added or removed.",
    ),
]
Mechanism = Annotated[
    str,
    _opt(
        "--mechanism",
        metavar="auto|marginals|pmm|privtree|hierarchy|psmm",
        show_default=True,
        help="Synthesiser, e.g. --mechanism pmm. auto: marginals for tables of 4 to 100 columns "
        "(when eps x noisy rows per column is large enough), else hierarchy or privtree, "
        "chosen from d, eps and the noisy row count by what the "
        "accuracy benchmarks measured (docs/benchmarks.md). marginals: one-way and two-way "
        "histograms of chosen column pairs and a model fitted to them (MST-like; keeps "
        "relationships between columns). "
        "pmm: Private Measure Mechanism (dissertation Algorithm 4; a-priori W1 bound in the "
        "report). privtree: adaptive partition (Zhang, Xiao & Xie 2016) with exact discrete "
        "noise. hierarchy: a short band of nested grids with least-squares consistency (Hay et "
        "al. 2010) and pruning. psmm: Private Signed Measure Mechanism (dissertation Algorithms "
        "1-2) with an exact min-cost-flow projection (LEMON, package pylmcf). pmm and psmm "
        "carry an a-priori W1 bound.",
    ),
]
Dim = Annotated[
    str,
    _opt(
        "--dim",
        metavar="auto|N|full",
        show_default=True,
        help="Synthesise in a private low-dimensional subspace (dissertation ch. 4), e.g. "
        "--dim auto: private mean and covariance, the top N principal directions, --mechanism "
        "inside them, back to all columns. auto chooses N from the private spectrum, and uses "
        "all columns (as full) when its directions would be, or came out, close to noise (a "
        "notice and the report say so, and on what epsilon); full (the default) uses all "
        "columns as they are.",
    ),
]
Rows = Annotated[
    int | None,
    _opt(
        "--rows",
        metavar="N",
        help="Number of output rows, e.g. --rows 10000, drawn from the private measure "
        "(default: its own private total). At most 10^11: more than a day of writing at the "
        "measured 10^6 rows/s.",
    ),
]
Diagnostics = Annotated[
    str | None,
    _opt(
        "--diagnostics",
        metavar="FILE",
        help="Also write NON-PRIVATE diagnostics (the true number of complete rows and the W1 "
        "between input and output) to FILE, e.g. --diagnostics diag.json, readable by its "
        "owner only (0600). Never release it.",
    ),
]
DryRun = Annotated[
    bool,
    _opt(
        "--dry-run",
        help="Print the plan (budget split, mechanism, depth rule; with --mechanism auto on "
        "declared columns, what auto picks by the noisy count) as JSON without reading data "
        "values, e.g. --dry-run.",
    ),
]
Json = Annotated[
    bool,
    _opt("--json", help="Print the JSON report on stdout for scripts, e.g. --json | jq .rows."),
]
BatchRows = Annotated[
    int | None,
    _opt(
        "--batch-rows",
        metavar="N",
        help="Rows read per batch, e.g. --batch-rows 200000: memory grows with it, not with the "
        "table (synth also writes its output in batches of this size). Default: about "
        "1,000,000 rows (fewer for wide tables).",
    ),
]
Engine = Annotated[
    str,
    _opt(
        "--engine",
        metavar="local|dask",
        show_default=True,
        help="Where the statistics passes run, e.g. --engine dask: local (streamed on this "
        "machine) or dask (tasks over the input's Parquet files / row groups on a Dask cluster; "
        "needs the dask extra). The private release always runs here. With dask the workers "
        "write the output: -o names a directory of part files, e.g. -o synth.parquet makes "
        "synth.parquet/part-00000.parquet, part-00001.parquet, ... (synth.csv: CSV parts, each "
        "with a header); a previous part directory there is replaced whole, anything else refused. "
        "Read in name order, the parts are the local engine's rows for the same --seed and "
        "--batch-rows. Not stdout; the report goes next to the directory.",
    ),
]
Scheduler = Annotated[
    str | None,
    _opt(
        "--scheduler",
        metavar="ADDRESS",
        help="With --engine dask: a running Dask scheduler, e.g. --scheduler tcp://10.0.0.5:8786 "
        "(default: a local cluster of 2 worker processes).",
    ),
]
