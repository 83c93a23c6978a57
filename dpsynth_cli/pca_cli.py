"""`dpsynth pca`: the command around `pca.run_pca` (registered on the app by `cli`).

It reads with the same strict reader as `synth`, chooses columns the same way (declared, never
from values), maps them to [0,1]^d with *declared* bounds only (pca spends no budget on bounds:
every column needs --bounds or a schema), and writes the released components as a small table
(CSV or Parquet) plus the JSON report. Nothing per row leaves the run.
"""

from __future__ import annotations

from typing import Annotated, Any

import numpy as np
import pyarrow as pa
import typer

from dpsynth_cli import budget_cli, io, report, runs
from dpsynth_cli import options as opt
from dpsynth_cli.console import Feedback
from dpsynth_cli.domain import (
    ColumnSpec,
    Domain,
    declare_columns,
    value_matrix,
)
from dpsynth_cli.errors import UsageError
from dpsynth_cli.pca import METHODS
from dpsynth_cli.pca.units import COVARIANCE_METHODS, UNITS, original_units
from dpsynth_cli.privacy.ledger import check_epsilon
from dpsynth_cli.privacy.noise import RandomSource

Components = Annotated[
    int,
    typer.Option(
        "-k",
        "--components",
        metavar="K",
        help="Number of principal directions to release, e.g. -k 3 (1 <= K <= columns).",
    ),
]
Method = Annotated[
    str,
    typer.Option(
        "--method",
        metavar="|".join(METHODS),
        show_default=True,
        help="The DP PCA algorithm, e.g. --method dp-gauss-1. auto: laplace-cov when --delta is "
        "0 (pure eps-DP), else the best measured Gaussian method; the report says which and why.",
    ),
]
Delta = Annotated[
    float,
    typer.Option(
        "--delta",
        metavar="DELTA",
        show_default=True,
        help="The delta of an (eps, delta) guarantee, e.g. --delta 1e-6 (Gaussian methods need "
        "0 < delta < 1; 0 means pure eps-DP and the Laplace covariance).",
    ),
]
PcaOutput = Annotated[
    str,
    typer.Option(
        "--output",
        "-o",
        metavar="PATH",
        help="Where to write the components table, e.g. -o pcs.csv: one row per component, one "
        "column per input column (unit-length directions in the coordinates named by its "
        "'coordinates' column, see --units); '-' (the default) writes CSV to stdout.",
    ),
]
RowNorm = Annotated[
    float | None,
    typer.Option(
        "--row-norm",
        metavar="R",
        help="A public bound on every row's distance from the box's centre in unit-cube "
        "coordinates (each column scaled by its declared bounds), e.g. --row-norm 2.2; rows "
        "farther out are projected onto that ball. Lowers every method's noise from the box's "
        "half-diagonal sqrt(columns)/2 to R (for columns on bounds -b..b, R = beta / (2 b)).",
    ),
]
Units = Annotated[
    str,
    typer.Option(
        "--units",
        metavar="|".join(UNITS),
        show_default=True,
        help="Coordinates of the written components, e.g. --units original. unit-cube: the "
        "coordinates pca computes in (each column scaled by its declared bounds). original: the "
        "principal directions of the released covariance rescaled to column units (post-"
        "processing; laplace-cov and dp-gauss-1 only, the methods that release a covariance).",
    ),
]

REPORT_SCHEMA = runs.PCA_REPORT_SCHEMA
EXAMPLES = (
    "dpsynth pca data.csv --eps 1 --schema schema.json -k 2 -o pcs.csv",
    "dpsynth pca data.parquet --eps 1 --delta 1e-6 -k 2 --bounds a=0:1 --bounds b=0:10 "
    "--report pca.json",
)


