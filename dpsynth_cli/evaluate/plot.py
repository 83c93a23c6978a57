"""`evaluate --plot`: a grid of real vs synthetic panels (matplotlib).

One panel per column (a histogram on the public bounds; a date's axis in dates; a level column's
shares as bars named by level), then the pairs whose 2-way tables differ most, each as two heat
maps (real, synthetic) on the public bins with levels by name, and the pair of --plot-columns
first (a scatter when both are numbers). matplotlib is an optional extra
(`pip install 'dpsynth-cli[plot]'`); the figure shows raw data, so it is as private as the input
and must not be released.
"""

from __future__ import annotations

import io as bytes_io
import math
from typing import Any

import numpy as np

from dpsynth_cli.coltypes import bound_text
from dpsynth_cli.domain import LEVEL_KINDS, ColumnSpec
from dpsynth_cli.errors import UsageError
from dpsynth_cli.evaluate.fidelity import BINS, bin_codes, bin_labels, missing_mask, unit_interval
from dpsynth_cli.io import atomic_write_bytes
from dpsynth_cli.privacy.noise import analysis_generator

MAX_SCATTER_POINTS = 20_000
COLUMNS = 4  # panels per row
WORST_PAIRS = 3  # pairs drawn as heat maps, worst 2-way TVD first
MAX_BARS = 20  # a level column with more levels shows the ones with the largest shares
PANEL = (4.0, 3.2)  # inches per panel
COLOURS = {"real": "tab:blue", "synthetic": "tab:orange"}


def _pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise UsageError("--plot needs matplotlib: pip install 'dpsynth-cli[plot]'") from None
    return plt


def plot_comparison(
    path: str,
    real: np.ndarray,
    synth: np.ndarray,
    specs: list[ColumnSpec],
    report: dict[str, Any],
    pair: tuple[int, int] | None = None,
    seed: int | None = None,
    sampled: bool = False,
) -> None:
    """Draw the grid (module docstring) and write it atomically as PNG.

    `real` and `synth` are the tables' value rows (original units, level codes), or uniform
    samples of them (`sampled`, said in the title); `report` is evaluate's (its worst pairs)."""
    plt = _pyplot()
    names = [s.name for s in specs]
    pairs = [tuple(names.index(c) for c in p["columns"]) for p in _worst(report)]
    if pair is not None:
        pairs = [pair, *[p for p in pairs if set(p) != set(pair)]][:WORST_PAIRS]
    rows = math.ceil(len(specs) / COLUMNS) + math.ceil(2 * len(pairs) / COLUMNS)
    fig, axes = plt.subplots(
        rows, COLUMNS, figsize=(PANEL[0] * COLUMNS, PANEL[1] * rows), squeeze=False
    )
    cells = list(axes.flat)
    for ax, (j, spec) in zip(cells, enumerate(specs), strict=False):
        _column_panel(ax, real[:, j], synth[:, j], spec, report)
    start = math.ceil(len(specs) / COLUMNS) * COLUMNS
    tvds = {frozenset(p["columns"]): p["tvd"] for p in report["pair_tvd"]["pairs"]}
    for k, (a, b) in enumerate(pairs):
        left, right = cells[start + 2 * k], cells[start + 2 * k + 1]
        tvd = tvds.get(frozenset((names[a], names[b])))
        numeric = all(specs[c].kind not in LEVEL_KINDS for c in (a, b))
        if (a, b) == pair and numeric:
            _scatter(left, real, synth, specs, (a, b), seed)
            right.set_visible(False)
        else:
            _heat_maps(fig, (left, right), real, synth, specs, (a, b), tvd)
    used = start + 2 * len(pairs)
    for ax in cells[len(specs) : start] + cells[used:]:
        ax.set_visible(False)
    title = "real vs synthetic (NOT differentially private: shows raw data)"
    if sampled:
        title += f"; uniform samples of {real.shape[0]:,} and {synth.shape[0]:,} rows"
    fig.suptitle(title, fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 0.98))
    buffer = bytes_io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    plt.close(fig)
    atomic_write_bytes(path, buffer.getvalue())


def _worst(report: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in report["pair_tvd"]["pairs"] if p["tvd"] is not None][:WORST_PAIRS]


def _column_panel(
    ax: Any, x: np.ndarray, y: np.ndarray, spec: ColumnSpec, report: dict[str, Any]
) -> None:
    error = report["column_errors"][spec.name]
    measure = "TVD" if error["measure"] == "tvd" else "W1"
    value = "n/a" if error["error"] is None else f"{error['error']:.3g}"
    ax.set_title(f"{spec.name} ({measure} {value})", fontsize=10)
    if spec.kind in LEVEL_KINDS or spec.nullable:
        _bars(ax, x, y, spec)
    else:
        _histogram(ax, x, y, spec)


def _histogram(ax: Any, x: np.ndarray, y: np.ndarray, spec: ColumnSpec) -> None:
    lo, hi = unit_interval(spec)
    if spec.kind in ("integer", "date"):  # whole values per bin, so no bin gets an extra one
        bins = np.arange(lo, hi + 1, max(1, math.ceil((hi - lo) / 40)))
        bins = np.append(bins, hi) if bins[-1] < hi else bins
    else:
        bins = np.linspace(lo, hi, 41)
    for values, label in ((x, "real"), (y, "synthetic")):
        weights = np.full(values.size, 1 / max(values.size, 1))
        clipped = np.clip(values, lo, hi)
        ax.hist(clipped, bins=bins, weights=weights, alpha=0.5, label=label, color=COLOURS[label])
    ax.set_ylabel("share of rows", fontsize=8)
    _date_axis(ax, spec, (spec.lower, spec.upper))
    ax.legend(fontsize="small")


