"""Tabular data sources: where a tabular run's rows and labels come from, one class per kind.

Like the functional sources (:mod:`fdp_flower.functional.sources`), every tabular ``data.kind`` of a
scenario schema has one class here that knows everything about it: its public partition sizes m_i,
how to load one client's rows (what that client's site holds: unclipped features and responses;
the site clips them), the held-out test rows and the pooled training rows a public constraint
matrix may be estimated on.  A class is built from the scenario's ``data`` section, the run seed
(its data stream, :data:`fdp_flower.privacy.mechanisms.DATA_STREAM`), the number of clients and the
model's row clip c1 (used by the sources whose rows depend on it); :func:`tabular_source` picks the
class of a section.  Both tabular families read their rows here: DP-ADMM / DP-AccADMM
(:mod:`fdp_flower.algorithms.gradient_admm.plan`) and the peer-to-peer family
(:func:`fdp_flower.algorithms.p2p.plan.build_problem`: rows -> clip -> problem).  Adding a kind means
one class here and one schema model; nothing else switches on the kind.

Every source is deterministic: every engine and every Flower node loads the same partitions.
Every preprocessing constant is public (:mod:`fdp_flower.data.tabular`), so a client's rows depend on
its own records only; the split itself is drawn from the run seed.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import ClassVar

import numpy as np

from fdp_flower.privacy.mechanisms import DATA_STREAM


def data_rng(seed: int) -> np.random.Generator:
    """The generator of a run's data stream (subsamples and splits; never the noise)."""
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(DATA_STREAM,)))


def split_clients(features: np.ndarray, labels: np.ndarray, num_clients: int, rng: np.random.Generator):
    """A random partition of the rows into ``num_clients`` near-equal parts (explicit generator):
    the rows of ``rng.permutation(n)`` cut by :func:`numpy.array_split`; returns (features, labels) lists."""
    if not 1 <= num_clients <= len(labels):
        raise ValueError(f"num_clients must be in [1, {len(labels)}], got {num_clients}")
    parts = np.array_split(rng.permutation(len(labels)), num_clients)
    return [features[p] for p in parts], [labels[p] for p in parts]


@dataclass(frozen=True)
class PartitionedRows:
    """A source's rows once loaded: every client's (features, responses), the pooled training rows in
    the source's own order (before the split) and the held-out test rows (None: no test set)."""

    features: tuple[np.ndarray, ...]
    responses: tuple[np.ndarray, ...]
    train_features: np.ndarray
    test_features: np.ndarray | None = None
    test_responses: np.ndarray | None = None
    #: the coefficients the rows were drawn from (synthetic sources), else None
    truth: np.ndarray | None = None


@dataclass(frozen=True)
class _TabularSource:
    """What every tabular source shares: its section, the run seed, the number of clients and the model's
    row clip c1 (``clip_c1``: the room an intercept column leaves, the synthetic design), and the methods a
    run needs (all derived from :meth:`_load`, computed once per object)."""

    config: object  # the scenario's ``data`` section
    seed: int
    num_clients: int
    clip_c1: float = 1.0

    kind: ClassVar[str] = ""
    #: whether every node reads its own file (a real deployment); the tabular sources here are public
    #: data sets or files the scenario names, which the server can read as well
    node_local: ClassVar[bool] = False
    #: leading columns of every row outside the penalty (a public intercept column)
    unpenalized: ClassVar[int] = 0

    def _load(self) -> PartitionedRows:
        raise NotImplementedError

    @cached_property
    def split(self) -> PartitionedRows:
        """Every client's rows, the pooled training rows and the test rows (loaded once)."""
        return self._load()

    def partition_sizes(self) -> np.ndarray:
        """m_i of every client (public: the sensitivities use them)."""
        return np.array([len(y) for y in self.split.responses])

    def load(self, partition: int) -> tuple[np.ndarray, np.ndarray]:
        """Client ``partition``'s (features (m_i, K), responses (m_i,)), unclipped: what its site holds."""
        if not 0 <= partition < self.num_clients:
            raise ValueError(f"partition {partition} outside [0, {self.num_clients})")
        return self.split.features[partition], self.split.responses[partition]

    def test_rows(self) -> tuple[np.ndarray, np.ndarray] | None:
        """The held-out (features, labels), or None."""
        s = self.split
        return None if s.test_features is None else (s.test_features, s.test_responses)

    def penalty_rows(self) -> np.ndarray:
        """The pooled training rows without the unpenalized columns, in the source's order: what a
        public constraint matrix (e.g. a graph-guided one) is estimated on."""
        return self.split.train_features


