"""The JSON report of a synth run: public parameters, the ledger, and a-priori accuracy.

Everything here is a function of the user's flags, the ledger's released (noisy) values and the
synthetic output: never of the raw rows. `tests/test_report.py` rebuilds it from those alone.
Non-private diagnostics (`--diagnostics`) live in a separate, labelled block.
"""

from __future__ import annotations

import json
from typing import Any

from dpsynth_cli import __version__, io
from dpsynth_cli.domain import ColumnChoice, Domain
from dpsynth_cli.errors import UsageError
from dpsynth_cli.mechanisms.base import MechanismRun
from dpsynth_cli.privacy.ledger import Ledger

SCHEMA = "dpsynth.synth-report/1"
NOT_FOR_RELEASE = "NOT FOR RELEASE: seeded run (reproducible noise)"
DOMAIN_NOTE = (
    "columns, types and bounds come from declarations only (flags, schema file, the CSV "
    "header's names, a Parquet file's declared column types) or from the DP bounds estimate in "
    "the ledger; never from the values. A cell that is not a value of its column's declared "
    "type (or an undeclared level without an 'other' level) is missing; rows with a missing "
    "value are dropped unless the column is nullable; values outside the bounds are clamped."
)

CONSTRAINTS_NOTE = (
    "the bound is the release's before the declared constraints: derived columns and the rows "
    "replaced by rejection are not covered by it (docs/privacy.md, 'Declared constraints')"
)


def accuracy_block(
    run: MechanismRun, domain: Domain, noisy_rows: int, signal: dict[str, Any]
) -> dict[str, Any]:
    """The mechanism's a-priori W1 bound at the noisy count, in the unit cube and per column,
    and whether the output carries signal (`uniformity.signal_block`)."""
    block: dict[str, Any] = {
        "guarantee": run.guarantee,
        "metric": domain.metric(),
        "signal": signal,
    }
    if run.w1_bound is None:
        return block
    bound = run.w1_bound
    return {
        **block,
        "evaluated_at_rows": noisy_rows,
        "rows_note": "the bound needs n; the noisy count stands in for it (the true n is private)",
        "w1_bound_unit_cube": bound,
        "vacuous": bound >= 1.0,
        "vacuous_note": "W1 in the unit cube never exceeds 1; a bound >= 1 says nothing",
        "w1_bound_per_column": {
            c.name: bound * float(w)
            for c, w in zip(domain.columns, domain.unit_widths, strict=True)
            if c.kind not in ("boolean", "category")
        },
        "per_column_note": "bound on the 1-D W1 of each column in original units (dates in "
        "days, date-times in seconds), relative to the input clamped to its bounds; level "
        "columns have none (see metric)",
    }


def build_report(
    *,
    command: list[str],
    seeded: bool,
    budget: dict[str, Any],
    columns: ColumnChoice,
    domain: Domain,
    ledger: Ledger,
    run: MechanismRun,
    noisy_rows: int,
    signal: dict[str, Any],
    output_rows: int,
    output: dict[str, Any],
    dim: dict[str, Any] | None = None,
    constraints: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Assemble the public report (versioned by SCHEMA); `dim` is `--dim`'s block (auto or N:
    what ran, a fallback and its reason, the private spectrum's signal check); `constraints`, the
    declared constraints and how they were enforced, only when the schema declares some."""
    extra = {} if dim is None else {"dim": dim}
    report = {
        "schema": SCHEMA,
        "tool": {"name": "dpsynth", "version": __version__},
        "command": command,
        "seeded": seeded,
        "release": NOT_FOR_RELEASE if seeded else "ok",
        "neighbouring_relation": ledger.relation,
        "budget_plan": budget,
        "domain": {c.name: c.to_json() for c in domain.columns},
        "domain_source": {**columns.to_json(), "note": DOMAIN_NOTE},
        "mechanism": run.description,
        **extra,
        "ledger": ledger.to_json(),
        "output": {
            **output,
            "rows": output_rows,
            "float_decimals": domain.decimals(),
            "float_decimals_note": "float columns are rounded to 1e-6 of their public range",
        },
        "accuracy": accuracy_block(run, domain, noisy_rows, signal),
    }
    if constraints is not None:
        report["constraints"] = constraints
        if constraints["declared"] and run.w1_bound is not None:
            report["accuracy"]["constraints_note"] = CONSTRAINTS_NOTE
    return report


def report_path(flag: str | None, output: str) -> str | None:
    """Where the report goes: --report FILE, or '-' (stdout, after the output's files are
    written), else OUTPUT.report.json next to a file output, else nowhere (a notice says so,
    `no_report_notice`): not beside stdout, nor beside a device or a FIFO (no
    /dev/null.report.json made in /dev)."""
    if flag == "-" and output == "-":
        raise UsageError("--report - and the table cannot both go to stdout: give -o FILE")
    if flag:
        return flag
    if output == "-" or io.written_in_place(output):
        return None
    return output.rstrip("/") + ".report.json"


def no_report_notice(output: str) -> str:
    """Why no report was written (`report_path` gave None)."""
    where = "the output went to stdout" if output == "-" else f"{output} is not a regular file"
    return f"no report written ({where}): add --report FILE to keep it"


def files(outputs: dict[str | None, Any]) -> dict[str, str]:
    """{path: JSON text} of the outputs that go to files (not None, not stdout)."""
    return {path: dumps(content) for path, content in outputs.items() if path not in (None, "-")}


def dumps(report: dict[str, Any]) -> str:
    return json.dumps(report, indent=2, sort_keys=False) + "\n"
