"""Issue 29 at small n: the predicted privacy cost said before training (fit, fdp-flower run, fdp-flower
privacy, summary.json), settings of one privacy mode warned about in the other, ``stop_reason: cap`` for a
run that ends at its round cap, one set of privacy-off defaults for ``fit`` and ``fdp-flower run``, and
fitted quantiles that move with the response's location and scale."""
from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import yaml

import fdp_flower
from fdp_flower.algorithms.fdp_admm.config import (
    ModeMismatchWarning,
    load_scenario,
    parse_scenario,
    privacy_off_schedule,
)
from fdp_flower.algorithms.fdp_admm.convergence import CAP
from fdp_flower.cli import main
from fdp_flower.engines.batched import run_batched
from fdp_flower.engines.inprocess import run_fdp_admm
from fdp_flower.functional import design
from fdp_flower.privacy.predicted_cost import predicted_privacy_cost
from tests.test_faults import run_strategy, task_identity  # noqa: F401 (fixture)

ROOT = Path(__file__).resolve().parents[1]
GRID = design.default_grid(30)
TINY = {"name": "tiny", "seed": 1, "data": {"kind": "paper_simulation", "n_samples": 300, "grid_points": 20},
        "federation": {"num_clients": 3}, "basis": {"kind": "fixed", "n_components": 4},
        "output": {"dir": "results", "checkpoint_every": 0}}


@pytest.fixture(scope="module")
def data():
    return design.simulate_slice(7, 0, 300, tau=0.5, grid=GRID), design.simulate_slice(8, 0, 200, tau=0.5, grid=GRID)


def _write(path: Path, scenario: dict) -> Path:
    path.write_text(yaml.safe_dump(scenario))
    return path


# ---------------------------------------------------------------- the predicted privacy cost
def test_fit_warns_when_the_predicted_cost_exceeds_one_and_names_the_fix(data, tmp_path):
    """5 sites of 60 curves at eps = 2: the floor (F.1) is 2.65 > 1 (sphere clip with a fixed basis: the
    lower bound of predicted.py, K times the isotropic ratio); the warning names records per site, eps and K,
    and summary.json keeps the number and the line."""
    train, _ = data
    with pytest.warns(UserWarning, match="predicted privacy cost") as caught:
        fdp_flower.fit(train.curves, train.response, grid=GRID, eps=2.0, n_clients=5, rounds=3, reference=False,
                       out=tmp_path / "run")
    (line,) = [str(w.message) for w in caught if "predicted privacy cost" in str(w.message)]
    assert "\n" not in line
    assert "records per site (smallest has 60)" in line and "eps >= " in line
    assert "n_components <= 3 (now 10)" in line  # the bound is proportional to K: 2.65 * 3 / 10 < 1
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    predicted = summary["predicted_privacy_cost"]
    assert predicted["cost"] > 1 and predicted["warning"] == line
    assert predicted["kind"] == "lower bound of the floor" and predicted["n_components"] == 10


def test_the_warning_names_the_newton_rule_only_where_it_could_run_instead(data):
    """A private ADMM-rule fit on a fixed basis (the default) whose prediction exceeds 1 is also told of the
    Newton rule; a fit that already runs it, or a per-round budget (where the Newton rule does not run), is not."""
    from fdp_flower.algorithms.fdp_admm.predicted import newton_would_help, predicted_cost_section

    train, _ = data
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        admm = fdp_flower.fit(train.curves, train.response, grid=GRID, eps=2.0, n_clients=5, rounds=3,
                              reference=False)
        newton = fdp_flower.fit(train.curves, train.response, grid=GRID, eps=2.0, n_clients=5, rule="newton",
                                reference=False)
        per_round = fdp_flower.fit(train.curves, train.response, grid=GRID, eps=0.2, n_clients=5, rounds=3,
                                   privacy="per_round", reference=False)
    assert admm.scenario.algorithm.rule == "admm" and newton.scenario.algorithm.rule == "newton"
    assert [newton_would_help(m.scenario) for m in (admm, newton, per_round)] == [True, False, False]
    said = predicted_cost_section(admm.scenario, [60] * 5)["warning"]
    assert said is not None and "rule='newton'" in said
    for model in (newton, per_round):
        section = predicted_cost_section(model.scenario, [60] * 5)
        assert section["warning"] is not None and "rule='newton'" not in section["warning"]
    assert predicted_cost_section(admm.scenario, [200_000] * 5)["warning"] is None  # nothing to fix


