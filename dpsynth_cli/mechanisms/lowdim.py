"""`--dim`: low-dimensional synthesis of wide tables through a private subspace (dissertation
ch. 4: Algorithm 5 with Algorithms 6-9, Theorem 4.1, adaptive d' of §4.5, d' = 1 of §4.6).

Steps (each release is a ledger entry; everything after the releases is post-processing):
1. Private first and second moments (`moments.release`: noisy sums on a public grid, no true n),
   with SECOND_MOMENT_SHARE and FIRST_MOMENT_SHARE of the mechanism's epsilon. The covariance and
   the centre m (the private mean) follow with the noisy count.
2. The top d' eigenvectors V of the private covariance: d' fixed by `--dim N`, or chosen by
   `choose_dim` from the noisy spectrum, eps, d and the noisy count (§4.5's rule, d' = 1
   allowed; d' = d means no projection, and the full-dimensional synthesiser runs on the rows).
3. Coordinates a = V^T (x - m). Instead of §4.3's ball of radius R enlarged to a cube of side 2R,
   the box is the exact range of each coordinate over the unit cube, [sum_j min(0, V_jk) - m.V_k,
   sum_j max(0, V_jk) - m.V_k], which depends only on V and m (free) and is never larger.
4. The in-subspace synthesiser (`--mechanism`, default auto) runs on the coordinates rescaled from
   that box to [0,1]^d' with the rest of the epsilon and the same noisy count. The map x -> a is
   fixed by released values, so the composition is sequential (each row is one point in both).
5. Back to R^d: y = m + V a, then the metric projection onto [0,1]^d (coordinate clipping is the
   L-infinity projection, Algorithm 5's last step).

When `--dim auto` does not project (`skip_reason`, decided before any moment is released, from
public quantities only): the table has non-numeric columns, or the private centre the moments
would release is too noisy (CENTRE_NOISE_LIMIT). The full-dimensional mechanism then runs on the
whole epsilon, exactly as `--dim full`. After the moments, the shared rule of `spectrum` says
whether the chosen directions can be told from noise (report and stderr). When `--dim auto`
kept directions and none of them is above the noise, it does not project either: the
full-dimensional mechanism runs on the epsilon the moments left (`inner`'s share), the moments'
spend stays in the ledger, and the report's `dim.fallback` says so. Decided from released
values only (post-processing); measured against `--dim full`, whose marginals mechanism beats a
projection on noise directions (docs/benchmarks.md, "--dim auto against --dim full"). It cannot
be decided before the spend: the eigenvalues it compares are private.

Neighbouring relation: that of the run (add/remove by default); the moments' sensitivities are
in `moments`, the inner mechanism's in its module.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction
from functools import partial
from typing import Any

import numpy as np

from dpsynth_cli import spectrum
from dpsynth_cli.engine.rows import Rows, as_rows
from dpsynth_cli.errors import UsageError
from dpsynth_cli.mechanisms import moments
from dpsynth_cli.mechanisms.base import Mechanism, MechanismRun
from dpsynth_cli.privacy.ledger import Ledger, histogram_sensitivity, round_down
from dpsynth_cli.privacy.noise import RandomSource

# Shares of the mechanism epsilon, chosen by measurement (docs/benchmarks.md, "Wide tables"): at
# d = 30 the covariance's noise, not the in-subspace synthesis, dominates W1, and the projection
# error kept falling up to a 0.6-0.65 share while the first-moment share (0.05-0.15) hardly
# mattered; 3/5 leaves 7/20 for the synthesiser inside the subspace.
SECOND_MOMENT_SHARE = Fraction(3, 5)  # of the mechanism epsilon: the covariance (basis, d')
FIRST_MOMENT_SHARE = Fraction(1, 20)  # the centre
# `--dim auto` skips the moments when each coordinate of the private centre they would release has
# a standard deviation above this (unit cube; `centre_noise`). Every synthetic row is centre + a
# point of the subspace, so the centre's error off the subspace lands in every row. Measured
# (docs/benchmarks.md, "Small wide tables": 78 cells, d = 10-31, n = 442-20,000, eps 0.5-2):
# the 40 cells at <= 0.1 had 0.25-1.06x the W1 of `--dim full` (below 1 in 39); the 38 above,
# 0.63-1.73x (above 1 in 31: diabetes, breast cancer, independent columns from 0.15). The limit
# gives up the wins at 0.11 (0.63x) to stay clear of the losses from 0.15 on.
CENTRE_NOISE_LIMIT = 0.1
# `--dim auto` also skips the moments when the norm the covariance's noise will reach (its S2
# part: public d, eps, the noisy count; `spectrum_noise`) is above this. A direction is told from
# the noise only when its eigenvalue exceeds that norm (`spectrum`); the directions of the
# near-subspace benchmark tables carry 0.02-0.07 (unit cube), less than one column spread
# uniformly over its bounds (1/12). Above it, no kept direction came out above the noise on
# those tables, and the full-dimensional `marginals` mechanism on the whole budget beat the
# projection (docs/benchmarks.md, "--dim auto against --dim full").
SPECTRUM_NOISE_LIMIT = 1 / 12
FALLBACK_RULE = (
    "all columns as --dim full, on the whole mechanism epsilon (no moments released), when the "
    "table has a non-numeric column (boolean, category, date, datetime, nullable) or when each "
    "coordinate of the private centre would have noise sd above "
    f"{CENTRE_NOISE_LIMIT:g} of its range: sqrt(2) (d/2) / (eps_first noisy_rows) under "
    "add/remove, or when the covariance's noise would reach eigenvalues above "
    f"{SPECTRUM_NOISE_LIMIT:.3g} (a uniform column's variance): 2 sd (sqrt(d) + 2 d^(-1/6)) with "
    "sd = sqrt(2) d (d + 1) / (8 eps_second noisy_rows) (public: d, eps, the noisy count); "
    "after the moments, on the epsilon they "
    "left, when none of the kept directions' noisy eigenvalues is above the norm the noise "
    "reaches (module spectrum: released values only)"
)
NUMERIC_KINDS = ("float", "integer")
DIM_RULE = (
    "d' = argmin over 1 <= k <= d of sqrt(max(0, sum_{i>k} noisy eigenvalue_i)) "
    "+ (eps_inner * noisy_rows / sensitivity)^(-1/k) (dissertation §4.5 with the synthesis term "
    "in the L-infinity metric of [0,1]^d, without the L2 box factor sqrt(d/k); k = 1 allowed); "
    "k = d: no projection; none of the k chosen directions' noisy eigenvalues above the norm "
    "the noise reaches (module spectrum): no projection either (the fallback)"
)


def parse_dim(text: str, d: int) -> int | None:
    """`--dim auto|N|full` for d declared columns: N, None for auto, 0 for full."""
    value = text.strip().lower()
    if value == "full":
        return 0
    if d < 2:
        raise UsageError("--dim needs at least two columns")
    if value == "auto":
        return None
    try:
        k = int(value)
    except ValueError:
        raise UsageError(f"--dim '{text}': expected auto, full or a number of dimensions") from None
    if not 1 <= k <= d:
        raise UsageError(f"--dim {k}: must be between 1 and the number of columns ({d})")
    return k


def non_numeric(specs: Sequence[Any]) -> list[str]:
    """Columns the subspace cannot hold: levels, dates, date-times, nullable columns (a
    projection mixes every coordinate, so levels and missing flags would not survive it)."""
    return [s.name for s in specs if s.kind not in NUMERIC_KINDS or s.nullable]


def check_mixed(dim: int | None, specs: Sequence[Any]) -> None:
    """`--dim N` on a table with non-numeric columns is a usage error (before any data is read);
    `--dim auto` falls back instead (`synth`)."""
    others = non_numeric(specs)
    if dim and others:
        raise UsageError(
            f"--dim {dim}: {mixed_reason(others)}: use --dim full (or --dim auto, which falls "
            "back to it), or --columns to choose the numeric columns"
        )


def centre_noise(d: int, epsilon: Fraction, noisy_rows: int, relation: str) -> float:
    """Standard deviation of each coordinate of the private centre (unit cube) the moments would
    release at this epsilon: discrete Laplace of scale first_sensitivity / eps_first grid units
    (sd <= sqrt(2) scale) over the noisy count. Public: d, eps, the relation and a released n."""
    eps_first, _, _ = split(epsilon)
    scale = Fraction(moments.first_sensitivity(d, relation)) / eps_first
    return math.sqrt(2.0) * float(scale) / (max(noisy_rows, 1) * float(1 << moments.STAT_BITS))


def spectrum_noise(d: int, epsilon: Fraction, noisy_rows: int, relation: str) -> float:
    """The norm the covariance's S2 noise reaches with probability about 0.99 (`spectrum.
    matrix_norm`; the noisy mean adds to it after the release): a released eigenvalue below it
    could be the noise's. Public: d, eps, the relation and a released n."""
    _, eps_second, _ = split(epsilon)
    scale = Fraction(moments.second_sensitivity(d, relation)) / eps_second
    unit = float(1 << moments.STAT_BITS)
    sd = math.sqrt(2.0) * float(scale) / (max(noisy_rows, 1) * unit * unit)
    return spectrum.matrix_norm(sd, d)


def skip_reason(d: int, epsilon: Fraction, noisy_rows: int, relation: str) -> str | None:
    """Why `--dim auto` should not project at all, from public quantities only; None if it may."""
    sd = centre_noise(d, epsilon, noisy_rows, relation)
    norm = spectrum_noise(d, epsilon, noisy_rows, relation)
    if sd <= CENTRE_NOISE_LIMIT and norm <= SPECTRUM_NOISE_LIMIT:
        return None
    if sd <= CENTRE_NOISE_LIMIT:
        return (
            f"the private covariance would be too noisy (its noise reaches eigenvalues of "
            f"{norm:.2g}, above {SPECTRUM_NOISE_LIMIT:.3g}, a uniform column's variance) with "
            f"{d} columns at this epsilon and about {noisy_rows} rows; the directions it kept "
            "would be close to random"
        )
    return (
        f"the private centre would be too noisy (each coordinate's noise sd {sd:.2g} of its range, "
        f"above {CENTRE_NOISE_LIMIT:g}) with {d} columns at this epsilon and about {noisy_rows} "
        "rows; every synthetic row would carry its error"
    )


def split(epsilon: Fraction) -> tuple[Fraction, Fraction, Fraction]:
    """(first moments, second moments, inner synthesiser) epsilons; they sum to at most epsilon."""
    second = round_down(epsilon * SECOND_MOMENT_SHARE)
    first = round_down(epsilon * FIRST_MOMENT_SHARE)
    return first, second, epsilon - first - second


def choose_dim(values: np.ndarray, eps_inner: Fraction, noisy_rows: int, relation: str) -> int:
    """§4.5's rule on the noisy spectrum (descending), public and released inputs only; k = d is
    no projection. Two changes, both measured (docs/benchmarks.md, "Wide tables"):

    - Lemma 4.3's private-PCA term 2 k ||A|| is left out: kept, it made `--dim auto` pick d' = 1
      near a 2-D or 3-D subspace of [0,1]^30 (1.6-5x the best fixed d''s W1 - floor); the noise
      moves well-separated top directions far less than that worst case.
    - The synthesis term is (eps n)^(-1/k), without §4.5's sqrt(d/k). That factor scales the
      error of the synthesiser in its cube to the L2 ball of radius sqrt(d); our W1 is in the
      L-infinity metric of [0,1]^d, where an error t along an axis V_i of the subspace box (side
      ||V_i||_1) moves a point by t ||V_i||_1 ||V_i||_inf, which is 1 for a spread or a sparse
      unit vector. With the factor, auto kept all 10 columns of a table of independent columns
      (1.3-1.4x full-dimensional `auto`, 5-10x the best fixed d' = 6); without it, it chose 6.
    """
    d = values.size
    signal = max(float(eps_inner) * max(noisy_rows, 1) / histogram_sensitivity(relation), 1.0)
    tails = np.concatenate([np.cumsum(values[::-1])[::-1][1:], [0.0]])  # sum_{i>k}, k=1..d
    k = np.arange(1, d + 1)
    projection = np.sqrt(np.maximum(tails, 0.0))
    projection[-1] = 0.0
    score = projection + signal ** (-1.0 / k)
    return int(k[np.argmin(score)])


def subspace_box(basis: np.ndarray, centre: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Exact range of each coordinate V_k^T (x - m) over x in [0,1]^d (step 3)."""
    shift = centre @ basis
    return np.minimum(basis, 0).sum(axis=0) - shift, np.maximum(basis, 0).sum(axis=0) - shift


def theorem_terms(
    values: np.ndarray, k: int, eps_inner: Fraction, noisy_rows: int
) -> dict[str, float]:
    """The three terms of Theorem 4.1 / (4.29) at the parameters used, up to absolute constants
    (the noisy spectrum and count stand in for the true ones)."""
    d = values.size
    en = max(float(eps_inner) * max(noisy_rows, 1), 1.0)
    return {
        "projection": math.sqrt(max(float(values[k:].sum()), 0.0)),
        "private_pca": math.sqrt(k * d**2.5 / en),
        "synthesis": math.sqrt(d / k) * en ** (-1.0 / k),
    }


def run(
    X: Rows | np.ndarray,
    *,
    epsilon: Fraction,
    noisy_rows: int,
    relation: str,
    source: RandomSource,
    ledger: Ledger,
    rng: np.random.Generator,
    rows: int | None,
    dim: int | None,
    inner: Mechanism,
) -> MechanismRun:
    """Algorithm 5 with `inner` as the in-subspace synthesiser; `dim` None chooses d' (`synth`
    asks `skip_reason` first)."""
    X = as_rows(X)
    d = X.d
    call = {"noisy_rows": noisy_rows, "relation": relation, "ledger": ledger, "rng": rng}
    eps_first, eps_second, eps_inner = split(epsilon)
    released = moments.release(X, eps_first, eps_second, source.spawn("moments"), ledger)
    centre = released.mean(noisy_rows)
    values, vectors = np.linalg.eigh(released.covariance(noisy_rows))
    spec, vectors = values[::-1], vectors[:, ::-1]
    noise_norm = released.noise_norm(noisy_rows)
    k = dim or choose_dim(spec, eps_inner, noisy_rows, relation)
    signal = spectrum.check(spec[:k], noise_norm, SPECTRUM_VALUES)
    description: dict[str, Any] = {
        "name": "lowdim",
        "algorithm": "dissertation Algorithm 5 (ch. 4) with exact noisy moments",
        "dim": k,
        "dim_chosen_by": "--dim" if dim is not None else DIM_RULE,
        "noisy_spectrum": spec.tolist(),
        "noise_norm": noise_norm,
        "signal": signal.to_json(),
        "epsilon_split": {
            "first_moments": float(eps_first),
            "second_moments": float(eps_second),
            "inner": float(eps_inner),
        },
        "centre_unit_cube": centre.tolist(),
        "centre_noise_sd": centre_noise(d, epsilon, noisy_rows, relation),
        "centre_noise_limit": CENTRE_NOISE_LIMIT,
        "spectrum_noise_limit": SPECTRUM_NOISE_LIMIT,
        "theorem_4_1_terms": theorem_terms(spec, k, eps_inner, noisy_rows),
        "theorem_4_1_note": "E W1 <~ sum of these terms, up to absolute constants",
    }
    if dim is None and (k == d or signal.count == 0):  # no projection: all columns
        full = inner(X, epsilon=eps_inner, source=source.spawn("inner"), rows=rows, **call)
        description["projection"] = "none (d' = d)"
        if k < d:  # every kept direction is the noise's: `--dim full`'s synthesiser instead
            description["projection"] = "none (fallback)"
            spent = float(eps_first + eps_second)
            description["dim_fallback"] = fallback_block(
                noise_reason(k), AFTER, _after_budget(spent, float(epsilon))
            )
        description["inner"] = full.description
        return MechanismRun(full.output, description, full.guarantee)
    basis = vectors[:, :k]
    lo, hi = subspace_box(basis, centre)
    width = hi - lo
    coords = X.map(partial(_to_subspace, centre, basis, lo, width), k)
    sub = inner(coords, epsilon=eps_inner, source=source.spawn("inner"), rows=rows, **call)
    output = sub.output.map(partial(_from_subspace, centre, basis, lo, width), d)
    description["basis"] = basis.T.tolist()
    description["subspace_box"] = {"lower": lo.tolist(), "upper": hi.tolist()}
    description["inner"] = sub.description
    return MechanismRun(output, description, sub.guarantee)


SPECTRUM_VALUES = "the chosen directions' eigenvalues in the noisy covariance (unit cube)"


BEFORE = (
    "before the moments, from declarations and public quantities (d, eps, the noisy count): "
    "no budget spent on them"
)
AFTER = (
    "after the moments, from released values only (the noisy spectrum against the norm its "
    "noise reaches, module spectrum): post-processing, no further cost"
)
WHOLE_BUDGET = "the whole mechanism epsilon (no moments released)"


def noise_reason(k: int) -> str:
    """Why auto synthesised all columns after the moments: its kept directions are noise."""
    which = "the kept direction" if k == 1 else f"none of the {k} kept directions"
    return (
        f"{which} of the private covariance {'is' if k == 1 else 'are'} above the noise "
        "(close to random): a projection on them would lose to the full-dimensional mechanism"
    )


def _after_budget(spent: float, mechanism: float) -> str:
    return (
        f"the epsilon left after the moments: {mechanism - spent:.4g} of the mechanism's "
        f"{mechanism:.4g} ({spent:.4g} went to the moments, in the ledger)"
    )


def mixed_reason(others: Sequence[str]) -> str:
    listed = ", ".join(f"'{n}'" for n in others[:3]) + (", ..." if len(others) > 3 else "")
    return (
        f"the private subspace is for numeric (float, integer) columns, and {listed} "
        f"{'is' if len(others) == 1 else 'are'} not"
    )


def fallback_block(reason: str, decided: str, budget: str = WHOLE_BUDGET) -> dict[str, str]:
    """The report's record of `--dim auto` running without a projection (`synth`, `run`): why,
    when it was decided, and the epsilon the full-dimensional mechanism ran on."""
    return {
        "to": "all columns, as --dim full",
        "reason": reason,
        "decided": decided,
        "mechanism_epsilon": budget,
    }


def report_block(dim_text: str, description: dict[str, Any], d: int) -> dict[str, Any]:
    """The synth report's `dim` block: what was asked, what ran, and why (public)."""
    if "dim_fallback" in description:
        block = {
            "requested": dim_text,
            "used": d,
            "projection": False,
            "fallback": description["dim_fallback"],
        }
        for key in ("dim", "epsilon_split", "signal"):  # after the moments: what they said
            if key in description:
                block["chosen_before_fallback" if key == "dim" else key] = description[key]
        return block
    block: dict[str, Any] = {
        "requested": dim_text,
        "used": description.get("dim", d),
        "projection": description.get("projection") != "none (d' = d)",
        "fallback": None,
    }
    for key in ("centre_noise_sd", "centre_noise_limit", "signal"):
        if key in description:
            block[key] = description[key]
    return block


def notices(description: dict[str, Any], dim_text: str) -> list[str]:
    """What the user should read on stderr about `--dim` (from the run's public description)."""
    if "dim_fallback" in description:
        fallback = description["dim_fallback"]
        budget = fallback.get("mechanism_epsilon", WHOLE_BUDGET)
        on = "the whole budget" if budget == WHOLE_BUDGET else budget
        return [
            f"--dim {dim_text}: synthesised all columns as with --dim full, on {on}: "
            + fallback["reason"]
        ]
    if "signal" not in description or description.get("projection") == "none (d' = d)":
        return []
    found = []
    sd = description["centre_noise_sd"]
    if sd > CENTRE_NOISE_LIMIT:  # only --dim N gets here: auto falls back
        found.append(
            f"--dim {dim_text}: each coordinate of the private centre has noise sd {sd:.2g} of "
            f"its range (above {CENTRE_NOISE_LIMIT:g}), and every synthetic row carries that "
            "error; --dim auto would synthesise all columns instead"
        )
    signal = spectrum.check(
        description["signal"]["released_values"], description["noise_norm"], SPECTRUM_VALUES
    )
    text = spectrum.summary(
        signal,
        f"--dim {dim_text} (the private subspace)",
        ["more rows", "fewer columns (--columns)", "a larger --eps"],
    )
    if text is not None:
        found.append(text + ". The synthetic rows lie around the private centre along them")
    return found


def _to_subspace(
    centre: np.ndarray, basis: np.ndarray, lo: np.ndarray, width: np.ndarray, X: np.ndarray
) -> np.ndarray:
    """Step 3: rows of [0,1]^d to subspace coordinates rescaled from the box to [0,1]^d'."""
    return np.clip(((X - centre) @ basis - lo) / width, 0.0, 1.0)


def _from_subspace(
    centre: np.ndarray, basis: np.ndarray, lo: np.ndarray, width: np.ndarray, U: np.ndarray
) -> np.ndarray:
    """Step 5: synthetic subspace coordinates back to R^d, then clipped onto [0,1]^d."""
    return np.clip(centre + (lo + U * width) @ basis.T, 0.0, 1.0)
