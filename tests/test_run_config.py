"""Flower conventions: the typed keys of [tool.flwr.app.config] reach the scenario, a relative scenario
path names a file of the app bundle, the bundle leaves benchmarks/tests/docs out, server-side metrics
are handed to Flower's evaluate_fn; end to end: `flwr run --run-config` and `./run.sh` next to an
unrelated SuperLink."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
import warnings
from pathlib import Path

import pytest

from fdp_flower.algorithms.registry import any_scenario_from_run_config, family, load_any_scenario
from fdp_flower.config.base import (
    APP_DIR,
    RUN_CONFIG_TYPES,
    RUN_CONFIG_UNSET,
    ScenarioError,
    run_config_field_overrides,
)
from tests.flower_harness import REPO, flwr_run, simulation_superlink

APP_CONFIG = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["flwr"]["app"]["config"]


def _config(scenario: str, **typed) -> dict:
    """A run config as Flower hands it to the ServerApp: the app's defaults, then ``typed``."""
    return {**APP_CONFIG, "scenario": scenario, **{k.replace("_", "-"): v for k, v in typed.items()}}


def test_pyproject_declares_every_typed_key_unset_with_its_type():
    for key, kind in RUN_CONFIG_TYPES.items():
        assert APP_CONFIG[key] == RUN_CONFIG_UNSET and type(APP_CONFIG[key]) is kind, key


def test_defaults_leave_the_scenario_as_the_file_says():
    for name in ("flwr_default", "p2p_lad_zcdp_nfl", "dp_admm_breast_cancer"):
        path = f"scenarios/{name}.yaml"
        assert any_scenario_from_run_config(_config(path)) == load_any_scenario(REPO / path)


def test_typed_keys_reach_the_fdp_admm_scenario():
    scenario = any_scenario_from_run_config(_config(
        "scenarios/flwr_default.yaml", num_server_rounds=5, eps=0.8, delta=1e-6, tau=0.9, lam=0, seed=3,
        num_clients=4))
    assert scenario.algorithm.rounds == 5 and scenario.privacy.eps == 0.8 and scenario.privacy.delta == 1e-6
    assert scenario.model.loss.tau == 0.9 and scenario.model.penalty.lam == 0.0  # 0 is a value, not "unset"
    assert scenario.seed == 3 and scenario.federation.num_clients == 4
    # the rest of the file is untouched
    base = load_any_scenario(REPO / "scenarios/flwr_default.yaml")
    assert scenario.algorithm.rho == base.algorithm.rho and scenario.data == base.data


def test_typed_keys_reach_peer_to_peer_and_gradient_scenarios():
    p2p = any_scenario_from_run_config(_config("scenarios/p2p_lad_zcdp_nfl.yaml", num_server_rounds=7,
                                               eps=2.5, num_clients=12, seed=4))
    assert (p2p.algorithm.rounds, p2p.privacy.eps, p2p.federation.num_clients, p2p.seed) == (7, 2.5, 12, 4)
    grad = any_scenario_from_run_config(_config("scenarios/dp_admm_breast_cancer.yaml", num_server_rounds=3,
                                                lam=0.01, num_clients=2, delta=1e-4))
    assert (grad.algorithm.rounds, grad.model.penalty.lam, grad.federation.num_clients, grad.privacy.delta) == \
        (3, 0.01, 2, 1e-4)


@pytest.mark.parametrize("path", sorted(p.relative_to(REPO).as_posix() for p in (REPO / "scenarios").glob("dp_admm_*.yaml")))
def test_every_typed_key_works_on_every_shipped_gradient_scenario(path):
    """num-server-rounds, eps, delta, lam, seed and num-clients reach their one field in each DP-(Acc)ADMM
    scenario (lam: model.penalty.lam), and leave the rest of the file as it is; tau has no meaning here."""
    base = load_any_scenario(REPO / path)
    scenario = any_scenario_from_run_config(_config(path, num_server_rounds=7, eps=0.9, delta=2e-4, lam=0.02,
                                                    seed=5, num_clients=3))
    assert (scenario.algorithm.rounds, scenario.privacy.eps, scenario.privacy.delta, scenario.model.penalty.lam,
            scenario.seed, scenario.federation.num_clients) == (7, 0.9, 2e-4, 0.02, 5, 3)
    assert scenario.model.constraint == base.model.constraint and scenario.data == base.data
    assert scenario.algorithm.model_copy(update={"rounds": base.algorithm.rounds}) == base.algorithm
    assert any_scenario_from_run_config(_config(path, lam=0)).model.penalty.lam == 0.0  # 0 is a value
    with pytest.raises(ScenarioError, match="tau has no meaning for gradient_admm"):
        any_scenario_from_run_config(_config(path, tau=0.3))
    with pytest.raises(ScenarioError, match=r"^[^\n]*model\.lam: renamed to model\.penalty\.lam$"):
        any_scenario_from_run_config({**_config(path), "overrides": "model.lam=0.1"})


