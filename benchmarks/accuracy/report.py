"""Aggregate raw records into mean/std per (table, n, eps, method), the ratio of each of our
mechanisms to the best peer, a markdown summary, and plots of W1 against eps."""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path

import numpy as np

TARGET_RATIO = 0.8
CELL = ("table", "n", "eps")


def aggregate(records: list[dict]) -> list[dict]:
    """One row per (table, n, eps, method) over the successful runs."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for rec in records:
        groups[(rec["table"], rec["n"], rec["eps"], rec["method"])].append(rec)
    rows = []
    for (table, n, eps, method), recs in groups.items():
        ok = [r for r in recs if r.get("status") == "ok"]
        w = np.array([r["w1"] for r in ok], dtype=np.float64)
        row = {
            "table": table,
            "n": n,
            "eps": eps,
            "method": method,
            "kind": recs[0]["kind"],
            "n_actual": recs[0].get("n_actual", n),
            "d": recs[0].get("d"),
            "runs": len(ok),
            "failed": len(recs) - len(ok),
            "errors": sorted({r.get("error", "") for r in recs if r.get("status") != "ok"}),
            "mean": float(w.mean()) if ok else math.nan,
            "std": float(w.std(ddof=1)) if len(ok) > 1 else math.nan,
            "w1_kind": "/".join(sorted({r["w1_kind"] for r in ok})) or "-",
            "synth_s": float(np.mean([r["synth_s"] for r in ok])) if ok else math.nan,
            "m_mean": float(np.mean([r["m"] for r in ok])) if ok else math.nan,
        }
        for bound in ("w1_lower", "w1_upper"):
            vals = [r[bound] for r in ok if bound in r]
            if vals:
                row[bound] = float(np.mean(vals))
        rows.append(row)
    return sorted(rows, key=lambda r: (r["table"], r["n"], r["eps"], r["method"]))


def cells(rows: list[dict], ours: list[str]) -> list[dict]:
    """Per (table, n, eps): every method's row, the best peer, and ours / best peer."""
    by_cell: dict[tuple, dict[str, dict]] = defaultdict(dict)
    for row in rows:
        by_cell[tuple(row[k] for k in CELL)][row["method"]] = row
    out = []
    for key in sorted(by_cell):
        methods = by_cell[key]
        peers = {m: r for m, r in methods.items() if r["kind"] == "peer" and r["runs"]}
        best = min(peers, key=lambda m: peers[m]["mean"]) if peers else None
        ratios = {}
        for mech in ours:
            if best is not None and mech in methods and methods[mech]["runs"]:
                ratios[mech] = methods[mech]["mean"] / peers[best]["mean"]
        out.append(dict(zip(CELL, key, strict=True), methods=methods, best=best, ratios=ratios))
    return out


def bound_rows(rows: list[dict], bound: str = "w1_lower") -> list[dict]:
    """The rows whose W1 was estimated, with the mean of a certified bound in place of the
    estimate (for a second table: the bound is free of the subsample's upward bias)."""
    complete: dict[tuple, bool] = defaultdict(lambda: True)  # every method of the cell has it
    for row in rows:
        key = tuple(row[k] for k in CELL)
        complete[key] = complete[key] and bool(row["runs"]) and bound in row
    return [
        dict(row, mean=row[bound], std=math.nan, w1_kind="exact")
        for row in rows
        if complete[tuple(row[k] for k in CELL)]
    ]


def _fmt(row: dict | None) -> str:
    if row is None or not row["runs"]:
        return "—" if row is None else "failed"
    approx = "~" if row["w1_kind"] != "exact" else ""
    std = "" if math.isnan(row["std"]) else f" ± {row['std']:.4f}"
    return f"{approx}{row['mean']:.4f}{std}"