@dataclass(frozen=True)
class AdultA9ASource(_TabularSource):
    """UCI Adult encoded like LIBSVM a9a (:func:`fdp_flower.data.tabular.adult_a9a`: 123 one-hot columns,
    rows divided by the public sqrt(14) when ``normalise`` is set, labels in {-1, +1}); the official
    training file, optionally subsampled to ``train_subsample`` rows, split at random over the clients;
    the official test file held out.  The data stream draws the subsample, then the split."""

    kind: ClassVar[str] = "adult_a9a"

    def _load(self) -> PartitionedRows:
        from fdp_flower.data.tabular import adult_a9a

        c, rng = self.config, data_rng(self.seed)
        adult = adult_a9a(c.path, c1=1e300, normalise=c.normalise)  # clipping to c1 is the client's
        x, y = adult.x_train, adult.y_train
        if c.train_subsample is not None and c.train_subsample < len(y):
            keep = np.sort(rng.choice(len(y), size=c.train_subsample, replace=False))
            x, y = x[keep], y[keep]
        features, labels = split_clients(x, y, self.num_clients, rng)
        return PartitionedRows(tuple(features), tuple(labels), x, adult.x_test, adult.y_test)


@dataclass(frozen=True)
class BreastCancerSource(_TabularSource):
    """scikit-learn's breast-cancer data (:func:`fdp_flower.data.tabular.load_breast_cancer_binary`: 569 x 30,
    standardized with the pooled statistics, labels in {-1, +1}); a random ``test_fraction`` held out,
    the rest split at random over the clients (the data stream draws the test rows, then the split)."""

    kind: ClassVar[str] = "breast_cancer"

    def _load(self) -> PartitionedRows:
        from fdp_flower.data.tabular import load_breast_cancer_binary, train_test_split_binary

        rng = data_rng(self.seed)
        x, y = load_breast_cancer_binary()
        held = train_test_split_binary(x, y, test_fraction=self.config.test_fraction, rng=rng)
        features, labels = split_clients(held.x_train, held.y_train, self.num_clients, rng)
        return PartitionedRows(tuple(features), tuple(labels), held.x_train, held.x_test, held.y_test)


@dataclass(frozen=True)
class ArraysSource(_TabularSource):
    """Rows a caller held in memory, one ``.npz`` per client (``data.paths[i]``, checked against
    ``data.digests[i]``; :func:`fdp_flower.data.tabular.read_arrays_file`), already split.  With
    ``intercept`` every row is (c0, a) of :func:`fdp_flower.core.clipping.intercept_design` (c0 =
    ``intercept_share`` c1, the features clipped to the room left) and the intercept column is outside
    the penalty; ``clip_c1`` is the model's c1 (the source needs it for the intercept's room only).  The
    peer-to-peer schema has no ``data.intercept``: its intercept is a ``model`` setting that
    :func:`fdp_flower.algorithms.p2p.problems.network_problem` applies to the rows read here."""

    kind: ClassVar[str] = "arrays"

    @property
    def _intercept(self) -> bool:
        return bool(getattr(self.config, "intercept", False))

    @property
    def unpenalized(self) -> int:  # type: ignore[override]
        return int(self._intercept)

    def _parts(self) -> list[tuple[np.ndarray, np.ndarray]]:
        from fdp_flower.data.tabular import read_arrays_file

        c = self.config
        if len(c.paths) != self.num_clients:
            raise ValueError(f"data.paths names {len(c.paths)} files for {self.num_clients} clients")
        parts = [read_arrays_file(p, None if c.digests is None else c.digests[i]) for i, p in enumerate(c.paths)]
        _check_features(parts, "data.paths: the clients' files")
        return parts

    def _load(self) -> PartitionedRows:
        from fdp_flower.core.clipping import clip_rows, intercept_design
        from fdp_flower.data.tabular import read_arrays_file

        c = self.config
        parts = self._parts()
        test_path = getattr(c, "test_path", None)
        test = read_arrays_file(test_path) if test_path else None
        labels = tuple(y for _, y in parts)
        if not self._intercept:
            features = tuple(a for a, _ in parts)
            return PartitionedRows(features, labels, np.vstack(features), *(test or (None, None)))
        room = self.clip_c1 * float(np.sqrt(1.0 - c.intercept_share ** 2))
        scores = np.vstack([clip_rows(a, room)[0] for a, _ in parts])  # the penalized columns
        features = tuple(intercept_design(a, self.clip_c1, c.intercept_share)[0] for a, _ in parts)
        test_x = None if test is None else intercept_design(test[0], self.clip_c1, c.intercept_share)[0]
        return PartitionedRows(features, labels, scores, test_x, None if test is None else test[1])

    def load(self, partition: int) -> tuple[np.ndarray, np.ndarray]:
        """Client ``partition``'s rows: its file alone (with the intercept column if set)."""
        from fdp_flower.core.clipping import intercept_design
        from fdp_flower.data.tabular import read_arrays_file

        if "split" in self.__dict__:  # loaded already (a simulation): no second read
            return super().load(partition)
        c = self.config
        if not 0 <= partition < len(c.paths):
            raise ValueError(f"partition {partition} outside [0, {len(c.paths)})")
        a, y = read_arrays_file(c.paths[partition], None if c.digests is None else c.digests[partition])
        if self._intercept:
            a = intercept_design(a, self.clip_c1, c.intercept_share)[0]
        return a, y


