"""Node-local data files: formats, validation errors, partitioning, scenario rules, setup-reply checks."""
from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

from fdp_flower.algorithms.fdp_admm.config import load_scenario, parse_scenario
from fdp_flower.config.base import ScenarioError
from fdp_flower.functional.design import CurveData
from fdp_flower.functional.node_files import (
    NodeDataError,
    grid_digest,
    load_dataset,
    partition,
    read_node_file,
    write_node_file,
    write_partitions,
)

APP = Path(__file__).resolve().parents[1]


def _data(m=7, g=12, seed=0):
    rng = np.random.default_rng(seed)
    grid = np.linspace(0.0, 1.0, g)
    return CurveData(rng.standard_normal((m, g)), rng.standard_normal(m), grid)


@pytest.mark.parametrize("fmt", ["csv", "npz"])
def test_round_trip_is_exact(tmp_path, fmt):
    data = _data()
    back = read_node_file(write_node_file(tmp_path / f"n.{fmt}", data))
    np.testing.assert_array_equal(back.curves, data.curves)  # repr() floats round-trip exactly
    np.testing.assert_array_equal(back.response, data.response)
    np.testing.assert_array_equal(back.grid, data.grid)


def test_response_offset_is_subtracted(tmp_path):
    data = _data()
    back = read_node_file(write_node_file(tmp_path / "n.npz", data), response_offset=2.5)
    np.testing.assert_array_equal(back.response, data.response - 2.5)


def test_missing_file_and_unknown_type(tmp_path):
    with pytest.raises(NodeDataError, match="data file not found"):
        read_node_file(tmp_path / "nope.npz")
    (tmp_path / "x.txt").write_text("1")
    with pytest.raises(NodeDataError, match="unknown file type"):
        read_node_file(tmp_path / "x.txt")


def test_wrong_columns(tmp_path):
    p = tmp_path / "a.csv"
    p.write_text("y,t=0,t=0.5,t=1\n1,2,3,4\n")
    with pytest.raises(NodeDataError, match="no 'response' column"):
        read_node_file(p)
    p.write_text("response,t=0,x5,t=1\n1,2,3,4\n")
    with pytest.raises(NodeDataError, match="column 'x5'"):
        read_node_file(p)
    p.write_text("response,t=0,t=0.5,t=1\n1,2,3\n")
    with pytest.raises(NodeDataError, match="line 2 has 3 fields"):
        read_node_file(p)
    np.savez(tmp_path / "b.npz", grid=np.arange(3.0), curves=np.ones((2, 3)))
    with pytest.raises(NodeDataError, match="missing array.*response"):
        read_node_file(tmp_path / "b.npz")


def test_nan_is_refused_naming_the_sample(tmp_path):
    data = _data()
    curves = data.curves.copy()
    curves[4, 3] = np.nan
    path = write_node_file(tmp_path / "n.csv", CurveData(curves, data.response, data.grid))
    with pytest.raises(NodeDataError, match=r"curves contain NaN.*1 entries; first in sample 4"):
        read_node_file(path)


def test_grid_mismatch_with_the_scenario_grid(tmp_path):
    path = write_node_file(tmp_path / "n.npz", _data(g=12))
    with pytest.raises(NodeDataError, match="12 grid points, but the scenario's grid has 13"):
        read_node_file(path, expected_grid=np.linspace(0, 1, 13))
    with pytest.raises(NodeDataError, match="grid differs"):
        read_node_file(path, expected_grid=np.linspace(0, 2, 12))


def test_partition_is_an_even_split_of_all_samples(tmp_path):
    data = load_dataset("paper", n_samples=301)
    parts = partition(data, 3, shuffle_seed=1)
    assert [p.n_samples for p in parts] == [101, 100, 100]
    together = np.vstack([p.curves for p in parts])
    # a permutation of the rows: same multiset of rows
    np.testing.assert_array_equal(np.sort(together, axis=0), np.sort(data.curves, axis=0))
    paths = write_partitions(parts, tmp_path, "csv")
    assert [p.name for p in paths] == ["node-0.csv", "node-1.csv", "node-2.csv"]


def test_cli_partition_writes_node_files(tmp_path, capsys):
    from fdp_flower.cli import main

    assert main(["partition", "paper", "--nodes", "3", "--out", str(tmp_path), "--n-samples", "90"]) == 0
    assert "data-path=" in capsys.readouterr().out
    sizes = [read_node_file(tmp_path / f"node-{i}.npz").n_samples for i in range(3)]
    assert sizes == [30, 30, 30]


def test_pooled_basis_is_refused_with_node_files():
    with pytest.raises(ScenarioError, match="pooled.*never has; use 'fixed', 'provided' or 'federated_dp'"):
        parse_scenario({"data": {"kind": "node_files"}, "basis": {"kind": "pooled"}})
    with pytest.raises(ScenarioError, match="names 2 files for federation.num_clients = 3"):
        parse_scenario({"data": {"kind": "node_files", "paths": ["a", "b"]}, "federation": {"num_clients": 3},
                        "basis": {"kind": "fixed"}})


@pytest.mark.parametrize("path", sorted(APP.glob("scenarios/deploy_*.yaml")) + sorted(APP.glob("scenarios/tecator*.yaml")),
                         ids=lambda p: p.name)
def test_shipped_deployment_scenarios_load(path):
    from fdp_flower.algorithms.registry import any_scenario_from_run_config

    sc = any_scenario_from_run_config({"scenario": str(path), "overrides": ""})  # any family's (deploy_dp_admm, deploy_p2p)
    assert sc.data.kind == "node_files"
    if sc.algorithm.kind == "fdp_admm":
        assert sc.basis.kind in ("fixed", "federated_dp", "provided")
    elif sc.algorithm.kind in ("dp_admm", "dp_acc_admm"):
        assert sc.model.constraint.kind in ("lasso", "user")  # A without the pooled rows


