"""Issue 38, items 1 and 2: rows dropped because their cells do not parse are named, from
released values only, and `--decimal ,` reads decimal commas.

The noisy row count is a histogram of disjoint cells (complete, or dropped at column j: the
row's first unusable cell), released under the count's epsilon (`count.noisy_tally`); a notice
names each column where a large share of the released rows was dropped, and the "use a larger
--eps" advice stays for releases where no column was named. The audit at the end checks the
histogram's sensitivity on a neighbouring pair, with a mutant that counts a row at every
failing column (sensitivity 2 here), which it must catch.
"""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from dpsynth_cli.cli import app
from dpsynth_cli.domain import ColumnSpec, tallied_matrix
from dpsynth_cli.mechanisms.count import noisy_tally
from dpsynth_cli.privacy.ledger import Ledger
from dpsynth_cli.privacy.noise import RandomSource
from dpsynth_cli.synth import CountAndBounds
from tests.audit import audit

ROWS = 600


def excel_csv(path: Path, price_text: bool = False) -> None:
    """An Excel-style CSV: semicolons, decimal commas (price), a whole-number column (qty)."""
    rng = np.random.default_rng(0)
    lines = ["price;qty"]
    for i in range(ROWS):
        price = f"{rng.uniform(1, 50):.2f}".replace(".", ",")
        lines.append(f"{'n/a' if price_text else price};{i % 10}")
    path.write_text("\n".join(lines) + "\n")


def synth(runner, tmp_path: Path, csv: Path, *args: str) -> tuple[int, str, dict | None]:
    out = tmp_path / "out.csv"
    result = runner.invoke(
        app, ["synth", str(csv), "--eps", "1", "--seed", "5", "-o", str(out), *args]
    )
    report = out.with_name("out.csv.report.json")
    loaded = json.loads(report.read_text()) if report.exists() and result.exit_code == 0 else None
    return result.exit_code, result.output, loaded


def count_spend(report: dict) -> dict:
    return next(s for s in report["ledger"]["entries"] if s["step"] == "count")


BOUNDS = ["--bounds", "price=0:60", "--bounds", "qty=0:9", "--integer", "qty"]


def test_decimal_comma_keeps_the_rows(runner, tmp_path):
    csv = tmp_path / "excel.csv"
    excel_csv(csv)
    code, output, report = synth(
        runner, tmp_path, csv, "--delimiter", ";", "--decimal", ",", *BOUNDS
    )
    assert code == 0, output
    released = count_spend(report)["released"]
    assert released["noisy_rows"] > ROWS * 0.8
    assert released["noisy_rows_dropped_at"]["price"] < ROWS * 0.2
    assert "dropped at column" not in output
    assert "larger --eps" not in output


def test_the_schema_declares_the_decimal_comma(runner, tmp_path):
    csv = tmp_path / "excel.csv"
    excel_csv(csv)
    schema = tmp_path / "schema.json"
    schema.write_text(
        json.dumps(
            {
                "decimal": ",",
                "columns": {
                    "price": {"type": "float", "lower": 0, "upper": 60},
                    "qty": {"type": "integer", "lower": 0, "upper": 9},
                },
            }
        )
    )
    code, output, report = synth(runner, tmp_path, csv, "--delimiter", ";", "--schema", str(schema))
    assert code == 0, output
    assert count_spend(report)["released"]["noisy_rows"] > ROWS * 0.8
    assert "dropped at column" not in output


def test_a_decimal_comma_with_a_comma_delimiter_is_a_usage_error(runner, tmp_path):
    csv = tmp_path / "excel.csv"
    excel_csv(csv)
    code, output, _ = synth(runner, tmp_path, csv, "--decimal", ",", *BOUNDS)
    assert code == 2, output
    assert "--delimiter" in output