@dataclass(frozen=True)
class InMemoryRowsSource(ArraysSource):
    """Rows a caller holds in memory (:func:`fdp_flower.fit_gradient`, :func:`fdp_flower.fit_p2p`): ``parts``, one
    (features, response) per client, checked against the scenario's ``data.digest``
    (:func:`fdp_flower.data.tabular.rows_digest`); never written anywhere."""

    parts: tuple | None = None

    kind: ClassVar[str] = "in_memory"

    def __post_init__(self):
        from fdp_flower.data.tabular import rows_digest

        if self.parts is None:
            raise ValueError("data kind 'in_memory' names rows that exist only in the process that fit them "
                             "(fdp_flower.fit_gradient / fit_p2p); run it there, or write one file per client "
                             "(data kind 'arrays', the data_dir argument)")
        if len(self.parts) != self.num_clients:
            raise ValueError(f"in-memory rows for {len(self.parts)} clients, the scenario has {self.num_clients}")
        if rows_digest(self.parts) != self.config.digest:
            raise ValueError("the in-memory rows do not match the scenario's data.digest")

    def _parts(self) -> list[tuple[np.ndarray, np.ndarray]]:
        parts = [(np.asarray(a, dtype=float), np.asarray(y, dtype=float)) for a, y in self.parts]
        _check_features(parts, "the clients' in-memory rows")
        return parts

    def load(self, partition: int) -> tuple[np.ndarray, np.ndarray]:
        return _TabularSource.load(self, partition)


def _check_features(parts, what: str) -> None:
    """One line when the clients' rows are not (m_i, K) matrices with one K and m_i responses."""
    for i, (a, y) in enumerate(parts):
        if np.ndim(a) != 2 or np.shape(y) != (np.shape(a)[0],):
            raise ValueError(f"{what}: client {i} holds features of shape {np.shape(a)} and responses of shape "
                             f"{np.shape(y)}; expected (m, K) and (m,)")
    dims = {np.shape(a)[1] for a, _ in parts}
    if len(dims) != 1:
        raise ValueError(f"{what} have different numbers of features {sorted(dims)}")


def fixed_size_split(features: np.ndarray, labels: np.ndarray, num_clients: int, samples_per_client: int,
                     test_samples: int, rng: np.random.Generator):
    """``num_clients`` parts of exactly ``samples_per_client`` rows and ``test_samples`` test rows, drawn from
    one permutation of the rows (Ding et al. 2019, Sec. V); a one-line ``ValueError`` when the data are too
    small.  Returns (features list, labels list, test features, test labels)."""
    n = len(labels)
    need = num_clients * samples_per_client + test_samples
    if need > n:
        raise ValueError(f"{num_clients} nodes x {samples_per_client} samples + {test_samples} test rows "
                         f"need {need} rows; the data has {n}")
    perm = rng.permutation(n)
    train = perm[: num_clients * samples_per_client].reshape(num_clients, samples_per_client)
    test = perm[num_clients * samples_per_client: need]
    return [features[r] for r in train], [labels[r] for r in train], features[test], labels[test]


