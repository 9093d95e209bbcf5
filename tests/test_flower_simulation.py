"""End to end on Flower's simulation engine with a real SuperLink: the run completes and its
iterates equal the in-process engine's for the same seed."""
from __future__ import annotations

import json

import numpy as np
import pytest

from fdp_flower.algorithms.fdp_admm.config import load_scenario
from fdp_flower.config.base import parse_override_string
from fdp_flower.engines.inprocess import run_fdp_admm
from tests.flower_harness import REPO, flwr_run, simulation_superlink

SCENARIO = "scenarios/flwr_default.yaml"


def _run_and_compare(tmp_path, env, overrides: str, label: str):
    out = tmp_path / f"results-{label}"
    run_id, status, output = flwr_run(
        env, f"scenario='{SCENARIO}' overrides='{overrides}' results-dir='{out}'")
    run = status["runs"][0]
    assert run["status"] == "finished:completed", f"{run['status']}: {run['status-details']}\n{output[-3000:]}"
    (result_dir,) = list(out.iterdir())
    summary = json.loads((result_dir / "summary.json").read_text())
    final = np.load(result_dir / "final.npz")
    scenario = load_scenario(REPO / SCENARIO, parse_override_string(overrides))
    local = run_fdp_admm(scenario)
    assert summary["stop_reason"] == "completed"
    assert summary["rounds_completed"] == scenario.algorithm.rounds
    for name in ("global_w", "duals", "noisy_primals"):
        np.testing.assert_allclose(final[f"state_{name}"], getattr(local.state, name), rtol=0, atol=1e-10)
    flower_ledger = (result_dir / "ledger.csv").read_text().splitlines()
    # one release per client and round, and the private basis phase's one per client (federated_dp, round 0)
    basis_phase = scenario.federation.num_clients if getattr(scenario.basis, "private", False) else 0
    assert len(flower_ledger) - 1 == len(local.ledger.releases) == \
        scenario.algorithm.rounds * scenario.federation.num_clients + basis_phase
    assert summary["privacy"]["eps"] == pytest.approx(
        local.ledger.worst_case(scenario.privacy.delta).eps, rel=1e-9)
    return summary


@pytest.mark.slow
def test_flower_simulation_matches_inprocess_engine(tmp_path):
    overrides = "data.n_samples=3000; federation.num_clients=3; algorithm.rounds=4"
    with simulation_superlink(tmp_path, num_supernodes=3) as env:
        summary = _run_and_compare(tmp_path, env, overrides, "one-client-per-node")
        # fewer nodes than clients (the default local simulation has 2 SuperNodes)
        _run_and_compare(tmp_path, env, "data.n_samples=3000; federation.num_clients=5; algorithm.rounds=3",
                         "several-clients-per-node")
    assert summary["privacy"]["private"] is True
