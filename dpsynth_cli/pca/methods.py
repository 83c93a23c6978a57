"""The k-PCA methods on a Stream (Düngler & Sanyal, "An Iterative Algorithm for Differentially
Private k-PCA with Adaptive Noise": Algorithms 1-3, 6-7 and the Appendix G baselines).

Each method takes a zCDP budget rho for its data-touching steps and returns the k components
(rows, orthonormal), eigenvalue estimates and a description with every constant. Privacy of each
step is stated where it is computed; slots (stream.py) make rounds and batches compose in
parallel, so a method costs the rho of one slot. Every constant the paper leaves open is a named
module constant, recorded in the description.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from dpsynth_cli.pca import gauss
from dpsynth_cli.pca.stream import Stream, slot_labels, slot_members
from dpsynth_cli.privacy import noise

# -- constants (recorded in every report) -------------------------------------------------------
FACTOR_BITS = 14  # DP-Gauss-1: factor entries on the grid 2^(ceil(log2 beta) - 14)
SUM_CHUNK = 8192  # rows per block of the exact factor sum (memory d x SUM_CHUNK x r)
K_TAIL = 1.0  # K of Assumption A.4 (Appendix G: K = 1)
A_TAIL = 1  # a of Assumption A.4 (Appendix G: a = 1)
TAU = 0.01  # failure probability tau (Appendix G sets zeta = 0.01 for every method)
RANGE_SIGMAS = 20.0  # PrivRange groups: k_r = RANGE_SIGMAS x the histogram noise's std
RANGE_OCTAVES = 64  # PrivRange bins 2^(l/4) span 64 octaves below the public maximum
MIN_BATCH_GROUPS = 4  # k-DP-PCA batch B >= 4 k_r rows (two per group in each half)
ETA_A = 0.05  # k-DP-PCA learning rate 1/(lam (ETA_A + ETA_GAP t / log n)), Appendix G's form
ETA_GAP = 0.5  # (lambda_i - lambda_{i+1}) / lambda_i assumed by the rate (the true gap is private)
GUARD_SIGMAS = 4.0  # k-DP-PCA: truncation half-width >= 4 std of the centre's noise (+ drift)
CONTRACTION = 0.25  # k-DP-PCA: B makes the guard's noise shrink by this factor per update
# DP-Gauss-2: share of eps for the eigengap's Laplace release (the PTR test); of 0.05, 0.1, 0.2
# and 0.4 on the spiked model (n = 1000, 2000) 0.1 scored best (docs/benchmarks.md, "pca")
GAP_EPS_SHARE = 0.1
PTR_DELTA_SHARE = 0.1  # DP-Gauss-2: share of delta for the PTR test's failure probability
# DP-Power-Method: L iterations (Hardt & Price 2014: L ~ log(d) / gap ratio). Of 3, 5, 10, 20,
# 10 was best or tied on the real tables (3 wins only on the spiked model's huge gap ratio)
POWER_ITERS = 10
OJA_STEPS = 10  # k-DP-Ojas steps per round (batches of about n / (k OJA_STEPS) fresh rows)
OJA_ETA0 = 1.0  # k-DP-Ojas learning rate OJA_ETA0 / (lam (1 + t)): Appendix G's 1/(1+j), scale-free


@dataclass
class MethodResult:
    components: np.ndarray  # (k, d), orthonormal rows
    eigenvalues: np.ndarray  # (k,) private estimates (post-processing of released values)
    info: dict = field(default_factory=dict)
    steps: list[dict] = field(default_factory=list)  # one record per released Gaussian step


def top_k(M: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The k leading eigenvectors (rows) and eigenvalues of a symmetric matrix."""
    vals, vecs = np.linalg.eigh((M + M.T) / 2)
    order = np.argsort(vals)[::-1][:k]
    return vecs[:, order].T.copy(), vals[order]


# -- DP-Gauss-1 (Appendix G; Dwork et al. 2014 Algorithm 1) ---------------------------------------