def _date_axis(ax: Any, spec: ColumnSpec, span: tuple[float, float]) -> None:
    """A date or datetime axis labelled with dates (its codes are days or seconds)."""
    if spec.kind not in ("date", "datetime"):
        return
    ticks = np.linspace(*span, 4)
    ax.set_xticks(ticks)
    ax.set_xticklabels(
        [bound_text(t, spec.kind, spec.timezone)[:10] for t in ticks], fontsize=8, rotation=20
    )


def _bars(ax: Any, x: np.ndarray, y: np.ndarray, spec: ColumnSpec) -> None:
    """Shares of each level (or numeric bin, then missing) side by side, named."""
    labels = bin_labels(spec)
    p, q = (np.bincount(bin_codes(v, spec), minlength=len(labels)) / max(v.size, 1) for v in (x, y))
    keep = np.arange(len(labels))
    if len(labels) > MAX_BARS:  # the levels with the largest shares, in declared order
        keep = np.sort(np.argsort(-(p + q))[:MAX_BARS])
    place = np.arange(keep.size)
    ax.bar(place - 0.2, p[keep], 0.4, label="real", color=COLOURS["real"])
    ax.bar(place + 0.2, q[keep], 0.4, label="synthetic", color=COLOURS["synthetic"])
    ax.set_xticks(place)
    shown = [_short(labels[k]) for k in keep]
    ax.set_xticklabels(shown, rotation=45 if keep.size > 4 else 0, ha="right", fontsize=8)
    ax.set_ylabel("share", fontsize=8)
    ax.legend(fontsize="small")


def _heat_maps(
    fig: Any,
    axes: tuple[Any, Any],
    real: np.ndarray,
    synth: np.ndarray,
    specs: list[ColumnSpec],
    pair: tuple[int, int],
    tvd: float | None,
) -> None:
    """The pair's 2-way shares on the public bins, real and synthetic, on one colour scale."""
    a, b = pair
    sizes = [len(bin_labels(specs[c])) for c in pair]
    tables = []
    for rows in (real, synth):
        flat = bin_codes(rows[:, a], specs[a]) * sizes[1] + bin_codes(rows[:, b], specs[b])
        counts = np.bincount(flat, minlength=sizes[0] * sizes[1]).reshape(sizes)
        tables.append(counts / max(rows.shape[0], 1))
    top = max(t.max() for t in tables) or 1.0
    for ax, table, side in zip(axes, tables, ("real", "synthetic"), strict=True):
        image = ax.imshow(table, origin="lower", aspect="auto", vmin=0, vmax=top, cmap="viridis")
        score = "" if tvd is None else f", 2-way TVD {tvd:.3g}"
        ax.set_title(f"{specs[a].name} × {specs[b].name}: {side}{score}", fontsize=9)
        _bin_axis(ax.set_yticks, ax.set_yticklabels, specs[a])
        _bin_axis(ax.set_xticks, ax.set_xticklabels, specs[b], rotate=True)
        ax.set_ylabel(specs[a].name, fontsize=8)
        ax.set_xlabel(specs[b].name, fontsize=8)
    fig.colorbar(image, ax=axes[1], fraction=0.05, label="share of rows")


def _bin_axis(set_ticks: Any, set_labels: Any, spec: ColumnSpec, rotate: bool = False) -> None:
    """Tick labels of a heat map's axis: levels by name; a number's bins by a few edges."""
    labels = bin_labels(spec)
    if spec.kind in LEVEL_KINDS:
        step = max(1, math.ceil(len(labels) / MAX_BARS))
        ticks = np.arange(0, len(labels), step)
        text = [_short(labels[k]) for k in ticks]
    else:
        ticks = np.array([-0.5, BINS / 2 - 0.5, BINS - 0.5])  # the bounds and the middle
        edges = [spec.lower, (spec.lower + spec.upper) / 2, spec.upper]
        if spec.kind in ("date", "datetime"):
            text = [bound_text(e, spec.kind, spec.timezone)[:10] for e in edges]
        else:
            text = [f"{e:.4g}" for e in edges]
        if spec.nullable:
            ticks, text = np.append(ticks, BINS), [*text, "(missing)"]
    set_ticks(ticks)
    set_labels(text, fontsize=7, rotation=45 if rotate else 0)


def _scatter(
    ax: Any,
    real: np.ndarray,
    synth: np.ndarray,
    specs: list[ColumnSpec],
    pair: tuple[int, int],
    seed: int | None,
) -> None:
    rng = analysis_generator(seed)
    a, b = pair
    for data, label in ((real, "real"), (synth, "synthetic")):
        present = ~(missing_mask(data[:, a], specs[a]) | missing_mask(data[:, b], specs[b]))
        shown = data[present][rng.permutation(int(present.sum()))[:MAX_SCATTER_POINTS]]
        ax.scatter(shown[:, a], shown[:, b], s=2, alpha=0.3, label=label, color=COLOURS[label])
    ax.set_xlabel(specs[a].name)
    ax.set_ylabel(specs[b].name)
    ax.set_title(f"{specs[a].name} × {specs[b].name} (--plot-columns)", fontsize=10)
    ax.legend(fontsize="small", markerscale=4)


def _short(text: str, size: int = 14) -> str:
    return text if len(text) <= size else text[: size - 1] + "…"
