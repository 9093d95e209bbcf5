"""The Python API (fdp_flower.fit, fit_p2p, fit_gradient, load_results; docs/api.md)."""
from __future__ import annotations

import re
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import fdp_flower
from fdp_flower.functional import design
from fdp_flower.functional.fpca import quadrature_weights
from fdp_flower.functional.node_files import NodeDataError

ROOT = Path(__file__).resolve().parents[1]
GRID = design.default_grid(40)
FAST = dict(rounds=12, reference=False)


@pytest.fixture(scope="module")
def data():
    return design.simulate_slice(5, 0, 1500, tau=0.5, grid=GRID)


def test_arrays_fdatagrid_and_dataframe_give_the_same_model(data):
    from skfda import FDataGrid

    from_arrays = fdp_flower.fit(data.curves, data.response, grid=GRID, **FAST)
    from_fd = fdp_flower.fit(FDataGrid(data.curves, GRID), data.response, **FAST)
    frame = pd.DataFrame(data.curves, columns=[f"t={float(t)!r}" for t in GRID]).assign(response=data.response)
    from_frame = fdp_flower.fit(frame, **FAST)
    for other in (from_fd, from_frame):
        np.testing.assert_allclose(other.w, from_arrays.w, rtol=0, atol=1e-12)
    m = from_arrays
    assert isinstance(m.beta_hat, FDataGrid)
    np.testing.assert_allclose(m.beta_hat.grid_points[0], GRID)
    np.testing.assert_allclose(m.beta_hat.data_matrix[0, :, 0], m.basis.function(m.coefficients))
    # predict = intercept + int beta_hat X (the training quadrature), from arrays or an FDataGrid
    expected = m.intercept + data.curves @ (m.beta_values * quadrature_weights(GRID))
    np.testing.assert_allclose(m.predict(data.curves), expected, rtol=1e-12)
    np.testing.assert_allclose(m.predict(FDataGrid(data.curves, GRID)), expected, rtol=1e-12)
    # the privacy report: a total budget met by the PLD accountant, with its relation and delta
    p = m.privacy
    assert p.private and p.mode == "total" and p.eps_budget == 1.0 and p.delta == 1e-5
    assert p.eps == pytest.approx(1.0, abs=1e-3) and p.eps <= 1.0 + 1e-6 and p.eps < p.eps_rdp
    # the ADMM rule's data terms, and its location/scale search and level calibration (on by default)
    assert p.neighbouring == "replace_one" and p.mechanisms == (
        "fdp_admm_subgradient", "fdp_level_residual_quartile_shares", "fdp_newton_quartile_shares",
        "fdp_newton_residual_share")
    assert p.releases == 12 + 21 and len(m.ledger.releases) == (12 + 21) * 10
    assert "eps = 1 at delta = 1e-05 (PLD" in str(p)
    assert isinstance(m.history, pd.DataFrame) and list(m.history["round"]) == list(range(1, 12 + 21 + 1))
    assert m.scenario.model.intercept and m.scenario.federation.num_clients == 10
    # the scenario names the curves' digest, never the values, and nothing was written to disk
    dump = m.scenario.model_dump(mode="json")
    assert dump["data"]["kind"] == "in_memory" and dump["data"]["digest"].startswith("sha256:")
    assert len(repr(dump)) < 10_000


def test_client_ids_and_a_client_column_define_the_clients(data):
    rng = np.random.default_rng(0)
    ids = rng.choice(np.array(["site-b", "site-a", "site-c"]), size=len(data.response))
    model = fdp_flower.fit(data.curves, data.response, grid=GRID, client_ids=ids, **FAST)
    assert model.scenario.federation.num_clients == 3
    assert model.sample_sizes == tuple(int(np.sum(ids == s)) for s in ("site-a", "site-b", "site-c"))
    frame = pd.DataFrame(data.curves, columns=list(GRID)).assign(response=data.response, site=ids)
    again = fdp_flower.fit(frame, client_column="site", **FAST)
    np.testing.assert_allclose(again.w, model.w, rtol=0, atol=1e-12)