def test_no_warning_when_the_sites_are_large_enough(data):
    """The same call's prediction at 5 sites of 200000 records is below 1: nothing is said (the cost falls
    like 1 / m, so 60 -> 200000 divides it by 3333)."""
    from fdp_flower.algorithms.fdp_admm.predicted import predicted_cost_section

    train, _ = data
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = fdp_flower.fit(train.curves, train.response, grid=GRID, eps=0.5, n_clients=5, rounds=3,
                               reference=False)
    said = [w for w in caught if "predicted privacy cost" in str(w.message)]
    assert len(said) == 1  # at 60 records per site
    small = predicted_cost_section(model.scenario, [60] * 5)
    large = predicted_cost_section(model.scenario, [200_000] * 5)
    assert large["cost"] == pytest.approx(small["cost"] * 60 / 200_000, rel=1e-12)
    assert large["cost"] < 1 and large["warning"] is None


def test_the_ellipsoid_prediction_is_the_closed_form_with_the_runs_budget_share():
    """Total mode, ellipsoid clip: the scenario's prediction is (F.1) with gamma = clip_c1 and the whole
    budget on the fit (no basis phase): the same number as predicted_privacy_cost at eps, delta."""
    from fdp_flower.algorithms.fdp_admm.plan import partition_sizes
    from fdp_flower.algorithms.fdp_admm.predicted import predicted_cost_section

    sc = load_scenario(ROOT / "scenarios" / "total_budget_ellipsoid.yaml")
    got = predicted_cost_section(sc, partition_sizes(sc))
    direct = predicted_privacy_cost(partition_sizes(sc), eps=sc.privacy.eps, delta=sc.privacy.delta,
                                    tau=sc.model.loss.tau, n_components=sc.basis.n_components,
                                    clip_radius=sc.model.clip_c1)
    assert got["kind"] == "floor"
    assert got["budget_share"] == pytest.approx(1.0, abs=0.02)  # PLD calibration: just below the target
    assert got["cost"] == pytest.approx(direct.cost / got["budget_share"], rel=1e-9)


def test_cli_run_and_privacy_print_the_prediction_and_the_warning(tmp_path, capsys):
    private = {**TINY, "algorithm": {"kind": "fdp_admm", "rounds": 2},
               "privacy": {"mode": "total", "eps": 0.5, "delta": 1e-5}}
    path = _write(tmp_path / "s.yaml", private)
    assert main(["privacy", str(path), "--out", str(tmp_path / "eps.png")]) == 0
    out = capsys.readouterr().out
    assert "predicted privacy cost" in out and "warning: predicted privacy cost" in out
    assert main(["run", str(path), "--out", str(tmp_path / "run")]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("predicted privacy cost"))
    assert first < next(i for i, line in enumerate(lines) if line.startswith("[")), "said before training"
    assert any(line.startswith("warning: predicted privacy cost") and "records per site" in line for line in lines)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["predicted_privacy_cost"]["cost"] > 1