@dataclass(frozen=True)
class AdultNodesSource(_TabularSource):
    """UCI Adult as Ding et al. (2019), Sec. V use it: the rows without a missing value of both files,
    pooled, encoded like a9a with an intercept column and divided by the public sqrt(15) (the most ones a
    row can hold) (:func:`fdp_flower.data.tabular.adult_a9a` with ``intercept`` and ``complete_rows``), then
    ``samples_per_node`` rows per client and ``test_samples`` test rows from one permutation
    (:func:`fixed_size_split`).  The same loader as :class:`AdultA9ASource`, another sample of it."""

    kind: ClassVar[str] = "adult_nodes"

    def _load(self) -> PartitionedRows:
        c = self.config
        x, y = adult_nodes_rows(c.path)
        features, labels, test_x, test_y = fixed_size_split(x, y, self.num_clients, c.samples_per_node,
                                                            c.test_samples, data_rng(self.seed))
        return PartitionedRows(tuple(features), tuple(labels), np.vstack(features), test_x, test_y)


@dataclass(frozen=True)
class BreastCancerNodesSource(_TabularSource):
    """scikit-learn's breast-cancer data as the peer-to-peer experiments use it: standardized (pooled
    statistics, a non-private convenience), an intercept column appended, every row divided by the public
    sqrt(31), then ``samples_per_node`` rows per client and ``test_samples`` test rows (:func:`fixed_size_split`)."""

    kind: ClassVar[str] = "breast_cancer_nodes"

    def _load(self) -> PartitionedRows:
        c = self.config
        x, y = breast_cancer_nodes_rows()
        features, labels, test_x, test_y = fixed_size_split(x, y, self.num_clients, c.samples_per_node,
                                                            c.test_samples, data_rng(self.seed))
        return PartitionedRows(tuple(features), tuple(labels), np.vstack(features), test_x, test_y)


def adult_nodes_rows(path: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Ding et al.'s (2019) Adult rows before the split: the rows without a missing value of both files
    (training file first), a9a-encoded with an intercept column last, divided by the public sqrt(15); labels
    in {-1, +1}, +1 for income > 50K (:func:`fdp_flower.data.tabular.adult_a9a`, unclipped)."""
    from fdp_flower.data.tabular import adult_a9a

    adult = adult_a9a(path, c1=1e300, normalise=True, intercept=True, complete_rows=True)
    return np.vstack([adult.x_train, adult.x_test]), np.concatenate([adult.y_train, adult.y_test])


def breast_cancer_nodes_rows() -> tuple[np.ndarray, np.ndarray]:
    """The peer-to-peer breast-cancer rows before the split: 569 x 30 standardized (pooled statistics), an
    intercept column last, every row divided by the public sqrt(31); labels in {-1, +1}."""
    from fdp_flower.data.tabular import load_breast_cancer_binary

    x, y = load_breast_cancer_binary(standardize=True, intercept=True)
    return x / np.sqrt(x.shape[1]), y


#: Gauthier et al.'s (2023) synthetic problems (the ``problem`` of a ``synthetic_regression`` section)
SYNTHETIC_PROBLEMS = ("elastic_net", "lad", "ridge")


def synthetic_regression_rows(problem: str, *, num_nodes: int, samples_per_node: int, dim: int, noise: float,
                              heterogeneity: float, c1: float, rng: np.random.Generator):
    """Gauthier et al.'s (2023) synthetic regression, Sec. 5: node i observes y_i = A_i x_i + e_i.

    Parameters
    ----------
    problem : {"elastic_net", "lad", "ridge"}
        elastic net: a sparse x0 (half its coordinates zero); LAD: Laplace noise; ridge: Gaussian noise.
    num_nodes, samples_per_node, dim : int
        N, m_i and K.
    noise : float
        Scale of e (Gaussian sd, or Laplace scale for LAD).
    heterogeneity : float
        h: node i observes x_i = x0 + h u_i, u_i ~ N(0, I_K) (0: every node observes x0).
    c1 : float
        The model's row clip: the responses are drawn from the rows clipped to ||a|| <= c1 (the papers'
        design lies inside the clip set), so the rows a node fits after its own clip
        (:func:`fdp_flower.core.clipping.clip_rows`, the same operation on the same rows) are that design.
    rng : np.random.Generator
        Draws x0, then per node A_i ~ N(0, I_K / K) row-wise, e_i and u_i, in this order.

    Returns
    -------
    (features, responses, x0)
        Lists of every node's unclipped rows (m_i, K) and responses (m_i,), and x0 (K,).
    """
    from fdp_flower.core.clipping import clip_rows

    if problem not in SYNTHETIC_PROBLEMS:
        raise ValueError(f"unknown synthetic problem {problem!r}; choose one of {', '.join(SYNTHETIC_PROBLEMS)}")
    x0 = rng.standard_normal(dim)
    if problem == "elastic_net":  # a sparse truth, as in Boyd et al.'s lasso examples
        x0[rng.permutation(dim)[: dim // 2]] = 0.0
    features, responses = [], []
    for _ in range(num_nodes):
        a = rng.standard_normal((samples_per_node, dim)) / np.sqrt(dim)
        design = clip_rows(a, c1)[0]
        e = (rng.laplace(0.0, noise, samples_per_node) if problem == "lad"
             else noise * rng.standard_normal(samples_per_node))
        x_i = x0 + heterogeneity * rng.standard_normal(dim) if heterogeneity > 0 else x0
        features.append(a)
        responses.append(design @ x_i + e)
    return features, responses, x0


@dataclass(frozen=True)
class SyntheticRegressionSource(_TabularSource):
    """Gauthier et al.'s (2023) synthetic regression (:func:`synthetic_regression_rows`) drawn from the data
    stream of the seed: ``samples_per_node`` rows of dimension ``dim`` per client, responses from the rows
    clipped to the model's c1 (``clip_c1``); the truth x0 in ``split.truth``; no test rows."""

    kind: ClassVar[str] = "synthetic_regression"

    def _load(self) -> PartitionedRows:
        c = self.config
        features, responses, x0 = synthetic_regression_rows(
            c.problem, num_nodes=self.num_clients, samples_per_node=c.samples_per_node, dim=c.dim, noise=c.noise,
            heterogeneity=c.heterogeneity, c1=self.clip_c1, rng=data_rng(self.seed))
        return PartitionedRows(tuple(features), tuple(responses), np.vstack(features), truth=x0)


