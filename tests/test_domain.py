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
from dpsynth_cli.errors import DataError, UsageError


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


def test_resolve_columns_defaults_to_numeric_and_rejects_text():
    specs = resolve_columns(table().schema, None, None, {"a": (0, 10)}, "in.csv")
    assert [(s.name, s.kind, s.has_bounds) for s in specs] == [
        ("a", "integer", True),
        ("b", "float", False),
    ]
    with pytest.raises(DataError, match="'s' is not numeric"):
        resolve_columns(table().schema, ["a", "s"], None, {}, "in.csv")
    with pytest.raises(UsageError, match="--bounds"):
        resolve_columns(table().schema, ["a"], None, {"b": (0, 1)}, "in.csv")
    assert requested_columns("a, b", None) == ["a", "b"]
    with pytest.raises(UsageError):
        requested_columns("a,a", None)


def test_value_matrix_drops_rows_with_missing_values():
    specs = resolve_columns(table().schema, ["a", "b"], None, {}, "in.csv")
    assert value_matrix(table(), specs).tolist() == [[1.0, 0.5], [4.0, 2.0]]


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
