"""Federated DP-FPCA (docs/algorithms.md, section 2, ``federated_dp``): release, sensitivity, aggregation, recovery."""
from __future__ import annotations

import numpy as np
import pytest

from fdp_flower.algorithms.fdp_admm.config import parse_scenario
from fdp_flower.config.base import ScenarioError
from fdp_flower.functional import design
from fdp_flower.functional import federated_fpca as ff
from fdp_flower.privacy import PrivacyLedger


def test_symmetric_noise_has_iid_entries_on_and_above_the_diagonal():
    rng = np.random.default_rng(0)
    draws = np.stack([ff.symmetric_gaussian(6, 2.0, rng) for _ in range(4000)])
    np.testing.assert_array_equal(draws, np.swapaxes(draws, 1, 2))
    iu = np.triu_indices(6)
    var = draws[:, iu[0], iu[1]].var(axis=0)
    # each of the 21 entries has variance sigma^2 = 4; sd of a variance estimate = 4 sqrt(2/4000)
    assert np.all(np.abs(var - 4.0) < 5 * 4.0 * np.sqrt(2 / 4000))


def test_replace_one_moves_the_summary_by_at_most_the_sensitivity():
    rng = np.random.default_rng(1)
    cb, m, dim = 2.0, 50, 5
    base = rng.standard_normal((m, dim)) * 3
    bound = float(ff.summary_sensitivity(clip_cb=cb, m=m))
    assert bound == pytest.approx(np.hypot(2 * cb**2 / m, 2 * cb / m))
    iu = np.triu_indices(dim)

    def change(a, b):
        s0 = ff.client_summary(a, clip_cb=cb, sigma=None, rng=None)
        s1 = ff.client_summary(b, clip_cb=cb, sigma=None, rng=None)
        return np.sqrt(np.sum((s0.second_moment - s1.second_moment)[iu] ** 2) + np.sum((s0.mean - s1.mean) ** 2))

    for _ in range(200):
        other = base.copy()
        other[rng.integers(m)] = rng.standard_normal(dim) * 10
        assert change(base, other) <= bound * (1 + 1e-12)
    # orthogonal rows on the clipping sphere: sqrt(2) c_b^2/m and sqrt(2) c_b/m, i.e. bound / sqrt(2)
    a, b = base.copy(), base.copy()
    a[0], b[0] = 5 * np.eye(dim)[0], 5 * np.eye(dim)[1]
    assert change(a, b) == pytest.approx(bound / np.sqrt(2), rel=1e-12)


def test_private_summary_adds_the_calibrated_noise_and_ledger_events():
    sc = parse_scenario({"data": {"kind": "node_files", "grid_points": 50}, "federation": {"num_clients": 2},
                         "basis": {"kind": "federated_dp", "n_components": 3, "pre_basis_size": 8, "clip_cb": 2.0,
                                   "eps": 1.0, "delta": 1.0e-6}})
    grid = np.linspace(0, 1, 50)
    curves = [design.simulate_slice(0, 0, 40, tau=0.5, grid=grid).curves,
              design.simulate_slice(0, 40, 100, tau=0.5, grid=grid).curves]
    basis, releases = ff.scenario_basis_in_process(sc, curves, grid)
    assert basis.n_components == 3 and basis.kind == "federated_dp"
    z = ff.noise_multiplier(1.0, 1.0e-6)
    assert [r.client for r in releases] == [0, 1] and all(r.round == ff.FPCA_ROUND for r in releases)
    for r, m in zip(releases, (40, 60)):
        assert r.sensitivity == pytest.approx(float(ff.summary_sensitivity(clip_cb=2.0, m=m)))
        assert r.sigma == pytest.approx(z * r.sensitivity)
    ledger = PrivacyLedger(releases)
    # one release calibrated to (1, 1e-6): the ledger's PLD eps is at most 1 (and close to it)
    assert 0.9 < ledger.summary(0, 1.0e-6).eps <= 1.0 + 1e-9
    # components are orthonormal in L2 on the grid
    gram = (basis.components * basis.weights) @ basis.components.T
    np.testing.assert_allclose(gram, np.eye(3), atol=1e-10)


