"""Data sources: where a run's curves and responses come from.

Every data-source kind of the scenario schema (:mod:`fdp_flower.config.functional`) has one
class here that knows everything about it: its grid, its public partition sizes m_i, how to
load one client's partition and, for simulated designs, the true coefficient function.
Adding a kind means one class here and one schema model; nothing else switches on the kind.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from fdp_flower.functional import design
from fdp_flower.functional.design import CurveData


def _no_node_file(kind: str, path: str | None) -> None:
    """Only node-local data read a node's own file (under its site's policy): a source of another kind
    asked to read one refuses (a run's data kind must never read a site's file outside its policy)."""
    if path is not None:
        raise ValueError(f"data kind {kind!r} reads no node file; a node's own data file is read only as data "
                         "kind 'node_files', under its site's policy")


@dataclass(frozen=True)
class PaperSimulationSource:
    """The simulated design of Zhou & Xiang (2022), Section 5 (:mod:`fdp_flower.functional.design`).

    Each client's slice is generated alone from the run seed, so no party ever holds every curve.
    """

    config: object  # fdp_flower.config.functional.PaperSimulation
    seed: int
    num_clients: int
    tau: float

    kind: ClassVar[str] = "paper_simulation"
    #: whether every node reads its own file (a real deployment), so a node is exactly one client
    node_local: ClassVar[bool] = False

    def grid(self) -> np.ndarray:
        return design.default_grid(self.config.grid_points)

    def partition_sizes(self) -> np.ndarray:
        """m_i of every client (public: the sensitivities use them)."""
        return np.diff(design.partition_bounds(self.config.n_samples, self.num_clients))

    def load(self, partition: int, path: str | None = None) -> CurveData:
        _no_node_file(self.kind, path)
        return design.simulate_partition(self.seed, self.config.n_samples, self.num_clients, partition,
                                         tau=self.tau, grid=self.grid(), design=self.config.design)

    def true_beta(self, grid: np.ndarray) -> np.ndarray | None:
        return design.design_beta(self.config.design, grid)

    def tau_shift(self, tau: float) -> float | None:
        """y(tau) = y(0.5) - shift: the curves do not depend on tau and every design's errors are
        symmetric, F^{-1}(0.5) = 0 (lets the batched engine share one data set across quantile levels)."""
        return design.get_design(self.config.design).error_quantile(tau)


@dataclass(frozen=True)
class NodeFilesSource:
    """Node-local files (deployment): each node reads its own file (node config ``data-path``);
    simulation engines read ``data.paths[i]`` for client i (:mod:`fdp_flower.functional.node_files`)."""

    config: object  # fdp_flower.config.functional.NodeFiles
    seed: int
    num_clients: int
    tau: float

    kind: ClassVar[str] = "node_files"
    node_local: ClassVar[bool] = True

    def grid(self) -> np.ndarray:
        c = self.config
        if c.grid is not None:
            return np.asarray(c.grid, dtype=float)
        return np.linspace(c.grid_start, c.grid_stop, c.grid_points)

    def partition_sizes(self) -> np.ndarray:
        if self.config.paths is None:
            raise ValueError("data kind 'node_files' without data.paths has no partition sizes here: set "
                             "data.paths (one file per client) to run it in process, or run it as a deployment "
                             "where each node names its file in its node config (data-path)")
        return np.array([self.load(i).n_samples for i in range(self.num_clients)])

    def path_of(self, partition: int, path: str | None = None) -> str:
        """The node's own file (``path``, from its node config), else ``data.paths[partition]``."""
        if path is not None:
            return path
        if self.config.paths is None:
            raise ValueError("node-local data: set data-path in the node config (or data.paths to simulate)")
        return self.config.paths[partition]

    def load(self, partition: int, path: str | None = None) -> CurveData:
        from fdp_flower.functional.node_files import read_node_file

        return read_node_file(self.path_of(partition, path), expected_grid=self.grid(),
                              response_offset=self.config.response_offset,
                              response_scale=self.config.response_scale)

    def true_beta(self, grid: np.ndarray) -> np.ndarray | None:
        return None

    def tau_shift(self, tau: float) -> float | None:
        """None: the responses in the files do not depend on the quantile level."""
        return None


