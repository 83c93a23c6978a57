"""Shared fixtures: small tables written to temporary files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

SAMPLE = Path(__file__).resolve().parent.parent / "sample_data"
# A value that must never show up in an error message or a report.
SECRET = 987654.321


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


@pytest.fixture
def small_csv(tmp_path: Path) -> Path:
    """600 rows: an integer and a float column with public bounds 0:100 and 0:1."""
    rng = np.random.default_rng(11)
    frame = pd.DataFrame(
        {"age": rng.integers(0, 101, 600), "score": rng.random(600).round(4), "name": ["r"] * 600}
    )
    path = tmp_path / "small.csv"
    frame.to_csv(path, index=False)
    return path


@pytest.fixture(autouse=True)
def private_budget(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch):
    """Every test's runs record their spends in a budget file of its own, never in the real
    home directory (subprocesses inherit the environment)."""
    home = tmp_path_factory.mktemp("state")
    monkeypatch.setenv("XDG_STATE_HOME", str(home))
    monkeypatch.setenv("DPSYNTH_BUDGET", str(home / "budget.json"))
    return home / "budget.json"


@pytest.fixture
def status_texts(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """What a command's status line would show on a terminal: each step's name and every
    update, recorded in order (the console made interactive, its live display replaced)."""
    import contextlib

    from dpsynth_cli.console import Feedback

    texts: list[str] = []

    class Status:
        def update(self, text: str) -> None:
            texts.append(text)

    @contextlib.contextmanager
    def step(self, what):
        self._status = Status()
        texts.append(what)
        yield
        self._status = None

    init = Feedback.__init__

    def interactive(self, quiet):
        init(self, quiet)
        self.interactive = True

    monkeypatch.setattr(Feedback, "__init__", interactive)
    monkeypatch.setattr(Feedback, "step", step)
    return texts
