"""The Python API: dpsynth's commands as functions on pandas DataFrames, Arrow tables and files.

Each function runs the same steps as its command (`dpsynth_cli.runs`, the library behind them)
with the same privacy guarantees: the output's columns, types and bounds come from
declarations (`schema`, `columns`, `bounds`, `integer`), never from a DataFrame's dtypes or
values (an in-memory table is read like a CSV file: as text, parsed with the declared types),
and its number of rows is never revealed (synth draws a noisy count). Randomness comes from the
operating system's secure generator; `seed` is for tests only and marks the result NOT FOR
RELEASE. Notices the command prints become `DpsynthNotice` warnings (and a seed a
`NotForRelease` warning); errors are the command's (`DpsynthError` and its subclasses, with the
message the command prints, its flags named by the keywords: `--eps` as `eps=`).

Budget: like the commands, every release is recorded in the privacy budget file
(`budget=None`: $DPSYNTH_BUDGET, else the default under the user's state directory; a path; or
False for none) under `dataset` (default: a file input's resolved path; every in-memory table
without a name shares one dataset, "memory"), and a release past a declared total raises
`PrivacyRefusal` before any row is read.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Literal, ParamSpec, TypeVar

import pandas as pd
import pyarrow as pa

from dpsynth_cli import budget as budget_file
from dpsynth_cli import io, runs
from dpsynth_cli.domain import ColumnSpec, Declared, InlineSchema, declare_columns
from dpsynth_cli.errors import DpsynthError, UsageError
from dpsynth_cli.report import NOT_FOR_RELEASE

DataInput = pd.DataFrame | pa.Table | str | os.PathLike
Schema = Mapping[str, Any] | str | os.PathLike
Bounds = Mapping[str, tuple[float, float]]
BudgetArg = str | os.PathLike | Literal[False] | None
Output = Literal["pandas", "arrow"]
P = ParamSpec("P")
R = TypeVar("R")


# The commands' flags and the API's keywords: an error the API raises comes from the same
# checks as the command's, its flags rewritten to the keywords (`_keywords`).
KEYWORDS = {
    "--eps": "eps",
    "--bounds-eps": "bounds_eps",
    "--neighboring": "neighboring",
    "--mechanism": "mechanism",
    "--dim": "dim",
    "--rows": "rows",
    "--seed": "seed",
    "--budget": "budget",
    "--no-budget": "budget=False",
    "--dataset": "dataset",
    "--input-format": "input_format",
    "--output-format": "output_format",
    "--columns": "columns",
    "--bounds": "bounds",
    "--integer": "integer",
    "--schema": "schema",
    "-k": "k",
    "--delta": "delta",
    "--method": "method",
    "--row-norm": "row_norm",
    "--units": "units",
    "--order-by": "order_by",
    "--checkpoints": "checkpoints",
    "--state": "state",
    "--input-mode": "input_mode",
    "--allocation": "allocation",
    "--release-at-end": "release_at_end",
    "--row-counts-public": "row_counts_public",
    "--from-report": "from_report",
    "--target": "target",
    "--holdout": "holdout",
    "--out-dir": "out_dir",
}
PHRASES = {  # a flag with a word for its value (the pattern below joins numbers and quotes)
    "--input-format parquet": "input_format='parquet'",
    "--input-format csv": "input_format='csv'",
}
_BOUNDS = re.compile(r"--bounds '?([^'\s=]+)=LOWER:UPPER'?")
_FLAG = re.compile(r"(?<![\w-])(--?[a-z][a-z-]*)(?![\w-])( (?=[0-9'\"(A-Z])\S+)?")


def keyword_text(message: str) -> str:
    """A command's message in the API's words: `--eps` -> `eps=`, `--dim 3` -> `dim=3`,
    `--bounds COL=LOWER:UPPER` -> `bounds={'COL': (LOWER, UPPER)}`, and so on (`KEYWORDS`;
    other flags, which the API has no keyword for, as they are)."""

    def swap(match: re.Match[str]) -> str:
        flag, value = match.group(1), match.group(2)
        if flag not in KEYWORDS:
            return match.group(0)
        keyword = KEYWORDS[flag]
        keyword += "" if "=" in keyword else "="
        return keyword + (value[1:] if value else "")

    for flag, keyword in PHRASES.items():
        message = message.replace(flag, keyword)
    message = _BOUNDS.sub(lambda m: f"bounds={{'{m.group(1)}': (LOWER, UPPER)}}", message)
    return _FLAG.sub(swap, message)


def _keywords(function: Callable[P, R]) -> Callable[P, R]:
    """`function` with its errors' messages in the API's keywords (`keyword_text`)."""

    @functools.wraps(function)
    def wrapped(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return function(*args, **kwargs)
        except DpsynthError as error:
            error.args = (keyword_text(str(error)), *error.args[1:])
            raise

    return wrapped


class DpsynthNotice(UserWarning):
    """A notice the command prints on stderr as `dpsynth: note: ...` (e.g. what a DP bounds
    estimate cost, columns left out, a weak guarantee)."""


class NotForRelease(UserWarning):
    """A seeded run: reproducible noise for tests and demos, NOT FOR RELEASE."""


@_keywords
def synthesize(
    data: DataInput,
    *,
    eps: float,
    schema: Schema | None = None,
    columns: Sequence[str] | None = None,
    bounds: Bounds | None = None,
    integer: Sequence[str] | None = None,
    bounds_eps: float | None = None,
    neighboring: str = "add-remove",
    mechanism: str = "auto",
    dim: str = "full",
    rows: int | None = None,
    seed: int | None = None,
    budget: BudgetArg = None,
    dataset: str | None = None,
    input_format: str | None = None,
    output: Output = "pandas",
) -> tuple[pd.DataFrame | pa.Table, dict[str, Any]]:
    """DP synthetic data close to `data` in 1-Wasserstein distance, and the public report.

    `data`: a DataFrame, an Arrow table, or a path (.csv, .csv.gz, .parquet, as `dpsynth
    synth`). `schema`: a dict in the schema file's format, or a path to one. Returns the
    synthetic table (a DataFrame, or an Arrow table with `output="arrow"`) and the report dict
    that `dpsynth synth --report` writes. Same options as `dpsynth synth`.
    """
    from dpsynth_cli.mechanisms import transport
    from dpsynth_cli.synth import SynthOptions, plan_budget
    from dpsynth_cli.synth import synthesize as run_synth

    declared = _declare(columns, schema, bounds, integer)
    options = SynthOptions(
        eps, bounds_eps, neighboring, mechanism, rows, False, dim, declared.determines
    )
    plan_budget(options, [])  # usage errors before any row is read
    early = runs.declared_specs(declared, _typed(data, input_format))
    if early is not None:  # the columns are declared: their usage errors before the input opens
        plan_budget(options, early, declared.constraints)
    output_info = _output_info(output)
    _seed_warning(seed)
    spend = _guard(budget, dataset, data, "synth", eps)
    with _opened(data, declared.names, input_format) as (read, typed):
        choice = runs.synth_columns(read, typed, declared, _notice)
        plan_budget(options, choice.specs, declared.constraints)  # before the spend
        spend.charge()
        for notice in transport.slow_fallback_notice() if mechanism == "psmm" else []:
            _notice(notice)
        batch_rows = read.batch_rows  # the command's output batches: the same rows for a seed
        result = run_synth(
            read.batches,
            choice.specs,
            options,
            runs.random_source(seed),
            constraints=declared.constraints,
        )
    for notice in result.notices:
        _notice(notice)
    public = runs.synth_report(result, choice, seed, output_info, _command("synth"))
    mark = runs.release_mark(seed)
    schema_out = result.domain.output_schema(mark)
    pieces = [t.replace_schema_metadata(mark) for t in result.batches(batch_rows)]
    table = pa.concat_tables(pieces) if pieces else schema_out.empty_table()
    return _as(table, output), public


@_keywords
def principal_components(
    data: DataInput,
    *,
    eps: float,
    k: int = 2,
    delta: float = 0.0,
    method: str = "auto",
    row_norm: float | None = None,
    units: str = "unit-cube",
    schema: Schema | None = None,
    columns: Sequence[str] | None = None,
    bounds: Bounds | None = None,
    neighboring: str = "add-remove",
    seed: int | None = None,
    budget: BudgetArg = None,
    dataset: str | None = None,
    input_format: str | None = None,
    output: Output = "pandas",
) -> tuple[pd.DataFrame | pa.Table, dict[str, Any]]:
    """The top-`k` principal directions of `data` with a DP guarantee, and the public report.

    Pure eps-DP with `delta=0`; (eps, delta)-DP with a Gaussian method. Every column needs
    declared bounds (`bounds` or `schema`); `row_norm` and `units` are `--row-norm` and
    `--units`. Returns the components table that `dpsynth pca` writes (one row per component)
    and its report.
    """
    from dpsynth_cli.pca_cli import _check_units
    from dpsynth_cli.privacy.ledger import check_epsilon

    declared = _declare(columns, schema, bounds, None)
    check_epsilon(eps)
    _check_units(units, method, delta)
    request = {"k": k, "method": method, "epsilon": eps, "delta": delta}
    request.update(relation=neighboring, row_norm=row_norm)
    early = runs.declared_specs(declared, _typed(data, input_format), numbers_only="pca")
    if early is not None:  # the columns are declared: their usage errors now
        runs.check_pca(early, request)
    output_info = _output_info(output)
    _seed_warning(seed)
    spend = _guard(budget, dataset, data, "pca", eps, delta)
    with _opened(data, declared.names, input_format) as (read, typed):
        table, result, choice, extra = runs.pca_opened(
            read,
            typed,
            declared,
            runs.random_source(seed),
            spend=spend,
            units=units,
            **request,
        )
    for notice in result.notices:
        _notice(notice)
    specs = choice.specs
    public = runs.pca_report(
        result,
        extra,
        specs,
        choice,
        seed=seed,
        neighboring=neighboring,
        output={**output_info, "rows": k},
        command=_command("pca"),
    )
    return _as(table.replace_schema_metadata(runs.release_mark(seed)), output), public


@_keywords
def online_replay(
    data: DataInput,
    *,
    eps: float,
    out_dir: str | os.PathLike,
    order_by: str | None = None,
    checkpoints: str = "pow2",
    schema: Schema | None = None,
    columns: Sequence[str] | None = None,
    bounds: Bounds | None = None,
    integer: Sequence[str] | None = None,
    state: str | os.PathLike | None = None,
    input_mode: str = "whole",
    neighboring: str = "replace",
    allocation: str = "tuned",
    mechanism: str = "auto",
    output_format: str = "parquet",
    release_at_end: bool = False,
    row_counts_public: bool = False,
    seed: int | None = None,
    budget: BudgetArg = None,
    dataset: str | None = None,
    input_format: str | None = None,
) -> tuple[list[str], dict[str, Any]]:
    """Replay `data`'s rows in order as a stream and write DP synthetic releases at the
    checkpoints into `out_dir`, as `dpsynth online-replay` does (dissertation ch. 5).

    `state`: the secret state directory that a later call continues (the stream's eps is spent
    once per dataset it reads, however many calls continue it). Published releases are never
    replaced: an `out_dir` holding releases or a report that this stream did not write is
    refused (`PrivacyRefusal`, before the spend). Returns the files written (releases, then the
    report) and the report dict.
    """
    from dpsynth_cli.online.replay import check_dirs, check_mechanism
    from dpsynth_cli.online_cli import vacuous_notice
    from dpsynth_cli.privacy.ledger import check_epsilon

    declared = _declare(columns, schema, bounds, integer)
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
    out_dir, state = os.fspath(out_dir), None if state is None else os.fspath(state)
    check_epsilon(eps)
    check_mechanism(options, state)
    check_dirs(out_dir, state)
    early = runs.declared_specs(declared, _typed(data, input_format))
    if early is not None:  # the columns are declared: their usage errors now
        runs.replay_checks(early, declared, options)
    _seed_warning(seed)
    spend = _guard(budget, dataset, data, "online-replay", eps, state_dir=state)
    extra = [order_by] if order_by is not None and order_by not in declared.names else []
    with _opened(data, declared.names + extra, input_format) as (read, typed):
        result, notices = runs.replay_opened(
            read,
            typed,
            declared,
            options,
            runs.random_source(seed),
            out_dir=out_dir,
            state_dir=state,
            spend=spend,
            command=_command("online-replay"),
            notify=_notice,
        )
    for notice in notices + vacuous_notice(result.report):
        _notice(notice)
    if seed is None and result.report["seeded"]:
        warnings.warn(f"the state was started by a seeded run: {NOT_FOR_RELEASE}", NotForRelease, 2)
    return list(result.files), result.report


@_keywords
def evaluate_synthetic(
    real: DataInput,
    synthetic: DataInput,
    *,
    schema: Schema | None = None,
    columns: Sequence[str] | None = None,
    bounds: Bounds | None = None,
    from_report: str | os.PathLike | None = None,
    seed: int | None = None,
    target: str | None = None,
    holdout: DataInput | None = None,
) -> dict[str, Any]:
    """Compare `real` and `synthetic`: W1 and per-column utility, the dict `dpsynth evaluate
    --json` prints. NOT private (it reads the real values): never release it.

    `from_report`: the path of a synth report whose columns and bounds to use. `target`,
    `holdout`: `--target` and `--holdout` (model utility, the report's `utility` block; needs
    the `utility` extra, scikit-learn).
    """
    from dpsynth_cli.evaluate import compare, utility

    if from_report is not None:
        specs = compare.specs_from_report(os.fspath(from_report))
        declared = Declared([s.name for s in specs], "report", None, {}, [])
    else:
        specs, declared = None, _declare(columns, schema, bounds, None)
    with contextlib.ExitStack() as inputs:
        real_in, typed = inputs.enter_context(_opened(real, declared.names, None))

        def open_synthetic(names: list[str]) -> io.InputSource:
            return inputs.enter_context(_opened(synthetic, names, None))[0]

        wanted = utility.request(target, holdout is not None)
        held: list[io.InputSource] = []

        def check(chosen: list[ColumnSpec]) -> None:
            if wanted is not None:
                utility.resolve(wanted, chosen)
            if holdout is not None:
                names = [s.name for s in chosen]
                held.append(inputs.enter_context(_opened(holdout, names, None))[0])

        result, specs, _ = runs.compare_tables(
            real_in, typed, open_synthetic, declared, specs, seed, check=check
        )
        if wanted is not None:
            rows = held[0].batches if held else None
            result.report["utility"] = runs.model_utility(result, specs, wanted, rows, seed)
    return result.report


def load_schema(path: str | os.PathLike) -> dict[str, Any]:
    """A schema file as the dict the functions' `schema=` takes (checked as `--schema` is)."""
    from dpsynth_cli.domain import load_constraints
    from dpsynth_cli.domain import load_schema as check

    text = os.fspath(path)
    check(text)
    load_constraints(text)
    with open(text, encoding="utf-8") as fh:
        return json.load(fh)


