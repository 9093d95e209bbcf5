"""Privacy off, the peer-to-peer ADMM reaches its own exact estimator (issue 29, item 3): curvature-scaled
steps (docs/algorithms.md, eqs. (3.11)-(3.12)), the stop on the released iterates (3.13) and
``stop_reason: cap`` when the rule never holds."""
from __future__ import annotations

import numpy as np
import pytest

import fdp_flower
from fdp_flower.algorithms.p2p.nonprivate import (
    STOP_TOLERANCE,
    converged,
    curvature_unit,
    nonprivate_admm_settings,
    response_scale,
)
from fdp_flower.core.losses import AbsoluteLoss, LogisticLoss, QuantileLoss, SquaredLoss


@pytest.fixture(scope="module")
def rows():
    """t(3) errors, features clipped hard (rows of norm ~2 into c1 = 1): the case where eta0 = 10 stalled."""
    rng = np.random.default_rng(11)
    x = rng.standard_normal((600, 4))
    y = 1.0 + x @ np.array([1.0, -2.0, 0.5, 1.5]) + rng.standard_t(3, 600)
    return x, y


@pytest.mark.parametrize("tau", [0.5, 0.9])
def test_privacy_off_reaches_one_percent_of_the_exact_estimator_and_stops(rows, tau):
    x, y = rows
    model = fdp_flower.fit_p2p(x, y, eps=None, tau=tau, n_nodes=6, seed=1)
    final = model.history.iloc[-1]
    assert final["released_normalized_error_max"] <= 0.01  # every node within 1% of ||x*||
    assert model.stop_reason.startswith("converged")
    assert final["round"] < 1000


def test_a_rescaled_response_takes_the_same_steps(rows):
    """Eq. (3.11): u is proportional to s_y, so y -> c y rescales x* and every iterate by c."""
    x, y = rows
    runs = [fdp_flower.fit_p2p(x, c * y, eps=None, n_nodes=6, seed=1) for c in (1.0, 1e-3, 1e4)]
    rounds = {int(m.history.iloc[-1]["round"]) for m in runs}
    assert len(rounds) == 1
    errs = [float(m.history.iloc[-1]["released_normalized_error"]) for m in runs]
    np.testing.assert_allclose(errs, errs[0], rtol=1e-6)
    np.testing.assert_allclose(runs[2].w, 1e4 * runs[0].w, rtol=1e-6)


def test_stop_reason_is_cap_when_the_rule_never_holds(rows, tmp_path):
    import json

    x, y = rows
    model = fdp_flower.fit_p2p(x, y, eps=None, n_nodes=6, seed=1, rounds=25, out=tmp_path / "run")
    assert model.stop_reason == "cap"
    assert int(model.history.iloc[-1]["round"]) == 25
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["stop_reason"] == "cap"


def test_the_stopping_rule_reads_half_the_run():
    """(3.13): it holds when the average has not moved since round k // 2 and the nodes agree."""
    k, n, dim = 40, 3, 2
    still = np.ones((k + 1, n, dim))
    assert converged(still, k)
    assert not converged(still, 10)  # before the first round it may stop
    drifting = still.copy()
    drifting[k // 2] *= 1 + 2 * STOP_TOLERANCE  # moved by more than tol since round k // 2
    assert not converged(drifting, k)
    split = still.copy()
    split[k, 0] += 3 * STOP_TOLERANCE  # one node away from the others
    assert not converged(split, k)


def test_curvature_units():
    assert response_scale([np.array([0.0, 1.349, 2 * 1.349, 3 * 1.349, 4 * 1.349])]) == pytest.approx(2.0)
    assert response_scale([np.zeros(5)]) == 1.0  # a constant response
    u = curvature_unit(QuantileLoss(tau=0.5), dim=9, c1=1.0, response_scale_=2.0)
    assert u == pytest.approx(18.0)
    assert curvature_unit(QuantileLoss(tau=0.9), dim=9, c1=1.0, response_scale_=2.0) == pytest.approx(18 / 0.36)
    assert curvature_unit(AbsoluteLoss(), dim=9, c1=3.0, response_scale_=2.0) == pytest.approx(1.0)
    assert curvature_unit(SquaredLoss(), dim=4, c1=2.0, response_scale_=5.0) == pytest.approx(1.0)
    assert curvature_unit(LogisticLoss(), dim=4, c1=1.0, response_scale_=5.0) == pytest.approx(16.0)
    rough = nonprivate_admm_settings(QuantileLoss(), smooth=False, dim=9, c1=1.0, response_scale_=2.0)
    assert rough == {"rho": 1 / 18, "step": {"kind": "inv", "eta0": 30 * 18.0}, "rounds": 1000}
    smooth = nonprivate_admm_settings(LogisticLoss(), smooth=True, dim=4, c1=1.0, response_scale_=1.0)
    assert smooth == {"rho": 0.3 / 16, "step": {"kind": "inv", "eta0": 30 * 16.0}, "rounds": 1000}


def test_a_shifted_response_is_centred_and_the_intercept_absorbs_it(rows):
    """With an intercept, y + 1e4 gives the model of y with the intercept raised by 1e4 (regression
    equivariance), in the same rounds; without the centring the first run of this kind stalls (benchmarks: 0.96 ||x*|| at the cap)."""
    x, y = rows
    base = fdp_flower.fit_p2p(x, y, eps=None, n_nodes=6, seed=1)
    far = fdp_flower.fit_p2p(x, y + 1e4, eps=None, n_nodes=6, seed=1)
    assert int(far.history.iloc[-1]["round"]) == int(base.history.iloc[-1]["round"])
    np.testing.assert_allclose(far.coefficients, base.coefficients, rtol=1e-8, atol=1e-10)
    assert far.intercept == pytest.approx(base.intercept + 1e4, rel=1e-10)
    assert far.history.iloc[-1]["released_normalized_error_max"] <= 0.01


def test_the_relay_stops_on_released_vectors_without_changing_them():
    """The stopping rule is the server protocol's (``P2PServer(stop=...)``): a run it stops has the same
    released vectors as the uncapped run up to that round (post-processing), ends there with ``converged``,
    and a rule that never holds ends at the cap with ``cap``."""
    from fdp_flower.algorithms.p2p.config import DecentralizedAdmmConfig, P2PScenario, SyntheticRegressionData
    from fdp_flower.config.sections import PrivacyConfig
    from fdp_flower.engines.p2p import run_scenario

    sc = P2PScenario(federation={"num_clients": 5}, topology={"kind": "ring"},
                     data=SyntheticRegressionData(problem="ridge", samples_per_node=40, dim=3),
                     algorithm=DecentralizedAdmmConfig(rounds=300, rho=0.3, step={"kind": "inv", "eta0": 30.0}),
                     privacy=PrivacyConfig(enabled=False))
    full = run_scenario(sc, metrics_every=300)
    stopped = run_scenario(sc, metrics_every=300, stop=converged)
    last = len(stopped.released) - 1
    assert 20 <= last < 300 and stopped.stop_reason.startswith("converged")
    assert f"after round {last}" in stopped.stop_reason
    assert converged(full.released, last) and not any(converged(full.released, r) for r in range(1, last))
    np.testing.assert_array_equal(stopped.released, full.released[: last + 1])
    assert full.stop_reason == "completed"
    never = run_scenario(sc, metrics_every=300, stop=lambda released, round_: False)
    assert never.stop_reason == "cap" and len(never.released) == 301