def test_without_decimal_the_notice_names_the_column(runner, tmp_path):
    csv = tmp_path / "excel.csv"
    excel_csv(csv)
    code, output, report = synth(runner, tmp_path, csv, "--delimiter", ";", *BOUNDS)
    assert code == 0, output
    flat = " ".join(output.split())
    assert "rows were dropped at column 'price'" in flat
    assert "--decimal" in flat
    assert "'qty'" not in flat  # its cells parse: never named
    assert "larger --eps" not in flat
    # the released per-column counts are in the report, the ledger still sums to eps
    released = count_spend(report)["released"]
    assert set(released["noisy_rows_dropped_at"]) == {"price", "qty"}
    entries = report["ledger"]["entries"]
    total = sum(Fraction(s["epsilon_exact"]) for s in entries)
    assert total == Fraction(report["ledger"]["total_epsilon_exact"])
    assert total <= 1 and float(total) == pytest.approx(1.0, abs=1e-5)


def test_a_text_column_declared_float_is_named_without_raise_eps(runner, tmp_path):
    csv = tmp_path / "text.csv"
    excel_csv(csv, price_text=True)
    code, output, _ = synth(runner, tmp_path, csv, "--delimiter", ";", *BOUNDS)
    assert code == 0, output
    flat = " ".join(output.split())
    assert "rows were dropped at column 'price'" in flat
    assert "larger --eps" not in flat
    assert "raising --eps" in flat  # says it will not help


def test_a_category_with_undeclared_levels_is_named(runner, tmp_path):
    rng = np.random.default_rng(1)
    kinds = rng.choice(["a", "b", "c", "d"], size=ROWS)
    csv = tmp_path / "cat.csv"
    csv.write_text(
        "kind,x\n" + "".join(f"{k},{v:.3f}\n" for k, v in zip(kinds, rng.random(ROWS), strict=True))
    )
    schema = tmp_path / "schema.json"
    schema.write_text(
        json.dumps(
            {
                "columns": {
                    "kind": {"type": "category", "levels": ["a"]},
                    "x": {"type": "float", "lower": 0, "upper": 1},
                }
            }
        )
    )
    code, output, _ = synth(runner, tmp_path, csv, "--schema", str(schema))
    assert code == 0, output
    flat = " ".join(output.split())
    assert "rows were dropped at column 'kind' (values not among its levels" in flat
    assert "'x'" not in flat


def test_a_small_table_keeps_the_raise_eps_advice(runner, tmp_path):
    csv = tmp_path / "small.csv"
    csv.write_text("x\n" + "".join(f"{i / 10}\n" for i in range(5)))
    code, output, _ = synth(runner, tmp_path, csv, "--bounds", "x=0:1")
    assert code == 0, output
    flat = " ".join(output.split())
    assert "larger --eps" in flat
    assert "dropped at column" not in flat


SPECS = [ColumnSpec("a", "float", 0.0, 1.0), ColumnSpec("b", "float", 0.0, 1.0)]


