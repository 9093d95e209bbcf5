"""`flwr run` dispatches every algorithm family (peer-to-peer relay, gradient ADMM) on a real SuperLink,
and the gradient-ADMM run's final iterate equals the in-process engine's for the same seed."""
from __future__ import annotations

import numpy as np
import pytest

from fdp_flower.algorithms.registry import load_any_scenario
from fdp_flower.config.base import parse_override_string
from tests.flower_harness import REPO, flwr_run, simulation_superlink

CASES = [
    ("scenarios/p2p_lad_zcdp_nfl.yaml", "algorithm.rounds=3"),
    ("scenarios/dp_admm_breast_cancer.yaml", "algorithm.rounds=3; federation.num_clients=2"),
]


@pytest.mark.slow
def test_flwr_run_dispatches_p2p_and_gradient_admm(tmp_path):
    with simulation_superlink(tmp_path, num_supernodes=2) as env:
        for i, (scenario, overrides) in enumerate(CASES):
            out = tmp_path / f"results-{i}"
            _, status, output = flwr_run(env, f"scenario='{scenario}' overrides='{overrides}' results-dir='{out}'")
            run = status["runs"][0]
            assert run["status"] == "finished:completed", f"{scenario}: {run['status-details']}\n{output[-3000:]}"
            (result_dir,) = list(out.iterdir())
            assert any(result_dir.glob("history.*")) and any(result_dir.glob("ledger.*"))
    from fdp_flower.engines.gradient_admm import run_scenario

    scenario, overrides = CASES[1]
    local, _problem, _ref = run_scenario(load_any_scenario(REPO / scenario, parse_override_string(overrides)),
                                         with_reference=False)
    (result_dir,) = list((tmp_path / "results-1").iterdir())
    np.testing.assert_allclose(np.load(result_dir / "final.npz")["x"], local.state.x, rtol=0, atol=1e-10)
    # fdp_flower.load_results reads both layouts back into the API's fitted model
    from fdp_flower import load_results

    gradient = load_results(result_dir)
    np.testing.assert_allclose(gradient.coefficients, local.state.x, rtol=0, atol=1e-10)
    assert gradient.privacy.private and gradient.privacy.neighbouring == "add_remove"
    assert len(gradient.ledger.releases) == 3 * 2 and len(gradient.history) == 3
    (p2p_dir,) = list((tmp_path / "results-0").iterdir())
    p2p = load_results(p2p_dir)
    with np.load(p2p_dir / "iterates.npz") as npz:
        np.testing.assert_allclose(p2p.node_w, npz["released"][-1])
    assert p2p.algorithm == "zcdp_nfl" and p2p.privacy.releases == 3
