"""Losses, penalties and clipping (docs/algorithms.md, section 0)."""
from __future__ import annotations

import numpy as np
import pytest

from fdp_flower.core.clipping import clip_rows, intercept_design
from fdp_flower.core.losses import AbsoluteLoss, LogisticLoss, QuantileLoss, SquaredLoss, make_loss
from fdp_flower.core.penalties import PENALTY_KINDS, Penalty

RNG = np.random.default_rng(7)
LOSSES = [QuantileLoss(0.25), QuantileLoss(0.9), AbsoluteLoss(), LogisticLoss(), SquaredLoss(1e6)]


def _data(m=200, k=4, labels=False):
    a = RNG.standard_normal((m, k))
    y = np.sign(RNG.standard_normal(m)) if labels else RNG.standard_normal(m)
    return a, y


@pytest.mark.parametrize("loss", LOSSES, ids=lambda l: f"{l.name}")
def test_subgradient_matches_finite_differences_away_from_kinks(loss):
    a, y = _data(labels=isinstance(loss, LogisticLoss))
    w = RNG.standard_normal(4)
    grad = loss.mean_subgradient(w, a, y)
    h = 1e-6
    fd = np.array([(loss.mean(w + h * e, a, y) - loss.mean(w - h * e, a, y)) / (2 * h) for e in np.eye(4)])
    # kinks of the piecewise-linear losses are crossed with probability ~ h; smooth ones are exact to O(h^2)
    np.testing.assert_allclose(grad, fd, atol=1e-6)


@pytest.mark.parametrize("loss", LOSSES[:4], ids=lambda l: l.name)
def test_per_sample_gradient_respects_bound_on_clipped_rows(loss):
    c1 = 2.5
    a, y = _data(m=2000, labels=isinstance(loss, LogisticLoss))
    a, _ = clip_rows(a * 3, c1)
    w = RNG.standard_normal(4) * 5
    per_sample = loss.per_sample_derivative(w, a, y)[:, None] * a
    norms = np.linalg.norm(per_sample, axis=1)
    bound = loss.gradient_bound(c1)
    assert norms.max() <= bound + 1e-12
    if isinstance(loss, QuantileLoss):
        assert bound == pytest.approx(c1 * max(loss.tau, 1 - loss.tau))
        assert loss.gradient_bound(c1, paper_constants=True) == c1
        # the tight bound is attained: some clipped row has norm c1 on the larger side
        assert norms.max() >= 0.99 * bound


def test_squared_loss_residual_clip_gives_bound():
    loss = SquaredLoss(residual_bound=0.5)
    a, y = _data()
    a, _ = clip_rows(a, 1.0)
    g = loss.per_sample_derivative(np.zeros(4), a, y * 100)[:, None] * a
    assert np.linalg.norm(g, axis=1).max() <= loss.gradient_bound(1.0) + 1e-12


def test_quantile_loss_values_and_bad_tau():
    loss = QuantileLoss(0.3)
    a = np.eye(2)
    y = np.array([1.0, -2.0])
    np.testing.assert_allclose(loss.per_sample(np.zeros(2), a, y), [0.3 * 1.0, 0.7 * 2.0])
    for tau in (0.0, 1.0, -0.1, 1.5):
        with pytest.raises(ValueError, match="tau"):
            QuantileLoss(tau)
    with pytest.raises(ValueError, match="unknown loss"):
        make_loss("hinge")


def test_masked_mean_equals_mean_over_real_rows():
    loss = QuantileLoss(0.5)
    a, y = _data(m=10)
    pad_a = np.vstack([a, np.full((3, 4), 99.0)])
    pad_y = np.r_[y, [5.0, 5.0, 5.0]]
    mask = np.r_[np.ones(10), np.zeros(3)]
    w = RNG.standard_normal(4)
    np.testing.assert_allclose(loss.mean_subgradient(w, pad_a, pad_y, mask), loss.mean_subgradient(w, a, y))
    np.testing.assert_allclose(loss.mean(w, pad_a, pad_y, mask), loss.mean(w, a, y))


