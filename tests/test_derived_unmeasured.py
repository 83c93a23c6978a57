"""A column the output takes from a declaration is not measured (issue 36, `pairs.modelled`).

A derivation whose expression reads no nullable column, and a `determines` map given in the
schema, set their column in every output row whatever the model drew: the marginals mechanism
leaves it out and its budget goes to the other columns (public: the schema alone decides). A
derivation reading a nullable column leaves the drawn value where that column is missing, so
that column is still measured.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pyarrow as pa

from tests.test_wallclock import synth_csv

COLUMNS = {
    "a": {"type": "integer", "lower": 0, "upper": 50},
    "b": {"type": "integer", "lower": 0, "upper": 50},
    "c": {"type": "integer", "lower": 0, "upper": 100},
    "x": {"type": "float", "lower": 0, "upper": 1},
    "zone": {"type": "category", "levels": ["Z1", "Z2", "Z3"]},
    "region": {"type": "category", "levels": ["North", "South"]},
}
MAP = {"zone -> region": {"Z1": "North", "Z2": "South", "Z3": "South"}}


def run(runner, tmp_path, monkeypatch, schema: dict) -> tuple[dict, pa.Table]:
    rng = np.random.default_rng(0)
    n = 3000
    a, b = rng.integers(0, 51, n), rng.integers(0, 51, n)
    zone = rng.choice(["Z1", "Z2", "Z3"], n)
    region = np.where(zone == "Z1", "North", "South")
    table = pa.table({"a": a, "b": b, "c": a + b, "x": rng.random(n), "zone": zone})
    table = table.append_column("region", pa.array(region))
    return synth_csv(runner, tmp_path, monkeypatch, table, schema, "marginals", eps="2")


def measured(report: dict) -> set[int]:
    return {a["cube_column"] for a in report["mechanism"]["attributes"]}


def test_derived_and_mapped_columns_are_not_measured(runner, tmp_path, monkeypatch):
    schema = {"columns": COLUMNS, "constraints": ["c == a + b"], "determines": [MAP]}
    report, out = run(runner, tmp_path, monkeypatch, schema)
    # cube: zone, region (level columns first), then a, b, c, x
    assert measured(report) == {0, 2, 3, 5}
    c = out.column("c").to_numpy()
    assert np.array_equal(c, out.column("a").to_numpy() + out.column("b").to_numpy())
    zones, regions = out.column("zone").to_pylist(), out.column("region").to_pylist()
    assert all(MAP["zone -> region"][z] == r for z, r in zip(zones, regions, strict=True))


def test_a_derivation_from_a_nullable_column_is_measured(runner, tmp_path, monkeypatch):
    columns = {**COLUMNS, "b": {**COLUMNS["b"], "nullable": True}}
    report, _ = run(
        runner, tmp_path, monkeypatch, {"columns": columns, "constraints": ["c == a + b"]}
    )
    assert measured(report) == {0, 1, 2, 3, 4, 5}


def test_the_spends_still_sum_to_epsilon(runner, tmp_path, monkeypatch):
    schema = {"columns": COLUMNS, "constraints": ["c == a + b"], "determines": [MAP]}
    report, _ = run(runner, tmp_path, monkeypatch, schema)
    exact = sum(Fraction(e["epsilon_exact"]) for e in report["ledger"]["entries"])
    assert exact == Fraction(report["ledger"]["total_epsilon_exact"]) == 2