def test_noise_free_aggregate_equals_pooled_pca_of_the_coefficients():
    grid = np.linspace(0, 1, 60)
    data = design.simulate_slice(3, 0, 900, tau=0.5, grid=grid)
    parts = [data.curves[:200], data.curves[200:500], data.curves[500:]]
    basis, _ = ff.federated_basis(parts, grid, family="bspline", size=12, n_components=4, clip_cb=1e6,
                                  eps=None, delta=None, rngs=None)
    pre = ff.pre_basis("bspline", 12, grid)
    coef = pre.scores(data.curves)
    cov = np.cov(coef.T, bias=True)
    _vals, vecs = np.linalg.eigh(cov)
    top = vecs[:, ::-1][:, :4]
    pooled = top.T @ pre.components
    for k in range(4):  # equal up to sign
        np.testing.assert_allclose(np.abs(basis.components[k] @ (pooled[k] * pre.weights)), 1.0, atol=1e-9)


def test_federated_dp_fpca_recovers_the_leading_eigenfunctions_of_the_paper_design():
    """Paper design (n = 100000 over 10 clients, eps = 1 per client for the summary): eigenfunctions phi_k = sqrt 2 cos((k-1) pi t), eigenvalues k^-2.

    Tolerance, per component k, from first-order perturbation of an eigenvector,
    ||v_k_hat - v_k|| ~ ||sum_{j != k} (v_j' E v_k) / (lam_k - lam_j) v_j||:
    - sampling (Anderson 1963, Gaussian scores): sd^2 = (1/n) sum_j lam_k lam_j / (lam_k - lam_j)^2;
    - DP noise: E = sum_i (m_i/n) N_i, entries of sd s = sigma sqrt(sum_i (m_i/n)^2), so
      sd^2 = s^2 sum_{j != k} 1 / (lam_k - lam_j)^2 over the B pre-basis directions;
    plus the mean's noise (same s) times 2 ||mu|| ~ 0. Tolerance: 5 x the combined sd.
    """
    n, clients, cb, eps, delta = 100_000, 10, 4.0, 1.0, 1.0e-5
    size, grid = 30, design.default_grid(100)
    curves = [design.simulate_partition(7, n, clients, i, tau=0.5, grid=grid).curves for i in range(clients)]
    rngs = [np.random.default_rng(np.random.SeedSequence(11, spawn_key=(i,))) for i in range(clients)]
    basis, summaries = ff.federated_basis(curves, grid, family="bspline", size=size, n_components=2,
                                          clip_cb=cb, eps=eps, delta=delta, rngs=rngs)
    truth = design.cosine_functions(grid, 2)
    lam_true = 1.0 / np.arange(1, 51) ** 2
    m = np.array([s.num_examples for s in summaries])
    s_noise = summaries[0].sigma * np.sqrt(np.sum((m / m.sum()) ** 2))
    lam_all = np.r_[lam_true[:size], np.zeros(0)]
    for k in range(2):
        others = np.delete(lam_all, k)
        sd_sample = np.sqrt(np.sum(lam_true[k] * np.delete(lam_true, k) / (lam_true[k] - np.delete(lam_true, k)) ** 2) / n)
        sd_noise = s_noise * np.sqrt(np.sum(1.0 / (lam_true[k] - others) ** 2))
        tol = 5 * np.hypot(sd_sample, sd_noise)
        inner = float(basis.components[k] @ (truth[k] * basis.weights))
        err = float(np.sqrt(np.sum((basis.components[k] - np.sign(inner) * truth[k]) ** 2 * basis.weights)))
        print(f"eigenfunction {k + 1}: L2 error {err:.4f} < tolerance {tol:.4f}")
        assert err < tol, (k, err, tol)
        assert tol < 0.5  # a meaningful test: the tolerance is well below an unrelated function (sqrt 2)


def test_scenario_rules_for_federated_dp():
    with pytest.raises(ScenarioError, match="n_components cannot exceed pre_basis_size"):
        parse_scenario({"basis": {"kind": "federated_dp", "n_components": 12, "pre_basis_size": 10}})
    with pytest.raises(ValueError, match="cannot whiten"):
        pre = ff.pre_basis("bspline", 6, np.linspace(0, 1, 20))
        ff.aggregate_basis([np.zeros((6, 6))], [np.zeros(6)], [5], pre, 2, whiten=True)