def test_predict_evaluates_an_fdatagrid_on_another_grid(data):
    from skfda import FDataGrid

    model = fdp_flower.fit(data.curves, data.response, grid=GRID, **FAST)
    fine = design.default_grid(196)  # holds every point of the 40-point grid: the interpolation is exact there
    curves = design.simulate_slice(9, 0, 20, tau=0.5, grid=fine).curves
    coarse = design.simulate_slice(9, 0, 20, tau=0.5, grid=GRID).curves  # the same curves on the model's grid
    np.testing.assert_allclose(model.predict(FDataGrid(curves, fine)), model.predict(coarse), atol=1e-10)
    with pytest.raises(ValueError, match=r"shape \(n, 40\)"):
        model.predict(curves)


def test_an_irregular_grid_is_fitted_and_scored_on_its_own_quadrature():
    """Curves observed on a random, strongly non-equispaced grid (Simpson's weights would be negative):
    the fit converges to the exact estimator on that grid, and the MISE uses the grid's weights."""
    rng = np.random.default_rng(3)
    grid = np.r_[0.0, np.sort(rng.uniform(0, 1, 48)), 1.0]
    d = design.simulate_slice(5, 0, 1500, tau=0.5, grid=grid)
    model = fdp_flower.fit(d.curves, d.response, grid=grid, eps=None, rounds=60, n_clients=5, reference=True)
    np.testing.assert_allclose(model.beta_hat.grid_points[0], grid)
    assert model.history["objective_gap"].iloc[-1] < 1e-2  # against the exact LP on the same features
    beta = design.true_beta(grid)
    q = quadrature_weights(grid)
    assert np.all(q > 0)
    assert model.mise(beta) == pytest.approx(float(((model.beta_values - beta) ** 2) @ q), rel=1e-12)
    assert model.mise(design.true_beta) == pytest.approx(model.mise(beta), rel=1e-12)
    # the same curves on an equispaced grid of the same size: a comparable estimate
    even = design.default_grid(50)
    d2 = design.simulate_slice(5, 0, 1500, tau=0.5, grid=even)
    reference = fdp_flower.fit(d2.curves, d2.response, grid=even, eps=None, rounds=60, n_clients=5, reference=False)
    assert model.mise(beta) < 2 * reference.mise(design.true_beta(even)) + 0.05


def test_load_results_returns_the_same_model(tmp_path, data):
    model = fdp_flower.fit(data.curves, data.response, grid=GRID, out=tmp_path / "run", **FAST)
    back = fdp_flower.load_results(tmp_path / "run")
    np.testing.assert_allclose(back.w, model.w, rtol=0, atol=0)
    np.testing.assert_allclose(back.beta_values, model.beta_values, rtol=0, atol=0)
    assert back.intercept == model.intercept and back.privacy == model.privacy
    assert back.ledger.releases == model.ledger.releases
    assert back.scenario == model.scenario and back.sample_sizes == model.sample_sizes
    pd.testing.assert_frame_equal(back.history, model.history, check_dtype=False)
    np.testing.assert_allclose(back.predict(data.curves), model.predict(data.curves), rtol=0, atol=0)


def test_load_results_reads_a_fdp_flower_run_directory(tmp_path):
    from fdp_flower.cli import main

    out = tmp_path / "cli"
    assert main(["run", str(ROOT / "scenarios" / "quickstart.yaml"), "--out", str(out), "--set",
                 "data.n_samples=600", "--set", "federation.num_clients=3", "--set", "algorithm.rounds=3"]) == 0
    model = fdp_flower.load_results(out)
    with np.load(out / "final.npz") as npz:
        np.testing.assert_allclose(model.beta_values, npz["beta_hat"], rtol=0, atol=1e-12)
        assert str(npz["basis_kind"]) == model.basis.kind
    assert model.engine == "inprocess" and len(model.history) == 3
    assert model.mise(design.true_beta) == pytest.approx(model.history["mise_estimate"].iloc[-1], rel=1e-9)


