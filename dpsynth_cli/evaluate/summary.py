"""The `evaluate` summary a person reads on stdout: every figure in plain words, the worst column
and pairs named, levels by name (the JSON report, --json, has everything)."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from dpsynth_cli.coltypes import bound_text

PAIRS_SHOWN = 3  # worst pairs named in the summary (the JSON report lists every pair)


def print_evaluation(result: dict[str, Any]) -> None:
    """The evaluate summary, a result: on stdout (so `> out.txt` keeps it), even with -q."""
    out = Console(soft_wrap=True, highlight=False)
    out.print(_column_table(result), markup=False)
    rows = result["rows"]
    out.print(f"rows: real {rows['real']:,}, synthetic {rows['synthetic']:,}", markup=False)
    for line in _figure_lines(result):
        out.print(line, markup=False)


def _column_table(result: dict[str, Any]) -> Table:
    table = Table(title="dpsynth evaluate: NOT differentially private, do not release")
    for name in ("column", "error", "real", "synthetic"):
        table.add_column(name, justify="left" if name == "column" else "right")
    errors = result["column_errors"]
    for name, c in result["per_column"].items():
        error = errors[name]
        label = f"{'TVD' if error['measure'] == 'tvd' else 'W1'} {_fmt(error['error'])}"
        table.add_row(name, label, *_column_sides(c, result["columns"][name]))
    return table


def _column_sides(c: dict[str, Any], declared: dict[str, Any]) -> tuple[str, str]:
    """Real and synthetic: mean and standard deviation of a number (a date's as a date and
    days); of a level column, the level whose share differs most, by name."""
    if "levels" in c:
        level, shares = max(
            c["levels"].items(), key=lambda kv: abs(kv[1]["real"] - kv[1]["synthetic"])
        )
        return tuple(f"{level}: {shares[side]:.1%}" for side in ("real", "synthetic"))
    kind = declared["type"]
    if kind in ("date", "datetime"):
        day = 1.0 if kind == "date" else 86400.0
        return tuple(
            f"mean {_when(c['mean'][side], kind, declared.get('timezone'))}, "
            f"sd {_fmt(_over(c['std'][side], day))} days"
            for side in ("real", "synthetic")
        )
    return tuple(
        f"mean {_fmt(c['mean'][side])}, sd {_fmt(c['std'][side])}" for side in ("real", "synthetic")
    )


def _when(code: float | None, kind: str, timezone: str | None) -> str:
    """A date or datetime code as ISO text (to the minute), as the tables write it."""
    if code is None:
        return "n/a"
    text = bound_text(code, kind, timezone)
    return text if kind == "date" else text[:16]


def _over(x: float | None, unit: float) -> float | None:
    return None if x is None else x / unit


def _figure_lines(result: dict[str, Any]) -> list[str]:
    summary = result["summary"]
    col = summary["column_error"]
    lines = [
        "each column (W1 on the 0-1 scale of its bounds, TVD of a category's level shares): "
        f"worst {_fmt(col['worst'])} ({col['column']}), mean {_fmt(col['mean'])}"
    ]
    lines += _cycle_lines(result)
    pairs = [p for p in result["pair_tvd"]["pairs"] if p["tvd"] is not None]
    if pairs:
        bins = result["pair_tvd"]["bins_per_number"]
        named = ", ".join(f"{_pair(p['columns'])} {_fmt(p['tvd'])}" for p in pairs[:PAIRS_SHOWN])
        lines.append(
            f"each pair of columns (TVD of their 2-way table, numbers in {bins} bins of their "
            f"bounds): worst {named}; mean {_fmt(summary['pair_tvd']['mean'])} over "
            f"{len(pairs)} pairs"
        )
    correlation = result["correlation"] or {}
    corr = [p for p in correlation.get("pairs", []) if p["error"] is not None]
    left_out = _undefined_text(correlation)
    if corr:
        worst = corr[0]
        lines.append(
            f"correlations of numeric columns: largest difference {_fmt(worst['error'])} for "
            f"{_pair(worst['columns'])} (real {_fmt(worst['real'])}, synthetic "
            f"{_fmt(worst['synthetic'])}); mean difference "
            f"{_fmt(summary['correlation_error']['mean'])}" + (f"; {left_out}" if left_out else "")
        )
    elif left_out:
        lines.append(f"correlations of numeric columns: none defined; {left_out}")
    lines.append(
        "whole table, W1 on the 0-1 cube (distance: the largest gap in any column): "
        + _describe_w1(result["w1_unit_cube"])
    )
    if "w1_mixed_metric" in result:
        lines.append(
            "whole table, W1 with levels compared by name (different level: distance 1): "
            + _describe_w1(result["w1_mixed_metric"])
        )
    if "streamed" in result:
        lines.append(
            "the tables hold more rows than evaluate keeps: a column's W1 is the middle of a "
            "proven range, the whole-table W1 comes from samples"
            + (" and a proven range" if "upper" in result["w1_unit_cube"] else "")
            + "; the JSON report (--json) has the ranges"
        )
    return lines


CYCLE_WORDS = {"hour_of_day_tvd": "hour of day", "weekday_tvd": "weekday", "month_tvd": "month"}


def _cycle_lines(result: dict[str, Any]) -> list[str]:
    """A line per date or datetime column: the TVD of its hour-of-day, weekday and month shares
    (a daily cycle lost shows here, not in the column's W1)."""
    lines = []
    for name, c in result["per_column"].items():
        if "cycles" not in c:
            continue
        zone = result["columns"][name].get("timezone")
        clock = f"wall clock in {zone}" if zone else "wall clock"
        figures = ", ".join(f"{CYCLE_WORDS[k]} {_fmt(v)}" for k, v in c["cycles"].items())
        lines.append(f"calendar cycles of {name} (TVD of shares, {clock}): {figures}")
    return lines


def _undefined_text(correlation: dict[str, Any]) -> str:
    """The pairs left out of the correlation figures (undefined: a constant column), said."""
    count = correlation.get("undefined_pairs", 0)
    if not count:
        return ""
    constant = correlation.get("constant_columns", {})
    named = [
        f"{_names(constant[side])} constant in the {side} table"
        for side in ("real", "synthetic")
        if constant.get(side)
    ]
    why = f" ({'; '.join(named)})" if named else ""
    plural = "pair" if count == 1 else "pairs"
    return f"{count} {plural} left out, correlation undefined{why}"


def _names(names: list[str], shown: int = 4) -> str:
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more


def _pair(columns: list[str]) -> str:
    return f"({', '.join(columns)})"


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.4g}"


