"""A real deployment on loopback: flower-superlink + 3 flower-supernode processes with node-local files.

The run uses the federated DP-FPCA setup phase and 3 FDP-ADMM rounds; it must end
``finished:completed`` (asked of the SuperLink: ``flwr run --stream`` exits 0 even when
the ServerApp fails), write its results, and -- with the same seed and the same
files -- produce exactly the iterates of the in-process engine.  Every process is
stopped by its process group, also on failure.  About 80 s.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from fdp_flower.algorithms.fdp_admm.config import load_scenario
from fdp_flower.engines.flower import LoopbackFederation
from fdp_flower.engines.inprocess import run_fdp_admm
from fdp_flower.functional.node_files import load_dataset, partition, write_partitions

APP = Path(__file__).resolve().parents[1]
SCENARIO = APP / "scenarios" / "deploy_federated_fpca.yaml"

# the sites opt in to noise from the run seed (the server knows it: reproducibility tests only), so the
# deployment's iterates can equal the in-process engine's; tests/test_site_privacy_deployment.py covers
# the default (noise the server cannot predict)
SEEDED = {"allow-seeded-noise": True}

pytestmark = pytest.mark.skipif(shutil.which("flower-superlink") is None
                                and not (Path(__import__("sys").executable).parent / "flower-superlink").exists(),
                                reason="flower-superlink not installed")


@pytest.mark.slow
def test_loopback_deployment_completes_and_equals_the_simulation(tmp_path):
    paths = write_partitions(partition(load_dataset("paper", seed=0, n_samples=3000), 3), tmp_path / "data", "npz")
    results = tmp_path / "results"
    fed = LoopbackFederation(tmp_path, data_paths=paths, site_config=SEEDED)
    try:
        fed.start()
        pids = [p.pid for p in fed.processes]
        assert len(pids) == 4  # 1 SuperLink + 3 SuperNodes
        run_id, status = fed.run({"scenario": str(SCENARIO), "overrides": "", "results-dir": str(results)},
                                 timeout=170)
        assert status == "finished:completed", fed.logs()
    finally:
        fed.stop()
    assert not fed.processes
    assert set(pids) <= set(fed.stopped_pids) and len(fed.stopped_pids) > len(pids)  # + superexecs
    for pid in fed.stopped_pids:  # every started process and its descendants are gone
        assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text().lower()

    (out,) = list(results.glob(f"*run{run_id}"))
    summary = json.loads((out / "summary.json").read_text())
    assert summary["stop_reason"] == "completed" and summary["rounds_completed"] == 3
    assert summary["sample_sizes"] == [1000, 1000, 1000]  # learned from the replies
    ledger = (out / "ledger.csv").read_text().splitlines()
    assert sum(",fpca_covariance" in row for row in ledger) == 3  # one covariance release per node
    assert len(ledger) == 1 + 3 + 3 * 3  # header, FPCA phase, 3 rounds x 3 clients

    # Same seed, same files: the in-process engine gives the same basis and iterates.
    scenario = load_scenario(SCENARIO, [f"data.paths={json.dumps([str(p) for p in paths])}"])
    sim = run_fdp_admm(scenario, with_reference=False)
    final = np.load(out / "final.npz")
    np.testing.assert_allclose(final["basis_components"], sim.basis.components, rtol=0, atol=1e-12)
    np.testing.assert_allclose(final["state_global_w"], sim.state.global_w, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(final["state_duals"], sim.state.duals, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(final["state_noisy_primals"], sim.state.noisy_primals, rtol=1e-10, atol=1e-12)
    print(f"deployment == simulation: max |w_dep - w_sim| = "
          f"{np.max(np.abs(final['state_global_w'] - sim.state.global_w)):.3g}")


@pytest.mark.slow
def test_loopback_deployment_reports_a_grid_mismatch_as_a_failed_run(tmp_path):
    """One node's file is on another grid: the setup phase stops the run, the SuperLink says
    ``finished:failed`` (although ``flwr run --stream`` exits 0) and the log names the clients."""
    good = partition(load_dataset("paper", seed=0, n_samples=300), 3)
    odd = load_dataset("paper", seed=1, n_samples=100, grid_points=99)
    paths = write_partitions([good[0], odd, good[2]], tmp_path / "data", "csv")
    fed = LoopbackFederation(tmp_path, data_paths=paths, site_config=SEEDED)
    try:
        fed.start()
        _run_id, status = fed.run({"scenario": str(APP / "scenarios" / "deploy_demo.yaml"), "overrides": "",
                                   "results-dir": str(tmp_path / "results")}, timeout=150)
    finally:
        fed.stop()
    assert status == "finished:failed"
    log = (tmp_path / "flwr_run.log").read_text()
    assert "grid mismatch between nodes: clients [0, 2] have a grid of 100 points 0..1; clients [1] have " \
           "a grid of 99 points 0..1" in log
    assert not list((tmp_path / "results").glob("*/summary.json"))  # nothing was trained


@pytest.mark.slow
def test_loopback_deployment_with_secure_aggregation(tmp_path):
    """privacy.trust secure_aggregation on a real loopback deployment (SuperLink + 3 SuperNodes, node-local
    files): every round one SecAgg+ round; each site accepts the mode in its node config, charges its
    Skellam share to its own ledger (mechanism and t recorded) and the run equals the in-process engine's."""
    paths = write_partitions(partition(load_dataset("paper", seed=0, n_samples=3000), 3), tmp_path / "data", "npz")
    results = tmp_path / "results"
    overrides = ["basis={kind: fixed, family: cosine, n_components: 6}", "privacy.mode=total", "privacy.eps=1.0",
                 "privacy.trust=secure_aggregation", "privacy.tolerated=0"]
    fed = LoopbackFederation(tmp_path, data_paths=paths,
                             site_config={**SEEDED, "accept-trust": "site,secure_aggregation"})
    try:
        fed.start()
        run_id, status = fed.run({"scenario": str(SCENARIO), "overrides": "; ".join(overrides),
                                  "results-dir": str(results)}, timeout=400)
        assert status == "finished:completed", fed.logs()
        site_ledgers = [fed.ledger_path(i).read_text().splitlines() for i in range(3)]
    finally:
        fed.stop()
    (out,) = list(results.glob(f"*run{run_id}"))
    summary = json.loads((out / "summary.json").read_text())
    assert summary["stop_reason"] == "completed" and summary["privacy"]["accountant"] == "rdp"
    for lines in site_ledgers:
        shares = [json.loads(line) for line in lines if '"skellam_secure_sum"' in line]
        assert len(shares) == 3 and all(s["tolerated"] == 0 and s["sites"] == 3 for s in shares)
    scenario = load_scenario(SCENARIO, [*overrides, f"data.paths={json.dumps([str(p) for p in paths])}"])
    sim = run_fdp_admm(scenario, with_reference=False)
    final = np.load(out / "final.npz")
    np.testing.assert_array_equal(final["state_global_w"], sim.state.global_w)
    assert summary["privacy"]["eps"] == pytest.approx(sim.history[-1]["eps_rdp"], rel=1e-12)