@pytest.mark.parametrize("scenario, overrides", [
    ("p2p_lad_zcdp_nfl.yaml", ["algorithm.rounds=3"]),
    ("dp_admm_breast_cancer.yaml", ["algorithm.rounds=3", "federation.num_clients=2"]),
])
def test_load_results_reads_the_other_families_run_directories(tmp_path, scenario, overrides):
    from fdp_flower.cli import main

    args = ["run", str(ROOT / "scenarios" / scenario), "--out", str(tmp_path)]
    for o in overrides:
        args += ["--set", o]
    assert main(args) == 0
    model = fdp_flower.load_results(tmp_path)
    assert isinstance(model, fdp_flower.TabularModel) and len(model.history) >= 3
    assert model.privacy.private and model.privacy.eps > 0
    if model.node_w is not None:
        with np.load(tmp_path / "iterates.npz") as npz:
            np.testing.assert_allclose(model.node_w, npz["released"][-1])
    else:
        with np.load(tmp_path / "final.npz") as npz:
            np.testing.assert_allclose(model.coefficients, npz["x"])


def test_the_federated_fpca_basis_is_charged_to_the_ledger(data):
    model = fdp_flower.fit(data.curves, data.response, grid=GRID, basis="fpca", n_components=4, basis_eps=0.5,
                           level_calibration=False, **FAST)  # the 12 ADMM rounds alone
    assert model.privacy.mechanisms == ("fdp_admm_subgradient", "fpca_covariance")
    # total mode: the basis phase's (0.5, 1e-6) summary is inside the whole run's eps = 1
    assert 0.97 <= model.privacy.eps <= 1.0 and model.privacy.releases == 13
    assert model.basis.kind == "federated_dp"


def test_a_changed_client_file_is_refused(tmp_path, data):
    from fdp_flower.engines.inprocess import run_fdp_admm

    model = fdp_flower.fit(data.curves, data.response, grid=GRID, data_dir=tmp_path, **FAST)
    path = Path(model.scenario.data.paths[2])
    with np.load(path) as npz:
        arrays = {k: npz[k] for k in npz.files}
    arrays["response"] = arrays["response"] + 1.0
    np.savez(path, **arrays)
    with pytest.raises(NodeDataError, match="changed since the scenario named it"):
        run_fdp_admm(model.scenario, with_reference=False)


@pytest.mark.parametrize("call, message", [
    (lambda d: fdp_flower.fit(np.where(np.arange(40) == 3, np.nan, d.curves), d.response), "curves contains 1500 NaN"),
    (lambda d: fdp_flower.fit(d.curves, d.response[:-1]), r"y: expected 1500 responses"),
    (lambda d: fdp_flower.fit(d.curves[None], d.response), r"curves: expected an \(n, G\) array"),
    (lambda d: fdp_flower.fit(d.curves, d.response, n_clients=3, client_ids=np.zeros(1500)), "not both"),
    (lambda d: fdp_flower.fit(d.curves, d.response, n_clients=2000), "exceeds the number of rows"),
    (lambda d: fdp_flower.fit(d.curves, d.response, basis="pooled"), "would not be differentially private"),
    (lambda d: fdp_flower.fit(d.curves, d.response, basis="wavelet"), "basis: choose one of"),
    (lambda d: fdp_flower.fit(d.curves, d.response, tau=1.5), r"model\.loss\.tau"),
    (lambda d: fdp_flower.fit(d.curves, d.response, eps=float("inf")), "eps: expected a finite number"),
    (lambda d: fdp_flower.fit(d.curves, d.response, privacy="per_step"), "privacy: choose one of"),
    (lambda d: fdp_flower.fit(d.curves, d.response, grid=GRID[::-1]), "strictly increasing"),
    (lambda d: fdp_flower.fit(pd.DataFrame({"response": d.response, "x": d.response, "t=0": d.response})),
     "column 'x' is neither"),
    (lambda d: fdp_flower.fit(d.curves, d.response, eps="1"), r"eps: expected a finite number > 0 .*got '1'"),
    (lambda d: fdp_flower.fit(d.curves, d.response, seed=1.5), r"seed: expected an integer >= 0, got 1\.5"),
    (lambda d: fdp_flower.fit(d.curves, d.response, seed=-1), r"seed: expected an integer >= 0, got -1"),
    (lambda d: fdp_flower.fit(d.curves + 1j, d.response), "curves: complex values are not accepted"),
    (lambda d: fdp_flower.fit(d.curves[:0], d.response[:0]), "curves: no rows"),
    (lambda d: fdp_flower.fit(d.curves, d.response, out=Path(__file__) / "run"), r"out: results directory .* is a file"),
    (lambda d: fdp_flower.fit_p2p(d.curves, np.sign(d.response), loss="logistic", n_nodes=1), "at least 2 nodes"),
    (lambda d: fdp_flower.fit_p2p(d.curves, d.response, steps=5), "steps: renamed to rounds"),
    (lambda d: fdp_flower.fit_gradient(d.curves, d.response, loss="logistic"), r"labels in \{-1, \+1\}"),
])
def test_bad_input_fails_in_one_line_naming_the_argument(data, call, message):
    with pytest.raises(ValueError, match=message) as info:
        call(data)
    assert "\n" not in str(info.value)


