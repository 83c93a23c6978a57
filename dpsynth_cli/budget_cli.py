"""`--budget`, `--no-budget` and `--dataset` of the releasing commands, and `dpsynth budget`.

A command builds a `Guard` once its flags are checked and before it opens its input: that
refuses a run past the dataset's total (exit 3, nothing read or written). `Guard.charge()` then
records the spend, checking the total again under the file's lock (another run may have spent
meanwhile), after the input's header is read and before any row is: the spend is on disk before
anything is released (`budget` module docstring).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Annotated

import typer

from dpsynth_cli import budget, report
from dpsynth_cli.budget import BudgetFile, Dataset
from dpsynth_cli.errors import UsageError

BudgetOpt = Annotated[
    str | None,
    typer.Option(
        "--budget",
        metavar="FILE",
        show_default=False,
        help="Record this release in the privacy budget FILE (owner-only, private: never "
        "publish it), e.g. --budget /var/lib/dpsynth/budget.json, and refuse the run (exit 3) "
        "if it would take the dataset past the total set with `dpsynth budget set`. Default: "
        f"${budget.ENV}, else $XDG_STATE_HOME/dpsynth/{budget.FILE_NAME} (~/.local/state/dpsynth/"
        f"{budget.FILE_NAME}).",
    ),
]
# the budget commands' --budget: the file they read or change (not a run's release to record)
BudgetFileOpt = Annotated[
    str | None,
    typer.Option(
        "--budget",
        metavar="FILE",
        show_default=False,
        help="The privacy budget FILE to read or change (private: never publish it), e.g. "
        f"--budget /var/lib/dpsynth/budget.json. Default: ${budget.ENV}, else $XDG_STATE_HOME/"
        f"dpsynth/{budget.FILE_NAME} (~/.local/state/dpsynth/{budget.FILE_NAME}).",
    ),
]
NoBudgetOpt = Annotated[
    bool,
    typer.Option(
        "--no-budget",
        help="Record nothing and check no total, e.g. for a throw-away test: --no-budget "
        f"(also {budget.ENV}=off).",
    ),
]
DatasetOpt = Annotated[
    str | None,
    typer.Option(
        "--dataset",
        metavar="NAME",
        show_default=False,
        help="The name the budget keeps this input's spends under, e.g. --dataset sales "
        "(default: the input's resolved path; a moved file would start a new budget; stdin, "
        "and any input that is not a regular file or a directory, e.g. /dev/stdin or <(...), "
        "share the dataset of stdin).",
    ),
]


@dataclass
class Guard:
    """The budget check of one run: made before the input is opened, charged before a row is
    read. `file` None: no budget (--no-budget)."""

    file: BudgetFile | None
    dataset: Dataset
    command: str
    epsilon: float
    delta: float = 0.0
    stream: str | None = None
    resumed: bool = False

    def __post_init__(self) -> None:
        if self.file is not None:  # refuse now, before the input is opened
            self.file.charge(self.dataset, self.command, **self._spend(), record=False)

    def _spend(self) -> dict:
        return {
            "epsilon": self.epsilon,
            "delta": self.delta,
            "stream": self.stream,
            "resumed": self.resumed,
        }

    def charge(self) -> None:
        """Record the spend (refused, exit 3, if another run took the budget meanwhile)."""
        if self.file is not None:
            self.file.charge(self.dataset, self.command, **self._spend())


def guard(
    path: str | None,
    off: bool,
    dataset: str | None,
    input: str | None,
    command: str,
    epsilon: float,
    delta: float = 0.0,
    state_dir: str | None = None,
) -> Guard:
    """The run's `Guard` (refuses a run past its total). `input` None: an in-memory table (the
    API). `state_dir`: online-replay's --state; a run that continues a state is not charged
    again under a dataset where its stream is recorded (it is under any other)."""
    where = budget.resolve_path(path, off)
    stream = budget.stream_id(state_dir) if state_dir else None
    resumed = bool(state_dir) and os.path.exists(os.path.join(state_dir, "state.npz"))
    file = BudgetFile(where) if where else None
    return Guard(file, budget.dataset_for(input, dataset), command, epsilon, delta, stream, resumed)


Name = Annotated[
    str | None,
    typer.Argument(
        metavar="DATASET",
        show_default=False,
        help="A --dataset name, e.g. sales (or use --input PATH).",
    ),
]
InputOpt = Annotated[
    str | None,
    typer.Option(
        "--input",
        metavar="PATH",
        show_default=False,
        help="The input of runs made without --dataset, e.g. --input data.csv.",
    ),
]


def _target(name: str | None, input: str | None, verb: str) -> Dataset:
    if (name is None) == (input is None):
        raise UsageError(f"budget {verb}: give a DATASET name or --input PATH (one of them)")
    return budget.dataset_for(input, name)


def _file(path: str | None) -> BudgetFile:
    where = budget.resolve_path(path)
    if where is None:
        raise UsageError(f"{budget.ENV}=off: give --budget FILE")
    return BudgetFile(where)


def show(
    name: Name = None,
    input: InputOpt = None,
    path: BudgetFileOpt = None,
    json_out: Annotated[
        bool, typer.Option("--json", help="Print JSON for scripts, e.g. --json | jq .")
    ] = False,
) -> None:
    """Print what each dataset (or DATASET) has spent, its total and its releases. PRIVATE:
    it names inputs and when they were used."""
    file = _file(path)
    entries = file.read()
    if name is not None or input is not None:
        key = _target(name, input, "show").key
        entries = {k: e for k, e in entries.items() if k == key}
    summaries = [e.summary() for e in entries.values()]
    if json_out:
        typer.echo(report.dumps({"budget_file": file.path, "datasets": summaries}), nl=False)
        return
    typer.echo(f"budget file {file.path}")
    if not summaries:
        typer.echo("  no releases recorded")
    for s in summaries:
        total = (
            "no total set" if s["total_epsilon"] is None else f"total eps {s['total_epsilon']:g}"
        )
        if s["total_delta"]:
            total += f" delta {s['total_delta']:g}"
        typer.echo(
            f"{s['dataset']}: spent eps {s['spent_epsilon']:g}"
            + (f" delta {s['spent_delta']:g}" if s["spent_delta"] else "")
            + f" ({total}), {len(s['releases'])} releases"
        )
        for r in s["releases"]:
            extra = f" delta {r['delta']:g}" if r["delta"] else ""
            typer.echo(f"  {r['time']}  {r['command']}  eps {r['epsilon']:g}{extra}")


def set_total(
    name: Name = None,
    eps: Annotated[
        float,
        typer.Option("--eps", metavar="EPS", help="The dataset's total epsilon, e.g. --eps 3."),
    ] = ...,  # type: ignore[assignment]
    delta: Annotated[
        float,
        typer.Option(
            "--delta", metavar="DELTA", help="Its total delta, e.g. --delta 1e-6 (default 0)."
        ),
    ] = 0.0,
    input: InputOpt = None,
    path: BudgetFileOpt = None,
) -> None:
    """Declare DATASET's total: later runs that would pass it are refused (exit 3)."""
    dataset = _target(name, input, "set")
    entry = _file(path).set_total(dataset, eps, delta)
    spent, _ = entry.spent
    typer.echo(f"{entry.label}: total eps {eps:g}; spent so far eps {float(spent):g}")


def reset(name: Name = None, input: InputOpt = None, path: BudgetFileOpt = None) -> None:
    """Forget DATASET's releases and total (e.g. for a new table under an old name)."""
    dataset = _target(name, input, "reset")
    entry = _file(path).reset(dataset)
    if entry is None:
        typer.echo(f"{dataset.label}: nothing recorded")
    else:
        typer.echo(f"{entry.label}: forgot {len(entry.releases)} releases and the total")
