"""`flwr run` dispatches every algorithm family (peer-to-peer relay, gradient ADMM) on a real SuperLink."""
from __future__ import annotations

import pytest

from tests.flower_harness import flwr_run, simulation_superlink

CASES = [
    ("scenarios/p2p_lad_zcdp_nfl.yaml", "algorithm.steps=3"),
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