@_keywords
def budget_status(
    budget: str | os.PathLike | None = None, dataset: str | None = None
) -> list[dict[str, Any]]:
    """What each dataset (or `dataset`, a name or an input path) has spent, its total and its
    releases, as `dpsynth budget show --json` prints them. PRIVATE: never publish it."""
    where = budget_file.resolve_path(None if budget is None else os.fspath(budget))
    if where is None:
        raise UsageError(f"{budget_file.ENV}=off: give budget=FILE")
    entries = budget_file.BudgetFile(where).read()
    if dataset is not None:
        keys = {budget_file.dataset_for(None, dataset).key}
        if os.path.exists(dataset):
            keys.add(budget_file.dataset_for(dataset).key)
        entries = {k: e for k, e in entries.items() if k in keys}
    return [e.summary() for e in entries.values()]


# -- helpers --------------------------------------------------------------------------------


def _declare(
    columns: Sequence[str] | None,
    schema: Schema | None,
    bounds: Bounds | None,
    integer: Sequence[str] | None,
) -> Declared:
    """The declarations as the command's flags give them (the same parsing and messages)."""
    if isinstance(columns, str) or isinstance(integer, str):
        raise UsageError("columns and integer take a list of column names, e.g. ['age']")
    flags = [f"{name}={float(lo)!r}:{float(hi)!r}" for name, (lo, hi) in (bounds or {}).items()]
    if isinstance(schema, str | os.PathLike):
        schema = os.fspath(schema)
    elif schema is not None:
        schema = InlineSchema(schema)
    return declare_columns(
        None if columns is None else ",".join(columns),
        schema,
        flags or None,
        None if integer is None else ",".join(integer),
    )


