"""`pca --row-norm R`: the projection onto the ball, each method's calibration to it, privacy
audits with a mutant that skips the projection (the noise still calibrated to R), and the
command end to end (usage errors, the written coordinates, the ledger)."""

from __future__ import annotations

import json
import math
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest

import dpsynth_cli.pca as pca
from dpsynth_cli.mechanisms import moments
from dpsynth_cli.pca import _centred_on_grid, clip_to_ball, first_moment_bound, gauss, run_pca
from dpsynth_cli.pca.stream import Stream
from dpsynth_cli.privacy import noise
from tests.audit import audit
from tests.test_cli_pca import BOUNDS, line_table
from tests.test_cli_pca import pca as run_cli
from tests.test_pca_privacy import RHO, RUNS, check

GAUSSIAN = ("dp-gauss-1", "dp-gauss-2", "dp-power", "k-dp-ojas", "k-dp-pca")


def corners(n: int, d: int, seed: int = 0) -> np.ndarray:
    """Rows at the cube's corners (the farthest from the centre: sqrt(d)/2) and inside."""
    rng = np.random.default_rng(seed)
    X = rng.random((n, d))
    X[: n // 2] = rng.integers(0, 2, (n // 2, d))
    return X


def test_clip_projects_rows_outside_the_ball_onto_it():
    X = np.array([[1.0, 1.0], [0.5, 0.6], [0.0, 0.5], [0.5, 0.5]])
    out = clip_to_ball(X.copy(), 0.2)
    norms = np.linalg.norm(out - 0.5, axis=1)
    assert np.allclose(norms, [0.2, 0.1, 0.2, 0.0])
    assert np.allclose(out[0], 0.5 + 0.2 / math.sqrt(2))  # along its own direction
    assert np.allclose(out[2], [0.3, 0.5])
    assert np.array_equal(out[1], X[1]) and np.array_equal(out[3], X[3])  # inside: unchanged
    Y = clip_to_ball(corners(500, 7), 0.9)
    assert (Y >= 0).all() and (Y <= 1).all()
    assert np.linalg.norm(Y - 0.5, axis=1).max() <= 0.9 * (1 + 1e-12)
    assert clip_to_ball(X.copy(), None) is not None  # None: no projection
    assert np.array_equal(clip_to_ball(X.copy(), None), X)


@pytest.mark.parametrize("method", GAUSSIAN)
def test_every_gaussian_step_sees_rows_within_its_declared_bound(method, monkeypatch):
    """The real run_pca on corner rows with R = 0.4 (box half-diagonal 1.5 at d = 9): every
    noisy_sum's rows and every Stream's rows lie within the bound its noise is calibrated to,
    and that bound is R's, not the box's. Fails if the projection is skipped."""
    d, R = 9, 0.4
    seen: list[tuple[str, float, float]] = []
    real_sum, real_of = gauss.noisy_sum, Stream.of

    def noisy_sum(rows, bound, *a, **kw):
        seen.append(("sum", float(np.linalg.norm(rows, axis=1).max(initial=0)), bound))
        return real_sum(rows, bound, *a, **kw)

    def of(Z, beta2, F=None, box=None):
        st = real_of(Z, beta2, F, box)
        worst = float((st.c * np.einsum("ij,ij->i", Z, Z)).max(initial=0))
        seen.append(("stream", worst, beta2))
        assert bool((st.c == 1).all())  # the projection did the clipping, not the trace clip
        return st

    monkeypatch.setattr(gauss, "noisy_sum", noisy_sum)
    monkeypatch.setattr(Stream, "of", staticmethod(of))
    run_pca(
        corners(2000, d),
        k=2,
        method=method,
        epsilon=1.0,
        delta=1e-6,
        relation="add-remove",
        source=noise.RandomSource.seeded(3),
        row_norm=R,
    )
    first = seen[0]
    assert first[0] == "sum" and first[2] == first_moment_bound(d, R) < 0.41
    stream = [s for s in seen if s[0] == "stream"][0]
    assert stream[2] < 0.6**2  # (R + ||centre - c||)^2 or R'^2, far below the box's 9/4
    for kind, worst, bound in seen:
        assert worst <= bound * (1 + 1e-12), (kind, worst, bound)


def test_ledger_sensitivities_use_the_row_norm():
    """laplace-cov's L1 sensitivities and dp-gauss-1's L2 ones scale with R (d = 16: box half-
    diagonal 2, R = 0.5): S1 from d/2 to sqrt(d) R, S2 from d(d+1)/8 to (d+1) R^2 / 2,
    dp-gauss-1's sum from the corner's sqrt(((d/4)^2 + d/16) / 2) to R^2."""
    X = corners(400, 16)

    def spends(method, delta, rn):
        res = run_pca(
            X,
            k=1,
            method=method,
            epsilon=1.0,
            delta=delta,
            relation="add-remove",
            source=noise.RandomSource.seeded(1),
            row_norm=rn,
        )
        return {e["step"]: e["sensitivity"] for e in res.ledger.to_json()["entries"]}

    box, ball = spends("laplace-cov", 0.0, None), spends("laplace-cov", 0.0, 0.5)
    assert box["moments:first"] == 16 * 0.5  # d h on the box
    assert ball["moments:first"] == pytest.approx(4 * 0.5, rel=3e-3)  # sqrt(d) R (+ rounding)
    assert box["moments:second"] == pytest.approx(16 * 17 / 8)
    assert ball["moments:second"] == pytest.approx(17 * 0.25 / 2, rel=3e-3)  # (d+1) R^2 / 2
    g_box, g_ball = spends("dp-gauss-1", 1e-6, None), spends("dp-gauss-1", 1e-6, 0.5)
    assert g_ball["first-moment"] < 0.26 * g_box["first-moment"] * 1.01
    assert g_box["dp-gauss-1"] == pytest.approx(math.sqrt((16 + 1) / 2), rel=1e-3)  # the corner
    assert g_ball["dp-gauss-1"] == pytest.approx(0.25, rel=1e-2)  # R^2, the ball's trace
    assert spends("laplace-cov", 0.0, 5.0) == box  # R beyond the half-diagonal: the box's


# -- audits: the projection skipped (a mutant) while the noise stays calibrated to R ---------------


def _skip_projection(monkeypatch):
    monkeypatch.setattr(pca, "clip_to_ball", lambda X, row_norm: X)


def gaussian_first_moment(X: np.ndarray, R: float, tag: str) -> np.ndarray:
    """RUNS releases of the Gaussian methods' first moment of the rows X (unit cube, d = 1): the
    real projection (pca.clip_to_ball, looked up at call time so a mutant replaces it), the
    real grid (_centred_on_grid), bound (first_moment_bound) and noisy_sum calibration."""
    q = _centred_on_grid(pca.clip_to_ball(X.copy(), R))
    bound = first_moment_bound(1, R)
    g = gauss.grid_for(bound / math.sqrt(2 * RHO))
    total = np.full(RUNS, np.rint(q / g).sum())
    src = noise.RandomSource.seeded(21).spawn(tag)
    return gauss.noisy_integers(total, bound / g + 0.5, g, RHO, src).value


@pytest.mark.parametrize("mutant", [False, True])
def test_gaussian_first_moment_audit_with_row_norm(mutant, monkeypatch):
    """Neighbours differ by a row at the cube's corner (distance 1/2 > R = 0.1): projected, it
    moves the sum by R; the mutant releases it unprojected with noise for R and its sampled
    privacy profile exceeds the declared one."""
    if mutant:
        _skip_projection(monkeypatch)
    R = 0.1
    X = np.full((20, 1), 0.55)
    base = gaussian_first_moment(X, R, "b")
    plus = gaussian_first_moment(np.vstack([X, [[1.0]]]), R, "p")
    sigma = first_moment_bound(1, R) / math.sqrt(2 * RHO)
    worst = check(base, plus, first_moment_bound(1, R), sigma)
    assert (worst > 0.0) if mutant else (worst <= 0.0)


@pytest.mark.parametrize("mutant", [False, True])
def test_laplace_cov_moments_audit_with_row_norm(mutant, monkeypatch):
    """laplace-cov's S1 (mechanisms.moments) at eps = 1 with the ball's L1 sensitivity (d = 1:
    R 2^12 + 1/2 grid units): the audit's lower bound on eps stays within 1; the mutant
    (projection skipped) exceeds it."""
    if mutant:
        _skip_projection(monkeypatch)
    R, eps = 0.1, Fraction(1)
    s1 = moments.first_sensitivity(1, "add-remove", moments.ball_radius(R, 1))
    assert s1 < moments.first_sensitivity(1, "add-remove") / 4

    def sample(X, tag):
        sums = moments.MomentSums.of(pca.clip_to_ball(X.copy(), R)).first[0]
        src = noise.RandomSource.seeded(5).spawn(tag)
        scale = noise.as_scale(Fraction(s1) / eps)
        return sums + noise.discrete_laplace(src, scale, 20_000)

    X = np.full((5, 1), 0.5)
    result = audit(sample(X, "a"), sample(np.vstack([X, [[1.0]]]), "b"))
    if mutant:
        result.assert_exceeds(1.0)
    else:
        result.assert_within(1.0)


def test_moments_ball_sensitivities_cover_adversarial_rows():
    """Brute force over rows on the ball's surface (and their quantisation): S1's L1 and S2's
    upper-triangle L1 (add/remove; replace: the difference of two rows) stay within the ball's
    sensitivities."""
    rng = np.random.default_rng(2)
    d, R = 6, 0.3
    radius = moments.ball_radius(R, d)
    worst1 = worst2 = worst_r = 0.0
    iu = np.triu_indices(d)
    for _ in range(2000):
        v = rng.standard_normal((2, d))
        v[:, : rng.integers(1, d + 1)] = np.sign(v[:, :1])  # equal-magnitude rows: the L1 worst
        v *= R / np.linalg.norm(v, axis=1, keepdims=True)
        q = moments.quantise(0.5 + v)
        worst1 = max(worst1, np.abs(q[0]).sum())
        worst2 = max(worst2, np.abs(np.outer(q[0], q[0])[iu]).sum())
        worst_r = max(worst_r, np.abs((np.outer(q[0], q[0]) - np.outer(q[1], q[1]))[iu]).sum())
    assert worst1 <= moments.first_sensitivity(d, "add-remove", radius)
    assert worst2 <= moments.second_sensitivity(d, "add-remove", radius)
    assert worst_r <= moments.second_sensitivity(d, "replace", radius)
    assert worst2 > 0.9 * moments.second_sensitivity(d, "add-remove", radius)  # nearly tight


# -- the command --------------------------------------------------------------------------------


def test_category_boolean_and_date_columns_are_one_usage_error_naming_them(runner, tmp_path):
    src = tmp_path / "t.csv"
    src.write_text("a,b,c,d\n1,x,true,2020-01-01\n2,y,false,2020-02-01\n")
    schema = tmp_path / "s.json"
    schema.write_text(
        json.dumps(
            {
                "columns": {
                    "a": {"type": "float", "lower": 0, "upper": 10},
                    "b": {"type": "category", "levels": ["x", "y"]},
                    "c": {"type": "boolean"},
                    "d": {"type": "date", "lower": "2020-01-01", "upper": "2021-01-01"},
                }
            }
        )
    )
    out = tmp_path / "p.csv"
    result = run_cli(runner, src, "--eps", 1, "--schema", schema, "-k", 1, "-o", out)
    assert result.exit_code == 2, result.output
    err = result.stderr.strip()
    assert len(err.splitlines()) == 1
    assert "'b' is category, 'c' is boolean, 'd' is date" in err and "--columns" in err
    assert not out.exists()


@pytest.mark.parametrize("delta", ["0", "1e-6"])
def test_row_norm_end_to_end_and_original_units(runner, tmp_path, delta):
    """--row-norm through the command: the report states R and the bound used, the ledger's
    eps is unchanged; --units original writes the covariance's directions in column units."""
    src = line_table(tmp_path)
    out = tmp_path / "pcs.csv"
    args = ("--eps", 1, *BOUNDS, "-k", 2, "--delta", delta, "--row-norm", 0.5)
    result = run_cli(runner, src, *args, "--units", "original", "-o", out)
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "pcs.csv.report.json").read_text())
    assert report["row_norm"]["declared"] == 0.5 and report["row_norm"]["bound_used"] == 0.5
    assert report["privacy"]["total_epsilon"] <= 1.0 + 1e-9
    table = pd.read_csv(out)
    assert table["coordinates"].tolist() == ["original", "original"]
    assert "eigenvalue_original_units" in table.columns
    first = table[["a", "b", "c"]].to_numpy()[0]
    direction = np.array([4, 0.4, -4]) / np.linalg.norm([4, 0.4, -4])  # the line, column units
    assert abs(first @ direction) > 0.99
    assert np.allclose(np.array(report["components_original_units"]), table[["a", "b", "c"]])


@pytest.mark.parametrize("method", ["k-dp-pca", "dp-power"])
def test_null_ratios_say_why(runner, tmp_path, method):
    src = line_table(tmp_path, 5000)
    out = tmp_path / "pcs.csv"
    args = ("--eps", 1, *BOUNDS, "-k", 1, "--delta", "1e-6", "--method", method, "-o", out)
    assert run_cli(runner, src, *args).exit_code == 0
    report = json.loads((tmp_path / "pcs.csv.report.json").read_text())
    assert report["explained_variance_ratio"] is None
    reason = report["explained_variance_reason"]
    assert reason.startswith(method) and "total variance" in reason and "dp-gauss-1" in reason
    assert pd.read_csv(out)["explained_variance"].isna().all()