def pca(
    input: opt.Input,
    eps: opt.Eps,
    k: Components = 2,
    delta: Delta = 0.0,
    method: Method = "auto",
    row_norm: RowNorm = None,
    units: Units = "unit-cube",
    output: PcaOutput = "-",
    input_format: opt.InputFormat = None,
    output_format: opt.OutputFormat = None,
    columns: opt.Columns = None,
    no_header: opt.NoHeader = False,
    delimiter: opt.Delimiter = None,
    decimal: opt.Decimal = None,
    bounds: opt.Bounds = None,
    schema: opt.Schema = None,
    neighboring: opt.Neighboring = "add-remove",
    seed: opt.Seed = None,
    report_path: opt.Report = None,
    quiet: opt.Quiet = False,
    budget_file: budget_cli.BudgetOpt = None,
    no_budget: budget_cli.NoBudgetOpt = False,
    dataset: budget_cli.DatasetOpt = None,
) -> None:
    """Release the top-K principal directions of INPUT's numeric columns with a DP guarantee.

    Pure eps-DP with --delta 0 (the default: the Laplace covariance of dissertation Algorithm
    6, re-derived with exact noise); (eps, delta)-DP with a Gaussian method and 0 < --delta < 1
    (composed through zCDP, docs/privacy.md). Every column needs public bounds (--bounds or
    --schema): pca spends nothing on estimating them. The output is the components only
    (directions, private eigenvalue and explained-variance estimates): never a per-row
    projection of the data.
    """
    feedback = Feedback(quiet)
    declared = declare_columns(columns, schema, bounds, decimal=decimal)
    in_fmt = io.detect_format(input, input_format)
    io.check_decimal(declared.decimal, io.delimiter_flag(delimiter), in_fmt)
    out_fmt = io.detect_format(output, output_format)
    report_file = report.report_path(report_path, output)
    check_epsilon(eps)  # usage errors before the input is opened
    _check_units(units, method, delta)
    request = {"k": k, "method": method, "epsilon": eps, "delta": delta}
    request.update(relation=neighboring, row_norm=row_norm)
    early = runs.declared_specs(declared, in_fmt == "parquet", numbers_only="pca")
    if early is not None:  # the columns are declared: their usage errors now
        runs.check_pca(early, request)
    io.check_outputs([output, report_file], input)
    spend = budget_cli.guard(budget_file, no_budget, dataset, input, "pca", eps, delta)
    if seed is not None:
        feedback.warning(f"--seed given: {report.NOT_FOR_RELEASE}")
    with feedback.step("reading input"):
        read = io.open_input(
            input,
            in_fmt,
            declared.names,
            header=not no_header,
            delimiter=io.delimiter_flag(delimiter),
        )
    with read:
        table, result, choice, extra = runs.pca_opened(
            read,
            in_fmt == "parquet",
            declared,
            RandomSource.seeded(seed) if seed is not None else RandomSource.secure(),
            spend=spend,
            units=units,
            step=feedback.step,
            **request,
        )
    for notice in result.notices:
        feedback.notice(notice)
    specs = choice.specs
    public = runs.pca_report(
        result,
        extra,
        specs,
        choice,
        seed=seed,
        neighboring=neighboring,
        output={"path": output, "format": out_fmt, "rows": k},
    )
    io.write_outputs(
        table,
        output,
        out_fmt,
        input_path=input,
        extra=report.files({report_file: public}),
        final=report_file != "-",  # else the report on stdout finishes the run
    )
    if report_file == "-":  # after the files: a reader of stdout may stop at any time
        io.write_text_stdout(report.dumps(public), final=True)
    elif report_file is None:
        feedback.notice(report.no_report_notice(output))
    _summary(feedback, public, output, report_file)


OWN_COLUMNS = (
    "component",
    "coordinates",
    "explained_variance",
    "eigenvalue_unit_cube",
    "eigenvalue_original_units",
)


def _check_bounds(specs: list[ColumnSpec]) -> None:
    """Every column has public bounds and a name the components table does not use itself."""
    taken = [s.name for s in specs if s.name in OWN_COLUMNS]
    if taken:
        raise UsageError(
            f"pca writes columns named {', '.join(OWN_COLUMNS)} itself; rename the input "
            f"column{'s' if len(taken) > 1 else ''} {', '.join(repr(t) for t in taken)}"
        )
    missing = [s.name for s in specs if not s.has_bounds]
    if missing:
        raise UsageError(
            f"pca needs public bounds for every column; none declared for {', '.join(missing)}: "
            "give --bounds NAME=LOWER:UPPER or a --schema"
        )