def _factor_grid(stream: Stream) -> float:
    return 2.0 ** (math.ceil(math.log2(math.sqrt(stream.beta2))) - FACTOR_BITS)


def _corner_squares(stream: Stream, h: float) -> np.ndarray | None:
    """rint(box_j / h)^2, the box's corner in grid units: the largest any rounded row reaches
    (|rint(z_j / h)| = rint(|z_j| / h) <= rint(box_j / h): rint is odd and monotone, and
    sqrt(c) <= 1). None without a box or with a shared factor."""
    if stream.box is None or stream.F.shape[1]:
        return None
    return np.rint(stream.box / h) ** 2


def trace_bound(stream: Stream) -> float:
    """The largest Tr A~ of one summand A~ = h^2 G~ G~^T of second_moment_sum (value units), G~
    the row's factor [sqrt(c) F, sqrt(c) z] rounded to h entrywise. Not beta^2: rounding can lift
    a row past the clip (d = 4, box 1/2 + 0.55 h: Tr A~ = 1.00022 beta^2). Box: Tr A~ <= h^2
    sum_j rint(box_j / h)^2 (_corner_squares), attained by a row at a corner. Otherwise each of
    the d (r + 1) entries moves by <= h/2, so ||G~||_F <= beta + sqrt(d (r + 1)) h / 2 (triangle
    inequality, ||G||_F^2 = c Tr(F F^T + z z^T) <= beta^2) and Tr A~ = ||G~||_F^2; this holds
    with a box too (Stream.of's c keeps c Tr(z z^T) <= beta^2 whenever the box does not).
    With both a box and beta^2 below the box's sum box_j^2 (a declared row norm: the rows are
    also in a ball), both bounds hold and the smaller is used."""
    h = _factor_grid(stream)
    cols = stream.d * (stream.F.shape[1] + 1)
    ball = (math.sqrt(stream.beta2) + math.sqrt(cols) * h / 2) ** 2
    b2 = _corner_squares(stream, h)
    if b2 is not None:
        return min(float(b2.sum()) * h * h, ball)  # the box's: exact (an integer times 2^-2m)
    return ball


def second_moment_sum(stream: Stream) -> tuple[np.ndarray, float, float]:
    """Exact integer sum of the A_i on the grid h^2 (each factor column rounded to h first), with
    its L2 sensitivity (upper triangle, grid units) under add/remove one sample."""
    h = _factor_grid(stream)
    root = np.sqrt(stream.c)
    # in place, one temporary: rows with c = 1 (every tabular row) skip the scaling
    q = stream.Z / h if bool((stream.c >= 1.0).all()) else stream.Z * (root[:, None] / h)
    np.rint(q, out=q)
    from scipy.linalg.blas import dsyrk  # here: scipy is a fifth of every command's start-up

    upper = dsyrk(1.0, q.T, trans=0)  # exact: integer products and sums far below 2^53
    total = np.triu(upper) + np.triu(upper, 1).T
    if stream.F.shape[1]:
        full = stream.c >= 1.0
        fq = np.rint(stream.F / h)
        total += int(full.sum()) * (fq @ fq.T)
        part = np.flatnonzero(~full)
        for lo in range(0, part.size, SUM_CHUNK):  # each row's factor rounded on its own
            r = root[part[lo : lo + SUM_CHUNK]]
            fq = np.rint(stream.F[:, None, :] * (r[None, :, None] / h)).reshape(stream.d, -1)
            total += fq @ fq.T
    b2 = _corner_squares(stream, h)
    sens = trace_bound(stream) / (h * h)  # Tr A~ = ||G~||_F^2 >= ||A~||_F >= the triangle's
    if b2 is not None:  # the box's corners: max of the triangle's norm; the ball's when smaller
        sens = min(sens, math.sqrt((b2.sum() ** 2 + (b2 * b2).sum()) / 2))
    return total, h, sens


