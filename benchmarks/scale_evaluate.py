"""`dpsynth evaluate` at read speed (issue 40): `make bench-scale`'s ``evaluate-diamonds`` cell.

ggplot2's diamonds (all 10 columns, its public schema from `benchmarks.real_tables.schemas`)
resampled with replacement to 10^6 rows and written as Parquet (the real table); the synthetic
table is `dpsynth synth` of it at eps 1 with the same schema (made once, not timed). Timed, each
in a fresh process and alternating, `runs` times: `dpsynth evaluate REAL SYNTH --schema` and
the baseline, pyarrow reading and writing the real table (`scale.BASELINE`). Targets: evaluate
<= 10x the baseline's wall time and <= 1 GiB peak RSS.

diamonds.csv comes from plotnine's package data: the installed package, or its wheel fetched
with ``pip download --no-deps plotnine`` into the output directory (the CSV is in the wheel).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from benchmarks.real_tables.schemas import DIAMONDS

ROOT = Path(__file__).resolve().parents[1]
ROWS = 1_000_000
WHEEL_MEMBER = "plotnine/data/diamonds.csv"


def diamonds_csv(out: Path) -> Path:
    """The path of diamonds.csv: plotnine's installed data, or extracted from its wheel."""
    try:
        import plotnine

        installed = Path(plotnine.__file__).parent / "data" / "diamonds.csv"
        if installed.exists():
            return installed
    except ImportError:
        pass
    target = out / "diamonds.csv"
    if target.exists():
        return target
    wheels = sorted(out.glob("plotnine-*.whl"))
    if not wheels:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "plotnine", "-d", str(out)]
        subprocess.run(cmd, check=True, capture_output=True)
        wheels = sorted(out.glob("plotnine-*.whl"))
    with zipfile.ZipFile(wheels[-1]) as wheel:
        target.write_bytes(wheel.read(WHEEL_MEMBER))
    return target


def make_tables(out: Path, rows: int = ROWS) -> tuple[Path, Path, Path]:
    """(real Parquet, synthetic Parquet, schema JSON), made once and reused."""
    real, synth = out / f"diamonds_{rows}.parquet", out / f"diamonds_{rows}.synth.parquet"
    schema = out / "diamonds.schema.json"
    schema.write_text(json.dumps({"columns": DIAMONDS}, indent=1))
    if not real.exists():
        table = pacsv.read_csv(diamonds_csv(out))
        pick = np.random.default_rng(20261129).integers(0, table.num_rows, rows)
        table = table.take(pa.array(pick))
        columns = {
            name: table[name].cast(pa.string() if spec["type"] == "category" else pa.float64())
            for name, spec in DIAMONDS.items()
        }
        pq.write_table(pa.table(columns), real.with_suffix(".part"))
        real.with_suffix(".part").rename(real)
    if not synth.exists():
        cmd = [sys.executable, "-m", "dpsynth_cli", "synth", str(real), "-o", str(synth)]
        cmd += ["--schema", str(schema), "--eps", "1", "--seed", "1", "--quiet"]
        subprocess.run(cmd, check=True, capture_output=True, cwd=ROOT)
    return real, synth, schema


def run(
    out: Path,
    runs: int,
    measure: Callable[[list[str]], tuple[float, float, float]],
    baseline: str,
    extra: list[str] | None = None,
) -> None:
    """Alternate the baseline and evaluate `runs` times, a table row each (`measure(cmd)` ->
    (wall s, peak RSS MiB, CPU s)); `extra`: more evaluate flags."""
    real, synth, schema = make_tables(out)
    py = sys.executable
    evaluate = [py, "-m", "dpsynth_cli", "evaluate", str(real), str(synth), "--schema", str(schema)]
    evaluate += ["--json", *(extra or [])]
    copy = out / "copy.parquet"
    for i in range(runs):
        base, base_rss, base_cpu = measure([py, "-c", baseline, str(real), str(copy), "parquet"])
        wall, rss, cpu = measure(evaluate)
        load = " / ".join(f"{x:.1f}" for x in os.getloadavg())
        print(
            f"| evaluate-diamonds run {i + 1} | {ROWS:,} x 10 | evaluate REAL SYNTH --schema "
            f"{' '.join(extra or [])}| {wall:.2f} | {cpu:.2f} | {rss:.0f} | {base:.2f} / "
            f"{base_cpu:.2f} ({base_rss:.0f}) | {wall / base:.1f} / {cpu / base_cpu:.1f} | {load} "
            f"| <= 10x: {'met' if wall <= 10 * base else 'missed'}; <= 1 GiB: "
            f"{'met' if rss <= 1024 else 'missed'} |",
            flush=True,
        )
    if copy.exists():
        copy.unlink()
