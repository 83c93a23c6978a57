"""The real-tables benchmark gives the peers dpsynth's public domain: value codes -> the peers'
table -> value codes is the identity on every kind (levels, few-valued integers as levels, other
numbers on their bounds, missing as NaN), and nothing in it depends on the values."""

from __future__ import annotations

import numpy as np

from benchmarks.real_tables import encode
from benchmarks.real_tables.grid import peer_domain
from benchmarks.real_tables.tables import Table
from dpsynth_cli.domain import ColumnSpec


def test_codes_round_trip_through_the_peers_table():
    specs = [
        ColumnSpec("c", "category", 0.0, 2.0, levels=("a", "b", "c"), nullable=True),
        ColumnSpec("month", "integer", 1, 12),
        ColumnSpec("delay", "integer", -60, 720, nullable=True),
        ColumnSpec("x", "float", 0.0, 10.0, nullable=True),
        ColumnSpec("d", "date", 15000, 16000),
    ]
    domain = peer_domain(Table("t", specs, None))
    assert [c["mode"] for c in domain] == ["levels", "levels", "number", "number", "number"]
    assert domain[0]["size"] == 4 and domain[1] == {
        "name": "month",
        "mode": "levels",
        "size": 12,
        "offset": 1,
    }
    assert (domain[2]["lower"], domain[2]["upper"]) == (-60.5, 720.5)  # each value's equal share
    X = np.array(
        [
            [0, 1, -60, 0.0, 15000],
            [3, 12, 721, 10.5, 16000],  # c, delay, x missing (past the upper bound)
            [2, 7, 15, 2.5, 15500],
        ],
        dtype=float,
    )
    frame = encode.to_frame(X, domain)
    assert frame["c"].tolist() == ["L0", "L3", "L2"] and frame["month"].tolist()[0] == "L0"
    assert np.isnan(frame["delay"][1]) and np.isnan(frame["x"][1])
    back = encode.from_frame(frame, domain)
    assert back[:, 2].tolist() == [-60, 721, 15] and back[1, 3] == specs[3].code_upper
    assert np.array_equal(back[:, [0, 1, 4]], X[:, [0, 1, 4]])
