"""Ellipsoid clip + shaped noise (``model.clip_shape: ellipsoid``).

Rows are clipped to ||a / s|| <= 1 with s = c1 sqrt(lambda_k) (the FPCA basis's score variances) and the
release is w + sigma diag(s) N(0, I), i.e. the post-processing of the isotropic release of w / s.  The
guarantee needs: every row inside the ellipsoid, the Mahalanobis sensitivity ||(w - w') / s|| within the
calibrated 2 G1 / (m (rho + 1/eta)) for any replaced row, and noise of exactly that shape.
"""
from __future__ import annotations

import numpy as np
import pytest

from fdp_flower.algorithms.fdp_admm.config import parse_scenario
from fdp_flower.algorithms.fdp_admm.plan import site_plan, build_objective, noise_plan, noise_scales
from fdp_flower.algorithms.fdp_admm.setup import simulation_setup
from fdp_flower.algorithms.fdp_admm.update import client_primal_step
from fdp_flower.config.base import ScenarioError
from fdp_flower.core.clipping import clip_rows_ellipsoid
from fdp_flower.engines.batched import run_batched
from fdp_flower.engines.inprocess import run_fdp_admm
from fdp_flower.privacy.mechanisms import add_gaussian_noise
from tests.test_faults import run_strategy, task_identity  # noqa: F401  (fixture)

K = 4


def scenario(**model):
    return parse_scenario({"seed": 3, "data": {"n_samples": 300, "grid_points": 31}, "federation": {"num_clients": 3},
                           "basis": {"kind": "pooled", "n_components": K},
                           "model": {"clip_shape": "ellipsoid", "clip_c1": 2.0, "penalty": {"kind": "l2"}} | model,
                           "algorithm": {"rounds": 6},
                           "privacy": {"mode": "total", "eps": 1.0, "delta": 1.0e-5}})


def test_rows_are_clipped_onto_the_ellipsoid():
    rng = np.random.default_rng(0)
    scales = np.array([3.0, 1.0, 0.2, 0.05])
    rows = rng.standard_normal((500, K)) * scales * 1.5
    clipped, count = clip_rows_ellipsoid(rows, scales)
    inside = np.linalg.norm(rows / scales, axis=1) <= 1
    assert count == int((~inside).sum()) > 0
    np.testing.assert_array_equal(clipped[inside], rows[inside])
    np.testing.assert_allclose(np.linalg.norm(clipped[~inside] / scales, axis=1), 1.0, rtol=1e-12)
    # a clipped row keeps its direction
    cos = np.sum(clipped[~inside] * rows[~inside], axis=1) / (
        np.linalg.norm(clipped[~inside], axis=1) * np.linalg.norm(rows[~inside], axis=1))
    np.testing.assert_allclose(cos, 1.0, rtol=1e-12)
    with pytest.raises(ValueError, match="positive"):
        clip_rows_ellipsoid(rows, np.array([1.0, 0.0, 1.0, 1.0]))


def test_replacing_one_row_moves_the_primal_by_at_most_the_mahalanobis_sensitivity():
    """Adversarial replacements on the ellipsoid's boundary, at many points w: ||(w_i - w_i') / s||
    never exceeds the calibrated Delta, and reaches it (the bound is tight)."""
    sc = scenario(loss={"kind": "quantile", "tau": 0.3})
    sizes, basis, features, responses, _clipped, _ev = simulation_setup(sc, with_reference=False)
    scales = noise_scales(sc, basis)
    objective, plan = build_objective(sc), noise_plan(sc, basis)  # the default step: whitened units
    a, y = features[0], responses[0]
    m = a.shape[0]
    assert np.all(np.linalg.norm(a / scales, axis=1) <= 1 + 1e-12)
    rng = np.random.default_rng(1)
    eta, sensitivity, _sigma = plan.release(2, m)
    worst = 0.0
    for _ in range(200):
        w, g, wbar = rng.standard_normal((3, K)) * 0.5
        u = rng.standard_normal(K) * scales
        a2, y2 = a.copy(), y.copy()
        a2[0] = u / np.linalg.norm(u / scales)  # on the ellipsoid's boundary
        y2[0] = y[0] + rng.choice([-50.0, 50.0])
        step = dict(objective=objective, noisy_primal=w, global_w=wbar, dual=g, eta=float(eta), rho=sc.algorithm.rho)
        diff = client_primal_step(features=a, response=y, **step) - client_primal_step(features=a2, response=y2, **step)
        worst = max(worst, float(np.linalg.norm(diff / scales)))
    assert worst <= float(sensitivity) * (1 + 1e-9)
    assert worst >= 0.5 * float(sensitivity)  # G1 = max(tau, 1 - tau) is attained up to the direction


