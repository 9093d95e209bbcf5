"""A family is its own folder and one registry entry: the toy family of tests/toy_family, registered
through FDP_FLOWER_FAMILIES, runs in process and on Flower's simulation runtime with the generic
drivers only, and both give the same estimate (the same seeded noise)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from fdp_flower.algorithms import registry
from fdp_flower.cli import main
from tests.flower_harness import REPO

SCENARIO = {"name": "toy", "seed": 3, "algorithm": {"kind": "toy_mean", "rounds": 8, "eta": 0.5},
            "federation": {"num_clients": 4}, "data": {"samples_per_client": 200, "dim": 3}}


@pytest.fixture
def toy(monkeypatch, tmp_path):
    monkeypatch.setenv(registry.EXTRA_FAMILIES_ENV, "tests.toy_family")
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    path = tmp_path / "toy.yaml"
    path.write_text(yaml.safe_dump(SCENARIO))
    yield path
    registry._FAMILIES.pop("toy", None)


def _estimate(out: Path) -> np.ndarray:
    return np.load(out / "final.npz")["estimate"]


def test_the_toy_family_runs_in_process_through_the_registry(toy, tmp_path):
    assert registry.family("toy_mean").name == "toy"
    out = tmp_path / "inprocess"
    assert main(["run", str(toy), "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["rounds_completed"] == 8 and summary["privacy"]["private"]
    ledger = (out / "ledger.csv").read_text().splitlines()
    assert len(ledger) == 1 + 4 * 8  # every client, every round
    # gradient descent on the clipped mean gradient: w moves to the pooled mean (1.15 in each coordinate)
    np.testing.assert_allclose(_estimate(out), 1.15, atol=0.2)
    from fdp_flower import load_results

    model = load_results(out)
    np.testing.assert_array_equal(model.w, _estimate(out))


@pytest.mark.slow
def test_the_toy_family_runs_on_flowers_simulation_runtime_and_equals_the_inprocess_run(toy, tmp_path):
    from tests.flower_harness import flwr_run, simulation_superlink

    inprocess = tmp_path / "inprocess"
    assert main(["run", str(toy), "--out", str(inprocess)]) == 0
    results = tmp_path / "flower"
    with simulation_superlink(tmp_path / "link", 2) as env:
        _run_id, status, output = flwr_run(env, f"scenario='{toy}' results-dir='{results}'")
    assert status[0]["status"] == "finished:completed" if isinstance(status, list) else \
        "finished:completed" in json.dumps(status), output[-3000:]
    (out,) = list(results.iterdir())
    np.testing.assert_allclose(_estimate(out), _estimate(inprocess), rtol=0, atol=1e-10)
    assert (out / "ledger.csv").read_text() == (inprocess / "ledger.csv").read_text()
