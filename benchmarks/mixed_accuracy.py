"""Accuracy on real mixed tables (issue 15): dpsynth synth against smartnoise MST and AIM.

Tables shipped in PyPI packages, with public domains written here (not read from the data):
- penguins (plotnine.data, the palmerpenguins table, 344 rows): species, island, sex (nullable)
  categories; bill length and depth, flipper length, body mass (float, field-guide bounds),
  year (integer 2007-2009).
- diamonds (plotnine.data, the first 5000 rows of a public shuffle, seed 0): cut, color, clarity
  categories (their documented grades); carat, depth, price (float).

Methods: dpsynth `synth` (the library call the CLI makes, --mechanism auto, add/remove eps-DP);
smartnoise-synth MST and AIM ((eps, 1e-9)-DP) with the categories as labels and every numeric
column in 32 equal bins on its public bounds (no preprocessing budget), a uniform point inside
each sampled bin. Metrics (NOT private, computed on the raw table): per-column TVD (categories)
or W1 over the public range (numbers); the joint W1 in the mixed metric of issue 15 and
docs/privacy.md (levels at distance 1: `Domain.to_mixed` under L-infinity; numbers by their
public range), exact (POT) on the whole table.

    .venv-bench/bin/python -m benchmarks.mixed_accuracy [--seeds 4] > out.md

The peers' synthetic tables are kept in benchmarks/out/mixed_peers (a rerun after a change to
dpsynth reuses them; delete the folder to redraw them).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from dpsynth_cli.domain import ColumnSpec, Domain, value_matrix
from dpsynth_cli.evaluate.categorical import categorical_columns
from dpsynth_cli.evaluate.w1 import w1_1d, w1_summary
from dpsynth_cli.privacy.noise import RandomSource
from dpsynth_cli.synth import SynthOptions, synthesize

BINS = 32
PEERS_CACHE = Path("benchmarks/out/mixed_peers")


def cat(name: str, levels: list[str], nullable: bool = False) -> ColumnSpec:
    top = float(len(levels) - 1)
    return ColumnSpec(name, "category", 0.0, top, levels=tuple(levels), nullable=nullable)


def penguins() -> tuple[pd.DataFrame, list[ColumnSpec]]:
    from plotnine.data import penguins as table  # the palmerpenguins table, as in its package

    frame = table.astype({"species": str, "island": str, "sex": object})
    specs = [
        cat("species", ["Adelie", "Chinstrap", "Gentoo"]),
        cat("island", ["Biscoe", "Dream", "Torgersen"]),
        ColumnSpec("bill_length_mm", "float", 30.0, 60.0),
        ColumnSpec("bill_depth_mm", "float", 13.0, 22.0),
        ColumnSpec("flipper_length_mm", "float", 170.0, 235.0),
        ColumnSpec("body_mass_g", "float", 2500.0, 6500.0),
        cat("sex", ["female", "male"], nullable=True),
        ColumnSpec("year", "integer", 2007.0, 2009.0),
    ]
    return frame, specs


def diamonds() -> tuple[pd.DataFrame, list[ColumnSpec]]:
    from plotnine.data import diamonds as table

    frame = table.sample(frac=1.0, random_state=0).head(5000).reset_index(drop=True)
    frame = frame[["cut", "color", "clarity", "carat", "depth", "price"]].astype(
        {"cut": str, "color": str, "clarity": str}
    )
    specs = [
        cat("cut", ["Fair", "Good", "Very Good", "Premium", "Ideal"]),
        cat("color", list("DEFGHIJ")),
        cat("clarity", ["I1", "SI2", "SI1", "VS2", "VS1", "VVS2", "VVS1", "IF"]),
        ColumnSpec("carat", "float", 0.0, 5.5),
        ColumnSpec("depth", "float", 40.0, 80.0),
        ColumnSpec("price", "float", 0.0, 20000.0),
    ]
    return frame, specs


TABLES = {"penguins": penguins, "diamonds": diamonds}


def as_arrow(frame: pd.DataFrame) -> pa.Table:
    """Every column as text (as a CSV would give it), so each method sees the same cells."""
    return pa.table(
        {
            c: pa.array(
                frame[c]
                .astype(object)
                .where(frame[c].notna(), None)
                .map(lambda v: None if v is None else str(v)),
                pa.string(),
            )
            for c in frame.columns
        }
    )


def ours(frame: pd.DataFrame, specs: list[ColumnSpec], eps: float, seed: int) -> pa.Table:
    result = synthesize(
        as_arrow(frame), specs, SynthOptions(epsilon=eps), RandomSource.seeded(seed)
    )
    return result.table


def smartnoise(kind: str):
    def run(frame: pd.DataFrame, specs: list[ColumnSpec], eps: float, seed: int) -> pa.Table:
        from snsynth import Synthesizer
        from snsynth.transform import BinTransformer, LabelTransformer, TableTransformer

        np.random.seed(seed % 2**32)  # noqa: NPY002  (MST/AIM use the global generator)
        complete = _complete(frame, specs)
        transformers = [
            LabelTransformer(nullable=s.nullable)
            if s.kind == "category"
            else BinTransformer(bins=BINS, lower=s.lower, upper=s.upper)
            for s in specs
        ]
        synth = Synthesizer.create(kind, epsilon=float(eps))
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            synth.fit(complete, transformer=TableTransformer(transformers), preprocessor_eps=0.0)
            out = synth.sample(len(complete))
        out = pd.DataFrame(out, columns=[s.name for s in specs])
        rng = np.random.default_rng(seed)
        for s in specs:  # bin midpoints -> a uniform point in the bin
            if s.kind != "category":
                width = (s.upper - s.lower) / BINS
                mid = out[s.name].astype(float).to_numpy()
                code = np.clip(np.floor((mid - s.lower) / width), 0, BINS - 1)
                out[s.name] = s.lower + (code + rng.random(code.size)) * width
        return as_arrow(out)

    return run


def _complete(frame: pd.DataFrame, specs: list[ColumnSpec]) -> pd.DataFrame:
    """The rows dpsynth measures too (a missing value only in nullable columns), numbers clamped."""
    keep = np.ones(len(frame), dtype=bool)
    out = frame[[s.name for s in specs]].copy()
    for s in specs:
        if not s.nullable:
            keep &= out[s.name].notna().to_numpy()
        if s.kind != "category":
            out[s.name] = out[s.name].astype(float).clip(s.lower, s.upper)
    return out[keep].reset_index(drop=True)


METHODS = {"dpsynth": ours, "mst": smartnoise("mst"), "aim": smartnoise("aim")}


def metrics(real: pa.Table, synth: pa.Table, specs: list[ColumnSpec]) -> dict[str, float]:
    domain = Domain(tuple(specs))
    X, Y = value_matrix(real, specs), value_matrix(synth, specs)
    out = {f"{k} TVD": v["tvd"] for k, v in categorical_columns(X, Y, specs).items()}
    for j, s in enumerate(specs):
        if s.kind != "category":
            x, y = np.clip(X[:, j], s.lower, s.upper), np.clip(Y[:, j], s.lower, s.upper)
            out[f"{s.name} W1"] = w1_1d(x, y) / (s.upper - s.lower)
    delta = w1_summary(domain.to_mixed(X), domain.to_mixed(Y))
    out["joint W1 mixed"] = delta.get("exact", delta.get("upper"))
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--tables", default="penguins,diamonds")
    parser.add_argument("--eps", default="0.5,1,2")
    args = parser.parse_args()
    for name in args.tables.split(","):
        frame, specs = TABLES[name]()
        real = as_arrow(frame)
        rows: dict[tuple[float, str], list[dict[str, float]]] = {}
        seconds: dict[str, list[float]] = {}  # CPU s of the runs made now (not cached)
        for eps in map(float, args.eps.split(",")):
            for method, run in METHODS.items():
                for seed in range(args.seeds):
                    cached = PEERS_CACHE / f"{name}_{method}_{eps:g}_{seed}.parquet"
                    if method != "dpsynth" and cached.exists():
                        synth = pq.read_table(cached)
                    else:
                        start = time.process_time()
                        synth = run(frame, specs, eps, seed)
                        seconds.setdefault(method, []).append(time.process_time() - start)
                        if method != "dpsynth":
                            cached.parent.mkdir(parents=True, exist_ok=True)
                            pq.write_table(synth, cached)
                    rows.setdefault((eps, method), []).append(metrics(real, synth, specs))
        keys = list(next(iter(rows.values()))[0])
        per_run = ", ".join(f"{m} {np.mean(s):.2f}" for m, s in seconds.items())
        print(
            f"\n### {name} ({len(frame)} rows; mean of {args.seeds} seeds; CPU s/run: {per_run})\n"
        )
        print("| eps | method | " + " | ".join(keys) + " |")
        print("|---" * (len(keys) + 2) + "|")
        for (eps, method), runs in rows.items():
            means = [np.mean([r[k] for r in runs]) for k in keys]
            print(
                f"| {eps:g} | {method} | " + " | ".join(f"{m:.3f}" for m in means) + " |",
                flush=True,
            )


if __name__ == "__main__":
    main()