@pytest.mark.parametrize("path", sorted(str(p.relative_to(REPO)) for p in (REPO / "scenarios").glob("p2p_*.yaml")))
def test_every_typed_key_works_on_every_shipped_peer_to_peer_scenario(path):
    """num-server-rounds, eps, delta, lam, seed and num-clients reach algorithm.rounds, privacy.eps / delta,
    model.penalty.lam, seed and federation.num_clients of every p2p scenario, and only those fields change."""
    base = load_any_scenario(REPO / path)
    fixed = base.topology.kind == "paper004_five"  # a 5-node graph: num-clients can only say 5
    n = 5 if fixed else 12
    scenario = any_scenario_from_run_config(_config(path, num_server_rounds=7, eps=2.5, delta=1e-6, lam=0.25,
                                                    seed=4, num_clients=n))
    assert (scenario.algorithm.rounds, scenario.privacy.eps, scenario.privacy.delta, scenario.model.penalty.lam,
            scenario.seed, scenario.federation.num_clients) == (7, 2.5, 1e-6, 0.25, 4, n)
    assert scenario.model.penalty.kind == base.model.penalty.kind and scenario.model.loss == base.model.loss
    assert scenario.topology == base.topology and scenario.data == base.data
    if fixed:
        with pytest.raises(ScenarioError, match="paper004_five graph has 5 nodes") as err:
            any_scenario_from_run_config(_config(path, num_clients=6))
        assert "\n" not in str(err.value)


def test_an_integer_is_accepted_for_a_float_key_and_typed_keys_combine_with_overrides():
    cfg = {**_config("scenarios/flwr_default.yaml", eps=1), "overrides": "algorithm.rho=0.2; privacy.delta=1e-6"}
    scenario = any_scenario_from_run_config(cfg)
    assert scenario.privacy.eps == 1.0 and scenario.algorithm.rho == 0.2 and scenario.privacy.delta == 1e-6


@pytest.mark.parametrize("typed, message", [
    ({"num-server-rounds": 2.5}, "must be an integer"),
    ({"eps": "0.8"}, "must be a number"),
    ({"seed": True}, "must be a number"),
    ({"eps": 0.0}, "privacy.eps"),  # an explicit value goes through the schema's range check
])
def test_bad_typed_values_are_one_line_errors(typed, message):
    with pytest.raises(ScenarioError, match=message) as err:
        any_scenario_from_run_config({**_config("scenarios/flwr_default.yaml"), **typed})
    assert "\n" not in str(err.value)


def test_a_key_without_meaning_for_the_family_and_a_field_set_twice_are_errors():
    with pytest.raises(ScenarioError, match="tau has no meaning for p2p"):
        run_config_field_overrides({"tau": 0.5}, "p2p", family("zcdp_nfl").run_config)
    with pytest.raises(ScenarioError, match="privacy.eps set both"):
        any_scenario_from_run_config({**_config("scenarios/flwr_default.yaml", eps=0.8),
                                      "overrides": "privacy.eps=0.5"})


def test_a_relative_scenario_is_the_app_bundles_even_when_the_working_directory_has_one(tmp_path, monkeypatch):
    decoy = tmp_path / "scenarios" / "flwr_default.yaml"
    decoy.parent.mkdir()
    decoy.write_text((REPO / "scenarios/flwr_default.yaml").read_text().replace("name: flwr_default",
                                                                               "name: decoy"))
    monkeypatch.chdir(tmp_path)
    assert any_scenario_from_run_config(_config("scenarios/flwr_default.yaml")).name == "flwr_default"
    assert any_scenario_from_run_config(_config(str(decoy))).name == "decoy"  # absolute: taken as is
    (tmp_path / "mine.yaml").write_text(decoy.read_text())
    with pytest.raises(ScenarioError, match="not in the app bundle.*absolute path"):
        any_scenario_from_run_config(_config("mine.yaml"))


@pytest.mark.filterwarnings("ignore:GitWildMatchPattern:DeprecationWarning:pathspec")
def test_the_app_bundle_holds_the_package_and_scenarios_only():
    import io
    import zipfile

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=DeprecationWarning, module="typer")
        from flwr.cli.build import build_fab_from_disk

    names = zipfile.ZipFile(io.BytesIO(build_fab_from_disk(APP_DIR))).namelist()
    tops = {name.split("/")[0] for name in names}
    assert tops == {"fdp_flower", "scenarios", "README.md", "LICENSE", "pyproject.toml", ".info"}
    assert "fdp_flower/server_app.py" in names and "scenarios/flwr_default.yaml" in names


def test_round_metrics_is_the_rounds_history_row_with_finite_numbers_only():
    from fdp_flower.strategies.common import round_metrics

    history = [{"round": 1, "mise": 0.5, "objective_gap": float("nan")}, {"round": 2, "mise": 0.25}]
    assert dict(round_metrics(history, 1)) == {"round": 1.0, "mise": 0.5}
    assert dict(round_metrics(history, 2)) == {"round": 2.0, "mise": 0.25}
    assert round_metrics(history, 0) is None and round_metrics([], 3) is None