def _scenario3():
    return parse_scenario({"data": {"kind": "node_files", "grid_points": 12}, "federation": {"num_clients": 3},
                           "basis": {"kind": "fixed", "n_components": 4}})


def _reply(node, client, grid):
    return (node, {"partition-id": client, "num-examples": 10, "grid-digest": grid_digest(grid),
                   "grid-points": grid.size, "grid-start": float(grid[0]), "grid-stop": float(grid[-1])}, {}, None)


def test_setup_detects_grid_mismatch_between_nodes():
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=DeprecationWarning, module="typer")
        from fdp_flower.strategies.node_phase import SetupError, check_setup_replies
    sc = _scenario3()
    good, other = np.linspace(0, 1, 12), np.linspace(0, 1, 11)
    ok = check_setup_replies(sc, [_reply(10 + c, c, good) for c in range(3)])
    assert {c: node for c, (node, _m, _a) in ok.items()} == {0: 10, 1: 11, 2: 12}
    with pytest.raises(SetupError, match=r"grid mismatch between nodes: clients \[0, 2\] have a grid of 12 "
                                         r"points 0\.\.1; clients \[1\] have a grid of 11 points"):
        check_setup_replies(sc, [_reply(10, 0, good), _reply(11, 1, other), _reply(12, 2, good)])
    with pytest.raises(SetupError, match=r"no setup reply from clients \[2\]"):
        check_setup_replies(sc, [_reply(10, 0, good), _reply(11, 1, good)])
    with pytest.raises(SetupError, match="node 11: .*data file not found"):
        check_setup_replies(sc, [_reply(10, 0, good), (11, None, None, "Traceback ...\nNodeDataError: x: data file not found"),
                                 _reply(12, 2, good)])


def test_provided_basis_from_a_file(tmp_path):
    from fdp_flower.engines.inprocess import run_fdp_admm
    from fdp_flower.functional.fpca import fixed_basis

    paths = write_partitions(partition(load_dataset("paper", n_samples=300), 3), tmp_path, "npz")
    grid = np.linspace(0.0, 1.0, 100)
    np.savez(tmp_path / "basis.npz", **fixed_basis("cosine", 6, grid).to_arrays())
    common = {"data": {"kind": "node_files", "paths": [str(p) for p in paths]}, "federation": {"num_clients": 3},
              "algorithm": {"rounds": 3}, "privacy": {"enabled": False}}
    provided = run_fdp_admm(parse_scenario({**common, "basis": {"kind": "provided", "path": str(tmp_path / "basis.npz")}}),
                            with_reference=False)
    fixed = run_fdp_admm(parse_scenario({**common, "basis": {"kind": "fixed", "family": "cosine", "n_components": 6}}),
                         with_reference=False)
    np.testing.assert_array_equal(provided.state.global_w, fixed.state.global_w)  # same basis, same run
    np.savez(tmp_path / "other.npz", **fixed_basis("cosine", 6, np.linspace(0.0, 1.0, 50)).to_arrays())
    with pytest.raises(ValueError, match="grid differs from the scenario's grid"):
        run_fdp_admm(parse_scenario({**common, "basis": {"kind": "provided", "path": str(tmp_path / "other.npz")}}),
                     with_reference=False)


def test_parquet_round_trip_or_clear_error(tmp_path):
    data = _data()
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        with pytest.raises(NodeDataError, match="Parquet needs pandas and pyarrow"):
            write_node_file(tmp_path / "n.parquet", data)
        return
    back = read_node_file(write_node_file(tmp_path / "n.parquet", data))
    np.testing.assert_array_equal(back.curves, data.curves)
    np.testing.assert_array_equal(back.grid, data.grid)


def test_node_files_on_a_non_equispaced_grid(tmp_path):
    """data.grid names an irregular grid: node files on it run (and the setup check compares against it);
    a file on the equispaced grid of the same size is refused."""
    from fdp_flower.engines.inprocess import run_fdp_admm
    from fdp_flower.functional import design

    rng = np.random.default_rng(2)
    grid = np.r_[0.0, np.sort(rng.uniform(0, 1, 28)), 1.0]
    data = design.simulate_slice(1, 0, 300, tau=0.5, grid=grid)
    paths = write_partitions(partition(data, 3), tmp_path / "irregular", "npz")
    common = {"data": {"kind": "node_files", "grid": grid.tolist(), "paths": [str(p) for p in paths]},
              "federation": {"num_clients": 3}, "basis": {"kind": "fixed", "n_components": 5},
              "algorithm": {"rounds": 3}, "privacy": {"enabled": False}}
    result = run_fdp_admm(parse_scenario(common), with_reference=False)
    np.testing.assert_array_equal(result.basis.grid, grid)
    even = write_partitions(partition(design.simulate_slice(1, 0, 300, tau=0.5, grid=np.linspace(0, 1, 30)), 3),
                            tmp_path / "even", "npz")
    with pytest.raises(NodeDataError, match="grid differs from the scenario's grid"):
        run_fdp_admm(parse_scenario({**common, "data": {**common["data"], "paths": [str(p) for p in even]}}),
                     with_reference=False)
    with pytest.raises(ScenarioError, match="data.grid.*strictly increasing"):
        parse_scenario({"data": {"kind": "node_files", "grid": [0.0, 0.5, 0.4]}})
