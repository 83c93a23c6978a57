"""Accuracy benchmark: `python -m benchmarks.accuracy [options]` (see docs/benchmarks.md).

Runs every selected (table, n, eps, method) `--runs` times, writes raw records (raw.jsonl), the
aggregate (summary.json, summary.md) and a plot (w1_vs_eps.png) under --out; `--write-docs`
also puts the summary into docs/benchmarks.md (between this benchmark's markers) and the plot
into docs/img/.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

from benchmarks.accuracy import docs, peers, report, reuse, run, tables

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = ROOT / "benchmarks" / "out" / "accuracy"
QUICK = {"tables": ["smooth-1d", "clustered-2d"], "eps": [1.0], "n": [2000], "runs": 2}


def _csv(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.accuracy", description=__doc__)
    p.add_argument("--tables", type=_csv, default=list(tables.ALL_TABLES))
    p.add_argument(
        "--eps", type=lambda s: [float(x) for x in _csv(s)], default=[0.1, 0.5, 1.0, 2.0]
    )
    p.add_argument("--n", type=lambda s: [int(x) for x in _csv(s)], default=[2000, 20000])
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--mechanisms", type=_csv, default=None, help="ours (default: all)")
    p.add_argument("--peers", type=_csv, default=None, help="default: grid,mst,aim")
    p.add_argument("--quick", action="store_true", help="smoke test: 2 tables, eps 1, n 2000")
    p.add_argument("--out", type=Path, default=None, help=f"default {DEFAULT_OUT}")
    p.add_argument("--jobs", type=int, default=run.default_workers())
    p.add_argument("--time-cap", type=int, default=600, help="seconds per synthesis, 0 = none")
    p.add_argument(
        "--max-n",
        type=lambda s: {k: int(v) for k, v in (kv.split("=") for kv in _csv(s))},
        default={},
        help="METHOD=N,...: run METHOD only for n <= N (e.g. mst=2000,aim=2000)",
    )
    p.add_argument("--resume", action="store_true", help="keep raw.jsonl, run only missing jobs")
    p.add_argument(
        "--reuse-docs",
        type=_csv,
        default=[],
        help="METHOD,...: where this run does not measure METHOD, take its figures from the "
        "block now in docs/benchmarks.md (e.g. mst,aim: no peer environment needed)",
    )
    p.add_argument("--write-docs", action="store_true", help="update docs/benchmarks.md")
    args = p.parse_args(argv)
    if args.quick:
        args.tables, args.eps, args.n, args.runs = (QUICK[k] for k in QUICK)
    if args.out is None:
        args.out = DEFAULT_OUT.with_name("accuracy-quick") if args.quick else DEFAULT_OUT
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    registry = peers.registry()
    ours = [m for m, meth in registry.items() if meth.kind == "ours"]
    peer_names = [m for m, meth in registry.items() if meth.kind == "peer"]
    chosen = (args.mechanisms if args.mechanisms is not None else ours) + (
        args.peers if args.peers is not None else peer_names
    )
    unknown = [m for m in chosen if m not in registry] + [
        t for t in args.tables if t not in tables.ALL_TABLES
    ]
    if unknown:
        print(
            f"unknown: {', '.join(unknown)}; methods: {', '.join(registry)}; "
            f"tables: {', '.join(tables.ALL_TABLES)}",
            file=sys.stderr,
        )
        return 2
    notes: list[str] = []
    selected = []
    for t in args.tables:
        reason = tables.real_available(t) if t in tables.REAL else None
        if reason:
            notes.append(f"table {t} skipped: {reason}")
        else:
            selected.append(t)
    pairs: dict[str, list[str]] = {}
    for t in selected:
        pairs[t] = []
        for m in chosen:
            reason = registry[m].unavailable(tables.dim(t))
            if reason:
                notes.append(f"{m} skipped on {t}: {reason}")
            else:
                pairs[t].append(m)
    for m, cap in args.max_n.items():
        if any(n > cap for n in args.n) and m in chosen:
            notes.append(f"{m} run only for n <= {cap} (--max-n)")
    for note in dict.fromkeys(notes):
        print(f"note: {note}", file=sys.stderr)

    def wanted_n(m: str) -> list[int]:
        return [n for n in args.n if n <= args.max_n.get(m, n)]

    raw_path = args.out / "raw.jsonl"
    previous = run.read_raw(raw_path) if args.resume else []
    if not args.resume and raw_path.exists():
        raw_path.unlink()
    done = {run.job_key(r) for r in previous if r.get("status") == "ok"}
    jobs = [
        job
        for t in selected
        for m in pairs[t]
        for job in run.plan_jobs([t], wanted_n(m), args.eps, [m], args.runs, args.time_cap, done)
    ]
    commit = docs.git_state()
    for job in jobs:
        job["commit"] = commit
    jobs.sort(key=lambda j: -j["n"])
    print(f"{len(jobs)} jobs on {args.jobs} process(es); results in {args.out}", file=sys.stderr)
    args.load_at_start = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    start = time.perf_counter()
    run.execute(jobs, raw_path, args.jobs)
    wall = time.perf_counter() - start

    kept = [m for m in args.reuse_docs if m not in chosen]  # their earlier runs in raw count
    wanted = {
        (t, n, e, m)
        for t in selected
        for m in pairs[t] + kept
        for n in wanted_n(m)
        for e in args.eps
    }
    latest: dict[tuple, dict] = {}  # one record per job: the last success, else the last try
    for r in run.read_raw(raw_path):
        key = run.job_key(r)
        if key[:4] in wanted and r["run"] < args.runs:
            if r["status"] == "ok" or latest.get(key, {}).get("status") != "ok":
                latest[key] = r
    rows = report.aggregate(list(latest.values()))
    args.compute_s = sum(r.get("synth_s", 0.0) + r.get("w1_s", 0.0) for r in latest.values())
    args.commits = sorted({r.get("commit", "commit not recorded") for r in latest.values()})
    if args.reuse_docs:
        rows = carry_over(args, rows, registry, notes)
    order = [m for m in registry if m in chosen or m in args.reuse_docs]
    default = peers.default_mechanism()
    plot = report.plot(rows, order, args.out / "w1_vs_eps.png")
    section = docs.section(args, rows, ours, default, order, notes, wall, registry)
    (args.out / "summary.md").write_text(section)
    (args.out / "summary.json").write_text(json.dumps(rows, indent=1, sort_keys=True))
    print(report.markdown(rows, ours, default, order))
    print(f"\nwall time {wall:.0f} s; summary: {args.out / 'summary.md'}", file=sys.stderr)
    if args.write_docs:
        if plot is not None:
            docs.DOCS_IMG.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(plot, docs.DOCS_IMG)
        print(docs.write(section), file=sys.stderr)
    return 0


def carry_over(args, rows: list[dict], registry: dict, notes: list[str]) -> list[dict]:
    """`rows` plus the docs block's rows of --reuse-docs methods for the cells of this run's
    grid that it did not measure (noted in the section, with the block's commits)."""
    block = reuse.block_text()
    measured = {(r["table"], r["n"], r["eps"], r["method"]) for r in rows if r["runs"]}
    grid = {(t, n, float(e)) for t in args.tables for n in args.n for e in args.eps}
    kinds = {m: registry[m].kind for m in args.reuse_docs}
    old = [
        r
        for r in reuse.rows(args.reuse_docs, kinds, block)
        if (r["table"], r["n"], r["eps"]) in grid
        and (r["table"], r["n"], r["eps"], r["method"]) not in measured
    ]
    carried = sorted({r["method"] for r in old}, key=list(registry).index)
    if carried:
        old_commits = reuse.commits(block)
        notes.append(
            f"not rerun, figures carried over from the previous generated block (measured at "
            f"{' and '.join(old_commits)}; its mean seconds are pooled per method and n): "
            f"{', '.join(carried)}"
        )
        args.commits = sorted(set(args.commits) | {f"{c} (carried over)" for c in old_commits})
    return sorted(
        [r for r in rows if r["runs"] or r["method"] not in kinds] + old,
        key=lambda r: (r["table"], r["n"], r["eps"], r["method"]),
    )


if __name__ == "__main__":
    raise SystemExit(main())