def _fdatabasis(curves, grid, n_basis=15):
    from skfda import FDataGrid
    from skfda.representation.basis import BSplineBasis

    return FDataGrid(curves, grid).to_basis(BSplineBasis(domain_range=(grid[0], grid[-1]), n_basis=n_basis))


def test_an_fdatabasis_is_fitted_and_predicted_on_its_evaluation_grid(data):
    """An skfda.FDataBasis (a basis expansion) is evaluated on `grid` (default 100 equispaced points over its
    domain): fitting it equals fitting those values, and predict on an FDataBasis equals predict on its values
    at the model's grid (before: TypeError in fit, "setting an array element with a sequence" in predict)."""
    fd = _fdatabasis(data.curves, GRID)
    model = fdp_flower.fit(fd, data.response, **FAST)
    default = np.linspace(0, 1, 100)
    np.testing.assert_allclose(model.grid, default)
    same = fdp_flower.fit(fd(default)[..., 0], data.response, grid=default, **FAST)
    np.testing.assert_allclose(model.w, same.w, rtol=0, atol=1e-12)
    on_grid = fdp_flower.fit(fd, data.response, grid=GRID, **FAST)
    np.testing.assert_allclose(on_grid.grid, GRID)
    new = _fdatabasis(design.simulate_slice(8, 0, 7, tau=0.5, grid=GRID).curves, GRID)
    np.testing.assert_allclose(model.predict(new), model.predict(new(default)[..., 0]), rtol=1e-12)
    assert model.mise(lambda t: 0 * t) == pytest.approx(model.mise(np.zeros(100)))
    with pytest.raises(ValueError, match=r"curves: the curves' domain \[0, 1\] does not cover the grid \[0, 2\]"):
        fdp_flower.fit(fd, data.response, grid=np.linspace(0, 2, 30), **FAST)


@pytest.mark.parametrize("curves, message", [
    ("abc", "predict: expected numbers on the model's grid, got values of type str"),
    (np.zeros((2, 3, 40)), r"predict: expected an array of shape \(n, 40\) on the model's grid, an FDataGrid or an "
                           r"FDataBasis"),
    (np.zeros((2, 40)) + 1j, "predict: complex values are not accepted"),
])
def test_bad_predict_input_fails_in_one_line(data, curves, message):
    model = fdp_flower.fit(data.curves, data.response, grid=GRID, **FAST)
    with pytest.raises(ValueError, match=message) as info:
        model.predict(curves)
    assert "\n" not in str(info.value)


# ---------------------------------------------------------------- tabular families
def _regression(n=900, k=3, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, k)) / np.sqrt(k) * 0.8
    truth = np.array([0.6, -0.4, 0.3])
    return x, 2.0 + x @ truth + rng.laplace(0.0, 0.1, n), truth


def test_fit_p2p_reaches_the_exact_solution_with_an_intercept_and_reads_back(tmp_path):
    x, y, truth = _regression()
    model = fdp_flower.fit_p2p(x, y, loss="absolute", algorithm="decentralized_admm", eps=None, n_nodes=5,
                               graph="complete", rounds=400, clip=1.5, out=tmp_path / "p2p")
    assert model.history["released_normalized_error"].iloc[-1] < 0.02  # against the exact LP with free intercept
    assert model.intercept == pytest.approx(2.0, abs=0.05)
    np.testing.assert_allclose(model.coefficients, truth, atol=0.1)
    assert model.node_coefficients.shape == (5, 3)
    np.testing.assert_allclose(model.predict(x[:5]), model.intercept + x[:5] @ model.coefficients)
    back = fdp_flower.load_results(tmp_path / "p2p")
    np.testing.assert_allclose(back.w, model.w, rtol=0, atol=0)
    assert back.intercept == model.intercept and not back.privacy.private
    private = fdp_flower.fit_p2p(x, y, loss="absolute", eps=5.0, n_nodes=5, graph="ring", rounds=50, clip=1.5)
    assert private.privacy.mode == "total" and private.privacy.eps == pytest.approx(5.0, rel=1e-3)
    assert private.privacy.releases == 50


