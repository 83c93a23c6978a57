"""The real-tables grid: cells (table, n, eps), seeds, and who runs in each.

Ours run in this process through the library call the CLI makes (`synthesize`, the CLI's
`--seed`), every time; each peer runs in a process of its own (`peer_worker.py`) under a time
cap, and its record (figures, status, CPU seconds) is cached under benchmarks/out, so a rerun
that changes only dpsynth redraws only ours. The floor (the figures between two disjoint halves
of the real n-row sample) is cached too.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import time
import zlib
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np

from benchmarks.real_tables import encode, measure, tables

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "benchmarks" / "out" / "real_tables"
DPMM_PYTHON = ROOT / ".venv-dpmm" / "bin" / "python"
WORKER = Path(__file__).resolve().parent / "peer_worker.py"
PEERS = (  # roughly fastest first: under a time cap the cheap ones are measured first
    "sn-mst",
    "dpmm-mst-uniform",
    "dpmm-privbayes-uniform",
    "dpmm-mst-privtree",
    "dpmm-privbayes-privtree",
    "sn-aim",
    "dpmm-aim-uniform",
    "dpmm-aim-privtree",
)
WALL_FACTOR = 10  # a peer run also ends after this many times its CPU cap in wall time
ONE_CORE = {v: "1" for v in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")}
ONE_CORE |= {"NUMEXPR_NUM_THREADS": "1", "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false"}


@dataclass(frozen=True)
class Cell:
    table: str
    n: int | None  # None: every row
    eps: float

    @property
    def n_label(self) -> str:
        return "all" if self.n is None else str(self.n)

    def key(self, method: str, seed: int) -> str:
        return f"{self.table}_n{self.n_label}_e{self.eps:g}_{method}_s{seed}"


def run_seed(cell: Cell, method: str, seed: int) -> int:
    """A method's seed in a cell (eps written %g: 1 and 1.0 are the same cell)."""
    return zlib.crc32(cell.key(method, seed).encode()) % 2**31


def real_codes(table: tables.Table, n: int | None, seed: int) -> np.ndarray:
    """The real n-row sample of `seed`, cached as .npy (the peers' input)."""
    path = OUT / "inputs" / f"{table.name}_n{'all' if n is None else n}_s{seed}.npy"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        np.save(path, tables.sample_codes(table, n, seed))
    return np.load(path)


def floor(table: tables.Table, n: int | None, seed: int) -> dict:
    path = OUT / "floor" / f"{table.name}_n{'all' if n is None else n}_s{seed}.json"
    if path.exists():
        return json.loads(path.read_text())
    X = real_codes(table, n, seed)
    a, b = measure.halves(X, seed)
    record = {"status": "ok", **measure.figures(a, b, table.specs, seed), "rows": a.shape[0]}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record))
    return record


def ours(table: tables.Table, cell: Cell, mechanism: str, seed: int) -> dict:
    """dpsynth synth --mechanism M --eps E --seed S, as the library call the CLI makes."""
    from dpsynth_cli.domain import value_matrix
    from dpsynth_cli.privacy.noise import RandomSource
    from dpsynth_cli.synth import SynthOptions, synthesize

    text = tables.sample_text(table, cell.n, seed)
    start = time.process_time()
    try:
        result = synthesize(
            text,
            table.specs,
            SynthOptions(epsilon=cell.eps, mechanism=mechanism),
            RandomSource.seeded(run_seed(cell, mechanism, seed)),
        )
    except Exception as exc:  # noqa: BLE001 - a failed run is a record, not a crash
        return {"status": f"error: {type(exc).__name__}: {exc}"[:200]}
    cpu = time.process_time() - start
    Y = value_matrix(result.table, table.specs)
    X = real_codes(table, cell.n, seed)
    return {"status": "ok", "cpu_s": cpu, **measure.figures(X, Y, table.specs, seed)}


def peer_domain(table: tables.Table) -> list[dict]:
    columns = []
    for s in table.specs:
        missing = float(np.floor(s.code_upper)) if s.kind in ("integer", "date") else s.code_upper
        columns.append(
            {
                "name": s.name,
                "type": s.kind,
                "lower": s.lower,
                "upper": s.upper,
                "nullable": s.nullable,
                "levels": len(s.levels or ()),
                "missing_code": missing,
            }
        )
    return encode.peer_domain(columns)


def _cpu_cap(seconds: int) -> None:
    """In the peer's process: SIGXCPU after `seconds` of CPU time, SIGKILL a second later."""
    resource.setrlimit(resource.RLIMIT_CPU, (seconds, seconds + 1))


def peer(table: tables.Table, cell: Cell, name: str, seed: int, cap: int, run: bool) -> dict:
    """The cached record of a peer run; without one, the run (at most `cap` CPU seconds) when
    `run`."""
    path = OUT / "peers" / f"{cell.key(name, seed)}.json"
    if path.exists():
        record = json.loads(path.read_text())
        if not (run and record["status"].startswith("timeout") and record.get("cap", 0) < cap):
            return record  # a time-out under a smaller cap is tried again
    if not run:
        return {"status": "not run (no cached record; --no-peer-runs)"}
    python = str(DPMM_PYTHON) if name.startswith("dpmm") else sys.executable
    if name.startswith("dpmm") and not DPMM_PYTHON.exists():
        return {"status": "not run: .venv-dpmm missing (make .venv-dpmm/.installed)"}
    X = real_codes(table, cell.n, seed)
    work = OUT / "work"
    work.mkdir(parents=True, exist_ok=True)
    codes, out, meta = (work / f"{cell.key(name, seed)}.{e}" for e in ("in.npy", "npy", "meta"))
    np.save(codes, X)
    job = {
        "peer": name,
        "eps": cell.eps,
        "seed": run_seed(cell, name, seed),
        "rows": int(X.shape[0]),  # the peers are given the true count (ours: a noisy one)
        "codes": str(codes),
        "domain": peer_domain(table),
        "out": str(out),
        "meta": str(meta),
    }
    spec = work / f"{cell.key(name, seed)}.job.json"
    spec.write_text(json.dumps(job))
    env = {**os.environ, **ONE_CORE}
    start = time.perf_counter()
    try:
        done = subprocess.run(
            [python, str(WORKER), str(spec)],
            env=env,
            capture_output=True,
            text=True,
            timeout=WALL_FACTOR * cap,  # a machine shared with others: CPU time is the cap
            preexec_fn=partial(_cpu_cap, cap),
        )
    except subprocess.TimeoutExpired:
        # a busy machine, not the peer: tried again by the next run that may run peers
        record = {"status": f"timeout ({WALL_FACTOR * cap} s wall)", "cap": 0}
    else:
        if done.returncode == -signal.SIGXCPU or done.returncode == -signal.SIGKILL:
            record = {"status": f"timeout ({cap} CPU s)", "cap": cap}
        elif done.returncode != 0:
            tail = (done.stderr.strip().splitlines() or ["?"])[-1]
            record = {"status": f"error: {tail}"[:300]}
        else:
            Y = np.load(out)
            cpu = json.loads(meta.read_text())["cpu_s"]
            record = {"status": "ok", "cpu_s": cpu, **measure.figures(X, Y, table.specs, seed)}
    record["wall_s"] = time.perf_counter() - start
    for f in (codes, out, meta, spec):
        f.unlink(missing_ok=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record))
    return record