def _describe_w1(w1: dict[str, Any]) -> str:
    if "exact" in w1:
        return f"{_fmt(w1['exact'])} (exact)"
    parts = []
    if "upper" in w1:
        parts.append(f"between {_fmt(w1['lower'])} and {_fmt(w1['upper'])} (proven bounds)")
    elif "lower" in w1:
        parts.append(f"at least {_fmt(w1['lower'])} (proven, from the columns)")
    if w1.get("skipped"):
        parts.append("the rest skipped (--joint-w1 skip)")
    if "sample" in w1:
        sample = w1["sample"]
        rows = " and ".join(f"{r:,}" for r in sample["rows"])
        parts.append(
            f"between {_fmt(sample['lower'])} and {_fmt(sample['upper'])} on uniform samples of "
            f"{rows} rows (an estimate, not a bound; --joint-w1 full for proven bounds)"
        )
    if "subsample" in w1:
        sub = w1["subsample"]
        size = sub.get("size", 2000)
        text = f"estimate from {size:,}-row samples {_fmt(sub.get('mean'))}"
        floor = sub.get("floor", {}).get("mean")
        if floor is not None:
            text += f" (two samples of the real table alone differ by {_fmt(floor)})"
        if sub.get("outside_certified_bounds"):
            text += (
                ": outside the proven bounds, because samples this small differ by chance; "
                "trust the bounds"
            )
        parts.append(text)
    return "; ".join(parts)