def dp_gauss_1(stream: Stream, k: int, rho: float, relation: str, src) -> MethodResult:
    """Sum of the (trace-clipped) A_i plus a symmetric discrete Gaussian matrix, then the top k
    eigenvectors. Sensitivity: the upper triangle of one A_i (second_moment_sum); rho-zCDP."""
    total, h, sens = second_moment_sum(stream)
    iu = np.triu_indices(stream.d)
    f = gauss.relation_factor(relation)
    rel = gauss.noisy_integers(total[iu], f * sens, h * h, rho, src.spawn("gauss1"))
    M = np.zeros((stream.d, stream.d))
    M[iu] = rel.value
    M = M + np.triu(M, 1).T
    comps, vals = top_k(M, k)
    step = {"step": "dp-gauss-1:sum", **rel.describe(), "rho": rho}
    return MethodResult(comps, vals, {"noisy_sum": M, "grid": h}, [step])


# -- DP-Gauss-2 (Appendix G; Dwork et al. 2014 Algorithm 2, made sound by PTR) -------------------


def _exact_sum(stream: Stream) -> np.ndarray:
    """The exact sum of the (trace-clipped) A_i in value units (second_moment_sum): each row's
    factor rounded to h, so one summand's trace is up to trace_bound(stream), not beta^2."""
    total, h, _ = second_moment_sum(stream)
    return total * (h * h)