@contextlib.contextmanager
def _opened(
    data: DataInput, names: list[str] | None, input_format: str | None
) -> Iterator[tuple[io.InputSource, bool]]:
    """The input as the commands read it, and whether its types are declared (Parquet)."""
    if isinstance(data, pd.DataFrame | pa.Table):  # each cell read on its own, as text
        yield io.TableInput(data, names, None), False
        return
    if not isinstance(data, str | os.PathLike):
        raise UsageError("data must be a pandas DataFrame, an Arrow table or a path")
    path = os.fspath(data)
    fmt = io.detect_format(path, input_format)
    # a comma, as given: the API has no delimiter keyword to answer the command's
    # "looks separated by ';'" (read such a file with pandas and pass the DataFrame)
    with io.open_input(path, fmt, names, delimiter=",") as read:
        yield read, fmt == "parquet"


def _typed(data: DataInput, input_format: str | None) -> bool:
    """Whether `data` declares its column types (a Parquet file), as `_opened` will read it."""
    if isinstance(data, pd.DataFrame | pa.Table) or not isinstance(data, str | os.PathLike):
        return False  # read as text; a wrong type is refused by `_opened`
    return io.detect_format(os.fspath(data), input_format) == "parquet"


def _guard(
    budget: BudgetArg,
    dataset: str | None,
    data: DataInput,
    command: str,
    eps: float,
    delta: float = 0.0,
    state_dir: str | None = None,
):
    from dpsynth_cli.budget_cli import guard

    path = None if budget is None or budget is False else os.fspath(budget)
    where = None if isinstance(data, pd.DataFrame | pa.Table) else os.fspath(data)
    return guard(path, budget is False, dataset, where, command, eps, delta, state_dir)


def _seed_warning(seed: int | None) -> None:
    """A seed is a whole number >= 0 (as --seed); using one is warned about: NOT FOR RELEASE."""
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
        raise UsageError("seed must be a whole number >= 0, e.g. seed=7")
    if seed is not None:
        warnings.warn(f"seed given: {NOT_FOR_RELEASE}", NotForRelease, stacklevel=3)


def _notice(text: str) -> None:
    warnings.warn(text, DpsynthNotice, stacklevel=3)


def _command(name: str) -> list[str]:
    """The report's `command`: the API call (its arguments may name private paths)."""
    return ["dpsynth_cli", name]


def _output_info(output: Output) -> dict[str, Any]:
    if output not in ("pandas", "arrow"):
        raise UsageError("output must be 'pandas' or 'arrow'")
    return {"path": None, "format": output}


def _as(table: pa.Table, output: Output) -> pd.DataFrame | pa.Table:
    return table if output == "arrow" else table.to_pandas()


def _report_path(report: Mapping[str, Any] | str | os.PathLike) -> str:
    if isinstance(report, str | os.PathLike):
        return os.fspath(report)
    raise UsageError("from_report takes the path of a synth report file")
