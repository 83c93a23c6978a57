"""In-cell placement: linear densities and low-discrepancy points (post-processing)."""

from __future__ import annotations

import numpy as np

from dpsynth_cli.mechanisms import placement


def test_linear_inverse_cdf_inverts_the_cdf():
    a = np.linspace(-2, 2, 41)[:, None]
    u = np.linspace(0, 1, 101)[None, :]
    p = u + a / 2 * (u**2 - u)
    a, p = np.broadcast_arrays(a, p)
    np.testing.assert_allclose(
        placement.linear_inverse_cdf(a, p), np.broadcast_to(u, a.shape), atol=1e-7
    )


def test_relative_slope_is_a_clipped_central_difference():
    below, here, above = np.array([1.0, 0, 5, 0]), np.array([2.0, 0, 1, 1]), np.array([3, 4, 0, 9])
    assert placement.relative_slope(below, here, above).tolist() == [0.5, 0.0, -2.0, 2.0]


def test_points_land_in_their_boxes_with_the_requested_tilt():
    lower = np.array([[0.0, 0.0], [0.5, 0.25]])
    width = np.array([[0.5, 0.5], [0.25, 0.25]])
    slopes = np.array([[2.0, 0.0], [0.0, -1.0]])
    counts = np.array([4000, 3000])
    pts = placement.place_in_boxes(lower, width, slopes, counts, np.random.default_rng(1))
    first, second = pts[:4000], pts[4000:]
    assert (first >= 0).all() and (first <= 0.5).all()
    assert (second >= [0.5, 0.25]).all() and (second <= [0.75, 0.5]).all()
    u = (first - lower[0]) / width[0]
    v = (second - lower[1]) / width[1]
    # E[U] = 1/2 + a/12 for the density 1 + a (u - 1/2)
    np.testing.assert_allclose([u[:, 0].mean(), u[:, 1].mean()], [2 / 3, 0.5], atol=0.01)
    np.testing.assert_allclose([v[:, 0].mean(), v[:, 1].mean()], [0.5, 5 / 12], atol=0.01)


def test_one_dimension_is_exactly_stratified():
    u = placement.within_cell_uniforms(np.array([5, 0, 3]), 1, np.random.default_rng(0))[:, 0]
    assert np.array_equal(np.floor(u[:5] * 5), np.arange(5))
    assert np.array_equal(np.floor(u[5:] * 3), np.arange(3))


def test_pooled_density_draws_inside_each_box_by_its_masses():
    """`placement.Pooled`: a box side wider than a cell draws from the masses inside it (here
    cells 1 and 2 of 4 with masses 3 and 1: 3/4 of the points in cell 1), never outside the box;
    a box with no mass is uniform; negative masses count as 0."""
    pooled = placement.Pooled.of_cells(np.array([0.0, 3.0, 1.0, -5.0]))
    u = (np.arange(4000) + 0.5) / 4000
    x = pooled.place(np.zeros(4000), np.ones(4000), u)
    assert np.isclose((x < 0.25).mean(), 0.0) and np.isclose((x >= 0.75).mean(), 0.0)
    assert abs(((x >= 0.25) & (x < 0.5)).mean() - 0.75) < 1e-3
    half = pooled.place(np.full(4000, 0.5), np.full(4000, 0.5), u)  # [1/2, 1): cell 2 only
    assert ((half >= 0.5) & (half < 0.75)).all()
    empty = pooled.place(np.full(4000, 0.75), np.full(4000, 0.25), u)  # no mass: uniform
    np.testing.assert_allclose(empty, 0.75 + 0.25 * u)
    assert pooled.wide(np.array([0.25, 0.5])).tolist() == [False, True]