def _eig_desc(M: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    vals, vecs = np.linalg.eigh((M + M.T) / 2)
    return vals[::-1], vecs[:, ::-1]


def laplace_release(value: np.ndarray, sens: float, eps: Fraction, src) -> tuple[np.ndarray, dict]:
    """Pure eps-DP release of real values of L1 sensitivity `sens`: rounded to a power-of-two
    grid h (about 2^-GRID_BITS of the noise scale), plus h x exact discrete Laplace of scale
    (sens / h + 1) / eps in grid units (+1: the rounding of two neighbouring values)."""
    h = gauss.grid_for(sens / float(eps))
    scale = noise.as_scale((Fraction(sens) / Fraction(h) + 1) / eps)
    units = np.rint(np.asarray(value, dtype=np.float64) / h)
    noisy = (units + noise.discrete_laplace(src, scale, units.size)) * h
    desc = {"distribution": "discrete Laplace on a grid", "grid": h, "scale": float(scale) * h}
    return noisy, {**desc, "l1_sensitivity": sens, "epsilon": float(eps)}


def ptr_floor(noisy_gap: float, desc: dict, delta_p: float, shift: float) -> float:
    """A lower bound on min(gap(D), gap(D')) that fails with probability <= delta_p: the noise
    exceeds t = scale ln(1/delta_p) with probability <= e^(-t/scale) (discrete Laplace tail),
    minus one grid step (rounding) and the neighbour's shift f T (Weyl; T = trace_bound)."""
    t = desc["scale"] * math.log(1.0 / delta_p)
    return noisy_gap - t - desc["grid"] - shift


def projector_sensitivity(shift: float, floor: float) -> float:
    """Frobenius bound on ||V V^T - V' V'^T|| when the gap is >= floor and ||E||_F <= shift."""
    return 2 * math.sqrt(2) * shift / floor


def dp_gauss_2(
    stream: Stream, k: int, eps_gap: Fraction, delta_p: float, rho: float, relation: str, src
) -> MethodResult:
    """Appendix G's DP-Gauss-2: V_k = top-k eigenvectors of X = sum of the trace-clipped A_i,
    a Laplace eigengap g_k, then the projector V_k V_k^T plus a symmetric Gaussian matrix, and
    the top-k eigenvectors of the result.

    Privacy (add/remove one summand A of X; f = 2 under replace): X sums the rows rounded to the
    factor grid, so A is PSD with Tr A <= T = trace_bound(stream) (h^2 sum rint(box/h)^2 on a
    box), which can exceed beta^2 (by at most the rounding: (beta + sqrt(d (r + 1)) h / 2)^2);
    every step uses T.
    - gap: by Weyl every eigenvalue of X + A lies in [lambda_j, lambda_j + T] (A is PSD,
      ||A|| <= Tr A), so lambda_k - lambda_(k+1) moves by at most T: L1 sensitivity
      f T, eps_gap-DP (laplace_release).
    - PTR (propose-test-release; the paper's "resample when g_k <= 0" is not private, as it
      says itself): floor = ptr_floor(...) <= min(gap(D), gap(D')) except with probability
      delta_p. If floor <= 0 the method releases a uniformly random subspace (no data).
    - projector: Davis-Kahan in Yu, Wang & Samworth's form, ||sin Theta||_F <= 2 ||E||_F /
      gap, with ||V V^T - V' V'^T||_F = sqrt(2) ||sin Theta||_F and ||E||_F <= f ||A||_F <= f T
      gives Frobenius (so upper-triangle L2) sensitivity S = 2 sqrt(2) f T / floor
      (projector_sensitivity). gauss.noisy_statistic on the upper triangle: rho-zCDP given a
      passed test, so the step is
      delta_p-approximately rho-zCDP (the ledger adds delta_p to delta).
    Appendix G's Delta_2 = beta^2 (1 + sqrt(2 log(1/delta))/eps) / |g_k - 2(1 + log(1/delta)
    /eps)| mixes units (its offset is not scaled by beta^2); we calibrate from S instead."""
    d = stream.d
    f = gauss.relation_factor(relation)
    shift = f * trace_bound(stream)
    vals, vecs = _eig_desc(_exact_sum(stream))
    gap = vals[k - 1] - (vals[k] if k < d else 0.0)
    g_noisy, gdesc = laplace_release(np.array([gap]), shift, eps_gap, src.spawn("gap"))
    floor = ptr_floor(float(g_noisy[0]), gdesc, delta_p, shift)
    steps = [{"step": "dp-gauss-2:gap", **gdesc}]
    info = {"noisy_gap": float(g_noisy[0]), "ptr_floor": floor, "ptr_passed": floor > 0}
    if floor <= 0:  # test failed: a uniformly random subspace (post-processing, no data)
        q, _ = np.linalg.qr(src.spawn("random").numpy_generator().standard_normal((d, k)))
        return MethodResult(q.T.copy(), np.full(k, np.nan), info, steps)
    iu = np.triu_indices(d)
    proj = vecs[:, :k] @ vecs[:, :k].T
    rel = gauss.noisy_statistic(proj[iu], projector_sensitivity(shift, floor), rho, src.spawn("p"))
    M = np.zeros((d, d))
    M[iu] = rel.value
    comps, info["projector_eigenvalues"] = top_k(M + np.triu(M, 1).T, k)
    steps.append({"step": "dp-gauss-2:projector", **rel.describe(), "rho": rho, "delta": delta_p})
    return MethodResult(comps, np.full(k, np.nan), info, steps)


# -- DP-Power-Method (Appendix G; Hardt & Price 2014) --------------------------------------------


def power_step(XY: np.ndarray, bound: float, rho: float, relation: str, src) -> gauss.GaussRelease:
    """One noisy power iteration W = X Y + G. For Y with orthonormal columns and one PSD A added,
    ||A Y||_F^2 = tr(Y^T A^2 Y) <= ||A||_F^2 <= (Tr A)^2, so the L2 sensitivity is the bound on
    Tr A (x2 under replace): trace_bound, since X sums rounded rows; the product is rounded to
    the grid g (+ sqrt(m) units) and gets a gridded discrete Gaussian: rho-zCDP."""
    sens = gauss.relation_factor(relation) * bound
    return gauss.noisy_statistic(XY, sens, rho, src)


def dp_power(stream: Stream, k: int, rho: float, relation: str, src) -> MethodResult:
    """Appendix G's DP-Power-Method: X = sum of the trace-clipped A_i, then POWER_ITERS noisy
    power iterations Y <- QR(X Y + G_l) from a random orthonormal Y_0 (power_step; each
    rho / POWER_ITERS, composed: rho-zCDP). Appendix G scales the noise by beta alpha with
    ||a||_1 <= alpha (Nicolas et al. 2024's row-L1 condition); since ||a||_1 >= ||a||_2 that is
    never below our beta^2, and the Frobenius bound above proves trace_bound (beta^2 plus the
    factor grid's rounding) sufficient, so no alpha clip.
    Eigenvalue estimates: the Rayleigh quotients diag(Y^T W) of the last iteration (sum units)."""
    X, bound = _exact_sum(stream), trace_bound(stream)
    Y, _ = np.linalg.qr(src.spawn("start").numpy_generator().standard_normal((stream.d, k)))
    rho_it = rho / POWER_ITERS
    steps = []
    for it in range(POWER_ITERS):
        rel = power_step(X @ Y, bound, rho_it, relation, src.spawn(f"it{it}"))
        W = rel.value.reshape(stream.d, k)
        vals = np.einsum("ij,ij->j", Y, W)
        Y, _ = np.linalg.qr(W)
        steps.append({"step": "dp-power:iteration", **rel.describe(), "rho": rho_it})
    order = np.argsort(vals)[::-1]
    return MethodResult(Y[:, order].T.copy(), vals[order], {"iterations": POWER_ITERS}, steps)


# -- deflation with fresh slots (Algorithm 1 / Algorithm 4) --------------------------------------


class Projector:
    """P = I - U^T U for the orthonormal rows U found so far, applied in O(d k) per vector
    (x P = x - (x U^T) U, rows or vectors) instead of the dense d x d product."""

    def __init__(self, d: int) -> None:
        self.U = np.zeros((0, d))

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return x - (x @ self.U.T) @ self.U

    def remove(self, u: np.ndarray) -> None:
        self.U = np.vstack([self.U, u])


def _random_unit(src: noise.RandomSource, P: Projector, d: int) -> np.ndarray:
    """omega_0 = P w / ||P w||, w uniform on the sphere (post-processing randomness)."""
    w = P(src.numpy_generator().standard_normal(d))
    return w / max(np.linalg.norm(w), 1e-300)


def _deflate(stream, k, steps_per_round, n_hat, step_fn, src, halves=1) -> MethodResult:
    """Algorithm 1: k rounds; round i runs `steps_per_round` updates of omega on fresh slots
    (`halves` disjoint slots per update), then P <- P - u u^T."""
    d = stream.d
    slots = k * steps_per_round * halves
    members = slot_members(slot_labels(src.spawn("slots"), stream.n, slots), slots)
    batch = max(n_hat, 1) / slots  # public expected slot size (noisy count / slots)
    P = Projector(d)
    comps, vals, noise_sd, records = [], [], [], []
    for i in range(k):
        w = _random_unit(src.spawn(f"start{i}"), P, d)
        state: dict = {"round": i, "lam": None, "centre": None}
        for t in range(steps_per_round):
            s = (i * steps_per_round + t) * halves
            idx = [members[s + j] for j in range(halves)]
            g, rec = step_fn(stream, P, w, idx, batch, t, state, src.spawn(f"r{i}t{t}"))
            records.extend(rec)
            w_new = P(w + state["eta"] * P(g))
            w = w_new / max(np.linalg.norm(w_new), 1e-300)
        comps.append(w)
        vals.append(state["lam"] or 0.0)
        noise_sd.append(state["noise"])
        P.remove(w)
    U = np.array(comps)
    U, _ = np.linalg.qr(U.T)  # tidy numerical drift (post-processing)
    signs = np.sign(np.sum(U.T * np.array(comps), axis=1))[:, None]
    return MethodResult(U.T * signs, np.array(vals), {"noise_sd": noise_sd}, records)


def _rate(state: dict, g: np.ndarray, t: int, a: float, slope: float) -> None:
    lam = float(np.linalg.norm(g))
    state["lam"] = lam
    state["eta"] = 1.0 / (max(lam, 1e-300) * (a + slope * t))


# -- k-DP-Ojas (Algorithm 3) ----------------------------------------------------------------------


def k_dp_ojas(stream: Stream, k: int, rho: float, relation: str, n_hat: int, src) -> MethodResult:
    """Algorithm 3 in each deflation round, on batches of fresh rows: omega <- omega + eta P
    (sum of clip_beta(P A P omega) + N) / B. clip at beta = the public bound beta^2 >= ||A w||;
    each batch sum is a Gaussian mechanism of L2 sensitivity beta (rho-zCDP per slot)."""
    bound = stream.beta2

    def step(stream, P, w, idx, batch, t, state, s):
        g = P(stream.grads(idx[0], P(w)))
        norms = np.linalg.norm(g, axis=1)
        g = g * np.minimum(1.0, bound / np.maximum(norms, 1e-300))[:, None]
        rel = gauss.noisy_sum(g, bound, rho, relation, s.spawn("sum"))
        mean = rel.value / batch
        state["noise"] = rel.sigma / batch  # per coordinate of the released mean (public)
        _rate(state, mean, t, OJA_ETA0, OJA_ETA0)
        return mean, [{"step": "k-dp-ojas:batch", **rel.describe(), "rho": rho}]

    res = _deflate(stream, k, OJA_STEPS, n_hat, step, src)
    res.info.update({"steps_per_round": OJA_STEPS, "clip": bound})
    return res


# -- k-DP-PCA (Algorithms 1, 2, 6, 7) -------------------------------------------------------------


def priv_range(g: np.ndarray, batch: float, rho: float, relation: str, beta2: float, src):
    """Algorithm 6: top eigenvalue of groups of pairwise differences, mode of a DP histogram over
    the bins [2^(l/4), 2^((l+1)/4)). Groups are random slots; one row changes one group's value,
    i.e. two bins by 1 (L2 sqrt 2; x2 under replace). The bins are the finite public set from
    RANGE_OCTAVES below the largest possible value (values outside go to the end bins), so the
    histogram is a discrete Gaussian vector (rho-zCDP) and its argmax is post-processing."""
    f = gauss.relation_factor(relation)
    sigma_h = f * math.sqrt(2) / math.sqrt(2 * rho)
    groups = max(1, math.ceil(RANGE_SIGMAS * sigma_h))
    members = slot_members(slot_labels(src.spawn("groups"), g.shape[0], groups), groups)
    b_hat = max(1.0, batch / (2 * groups))
    l_hi = math.ceil(4 * math.log2(4 * beta2 * beta2 * max(batch, 1))) + 1
    l_lo = l_hi - 4 * RANGE_OCTAVES
    counts = np.zeros(l_hi - l_lo + 1, dtype=np.int64)
    for rows in members:
        p = rows.size // 2
        lam = 0.0
        if p:
            diff = g[rows[1 : 2 * p : 2]] - g[rows[0 : 2 * p : 2]]
            lam = float(np.linalg.norm(diff, 2) ** 2) / b_hat
        level = l_lo if lam <= 0 else int(np.clip(math.floor(4 * math.log2(lam)), l_lo, l_hi))
        counts[level - l_lo] += 1
    rel = gauss.noisy_integers(counts, f * math.sqrt(2), 1.0, rho, src.spawn("hist"))
    best = int(np.argmax(rel.value)) + l_lo
    desc = {"step": "k-dp-pca:priv_range", **rel.describe(), "rho": rho, "groups": groups}
    return 2.0 ** (best / 4), desc


def priv_mean(g, lam_hat, centre, batch, rho, relation, bound, src, guard=0.0):
    """Algorithm 7's truncated mean: coordinates truncated to centre +- 3 K sqrt(lam) log^a(Bd/tau)
    and the centred sum released with L2 sensitivity (half-width) sqrt(d) (x2 under replace).
    The centre is public: the previous step's released mean (post-processing), or 0 with the
    public bound as half-width on the first step (see docs/privacy.md for why Algorithm 7's
    per-coordinate stability histograms are not used). `guard` (public: the previous step's
    noise scale and movement) widens the half-width so that a poor centre cannot trap the
    iteration: GUARD_SIGMAS x the centre's noise std per coordinate + lam x ||omega change||."""
    d = g.shape[1]
    half = bound
    if centre is not None:
        half = 3 * K_TAIL * math.sqrt(lam_hat) * math.log(max(batch, 2) * d / TAU) ** A_TAIL
        half = max(half, guard)
    if centre is None or half * math.sqrt(d) >= bound:
        # L2 clip at the public bound (||P A P w|| <= Tr A <= beta^2): sensitivity beta^2, never
        # more than the box's half * sqrt(d)
        centre, half = np.zeros(d), bound
        norms = np.maximum(np.linalg.norm(g, axis=1), 1e-300)
        clipped, sens = g * np.minimum(1.0, bound / norms)[:, None], bound
    else:
        clipped, sens = np.clip(g, centre - half, centre + half) - centre, half * math.sqrt(d)
    rel = gauss.noisy_sum(clipped, sens, rho, relation, src.spawn("mean"))
    desc = {"step": "k-dp-pca:priv_mean", **rel.describe(), "rho": rho, "half_width": half}
    return centre + rel.value / batch, desc


def k_dp_pca(stream: Stream, k: int, rho: float, relation: str, n_hat: int, src) -> MethodResult:
    """Algorithm 1 with ModifiedDP-PCA (Algorithm 2): per update, PrivRange on one slot and
    PrivMean on a disjoint slot (both rho: parallel), omega <- P (omega + eta P g) / norm."""
    f = gauss.relation_factor(relation)
    groups = math.ceil(RANGE_SIGMAS * f / math.sqrt(rho))
    # Appendix G's B = sqrt(n), but at least the batch whose PrivMean half (B/2 rows) shrinks
    # the guard: noise std per coordinate half sqrt(d) f / (sqrt(2 rho) B/2) <= CONTRACTION x
    # half / GUARD_SIGMAS. Below it the guard feeds on its own noise and never narrows.
    contract = 2 * GUARD_SIGMAS * f * math.sqrt(stream.d) / (math.sqrt(2 * rho) * CONTRACTION)
    B = max(math.sqrt(max(n_hat, 1)), MIN_BATCH_GROUPS * groups, contract)
    T = max(1, int(max(n_hat, 1) / (k * B)))

    def step(stream, P, w, idx, batch, t, state, s):
        pw = P(w)
        g_range = P(stream.grads(idx[0], pw))
        lam_hat, d1 = priv_range(g_range, batch, rho, relation, stream.beta2, s.spawn("range"))
        g_mean = P(stream.grads(idx[1], pw))
        guard = 0.0
        if state["centre"] is not None:
            moved = float(np.linalg.norm(w - state["w_prev"]))
            guard = GUARD_SIGMAS * state["noise"] + state["lam"] * moved
        mean, d2 = priv_mean(
            g_mean,
            lam_hat,
            state["centre"],
            batch,
            rho,
            relation,
            stream.beta2,
            s.spawn("m"),
            guard,
        )
        state["centre"], state["w_prev"] = mean, w
        state["noise"] = d2["sigma"] / batch
        _rate(state, mean, t, ETA_A, ETA_GAP / math.log(max(n_hat, 3)))
        return mean, [d1, d2]

    res = _deflate(stream, k, T, n_hat, step, src, halves=2)
    res.info.update({"batch": B, "steps_per_round": T})
    return res


CONSTANTS = {
    "FACTOR_BITS": FACTOR_BITS,
    "K": K_TAIL,
    "a": A_TAIL,
    "tau": TAU,
    "RANGE_SIGMAS": RANGE_SIGMAS,
    "RANGE_OCTAVES": RANGE_OCTAVES,
    "MIN_BATCH_GROUPS": MIN_BATCH_GROUPS,
    "ETA_A": ETA_A,
    "ETA_GAP": ETA_GAP,
    "GUARD_SIGMAS": GUARD_SIGMAS,
    "CONTRACTION": CONTRACTION,
    "GAP_EPS_SHARE": GAP_EPS_SHARE,
    "PTR_DELTA_SHARE": PTR_DELTA_SHARE,
    "POWER_ITERS": POWER_ITERS,
    "OJA_STEPS": OJA_STEPS,
    "OJA_ETA0": OJA_ETA0,
    "GRID_BITS": gauss.GRID_BITS,
}
