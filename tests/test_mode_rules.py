"""Settings of one privacy mode that must not carry silently into the other (fdp_flower/algorithms/fdp_admm/mode_rules.py)."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from fdp_flower.algorithms.fdp_admm.config import ModeMismatchWarning, parse_scenario
from fdp_flower.algorithms.fdp_admm.mode_rules import mode_mismatches

SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"


def _flwr_default() -> dict:
    return yaml.safe_load((SCENARIOS / "flwr_default.yaml").read_text())


def test_the_default_federation_switched_to_total_is_warned():
    data = _flwr_default()
    assert mode_mismatches(data) == []  # as shipped (per-round mode, 30 rounds): nothing to say
    data["privacy"]["mode"] = "total"
    found = {m.field: m for m in mode_mismatches(data)}
    assert set(found) == {"algorithm.step", "model.clip_c1"}
    assert not found["algorithm.step"].refuse and not found["model.clip_c1"].refuse  # the budget is still met
    step = found["algorithm.step"].message
    assert "\n" not in step and "remove algorithm.step, algorithm.rounds and model.clip_c1" in step
    assert "privacy.mode 'per_round'" in step
    assert "ellipsoid" in found["model.clip_c1"].message
    with pytest.warns(ModeMismatchWarning) as caught:  # parse_scenario says it, one line per setting
        parse_scenario(data)
    said = [str(w.message) for w in caught if issubclass(w.category, ModeMismatchWarning)]
    assert len(said) == 2 and all("\n" not in line for line in said)
    assert any("algorithm.step 'theorem2'" in line for line in said) and any("model.clip_c1" in line for line in said)


def test_total_budget_defaults_and_explicit_choices_pass():
    data = _flwr_default()
    data["privacy"]["mode"] = "total"
    del data["algorithm"]["step"], data["algorithm"]["rounds"], data["model"]["clip_c1"]
    assert mode_mismatches(data) == []
    data["model"]["clip_c1"] = 2.0
    data["model"]["clip_shape"] = "sphere"  # a sphere chosen on purpose
    assert mode_mismatches(data) == []


def test_fixed_basis_keeps_its_sphere_without_a_warning():
    data = {"basis": {"kind": "fixed", "family": "cosine"}, "model": {"clip_c1": 3.0},
            "privacy": {"mode": "total", "eps": 1.0}}
    assert mode_mismatches(data) == []


def test_last_iterate_in_total_mode_is_a_warning():
    data = {"algorithm": {"estimator": {"kind": "last"}}, "privacy": {"mode": "total", "eps": 1.0},
            "basis": {"kind": "fixed"}}
    (m,) = mode_mismatches(data)
    assert m.field == "algorithm.estimator" and not m.refuse


@pytest.mark.parametrize("rounds, expected", [(30, 0), (31, 1), (120, 1)])
def test_many_rounds_in_per_round_mode_are_named(rounds, expected):
    data = {"algorithm": {"rounds": rounds}, "privacy": {"mode": "per_round", "eps": 0.5}}
    found = mode_mismatches(data)
    assert len(found) == expected
    if expected:
        assert f"each of the {rounds} rounds" in found[0].message and "privacy.mode 'total'" in found[0].message


def test_privacy_off_and_other_families_are_out_of_scope():
    assert mode_mismatches({"privacy": {"enabled": False, "mode": "total"},
                            "algorithm": {"step": {"kind": "theorem2"}}}) == []
    assert mode_mismatches({"privacy": {"mode": "total"}, "algorithm": {"kind": "other", "step": {"kind": "theorem2"}}}) == []
