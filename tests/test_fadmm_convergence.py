"""Residual balancing of rho and the residual stopping rule of F-ADMM (docs/algorithms.md, eqs. (1.15)-(1.17)):
the rule on constructed residuals, the same iterates on every engine, complete outputs of a run that
stopped early, and the privacy-on refusals."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fdp_flower.algorithms.fdp_admm.config import FDPADMMConfig, load_scenario
from fdp_flower.algorithms.fdp_admm.convergence import after_round, balanced_rho, residuals
from fdp_flower.algorithms.fdp_admm.plan import noise_plan
from fdp_flower.algorithms.fdp_admm.update import FDPADMMState
from fdp_flower.config.base import ScenarioError
from fdp_flower.engines.batched import run_batched
from fdp_flower.engines.inprocess import run_fdp_admm
from fdp_flower.outputs.results import write_results

ROOT = Path(__file__).resolve().parents[1]
#: small, non-private; tol_abs 0.03 per coordinate makes the stopping rule end it at round 9 of 12
#: (measured; the test checks the rule, not that round)
SMALL = ["data.n_samples=1503", "federation.num_clients=3", "algorithm.rounds=12", "seed=11",
         "privacy.enabled=false"]
STOPS = ["algorithm.stopping.tol_abs=0.03"]


def _scenario(*extra):
    return load_scenario(ROOT / "scenarios" / "quickstart.yaml", SMALL + list(extra))


def _algorithm(**kw) -> FDPADMMConfig:
    return FDPADMMConfig.model_validate(kw)


# ---------------------------------------------------------------- the pure rule
def test_residuals_are_eq_1_15_and_tolerances_eq_1_17():
    rng = np.random.default_rng(0)
    primals, duals = rng.normal(size=(4, 3)), rng.normal(size=(4, 3))
    w, w_prev = rng.normal(size=3), rng.normal(size=3)
    res = residuals(noisy_primals=primals, global_w=w, previous_global_w=w_prev, duals=duals, rho=0.3,
                    tol_abs=1e-2, tol_rel=1e-1)
    assert res.primal == pytest.approx(np.sqrt(sum(np.sum((primals[i] - w) ** 2) for i in range(4))), rel=1e-14)
    assert res.dual == pytest.approx(0.3 * 2.0 * np.linalg.norm(w - w_prev), rel=1e-14)
    assert res.primal_tol == pytest.approx(np.sqrt(12) * 1e-2 + 0.1 * max(np.linalg.norm(primals),
                                                                        2.0 * np.linalg.norm(w)), rel=1e-14)
    assert res.dual_tol == pytest.approx(np.sqrt(12) * 1e-2 + 0.1 * np.linalg.norm(duals), rel=1e-14)


def test_residual_balancing_moves_rho_against_the_dominant_residual():
    """Primal residual > mu x dual: rho up (more weight on consensus); dual > mu x primal: rho down; else kept."""
    assert balanced_rho(0.1, 5.0, 0.1, mu=10.0, factor=2.0) == pytest.approx(0.2)
    assert balanced_rho(0.1, 0.1, 5.0, mu=10.0, factor=2.0) == pytest.approx(0.05)
    assert balanced_rho(0.1, 1.0, 0.5, mu=10.0, factor=2.0) == pytest.approx(0.1)
    np.testing.assert_allclose(balanced_rho(np.array([0.1, 0.1, 0.1]), np.array([5.0, 0.1, 1.0]),
                               np.array([0.1, 5.0, 0.5]), mu=10.0, factor=2.0), [0.2, 0.05, 0.1])
    # constructed states: the clients far from w (primal residual dominates), w unchanged (dual residual 0)
    primals = np.array([[1.0, 0.0], [-1.0, 0.0]])
    w = np.zeros(2)
    rule = _algorithm(rho_rule={"kind": "residual_balancing"})
    up = after_round(rule, previous_global_w=w, global_w=w, noisy_primals=primals, duals=np.zeros((2, 2)), rho=0.1)
    assert float(up.next_rho) == pytest.approx(0.2)
    # clients at consensus, w moved (dual residual dominates)
    down = after_round(rule, previous_global_w=w + 1.0, global_w=w, noisy_primals=np.zeros((2, 2)),
                       duals=np.zeros((2, 2)), rho=0.1)
    assert float(down.next_rho) == pytest.approx(0.05)
    fixed = after_round(_algorithm(), previous_global_w=w, global_w=w, noisy_primals=primals,
                        duals=np.zeros((2, 2)), rho=0.1)
    assert float(fixed.next_rho) == 0.1


@pytest.mark.parametrize("primal_scale, dual_scale, stops", [(0.5, 0.5, True), (2.0, 0.5, False),
                                                              (0.5, 2.0, False), (2.0, 2.0, False)])
def test_stopping_rule_needs_both_residuals_below_tolerance(primal_scale, dual_scale, stops):
    """Residuals at 0.5 or 2 times their tolerance (constructed): stop iff both are below."""
    w_prev, w = np.zeros(2), np.zeros(2)
    primals = np.array([[1.0, 0.0], [-1.0, 0.0]])
    tol_abs = 1.0  # eps = sqrt(M K) tol_abs = 2 for both residuals (tol_rel = 0)
    primals = primals * primal_scale * 2.0 / np.sqrt(2.0)  # ||r|| = primal_scale * 2
    w_prev = w_prev + np.array([dual_scale * 2.0 / (0.5 * np.sqrt(2.0)), 0.0])  # ||s|| = dual_scale * 2 at rho 0.5
    rule = _algorithm(stopping={"kind": "residuals", "tol_abs": tol_abs, "tol_rel": 0.0})
    control = after_round(rule, previous_global_w=w_prev, global_w=w, noisy_primals=primals,
                          duals=np.zeros((2, 2)), rho=0.5)
    assert control.residuals.primal == pytest.approx(primal_scale * 2.0)
    assert control.residuals.dual == pytest.approx(dual_scale * 2.0)
    assert bool(control.stop) is stops
    capped = after_round(_algorithm(stopping={"kind": "cap"}), previous_global_w=w_prev, global_w=w,
                         noisy_primals=primals, duals=np.zeros((2, 2)), rho=0.5)
    assert not bool(capped.stop)


def test_state_round_trips_its_rho():
    state = FDPADMMState.initial(3, 2, rho=0.1).with_rho(0.4)
    assert FDPADMMState.from_arrays(state.to_arrays()).rho == 0.4
    old = {k: v for k, v in state.to_arrays().items() if k != "rho"}  # a checkpoint from before the rule
    assert FDPADMMState.from_arrays(old).rho is None


# ---------------------------------------------------------------- defaults and refusals
def test_defaults_privacy_off_and_on():
    off = _scenario()
    assert off.algorithm.rho_rule.kind == "residual_balancing" and off.algorithm.stopping.kind == "residuals"
    assert _scenario(*STOPS).algorithm.stopping.kind == "residuals"  # setting a tolerance keeps the kind
    assert _scenario("algorithm.rho_rule={kind: fixed}").algorithm.rho_rule.kind == "fixed"
    on = load_scenario(ROOT / "scenarios" / "quickstart.yaml")
    assert on.privacy.enabled
    assert on.algorithm.rho_rule.kind == "fixed" and on.algorithm.stopping.kind == "cap"


@pytest.mark.parametrize("override, field", [("algorithm.rho_rule={kind: residual_balancing}", "rho_rule"),
                                             ("algorithm.stopping={kind: residuals}", "stopping")])
def test_privacy_on_refuses_the_adaptive_rules(override, field):
    with pytest.raises(ScenarioError) as err:
        load_scenario(ROOT / "scenarios" / "quickstart.yaml", [override])
    message = str(err.value)
    assert "\n" not in message and f"algorithm.{field}" in message and "privacy off" in message


def test_private_plan_refuses_another_rho_and_the_site_never_sees_rho():
    """A private run's steps are planned for algorithm.rho: the plan refuses another.  The site's
    release does not depend on rho (nor on the duals, the consensus or the step): it is never sent."""
    from fdp_flower.algorithms.fdp_admm.plan import load_partition, site_plan
    from fdp_flower.algorithms.fdp_admm.protocol import FDPADMMServer
    from fdp_flower.algorithms.fdp_admm.setup import simulation_setup

    sc = load_scenario(ROOT / "scenarios" / "quickstart.yaml", SMALL[:4])
    assert sc.privacy.enabled
    sizes, basis, *_ = simulation_setup(sc, with_reference=False)
    plan = noise_plan(sc, basis)
    with pytest.raises(ValueError, match="calibrated"):
        plan.release(1, sizes, rho=2 * sc.algorithm.rho)
    assert load_partition(sc, 0).n_samples > 0
    request = FDPADMMServer(sc, basis, sizes).begin_round().requests[0]
    assert set(request.public) == {"point"}  # the only public value a site evaluates at
    assert site_plan(sc, basis).private


# ---------------------------------------------------------------- engines
def test_stops_exactly_when_the_rule_holds_and_never_after_the_cap():
    res = run_fdp_admm(_scenario(*STOPS), with_reference=False)
    hist = res.history
    below = [h["primal_residual"] <= h["primal_tolerance"] and h["dual_residual"] <= h["dual_tolerance"]
             for h in hist]
    assert 1 <= len(hist) < 12 and below[-1] and not any(below[:-1])
    assert res.stop_reason.startswith("converged") and f"round {len(hist)}" in res.stop_reason
    assert len({h["rho"] for h in hist}) > 1  # residual balancing changed rho on the way
    capped = run_fdp_admm(_scenario("algorithm.stopping.tol_abs=1.0e-9", "algorithm.stopping.tol_rel=0.0"),
                          with_reference=False)
    assert len(capped.history) == 12 and capped.stop_reason.startswith("cap: algorithm.rounds = 12")  # not converged


def test_batched_equals_inprocess_with_the_adaptive_rules():
    """Same iterates, rho and stop round on both engines (1e-10), several configurations in one group,
    one of which stops before the others."""
    scenarios = [_scenario(*STOPS), _scenario(), _scenario("model.loss.tau=0.9"),
                 _scenario(*STOPS, "algorithm.stopping.tol_rel=0.2")]
    batched = run_batched(scenarios, trace=True)
    lengths = set()
    for sc, res in zip(scenarios, batched):
        ref = run_fdp_admm(sc, with_reference=False)
        assert res.stop_reason == ref.stop_reason
        assert len(res.history) == len(ref.history) == len(res.trace)
        lengths.add(len(ref.history))
        assert np.max(np.abs(ref.state.global_w - res.global_w)) < 1e-10
        assert np.max(np.abs(ref.state.average_global_w - res.average_global_w)) < 1e-10
        for a, b in zip(ref.history, res.history):
            for key in ("rho", "primal_residual", "dual_residual", "primal_tolerance", "dual_tolerance", "mise"):
                assert abs(a[key] - b[key]) <= 1e-10 * max(1.0, abs(a[key])), (key, a["round"])
    assert len(lengths) > 1  # the group held configurations that stopped at different rounds


def test_run_stopped_early_writes_complete_results(tmp_path):
    from fdp_flower.outputs.models import load_results

    res = run_fdp_admm(_scenario(*STOPS), with_reference=False)
    out = write_results(res, tmp_path / "run")
    summary = json.loads((out / "summary.json").read_text())
    assert summary["stop_reason"] == res.stop_reason and summary["stop_reason"].startswith("converged")
    assert summary["rounds_completed"] == len(res.history) < summary["rounds_planned"] == 12
    header = (out / "history.csv").read_text().splitlines()[0].split(",")
    for column in ("rho", "primal_residual", "dual_residual", "primal_tolerance", "dual_tolerance", "mise"):
        assert column in header
    assert len((out / "history.csv").read_text().splitlines()) == 1 + len(res.history)
    final = np.load(out / "final.npz")
    np.testing.assert_array_equal(final["state_global_w"], res.state.global_w)
    assert float(final["state_rho"]) == res.state.rho
    model = load_results(out)
    assert model.stop_reason == res.stop_reason


@pytest.mark.slow
def test_flower_simulation_stops_like_the_inprocess_engine(tmp_path):
    """Privacy off, residual balancing and the stopping rule on Flower's simulation engine: the run ends
    normally at the in-process engine's stop round, with its rho path and iterates (1e-10)."""
    from fdp_flower.config.base import parse_override_string
    from tests.flower_harness import REPO, flwr_run, simulation_superlink

    overrides = ("data.n_samples=3000; federation.num_clients=3; algorithm.rounds=12; privacy.enabled=false; "
                 "algorithm.stopping.tol_abs=0.03")
    scenario = load_scenario(REPO / "scenarios/flwr_default.yaml", parse_override_string(overrides))
    local = run_fdp_admm(scenario)
    assert local.stop_reason.startswith("converged") and len(local.history) < 12
    assert len({h["rho"] for h in local.history}) > 1
    out = tmp_path / "results"
    with simulation_superlink(tmp_path, num_supernodes=3) as env:
        _run_id, status, output = flwr_run(
            env, f"scenario='scenarios/flwr_default.yaml' overrides='{overrides}' results-dir='{out}'")
    run = status["runs"][0]
    assert run["status"] == "finished:completed", f"{run['status']}: {run['status-details']}\n{output[-3000:]}"
    (result_dir,) = list(out.iterdir())
    summary = json.loads((result_dir / "summary.json").read_text())
    assert summary["stop_reason"] == local.stop_reason
    assert summary["rounds_completed"] == len(local.history)
    final = np.load(result_dir / "final.npz")
    for name in ("global_w", "duals", "noisy_primals"):
        np.testing.assert_allclose(final[f"state_{name}"], getattr(local.state, name), rtol=0, atol=1e-10)
    assert float(final["state_rho"]) == local.state.rho
    import csv

    with (result_dir / "history.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert [float(r["rho"]) for r in rows] == [h["rho"] for h in local.history]


def test_sweep_of_runs_that_stop_at_different_rounds_writes_its_history(tmp_path):
    """Batched sweep, privacy off: repetitions that the rule ends at different rounds are written with the
    history of a stopped run held at its last values (its model no longer changes)."""
    from fdp_flower.engines.sweep import _stack_held, load_sweep, run_sweep, write_sweep_results

    np.testing.assert_array_equal(_stack_held([np.array([1.0, 2.0]), np.array([3.0, 4.0, 5.0])]),
                                  [[1.0, 2.0, 2.0], [3.0, 4.0, 5.0]])
    spec = load_sweep(ROOT / "scenarios" / "paper_table1.yaml",
                      ["data.n_samples=1503", "federation.num_clients=3", "algorithm.rounds=12", "privacy.enabled=false",
                       "sweep.paper_table=null", "sweep.repetitions=4", "sweep.history=true", "sweep.engine=batched",
                       *STOPS])
    result = run_sweep(spec, workers=1, progress=False)
    rounds = {r["rounds_completed"] for r in result.runs}
    assert len(rounds) > 1 and max(rounds) <= 12  # some repetitions stopped before others
    out = write_sweep_results(result, tmp_path / "sweep", plots=False)
    lines = (out / "history.csv").read_text().splitlines()
    config0 = [line for line in lines[1:] if line.startswith("0,")]
    stopped0 = {r["rounds_completed"] for r in result.runs if r["config"] == 0}
    assert len(config0) == result.histories[0]["mise"].shape[1] == max(stopped0)
