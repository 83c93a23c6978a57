"""Wide benchmark tables (8-30 columns) for `--dim`: (name, X in [0,1]^d, description).

Synthetic tables are drawn from fixed seeds. Real tables come from data files shipped inside
PyPI packages of the `bench` extra (no download at run time); each column is mapped onto [0, 1]
by PUBLIC bounds written below (documentation, physical limits, round numbers: never the data's
min/max), values outside are clamped, rows with a missing value are dropped, all rows are used.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

import numpy as np

from benchmarks.accuracy.tables import SEED, RealSource, Table, _smooth, _truncated

N = 100_000
NOISE_SD = 0.01  # isotropic noise around the subspace (per column, unit cube)


def _near_subspace(k: int, d: int) -> Callable[[np.random.Generator, int], np.ndarray]:
    """Rows near a k-dimensional affine subspace of [0,1]^d: a latent point z from the smooth
    k-D table (70% ring/shell of radius 0.3 + 30% blob), centred, mapped by a fixed random
    orthonormal basis U (d x k) scaled so the image fits in the cube, plus N(0, 0.01^2) noise on
    every column; truncated to the cube."""
    crng = np.random.default_rng(SEED + 1000 * k + d)
    U, _ = np.linalg.qr(crng.standard_normal((d, k)))
    # largest |U_j . (z - 1/2)| over the latent cube is 0.5 * ||U_j||_1: scale it to 0.45
    scale = 0.45 / (0.5 * np.abs(U).sum(axis=1).max())
    latent = _smooth(k)

    def draw(rng: np.random.Generator, m: int) -> np.ndarray:
        z = latent(rng, m) - 0.5
        return 0.5 + scale * z @ U.T + NOISE_SD * rng.standard_normal((m, d))

    return draw


def _independent(d: int) -> Callable[[np.random.Generator, int], np.ndarray]:
    """d independent columns, each its own 1-D law: Beta(a, b) with a, b in [0.7, 4] drawn once
    (fixed seed), or a two-component Gaussian mixture, alternating."""
    crng = np.random.default_rng(SEED + 2000 + d)
    ab = 0.7 + 3.3 * crng.random((d, 2))
    mix = 0.2 + 0.6 * crng.random((d, 3))  # weight, centre 1, centre 2

    def draw(rng: np.random.Generator, m: int) -> np.ndarray:
        cols = []
        for j in range(d):
            if j % 2 == 0:
                cols.append(rng.beta(ab[j, 0], ab[j, 1], m))
            else:
                first = rng.random(m) < mix[j, 0]
                cols.append(
                    np.where(
                        first,
                        mix[j, 1] + 0.08 * rng.standard_normal(m),
                        mix[j, 2] + 0.05 * rng.standard_normal(m),
                    )
                )
        return np.column_stack(cols)

    return draw


SYNTHETIC: dict[str, Callable[[np.random.Generator, int], np.ndarray]] = {
    f"near{k}-d{d}": _near_subspace(k, d) for k in (2, 3) for d in (10, 30)
}
SYNTHETIC["indep-d10"] = _independent(10)

SYNTHETIC_DESCRIPTIONS = {
    "near": "latent k-D smooth table (70% ring/shell of radius 0.3, sd 0.04, + 30% blob, sd "
    "0.07) on a fixed random k-dimensional affine subspace of [0,1]^d (scaled to fit), plus "
    f"N(0, {NOISE_SD}^2) on every column; truncated to the cube",
    "indep": "independent columns: Beta(a, b), a, b in [0.7, 4] (fixed seed), alternating with "
    "two-component Gaussian mixtures (sd 0.08 / 0.05); truncated to the cube",
}


# ---- real wide tables ---------------------------------------------------------------------


def _diamonds10():
    from plotnine.data import diamonds  # plotnine ships diamonds.csv (53,940 rows) in its wheel

    df = diamonds.copy()
    # The three graded attributes as their public grade numbers (ggplot2's documented order).
    for col in ("cut", "color", "clarity"):
        df[col] = df[col].cat.codes.astype(float) + 1.0
    return df


def _randhie10():
    from statsmodels.datasets import randhie  # statsmodels ships randhie.csv (20,190 rows)

    return randhie.load_pandas().data


REAL: dict[str, RealSource] = {
    # ggplot2's documentation of diamonds: price in USD (326-18,823 documented: cap 20,000), carat
    # (0.2-5.01 documented: cap 5), x/y/z length/width/depth in mm (a 5 ct round brilliant is
    # about 11 mm across and 7 mm deep: caps 12, 12, 8), depth % = z / mean(x, y) (cut stones
    # 40-80 %), table = width of the top relative to the widest point (40-100 %), cut 1-5 (Fair
    # ... Ideal), color 1-7 (J ... D), clarity 1-8 (I1 ... IF): the documented grade scales.
    "real-diamonds-10d": RealSource(
        "plotnine",
        _diamonds10,
        (
            ("carat", 0.0, 5.0),
            ("cut", 1.0, 5.0),
            ("color", 1.0, 7.0),
            ("clarity", 1.0, 8.0),
            ("depth", 40.0, 80.0),
            ("table", 40.0, 100.0),
            ("price", 0.0, 20000.0),
            ("x", 0.0, 12.0),
            ("y", 0.0, 12.0),
            ("z", 0.0, 8.0),
        ),
        "plotnine.data.diamonds (53,940 diamonds): carat, cut, color, clarity (grade numbers), "
        "depth %, table %, price USD, x, y, z mm",
    ),
    # statsmodels' randhie notes: mdvis = visits to a medical doctor in a year (cap 100 a year,
    # about two a week); lncoins = ln(coinsurance + 1), coinsurance 0-100 % (so 0 to ln 101 =
    # 4.62: bound 0-5); idp = individual deductible plan (0/1); lpi = ln(max(1, annual
    # participation incentive payment)) (0-8, as in the 2-D table); fmde = 0 if idp = 1, else
    # ln(max(1, MDE / (0.01 coinsurance))), MDE the maximum dollar expenditure (1,000 USD cap, a
    # design parameter: ln(1000 / 0.01) = 11.5: bound 0-12); physlm = physical limitation (0/1);
    # disea = number of chronic diseases (0-60, as in the 2-D table); hlthg, hlthf, hlthp = self-
    # rated health good / fair / poor (0/1).
    "real-randhie-10d": RealSource(
        "statsmodels",
        _randhie10,
        (
            ("mdvis", 0.0, 100.0),
            ("lncoins", 0.0, 5.0),
            ("idp", 0.0, 1.0),
            ("lpi", 0.0, 8.0),
            ("fmde", 0.0, 12.0),
            ("physlm", 0.0, 1.0),
            ("disea", 0.0, 60.0),
            ("hlthg", 0.0, 1.0),
            ("hlthf", 0.0, 1.0),
            ("hlthp", 0.0, 1.0),
        ),
        "statsmodels.datasets.randhie (20,190 person-years of the RAND Health Insurance "
        "Experiment): all 10 columns",
    ),
}

ALL_TABLES = (*SYNTHETIC, *REAL)


@lru_cache(maxsize=4)
def _real_unit(name: str) -> np.ndarray:
    src = REAL[name]
    df = src.loader()
    X = np.column_stack(
        [(np.asarray(df[c], dtype=np.float64) - lo) / (hi - lo) for c, lo, hi in src.columns]
    )
    return X[~np.isnan(X).any(axis=1)]


def real_available(name: str) -> str | None:
    try:
        _real_unit(name)
    except Exception as exc:  # noqa: BLE001 - any import/load failure means "skip"
        return f"{REAL[name].package} unavailable: {type(exc).__name__}: {exc}"
    return None


def clamped_share(name: str) -> float:
    """Share of a real table's rows with a value outside its declared bounds (docs only)."""
    X = _real_unit(name)
    return float(((X < 0.0) | (X > 1.0)).any(axis=1).mean())


def dim(name: str) -> int:
    if name in SYNTHETIC:
        return int(name.rsplit("-d", 1)[1])
    return len(REAL[name].columns)


def description(name: str) -> str:
    if name in SYNTHETIC:
        return SYNTHETIC_DESCRIPTIONS["near" if name.startswith("near") else "indep"]
    src = REAL[name]
    bounds = ", ".join(f"{c} [{lo:g}, {hi:g}]" for c, lo, hi in src.columns)
    return f"{src.description}; bounds {bounds}; package `{src.package}`"


@lru_cache(maxsize=4)
def load(name: str, n: int = N) -> Table:
    """The table (n rows for synthetic tables; all rows of a real one)."""
    if name in SYNTHETIC:
        X = _truncated(SYNTHETIC[name], n, SEED + 7 * n + dim(name))
        return Table(name, X, description(name))
    if name in REAL:
        return Table(name, np.clip(_real_unit(name), 0.0, 1.0), description(name))
    raise KeyError(f"unknown table {name!r}; known: {', '.join(ALL_TABLES)}")
