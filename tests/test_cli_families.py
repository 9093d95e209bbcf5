"""`fdp-flower run` runs every algorithm family in process and writes its results."""
from __future__ import annotations

import json

import pytest

from fdp_flower.algorithms.registry import algorithm_kinds, family_of, load_any_scenario
from fdp_flower.cli import main
from fdp_flower.config.base import ScenarioError


@pytest.mark.parametrize("scenario,override", [
    ("scenarios/p2p_lad_zcdp_nfl.yaml", "algorithm.rounds=5"),
    ("scenarios/dp_admm_breast_cancer.yaml", "algorithm.rounds=5"),
])
def test_run_other_families(tmp_path, capsys, scenario, override):
    assert main(["run", scenario, "--set", override, "--out", str(tmp_path)]) == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["final"]
    ledger_rows = (tmp_path / "ledger.csv").read_text().splitlines()
    assert len(ledger_rows) > 1  # private runs record their releases
    assert "results:" in capsys.readouterr().out


def test_family_dispatch_and_unknown_kind(tmp_path):
    assert {family_of(k) for k in algorithm_kinds()} == {"fdp_admm", "p2p", "gradient_admm"}
    bad = tmp_path / "bad.yaml"
    bad.write_text("algorithm: {kind: fdp_admn}\n")
    with pytest.raises(ScenarioError, match=r"bad.yaml: algorithm.kind: unknown algorithm 'fdp_admn'"):
        load_any_scenario(bad)
    assert main(["run", str(bad)]) == 2