@pytest.mark.slow
def test_loopback_deployment_runs_the_newton_rule_on_node_local_files(tmp_path):
    """algorithm.rule newton on node-local files (SuperLink + 3 SuperNodes): the setup phase learns m_i, every train
    message names n = sum_i m_i, which each site checks and uses for the schedule's split; the run completes with
    its 20 releases per site, spends the whole budget, and equals the in-process engine on the same files."""
    paths = write_partitions(partition(load_dataset("paper", seed=0, n_samples=3000), 3), tmp_path / "data", "npz")
    results = tmp_path / "results"
    overrides = ["privacy.mode=total", "privacy.eps=1.0", "algorithm.rule=newton", "algorithm.rounds=20",
                 "algorithm.response_bounds=[-20, 20]"]  # the shortest schedule: 6 quartile, 12 fit, 2 density
    fed = LoopbackFederation(tmp_path, data_paths=paths, site_config=SEEDED)
    try:
        fed.start()
        run_id, status = fed.run({"scenario": str(SCENARIO), "overrides": "; ".join(overrides),
                                  "results-dir": str(results)}, timeout=600)
        assert status == "finished:completed", fed.logs()
    finally:
        fed.stop()
    (out,) = list(results.glob(f"*run{run_id}"))
    summary = json.loads((out / "summary.json").read_text())
    assert summary["stop_reason"] == "completed" and summary["rounds_completed"] == 20
    ledger = (out / "ledger.csv").read_text().splitlines()
    assert sum(",fdp_newton_quartile_shares" in row for row in ledger) == 3 * 6
    assert len(ledger) == 1 + 3 + 3 * 20  # header, FPCA phase, 20 rounds x 3 sites
    assert 0.97 <= summary["privacy"]["eps"] <= 1.0
    scenario = load_scenario(SCENARIO, [*overrides, f"data.paths={json.dumps([str(p) for p in paths])}"])
    sim = run_fdp_admm(scenario, with_reference=False)
    final = np.load(out / "final.npz")
    np.testing.assert_allclose(final["state_global_w"], sim.state.global_w, rtol=1e-10, atol=1e-12)
