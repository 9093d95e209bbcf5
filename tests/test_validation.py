"""Bad input gives one-line errors that name the problem (issue 8): values, grids, dimensions,
scenario bounds, federation size, topology, unknown algorithm or field, and the CLI's exit code."""
from __future__ import annotations

import numpy as np
import pytest

from fdp_flower import cli
from fdp_flower.algorithms.fdp_admm.config import load_scenario, parse_scenario
from fdp_flower.algorithms.p2p.config import parse_p2p_scenario
from fdp_flower.algorithms.p2p.plan import scenario_graph
from fdp_flower.algorithms.p2p.topology import DisconnectedGraphError
from fdp_flower.algorithms.fdp_admm.plan import site_plan
from fdp_flower.algorithms.fdp_admm.site import SiteData, answer, site_features
from fdp_flower.algorithms.protocol import SiteRequest
from fdp_flower.privacy.mechanisms import run_noise
from fdp_flower.config.base import ScenarioError
from fdp_flower.functional import design
from fdp_flower.functional.fpca import fixed_basis
from fdp_flower.functional.validation import (
    DataValidationError,
    check_curve_data,
    check_curves,
    check_features,
    check_partition,
    check_same_grid,
)

GRID = np.linspace(0, 1, 11)


def one_line(exc_info, *needles):
    msg = str(exc_info.value)
    assert "\n" not in msg and msg, msg
    for needle in needles:
        assert needle in msg, msg
    return msg


def test_nan_or_infinite_values():
    curves = np.ones((4, 11))
    curves[2, 5] = np.nan
    with pytest.raises(DataValidationError) as e:
        check_curves(curves, GRID, "client 3 curves")
    one_line(e, "client 3 curves", "NaN or infinite", "curve 2, grid point 5")
    with pytest.raises(DataValidationError) as e:
        check_curve_data(np.ones((3, 11)), [1.0, np.inf, 0.0], GRID)
    one_line(e, "response", "index 1")
    with pytest.raises(ValueError) as e:  # the basis refuses them too
        fixed_basis("cosine", 3, GRID).scores(curves)
    one_line(e, "NaN")


def test_ragged_and_mismatched_grids():
    ragged = [np.ones(11), np.ones(10), np.ones(11)]
    with pytest.raises(DataValidationError) as e:
        check_curves(ragged, GRID)
    one_line(e, "ragged", "row 1 has 10 grid values, expected 11")
    with pytest.raises(DataValidationError) as e:
        check_same_grid([GRID, GRID, np.linspace(0, 1.1, 11)])
    one_line(e, "client 2 grid differs from client 0's")
    with pytest.raises(DataValidationError) as e:
        check_same_grid([GRID, np.linspace(0, 1, 12)])
    one_line(e, "12 points", "11")
    with pytest.raises(DataValidationError) as e:
        check_curves(np.ones((2, 11)), GRID[::-1])
    one_line(e, "strictly increasing")
    with pytest.raises(ValueError) as e:
        fixed_basis("cosine", 3, GRID).scores(np.ones((2, 12)))
    one_line(e, "12 grid points", "11")


def test_wrong_dimensions():
    with pytest.raises(DataValidationError) as e:
        check_curves(np.ones(11), GRID)
    one_line(e, "2-d")
    with pytest.raises(DataValidationError) as e:
        check_curve_data(np.ones((3, 11)), np.ones(4), GRID)
    one_line(e, "4 values for 3 curves")
    with pytest.raises(DataValidationError) as e:
        check_features(np.ones((5, 3)), dim=4)
    one_line(e, "3 columns, expected K = 4")
    sc = parse_scenario({"data": {"n_samples": 40, "grid_points": 11}, "federation": {"num_clients": 2},
                         "basis": {"kind": "fixed", "n_components": 3}})
    basis = fixed_basis("cosine", 3, GRID)
    data = design.simulate_partition(0, 40, 2, 0, tau=0.5, grid=GRID)
    features, clipped = site_features(sc, basis, data)
    site = SiteData.stack([0], [features], [data.response], [clipped])
    (refused,) = answer([SiteRequest(0, 1, {"point": np.zeros(4)})], site, site_plan(sc, basis),
                        run_noise(sc.seed))  # a server message with the wrong K: refused, nothing released
    assert isinstance(refused, ValueError) and "\n" not in str(refused)
    assert "point must have shape (3,)" in str(refused)


@pytest.mark.parametrize("section, needle", [
    ({"model": {"loss": {"tau": 1.0}}}, "model.loss.tau"),
    ({"model": {"loss": {"tau": 0.0}}}, "model.loss.tau"),
    ({"privacy": {"eps": 0.0}}, "privacy.eps"),
    ({"privacy": {"eps": -1.0}}, "privacy.eps"),
    ({"privacy": {"delta": 0.0}}, "privacy.delta"),
    ({"privacy": {"delta": 1.0}}, "privacy.delta"),
    ({"data": {"n_samples": 5}, "federation": {"num_clients": 10}}, "exceeds data.n_samples"),
    ({"algorithm": {"kind": "sgd"}}, "algorithm"),
    ({"privacy": {"epsiln": 1.0}}, "privacy.epsiln: Extra inputs are not permitted"),
    ({"faults": {"quorum": 0.0}}, "faults.quorum"),
    ({"faults": {"failure_rate": 1.5}}, "faults.failure_rate"),
])
def test_scenario_bounds(section, needle):
    with pytest.raises(ScenarioError) as e:
        parse_scenario(section, "s.yaml")
    one_line(e, "s.yaml: ", needle)


def test_more_clients_than_samples_and_disconnected_topology():
    with pytest.raises(DataValidationError) as e:
        check_partition(3, 5)
    one_line(e, "5 clients but only 3 samples")
    with pytest.raises(ValueError) as e:
        design.partition_bounds(3, 5)
    one_line(e, "cannot split 3 samples over 5 clients")
    sc = parse_p2p_scenario({"federation": {"num_clients": 4}, "topology": {"kind": "custom", "edges": [[0, 1], [2, 3]]}})
    with pytest.raises(DisconnectedGraphError) as e:
        scenario_graph(sc)
    one_line(e, "disconnected (2 components)")


def test_yaml_file_errors_name_file_and_field_and_cli_exits_2(tmp_path, capsys):
    path = tmp_path / "bad.yaml"
    path.write_text("algorithm:\n  kind: fdp_admm\n  rounds: 3\n  rhoo: 0.1\n")
    with pytest.raises(ScenarioError) as e:
        load_scenario(path)
    one_line(e, "bad.yaml", "algorithm.rhoo")
    path.write_text("privacy: {eps: 0.5\n")
    with pytest.raises(ScenarioError) as e:
        load_scenario(path)
    one_line(e, "bad.yaml", "invalid YAML")
    assert cli.main(["run", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1
