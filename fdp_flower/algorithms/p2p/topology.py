"""Communication graphs of the peer-to-peer mode (docs/algorithms.md, sections 3 and 4).

A :class:`Graph` is an immutable, connected, undirected simple graph on nodes
``0..n-1``.  Random families take an explicit ``np.random.Generator``; nothing
here touches the global numpy RNG.  Every builder refuses a disconnected graph
with :class:`DisconnectedGraphError` (the decentralized algorithms cannot reach
consensus on one), and random families are resampled until connected.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

# SeedSequence spawn key of the graph stream (fdp_flower.privacy.mechanisms uses 1 for
# noise and 2 for data), so a random graph never shares a stream with either.
GRAPH_STREAM = 3

# Ding et al. (2019) (PR-ADMM), Fig. 1 shows "a network with five agents"; the figure is
# not in the text we have, so this is a reconstruction: a 5-cycle with one chord
# (6 edges, degrees 3, 2, 3, 2, 2), connected and not complete.
PAPER004_EDGES = ((0, 1), (1, 2), (2, 3), (3, 4), (4, 0), (0, 2))


class DisconnectedGraphError(ValueError):
    """The requested graph is not connected."""


def graph_rng(seed: int) -> np.random.Generator:
    """The generator of a run's random graph, derived from the run seed only."""
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(GRAPH_STREAM,)))


def _normalise_edges(num_nodes: int, edges) -> tuple[tuple[int, int], ...]:
    out = set()
    for e in edges:
        if len(e) != 2:
            raise ValueError(f"an edge is a pair of nodes, got {e!r}")
        i, j = int(e[0]), int(e[1])
        if not (0 <= i < num_nodes and 0 <= j < num_nodes):
            raise ValueError(f"edge ({i}, {j}) names a node outside 0..{num_nodes - 1}")
        if i == j:
            raise ValueError(f"self-loop ({i}, {i}) is not allowed")
        out.add((min(i, j), max(i, j)))
    return tuple(sorted(out))


def _components(num_nodes: int, edges) -> int:
    parent = list(range(num_nodes))

    def find(a):
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    for i, j in edges:
        ri, rj = find(i), find(j)
        if ri != rj:
            parent[ri] = rj
    return len({find(a) for a in range(num_nodes)})


def is_connected(num_nodes: int, edges) -> bool:
    """True when the undirected graph is connected (union-find)."""
    return num_nodes >= 1 and _components(num_nodes, edges) == 1


@dataclass(frozen=True)
class Graph:
    """A connected undirected simple graph.

    Parameters
    ----------
    num_nodes : int
        n >= 2 nodes labelled 0..n-1.
    edges : tuple of (i, j)
        Undirected edges, stored once with i < j, sorted.
    name : str
        The family it came from (default: "custom").
    """

    num_nodes: int
    edges: tuple[tuple[int, int], ...]
    name: str = "custom"

    def __post_init__(self):
        if self.num_nodes < 2:
            raise ValueError(f"a network needs at least 2 nodes, got num_nodes={self.num_nodes}")
        object.__setattr__(self, "edges", _normalise_edges(self.num_nodes, self.edges))
        n_comp = _components(self.num_nodes, self.edges)
        if n_comp != 1:
            raise DisconnectedGraphError(
                f"the {self.name} graph on {self.num_nodes} nodes is disconnected ({n_comp} components); "
                "decentralized learning needs a connected graph")

    @cached_property
    def neighbours(self) -> tuple[tuple[int, ...], ...]:
        """N_i for every node, sorted ascending (the order neighbour sums use)."""
        nb = [[] for _ in range(self.num_nodes)]
        for i, j in self.edges:
            nb[i].append(j)
            nb[j].append(i)
        return tuple(tuple(sorted(x)) for x in nb)

    @cached_property
    def degrees(self) -> np.ndarray:
        """|N_i| for every node."""
        return np.array([len(x) for x in self.neighbours], dtype=int)

    @property
    def average_degree(self) -> float:
        return 2.0 * len(self.edges) / self.num_nodes

    @cached_property
    def adjacency(self) -> np.ndarray:
        a = np.zeros((self.num_nodes, self.num_nodes))
        for i, j in self.edges:
            a[i, j] = a[j, i] = 1.0
        return a

    @cached_property
    def laplacian(self) -> np.ndarray:
        """L = D - A (the signed Laplacian L_- of Ding et al. (2019) up to a factor)."""
        return np.diag(self.degrees.astype(float)) - self.adjacency

    @cached_property
    def metropolis_weights(self) -> np.ndarray:
        """W_ij = 1 / (1 + max(d_i, d_j)) on edges, W_ii = 1 - sum_j W_ij (doubly stochastic)."""
        d = self.degrees
        w = np.zeros((self.num_nodes, self.num_nodes))
        for i, j in self.edges:
            w[i, j] = w[j, i] = 1.0 / (1.0 + max(d[i], d[j]))
        w[np.diag_indices(self.num_nodes)] = 1.0 - w.sum(axis=1)
        return w

    @property
    def algebraic_connectivity(self) -> float:
        """Second-smallest Laplacian eigenvalue (> 0 for a connected graph)."""
        return float(np.sort(np.linalg.eigvalsh(self.laplacian))[1])

    def to_dict(self) -> dict:
        """The graph as plain data, for results files."""
        return {"name": self.name, "num_nodes": self.num_nodes, "edges": [list(e) for e in self.edges],
                "degrees": self.degrees.tolist(), "average_degree": self.average_degree}


