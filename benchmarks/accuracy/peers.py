"""Methods under test: every `dpsynth synth --mechanism` value ("ours") and the peers.

A method is a function `(X_unit, eps, seed, info) -> Y_unit`: X_unit (n, d) in [0,1]^d, the
output synthetic points in [0,1]^d. `info` holds public facts about the run ("n", "d") and a
"detail" dict the method may fill (e.g. the grid's k). `ours` is built from
`dpsynth_cli.synth.MECHANISMS`, so a mechanism added there is benchmarked with no change here.
"""

from __future__ import annotations

import contextlib
import io
import warnings
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

Run = Callable[[np.ndarray, float, int, dict], np.ndarray]

SMARTNOISE_BINS = 32  # bins per column for MST and AIM, on the public bounds [0, 1]


@dataclass(frozen=True)
class Method:
    name: str
    kind: str  # "ours" or "peer"
    run: Run
    note: str
    min_d: int = 1
    needs: str | None = None  # an importable module the method needs (skip if missing)

    def unavailable(self, d: int) -> str | None:
        """None if the method can run on d columns here, else a one-line reason."""
        if d < self.min_d:
            return f"{self.name}: needs at least {self.min_d} columns"
        if self.needs is not None:
            try:
                __import__(self.needs)
            except Exception as exc:  # noqa: BLE001 - any import failure means "skip"
                return f"{self.name}: {self.needs} not importable ({type(exc).__name__}: {exc})"
        return None


def default_mechanism() -> str:
    from dpsynth_cli.synth import SynthOptions

    return SynthOptions(epsilon=1.0).mechanism


# ---- ours: the library exactly as the CLI runs it -----------------------------------------


def _ours(mechanism: str) -> Run:
    def run(X: np.ndarray, eps: float, seed: int, info: dict) -> np.ndarray:
        import pyarrow as pa

        from dpsynth_cli.domain import ColumnSpec
        from dpsynth_cli.privacy.noise import RandomSource
        from dpsynth_cli.synth import SynthOptions, synthesize

        names = [f"x{j}" for j in range(X.shape[1])]
        table = pa.table({name: X[:, j] for j, name in enumerate(names)})
        specs = [ColumnSpec(name, "float", 0.0, 1.0) for name in names]
        options = SynthOptions(epsilon=eps, mechanism=mechanism)
        result = synthesize(table, specs, options, RandomSource.seeded(seed))
        info["detail"]["noisy_rows"] = int(result.noisy_rows)
        described = getattr(getattr(result, "run", None), "description", None) or {}
        for key, value in described.items():  # e.g. the tree depth: numbers only
            if isinstance(value, int | float) and not isinstance(value, bool):
                info["detail"][key] = value
        cols = [result.table.column(name).to_numpy(zero_copy_only=False) for name in names]
        return np.column_stack([np.asarray(c, dtype=np.float64) for c in cols])

    return run


# ---- peer: the eps-DP uniform grid -----------------------------------------------------------


def grid(X: np.ndarray, eps: float, seed: int, info: dict) -> np.ndarray:
    """k = round((eps n)^(1/(d+1))) cells per axis (n treated as public), discrete Laplace noise
    of scale 1/eps on every cell count (add/remove one row changes one count by 1: eps-DP),
    clip at 0, that many points uniform in each cell."""
    from dpsynth_cli.privacy import noise

    n, d = X.shape
    k = max(1, round((eps * n) ** (1.0 / (d + 1))))
    shape = (k,) * d
    cells = np.minimum((X * k).astype(np.int64), k - 1)
    counts = np.bincount(np.ravel_multi_index(tuple(cells.T), shape), minlength=k**d)
    source = noise.RandomSource.seeded(seed)
    z = noise.discrete_laplace(source.spawn("grid"), noise.as_scale(1.0 / eps), k**d)
    noisy = np.clip(counts + z, 0, None)
    rng = source.spawn("post-processing").numpy_generator()
    idx = np.repeat(np.arange(k**d), noisy)
    corner = np.column_stack(np.unravel_index(idx, shape)).astype(np.float64)
    info["detail"]["k"] = k
    return (corner + rng.random((idx.size, d))) / k


# ---- peers: smartnoise-synth MST and AIM -----------------------------------------------------


def _smartnoise(kind: str, options: dict | None = None) -> Run:
    """MST / AIM with public bounds: every column binned into 32 equal bins on [0, 1] by
    snsynth's BinTransformer with declared lower/upper (no preprocessing budget), the default
    delta = 1e-9, n rows sampled, each bin mapped back to a uniform point inside it. `options`
    are extra keyword arguments for the synthesizer's constructor (default: none, snsynth's
    defaults; the wide-table benchmark passes AIM a round limit)."""

    def run(X: np.ndarray, eps: float, seed: int, info: dict) -> np.ndarray:
        import pandas as pd
        from snsynth import Synthesizer
        from snsynth.transform import BinTransformer, TableTransformer

        n, d = X.shape
        # MST/AIM draw selections from numpy's global generator (their noise comes from opendp)
        np.random.seed(seed % 2**32)  # noqa: NPY002
        frame = pd.DataFrame(X, columns=[f"x{j}" for j in range(d)])
        bins = [BinTransformer(bins=SMARTNOISE_BINS, lower=0.0, upper=1.0) for _ in range(d)]
        synth = Synthesizer.create(kind, epsilon=float(eps), **(options or {}))
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")  # AIM prints and warns on every fit
            synth.fit(frame, transformer=TableTransformer(bins), preprocessor_eps=0.0)
            out = synth.sample(n)
        mid = np.asarray(out, dtype=np.float64).reshape(-1, d)  # bin midpoints
        code = np.clip(np.floor(mid * SMARTNOISE_BINS), 0, SMARTNOISE_BINS - 1)
        rng = np.random.default_rng(seed)
        info["detail"]["delta"] = float(synth.delta)
        return (code + rng.random(code.shape)) / SMARTNOISE_BINS

    return run


_GRID_NOTE = "eps-DP uniform grid, k = round((eps n)^(1/(d+1))) per axis, n public"
_SN_NOTE = (
    "smartnoise-synth {kind}: 32 bins per column on the public bounds, preprocessor_eps=0, "
    "delta=1e-9 ((eps, delta)-DP via zCDP), n rows sampled, uniform inside each bin"
)


def registry() -> dict[str, Method]:
    """Every method by name: ours first (from synth.MECHANISMS), then the peers."""
    from dpsynth_cli.synth import MECHANISMS

    default = default_mechanism()
    methods: dict[str, Method] = {}
    for mech in MECHANISMS:
        tag = " (the default)" if mech == default else ""
        note = f"dpsynth synth --mechanism {mech}{tag}: synthesize() with bounds [0,1]"
        methods[mech] = Method(mech, "ours", _ours(mech), note)
    peers = [Method("grid", "peer", grid, _GRID_NOTE)] + [
        Method(kind, "peer", _smartnoise(kind), _SN_NOTE.format(kind=kind.upper()), 2, module)
        for kind, module in (("mst", "snsynth.mst.mst"), ("aim", "snsynth.aim.aim"))
    ]
    for peer in peers:  # a mechanism of ours never hides a peer of the same name
        name = peer.name if peer.name not in methods else f"peer-{peer.name}"
        methods[name] = replace(peer, name=name)
    return methods
