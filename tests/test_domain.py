"""Columns, public bounds, schema files and the map to and from the unit cube."""

import json

import numpy as np
import pyarrow as pa
import pytest

from dpsynth_cli.domain import (
    ColumnSpec,
    Domain,
    load_schema,
    parse_bounds_flag,
    requested_columns,
    resolve_columns,
    value_matrix,
)
from dpsynth_cli.errors import UsageError


def test_parse_bounds_flag():
    assert parse_bounds_flag("age=0:120") == ("age", 0.0, 120.0)
    assert parse_bounds_flag("t=-1.5:2e3") == ("t", -1.5, 2000.0)
    for bad in ("age", "age=1", "age=a:b", "age=5:5", "age=5:1", "age=0:inf", "=0:1"):
        with pytest.raises(UsageError, match="--bounds"):
            parse_bounds_flag(bad)


def test_schema_file(tmp_path):
    path = tmp_path / "s.json"
    path.write_text(
        json.dumps(
            {
                "columns": {
                    "age": {"type": "integer", "lower": 0, "upper": 120},
                    "w": {"type": "float"},
                }
            }
        )
    )
    specs = load_schema(str(path))
    assert specs["age"] == ColumnSpec("age", "integer", 0.0, 120.0)
    assert not specs["w"].has_bounds
    for bad in (
        {},
        {"columns": {"a": {"type": "text"}}},
        {"columns": {"a": {"lower": 1}}},
        {"columns": {"a": {"lower": 2, "upper": 1}}},
    ):
        path.write_text(json.dumps(bad))
        with pytest.raises(UsageError, match="--schema"):
            load_schema(str(path))
    path.write_text("{not json")
    with pytest.raises(UsageError, match="--schema"):
        load_schema(str(path))


def table():
    return pa.table({"a": [1, 2, None, 4], "b": [0.5, np.nan, 1.0, 2.0], "s": ["x", "y", "z", "w"]})


def test_columns_and_types_come_from_declarations_only():
    parquet = table().schema  # a Parquet file declares its types: a int64, b double, s string
    choice = resolve_columns(parquet, None, None, {"a": (0, 10)}, typed=True)
    assert [(s.name, s.kind, s.kind_source, s.has_bounds) for s in choice.specs] == [
        ("a", "integer", "Parquet schema", True),
        ("b", "float", "Parquet schema", False),
    ]
    assert list(choice.left_out) == ["s"]  # text by its declared type: left out, with a reason
    text = pa.schema([(n, pa.string()) for n in "abs"])  # a CSV: no declared types
    choice = resolve_columns(text, None, None, {}, typed=False, integers=["a"])
    assert [(s.name, s.kind) for s in choice.specs] == [
        ("a", "integer"),
        ("b", "float"),
        ("s", "float"),
    ]
    assert choice.columns_from == "CSV header" and choice.left_out == {}
    schema = {"b": ColumnSpec("b", "integer", 0, 5)}
    choice = resolve_columns(parquet, ["b", "s"], schema, {}, typed=True)
    assert [(s.name, s.kind, s.kind_source) for s in choice.specs] == [
        ("b", "integer", "schema"),
        ("s", "float", "default (float)"),  # text asked for by name: parsed as numbers
    ]
    with pytest.raises(UsageError, match="--bounds"):
        resolve_columns(parquet, ["a"], None, {"b": (0, 1)}, typed=True)
    with pytest.raises(UsageError, match="--integer"):
        resolve_columns(parquet, ["a"], None, {}, typed=True, integers=["b"])
    dated = pa.schema([("t", pa.timestamp("ms")), ("l", pa.list_(pa.int64()))])
    with pytest.raises(UsageError, match="'t' is a datetime column: declare it in --schema"):
        resolve_columns(dated, ["t"], None, {}, typed=True)
    with pytest.raises(UsageError, match="'l' has type list<item: int64>"):
        resolve_columns(dated, ["l"], None, {}, typed=True)
    assert requested_columns("a, b", None) == (["a", "b"], "--columns")
    assert requested_columns(None, schema, ["a"]) == (["b"], "schema")
    assert requested_columns(None, None, ["a", "b", "a"]) == (["a", "b"], "--bounds/--integer")
    assert requested_columns(None, None, []) == (None, "")
    with pytest.raises(UsageError):
        requested_columns("a,a", None)


def test_value_matrix_parses_each_cell_and_drops_rows_with_missing_values():
    specs = resolve_columns(table().schema, ["a", "b"], None, {}, typed=True).specs
    assert value_matrix(table(), specs).tolist() == [[1.0, 0.5], [4.0, 2.0]]
    cells = ["1", " 2.5 ", "abc", "", "NA", "1e400", "-inf", "99999999999999999999", "nan", "5."]
    text = pa.table({"x": cells})
    parsed = value_matrix(text, [ColumnSpec("x", "float")])[:, 0]
    assert parsed.tolist() == [1.0, 2.5, np.inf, -np.inf, 1e20, 5.0]


def test_unit_map_round_trip_clamps_and_keeps_integers():
    dom = Domain((ColumnSpec("i", "integer", 0, 10), ColumnSpec("f", "float", -1, 1)))
    values = np.array([[0, -1], [10, 1], [5, 0], [-3, np.inf], [99, -np.inf]], dtype=float)
    unit = dom.to_unit(values)
    assert ((unit >= 0) & (unit <= 1)).all()
    back = dom.from_unit(unit)
    assert back.column("i").type == pa.int64()
    assert back.column("i").to_pylist() == [0, 10, 5, 0, 10]
    assert back.column("f").to_pylist() == [-1, 1, 0, 1, -1]


def test_integer_values_get_equal_shares_of_the_unit_interval():
    dom = Domain((ColumnSpec("i", "integer", 1, 3),))
    u = np.linspace(0, 1, 300_001)[:, None]
    counts = np.bincount(dom.from_unit(u).column("i").to_numpy())[1:]
    assert np.allclose(counts / counts.sum(), 1 / 3, atol=1e-4)
    with pytest.raises(UsageError):
        Domain((ColumnSpec("i", "integer", 0.2, 0.8),))