def tally(table: pa.Table, batch: int = 7) -> CountAndBounds:
    """The first pass's exact counts, over batches, merged from two halves."""
    halves = []
    for part in (table.slice(0, table.num_rows // 2), table.slice(table.num_rows // 2)):
        acc = CountAndBounds((), tallied=len(SPECS))
        for lo in range(0, part.num_rows, batch):
            acc.add(tallied_matrix(part.slice(lo, batch), SPECS))
        halves.append(acc)
    return halves[0].merge(halves[1])


def test_the_first_unusable_column_counts_each_row_once():
    table = pa.table(
        {
            "a": ["0.5", "x", "", "0.1", "y", "0.2", "0.3"],
            "b": ["0.5", "0.5", "z", "", "w", "0.2", "nan"],
        }
    )
    acc = tally(table, batch=2)
    assert acc.n == 2
    assert acc.dropped.tolist() == [3, 2]  # x, "", y at a; "" and nan at b
    assert acc.n + acc.dropped.sum() == table.num_rows


# -- audit: the histogram (complete, dropped at a, dropped at b) on neighbouring tables --------

AUDIT_EPS = Fraction(1)
AUDIT_RUNS = 6000


def neighbours() -> tuple[pa.Table, pa.Table]:
    """X, and X plus a row whose cells at a and at b both fail."""
    base = {
        "a": ["0.5"] * 20 + ["x"] * 5 + ["0.4"] * 3,
        "b": ["0.5"] * 20 + ["0.1"] * 5 + ["y"] * 3,
    }
    plus = {k: [*v, "bad"] for k, v in base.items()}
    return pa.table(base), pa.table(plus)


def every_failing_column(table: pa.Table) -> tuple[int, list[int]]:
    """The mutant's tally: a row counted at every column that fails (sensitivity D)."""
    X = tallied_matrix(table, SPECS)[:, :-1]
    bad = np.isnan(X)
    return int((~bad.any(axis=1)).sum()), bad.sum(axis=0).tolist()


def tally_samples(mutant: bool) -> tuple[np.ndarray, np.ndarray]:
    """Per run and side: min over the dropped cells of (released - X's true count), and the
    count's error; X's true values on both sides, so a shift is what the audit sees."""
    X, Xp = neighbours()
    exact = []
    for table in (X, Xp):
        if mutant:
            exact.append(every_failing_column(table))
        else:
            acc = tally(table)
            exact.append((acc.n, acc.dropped.tolist()))
    base_n, base_drops = exact[0]
    sides = []
    for side, (n, drops) in enumerate(exact):
        out = np.empty((AUDIT_RUNS, 2))
        for i in range(AUDIT_RUNS):
            src = RandomSource.seeded(1_000_000 * side + i + (500_000 if mutant else 0))
            got_n, got = noisy_tally(n, drops, ["a", "b"], AUDIT_EPS, src, Ledger(AUDIT_EPS))
            # far from the clip at 0: the true counts are 23 and more
            out[i] = [min(got["a"] - base_drops[0], got["b"] - base_drops[1]), got_n - base_n]
        sides.append(out)
    return sides[0], sides[1]


@pytest.mark.heavy
def test_the_dropped_histogram_passes_the_audit():
    a, b = tally_samples(mutant=False)
    result = audit(a, b)
    print(f"tally eps=1 correct: lower bound {result.epsilon_lower:.3f} ({result.event})")
    result.assert_within(float(AUDIT_EPS))


@pytest.mark.heavy
def test_a_row_counted_at_every_failing_column_fails_the_audit():
    a, b = tally_samples(mutant=True)
    result = audit(a, b)
    print(f"tally eps=1 every failing column: lower bound {result.epsilon_lower:.3f}")
    result.assert_exceeds(float(AUDIT_EPS))


def test_an_other_level_or_missing_holding_most_rows_is_named(runner, tmp_path):
    """Issue 38 item 2: a category whose `other` level holds most synthetic rows (levels left
    out of the schema), or a nullable column mostly missing, gets a notice, read off the
    release only; a table read as meant gets none."""
    rng = np.random.default_rng(3)
    wards = rng.choice(["A", "B", "C", "D", "E"], ROWS, p=[0.05, 0.05, 0.3, 0.3, 0.3])
    counts = [str(i % 5) if i % 10 == 0 else "" for i in range(ROWS)]
    (tmp_path / "t.csv").write_text(
        "ward,n\n" + "".join(f"{w},{c}\n" for w, c in zip(wards, counts, strict=True))
    )
    columns = {
        "ward": {"type": "category", "levels": ["A", "B", "other"], "other": "other"},
        "n": {"type": "integer", "lower": 0, "upper": 4, "nullable": True},
    }
    (tmp_path / "s.json").write_text(json.dumps({"columns": columns}))
    code, said, _ = synth(
        runner, tmp_path, tmp_path / "t.csv", "--schema", str(tmp_path / "s.json")
    )
    assert code == 0, said
    assert "of column 'ward' are its level 'other'" in said
    assert "of column 'n' are missing" in said
    columns["ward"]["levels"] = ["A", "B", "C", "D", "E", "other"]
    columns["n"]["nullable"] = False
    (tmp_path / "s.json").write_text(json.dumps({"columns": columns}))
    (tmp_path / "t.csv").write_text(
        "ward,n\n" + "".join(f"{w},{i % 5}\n" for i, w in enumerate(wards))
    )
    code, said, _ = synth(
        runner, tmp_path, tmp_path / "t.csv", "--schema", str(tmp_path / "s.json")
    )
    assert code == 0, said
    assert "synthetic rows of column" not in said
