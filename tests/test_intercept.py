"""The intercept of FDP-ADMM (``model.intercept``; docs/api.md, "The intercept").

Every client prepends the public constant c0 = share c1 to its rows and clips its scores to the
room left, so every row stays in the clip set the per-sample gradient bound G was computed for:
the sensitivity 2 G / (m (rho + 1/eta)) and the noise are unchanged.  These tests check that by
measurement (adversarial replaced records), that every engine runs the extended model alike, and
that a response with a large tau-quantile offset is fitted within tolerances derived from the
statistical error and the noise.
"""
from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

import fdp_flower
from fdp_flower.algorithms.fdp_admm.config import parse_scenario
from fdp_flower.algorithms.fdp_admm.plan import (
    NoisePlan,
    build_objective,
    model_dim,
    noise_scales,
    split_coefficients,
)
from fdp_flower.algorithms.fdp_admm.setup import simulation_setup
from fdp_flower.algorithms.fdp_admm.update import client_primal_step
from fdp_flower.engines.batched import run_batched
from fdp_flower.engines.inprocess import run_fdp_admm
from fdp_flower.functional import design
from tests.test_faults import run_strategy, task_identity  # noqa: F401  (fixture)

K = 4
N = 4000  # rows of the offset tests, split over 10 clients


def scenario(shape="sphere", tau=0.3, **extra):
    basis = {"kind": "pooled", "n_components": K} if shape == "ellipsoid" else {"kind": "fixed", "n_components": K}
    return parse_scenario({"seed": 3, "data": {"n_samples": 300, "grid_points": 31}, "federation": {"num_clients": 3},
                           "basis": basis,
                           "model": {"clip_shape": shape, "clip_c1": 2.0, "intercept": True, "intercept_share": 0.6,
                                     "loss": {"kind": "quantile", "tau": tau}, "penalty": {"kind": "l1"}},
                           "algorithm": {"rounds": 6, "step": {"kind": "constant", "eta0": 2.0}},
                           "privacy": {"mode": "total", "eps": 1.0, "delta": 1.0e-5}} | extra)


@pytest.mark.parametrize("shape", ["sphere", "ellipsoid"])
def test_replacing_one_record_moves_the_primal_by_at_most_the_calibrated_sensitivity(shape):
    """Audit-style check (one client, fixed transcript): replace a record by a canary whose scores
    lie on the clip boundary and whose response is far out; ||S^-1 (w_i - w_i')|| <= Delta at many
    states, and the bound is nearly attained (the intercept column does not loosen or break it)."""
    sc = scenario(shape)
    _sizes, basis, features, responses, _clipped, _ev = simulation_setup(sc, with_reference=False)
    dim = model_dim(sc, basis)
    a, y = features[0], responses[0]
    assert a.shape[1] == dim == K + 1
    scales = noise_scales(sc, basis)
    unit = np.ones(dim) * sc.model.clip_c1 if scales is None else scales
    assert np.all(np.linalg.norm(a / unit, axis=1) <= 1 + 1e-12)
    np.testing.assert_allclose(a[:, 0], 0.6 * 2.0)
    objective, plan = build_objective(sc), NoisePlan(sc, dim)
    eta, sensitivity, _sigma = plan.release(2, a.shape[0])  # ellipsoid: in Mahalanobis units (G of c1 = 1)
    rng = np.random.default_rng(1)
    worst = 0.0
    room = np.sqrt(1 - 0.6**2)
    for _ in range(200):
        w, g, wbar = rng.standard_normal((3, dim)) * 0.5
        u = rng.standard_normal(K) * unit[1:]
        a2, y2 = a.copy(), y.copy()
        a2[0, 1:] = room * u / np.linalg.norm(u / unit[1:])  # the scores' boundary
        y2[0] = y[0] + rng.choice([-50.0, 50.0])
        step = dict(objective=objective, noisy_primal=w, global_w=wbar, dual=g, eta=float(eta), rho=sc.algorithm.rho)
        diff = client_primal_step(features=a, response=y, **step) - client_primal_step(features=a2, response=y2, **step)
        worst = max(worst, float(np.linalg.norm(diff / (1.0 if scales is None else scales))))
    assert worst <= float(sensitivity) * (1 + 1e-9)
    assert worst >= 0.5 * float(sensitivity)


