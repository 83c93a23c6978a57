"""Figures of methods not rerun, read back from the generated block of docs/benchmarks.md.

MST and AIM take hours here (and need the heavy peer environment), while a new mechanism of
ours takes minutes. `--reuse-docs METHODS` lets a run measure only what changed: each listed
method's rows (mean ± std, estimator kind, certified lower bound, mean seconds) are parsed from
the block now in the docs, for the cells this run does not measure, and marked as carried over
(with the commits the block names). Seconds exist in the block only pooled per (method, n), so a
carried-over row gets that pooled mean.
"""

from __future__ import annotations

import math
import re

from benchmarks.accuracy import docs, tables

_FIGURE = re.compile(r"^(~?)([0-9.]+)(?: ± ([0-9.]+))?$")


def _split(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _tables(block: str) -> list[list[list[str]]]:
    """Every markdown table of the block, as rows of cells (header first, rule dropped)."""
    out: list[list[list[str]]] = []
    current: list[list[str]] = []
    for line in block.splitlines() + [""]:
        if line.startswith("|"):
            if not line.startswith("|---"):
                current.append(_split(line))
        elif current:
            out.append(current)
            current = []
    return out


def block_text() -> str:
    text = docs.DOCS.read_text()
    return text.split(docs.BEGIN, 1)[1].split(docs.END, 1)[0]


def commits(block: str) -> list[str]:
    """The commits the block says it measured."""
    found = re.search(r"measured at (.*?)\. Last", block)
    return found.group(1).split(" and ") if found else ["commit not recorded"]


def rows(methods: list[str], kinds: dict[str, str], block: str | None = None) -> list[dict]:
    """Aggregate rows (as `report.aggregate` makes them) of `methods` from the docs block."""
    block = block_text() if block is None else block
    runs = int(re.search(r"\((\d+) runs per cell", block).group(1))
    found = _tables(block)
    main = next(t for t in found if "best peer" in t[0])
    lower = next(
        (t for t in found[found.index(main) + 1 :] if t[0][:3] == ["table", "n", "eps"]), []
    )
    timing = next(t for t in found if t[0][0] == "method")
    seconds = {}
    for row in timing[1:]:
        for head, cell in zip(timing[0][1:], row[1:], strict=True):
            if cell != "—":
                seconds[(row[0], int(head.split(":")[0][2:]))] = float(cell.split()[0])
    lower_at = {}
    for row in lower[1:]:
        for head, cell in zip(lower[0][3:], row[3:], strict=True):
            lower_at[(row[0], int(row[1].split()[0]), float(row[2]), head)] = float(cell)
    out = []
    for row in main[1:]:
        table, n_text, eps = row[0], row[1], float(row[2])
        n = int(n_text.split()[0])
        n_actual = int(n_text.split("all ")[1].rstrip(")")) if "all" in n_text else n
        for head, cell in zip(main[0][3:], row[3:], strict=False):
            if head not in methods or cell in ("—", "failed"):
                continue
            sign, mean, std = _FIGURE.match(cell).groups()
            rec = {
                "table": table,
                "n": n,
                "eps": eps,
                "method": head,
                "kind": kinds[head],
                "n_actual": n_actual,
                "d": tables.dim(table),
                "runs": runs,
                "failed": 0,
                "errors": [],
                "mean": float(mean),
                "std": float(std) if std else math.nan,
                "w1_kind": "subsample_estimate" if sign else "exact",
                "synth_s": seconds.get((head, n), math.nan),
                "m_mean": math.nan,
                "carried_over": True,
            }
            if (table, n, eps, head) in lower_at:
                rec["w1_lower"] = lower_at[(table, n, eps, head)]
            out.append(rec)
    return out
