"""The public domain as the peers take it, and the way between value codes and their tables.

Peers get the same declarations dpsynth gets: a boolean or category column as its declared
levels (missing a level of its own if nullable); an integer or date column with at most
`PEER_BINS` values (and missing) as those values, each a level; every other number as a number
on its public interval (an integer's padded by 1/2, so each value owns an equal share), which
the peer cuts into bins (uniform or PrivTree), missing as NaN. Nothing here reads the data.
This module imports only numpy and pandas: the dpmm environment (numpy 1.26) loads it too.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

PEER_BINS = 32  # bins per numeric column (smartnoise's and dpmm's uniform, PrivTree's cap)
LEVEL_KINDS = ("boolean", "category")
DISCRETE = ("integer", "date")


def peer_domain(columns: list[dict]) -> list[dict]:
    """Each column's encoding for the peers from its declaration (a spec's JSON: name, type,
    lower, upper, nullable, levels count): {"name", "mode": "levels", "size"} or
    {"name", "mode": "number", "lower", "upper", "integer", "nullable"}."""
    out = []
    for c in columns:
        if c["type"] in LEVEL_KINDS:
            size = c["levels"] + bool(c["nullable"])
            out.append({"name": c["name"], "mode": "levels", "size": size, "offset": 0})
            continue
        discrete = c["type"] in DISCRETE
        if discrete:
            lo, hi = math.ceil(c["lower"]), math.floor(c["upper"])
            if hi - lo + 1 + bool(c["nullable"]) <= PEER_BINS:
                size = hi - lo + 1 + bool(c["nullable"])
                out.append({"name": c["name"], "mode": "levels", "size": size, "offset": lo})
                continue
            lower, upper = lo - 0.5, hi + 0.5
        else:
            lower, upper = float(c["lower"]), float(c["upper"])
        out.append(
            {
                "name": c["name"],
                "mode": "number",
                "lower": lower,
                "upper": upper,
                "integer": discrete,
                "nullable": bool(c["nullable"]),
                "missing_code": c["missing_code"],
            }
        )
    return out


def to_frame(X: np.ndarray, domain: list[dict]) -> pd.DataFrame:
    """Value codes as the peers' table: levels as labels "L0", "L1", ...; numbers as floats on
    their interval (NaN if missing)."""
    data = {}
    for j, c in enumerate(domain):
        if c["mode"] == "levels":
            codes = np.rint(X[:, j] - c["offset"]).astype(np.int64)
            data[c["name"]] = pd.Series([f"L{k}" for k in codes], dtype=object)
        else:
            values = X[:, j].astype(np.float64)
            if c["nullable"]:
                values = np.where(values > c["upper"], np.nan, values)
            data[c["name"]] = np.clip(values, c["lower"], c["upper"])
    return pd.DataFrame(data)


def labels(c: dict) -> list[str]:
    return [f"L{k}" for k in range(c["size"])]


def from_frame(frame: pd.DataFrame, domain: list[dict]) -> np.ndarray:
    """The peers' output back to value codes (an integer rounded, a number kept in its
    interval, NaN as the missing code)."""
    X = np.empty((len(frame), len(domain)))
    for j, c in enumerate(domain):
        column = frame[c["name"]]
        if c["mode"] == "levels":
            code = column.astype(str).str.slice(1).astype(np.int64).to_numpy()
            X[:, j] = np.clip(code, 0, c["size"] - 1) + c["offset"]
            continue
        values = pd.to_numeric(column, errors="coerce").to_numpy(dtype=np.float64)
        missing = np.isnan(values)
        values = np.clip(np.nan_to_num(values, nan=c["lower"]), c["lower"], c["upper"])
        if c["integer"]:
            values = np.clip(np.rint(values), c["lower"] + 0.5, c["upper"] - 0.5)
        X[:, j] = np.where(missing & c["nullable"], c["missing_code"], values)
    return X
