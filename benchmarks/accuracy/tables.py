"""Benchmark tables: (name, X in [0,1]^d as float64, description) for a requested n.

Synthetic tables are drawn afresh for each n from a fixed seed. Real tables come from data files
shipped inside PyPI packages (no download at run time); each column is mapped onto [0, 1] by
PUBLIC bounds written below (domain knowledge, not the data's min/max), values outside are
clamped (as `dpsynth synth` does), and n rows are drawn WITHOUT replacement with a fixed seed.
A table with fewer than n rows is used whole: the record then carries the actual n.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

SEED = 20261122


@dataclass(frozen=True)
class Table:
    name: str
    X: np.ndarray  # (n, d) float64 in [0, 1]^d
    description: str


# ---- synthetic -----------------------------------------------------------------------------


def _truncated(draw: Callable[[np.random.Generator, int], np.ndarray], n: int, seed: int):
    """n draws of `draw` that land in the unit cube (rejection: the density is truncated)."""
    rng = np.random.default_rng(seed)
    out: list[np.ndarray] = []
    have = 0
    while have < n:
        Z = draw(rng, 2 * (n - have) + 16)
        Z = Z[((Z >= 0.0) & (Z <= 1.0)).all(axis=1)]
        out.append(Z)
        have += Z.shape[0]
    return np.concatenate(out)[:n].astype(np.float64)


def _smooth(d: int) -> Callable[[np.random.Generator, int], np.ndarray]:
    """d = 1: two wide Gaussians; d >= 2: a ring (circle / spherical shell) plus a blob."""

    def draw(rng: np.random.Generator, k: int) -> np.ndarray:
        if d == 1:
            first = rng.random(k) < 0.6
            Z = np.where(first, 0.35 + 0.12 * rng.normal(size=k), 0.72 + 0.08 * rng.normal(size=k))
            return Z[:, None]
        on_ring = rng.random(k) < 0.7
        u = rng.standard_normal((k, d))
        u /= np.linalg.norm(u, axis=1, keepdims=True)
        radius = 0.3 + 0.04 * rng.standard_normal((k, 1))
        ring = 0.5 + radius * u
        blob = np.array([0.62] + [0.45] * (d - 1)) + 0.07 * rng.standard_normal((k, d))
        return np.where(on_ring[:, None], ring, blob)

    return draw


def _clustered(d: int) -> Callable[[np.random.Generator, int], np.ndarray]:
    """Six tight Gaussian clusters (sd 0.008-0.02) at fixed centres, unequal weights."""
    crng = np.random.default_rng(SEED + 100 + d)
    centres = 0.1 + 0.8 * crng.random((6, d))
    sds = np.array([0.008, 0.01, 0.012, 0.015, 0.018, 0.02])
    weights = np.array([0.3, 0.2, 0.15, 0.15, 0.1, 0.1])

    def draw(rng: np.random.Generator, k: int) -> np.ndarray:
        which = rng.choice(6, size=k, p=weights)
        return centres[which] + sds[which, None] * rng.standard_normal((k, d))

    return draw


# ---- real (files shipped inside PyPI packages: the `bench` extra) ---------------------------


@dataclass(frozen=True)
class RealSource:
    package: str
    loader: Callable[[], object]  # returns a pandas DataFrame
    columns: tuple[tuple[str, float, float], ...]  # (column, public lower, public upper)
    description: str


def _diamonds():
    from plotnine.data import diamonds  # plotnine ships diamonds.csv (53,940 rows) in its wheel

    return diamonds


def _randhie():
    from statsmodels.datasets import randhie  # statsmodels ships randhie.csv (20,190 rows)

    return randhie.load_pandas().data


def _airports():
    from vega_datasets import data  # vega_datasets ships airports.csv (3,376 rows) locally

    df = data.airports()
    # Public filter on a public attribute: the 48 contiguous states and DC.
    outside = {"AK", "HI", "AS", "GU", "CQ", "PR", "VI", "NA"}
    return df[~df["state"].isin(outside)]


REAL: dict[str, RealSource] = {
    # Bounds are round numbers picked by hand from domain knowledge and each data set's
    # documentation (never computed from the rows). Carat: retail diamonds are almost all under
    # 5 ct; depth is a percentage (total depth / mean diameter), cut stones lie within 40-80%;
    # price: a round cap of USD 20,000 (ggplot2's documentation gives 326-18,823).
    "real-diamonds-3d": RealSource(
        "plotnine",
        _diamonds,
        (("carat", 0.0, 5.0), ("depth", 40.0, 80.0), ("price", 0.0, 20000.0)),
        "plotnine.data.diamonds (53,940 diamonds): carat, depth %, price USD",
    ),
    # RAND Health Insurance Experiment: lpi = ln(max(1, annual incentive payment)); upper 8
    # means payments below e^8 = USD 2,981 a year. disea = number of chronic diseases (the
    # statsmodels notes give no range): 60 is our round cap. Not blind: we had seen the data's
    # summary statistics (largest lpi 7.16, largest disea 58.6) when choosing them.
    "real-randhie-2d": RealSource(
        "statsmodels",
        _randhie,
        (("lpi", 0.0, 8.0), ("disea", 0.0, 60.0)),
        "statsmodels.datasets.randhie (20,190 observations): lpi, disea",
    ),
    # Bounding box of the contiguous United States (about 24.5-49.4 N, 66.9-124.8 W).
    "real-airports-2d": RealSource(
        "vega_datasets",
        _airports,
        (("longitude", -125.0, -66.0), ("latitude", 24.0, 50.0)),
        "vega_datasets airports in the 48 contiguous states and DC (3,073): longitude, latitude",
    ),
}

SYNTHETIC: dict[str, Callable[[np.random.Generator, int], np.ndarray]] = {
    f"{kind}-{d}d": make(d)
    for d in (1, 2, 3)
    for kind, make in (("smooth", _smooth), ("clustered", _clustered))
}

SYNTHETIC_DESCRIPTIONS = {
    "smooth": "d=1: 0.6 N(0.35, 0.12) + 0.4 N(0.72, 0.08); d>=2: 70% ring/shell of radius "
    "0.3 (sd 0.04) around the centre + 30% blob (sd 0.07); truncated to the unit cube",
    "clustered": "six Gaussian clusters, sd 0.008-0.02, weights 0.3/0.2/0.15/0.15/0.1/0.1, "
    "centres uniform in [0.1, 0.9]^d (fixed seed); truncated to the unit cube",
}

ALL_TABLES = tuple(SYNTHETIC) + tuple(REAL)


@lru_cache(maxsize=8)
def _real_unit(name: str) -> np.ndarray:
    """All rows of a real table mapped by its declared bounds (not clamped), NaN rows dropped."""
    src = REAL[name]
    df = src.loader()
    cols = []
    for col, lo, hi in src.columns:
        v = np.asarray(df[col], dtype=np.float64)
        cols.append((v - lo) / (hi - lo))
    X = np.column_stack(cols)
    return X[~np.isnan(X).any(axis=1)]


def real_available(name: str) -> str | None:
    """None if the table loads, else a one-line reason (package missing or broken)."""
    try:
        _real_unit(name)
    except Exception as exc:  # noqa: BLE001 - any import/load failure means "skip"
        return f"{REAL[name].package} unavailable: {type(exc).__name__}: {exc}"
    return None


def clamped_share(name: str) -> float:
    """Share of a real table's rows with a value outside the declared bounds, i.e. clamped (for
    the docs only: computed from the data, never used by a mechanism)."""
    X = _real_unit(name)
    return float(((X < 0.0) | (X > 1.0)).any(axis=1).mean())


def dim(name: str) -> int:
    """Number of columns of a table (public: from its definition, no data read)."""
    if name in SYNTHETIC:
        return int(name.rsplit("-", 1)[1].rstrip("d"))
    return len(REAL[name].columns)


def load(name: str, n: int) -> Table:
    """The table `name` with n rows (or all rows, if the real table is smaller)."""
    if name in SYNTHETIC:
        kind = name.rsplit("-", 1)[0]
        X = _truncated(SYNTHETIC[name], n, SEED + 7 * n + dim(name))
        return Table(name, X, SYNTHETIC_DESCRIPTIONS[kind])
    if name in REAL:
        full = np.clip(_real_unit(name), 0.0, 1.0)
        if full.shape[0] <= n:
            return Table(name, full.copy(), REAL[name].description)
        idx = np.random.default_rng(SEED + n).choice(full.shape[0], size=n, replace=False)
        return Table(name, full[np.sort(idx)], REAL[name].description)
    raise KeyError(f"unknown table {name!r}; known: {', '.join(ALL_TABLES)}")
