"""Run the accuracy grid: jobs (table, n, eps, method, run) -> raw JSON lines -> summary.

Each job draws the table, runs one method with a seed derived from the job, and measures the
W1 (L-infinity, unit cube) between the table and the output: exact when n*m <= 10^7, else
`w1_summary`'s subsample estimate with the certified bracket (each record says which).
"""

from __future__ import annotations

import json
import os
import signal
import time
import zlib
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor, as_completed
from functools import cache
from multiprocessing import get_context
from pathlib import Path

import numpy as np

EXACT_MAX_PAIRS = 10**7


class _TimeCap(Exception):
    pass


def _on_alarm(signum: int, frame: object) -> None:
    raise _TimeCap()


def job_key(job: dict) -> tuple:
    return (job["table"], job["n"], float(job["eps"]), job["method"], job["run"])


def job_seed(job: dict) -> int:
    """Derived from the job alone (eps written as %g, so 1 and 1.0 give the same seed)."""
    text = f"{job['table']}|{job['n']}|{float(job['eps']):g}|{job['method']}|{job['run']}"
    return zlib.crc32(text.encode()) + 1_000_003 * job["run"]


def w1_record(X: np.ndarray, Y: np.ndarray, seed: int) -> dict:
    """Exact W1 when affordable, else the subsample estimate plus the certified bracket."""
    from dpsynth_cli.evaluate.w1 import w1_exact, w1_summary

    n, m = X.shape[0], Y.shape[0]
    if n * m <= EXACT_MAX_PAIRS or X.shape[1] == 1:
        return {"w1": w1_exact(X, Y, max_pairs=max(EXACT_MAX_PAIRS, n * m)), "w1_kind": "exact"}
    rng = np.random.default_rng(seed)
    s = w1_summary(X, Y, exact_max_pairs=EXACT_MAX_PAIRS, rng=rng, floor=False)
    return {
        "w1": s["subsample"]["mean"],
        "w1_kind": "subsample_estimate",
        "w1_lower": s["lower"],
        "w1_upper": s["upper"],
        "w1_subsample_std": s["subsample"]["std"],
        "w1_subsample_size": s["subsample"]["size"],
    }


@cache
def table_floor(name: str, n: int) -> float:
    """The subsample estimate's floor for a table: a function of the table alone, so computed
    once per worker process rather than once per (method, eps, run) job."""
    from benchmarks.accuracy import tables
    from dpsynth_cli.evaluate.w1 import w1_subsample_floor

    X = tables.load(name, n).X
    return w1_subsample_floor(X, 2000, 5, np.random.default_rng(zlib.crc32(name.encode()) + n))[0]


def run_job(job: dict) -> dict:
    """One (table, n, eps, method, run); errors and time-outs are recorded, never raised."""
    from benchmarks.accuracy import peers, tables

    table = tables.load(job["table"], job["n"])
    X = table.X
    method = peers.registry()[job["method"]]
    seed = job_seed(job)
    info = {"n": X.shape[0], "d": X.shape[1], "detail": {}}
    out = dict(job, n_actual=int(X.shape[0]), d=int(X.shape[1]), kind=method.kind, seed=seed)
    cap = int(job.get("time_cap") or 0)
    previous = signal.signal(signal.SIGALRM, _on_alarm) if cap else None
    start = time.perf_counter()
    try:
        if cap:
            signal.alarm(cap)
        try:
            Y = np.asarray(method.run(X, float(job["eps"]), seed, info), dtype=np.float64)
        finally:
            if cap:
                signal.alarm(0)
                signal.signal(signal.SIGALRM, previous)
        out["synth_s"] = time.perf_counter() - start
        out["m"] = int(Y.shape[0])
        out["detail"] = info["detail"]
        if Y.shape[0] == 0:
            return dict(out, status="error", error="empty output")
        if Y.min() < 0.0 or Y.max() > 1.0:
            return dict(out, status="error", error="output outside the unit cube")
        w_start = time.perf_counter()
        out.update(w1_record(X, Y, seed))
        out["w1_s"] = time.perf_counter() - w_start
        if out["w1_kind"] == "subsample_estimate":
            out["w1_subsample_floor"] = table_floor(job["table"], job["n"])
        out["status"] = "ok"
    except _TimeCap:
        out.update(status="timeout", synth_s=time.perf_counter() - start, error=f"over {cap} s")
    except Exception as exc:  # noqa: BLE001 - one failing peer must not stop the grid
        out.update(status="error", error=f"{type(exc).__name__}: {exc}"[:300])
    return out


def read_raw(path: Path) -> list[dict]:
    if not path.exists():
        return []
    with path.open() as fh:
        return [json.loads(line) for line in fh if line.strip()]


def execute(jobs: list[dict], raw_path: Path, workers: int, progress: bool = True) -> list[dict]:
    """Run the jobs (in `workers` processes), appending each record to raw_path as it ends."""
    raw_path.parent.mkdir(parents=True, exist_ok=True)
    records: list[dict] = []
    start = time.perf_counter()
    with raw_path.open("a") as fh:

        def keep(rec: dict) -> None:
            records.append(rec)
            fh.write(json.dumps(rec, sort_keys=True) + "\n")
            fh.flush()
            if progress:
                w1 = f"{rec['w1']:.5f} ({rec['w1_kind']})" if "w1" in rec else rec.get("error")
                print(
                    f"[{len(records)}/{len(jobs)} {time.perf_counter() - start:6.0f}s] "
                    f"{rec['table']} n={rec['n']} eps={rec['eps']} {rec['method']} "
                    f"run {rec['run']}: {rec['status']} {w1}",
                    flush=True,
                )

        if workers <= 1:
            for job in jobs:
                keep(run_job(job))
            return records
        ctx = get_context("spawn")  # no fork of a parent that may have imported jax / opendp
        with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
            futures = [pool.submit(run_job, job) for job in jobs]
            for fut in as_completed(futures):
                keep(fut.result())
    return records


def plan_jobs(
    tables: Iterable[str],
    ns: Iterable[int],
    epsilons: Iterable[float],
    methods: Iterable[str],
    runs: int,
    time_cap: int,
    skip: set[tuple],
) -> list[dict]:
    """Every job not already done, the largest n first (they take longest)."""
    jobs = [
        {"table": t, "n": n, "eps": float(e), "method": m, "run": r, "time_cap": time_cap}
        for n in sorted(set(ns), reverse=True)
        for t in tables
        for e in epsilons
        for m in methods
        for r in range(runs)
    ]
    return [j for j in jobs if job_key(j) not in skip]


def default_workers() -> int:
    return max(1, min(2, os.cpu_count() or 1))