@dataclass(frozen=True)
class ClientArraysSource:
    """Curves a caller held in memory, one ``.npz`` per client (``data.paths[i]``; written by
    :func:`fdp_flower.fit`).  The grid is read from the files (any strictly increasing grid,
    the same in every file); each file is checked against its SHA-256 in ``data.digests``."""

    config: object  # fdp_flower.config.functional.ClientArrays
    seed: int
    num_clients: int
    tau: float

    kind: ClassVar[str] = "client_arrays"
    node_local: ClassVar[bool] = False

    def _digest(self, partition: int) -> str | None:
        return None if self.config.digests is None else self.config.digests[partition]

    def grid(self) -> np.ndarray:
        from fdp_flower.functional.node_files import npz_grid_and_size

        return npz_grid_and_size(self.config.paths[0])[0]

    def partition_sizes(self) -> np.ndarray:
        from fdp_flower.functional.node_files import check_grid, npz_grid_and_size

        grid = self.grid()
        sizes = []
        for path in self.config.paths:
            own, size = npz_grid_and_size(path)
            check_grid(own, grid, path)
            sizes.append(size)
        return np.array(sizes)

    def load(self, partition: int, path: str | None = None) -> CurveData:
        from fdp_flower.functional.node_files import read_node_file

        _no_node_file(self.kind, path)
        if not 0 <= partition < len(self.config.paths):
            raise ValueError(f"partition {partition} outside [0, {len(self.config.paths)})")
        return read_node_file(self.config.paths[partition], expected_grid=self.grid(),
                              response_offset=self.config.response_offset,
                              response_scale=self.config.response_scale, digest=self._digest(partition))

    def true_beta(self, grid: np.ndarray) -> np.ndarray | None:
        return None

    def tau_shift(self, tau: float) -> float | None:
        return None


def curves_digest(parts) -> str:
    """``sha256:<hex>`` of the clients' grids, curves and responses, in client order."""
    import hashlib

    h = hashlib.sha256()
    for part in parts:
        for values in (part.grid, part.curves, part.response):
            values = np.ascontiguousarray(values, dtype=float)
            h.update(f"{values.shape}".encode())
            h.update(values.tobytes())
    return "sha256:" + h.hexdigest()


@dataclass(frozen=True)
class InMemorySource:
    """Curves a caller holds in memory (:func:`fdp_flower.fit`): ``parts``, one
    :class:`~fdp_flower.functional.design.CurveData` per client on one grid, handed to the in-process
    engine with the scenario (never written anywhere); checked against the scenario's digest."""

    config: object  # fdp_flower.config.functional.InMemoryCurves
    seed: int
    num_clients: int
    tau: float
    parts: tuple | None = None

    kind: ClassVar[str] = "in_memory"
    node_local: ClassVar[bool] = False

    def __post_init__(self):
        if self.parts is None:
            raise ValueError("data kind 'in_memory' names curves that exist only in the process that fit them "
                             "(fdp_flower.fit); run it there, or write node files (data kind 'client_arrays')")
        if len(self.parts) != self.num_clients:
            raise ValueError(f"in-memory data for {len(self.parts)} clients, the scenario has {self.num_clients}")
        if curves_digest(self.parts) != self.config.digest:
            raise ValueError("the in-memory curves do not match the scenario's data.digest")

    def grid(self) -> np.ndarray:
        return np.asarray(self.parts[0].grid, dtype=float)

    def partition_sizes(self) -> np.ndarray:
        return np.array([part.n_samples for part in self.parts])

    def load(self, partition: int, path: str | None = None) -> CurveData:
        _no_node_file(self.kind, path)
        if not 0 <= partition < len(self.parts):
            raise ValueError(f"partition {partition} outside [0, {len(self.parts)})")
        part = self.parts[partition]
        from fdp_flower.functional.node_files import standardized_response

        offset, scale = self.config.response_offset, self.config.response_scale
        return part if (offset, scale) == (0, 1) else CurveData(
            part.curves, standardized_response(part.response, offset, scale), part.grid)

    def true_beta(self, grid: np.ndarray) -> np.ndarray | None:
        return None

    def tau_shift(self, tau: float) -> float | None:
        return None


#: data-source kind -> its class (the schema's ``data.kind``)
SOURCES = {cls.kind: cls for cls in (PaperSimulationSource, NodeFilesSource, ClientArraysSource, InMemorySource)}


def data_source(config, *, seed: int, num_clients: int, tau: float = 0.5, parts=None):
    """The data source of a scenario's ``data`` section (``parts``: the curves of an in-memory source)."""
    try:
        cls = SOURCES[config.kind]
    except KeyError:
        raise ValueError(f"data source {config.kind!r} is not supported; known: {', '.join(SOURCES)}") from None
    if cls is InMemorySource:
        return cls(config, seed=seed, num_clients=num_clients, tau=tau, parts=None if parts is None else tuple(parts))
    return cls(config, seed=seed, num_clients=num_clients, tau=tau)
