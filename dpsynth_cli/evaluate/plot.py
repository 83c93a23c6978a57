"""`evaluate --plot`: real vs synthetic marginals and a scatter of two columns (matplotlib).

matplotlib is an optional extra (`pip install 'dpsynth-cli[plot]'`); the figure shows raw data, so
it is as private as the input and must not be released.
"""

from __future__ import annotations

import io as bytes_io

import numpy as np

from dpsynth_cli.domain import ColumnSpec
from dpsynth_cli.errors import UsageError
from dpsynth_cli.io import atomic_write_bytes
from dpsynth_cli.privacy.noise import analysis_generator

MAX_SCATTER_POINTS = 20_000


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
    pair: tuple[int, int] | None,
    seed: int | None = None,
    sampled: bool = False,
) -> None:
    """One histogram panel per column, plus a scatter panel for `pair`; written atomically.

    `real` and `synth` are the tables' rows (original units), or uniform samples of them
    (`sampled`, said in the title)."""
    plt = _pyplot()
    rng = analysis_generator(seed)
    panels = len(specs) + (pair is not None)
    fig, axes = plt.subplots(1, panels, figsize=(4 * panels, 3.6), squeeze=False)
    for ax, (j, spec) in zip(axes[0], enumerate(specs), strict=False):
        bins = np.linspace(spec.lower, spec.upper, 41)
        ax.hist(real[:, j], bins=bins, density=True, alpha=0.5, label="real")
        ax.hist(synth[:, j], bins=bins, density=True, alpha=0.5, label="synthetic")
        ax.set_title(spec.name)
        ax.legend(fontsize="small")
    if pair is not None:
        ax = axes[0][-1]
        a, b = pair
        for data, label in ((real, "real"), (synth, "synthetic")):
            shown = data[rng.permutation(data.shape[0])[:MAX_SCATTER_POINTS]]
            ax.scatter(shown[:, a], shown[:, b], s=2, alpha=0.3, label=label)
        ax.set_xlabel(specs[a].name)
        ax.set_ylabel(specs[b].name)
        ax.legend(fontsize="small", markerscale=4)
    title = "real vs synthetic (NOT differentially private: shows raw data)"
    if sampled:
        title += f"\nuniform samples of {real.shape[0]:,} and {synth.shape[0]:,} rows"
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    buffer = bytes_io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    plt.close(fig)
    atomic_write_bytes(path, buffer.getvalue())
