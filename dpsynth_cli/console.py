"""What a person sees on stderr: progress and a summary on a terminal, notices unless --quiet.

Scripts get silence on stderr except notices (e.g. what a DP bounds estimate cost) and errors;
`--quiet` drops the notices too. Nothing here ever prints a data value.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from rich.console import Console
from rich.table import Table


class Feedback:
    """Progress, notices and the closing summary of one command."""

    def __init__(self, quiet: bool) -> None:
        self.console = Console(stderr=True)
        self.quiet = quiet
        self.interactive = self.console.is_terminal and not quiet

    @contextlib.contextmanager
    def step(self, what: str) -> Iterator[None]:
        if not self.interactive:
            yield
            return
        with self.console.status(what + "…"):
            yield

    def notice(self, text: str) -> None:
        if not self.quiet:
            self.console.print(f"dpsynth: note: {text}", markup=False, highlight=False)

    def summary(self, report: dict[str, Any], output: str, report_path: str | None) -> None:
        if not self.interactive:
            return
        table = Table(title="dpsynth synth", show_header=False)
        ledger = report["ledger"]
        table.add_row(
            "epsilon spent", f"{ledger['total_epsilon']:.6g} of {ledger['budget_epsilon']:.6g}"
        )
        table.add_row("relation", report["neighbouring_relation"])
        table.add_row(
            "mechanism", f"{report['mechanism']['name']} (depth {report['mechanism']['depth']})"
        )
        table.add_row("synthetic rows", str(report["output"]["rows"]))
        table.add_row("W1 bound (unit cube)", f"{report['accuracy']['w1_bound_unit_cube']:.4g}")
        table.add_row("output", "stdout" if output == "-" else output)
        table.add_row("report", report_path or "(not written)")
        if report["seeded"]:
            table.add_row("seeded", "yes: NOT FOR RELEASE")
        self.console.print(table)
