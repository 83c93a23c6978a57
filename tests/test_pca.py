"""pca: validation, every implemented method on structured data, ledger, grid, column units."""

from __future__ import annotations

import numpy as np
import pytest

from dpsynth_cli.domain import ColumnSpec, Domain
from dpsynth_cli.errors import UsageError
from dpsynth_cli.pca import gauss, run_pca
from dpsynth_cli.privacy import noise


def table(n=4000, d=6, seed=0):
    rng = np.random.default_rng(seed)
    Y = rng.standard_normal((n, 2)) @ rng.standard_normal((2, d)) * 0.08
    X = np.clip(0.5 + Y + 0.03 * rng.standard_normal((n, d)), 0, 1)
    return X, np.cov(X.T)


def captured(U, C):
    w = np.linalg.eigvalsh(C)[::-1][: U.shape[0]]
    return float(np.trace(U @ C @ U.T) / w.sum())


def run(X, method, delta=1e-6, k=2, eps=1.0, seed=1):
    return run_pca(
        X,
        k=k,
        method=method,
        epsilon=eps,
        delta=delta,
        relation="add-remove",
        source=noise.RandomSource.seeded(seed),
    )


@pytest.mark.parametrize(
    "k,method,delta",
    [
        (7, "dp-gauss-1", 1e-6),
        (0, "auto", 0),
        (2, "dp-gauss-1", 0),
        (2, "k-dp-pca", 1.0),
        (2, "laplace-cov", 1e-6),
        (2, "nope", 0),
    ],
)
def test_usage_errors(k, method, delta):
    X, _ = table(100)
    with pytest.raises(UsageError):
        run(X, method, delta=delta, k=k)


@pytest.mark.parametrize(
    "method,delta,floor",
    [
        ("laplace-cov", 0.0, 0.95),
        ("dp-gauss-1", 1e-6, 0.95),
        ("k-dp-pca", 1e-6, 0.6),
        ("k-dp-ojas", 1e-6, 0.5),
        ("dp-power", 1e-6, 0.6),
        ("auto", 0.0, 0.95),
        ("auto", 1e-6, 0.95),
    ],
)
def test_methods_recover_structure_within_budget(method, delta, floor):
    X, C = table()
    res = run(X, method, delta=delta)
    U = res.components
    assert U.shape == (2, 6) and np.allclose(U @ U.T, np.eye(2), atol=1e-8)
    assert captured(U, C) >= floor
    assert res.ledger.spent <= res.ledger.budget
    js = res.to_json()
    assert js["method"] != "auto" and "constants" in js and "selected_by" in js
    if delta == 0:
        assert "rho" not in str(js["privacy"]) and js["privacy"]["total_delta"] == 0
    else:
        assert js["privacy"]["total_delta"] == delta


def test_dp_gauss_2_passes_its_test_on_a_large_gap_and_fails_safely_on_a_small_one():
    """PTR passes on 30000 rows of the structured table (ratio >= 0.95); on 300 rows the floor is
    negative and a random subspace comes out, with the budget still spent and no eigenvalue."""
    X, C = table(30_000)
    res = run(X, "dp-gauss-2")
    assert res.description["method_info"]["ptr_passed"]
    assert captured(res.components, C) >= 0.95
    small = run(table(300)[0], "dp-gauss-2")
    assert not small.description["method_info"]["ptr_passed"]
    U = small.components
    assert np.allclose(U @ U.T, np.eye(2), atol=1e-8)
    js = small.to_json()
    assert js["eigenvalues_unit_cube"] == [None, None]
    priv = js["privacy"]
    assert priv["total_delta"] == 1e-6 and priv["pure_epsilon"] > 0
    assert small.ledger.spent <= small.ledger.budget
    steps = [e["step"] for e in priv["entries"]]
    assert steps == ["count", "first-moment", "eigengap", "dp-gauss-2"]


def test_auto_reasons():
    X, _ = table(200)
    assert run(X, "auto", delta=0).description["method"] == "laplace-cov"
    assert run(X, "auto", delta=1e-6).description["method"] == "dp-gauss-1"


def test_noisy_sum_is_on_its_grid_and_bounds_rounding():
    rows = np.random.default_rng(0).random((50, 3)) - 0.5
    rel = gauss.noisy_sum(rows, 1.0, 0.1, "add-remove", noise.RandomSource.seeded(2))
    units = rel.value / rel.grid
    assert np.array_equal(units, np.rint(units))
    worst = np.rint(np.full(3, 1 / np.sqrt(3)) / rel.grid)
    assert np.linalg.norm(worst) * rel.grid <= rel.sensitivity


def test_original_units_re_decompose_the_covariance():
    """--units original: the covariance W C W (W = the widths) re-decomposed, not the unit-cube
    direction times the widths (which turns every direction towards the widest column)."""
    from dpsynth_cli import spectrum
    from dpsynth_cli.pca.units import original_units

    specs = [ColumnSpec("a", "float", 0, 1), ColumnSpec("b", "float", 0, 100)]
    width = Domain(specs).unit_widths
    C = np.array([[0.04, 0.0], [0.0, 0.01]])  # unit cube: a first; original: b (100^2 x 0.01)
    signal = spectrum.check([0.04, 0.01], 1e-6, "test")
    out = original_units(C, width, 2, signal, 1e-6)
    assert np.allclose(np.abs(out.components), np.eye(2)[::-1])
    assert np.allclose(out.eigenvalues, [100.0, 0.04])
    assert out.explained_variance == pytest.approx([100 / 100.04, 0.04 / 100.04])


def test_empty_table_runs():
    res = run(np.zeros((0, 4)), "dp-gauss-1")
    assert res.components.shape == (2, 4)


def test_fast_paths_equal_the_reference_computation():
    """The in-place centring equals moments.quantise / 2^12, and noisy_sum's on-grid shortcut
    releases the same value as rounding every row (same seed)."""
    from dpsynth_cli.mechanisms import moments
    from dpsynth_cli.pca import _centred_on_grid

    X = np.random.default_rng(4).random((500, 5))
    X[0, 0], X[1, 1], X[2, 2] = 0.0, 1.0, 0.5 + 2**-13
    q = _centred_on_grid(X.copy())
    assert np.array_equal(q, moments.quantise(X) / 4096)
    a = gauss.noisy_sum(q, 1.2, 0.1, "add-remove", noise.RandomSource.seeded(3))
    b = gauss.noisy_sum(q, 1.2, 0.1, "add-remove", noise.RandomSource.seeded(3), rows_grid=2**-12)
    assert np.array_equal(a.value, b.value)