@dataclass(frozen=True)
class TabularNodeFilesSource(_TabularSource):
    """Node-local files (``data.kind: node_files``, a deployment): every node reads its own file, the one its
    node config names (:func:`fdp_flower.data.tabular.read_node_rows`, by the client worker).  No process
    holds every node's rows, so nothing here loads them: a run that needs them (an in-process engine, a
    server estimating A on pooled rows) is refused in one line.  The Flower servers (DP-ADMM's, the relay)
    learn each node's m_i and d in a setup phase instead (:mod:`fdp_flower.algorithms.node_reports`)."""

    kind: ClassVar[str] = "node_files"
    node_local: ClassVar[bool] = True

    def _load(self) -> PartitionedRows:
        raise ValueError("data kind node_files: each node reads its own file (its node config's data-path); "
                         "no process holds every node's rows")


#: tabular data-source kind -> its class (the schema's ``data.kind``; ``adult_nodes``,
#: ``breast_cancer_nodes`` and ``synthetic_regression`` are the peer-to-peer family's kinds)
SOURCES: dict[str, type[_TabularSource]] = {cls.kind: cls for cls in (
    AdultA9ASource, BreastCancerSource, ArraysSource, InMemoryRowsSource, AdultNodesSource, BreastCancerNodesSource,
    SyntheticRegressionSource, TabularNodeFilesSource)}


def tabular_source(config, *, seed: int, num_clients: int, clip_c1: float = 1.0, rows=None) -> _TabularSource:
    """The source of a scenario's tabular ``data`` section (``clip_c1``: the model's c1, used by sources
    whose rows depend on it; ``rows``: the clients' (features, response) of an ``in_memory`` section)."""
    try:
        cls = SOURCES[config.kind]
    except KeyError:
        raise ValueError(f"tabular data source {config.kind!r} is not supported; known: {', '.join(SOURCES)}") from None
    if cls is InMemoryRowsSource:
        return InMemoryRowsSource(config, seed, num_clients, clip_c1, None if rows is None else tuple(rows))
    return cls(config, seed, num_clients, clip_c1)


__all__ = ["SOURCES", "SYNTHETIC_PROBLEMS", "AdultA9ASource", "AdultNodesSource", "ArraysSource",
           "BreastCancerNodesSource", "BreastCancerSource", "InMemoryRowsSource", "PartitionedRows",
           "SyntheticRegressionSource", "TabularNodeFilesSource", "adult_nodes_rows", "breast_cancer_nodes_rows",
           "data_rng", "fixed_size_split", "split_clients", "synthetic_regression_rows", "tabular_source"]