def test_fit_gradient_logistic_with_intercept(tmp_path):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1200, 4)) / 2.0
    score = 1.0 + x @ np.array([1.5, -1.0, 0.0, 0.5])
    labels = np.where(rng.uniform(size=1200) < 1 / (1 + np.exp(-score)), 1.0, -1.0)
    plain = fdp_flower.fit_gradient(x, labels, eps=None, n_clients=4, rounds=200, out=tmp_path / "g")
    assert plain.history["relative_gap"].iloc[-1] < 1e-6  # the exact generalized lasso with a free intercept
    assert plain.intercept == pytest.approx(1.0, abs=0.3)  # unpenalized: not shrunk towards 0
    bayes = np.mean(np.sign(score) == labels)
    assert np.mean(plain.predict(x) == labels) >= bayes - 0.02
    back = fdp_flower.load_results(tmp_path / "g")
    np.testing.assert_allclose(back.coefficients, plain.coefficients, rtol=0, atol=0)
    private = fdp_flower.fit_gradient(x, labels, eps=1.0, n_clients=4, rounds=50)
    assert private.privacy.neighbouring == "add_remove" and private.privacy.mode == "total"
    assert private.privacy.eps <= 1.0  # Theorem 1's calibration, reported by the tighter PLD accountant


def test_exact_reference_of_the_intercept_model_matches_the_api_inputs(data):
    """The FDP-ADMM model with an intercept solves the problem the exact LP solves on the same clipped
    features: F-ADMM's estimate has a small objective gap to it."""
    model = fdp_flower.fit(data.curves, data.response + 3.0, grid=GRID, eps=None, rounds=80, n_clients=5,
                           reference=True)
    assert model.history["objective_gap"].iloc[-1] < 5e-3
    assert model.intercept == pytest.approx(3.0, abs=0.3)


def test_readme_python_example_runs_as_written(capsys):
    """The README's "Use it from Python" block, executed verbatim (README and code cannot drift)."""
    text = (ROOT / "README.md").read_text()
    section = text.split("## Use it from Python", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    assert len([line for line in code.splitlines() if line.strip()]) == 5
    exec(compile(code, "README.md", "exec"), {})
    printed = capsys.readouterr().out
    mise, eps = re.search(r"MISE = ([0-9.]+), eps = ([0-9.]+)", printed).groups()
    assert float(eps) <= 1.0 + 1e-3 and float(mise) < 0.2
    shown = re.search(r"```\n(MISE = .*?)\n```", section, re.S).group(1)
    assert printed.strip() == shown.strip()  # the output shown in the README is the output


def test_fit_writes_nothing_and_a_data_dir_fits_the_same_model_from_files(data, tmp_path, monkeypatch):
    """The arrays reach the engine in memory: no file is opened for writing during a fit; with data_dir
    the same fit runs from one file per client and gives the same model."""
    import builtins

    opened = []
    real_open = builtins.open

    def watch(file, mode="r", *args, **kwargs):
        if any(c in mode for c in "wax+"):
            opened.append(str(file))
        return real_open(file, mode, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", watch)
    monkeypatch.setattr(tempfile, "mkdtemp", lambda *a, **k: pytest.fail("a temporary directory was made"))
    memory = fdp_flower.fit(data.curves, data.response, grid=GRID, **FAST)
    monkeypatch.undo()
    assert opened == []
    files = fdp_flower.fit(data.curves, data.response, grid=GRID, data_dir=tmp_path / "files", **FAST)
    assert files.scenario.data.kind == "client_arrays" and len(list((tmp_path / "files").glob("*.npz"))) == 10
    np.testing.assert_allclose(memory.w, files.w, rtol=0, atol=1e-12)
    from fdp_flower.algorithms.fdp_admm.plan import data_source

    with pytest.raises(ValueError, match="exist only in the process that fit them"):
        data_source(memory.scenario)