@pytest.mark.parametrize("kind", PENALTY_KINDS)
def test_penalty_subgradient_matches_derivative_and_is_zero_at_zero(kind):
    pen = Penalty(kind, lam1=0.7, lam2=0.3)
    w = np.array([-4.2, -1.5, -0.4, 0.3, 0.8, 2.1, 5.0])
    h = 1e-6
    fd = np.array([(pen.value(w + h * e) - pen.value(w - h * e)) / (2 * h) for e in np.eye(w.size)])
    np.testing.assert_allclose(pen.subgradient(w), fd, atol=1e-6)
    np.testing.assert_array_equal(pen.subgradient(np.zeros(3)), np.zeros(3))
    assert pen.value(np.zeros(3)) == 0.0


def test_penalty_closed_forms():
    w = np.array([1.0, -2.0])
    assert Penalty("l1").value(w) == 3.0
    assert Penalty("l2").value(w) == 2.5
    assert Penalty("elastic_net", lam1=2.0, lam2=0.5).value(w) == pytest.approx(0.5 * 5 + 2 * 3)
    assert Penalty("scad").value(np.array([10.0])) == pytest.approx((3.7 + 1) / 2)
    assert Penalty("mcp").value(np.array([10.0])) == pytest.approx(1.5)
    with pytest.raises(ValueError, match="unknown penalty"):
        Penalty("l0")


def test_clip_rows_bounds_norms_counts_and_keeps_input():
    a = np.array([[3.0, 4.0], [0.3, 0.4], [0.0, 0.0], [6.0, 8.0]])
    original = a.copy()
    clipped, n = clip_rows(a, 1.0)
    assert n == 2
    np.testing.assert_allclose(np.linalg.norm(clipped, axis=1), [1.0, 0.5, 0.0, 1.0])
    np.testing.assert_allclose(clipped[0], [0.6, 0.8])  # direction kept
    np.testing.assert_array_equal(a, original)
    for bad in (0.0, -1.0, np.inf, np.nan):
        with pytest.raises(ValueError, match="c1"):
            clip_rows(a, bad)


@pytest.mark.parametrize("kind", PENALTY_KINDS)
def test_unpenalized_leading_coordinates_are_outside_the_penalty(kind):
    w = RNG.standard_normal((3, 5)) * 2
    pen, free = Penalty(kind), Penalty(kind, unpenalized=1)
    np.testing.assert_allclose(free.value(w), pen.value(w[:, 1:]))
    sub = free.subgradient(w)
    np.testing.assert_array_equal(sub[:, 0], 0.0)
    np.testing.assert_allclose(sub[:, 1:], pen.subgradient(w[:, 1:]))
    np.testing.assert_array_equal(free.mask(5), [0, 1, 1, 1, 1])
    assert free.subgradient_bound(5, 2.0) == pen.subgradient_bound(4, 2.0)


@pytest.mark.parametrize("loss", [QuantileLoss(0.9), AbsoluteLoss(), QuantileLoss(0.3)])
def test_intercept_design_keeps_rows_in_the_clip_set_so_g_is_unchanged(loss):
    """Rows (c0, a) stay in ||row|| <= c1 (sphere) and ||row / (c1, s)|| <= 1 (ellipsoid): the per-sample
    gradient bound G of the loss at c1 holds for the extended rows, at any w and y."""
    c1, share = 2.0, 0.6
    a = RNG.standard_normal((500, 4)) * 3
    rows, n = intercept_design(a, c1, share)
    assert rows.shape == (500, 5) and n > 0
    np.testing.assert_allclose(rows[:, 0], share * c1)
    assert np.all(np.linalg.norm(rows, axis=1) <= c1 * (1 + 1e-12))
    np.testing.assert_allclose(np.linalg.norm(rows[:, 1:], axis=1).max(), c1 * np.sqrt(1 - share**2))
    w, y = RNG.standard_normal(5) * 10, RNG.standard_normal(500) * 10
    grads = loss.per_sample_derivative(w, rows, y)[:, None] * rows
    assert np.linalg.norm(grads, axis=1).max() <= loss.gradient_bound(c1) * (1 + 1e-12)
    scales = np.array([1.0, 0.5, 0.25, 0.1]) * c1
    rows_e, _ = intercept_design(a, c1, share, scales)
    full = np.r_[c1, scales]
    assert np.all(np.linalg.norm(rows_e / full, axis=1) <= 1 + 1e-12)
    with pytest.raises(ValueError, match="share"):
        intercept_design(a, c1, 1.0)
