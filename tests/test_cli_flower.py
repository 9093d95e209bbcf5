"""`fdp-flower run --engine flower` starts a SuperLink with Flower's simulation runtime, runs the scenario
with `flwr run`, checks the run status and stops everything; its iterates equal the in-process engine's."""
from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np
import pytest

from fdp_flower.algorithms.fdp_admm.config import load_scenario
from fdp_flower.cli import main
from fdp_flower.engines.inprocess import run_fdp_admm

ROOT = Path(__file__).resolve().parents[1]
OVERRIDES = ["data.n_samples=1200", "federation.num_clients=3", "algorithm.rounds=3"]


def _sim_workdirs() -> set[str]:
    return {p.name for p in Path(tempfile.gettempdir()).glob("fdp-flower-sim-*")}


@pytest.mark.slow
def test_cli_engine_flower_runs_the_scenario_on_flower(tmp_path, capsys):
    path = ROOT / "scenarios" / "quickstart.yaml"
    before = _sim_workdirs()
    args = ["run", str(path), "--engine", "flower", "--out", str(tmp_path)]
    for o in OVERRIDES:
        args += ["--set", o]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "status: finished:completed" in out
    (result_dir,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    assert f"results: {result_dir}" in out
    assert f"plot: {result_dir / 'convergence.png'}" in out and (result_dir / "convergence.png").stat().st_size > 0
    final = np.load(result_dir / "final.npz")
    local = run_fdp_admm(load_scenario(path, OVERRIDES))
    np.testing.assert_allclose(final["state_global_w"], local.state.global_w, rtol=0, atol=1e-10)
    from fdp_flower import FunctionalModel, load_results

    model = load_results(result_dir)  # the Python API's model, from a Flower run's results
    expected = FunctionalModel.from_run(local)
    np.testing.assert_allclose(model.beta_values, expected.beta_values, rtol=0, atol=1e-10)
    assert model.engine == "flower" and model.privacy.eps == pytest.approx(expected.privacy.eps, rel=1e-9)
    assert _sim_workdirs() == before  # a completed run leaves no FLWR_HOME / logs behind


@pytest.mark.slow
def test_cli_engine_flower_resumes_a_checkpoint_and_ends_where_an_uninterrupted_run_ends(tmp_path, capsys):
    """Interrupted after round 2 (in process), resumed on Flower: the final state and the ledger equal
    those of an uninterrupted run (the noise of a release depends only on seed, client and round)."""
    path = ROOT / "scenarios" / "quickstart.yaml"
    overrides = [*OVERRIDES[:2], "algorithm.rounds=4", "output.checkpoint_every=1"]
    scenario = load_scenario(path, overrides)
    ckpt = tmp_path / "interrupted" / "checkpoint.npz"
    run_fdp_admm(scenario, checkpoint_path=ckpt, stop_after=2)
    assert main(["run", "--resume", str(ckpt.parent), "--engine", "flower", "--out", str(tmp_path / "flower")]) == 0
    out = capsys.readouterr().out
    assert "after round 2" in out and "status: finished:completed" in out
    # one SuperNode per client: each node simulates the client the resumed server names
    assert f"with {scenario.federation.num_clients} simulated SuperNodes" in out
    (result_dir,) = [p for p in (tmp_path / "flower").iterdir() if p.is_dir()]
    final = np.load(result_dir / "final.npz")
    local = run_fdp_admm(scenario)
    for name in ("global_w", "duals", "noisy_primals"):
        np.testing.assert_allclose(final[f"state_{name}"], getattr(local.state, name), rtol=0, atol=1e-10)
    ledger_rows = (result_dir / "ledger.csv").read_text().splitlines()[1:]
    assert len(ledger_rows) == len(local.ledger.releases) == 4 * scenario.federation.num_clients
    assert not list(Path(tempfile.gettempdir()).glob("fdp-flower-resume-*.yaml"))


class _Crash(Exception):
    pass


@pytest.mark.slow
def test_a_flower_resume_with_os_entropy_noise_charges_the_releases_the_crashed_run_made(tmp_path, capsys):
    """OS-entropy noise: a run killed during round 3 after its releases (last checkpoint: round 2) and
    resumed on Flower draws new noise for round 3, so each client's ledger holds both round-3 releases
    (the interrupted run's, from its fsynced journal, and the re-release): rounds 1, 2, 3, 3, 4, and the
    reported eps is the PLD eps of all five."""
    from fdp_flower.outputs.checkpoint import read_checkpoint
    from fdp_flower.privacy.ledger import pld_epsilon

    path = ROOT / "scenarios" / "quickstart.yaml"
    overrides = [*OVERRIDES[:2], "algorithm.rounds=4", "output.checkpoint_every=1",
                 "privacy.noise_source=os_entropy"]
    scenario = load_scenario(path, overrides)

    def die_in_round_3(round_, row):
        if round_ == 3:
            raise _Crash

    ckpt = tmp_path / "interrupted" / "checkpoint.npz"
    with pytest.raises(_Crash):
        run_fdp_admm(scenario, checkpoint_path=ckpt, progress=die_in_round_3)
    assert read_checkpoint(ckpt.parent).round == 2
    assert main(["run", "--resume", str(ckpt.parent), "--engine", "flower", "--out", str(tmp_path / "flower")]) == 0
    assert "status: finished:completed" in capsys.readouterr().out
    (result_dir,) = [p for p in (tmp_path / "flower").iterdir() if p.is_dir()]
    ledger = read_checkpoint(result_dir).ledger
    for client in range(scenario.federation.num_clients):
        assert sorted(r.round for r in ledger.of_client(client)) == [1, 2, 3, 3, 4]
    privacy = json.loads((result_dir / "summary.json").read_text())["privacy"]
    worst = ledger.of_client(privacy["worst_client"])
    assert privacy["releases"] == 5
    assert privacy["eps"] == pytest.approx(pld_epsilon(worst, scenario.privacy.delta), rel=1e-12)
    one_per_round = list({r.round: r for r in worst}.values())  # what an uninterrupted run would charge
    assert len(one_per_round) == 4
    assert privacy["eps"] > pld_epsilon(one_per_round, scenario.privacy.delta)
