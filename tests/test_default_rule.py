"""The default server rule of an FDP-ADMM scenario (``algorithm.rule`` unset): the Newton rule where the scenario
allows it (total budget or privacy off, the quantile loss, any basis, none of the ADMM rule's own fields),
the ADMM rule everywhere else -- the same choice for ``fdp-flower run``, the sweep and :func:`fdp_flower.fit`."""
from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from fdp_flower.algorithms.fdp_admm.config import ADMM_ONLY_FIELDS, parse_scenario


def base(**changes):
    data = {"name": "rule", "seed": 1, "data": {"kind": "paper_simulation", "n_samples": 600, "grid_points": 40},
            "federation": {"num_clients": 3}, "basis": {"kind": "pooled", "n_components": 4},
            "model": {"loss": {"kind": "quantile", "tau": 0.5}, "intercept": True},
            "privacy": {"enabled": False}}
    for key, value in changes.items():
        data[key] = value
    return data


def rule_of(data) -> str:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return parse_scenario(data).algorithm.rule


TOTAL = {"enabled": True, "mode": "total", "eps": 1.0, "delta": 1e-5}
ADMM_VALUES = {"rho": 0.3, "step": {"kind": "constant", "eta0": 1.0}, "step_units": "absolute", "estimator": {"kind": "last"},
               "rho_rule": {"kind": "fixed"}, "stopping": {"kind": "cap"}, "level_calibration": True}


def test_privacy_off_and_total_budget_scenarios_default_to_the_newton_rule_with_its_schedule():
    for privacy in ({"enabled": False}, TOTAL):
        sc = parse_scenario(base(privacy=privacy, algorithm={"response_bounds": [-20.0, 20.0]}))
        assert sc.algorithm.rule == "newton"
        assert sc.algorithm.rounds == 30 and sc.algorithm.estimator.kind == "last"
        assert sc.algorithm.stopping.kind == "cap" and sc.algorithm.rho_rule.kind == "fixed"
    # a private run without declared bounds still gets the rule (its location/scale search runs in asinh(y)),
    # with nothing to warn about; so does a basis without public score variances (a second-moments round)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert parse_scenario(base(privacy=TOTAL)).algorithm.rule == "newton"
        fixed = parse_scenario(base(privacy=TOTAL, basis={"kind": "fixed", "family": "cosine", "n_components": 4}))
        assert fixed.algorithm.rule == "newton" and fixed.algorithm.rounds == 30


@pytest.mark.parametrize("field", ADMM_ONLY_FIELDS)
def test_a_scenario_that_sets_an_admm_field_keeps_the_admm_rule(field):
    assert rule_of(base(privacy=TOTAL, algorithm={field: ADMM_VALUES[field]})) == "admm"


@pytest.mark.parametrize("changes", [
    {"privacy": {"enabled": True, "mode": "per_round", "eps": 1.0, "delta": 1e-5}},  # the paper's rule
    {"privacy": {**TOTAL, "trust": "trusted_aggregator"}},
    {"model": {"loss": {"kind": "squared"}}},
    {"faults": {"failure_rate": 0.1}},
    {"algorithm": {"rounds": 20}},  # too few rounds for the Newton schedule (it needs 25 privacy off here)
], ids=["per_round", "trusted_aggregator", "squared_loss", "failures", "few_rounds"])
def test_settings_the_newton_rule_cannot_run_keep_the_admm_rule(changes):
    assert rule_of(base(**changes)) == "admm"


def test_a_named_rule_is_never_changed_and_enough_rounds_keep_the_newton_rule():
    assert rule_of(base(algorithm={"rule": "admm"})) == "admm"
    assert rule_of(base(algorithm={"rounds": 40})) == "newton"
    with pytest.raises(Exception, match="needs at least 12"):  # asked for by name: its own one-line error
        parse_scenario(base(algorithm={"rule": "newton", "rounds": 20}))


def test_every_shipped_fdp_admm_scenario_keeps_the_admm_rule():
    """The paper scenarios (and every other shipped FDP-ADMM file) set their step: their numbers are the ADMM
    rule's."""
    from pathlib import Path

    import yaml

    from fdp_flower.algorithms.fdp_admm.config import load_scenario
    from fdp_flower.engines.sweep import load_sweep

    root = Path(__file__).resolve().parents[1] / "scenarios"
    checked = 0
    for path in sorted(root.glob("*.yaml")):
        if (yaml.safe_load(path.read_text()).get("algorithm") or {}).get("kind", "fdp_admm") != "fdp_admm":
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if "sweep" in yaml.safe_load(path.read_text()):  # the paper tables: every configuration of the grid
                scenarios = [sc for _, sc in load_sweep(path).configs]
            else:
                scenarios = [load_scenario(path)]
        for sc in scenarios:
            assert sc.algorithm.rule == "admm", path.name
            checked += 1
    assert checked >= 10