# ---------------------------------------------------------------- mode rules
def test_a_per_round_scenario_switched_to_total_is_warned_in_one_line(tmp_path):
    data = yaml.safe_load((ROOT / "scenarios" / "flwr_default.yaml").read_text())
    # the paper's pooled basis: the flagship's private basis phase (basis.eps = 1) alone exceeds a total of 0.5
    data["basis"] = {"kind": "pooled", "n_components": 10}
    data["privacy"]["mode"] = "total"
    with pytest.warns(ModeMismatchWarning) as caught:
        parse_scenario(data)
    assert {str(w.message).split(" ")[0] for w in caught} == {"algorithm.step", "model.clip_c1"}
    data["privacy"]["mode"] = "per_round"
    with warnings.catch_warnings():
        warnings.simplefilter("error", ModeMismatchWarning)
        parse_scenario(data)  # as shipped: nothing to say
    data["privacy"]["mode"] = "total"
    path = _write(tmp_path / "switched.yaml", data)
    done = subprocess.run([sys.executable, "-m", "fdp_flower.cli", "privacy", str(path), "--clients", "3",
                           "--samples", "3000", "--rounds", "4", "--out", str(tmp_path / "eps.png")],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr
    err = done.stderr.splitlines()
    step = [line for line in err if "algorithm.step 'theorem2'" in line]
    assert len(step) == 1 and step[0].startswith("warning: ")  # one line, not a source excerpt
    assert not any(line.strip().startswith("return parse_scenario") for line in err)


# ---------------------------------------------------------------- stop_reason: cap
def test_a_privacy_off_run_that_ends_at_its_cap_says_cap(tmp_path, capsys):
    """Privacy off (residual stop, tolerance 1e-12): 3 rounds cannot meet it.  In process, batched, CLI and
    fit say ``cap``; a private run of the same length (no stopping test) says ``completed``."""
    off = {**TINY, "algorithm": {"kind": "fdp_admm", "rounds": 3, "stopping": {"tol_rel": 1e-12}},
           "privacy": {"enabled": False}}
    sc = parse_scenario(off)
    assert sc.algorithm.stopping.kind == "residuals"
    result = run_fdp_admm(sc, with_reference=False)
    assert result.stop_reason.startswith(f"{CAP}: algorithm.rounds = 3") and len(result.history) == 3
    (batched,) = run_batched([sc])
    assert batched.stop_reason == result.stop_reason
    path = _write(tmp_path / "off.yaml", off)
    assert main(["run", str(path), "--out", str(tmp_path / "run")]) == 0
    assert "run cap: algorithm.rounds = 3" in capsys.readouterr().out
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["stop_reason"].startswith(CAP)
    on = parse_scenario({**TINY, "algorithm": {"kind": "fdp_admm", "rounds": 3},
                         "privacy": {"mode": "total", "eps": 5.0}})
    assert run_fdp_admm(on, with_reference=False).stop_reason == "completed"


def test_fit_without_privacy_says_cap_at_its_cap(data):
    train, _ = data
    model = fdp_flower.fit(train.curves, train.response, grid=GRID, eps=None, n_clients=3, rounds=2, reference=False)
    assert model.stop_reason.startswith(CAP) and len(model.history) == 2


# ---------------------------------------------------------------- one set of privacy-off defaults
@pytest.mark.parametrize("clip_shape,basis,rule", [("sphere", "cosine", None), ("sphere", "cosine", "admm"),
                                                    ("ellipsoid", "pooled", "admm"), ("ellipsoid", "pooled", None)])
def test_fit_and_run_share_the_privacy_off_defaults(data, tmp_path, clip_shape, basis, rule):
    """fit(eps=None) and a privacy-off scenario that sets no schedule resolve to the same algorithm section,
    whatever the clip and basis: the same rule (the Newton rule unless the ADMM rule is asked for; a fixed basis
    gets its second-moments round) and, under the ADMM rule, config.privacy_off_schedule + the residual stop."""
    train, _ = data
    model = fdp_flower.fit(train.curves, train.response, grid=GRID, eps=None, n_clients=3, basis=basis,
                           n_components=4, clip_shape=clip_shape, clip=4.0 if clip_shape == "ellipsoid" else 3.0,
                           reference=False, rounds=None, rule=rule)
    section = {"kind": "pooled", "n_components": 4} if basis == "pooled" else \
        {"kind": "fixed", "family": basis, "n_components": 4}
    yaml_way = parse_scenario({**TINY, "basis": section, "model": {"clip_shape": clip_shape, "clip_c1": 4.0},
                               "privacy": {"enabled": False}, **({"algorithm": {"rule": rule}} if rule else {})})
    fitted = model.scenario.algorithm
    for key in ("rule", "rounds", "step", "step_units", "estimator", "rho_rule", "stopping"):
        assert getattr(fitted, key) == getattr(yaml_way.algorithm, key), key
    if fitted.rule == "newton":
        assert rule is None and fitted.rounds == 30 and len(model.history) == 30
        assert model.stop_reason == "completed"
        return
    expected = privacy_off_schedule(clip_shape)
    assert fitted.rounds == expected["rounds"] and fitted.step.model_dump() == expected["step"]
    assert fitted.stopping.kind == "residuals" and fitted.rho_rule.kind == "residual_balancing"


# ---------------------------------------------------------------- location and scale
@pytest.mark.parametrize("eps", [None, 1.0])
def test_fitted_quantiles_move_with_the_responses_location_and_scale(data, eps):
    """y = c + s z for z the standardized response, c in {0, 10, 1e4}, s in {1e-3, 1, 1e3}: the fitted
    quantiles are c + s times those fitted to z.  Privacy off: fit standardizes by the pooled median and
    IQR; privacy on: by bounds the sites declare (c + s (-8, 8)), with the same noise draws.

    Tolerance: every site fits (y - offset) / scale, equal to z's standardized values up to the rounding
    of c + s z, of the median/IQR and of the map back, each a few ulps of |c| / s + |z| in z's units; the
    iterates depend on the responses only through the signs of residuals (the released subgradients), so no
    rounding is amplified unless a residual lies within ~1e-9 of 0 (not at these seeds).  Bound:
    32 eps_mach (1 + |c| / s) (1 + max |q_z|)."""
    train, test = data
    z = (train.response - train.response.mean()) / train.response.std()
    kw = dict(grid=GRID, tau=0.9, n_clients=3, rounds=12, reference=False, eps=eps)
    bounds = (-8.0, 8.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the predicted-cost warning of the private fits
        ref = fdp_flower.fit(train.curves, z, **kw, **({} if eps is None else {"response_bounds": bounds}))
        q_z = ref.predict(test.curves)
        for c in (0.0, 10.0, 1e4):
            for s in (1e-3, 1.0, 1e3):
                extra = {} if eps is None else {"response_bounds": (c + s * bounds[0], c + s * bounds[1])}
                model = fdp_flower.fit(train.curves, c + s * z, **kw, **extra)
                deviation = np.max(np.abs((model.predict(test.curves) - c) / s - q_z))
                tol = 32 * np.finfo(float).eps * (1 + abs(c) / s) * (1 + np.max(np.abs(q_z)))
                assert deviation <= tol, (c, s, deviation, tol)


def test_without_standardization_the_fit_is_not_scale_free(data):
    """The check above can fail: with privacy off and the public constants pinned to 0 and 1 (the behaviour
    before standardization), a response at 1e4 with spread 1e-3 is not fitted like z."""
    train, test = data
    z = (train.response - train.response.mean()) / train.response.std()
    kw = dict(grid=GRID, tau=0.9, n_clients=3, rounds=12, reference=False, eps=None)
    q_z = fdp_flower.fit(train.curves, z, **kw, response_offset=0.0, response_scale=1.0).predict(test.curves)
    c, s = 1e4, 1e-3
    model = fdp_flower.fit(train.curves, c + s * z, **kw, response_offset=0.0, response_scale=1.0)
    assert np.max(np.abs((model.predict(test.curves) - c) / s - q_z)) > 1.0


def test_bad_response_standardization_is_one_line():
    from fdp_flower.api import response_standardization

    y = np.arange(10.0)
    with pytest.raises(ValueError, match="response_bounds: expected finite lo < hi"):
        response_standardization(y, private=True, bounds=(3.0, 3.0))
    with pytest.raises(ValueError, match="not both"):
        response_standardization(y, private=True, bounds=(0.0, 1.0), offset=0.5)
    with pytest.raises(ValueError, match="response_scale: expected a finite number > 0"):
        response_standardization(y, private=False, scale=0.0)
    assert response_standardization(y, private=True) == (0.0, 1.0)  # nothing read with privacy on
    assert response_standardization(np.full(5, 2.0), private=False) == (2.0, 1.0)  # constant y: scale 1


def test_the_flower_strategy_says_cap_too(task_identity):
    """The Flower strategy (its protocol server, answered by the real site code through the test grid of
    tests/test_faults.py) ends the same privacy-off run with the same ``cap`` reason."""
    sc = parse_scenario({**TINY, "algorithm": {"kind": "fdp_admm", "rounds": 3, "stopping": {"tol_rel": 1e-12}},
                         "privacy": {"enabled": False}})
    strategy, _grid = run_strategy(sc)
    assert strategy.stop_reason == run_fdp_admm(sc, with_reference=False).stop_reason
    assert strategy.stop_reason.startswith(f"{CAP}: algorithm.rounds = 3")


def test_the_flower_server_app_writes_cap_and_the_predicted_cost(task_identity, tmp_path):
    """The ServerApp's run function (run_fdp_admm_federation on the in-memory grid): summary.json says
    ``cap`` for the privacy-off run and keeps the predicted cost of a private one."""
    from flwr.app import Context, RecordDict

    from fdp_flower.strategies.fdp_admm import run_fdp_admm_federation
    from tests.test_faults import FakeGrid

    off = parse_scenario({**TINY, "algorithm": {"kind": "fdp_admm", "rounds": 3, "stopping": {"tol_rel": 1e-12}},
                          "privacy": {"enabled": False}})
    on = parse_scenario({**TINY, "algorithm": {"kind": "fdp_admm", "rounds": 2},
                         "privacy": {"mode": "total", "eps": 0.5, "delta": 1e-5}})
    for name, sc in (("off", off), ("on", on)):
        ctx = Context(run_id=7, node_id=0, node_config={}, state=RecordDict(),
                      run_config={"results-dir": str(tmp_path / name)})
        run_fdp_admm_federation(FakeGrid(sc), ctx, sc)
    (out_off,) = list((tmp_path / "off").iterdir())
    (out_on,) = list((tmp_path / "on").iterdir())
    assert json.loads((out_off / "summary.json").read_text())["stop_reason"].startswith(f"{CAP}: algorithm.rounds = 3")
    summary = json.loads((out_on / "summary.json").read_text())
    assert summary["stop_reason"] == "completed" and summary["predicted_privacy_cost"]["cost"] > 1