def _unit_rows(read: io.InputSource, specs: list[ColumnSpec], domain: Domain) -> np.ndarray:
    """The complete rows in [0,1]^d (the declared bounds clamp values outside them)."""
    parts = [domain.to_unit(value_matrix(b, specs).reshape(-1, len(specs))) for b in read.batches()]
    return np.concatenate(parts) if parts else np.empty((0, len(specs)))


def _check_units(units: str, method: str, delta: float) -> None:
    if units not in UNITS:
        raise UsageError(f"--units must be one of {', '.join(UNITS)}")
    if units == "original" and method not in (*COVARIANCE_METHODS, "auto"):
        raise UsageError(
            f"--units original re-decomposes a released covariance, which --method {method} "
            f"does not release: use --method {' or '.join(COVARIANCE_METHODS)} (or --units "
            "unit-cube)"
        )


COORDINATES = {
    "unit-cube": "unit-cube: each column scaled by its declared bounds, (x - lower) / (upper - "
    "lower); directions of unit length there",
    "original": "original: principal directions of the released covariance rescaled to column "
    "units (Cov(x) = W Cov(unit) W, W = diag(upper - lower)); unit length in column units",
}


def _release_in_units(result: Any, units: str, domain: Domain, specs: list[ColumnSpec]):
    """The components table in the requested coordinates, and the report's block about them."""
    extra: dict[str, Any] = {"units": {"written": units, "coordinates": COORDINATES[units]}}
    if units == "unit-cube":
        values = (result.components, result.eigenvalues, result.explained_variance)
        return _components_table(values, "unit-cube", "eigenvalue_unit_cube", specs), extra
    total_sd = None if result.total is None else result.total[1]
    orig = original_units(
        result.covariance, domain.unit_widths, result.components.shape[0], result.signal, total_sd
    )
    extra.update(
        {
            "components_original_units": orig.components.tolist(),
            "eigenvalues_original_units": orig.eigenvalues.tolist(),
            "explained_variance_ratio_original_units": orig.explained_variance,
            "explained_variance_note_original_units": orig.explained_note,
            "signal_original_units": orig.signal.to_json(),
        }
    )
    values = (orig.components, orig.eigenvalues, orig.explained_variance)
    return _components_table(values, "original", "eigenvalue_original_units", specs), extra


def _components_table(values: tuple, units: str, eigen_name: str, specs: list[ColumnSpec]):
    """One row per component: its rank, the private eigenvalue and explained-variance estimates,
    the coordinates its direction is written in (`units`), then the direction, one column per
    input column."""
    comps, eigenvalues, ev = values
    k = comps.shape[0]
    data: dict[str, Any] = {
        "component": pa.array(np.arange(1, k + 1), pa.int64()),
        eigen_name: pa.array(eigenvalues, pa.float64(), from_pandas=True),
        "explained_variance": pa.array([None] * k if ev is None else ev, pa.float64()),
        "coordinates": pa.array([units] * k, pa.string()),
    }
    for j, s in enumerate(specs):
        data[s.name] = pa.array(comps[:, j], pa.float64())
    return pa.table(data)


def _summary(feedback: Feedback, public: dict, output: str, report_file: str | None) -> None:
    """One line on a terminal (nothing in pipes and cron jobs)."""
    if not feedback.interactive:
        return
    ledger = public["privacy"]
    where = {None: "(not written)", "-": "stdout"}.get(report_file, report_file)
    feedback.console.print(
        f"dpsynth pca: {public['k']} components by {public['method']}, epsilon "
        f"{ledger['total_epsilon']:.6g}, delta {ledger.get('total_delta', 0.0):.3g}; output "
        f"{'stdout' if output == '-' else output}; report {where}"
    )