@pytest.mark.slow
def test_flwr_run_with_typed_run_config_reaches_the_scenario(tmp_path):
    """`flwr run . --run-config "num-server-rounds=2 eps=0.8 ..."` on a real SuperLink; the SuperLink's
    working directory (tmp_path) holds a decoy scenarios/quickstart.yaml that must not be read."""
    decoy = tmp_path / "scenarios" / "quickstart.yaml"
    decoy.parent.mkdir()
    decoy.write_text((REPO / "scenarios/quickstart.yaml").read_text().replace("name: quickstart", "name: decoy"))
    out = tmp_path / "results"
    with simulation_superlink(tmp_path, num_supernodes=3) as env:
        _, status, output = flwr_run(env, f"scenario='scenarios/quickstart.yaml' overrides='data.n_samples=1200' "
                                          f"num-server-rounds=2 eps=0.8 num-clients=3 seed=11 results-dir='{out}'")
    run = status["runs"][0]
    assert run["status"] == "finished:completed", f"{run['status-details']}\n{output[-3000:]}"
    (result_dir,) = list(out.iterdir())
    assert result_dir.name.startswith("quickstart-flower-")  # the bundle's file, not the decoy
    summary = json.loads((result_dir / "summary.json").read_text())
    assert summary["rounds_completed"] == 2 and summary["sample_sizes"] == [400, 400, 400]
    import yaml

    resolved = yaml.safe_load((result_dir / "scenario.yaml").read_text())
    assert resolved["privacy"]["eps"] == 0.8 and resolved["algorithm"]["rounds"] == 2
    assert resolved["federation"]["num_clients"] == 3 and resolved["seed"] == 11
    # server-side metrics: once per round, through Flower's server-side evaluation
    assert output.count("Global evaluation") == 2 and "Aggregated MetricRecord" not in output
    assert "'mise'" in output.split("[ROUND 2/2]")[1]


@pytest.mark.slow
def test_run_sh_from_a_fresh_clone_uses_its_own_superlink_next_to_an_unrelated_one(tmp_path):
    """An unrelated SuperLink runs, and the caller's FLWR_HOME names it as the default connection:
    ./run.sh still starts its own, reads its own run, and writes results under the clone."""
    from fdp_flower.engines.flower import SimulationFederation

    clone = tmp_path / "clone"
    branch = subprocess.run(["git", "rev-parse", "--abbrev-ref", "HEAD"], cwd=REPO, capture_output=True,
                            text=True, check=True).stdout.strip()
    subprocess.run(["git", "clone", "--quiet", "--branch", branch, str(REPO), str(clone)], check=True)
    other = tmp_path / "other"
    other.mkdir()
    with SimulationFederation(other, app_dir=REPO, connection="theirs", num_supernodes=2) as theirs:
        env = {**theirs.env, "FDP_FLOWER_VENV": sys.prefix, "PYTHONPATH": ""}  # FLWR_HOME: theirs
        proc = subprocess.run(
            ["./run.sh", "--run-config", "num-server-rounds=2 num-clients=3", "--set", "data.n_samples=1500"],
            cwd=clone, env=env, capture_output=True, text=True, timeout=900)
        output = proc.stdout + proc.stderr
        assert proc.returncode == 0, output[-4000:]
        ls = subprocess.run([str(Path(sys.executable).parent / "flwr"), "ls", "theirs", "--format", "json"],
                            env=theirs.env, capture_output=True, text=True, timeout=60)
        assert json.loads(ls.stdout)["runs"] == []  # nothing was submitted to their SuperLink
    (result_dir,) = list((clone / "results").iterdir())
    assert result_dir.name.startswith("flwr_default-flower-")
    assert f"results: {result_dir}" in output and "status: finished:completed" in output
    assert json.loads((result_dir / "summary.json").read_text())["rounds_completed"] == 2
    assert not list(other.rglob("summary.json"))  # nothing in their working directory
    assert not (clone / ".venv").exists()  # FDP_FLOWER_VENV: nothing installed
    assert os.access(clone / "run.sh", os.X_OK)


def test_a_node_with_simulated_data_simulates_the_client_it_is_named_even_in_a_full_size_federation():
    """A resumed simulation names clients in its messages: with one SuperNode per client a node with
    simulated data takes the name; a node-local site never simulates another client."""
    from flwr.app import Context, RecordDict

    from fdp_flower.clients.common import node_partition

    scenario = load_any_scenario(REPO / "scenarios/quickstart.yaml", ["federation.num_clients=3"])
    ctx = Context(run_id=1, node_id=5, node_config={"partition-id": 2, "num-partitions": 3}, state=RecordDict(),
                  run_config={})
    assert node_partition(ctx, scenario, 0, simulated=True) == 0
    assert node_partition(ctx, scenario, 0, simulated=False) == 2
    assert node_partition(ctx, scenario, None, simulated=True) == 2
    with pytest.raises(ValueError, match="outside"):
        node_partition(ctx, scenario, 3, simulated=True)
