"""The batched engine reproduces run_fdp_admm's iterates; the numpy FPCA reproduces scikit-fda's."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fdp_flower.algorithms.fdp_admm.config import load_scenario
from fdp_flower.engines.batched import data_key, run_batched
from fdp_flower.engines.inprocess import run_fdp_admm
from fdp_flower.functional import design
from fdp_flower.functional.fpca import fit_pooled_fpca

ROOT = Path(__file__).resolve().parents[1]
SMALL = ["data.n_samples=1503", "federation.num_clients=6", "algorithm.rounds=10", "seed=11"]


def _scenario(*extra):
    return load_scenario(ROOT / "scenarios" / "quickstart.yaml", SMALL + list(extra))


VARIANTS = {
    "l1-private": [],
    "l2-tau0.1": ["model.penalty.kind=l2", "model.loss.tau=0.1"],
    "no-privacy-tau0.9": ["privacy.enabled=false", "model.loss.tau=0.9"],
    "paper-constants": ["privacy.paper_constants=true", "privacy.eps=0.2", "privacy.delta=1.0e-3"],
    "absolute-loss": ["model.loss.kind=absolute"],
    "inv-sqrt-step": ["algorithm.step={kind: inv_sqrt, eta0: 2.0}"],
    "tail-average": ["algorithm.estimator={kind: tail_average, tail_fraction: 0.3}"],
}


def test_batched_equals_run_fdp_admm_per_round():
    """Same scenario and seed -> the same iterates every round (1e-10), several configurations at once
    (unequal client sizes: 1503 samples over 6 clients exercise the mask)."""
    scenarios = [_scenario(*v) for v in VARIANTS.values()]
    assert len({data_key(s) for s in scenarios}) == 1  # all share data: one batched group
    batched = run_batched(scenarios, trace=True, full_metrics=True)
    for name, sc, res in zip(VARIANTS, scenarios, batched):
        ref = run_fdp_admm(sc, with_reference=False)
        assert np.max(np.abs(ref.state.global_w - res.global_w)) < 1e-10, name
        assert np.max(np.abs(ref.state.average_global_w - res.average_global_w)) < 1e-10, name
        assert len(ref.history) == len(res.history) == sc.algorithm.rounds
        for a, b in zip(ref.history, res.history):
            for key in ("mise", "mise_avg", "mise_estimate", "empirical_loss", "objective", "eta_mean"):
                assert abs(a[key] - b[key]) < 1e-10 * max(1.0, abs(a[key])), (name, key, a["round"])
            if sc.privacy.enabled:  # zCDP composition from the plan = the ledger's
                assert abs(a["zcdp_rho"] - b["zcdp_rho"]) < 1e-9 * a["zcdp_rho"]
                assert abs(a["eps_zcdp"] - b["eps_zcdp"]) < 1e-9 * a["eps_zcdp"]
        assert np.abs(res.trace[-1] - res.global_w).max() == 0.0


def test_noise_matters_and_seed_reproduces():
    """Different seeds give different iterates; the same seed the same (the noise is not ignored)."""
    a, b, c = run_batched([_scenario(), _scenario(), _scenario("seed=12")])
    assert np.array_equal(a.global_w, b.global_w)
    assert not np.allclose(a.global_w, c.global_w)
    off = run_batched([_scenario("privacy.enabled=false")])[0]
    assert not np.allclose(a.global_w, off.global_w)


def test_groups_with_different_data_run_separately():
    scs = [_scenario("seed=1"), _scenario("seed=2"), _scenario("federation.num_clients=3")]
    assert len({data_key(s) for s in scs}) == 3
    res = run_batched(scs)
    for sc, r in zip(scs, res):
        ref = run_fdp_admm(sc, with_reference=False)
        assert np.max(np.abs(ref.state.global_w - r.global_w)) < 1e-10


def test_batched_refuses_failure_injection():
    with pytest.raises(ValueError, match="failure"):
        run_batched([_scenario("faults.failure_rate=0.1")])


@pytest.mark.parametrize("n", [2000])
def test_eigh_fpca_equals_scikit_fda_up_to_sign(n):
    grid = design.default_grid(60)
    curves = design.simulate_slice(5, 0, n, tau=0.5, grid=grid).curves
    fast = fit_pooled_fpca(curves, grid, n_components=8)
    ref = fit_pooled_fpca(curves, grid, n_components=8, method="skfda")
    signs = np.sign(np.sum(fast.components * ref.components, axis=1))
    assert np.all(np.abs(signs) == 1)
    assert np.max(np.abs(fast.components - signs[:, None] * ref.components)) < 1e-8
    assert np.max(np.abs(fast.mean - ref.mean)) < 1e-12
    assert np.max(np.abs(fast.explained_variance_ratio - ref.explained_variance_ratio)) < 1e-10
    scores_fast, scores_ref = fast.scores(curves), ref.scores(curves)
    assert np.max(np.abs(scores_fast - signs * scores_ref)) < 1e-8
    # explained-variance selection picks the same K
    k_fast = fit_pooled_fpca(curves, grid, explained_variance=0.9).n_components
    k_ref = fit_pooled_fpca(curves, grid, explained_variance=0.9, method="skfda").n_components
    assert k_fast == k_ref


def test_fpca_method_is_checked():
    grid = design.default_grid(20)
    with pytest.raises(ValueError, match="method"):
        fit_pooled_fpca(np.zeros((10, 20)), grid, n_components=2, method="svd")


@pytest.mark.parametrize("trust", ["secure_aggregation", "trusted_aggregator"])
def test_batched_aggregated_trust_equals_run_fdp_admm_exactly(trust):
    """privacy.trust secure_aggregation / trusted_aggregator: the batched engine runs the in-process engine's
    site function and aggregate (site.answer, protocol.shared_descent), so the integer shares, their sums
    and every iterate are the same numbers (equality, not a tolerance), beside site-mode configurations of
    the same group; the privacy columns are the in-process ledger's."""
    from fdp_flower.algorithms.fdp_admm.plan import site_plan
    from fdp_flower.algorithms.fdp_admm.protocol import FDPADMMServer
    from fdp_flower.algorithms.fdp_admm.setup import simulation_setup
    from fdp_flower.algorithms.fdp_admm.site import SiteData, answer
    from fdp_flower.algorithms.protocol import SiteRequest
    from fdp_flower.engines import batched as batched_module
    from fdp_flower.privacy.mechanisms import run_noise

    common = ["privacy.mode=total", "privacy.eps=1.0", "privacy.delta=1.0e-5", "algorithm.rounds=6",
              "federation.num_clients=4"]
    aggregated = [_scenario(*common, f"privacy.trust={trust}"),
                  _scenario(*common, f"privacy.trust={trust}", "model.penalty.kind=l2", "privacy.eps=2.0")]
    if trust == "secure_aggregation":
        aggregated.append(_scenario(*common, f"privacy.trust={trust}", "privacy.tolerated=1"))
    mixed = aggregated + [_scenario(*common)]  # a site-mode configuration in the same batched group
    assert len({data_key(s) for s in mixed}) == 1
    sums: list[np.ndarray] = []  # every decoded aggregate the batched engine computes
    original = batched_module.shared_descent

    def recording(scenario, plan, round_, values):
        if plan.trust == "secure_aggregation":
            assert all(np.asarray(v).dtype.kind == "i" for v in values)
            sums.append(np.sum(values, axis=0))
        return original(scenario, plan, round_, values)

    batched_module.shared_descent = recording
    try:
        results = run_batched(mixed, trace=True)
    finally:
        batched_module.shared_descent = original
    for sc, res in zip(mixed, results):
        ref = run_fdp_admm(sc, with_reference=False)
        if sc.privacy.trust == "site":  # per-client noise, vectorised over configurations: 1e-10 as above
            assert np.max(np.abs(ref.state.global_w - res.global_w)) < 1e-10
            continue
        np.testing.assert_array_equal(res.global_w, ref.state.global_w)
        np.testing.assert_array_equal(res.average_global_w, ref.state.average_global_w)
        assert len(res.history) == len(ref.history) == sc.algorithm.rounds
        for a, b in zip(ref.history, res.history):
            # the MISE of equal iterates, evaluated by a vectorised formula here and by the evaluator there
            assert b["mise"] == pytest.approx(a["mise"], rel=1e-12), (sc.privacy.trust, a["round"])
            for key in ("eps_rdp", "eps_pld", "zcdp_rho"):
                if key in a:
                    assert b[key] == pytest.approx(a[key], rel=1e-12), (sc.privacy.trust, key)
        if sc.privacy.trust == "secure_aggregation":
            assert "eps_pld" not in res.final and 0.99 * sc.privacy.eps < res.final["eps_rdp"] <= sc.privacy.eps
    if trust == "secure_aggregation":
        # the same integer sums as the in-process sites' shares of round 1 (w^0 = 0: every point is 0)
        sc = aggregated[0]
        sizes, basis, features, responses, clipped, _ = simulation_setup(sc, with_reference=False)
        data = SiteData.stack(range(len(sizes)), features, responses, clipped)
        server = FDPADMMServer(sc, basis, sizes)
        shares = answer([SiteRequest(i, 1, {"point": np.zeros(server.dim)}) for i in range(len(sizes))], data,
                        site_plan(sc, basis, sizes), run_noise(sc.seed))
        np.testing.assert_array_equal(sums[0], np.sum([r.value for r in shares], axis=0))
        assert len(sums) == sc.algorithm.rounds * len(aggregated)
