"""Property-based tests (hypothesis): on any input, the scenario parser and the data loaders either
succeed or raise the project's own validation errors (ScenarioError / ValueError subclasses) with a
one-line message -- never a TypeError, KeyError, pydantic error or a traceback from a library."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fdp_flower.algorithms.fdp_admm.config import Scenario, load_scenario, parse_scenario
from fdp_flower.algorithms.fdp_admm.plan import load_partition, partition_sizes
from fdp_flower.config.base import ScenarioError, apply_overrides
from fdp_flower.functional import design
from fdp_flower.functional.fpca import fixed_basis
from fdp_flower.functional.validation import DataValidationError, check_curve_data, check_same_grid

SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# names that occur in the schema, so that generated mappings often reach deep validators
NAMES = ["name", "seed", "data", "kind", "paper_simulation", "n_samples", "grid_points", "federation",
         "num_clients", "basis", "pooled", "fixed", "family", "n_components", "explained_variance", "model",
         "loss", "quantile", "tau", "penalty", "lam", "clip_c1", "algorithm", "fdp_admm", "rho", "rounds", "step",
         "theorem2", "scale", "privacy", "enabled", "mode", "total", "per_round", "eps", "delta", "schedule",
         "geometric", "ratio", "noise_source", "os_entropy", "faults", "failure_rate", "quorum",
         "max_primal_norm", "output", "checkpoint_every", "epsiln"]
scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**20, 10**20),
                    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from(NAMES), st.text(max_size=12))
keys = st.one_of(st.sampled_from(NAMES), st.text(max_size=8), st.integers(-3, 3))
trees = st.recursive(scalars, lambda kids: st.one_of(st.lists(kids, max_size=4),
                                                     st.dictionaries(keys, kids, max_size=5)), max_leaves=25)


def _sections():
    """Mostly well-formed scenarios with a few perturbed fields."""
    leaf = st.one_of(scalars, trees)
    return st.fixed_dictionaries({}, optional={
        "seed": leaf,
        "data": st.fixed_dictionaries({}, optional={"kind": leaf, "n_samples": leaf, "grid_points": leaf}),
        "federation": st.fixed_dictionaries({}, optional={"num_clients": leaf}),
        "model": st.fixed_dictionaries({}, optional={"loss": st.fixed_dictionaries(
            {}, optional={"kind": leaf, "tau": leaf}), "clip_c1": leaf}),
        "privacy": st.fixed_dictionaries({}, optional={"eps": leaf, "delta": leaf, "mode": leaf,
                                                       "schedule": leaf, "noise_source": leaf}),
        "faults": st.fixed_dictionaries({}, optional={"quorum": leaf, "failure_rate": leaf}),
        "algorithm": st.fixed_dictionaries({}, optional={"kind": leaf, "rounds": leaf, "step": leaf}),
        "basis": leaf,
    })


def _only_project_errors(fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except ValueError as exc:  # ScenarioError and DataValidationError are ValueErrors
        msg = str(exc)
        assert msg and "\n" not in msg, repr(msg)
        assert type(exc).__module__.startswith("fdp_flower") or type(exc) is ValueError, type(exc)
        return exc


@SETTINGS
@given(st.one_of(trees, _sections()))
def test_parse_scenario_raises_only_scenario_errors(data):
    out = _only_project_errors(parse_scenario, data, "s.yaml")
    assert isinstance(out, (Scenario, ScenarioError)), type(out)


@SETTINGS
@given(st.text(max_size=200))
def test_load_scenario_of_any_text(tmp_path_factory, text):
    path = tmp_path_factory.mktemp("yaml") / "s.yaml"
    path.write_text(text)
    out = _only_project_errors(load_scenario, path)
    assert isinstance(out, (Scenario, ScenarioError)), type(out)


@SETTINGS
@given(st.lists(st.text(max_size=20), max_size=4))
def test_overrides_of_any_text(overrides):
    def run():
        return parse_scenario(apply_overrides({}, overrides))
    out = _only_project_errors(run)
    assert isinstance(out, (Scenario, ScenarioError)), type(out)


finite = st.floats(-1e6, 1e6)
any_float = st.floats(allow_nan=True, allow_infinity=True)


@st.composite
def curve_inputs(draw):
    g = draw(st.integers(0, 6))
    grid = draw(st.one_of(st.lists(finite, min_size=g, max_size=g),
                          st.just(list(np.linspace(0, 1, g))), st.lists(any_float, max_size=6)))
    n = draw(st.integers(0, 4))
    row = st.lists(st.one_of(finite, any_float), min_size=0, max_size=7)
    curves = draw(st.one_of(st.lists(row, min_size=n, max_size=n), st.lists(st.lists(row, max_size=2), max_size=2),
                            st.just([[1.0] * g] * n), trees))
    response = draw(st.one_of(st.lists(st.one_of(finite, any_float), min_size=n, max_size=n), trees))
    return curves, response, grid


@SETTINGS
@given(curve_inputs())
def test_curve_checks_raise_only_data_validation_errors(args):
    out = _only_project_errors(check_curve_data, *args)
    if not isinstance(out, ValueError):
        x, y, g = out
        assert x.shape == (y.size, g.size) and np.all(np.isfinite(x)) and np.all(np.isfinite(y))
    else:
        assert isinstance(out, DataValidationError)


@SETTINGS
@given(st.lists(st.lists(any_float, max_size=5), max_size=3))
def test_same_grid_check(grids):
    out = _only_project_errors(check_same_grid, grids)
    assert isinstance(out, (np.ndarray, DataValidationError))


@SETTINGS
@given(st.integers(-5, 10**9), st.integers(-3, 40), st.integers(-3, 40), st.integers(-3, 40),
       st.one_of(st.floats(-1, 2), st.just(float("nan"))), st.integers(0, 8))
def test_simulated_partitions(seed, n, parts, partition, tau, g):
    n = min(n, 60)
    grid = np.linspace(0, 1, g)
    out = _only_project_errors(design.simulate_partition, seed, n, parts, partition, tau=tau, grid=grid) \
        if seed >= 0 else None
    if isinstance(out, design.CurveData):
        sizes = np.diff(design.partition_bounds(n, parts))
        assert out.curves.shape == (sizes[partition], g) and np.all(np.isfinite(out.curves))


@SETTINGS
@given(st.sampled_from(["cosine", "fourier", "bspline", "wavelet"]), st.integers(-2, 12),
       st.lists(any_float, max_size=8), st.integers(0, 3))
def test_fixed_bases_and_scores(family, k, grid, n):
    basis = _only_project_errors(fixed_basis, family, k, np.asarray(grid, dtype=float))
    if not isinstance(basis, ValueError):
        curves = np.ones((n, len(grid)))
        out = _only_project_errors(basis.scores, curves)
        assert isinstance(out, ValueError) or out.shape == (n, basis.n_components)


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 80), st.integers(1, 10), st.integers(5, 12), st.integers(0, 2**63 - 1))
def test_valid_scenarios_load_every_partition(n, m, g, seed):
    sc = _only_project_errors(parse_scenario, {"seed": seed, "data": {"n_samples": n, "grid_points": g},
                                               "federation": {"num_clients": m}})
    if m > n:
        assert isinstance(sc, ScenarioError) and "exceeds data.n_samples" in str(sc)
        return
    sizes = partition_sizes(sc)
    assert sizes.sum() == n and sizes.min() >= 1
    for i in (0, m - 1):
        assert load_partition(sc, i).n_samples == sizes[i]


def test_property_helper_rejects_foreign_errors():
    with pytest.raises(AssertionError):
        _only_project_errors(lambda: (_ for _ in ()).throw(ValueError("two\nlines")))
    with pytest.raises(KeyError):
        _only_project_errors(lambda: {}["x"])


# ------------------------------------------------------------------ node-local data files (deployment loader)
from fdp_flower.functional.node_files import read_node_file  # noqa: E402

cells = st.one_of(st.sampled_from(["response", "t=0", "t=0.5", "t=1", "t=x", "1", "-2.5", "nan", "inf", ""]),
                  st.text(alphabet="0123456789.,-e \"\n", max_size=6))


@SETTINGS
@given(st.lists(st.lists(cells, max_size=5), max_size=5))
def test_node_csv_files(tmp_path_factory, rows):
    path = tmp_path_factory.mktemp("csv") / "node.csv"
    path.write_text("\n".join(",".join(r) for r in rows))
    out = _only_project_errors(read_node_file, path)
    assert isinstance(out, (design.CurveData, ValueError))


@SETTINGS
@given(st.dictionaries(st.sampled_from(["grid", "curves", "response", "other"]),
                       st.one_of(st.lists(any_float, max_size=4), st.lists(st.lists(any_float, max_size=3), max_size=3),
                                 st.just([0.0, 0.5, 1.0]), st.just([[1.0, 2.0, 3.0]]), st.just([1.0])), max_size=4))
def test_node_npz_files(tmp_path_factory, arrays):
    path = tmp_path_factory.mktemp("npz") / "node.npz"
    try:
        np.savez(path, **{k: np.asarray(v, dtype=float) for k, v in arrays.items()})
    except ValueError:  # ragged lists numpy itself refuses: write raw bytes instead
        path.write_bytes(b"PK\x03\x04 not really")
    out = _only_project_errors(read_node_file, path)
    assert isinstance(out, (design.CurveData, ValueError))