def markdown(
    rows: list[dict], ours: list[str], default: str, method_order: list[str], compare: bool = True
) -> str:
    """Results table (mean ± std of W1 per method); with `compare`, the best peer and ours /
    best peer per cell, and how many cells meet the target."""
    present = [m for m in method_order if any(r["method"] == m for r in rows)]
    ratio_cols = [m for m in ours if m in present] if compare else []
    extra = ["best peer", *[f"{m} / best" for m in ratio_cols]] if compare else []
    head = ["table", "n", "eps", *present, *extra]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * 3 + "---:|" * (len(head) - 3)]
    met: dict[str, list[bool]] = defaultdict(list)  # per mechanism of ours: cell met target?
    for cell in cells(rows, ours):
        methods = cell["methods"]
        n_actual = next(iter(methods.values()))["n_actual"]
        n_text = str(cell["n"]) if n_actual == cell["n"] else f"{cell['n']} (all {n_actual})"
        out = [cell["table"], n_text, f"{cell['eps']:g}", *[_fmt(methods.get(m)) for m in present]]
        if compare:
            out.append(cell["best"] or "—")
        for m in ratio_cols:
            r = cell["ratios"].get(m)
            flag = r is not None and r > TARGET_RATIO
            if r is not None:
                met[m].append(not flag)
            out.append("—" if r is None else f"**{r:.2f}**" if flag else f"{r:.2f}")
        lines.append("| " + " | ".join(out) + " |")
    if not compare:
        return "\n".join(lines)
    counts = "; ".join(
        f"{m}{' (the default)' if m == default else ''}: {sum(met[m])} of {len(met[m])}"
        for m in ratio_cols
    )
    summary = (
        f"Target: {default} (the default) mean W1 <= {TARGET_RATIO} x the best peer's in every "
        f"cell. Cells with a peer where it holds: {counts}. Ratios above {TARGET_RATIO} in bold."
    )
    return summary + "\n\n" + "\n".join(lines)


def timing_markdown(rows: list[dict], method_order: list[str]) -> str:
    """Mean seconds per synthesis run by method and n (all tables and eps pooled)."""
    acc: dict[tuple, list[float]] = defaultdict(list)
    for row in rows:
        if row["runs"]:
            acc[(row["method"], row["n"])].extend([row["synth_s"]] * row["runs"])
    ns = sorted({n for _, n in acc})
    if not ns:
        return "(no successful runs)"
    lines = [
        "| method | " + " | ".join(f"n={n}: mean s (max cell mean)" for n in ns) + " |",
        "|---|" + "---:|" * len(ns),
    ]
    for m in method_order:
        if not any((m, n) in acc for n in ns):
            continue
        vals = []
        for n in ns:
            means = [r["synth_s"] for r in rows if r["method"] == m and r["n"] == n and r["runs"]]
            vals.append(f"{np.mean(acc[(m, n)]):.2f} ({max(means):.2f})" if means else "—")
        lines.append(f"| {m} | " + " | ".join(vals) + " |")
    return "\n".join(lines)


def plot(rows: list[dict], method_order: list[str], path: Path) -> Path | None:
    """W1 against eps (log-log), one panel per (table, n), one line per method; None if no
    matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.lines
        import matplotlib.pyplot as plt
        import matplotlib.ticker
    except ImportError:
        return None
    if not any(r["runs"] for r in rows):
        return None
    tables = sorted({r["table"] for r in rows})
    ns = sorted({r["n"] for r in rows})
    fig, axes = plt.subplots(
        len(tables), len(ns), figsize=(4.2 * len(ns), 2.6 * len(tables)), squeeze=False
    )
    handles: dict = {}
    for i, table in enumerate(tables):
        for j, n in enumerate(ns):
            ax = axes[i][j]
            for method in method_order:
                sel = [r for r in rows if (r["table"], r["n"], r["method"]) == (table, n, method)]
                sel = sorted((r for r in sel if r["runs"]), key=lambda r: r["eps"])
                if not sel:
                    continue
                eps = [r["eps"] for r in sel]
                mean = [r["mean"] for r in sel]
                std = [0.0 if math.isnan(r["std"]) else r["std"] for r in sel]
                color = f"C{method_order.index(method) % 10}"  # one colour per method
                ax.errorbar(eps, mean, yerr=std, marker="o", ms=3, capsize=2, color=color)
                handles[method] = matplotlib.lines.Line2D([], [], color=color, marker="o")
            n_actual = next((r["n_actual"] for r in rows if (r["table"], r["n"]) == (table, n)), n)
            kinds = {r["w1_kind"] for r in rows if (r["table"], r["n"]) == (table, n) and r["runs"]}
            kind = "exact" if kinds == {"exact"} else "~ estimate"
            if kind != "exact" and ("exact" in kinds or any("/" in k for k in kinds)):
                kind = "exact or ~ estimate"
            ax.set_title(f"{table}, n={n_actual} (W1 {kind})", fontsize=9)
            ax.set_xscale("log")
            all_eps = sorted({r["eps"] for r in rows})
            ax.set_xticks(all_eps, [f"{e:g}" for e in all_eps])
            ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
            ax.set_yscale("log")
            ax.set_xlabel("eps", fontsize=8)
            ax.set_ylabel("W1 (L-inf, unit cube)", fontsize=8)
            ax.tick_params(labelsize=7)
            ax.grid(True, which="both", alpha=0.3)
    fig.legend(
        list(handles.values()),
        list(handles),
        loc="upper center",
        ncol=max(1, len(handles)),
        fontsize=9,
    )
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.5 / fig.get_figheight()))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path
