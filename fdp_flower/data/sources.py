"""Tabular data sources: where a tabular run's rows and labels come from, one class per kind.

Like the functional sources (:mod:`fdp_flower.functional.sources`), every tabular ``data.kind`` of a
scenario schema has one class here that knows everything about it: its public partition sizes m_i,
how to load one client's rows (what that client's site holds: unclipped features and responses;
the site clips them), the held-out test rows and the pooled training rows a public constraint
matrix may be estimated on.  A class is built from the scenario's ``data`` section, the run seed
(its data stream, :data:`fdp_flower.privacy.mechanisms.DATA_STREAM`) and the number of clients;
:func:`tabular_source` picks the class of a section.  Adding a kind means one class here and one
schema model; nothing else switches on the kind.

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


@dataclass(frozen=True)
class _TabularSource:
    """What every tabular source shares: its section, the run seed and the number of clients, and the
    methods a run needs (all derived from :meth:`_load`, computed once per object)."""

    config: object  # the scenario's ``data`` section
    seed: int
    num_clients: int

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
    the penalty; ``clip_c1`` is the model's c1 (the source needs it for the intercept's room only)."""

    clip_c1: float = 1.0

    kind: ClassVar[str] = "arrays"

    @property
    def unpenalized(self) -> int:  # type: ignore[override]
        return int(self.config.intercept)

    def _parts(self) -> list[tuple[np.ndarray, np.ndarray]]:
        from fdp_flower.data.tabular import read_arrays_file

        c = self.config
        if len(c.paths) != self.num_clients:
            raise ValueError(f"data.paths names {len(c.paths)} files for {self.num_clients} clients")
        parts = [read_arrays_file(p, None if c.digests is None else c.digests[i]) for i, p in enumerate(c.paths)]
        dims = {a.shape[1] for a, _ in parts}
        if len(dims) != 1:
            raise ValueError(f"data.paths: the clients' files have different numbers of features {sorted(dims)}")
        return parts

    def _load(self) -> PartitionedRows:
        from fdp_flower.core.clipping import clip_rows, intercept_design
        from fdp_flower.data.tabular import read_arrays_file

        c = self.config
        parts = self._parts()
        test_path = getattr(c, "test_path", None)
        test = read_arrays_file(test_path) if test_path else None
        labels = tuple(y for _, y in parts)
        if not c.intercept:
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
        if c.intercept:
            a = intercept_design(a, self.clip_c1, c.intercept_share)[0]
        return a, y


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
        from fdp_flower.data.tabular import adult_a9a

        c = self.config
        adult = adult_a9a(c.path, c1=1e300, normalise=True, intercept=True, complete_rows=True)
        x, y = np.vstack([adult.x_train, adult.x_test]), np.concatenate([adult.y_train, adult.y_test])
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
        from fdp_flower.data.tabular import load_breast_cancer_binary

        c = self.config
        x, y = load_breast_cancer_binary(standardize=True, intercept=True)
        x = x / np.sqrt(x.shape[1])
        features, labels, test_x, test_y = fixed_size_split(x, y, self.num_clients, c.samples_per_node,
                                                            c.test_samples, data_rng(self.seed))
        return PartitionedRows(tuple(features), tuple(labels), np.vstack(features), test_x, test_y)


#: tabular data-source kind -> its class (the schema's ``data.kind``; ``adult_nodes`` and
#: ``breast_cancer_nodes`` are the peer-to-peer family's kinds)
SOURCES: dict[str, type[_TabularSource]] = {cls.kind: cls for cls in (
    AdultA9ASource, BreastCancerSource, ArraysSource, AdultNodesSource, BreastCancerNodesSource)}


def tabular_source(config, *, seed: int, num_clients: int, clip_c1: float = 1.0) -> _TabularSource:
    """The source of a scenario's tabular ``data`` section (``clip_c1``: the model's c1, used by sources
    that add a public intercept column)."""
    try:
        cls = SOURCES[config.kind]
    except KeyError:
        raise ValueError(f"tabular data source {config.kind!r} is not supported; known: {', '.join(SOURCES)}") from None
    if cls is ArraysSource:
        return ArraysSource(config, seed, num_clients, clip_c1)
    return cls(config, seed, num_clients)


__all__ = ["SOURCES", "AdultA9ASource", "AdultNodesSource", "ArraysSource", "BreastCancerNodesSource",
           "BreastCancerSource", "PartitionedRows", "data_rng", "fixed_size_split", "split_clients", "tabular_source"]
