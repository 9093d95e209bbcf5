"""The Tecator spectra (read offline from the sktime wheel) and the shipped Tecator scenarios, end to end."""
from __future__ import annotations

import importlib.metadata
import json
from pathlib import Path

import numpy as np
import pytest

from fdp_flower.algorithms.fdp_admm.config import load_scenario
from fdp_flower.engines.inprocess import run_fdp_admm
from fdp_flower.functional.node_files import load_tecator, partition, write_partitions

APP = Path(__file__).resolve().parents[1]

try:
    importlib.metadata.distribution("sktime")
    HAVE_SKTIME = True
except importlib.metadata.PackageNotFoundError:
    HAVE_SKTIME = False
pytestmark = pytest.mark.skipif(not HAVE_SKTIME, reason="Tecator needs the sktime wheel (pip install --no-deps sktime)")


@pytest.fixture(scope="module")
def tecator_files(tmp_path_factory):
    out = tmp_path_factory.mktemp("tecator")
    return write_partitions(partition(load_tecator(), 3), out, "npz")


def test_tecator_is_215_spectra_at_100_wavelengths():
    data = load_tecator()
    assert data.curves.shape == (215, 100)
    assert (data.grid[0], data.grid[-1]) == (850.0, 1050.0)
    assert np.all(np.isfinite(data.curves)) and 0 < data.response.min() < 2 and 45 < data.response.max() < 50


def test_tecator_scenario_runs_end_to_end(tmp_path, tecator_files):
    sc = load_scenario(APP / "scenarios" / "tecator.yaml", [f"data.paths={json.dumps([str(p) for p in tecator_files])}"])
    result = run_fdp_admm(sc)
    assert result.stop_reason == "completed" and len(result.history) == sc.algorithm.rounds
    assert result.sample_sizes == [72, 72, 71]
    final, ref = result.history[-1]["objective"], result.reference.objective
    null = run_fdp_admm(sc.model_copy(update={"algorithm": sc.algorithm.model_copy(update={"rounds": 1})}),
                        with_reference=False).history[0]["objective"]
    # private FDP-ADMM (total eps 4) gets within 10% of the exact penalized optimum on the same
    # features, and far below the objective after one round (close to the null model w = 0)
    assert final <= 1.10 * ref
    assert final < 0.5 * null
    summary = result.ledger.worst_case(sc.privacy.delta)
    assert summary.releases == sc.algorithm.rounds  # basis phase not private here: no extra release
    assert summary.eps <= sc.privacy.eps * (1 + 1e-6)


def test_tecator_dp_scenario_charges_the_basis_phase(tecator_files):
    sc = load_scenario(APP / "scenarios" / "tecator_dp.yaml",
                       [f"data.paths={json.dumps([str(p) for p in tecator_files])}", "algorithm.rounds=5"])
    result = run_fdp_admm(sc, with_reference=False)
    fpca = [r for r in result.ledger.releases if r.mechanism == "fpca_covariance"]
    assert [r.client for r in fpca] == [0, 1, 2] and all(r.round == 0 for r in fpca)
    # privacy.eps is the whole run's: basis (eps 4) and the 5 FDP-ADMM rounds compose to it
    worst = result.ledger.worst_case(sc.privacy.delta)
    assert worst.releases == 6 and 0.97 * sc.privacy.eps <= worst.eps_pld <= sc.privacy.eps


@pytest.mark.slow
def test_tecator_dp_trains_on_flower_within_its_whole_run_budget(tmp_path, tecator_files):
    """Three SuperNodes on loopback, each with its own Tecator file: the private basis phase and the
    FDP-ADMM rounds run (no refusal at round 1) and the whole run ends within [0.97, 1] x privacy.eps,
    on the server's ledger and on every site's own."""
    from fdp_flower.engines.flower import LoopbackFederation

    scenario = APP / "scenarios" / "tecator_dp.yaml"
    results = tmp_path / "results"
    fed = LoopbackFederation(tmp_path, data_paths=tecator_files)
    try:
        fed.start()
        _run_id, status = fed.run({"scenario": str(scenario), "overrides": "algorithm.rounds=3",
                                   "results-dir": str(results)}, timeout=600)
        assert status == "finished:completed", fed.logs()
    finally:
        fed.stop()
    (summary_path,) = list(results.glob("*/summary.json"))
    summary = json.loads(summary_path.read_text())
    privacy = summary["privacy"]
    assert summary["rounds_completed"] == 3 and privacy["releases"] == 4  # the summary + 3 rounds
    assert 0.97 * 6.0 <= privacy["eps"] <= 6.0 and privacy["eps_budget"] == 6.0
    assert sorted(privacy["mechanisms"]) == ["fdp_admm_subgradient", "fpca_covariance"]
    for site in privacy["sites"]:
        assert site["run_releases"] == 4 and site["noise_source"] == "os_entropy"
        assert site["run_eps"] == pytest.approx(site["server_eps"], rel=1e-6) and site["run_eps"] <= 6.0
