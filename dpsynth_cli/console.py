"""What a person sees on stderr: progress and a summary on a terminal, notices unless --quiet.

Scripts get silence on stderr except notices (e.g. what a DP bounds estimate cost) and errors;
`--quiet` drops the notices too. Nothing here ever prints a data value.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

from rich.console import Console
from rich.table import Table

B = TypeVar("B")


def time_left(rows: int, rate: float) -> str:
    """The time `rows` more rows take at `rate` rows/s, in words: never "about 0 s" (under a
    second is said so, and none left as done)."""
    if rows <= 0:
        return "done"
    seconds = rows / max(rate, 1e-9)
    return "under 1 s left" if seconds < 1 else f"about {seconds:,.0f} s left"


class Feedback:
    """Progress, notices and the closing summary of one command."""

    def __init__(self, quiet: bool) -> None:
        self.console = Console(stderr=True)
        self.quiet = quiet
        self.interactive = self.console.is_terminal and not quiet
        self._status: Any = None  # the spinner of the current `step`

    @contextlib.contextmanager
    def step(self, what: str) -> Iterator[None]:
        if not self.interactive:
            yield
            return
        with self.console.status(what + "…") as self._status:
            yield
        self._status = None

    def passes(
        self, batches: Callable[[], Iterable[B]], total: int | None, what: str = "reading"
    ) -> Callable[[], Iterator[B]]:
        """`batches` (a function starting a pass) with progress on a terminal, in the current
        step's status line: pass number, rows read, rate and, when the file says how many rows
        it has (`total`), the time left. Silent (the same batches, nothing printed) in pipes and
        with --quiet. Shown to the person running the command only; it goes nowhere else."""
        if not self.interactive:
            return lambda: iter(batches())
        count = [0]

        def counted() -> Iterator[B]:
            count[0] += 1
            seen, start = 0, time.monotonic()
            for batch in batches():
                yield batch
                seen += batch.num_rows
                rate = seen / max(time.monotonic() - start, 1e-9)
                text = f"{what} (pass {count[0]}): {seen:,} rows, {rate:,.0f} rows/s"
                if total:
                    text += f", {time_left(total - seen, rate)}"
                if self._status is not None:
                    self._status.update(text)
            # the pass is over: what follows (figures, writing) is work the ETA does not count,
            # so no "0 s left" stays up while it runs
            if self._status is not None:
                self._status.update(f"{what} (pass {count[0]}): all {seen:,} rows read; working")

        return counted

    def counter(self, what: str) -> Callable[[int, int], None] | None:
        """A callback (done, total) for work counted in rows, shown like `passes` in the current
        step's status line; None in pipes and with --quiet."""
        if not self.interactive:
            return None
        start = time.monotonic()

        def show(done: int, total: int) -> None:
            rate = done / max(time.monotonic() - start, 1e-9)
            if self._status is not None:
                self._status.update(
                    f"{what}: {done:,} of {total:,} rows, {rate:,.0f} rows/s, "
                    f"{time_left(total - done, rate)}"
                )

        return show

    def notice(self, text: str) -> None:
        if not self.quiet:
            self.console.print(
                f"dpsynth: note: {text}", markup=False, highlight=False, soft_wrap=True
            )

    def warning(self, text: str) -> None:
        """Shown even with --quiet and when stderr is not a terminal (e.g. NOT FOR RELEASE)."""
        self.console.print(
            f"dpsynth: warning: {text}", markup=False, highlight=False, soft_wrap=True
        )

    def summary(self, report: dict[str, Any], output: str, report_path: str | None) -> None:
        if not self.interactive:
            return
        table = Table(title="dpsynth synth", show_header=False)
        ledger = report["ledger"]
        table.add_row(
            "epsilon spent", f"{ledger['total_epsilon']:.6g} of {ledger['budget_epsilon']:.6g}"
        )
        table.add_row("relation", report["neighbouring_relation"])
        table.add_row("mechanism", report["mechanism"]["name"])
        table.add_row("synthetic rows", str(report["output"]["rows"]))
        if "w1_bound_unit_cube" in report["accuracy"]:
            bound = report["accuracy"]["w1_bound_unit_cube"]
            table.add_row("W1 bound (unit cube)", f"{bound:.4g}")
        table.add_row("output", "stdout" if output == "-" else output)
        table.add_row(
            "report", {None: "(not written)", "-": "stdout"}.get(report_path, report_path)
        )
        if report["seeded"]:
            table.add_row("seeded", "yes: NOT FOR RELEASE")
        self.console.print(table)