def test_fit_and_the_scenario_schema_choose_the_same_rule(tmp_path):
    from fdp_flower import fit
    from fdp_flower.functional import design

    grid = design.default_grid(40)
    data = design.simulate_slice(5, 0, 600, tau=0.5, grid=grid)
    curves, y = data.curves, data.response
    newton = fit(curves, y, grid=grid, eps=None, basis="fpca", n_components=4, n_clients=3, reference=False,
                 out=tmp_path / "newton")
    assert newton.scenario.algorithm.rule == "newton" and len(newton.history) == 30
    assert json.loads((tmp_path / "newton" / "summary.json").read_text())["rule"] == "newton"
    # the default cosine basis has no public score variances: the Newton rule with a second-moments round, privacy
    # off and on (30 rounds, no level calibration); a step given asks for the ADMM rule
    cosine = fit(curves, y, grid=grid, eps=None, n_components=4, n_clients=3, reference=False)
    assert cosine.scenario.algorithm.rule == "newton" and len(cosine.history) == 30
    private = fit(curves, y, grid=grid, eps=1.0, n_components=4, n_clients=3, reference=False)
    assert private.scenario.algorithm.rule == "newton" and len(private.history) == 30
    assert not private.scenario.algorithm.level_calibration
    stepped = fit(curves, y, grid=grid, eps=None, basis="fpca", n_components=4, n_clients=3, step=1.0,
                  reference=False)
    assert stepped.scenario.algorithm.rule == "admm"
    with pytest.raises(Exception, match="rule: expected"):
        fit(curves, y, grid=grid, eps=None, rule="lbfgs")


def test_the_sweep_runs_newton_scenarios_through_the_in_process_engine(tmp_path):
    """The batched engine is the ADMM rule's: a sweep's Newton runs go one by one through run_fdp_admm, with
    exactly its numbers, and the ADMM runs of the same sweep still run batched."""
    from fdp_flower.engines.inprocess import run_fdp_admm
    from fdp_flower.engines.sweep import _run_unit

    newton = parse_scenario(base(algorithm={"rounds": 30}))
    admm = parse_scenario(base(algorithm={"rule": "admm", "rounds": 30}))
    assert newton.algorithm.rule == "newton"
    (final_n, cols_n), (final_a, _) = _run_unit([newton, admm], "batched", history=True)
    direct = run_fdp_admm(newton, with_reference=False)
    assert final_n["mise"] == direct.history[-1]["mise"]
    np.testing.assert_array_equal(cols_n["mise"], [row["mise"] for row in direct.history])
    from fdp_flower.engines.batched import run_batched

    assert final_a["mise"] == run_batched([admm], history=False)[0].final["mise"]


def test_a_provided_basis_publishes_score_variances_when_its_file_carries_eigenvalues(tmp_path):
    """Only the names of the .npz's members are read: with ``eigenvalues`` (an FPCA of a public pilot sample) the
    basis publishes score variances (the Newton rule's public metric); without them, or unreadable, it does not
    (the Newton rule releases second moments instead).  The default rule is the Newton rule either way."""
    from fdp_flower.functional import design
    from fdp_flower.functional.fpca import fit_pooled_fpca

    grid = design.default_grid(40)
    pilot = design.simulate_slice(9, 0, 300, tau=0.5, grid=grid)
    basis = fit_pooled_fpca(pilot.curves, grid, n_components=4)
    arrays = basis.to_arrays()
    with_eig, without = tmp_path / "fpca.npz", tmp_path / "plain.npz"
    np.savez(with_eig, **arrays)
    np.savez(without, **{k: v for k, v in arrays.items() if k != "eigenvalues"})
    (tmp_path / "broken.npz").write_bytes(b"not a zip")
    from fdp_flower.algorithms.fdp_admm.config import publishes_score_variances

    for path, published in ((with_eig, True), (without, False), (tmp_path / "broken.npz", False),
                            (tmp_path / "missing.npz", False)):
        section = {"kind": "provided", "path": str(path)}
        assert publishes_score_variances(section) is published, path.name
        # the Newton rule either way: its metric is the score variances, else a second-moments round
        assert rule_of(base(basis=section, privacy=TOTAL)) == "newton", path.name
    # fit with a FunctionalBasis that has eigenvalues: the same choice
    from fdp_flower import fit

    data = design.simulate_slice(5, 0, 600, tau=0.5, grid=grid)
    model = fit(data.curves, data.response, grid=grid, eps=None, basis=basis, n_clients=3, reference=False)
    assert model.scenario.algorithm.rule == "newton" and len(model.history) == 30


def test_a_total_budget_sweep_that_sets_no_rule_runs_and_writes_its_results(tmp_path):
    """A sweep file of total-budget runs with an FPCA basis (the Newton rule by default) over a privacy grid that
    includes privacy off: every configuration resolves its own rule, runs, and the results are written."""
    from fdp_flower.engines.sweep import parse_sweep, run_sweep, write_sweep_results

    data = {**base(privacy=TOTAL, algorithm={"response_bounds": [-20.0, 20.0]}),
            "sweep": {"repetitions": 2, "grid": {"privacy.enabled": [True, False]}}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        spec = parse_sweep(data, "sweep")
    assert [sc.algorithm.rule for _, sc in spec.configs] == ["newton", "newton"]
    result = run_sweep(spec, workers=1, progress=False)
    assert len(result.runs) == 4 and all(np.isfinite(r["estimate_mise"]) for r in result.runs)
    out = write_sweep_results(result, tmp_path / "sweep", plots=False)
    summary = json.loads((out / "summary.json").read_text())
    assert len(summary["configs"]) == 2 and (out / "runs.csv").stat().st_size > 0
