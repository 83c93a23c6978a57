"""The steps of a release shared by the commands and the Python API (`dpsynth_cli.api`).

Each command and its API function call these same functions in the same order, so both give
the same output, report and notices for the same input, declarations and seed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from dpsynth_cli import __version__, io, report
from dpsynth_cli.domain import ColumnChoice, ColumnSpec, Declared, resolve_columns
from dpsynth_cli.privacy.noise import RandomSource
from dpsynth_cli.synth import SynthResult

Notify = Callable[[str], None]


def public_command(argv: list[str] | None = None) -> list[str]:
    """The report's `command`: the command line with the budget file's path left out (the file
    is private; where it lives is nobody else's business)."""
    args, out = list(sys.argv[1:] if argv is None else argv), ["dpsynth"]
    skip = False
    for arg in args:
        if skip:
            skip = False
            out.append("(private)")
        elif arg == "--budget":
            skip = True
            out.append(arg)
        elif arg.startswith("--budget="):
            out.append("--budget=(private)")
        else:
            out.append(arg)
    return out


def random_source(seed: int | None) -> RandomSource:
    """The OS's secure generator; a seed only for tests and demos (NOT FOR RELEASE)."""
    return RandomSource.seeded(seed) if seed is not None else RandomSource.secure()


def release_mark(seed: int | None) -> dict[str, str] | None:
    """The mark a seeded run's Parquet output (and the API's Arrow table) carries."""
    return {"dpsynth.release": report.NOT_FOR_RELEASE} if seed is not None else None


def declared_specs(
    declared: Declared, typed: bool, numbers_only: str | None = None
) -> list[ColumnSpec] | None:
    """The chosen columns as the declarations alone decide them, before the input is opened (for
    the usage errors that must cost nothing): the declared names resolved as a CSV's text
    columns, which is how a CSV and an in-memory table are read. None when the input decides
    them: no names declared, or a Parquet file (`typed`) whose types would decide the kind of a
    column that neither the schema nor --integer declares."""
    if declared.names is None:
        return None
    kinds = {n for n, s in (declared.schema or {}).items() if s.kind} | set(declared.integers)
    if typed and any(n not in kinds for n in declared.names):
        return None
    text = pa.schema([pa.field(n, pa.string()) for n in declared.names])
    return declared.resolve(text, typed=False, numbers_only=numbers_only).specs


def synth_columns(read: io.InputSource, typed: bool, declared: Declared, notify: Notify):
    """The chosen columns from declarations and the input's structure; a notice per reason for
    columns left out when the user did not name the columns."""
    choice = declared.resolve(read.schema, typed=typed, all_columns=read.all_columns)
    implicit = declared.columns_from not in ("--columns", "schema")  # nothing to tell otherwise
    groups: dict[str, list[str]] = {}
    for name, why in (choice.left_out if implicit else {}).items():
        groups.setdefault(why, []).append(f"'{name}'")
    for why, left in groups.items():
        word = "column" if len(left) == 1 else "columns"
        notify(f"{len(left)} {word} left out ({why}): {', '.join(left)}; --columns chooses columns")
    return choice


def synth_report(
    result: SynthResult,
    choice: ColumnChoice,
    seed: int | None,
    output: dict[str, Any],
    command: list[str] | None = None,
) -> dict[str, Any]:
    """The public report of a synth release (`report.build_report`)."""
    return report.build_report(
        command=command if command is not None else public_command(),
        seeded=seed is not None,
        budget=result.budget.to_json(),
        columns=choice,
        domain=result.domain,
        ledger=result.ledger,
        run=result.run,
        noisy_rows=result.noisy_rows,
        signal=result.signal,
        output_rows=result.output_rows,
        output=output,
        dim=result.dim,
        constraints=result.constraints,
    )


PCA_REPORT_SCHEMA = "dpsynth.pca-report/1"


def pca_report(
    result: Any,
    units: dict[str, Any],
    specs: list[ColumnSpec],
    choice: ColumnChoice,
    *,
    seed: int | None,
    neighboring: str,
    output: dict[str, Any],
    command: list[str] | None = None,
) -> dict[str, Any]:
    """The public report of a pca release: declarations, the release and its ledger, and
    `units`, the block on the coordinates the components are written in."""
    return {
        "schema": PCA_REPORT_SCHEMA,
        "tool": {"name": "dpsynth", "version": __version__},
        "command": command if command is not None else public_command(),
        "seeded": seed is not None,
        "release": report.NOT_FOR_RELEASE if seed is not None else "ok",
        "neighbouring_relation": neighboring,
        "domain": {c.name: c.to_json() for c in specs},
        "domain_source": choice.to_json(),
        **result.to_json(),
        **units,
        "columns": [s.name for s in specs],
        "output": output,
    }


def compare_tables(
    real: io.InputSource,
    typed: bool,
    open_synthetic: Callable[[list[str]], io.InputSource],
    declared: Declared,
    specs: list[ColumnSpec] | None,
    seed: int | None,
    *,
    passes: Callable[[io.InputSource], Callable[[], Any]] | None = None,
    step: Callable[[str], contextlib.AbstractContextManager] | None = None,
    joint: str = "sample",
    check: Callable[[list[ColumnSpec]], None] | None = None,
) -> tuple[Any, list[ColumnSpec], list[str]]:
    """`evaluate`: the compared columns (`specs` from a synth report, else from declarations and
    the real table: evaluate is not private, so it may look at values), the synthetic table
    opened with exactly those columns, and the comparison: (`compare.Evaluation`, the compared
    columns' specs, their names); `joint`: how the whole table's W1 is computed
    (`evaluate.joint.MODES`); `check(specs)` runs before the tables are compared (usage
    errors of `--target` before the long part)."""
    from dpsynth_cli.evaluate import compare

    passes = passes or (lambda source: source.batches)
    step = step or (lambda _what: contextlib.nullcontext())
    real_data = passes(real)
    names = declared.names if specs is None else [s.name for s in specs]
    choice = None
    if specs is None:
        if names is None and not typed:
            names = compare.columns_with_numbers(real_data)
        choice = resolve_columns(real.schema, names, declared.schema, declared.bounds, typed=typed)
        names = [s.name for s in choice.specs]
    if check is not None:
        check(specs if choice is None else choice.specs)
    # the synthetic table must have every compared column (a one-line error otherwise)
    synth_data = passes(open_synthetic(names))
    with step("reading both tables: W1 and per-column figures"):
        if choice is not None:
            specs = compare.fill_bounds_from_data(choice.specs, real_data, synth_data)
        result = compare.evaluate(real_data, synth_data, specs, seed, joint=joint)
    return result, specs, names


def model_utility(
    evaluation: Any,
    specs: list[ColumnSpec],
    target: Any,
    holdout: Any | None,
    seed: int | None,
) -> dict[str, Any]:
    """`evaluate --target`: the `utility` block from the compared rows (`evaluation.real`,
    `.synthetic`) and the rows of `holdout` (a `TableData`, opened with the compared columns),
    or a split of the real rows without one."""
    from dpsynth_cli.evaluate import utility

    rows = None
    if holdout is not None:
        rows = utility.sample_rows(holdout, specs, utility.SCORE_ROWS, seed)
    real, synthetic = evaluation.real, evaluation.synthetic
    return utility.model_utility(real, synthetic, specs, target, rows, seed)


def check_pca(specs: list[ColumnSpec], request: dict[str, Any]) -> None:
    """pca's usage errors that the flags and the columns decide: bounds, -k, --method, --delta,
    --row-norm (before the spend; before the input opens when the declarations decide)."""
    from dpsynth_cli.domain import Domain
    from dpsynth_cli.pca import validate
    from dpsynth_cli.pca_cli import _check_bounds

    _check_bounds(specs)
    r = request
    validate(r["k"], len(specs), r["method"], r["epsilon"], r["delta"], r["row_norm"])
    Domain(tuple(specs))  # an integer column's bounds hold an integer


def pca_opened(
    read: io.InputSource,
    typed: bool,
    declared: Declared,
    source: RandomSource,
    *,
    spend: Any,
    units: str,
    step: Callable[[str], contextlib.AbstractContextManager[None]] | None = None,
    **request: Any,
) -> tuple[pa.Table, Any, ColumnChoice, dict[str, Any]]:
    """pca on an opened input (the command and `api.principal_components`): numeric columns
    with bounds from declarations, the request (`k`, `method`, `epsilon`, `delta`, `relation`,
    `row_norm`) checked and the spend recorded before any row is read, the components released
    and tabled in `units`. Returns the table, the result, the chosen columns and the report's
    units block."""
    from dpsynth_cli.domain import Domain
    from dpsynth_cli.pca import run_pca
    from dpsynth_cli.pca_cli import _release_in_units, _unit_rows

    step = step or (lambda _what: contextlib.nullcontext())
    choice = declared.resolve(
        read.schema, typed=typed, all_columns=read.all_columns, numbers_only="pca"
    )
    specs = choice.specs
    check_pca(specs, request)
    domain = Domain(tuple(specs))
    spend.charge()  # on disk before any row is read (exit 3 past the total)
    with step("reading rows"):
        X = _unit_rows(read, specs, domain)
    with step("releasing components"):
        result = run_pca(X, source=source, **request)
    del X
    table, units_block = _release_in_units(result, units, domain, specs)
    return table, result, choice, units_block


def replay_options(declared: Declared, eps: float, **flags: Any) -> Any:
    """online-replay's options (`online.ReplayOptions`) from its flags; every column must be
    declared with bounds (a stream's releases cannot spend on estimating them)."""
    from dpsynth_cli.errors import UsageError
    from dpsynth_cli.online import ReplayOptions

    if declared.names is None:
        raise UsageError(
            "online-replay needs declared columns with bounds: --schema, or --bounds "
            "COL=LOWER:UPPER for each column"
        )
    return ReplayOptions(eps, **flags)


def replay_checks(
    specs: list[ColumnSpec], declared: Declared, options: Any
) -> tuple[Any, dict, Any]:
    """online-replay's usage errors that the flags and the columns decide (`plan_for`, the
    constraints' kinds), before the spend; the options with the constraints kept, those left
    out ({text: why}) and the plan."""
    from dpsynth_cli.constraints import choose
    from dpsynth_cli.online.replay import plan_for

    kept, left_out = choose(declared.constraints, specs)
    options = dataclasses.replace(options, constraints=kept)
    return options, left_out, plan_for(options, specs)


def replay_opened(
    read: io.InputSource,
    typed: bool,
    declared: Declared,
    options: Any,
    source: RandomSource,
    *,
    out_dir: str,
    state_dir: str | None,
    spend: Any,
    command: list[str],
    notify: Notify,
    step: Callable[[str], contextlib.AbstractContextManager[None]] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[Any, list[str]]:
    """online-replay on an opened input (the command and `api.online_replay`): the columns and
    constraints from declarations, the plan checked and the spend recorded before any row is
    read, the stream replayed. Returns the result and the notices to say after it."""
    from dpsynth_cli.online import replay
    from dpsynth_cli.online.replay import check_continuation
    from dpsynth_cli.online.stream import SORTED_IN_MEMORY, open_stream
    from dpsynth_cli.online.timeline import time_rule

    step = step or (lambda _what: contextlib.nullcontext())
    specs = declared.resolve(read.schema, typed=typed, all_columns=read.all_columns).specs
    options, left_out, plan = replay_checks(specs, declared, options)
    check_continuation(out_dir, state_dir, plan, specs, options)  # refusals: no spend
    spend.charge()  # once per stream and dataset: a continued --state reading it is free
    order_by = options.order_by
    with step("reading the --order-by column" if order_by else "reading input"):
        rows = open_stream(read, specs, order_by, time_rule(options.checkpoints) is not None)
    if rows.sorted_in_memory:
        notify(SORTED_IN_MEMORY)
    with step("replaying the stream"):
        result = replay(
            rows,
            specs,
            options,
            source,
            out_dir=out_dir,
            state_dir=state_dir,
            command=command,
            progress=progress,
        )
    left = [f'constraint "{c}" left out: {why}' for c, why in left_out.items()]
    return result, result.notices + left
