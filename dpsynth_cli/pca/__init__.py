"""`pca`: differentially private top-k principal directions of a table's numeric columns.

Library entry point: ``run_pca(X_unit, k=, method=, epsilon=, delta=, relation=, source=,
row_norm=)`` with X_unit the complete rows already mapped to [0,1]^d with public bounds
(Domain.to_unit). It returns a ``PcaResult``: components (k x d, unit-cube coordinates: the
coordinates they were computed in), private eigenvalue and explained-variance estimates, the
Ledger, and a JSON-ready description. ``pca.units`` re-decomposes a released covariance in original
column units (post-processing). Never a per-row projection of the private data.

Row norm (``row_norm`` = R, public, declared): every row is projected onto the ball of radius R
around the cube's centre c = (1/2, ..., 1/2) (``clip_to_ball``: x -> c + (x - c) min(1, R /
||x - c||), a per-row map that reads nothing but the row and R, and keeps the row in the cube:
the ball's centre is the cube's). Every bound below that used the box's half-diagonal sqrt(d)/2
for ||x - c|| then uses min(sqrt(d)/2, R) instead (``row_bound``); the budget split, the ledger's
eps and delta and the neighbouring relation are unchanged.

Budget (decided before any data is read; n is private under add/remove):
- laplace-cov (pure eps): noisy count 5%, then mechanisms.moments (S1 30%, S2 70% of the rest).
- Gaussian methods: rho = the largest rho whose CKS conversion is (eps, delta)-DP; count 5% of
  rho (discrete Gaussian), private first moment 15% (the centre), the method 80%. dp-gauss-2
  first sets aside GAP_EPS_SHARE of eps (its pure-eps Laplace eigengap) and PTR_DELTA_SHARE of
  delta (its test's failure probability); rho is then found for what remains.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np

from dpsynth_cli import spectrum
from dpsynth_cli.errors import UsageError
from dpsynth_cli.mechanisms import moments
from dpsynth_cli.mechanisms.count import noisy_count
from dpsynth_cli.pca import gauss, methods
from dpsynth_cli.pca.stream import Stream
from dpsynth_cli.privacy import noise
from dpsynth_cli.privacy.ledger import Ledger, Spend, check_epsilon, rho_for, round_down

METHODS = ("k-dp-pca", "k-dp-ojas", "laplace-cov", "dp-gauss-1", "dp-gauss-2", "dp-power", "auto")
COUNT_SHARE = 0.05
MEAN_SHARE = 0.15
FIRST_SHARE = 0.30  # laplace-cov: S1's share after the count (as synth --dim)


@dataclass
class PcaResult:
    components: np.ndarray  # (k, d) unit-cube coordinates, orthonormal rows
    eigenvalues: np.ndarray  # (k,) private covariance eigenvalue estimates (unit cube)
    explained_variance: list[float | None] | None  # (k,) in [0, 1] (spectrum.explained_ratios)
    centre: np.ndarray  # (d,) private mean (unit cube), or the cube's centre if none released
    ledger: Ledger
    signal: spectrum.SpectrumSignal
    explained_note: str = ""
    description: dict[str, Any] = field(default_factory=dict)
    notices: list[str] = field(default_factory=list)  # for stderr, from released values only
    # the released noisy covariance (unit cube) for the methods that release one (laplace-cov,
    # dp-gauss-1), else None: `pca.units` re-decomposes it in original units
    covariance: np.ndarray | None = None
    total: tuple[float, float] | None = None  # (noisy total variance, its noise sd), unit cube

    @property
    def explained_reason(self) -> str | None:
        """Why a ratio is null (None when every ratio is released)."""
        ev = self.explained_variance
        return None if ev is not None and None not in ev else self.explained_note

    def to_json(self) -> dict[str, Any]:
        return {
            **self.description,
            "components_unit_cube": self.components.tolist(),
            "eigenvalues_unit_cube": [
                None if np.isnan(v) else v for v in self.eigenvalues.tolist()
            ],
            "explained_variance_ratio": self.explained_variance,
            "explained_variance_note": self.explained_note,
            "explained_variance_reason": self.explained_reason,
            "signal": self.signal.to_json(),
            "centre_unit_cube": self.centre.tolist(),
            "privacy": self.ledger.to_json(),
        }


def choose_method(epsilon: float, delta: float, d: int) -> tuple[str, str]:
    """`auto`: from public quantities only (docs/benchmarks.md, "pca")."""
    if delta == 0:
        return "laplace-cov", "--delta 0: pure epsilon-DP needs the Laplace covariance"
    return "dp-gauss-1", (
        "dp-gauss-1 had the best or tied-best captured-variance ratio of the five Gaussian "
        "methods in every measured cell (spiked model of Appendix G.1, sigma 0.001-0.1, n = "
        "200..10^5; real tables, k = 2, 3, eps 0.5-2); k-DP-PCA needs batches of about 10^3 "
        "rows at d = 200 before its adaptive noise pays, dp-gauss-2's test fails on small "
        "eigengaps, dp-power splits its budget over 10 iterations"
    )


def validate(
    k: int, d: int, method: str, epsilon: float, delta: float, row_norm: float | None = None
) -> None:
    if row_norm is not None and not (math.isfinite(row_norm) and row_norm > 0):
        raise UsageError("--row-norm must be a positive number, e.g. --row-norm 2.2")
    if method not in METHODS:
        raise UsageError(f"--method must be one of {', '.join(METHODS)}")
    if not 1 <= k <= d:
        raise UsageError(f"-k must be between 1 and the number of columns ({d})")
    check_epsilon(epsilon)
    gaussian = method not in ("laplace-cov", "auto")
    if gaussian and not (0 < delta < 1):
        raise UsageError(f"--method {method} is (eps, delta)-DP: --delta must be in (0, 1)")
    if method == "laplace-cov" and delta != 0:
        raise UsageError("--method laplace-cov is pure eps-DP: use --delta 0")
    if not (0 <= delta < 1):
        raise UsageError("--delta must be in [0, 1)")


def run_pca(
    X_unit: np.ndarray,
    *,
    k: int,
    method: str,
    epsilon: float,
    delta: float,
    relation: str,
    source: noise.RandomSource,
    row_norm: float | None = None,
) -> PcaResult:
    X = np.clip(np.asarray(X_unit, dtype=np.float64), 0.0, 1.0)
    d = X.shape[1]
    validate(k, d, method, epsilon, delta, row_norm)
    why = "requested"
    if method == "auto":
        method, why = choose_method(epsilon, delta, d)
    eps = round_down(epsilon)
    ledger = Ledger(eps, relation, delta if method != "laplace-cov" else 0.0)
    X = clip_to_ball(X, row_norm)
    if method == "laplace-cov":
        res, centre, total_var, signal, cov = _laplace_cov(X, k, eps, ledger, source, row_norm)
    else:
        res, centre, total_var, signal, cov = _gaussian(
            X, k, method, float(eps), delta, ledger, source, row_norm
        )
    ev, note = spectrum.explained_ratios(signal, total_var)
    if total_var is None:
        note = NO_TOTAL[method]
    description = {
        "method": method,
        "selected_by": why,
        "k": k,
        "d": d,
        "constants": {**methods.CONSTANTS, "COUNT_SHARE": COUNT_SHARE, "MEAN_SHARE": MEAN_SHARE},
        "method_info": {a: b for a, b in res.info.items() if np.ndim(b) == 0},
        "note": "components are private outputs; no per-row projection is released",
        "row_norm": row_norm_json(row_norm, d),
    }
    notice = spectrum.summary(signal, "pca", signal_help(method, delta))
    return PcaResult(
        res.components,
        res.eigenvalues,
        ev,
        centre,
        ledger,
        signal,
        note,
        description,
        [notice] if notice else [],
        cov,
        total_var,
    )


# Why a method leaves explained_variance null: it releases no estimate of the total variance
# (the ratio's denominator), and one would cost budget taken from the directions.
_FOR_RATIOS = (
    "; --method dp-gauss-1 (or laplace-cov with --delta 0) releases a covariance and its ratios"
)
_NO_TRACE = "never the covariance's trace, the total variance a ratio divides by" + _FOR_RATIOS
_STEPS = (
    "releases noisy gradient steps along each direction (its eigenvalue estimates are their "
    "norms), "
)
NO_TOTAL = {
    "dp-gauss-2": "dp-gauss-2 releases a noisy projector onto the top-k subspace, neither "
    "eigenvalues nor the total variance, so no ratio can be formed" + _FOR_RATIOS,
    "dp-power": "dp-power releases noisy products X Y with k directions only (its eigenvalue "
    "estimates are Rayleigh quotients), " + _NO_TRACE,
    "k-dp-ojas": "k-dp-ojas " + _STEPS + _NO_TRACE,
    "k-dp-pca": "k-dp-pca " + _STEPS + _NO_TRACE,
}


def row_bound(d: int, row_norm: float | None) -> float:
    """The public bound on ||x - c|| (unit cube, c the cube's centre): the box's half-diagonal
    sqrt(d)/2, or the declared row norm R when smaller (rows projected by clip_to_ball)."""
    half = math.sqrt(d) / 2
    return half if row_norm is None else min(half, float(row_norm))


def row_norm_json(row_norm: float | None, d: int) -> dict[str, Any] | None:
    if row_norm is None:
        return None
    return {
        "declared": row_norm,
        "box_half_diagonal": math.sqrt(d) / 2,
        "bound_used": row_bound(d, row_norm),
        "rule": "every row x (unit cube) is projected onto the ball ||x - c|| <= R around the "
        "cube's centre c before any statistic; sensitivities use min(R, sqrt(d)/2) where they used "
        "the box's half-diagonal. How many rows were clipped is private and not reported",
    }


def first_moment_bound(d: int, row_norm: float | None) -> float:
    """L2 bound on a row centred at 1/2 and put on the 2^-12 grid (_centred_on_grid): the box's
    corner sqrt(d)/2 (on the grid), or R + sqrt(d) 2^-13 (each coordinate's rounding)."""
    half = math.sqrt(d) / 2
    if row_norm is None:
        return half
    return min(half, row_norm + math.sqrt(d) * 2.0 ** -(moments.STAT_BITS + 1))


def clip_to_ball(X: np.ndarray, row_norm: float | None) -> np.ndarray:
    """Project each row of X (in [0,1]^d) onto the ball of radius `row_norm` around the cube's
    centre, in place (X is the caller's clipped copy). Rows inside are unchanged. Stays in the
    cube: the projection is a convex combination of the row and the centre."""
    if row_norm is None:
        return X
    Z = X - 0.5
    norms = np.sqrt(np.einsum("ij,ij->i", Z, Z))
    out = norms > row_norm
    X[out] = 0.5 + Z[out] * (row_norm / norms[out])[:, None]
    return X


def signal_help(method: str, delta: float) -> list[str]:
    """What would lift the components above the noise, in plain words."""
    ways = []
    if delta == 0:
        ways.append(
            "(eps, delta)-DP with --delta (e.g. --delta 1e-6), which uses dp-gauss-1: its noise "
            "grows like d^1.5 against laplace-cov's d^2.5"
        )
    elif method != "dp-gauss-1":
        ways.append("--method dp-gauss-1 (the most accurate method measured)")
    return ways + ["more rows", "fewer columns (--columns)", "a larger --eps"]


def _laplace_cov(X, k, eps, ledger, source, row_norm=None):
    """Dissertation Algorithm 6 as re-derived in mechanisms.moments (pure eps). With a row norm
    R the moments' L1 sensitivities use ||q||_2 <= R 2^12 + sqrt(d)/2 (moments.ball_radius)."""
    eps_count = round_down(eps * COUNT_SHARE)
    rest = eps - eps_count
    eps_first = round_down(rest * FIRST_SHARE)
    n_hat = noisy_count(X.shape[0], eps_count, source.spawn("count"), ledger)
    radius = None if row_norm is None else moments.ball_radius(row_norm, X.shape[1])
    noisy = moments.release(
        X, eps_first, rest - eps_first, source.spawn("moments"), ledger, radius=radius
    )
    cov = noisy.covariance(n_hat)
    comps, vals = methods.top_k(cov, k)
    total = (float(np.trace(cov)), spectrum.trace_noise(X.shape[1], *noisy.noise(n_hat)))
    signal = spectrum.check(vals, noisy.noise_norm(n_hat), COVARIANCE_VALUES)
    res = methods.MethodResult(comps, vals, {"noisy_rows": n_hat})
    return res, noisy.mean(n_hat), total, signal, cov


def _record(ledger, step, mech, rho, desc, sens):
    noise_desc = {a: b for a, b in desc.items() if a not in ("step", "rho")}
    ledger.record(Spend(step, mech, 0, sens, noise_desc, rho=rho))


def _centred_on_grid(X: np.ndarray) -> np.ndarray:
    """moments.quantise(X) / 2^STAT_BITS for rows already clipped to [0,1]^d, in place (the
    same values: rows centred at 1/2 on the 2^-12 grid), one n x d array instead of five."""
    scale = float(1 << moments.STAT_BITS)
    q = X - 0.5
    q *= scale
    np.rint(q, out=q)
    q /= scale
    return q


def _gaussian(X, k, method, eps, delta, ledger, source, row_norm=None):
    """The Gaussian methods on rows in the cube (and in the ball of radius R = row_norm around
    its centre when declared). Add/remove one row (x2 under replace, gauss.relation_factor):
    - first moment: rows centred at 1/2 on the 2^-12 grid, ||q|| <= row_bound + sqrt(d) 2^-13
      (the grid's rounding; without R the box's corner, sqrt(d)/2, is on the grid);
    - dp-gauss-1: the same rows' outer products, trace bound min(d/4, that bound^2): the box's
      corner or the ball (methods.second_moment_sum takes the smaller sensitivity);
    - the others: rows x - m with m the released centre, ||x - m|| <= ||x - c|| + ||c - m|| <=
      R + ||c - m|| (triangle inequality; m is public), and at most the box's sqrt(sum max(m_j,
      1 - m_j)^2); Stream.beta2 is the smaller square, every method's bound (methods.py)."""
    d = X.shape[1]
    eps_gap, delta_p = Fraction(0), 0.0
    if method == "dp-gauss-2":
        eps_gap, delta_p = round_down(eps * methods.GAP_EPS_SHARE), delta * methods.PTR_DELTA_SHARE
    rho = rho_for(float(Fraction(eps) - eps_gap), delta - delta_p)
    rho_count, rho_mean = rho * COUNT_SHARE, rho * MEAN_SHARE
    rho_main = rho - rho_count - rho_mean
    rel = ledger.relation
    cnt = gauss.noisy_integers(
        np.array([float(X.shape[0])]), 1.0, 1.0, rho_count, source.spawn("count")
    )
    n_hat = max(1, int(cnt.value[0]))
    _record(ledger, "count", "noisy row count", rho_count, cnt.describe(), 1.0)
    q = _centred_on_grid(X)
    first_grid = 2.0**-moments.STAT_BITS
    first_bound = first_moment_bound(d, row_norm)
    s1 = gauss.noisy_sum(q, first_bound, rho_mean, rel, source.spawn("first"), rows_grid=first_grid)
    _record(
        ledger, "first-moment", "noisy sum of centred rows", rho_mean, s1.describe(), s1.sensitivity
    )
    m1 = s1.value / n_hat
    centre = np.clip(0.5 + m1, 0.0, 1.0)
    cov = None
    if method == "dp-gauss-1":
        st = Stream.of(q, min(d / 4, first_bound**2), box=np.full(d, 0.5))
        res = methods.dp_gauss_1(st, k, rho_main, rel, source.spawn("method"))
        cov = res.info.pop("noisy_sum") / n_hat - np.outer(m1, m1)
        res.components, res.eigenvalues = methods.top_k(cov, k)
        sds = (res.steps[0]["sigma"] / n_hat, s1.sigma / n_hat, float(np.linalg.norm(m1)))
        total = (float(np.trace(cov)), spectrum.trace_noise(X.shape[1], *sds))
    else:
        box = np.maximum(centre, 1 - centre)
        beta2 = float((box**2).sum())
        if row_norm is not None:
            beta2 = min(beta2, (row_norm + float(np.linalg.norm(centre - 0.5))) ** 2)
        st = Stream.of(X - centre, beta2, box=box)
        src, total = source.spawn("method"), None
        if method == "dp-gauss-2":
            res = methods.dp_gauss_2(st, k, eps_gap, delta_p, rho_main, rel, src)
            gap = res.steps[0]
            ledger.record(
                Spend("eigengap", "noisy eigengap (PTR test)", eps_gap, gap["l1_sensitivity"], gap)
            )
        elif method == "dp-power":
            res = methods.dp_power(st, k, rho_main, rel, src)
            res.eigenvalues = res.eigenvalues / n_hat
        else:
            fn = methods.k_dp_ojas if method == "k-dp-ojas" else methods.k_dp_pca
            res = fn(st, k, rho_main, rel, n_hat, src)
    gaussian = [r for r in res.steps if "rho" in r]
    sens = gaussian[0].get("l2_sensitivity", 0.0) if gaussian else 0.0
    summary = {"steps": len(gaussian), "first": gaussian[0] if gaussian else {}}
    mech = f"{method} (slots compose in parallel)" if method.startswith("k-") else method
    ledger.record(Spend(method, mech, 0, sens, summary, delta=delta_p, rho=rho_main))
    mean_noise = (s1.sigma / n_hat, float(np.linalg.norm(m1)))
    return res, centre, total, _gaussian_signal(method, res, d, n_hat, mean_noise), cov


COVARIANCE_VALUES = "eigenvalues of the noisy covariance (unit cube)"


def _gaussian_signal(method, res, d, n_hat, mean_noise) -> spectrum.SpectrumSignal:
    """The released values each Gaussian method's directions rest on, against the norm their
    noise reaches (`spectrum`; sigmas from the ledgered steps, all public)."""
    sigma = res.steps[-1].get("sigma", 0.0) if res.steps else 0.0  # the last step's noise
    if method == "dp-gauss-1":
        noise = spectrum.covariance_noise(d, sigma / n_hat, *mean_noise)
        return spectrum.check(res.eigenvalues, noise, COVARIANCE_VALUES)
    if method == "dp-gauss-2":
        if not res.info["ptr_passed"]:
            why = "the noisy eigengap failed its PTR test: the method released a random subspace"
            return spectrum.check(np.full(res.components.shape[0], np.nan), np.nan, "", why)
        what = "eigenvalues of the noisy projector (1 for a direction the noise leaves intact)"
        return spectrum.check(
            res.info["projector_eigenvalues"], spectrum.matrix_norm(sigma, d), what
        )
    if method == "dp-power":
        what = "Rayleigh quotients of the last noisy power iteration (covariance units)"
        return spectrum.check(res.eigenvalues, spectrum.vector_norm(sigma, d) / n_hat, what)
    what = "norm of each round's last noisy mean gradient (covariance units)"
    noise = [spectrum.vector_norm(sd, d) for sd in res.info["noise_sd"]]
    return spectrum.check(res.eigenvalues, noise, what)