# ---------------------------------------------------------------- families
def ring(num_nodes: int) -> Graph:
    """The cycle 0-1-...-(n-1)-0 (a path for n = 2)."""
    return Graph(num_nodes, tuple((i, (i + 1) % num_nodes) for i in range(num_nodes)), "ring")


def complete(num_nodes: int) -> Graph:
    return Graph(num_nodes, tuple((i, j) for i in range(num_nodes) for j in range(i + 1, num_nodes)), "complete")


def star(num_nodes: int, center: int = 0) -> Graph:
    if not 0 <= center < num_nodes:
        raise ValueError(f"center must be in 0..{num_nodes - 1}, got {center}")
    return Graph(num_nodes, tuple((center, j) for j in range(num_nodes) if j != center), "star")


def paper004_five() -> Graph:
    """The 5-agent network of Ding et al. (2019) (reconstruction, see ``PAPER004_EDGES``)."""
    return Graph(5, PAPER004_EDGES, "paper004_five")


def from_edges(num_nodes: int, edges) -> Graph:
    """A user-given edge list; a disconnected one raises :class:`DisconnectedGraphError`."""
    return Graph(num_nodes, tuple(tuple(e) for e in edges), "custom")


def _resample(builder, rng: np.random.Generator, max_tries: int, what: str) -> Graph:
    for _ in range(max_tries):
        n, edges = builder(rng)
        if edges is not None and is_connected(n, edges):
            return Graph(n, edges, what)
    raise DisconnectedGraphError(
        f"no connected {what} graph after {max_tries} draws; raise the degree / probability or max_tries")


def random_regular(num_nodes: int, degree: int, rng: np.random.Generator, *, max_tries: int = 1000) -> Graph:
    """A uniform-ish random k-regular simple graph (pairing model with rejection), resampled until connected."""
    if not 1 <= degree < num_nodes:
        raise ValueError(f"degree must be in 1..{num_nodes - 1}, got {degree}")
    if num_nodes * degree % 2:
        raise ValueError(f"num_nodes * degree must be even, got {num_nodes} * {degree}")

    def draw(g):
        stubs = np.repeat(np.arange(num_nodes), degree)
        g.shuffle(stubs)
        pairs = stubs.reshape(-1, 2)
        if np.any(pairs[:, 0] == pairs[:, 1]):
            return num_nodes, None
        edges = {(min(a, b), max(a, b)) for a, b in pairs.tolist()}
        if len(edges) != len(pairs):  # a multi-edge
            return num_nodes, None
        return num_nodes, tuple(sorted(edges))

    return _resample(draw, rng, max_tries * 50, "random_regular")


def erdos_renyi(num_nodes: int, p: float, rng: np.random.Generator, *, max_tries: int = 1000) -> Graph:
    """G(n, p), resampled until connected."""
    if not 0 < p <= 1:
        raise ValueError(f"edge probability p must be in (0, 1], got {p}")
    iu = np.triu_indices(num_nodes, 1)

    def draw(g):
        keep = g.random(iu[0].size) < p
        return num_nodes, tuple(zip(iu[0][keep].tolist(), iu[1][keep].tolist()))

    return _resample(draw, rng, max_tries, "erdos_renyi")


def small_world(num_nodes: int, k: int, beta: float, rng: np.random.Generator, *, max_tries: int = 1000) -> Graph:
    """Watts-Strogatz: ring lattice with k neighbours (k/2 each side), each edge rewired with probability beta."""
    if k % 2 or not 2 <= k < num_nodes:
        raise ValueError(f"k must be even and in 2..{num_nodes - 1}, got {k}")
    if not 0 <= beta <= 1:
        raise ValueError(f"rewiring probability beta must be in [0, 1], got {beta}")

    def draw(g):
        adj = [set() for _ in range(num_nodes)]
        for i in range(num_nodes):
            for s in range(1, k // 2 + 1):
                j = (i + s) % num_nodes
                adj[i].add(j)
                adj[j].add(i)
        for s in range(1, k // 2 + 1):
            for i in range(num_nodes):
                j = (i + s) % num_nodes
                if j in adj[i] and g.random() < beta:
                    choices = [c for c in range(num_nodes) if c != i and c not in adj[i]]
                    if choices:
                        new = choices[int(g.integers(len(choices)))]
                        adj[i].discard(j)
                        adj[j].discard(i)
                        adj[i].add(new)
                        adj[new].add(i)
        edges = tuple(sorted({(min(i, j), max(i, j)) for i in range(num_nodes) for j in adj[i]}))
        return num_nodes, edges

    return _resample(draw, rng, max_tries, "small_world")
