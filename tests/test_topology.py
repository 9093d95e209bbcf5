"""Graphs of the peer-to-peer mode: structure, connectivity, reproducibility, clear errors."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fdp_flower.algorithms.p2p import topology as t


def _check_graph(g: t.Graph):
    a = g.adjacency
    assert np.array_equal(a, a.T) and np.all(np.diag(a) == 0)
    assert np.array_equal(a.sum(1).astype(int), g.degrees)
    for i, nb in enumerate(g.neighbours):
        assert i not in nb and all(i in g.neighbours[j] for j in nb)
    assert g.algebraic_connectivity > 1e-9  # connected
    w = g.metropolis_weights
    np.testing.assert_allclose(w.sum(0), 1.0, atol=1e-12)
    np.testing.assert_allclose(w, w.T, atol=0)
    assert np.all(w >= 0)


def test_deterministic_families():
    r, c, s = t.ring(7), t.complete(6), t.star(5, center=2)
    for g in (r, c, s, t.paper004_five()):
        _check_graph(g)
    assert list(r.degrees) == [2] * 7 and len(r.edges) == 7
    assert list(c.degrees) == [5] * 6 and len(c.edges) == 15
    assert s.degrees[2] == 4 and sorted(s.degrees)[:4] == [1, 1, 1, 1]
    p = t.paper004_five()
    assert p.num_nodes == 5 and len(p.edges) == 6 and p.to_dict()["degrees"] == [3, 2, 3, 2, 2]


def test_random_families_are_connected_and_reproducible():
    g1 = t.erdos_renyi(20, 4 / 19, t.graph_rng(3))
    g2 = t.erdos_renyi(20, 4 / 19, t.graph_rng(3))
    g3 = t.erdos_renyi(20, 4 / 19, t.graph_rng(4))
    assert g1.edges == g2.edges and g1.edges != g3.edges
    rr = t.random_regular(20, 4, t.graph_rng(0))
    sw = t.small_world(20, 4, 0.3, t.graph_rng(0))
    for g in (g1, g3, rr, sw):
        _check_graph(g)
    assert set(rr.degrees) == {4}
    assert sw.degrees.sum() == 20 * 4  # rewiring keeps the edge count


def test_disconnected_graphs_are_refused():
    with pytest.raises(t.DisconnectedGraphError, match="disconnected .*2 components"):
        t.from_edges(4, [(0, 1), (2, 3)])
    with pytest.raises(t.DisconnectedGraphError, match="no connected erdos_renyi"):
        t.erdos_renyi(30, 0.01, t.graph_rng(0), max_tries=5)
    with pytest.raises(ValueError, match="self-loop"):
        t.from_edges(3, [(0, 1), (1, 1)])
    with pytest.raises(ValueError, match="outside"):
        t.from_edges(3, [(0, 3)])
    with pytest.raises(ValueError, match="even"):
        t.random_regular(5, 3, t.graph_rng(0))


def test_custom_edges_are_normalised():
    g = t.from_edges(3, [(1, 0), (0, 1), (2, 1)])
    assert g.edges == ((0, 1), (1, 2)) and g.to_dict()["edges"] == [[0, 1], [1, 2]]


@settings(max_examples=25, deadline=None)
@given(n=st.integers(3, 25), p=st.floats(0.3, 1.0), seed=st.integers(0, 2**32 - 1))
def test_erdos_renyi_property(n, p, seed):
    _check_graph(t.erdos_renyi(n, p, t.graph_rng(seed)))
