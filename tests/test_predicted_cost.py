"""The predicted privacy cost (fdp_flower/privacy/predicted_cost.py, eq. (F.1)) and its warning."""
from __future__ import annotations

import math
import re

import numpy as np
import pytest

from fdp_flower.privacy.calibration import target_mu
from fdp_flower.privacy.predicted_cost import default_clip_radius, predicted_privacy_cost, privacy_cost_warning


def test_equal_sizes_reduce_to_the_documented_closed_form():
    """4 G^2 z^2 gamma^2 M / (n tau (1 - tau)): 0.0089 M at gamma = 4, n = 100000, tau = 0.5, (1, 1e-5)."""
    z = 1.0 / target_mu(1.0, 1e-5)
    for m_clients in (10, 20, 50):
        p = predicted_privacy_cost([100_000 // m_clients] * m_clients, eps=1.0, delta=1e-5, tau=0.5,
                                   n_components=10, clip_radius=4.0)
        closed = 4 * 0.25 * z * z * 16 * m_clients / (100_000 * 0.25)
        assert p.cost == pytest.approx(closed, rel=1e-12)
        assert p.cost == pytest.approx(0.0089 * m_clients, rel=0.01)
    assert z == pytest.approx(3.73, abs=0.01)


def test_scaling_in_tau_sizes_and_budget_share():
    base = predicted_privacy_cost([500] * 5, eps=1.0, delta=1e-5, tau=0.5, n_components=10)
    tail = predicted_privacy_cost([500] * 5, eps=1.0, delta=1e-5, tau=0.9, n_components=10)
    low = predicted_privacy_cost([500] * 5, eps=1.0, delta=1e-5, tau=0.1, n_components=10)
    assert tail.cost == pytest.approx(9 * base.cost, rel=1e-12)  # max(tau, 1-tau)^2 / (tau (1-tau)): 1 -> 9
    assert low.cost == pytest.approx(tail.cost, rel=1e-12)
    bigger = predicted_privacy_cost([1000] * 5, eps=1.0, delta=1e-5, tau=0.5, n_components=10)
    assert bigger.cost == pytest.approx(base.cost / 2, rel=1e-12)  # falls like 1 / m
    half = predicted_privacy_cost([500] * 5, eps=1.0, delta=1e-5, tau=0.5, n_components=10, budget_share=0.5)
    assert half.cost == pytest.approx(2 * base.cost, rel=1e-12)
    assert default_clip_radius(10) == pytest.approx(4.0, abs=0.01)
    fewer = predicted_privacy_cost([500] * 5, eps=1.0, delta=1e-5, tau=0.5, n_components=3)
    assert fewer.cost == pytest.approx(base.cost * default_clip_radius(3) ** 2 / default_clip_radius(10) ** 2)


def test_unequal_sizes_use_the_weighted_sums():
    m = np.array([200.0, 800.0, 3000.0])
    p = predicted_privacy_cost(m, eps=2.0, delta=1e-6, tau=0.3, n_components=4, clip_radius=3.0)
    z = 1.0 / target_mu(2.0, 1e-6)
    expected = 4 * 0.49 * z * z * 9.0 * np.sum(m**-2) / (0.21 * np.sum(1 / m))
    assert p.cost == pytest.approx(expected, rel=1e-12)


def test_the_ratio_matches_a_simulated_gradient_release():
    """(F.1) is a ratio of gradient variances at the exact solution (the Hessian cancels).  Simulate it:
    Gaussian scores with variances lambda_k (K = 3, ellipsoid radius 5: clipping has probability ~1e-5),
    normal errors, the true quantile coefficients; the variance over data draws of the equal-weight mean
    over M sites of the record-mean subgradient, against the variance of the mean of the sites' release
    noise (z 2 G / m_i) gamma sqrt(lambda_k).  2000 draws: the variance estimate has relative sd
    sqrt(2 / 2000) = 3.2%; tolerance 4 sd."""
    rng = np.random.default_rng(20290)
    lam = np.array([1.0, 0.3, 0.05])
    sizes = np.array([150, 300, 450])
    tau, gamma, draws = 0.25, 5.0, 2000
    grads = np.empty((draws, lam.size))
    q = _normal_quantile(tau)
    for d in range(draws):
        site_means = []
        for m in sizes:
            a = rng.standard_normal((m, lam.size)) * np.sqrt(lam)
            e = rng.standard_normal(m)
            below = (e <= q).astype(float)
            site_means.append(-((tau - below)[:, None] * a).mean(axis=0))
        grads[d] = np.mean(site_means, axis=0)
    stat_var = grads.var(axis=0, ddof=1)
    p = predicted_privacy_cost(sizes, eps=1.0, delta=1e-5, tau=tau, n_components=3, clip_radius=gamma)
    g = max(tau, 1 - tau)
    noise_var = np.sum((p.noise_multiplier * 2 * g / sizes) ** 2) / sizes.size**2 * gamma**2 * lam
    measured = noise_var / stat_var
    assert np.all(np.abs(measured / p.per_direction - 1) < 4 * math.sqrt(2 / draws))


def _normal_quantile(tau: float) -> float:
    from scipy import stats

    return float(stats.norm.ppf(tau))


def test_the_sphere_weighs_directions_by_their_statistical_variance():
    lam = np.array([1.0, 0.1])
    p = predicted_privacy_cost([1000] * 4, eps=1.0, delta=1e-5, tau=0.5, n_components=2, clip_shape="sphere",
                               clip_radius=2.0, score_variances=lam)
    e = predicted_privacy_cost([1000] * 4, eps=1.0, delta=1e-5, tau=0.5, n_components=2, clip_radius=2.0)
    # per direction r_k = r (c1^2 / lambda_k) / c1^2 of the ellipsoid with the same radius
    assert p.per_direction == pytest.approx(e.per_direction / lam)
    assert p.cost == pytest.approx(np.sum(p.per_direction / lam) / np.sum(1 / lam))


def test_no_warning_at_or_below_one_and_each_fix_brings_the_cost_to_one():
    fine = predicted_privacy_cost([20_000] * 5, eps=1.0, delta=1e-5, tau=0.5, n_components=10)
    assert fine.cost <= 1 and privacy_cost_warning(fine) is None
    bad = predicted_privacy_cost([500] * 5, eps=1.0, delta=1e-5, tau=0.9, n_components=10)
    assert bad.cost > 1
    text = privacy_cost_warning(bad)
    assert text is not None and "\n" not in text and text.startswith(f"predicted privacy cost {bad.cost:.2g} > 1")
    m_needed = int(re.search(r"at least (\d+) records per site", text).group(1))
    assert predicted_privacy_cost([m_needed] * 5, eps=1.0, delta=1e-5, tau=0.9, n_components=10).cost <= 1
    assert predicted_privacy_cost([m_needed - 1] * 5, eps=1.0, delta=1e-5, tau=0.9, n_components=10).cost > 1
    eps_needed = float(re.search(r"eps >= ([0-9.e+]+)", text).group(1))
    assert predicted_privacy_cost([500] * 5, eps=eps_needed * 1.01, delta=1e-5, tau=0.9, n_components=10).cost <= 1
    assert predicted_privacy_cost([500] * 5, eps=eps_needed * 0.9, delta=1e-5, tau=0.9, n_components=10).cost > 1


def test_fewer_components_are_named_when_they_suffice():
    p = predicted_privacy_cost([500] * 5, eps=1.0, delta=1e-5, tau=0.5, n_components=10)
    assert p.cost > 1
    text = privacy_cost_warning(p)
    k = int(re.search(r"n_components <= (\d+)", text).group(1))
    assert predicted_privacy_cost([500] * 5, eps=1.0, delta=1e-5, tau=0.5, n_components=k).cost <= 1
    assert predicted_privacy_cost([500] * 5, eps=1.0, delta=1e-5, tau=0.5, n_components=k + 1).cost > 1


@pytest.mark.parametrize("kwargs, message", [
    ({"sizes": []}, "sizes"), ({"sizes": [0, 10]}, "sizes"), ({"eps": 0.0}, "eps"), ({"delta": 1.0}, "delta"),
    ({"tau": 1.0}, "tau"), ({"n_components": 0}, "n_components"), ({"budget_share": 0.0}, "budget_share"),
    ({"clip_shape": "box"}, "clip_shape"), ({"clip_shape": "sphere", "clip_radius": 3.0}, "score_variances"),
])
def test_bad_input_is_one_line_naming_the_argument(kwargs, message):
    args = {"sizes": [100, 100], "eps": 1.0, "delta": 1e-5, "tau": 0.5, "n_components": 3} | kwargs
    sizes = args.pop("sizes")
    with pytest.raises(ValueError, match=f"^{message}") as info:
        predicted_privacy_cost(sizes, **args)
    assert "\n" not in str(info.value)