def test_shaped_noise_is_the_isotropic_draw_times_the_scales():
    scales = np.array([2.0, 0.5, 0.1, 0.01])
    value = np.arange(K, dtype=float)
    plain = add_gaussian_noise(value, 0.7, np.random.default_rng(5))
    shaped = add_gaussian_noise(value, 0.7, np.random.default_rng(5), scales)
    np.testing.assert_allclose(shaped - value, (plain - value) * scales, rtol=1e-12)
    draws = np.stack([add_gaussian_noise(value, 0.7, np.random.default_rng(s), scales) for s in range(4000)])
    z = (draws - value) / (0.7 * scales)
    n = len(z)
    assert np.all(np.abs(z.mean(axis=0)) < 4 / np.sqrt(n))
    assert np.all(np.abs(z.std(axis=0) - 1) < 4 / np.sqrt(2 * n))  # SE of an sd estimate: 1 / sqrt(2n)


def test_ellipsoid_needs_an_fpca_basis_and_a_plain_step():
    with pytest.raises(ScenarioError, match="fixed basis"):
        parse_scenario({"basis": {"kind": "fixed", "n_components": K}, "model": {"clip_shape": "ellipsoid"}})
    with pytest.raises(ScenarioError, match="Theorem 2"):
        parse_scenario({"model": {"clip_shape": "ellipsoid"}, "algorithm": {"step": {"kind": "theorem2"}}})


def test_every_engine_draws_the_same_shaped_releases(task_identity):  # noqa: F811
    """In-process, batched and the Flower strategy with the real client worker: same iterates, and the
    ledger holds the Mahalanobis sensitivities (the basis's score variances travel with the basis)."""
    sc = scenario()
    local = run_fdp_admm(sc, with_reference=False)
    (batched,) = run_batched([sc], history=False)
    strategy, _grid = run_strategy(sc)
    for name in ("global_w", "duals", "noisy_primals"):
        np.testing.assert_allclose(getattr(strategy.state, name), getattr(local.state, name), rtol=0, atol=1e-12)
    np.testing.assert_allclose(batched.global_w, local.state.global_w, rtol=0, atol=1e-10)
    plan = noise_plan(sc, local.basis)
    assert plan.gradient_bound == pytest.approx(0.5)  # quantile tau = 0.5 on rows with ||a / s|| <= 1
    first = local.ledger.releases[0]  # the descent term's Mahalanobis sensitivity 2G/m_i (eq. (1.3))
    m = local.sample_sizes[first.client]
    sensitivity, sigma = site_plan(sc, local.basis).calibration(1, m)
    assert first.sensitivity == pytest.approx(2 * 0.5 / m) == pytest.approx(float(sensitivity))
    assert first.sigma == pytest.approx(float(sigma))
    # an isotropic run of the same scenario releases different vectors (the shape matters)
    sphere = run_fdp_admm(parse_scenario(sc.model_dump(mode="json") | {"model": sc.model.model_dump(mode="json")
                                                                       | {"clip_shape": "sphere"},
                                                                       "algorithm": sc.algorithm.model_dump(mode="json")
                                                                       | {"step_units": "absolute"}}),
                          with_reference=False)
    assert not np.allclose(sphere.state.global_w, local.state.global_w)