def test_every_engine_runs_the_intercept_model_alike(task_identity):  # noqa: F811
    """In-process, batched and the Flower strategy with the real client worker: the same K + 1
    iterates; the penalty leaves the intercept out; the saved beta_hat drops it."""
    sc = scenario()
    local = run_fdp_admm(sc, with_reference=False)
    (batched,) = run_batched([sc], history=False)
    strategy, _grid = run_strategy(sc)
    assert local.state.global_w.shape == (K + 1,)
    for name in ("global_w", "duals", "noisy_primals"):
        np.testing.assert_allclose(getattr(strategy.state, name), getattr(local.state, name), rtol=0, atol=1e-12)
    np.testing.assert_allclose(batched.global_w, local.state.global_w, rtol=0, atol=1e-10)
    assert build_objective(sc).penalty.subgradient(np.ones(K + 1))[0] == 0.0
    b, coef = split_coefficients(sc, local.state.global_w)
    assert b == pytest.approx(1.2 * local.state.global_w[0]) and coef.shape == (K,)


def _tolerance(tau: float, n: int, sigma: float | None, *, clients: int, tail: int, eta: float, rho: float,
               c0: float) -> float:
    """4 standard deviations of the fitted intercept on the paper design (t(3) errors, centred curves).

    Statistical part: the intercept of a quantile regression with centred covariates has asymptotic
    variance tau (1 - tau) / (n f(q_tau)^2), f the error density at its tau-quantile.  Noise part:
    the global iterate follows w <- w - eta' s(w) + xi with eta' = eta / (1 + rho eta) (the mean of
    the clients' linearized steps) and xi the mean of the M clients' noise, sd sigma / sqrt(M) per
    coordinate.  Near the optimum the intercept coordinate's subgradient is c0^2 f(q_tau) (w_0 -
    w_0*), so w_0 is an AR(1) with coefficient 1 - eta' c0^2 f; the mean of its last T iterates has
    sd sigma / (sqrt(M T) eta' c0^2 f), and b = c0 w_0 has sd sigma / (sqrt(M T) eta' c0 f).
    """
    f = stats.t.pdf(stats.t.ppf(tau, 3), 3)
    stat = np.sqrt(tau * (1 - tau)) / (f * np.sqrt(n))
    noise = 0.0 if sigma is None else sigma / (np.sqrt(clients * tail) * eta / (1 + rho * eta) * c0 * f)
    return 4.0 * float(np.hypot(stat, noise))


@pytest.fixture(scope="module")
def offset_design():
    grid = design.default_grid(60)
    return grid, {tau: design.simulate_slice(11, 0, N, tau=tau, grid=grid) for tau in (0.5, 0.9)}


def test_a_large_median_offset_is_fitted_privately(offset_design):
    """y = 8 + int beta X + e (the median of y given X is 8 + int beta X): the private fit's intercept is
    within the derived tolerance of 8; without the intercept every prediction is off by about 8."""
    grid, data = offset_design
    d, offset = data[0.5], 8.0
    model = fdp_flower.fit(d.curves, d.response + offset, grid=grid, tau=0.5, eps=1.0, n_clients=10,
                           penalty="none", reference=False)
    sc = model.scenario
    _eta, _sens, sigma = NoisePlan(sc, model.w.size).release(1, np.array([N // 10]))
    tol = _tolerance(0.5, N, float(sigma[0]), clients=10, tail=40, eta=3.0, rho=0.1, c0=1.5)
    assert abs(model.intercept - offset) <= tol
    assert model.privacy.eps == pytest.approx(1.0, abs=1e-3)
    truth = offset + d.curves @ (design.true_beta(grid) * model.basis.weights)
    assert abs(np.median(model.predict(d.curves) - truth)) <= tol
    without = fdp_flower.fit(d.curves, d.response + offset, grid=grid, tau=0.5, eps=1.0, n_clients=10,
                             penalty="none", intercept=False, reference=False)
    assert without.intercept == 0.0
    assert np.median(truth - without.predict(d.curves)) > offset / 2


def test_a_large_upper_quantile_offset_is_fitted_without_noise(offset_design):
    """tau = 0.9 without noise (F-ADMM): the intercept is within the statistical tolerance of the truth."""
    grid, data = offset_design
    d = data[0.9]
    model = fdp_flower.fit(d.curves, d.response + 8.0, grid=grid, tau=0.9, eps=None, n_clients=10,
                           penalty="none", reference=False)
    assert abs(model.intercept - 8.0) <= _tolerance(0.9, N, None, clients=10, tail=40, eta=3.0, rho=0.1, c0=1.5)
    assert not model.privacy.private and model.privacy.eps is None
