"""Functional bases: curves -> K scores.

Every basis kind of the scenario schema (:mod:`fdp_flower.config.functional`) has one builder
here, with the two facts the engines need about it: whether it needs every client's curves in
one place (``pooled``: simulation studies only) and whether a federated phase builds it
(``federated_dp``: :mod:`fdp_flower.functional.federated_fpca`).  Adding a kind means one
builder here and one schema model.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from fdp_flower.functional.fpca import FunctionalBasis, fit_pooled_fpca, fixed_basis


def _fixed(config, grid: np.ndarray, curves: np.ndarray | None) -> FunctionalBasis:
    return fixed_basis(config.family, config.n_components, grid)


def _provided(config, grid: np.ndarray, curves: np.ndarray | None) -> FunctionalBasis:
    with np.load(config.path, allow_pickle=False) as npz:
        basis = FunctionalBasis.from_arrays({k: npz[k] for k in npz.files})
    if basis.grid.shape != grid.shape or not np.allclose(basis.grid, grid, rtol=1e-9, atol=0):
        raise ValueError(f"provided basis {config.path}: its grid differs from the scenario's grid")
    return basis


def _pooled(config, grid: np.ndarray, curves: np.ndarray | None) -> FunctionalBasis:
    if curves is None:
        raise ValueError("the pooled basis needs all curves: it is for simulation studies only")
    return fit_pooled_fpca(curves, grid, n_components=config.n_components,
                           explained_variance=config.explained_variance)


def _federated(config, grid: np.ndarray, curves: np.ndarray | None) -> FunctionalBasis:
    raise ValueError("basis 'federated_dp' is built by its federated phase "
                     "(fdp_flower.functional.federated_fpca), not from pooled curves")


@dataclass(frozen=True)
class BasisKind:
    """What the engines need to know about one basis kind."""

    build: Callable[[object, np.ndarray, np.ndarray | None], FunctionalBasis]
    needs_pooled_curves: bool = False
    federated_phase: bool = False


#: basis kind -> how it is built (the schema's ``basis.kind``)
BASES: dict[str, BasisKind] = {
    "fixed": BasisKind(_fixed),
    "provided": BasisKind(_provided),
    "pooled": BasisKind(_pooled, needs_pooled_curves=True),
    "federated_dp": BasisKind(_federated, federated_phase=True),
}


def basis_kind(config) -> BasisKind:
    try:
        return BASES[config.kind]
    except KeyError:
        raise ValueError(f"basis {config.kind!r} is not supported; known: {', '.join(BASES)}") from None


def build_basis(config, grid: np.ndarray, curves: np.ndarray | None = None) -> FunctionalBasis:
    """The basis of a scenario's ``basis`` section on ``grid`` (``curves``: every curve, pooled only)."""
    return basis_kind(config).build(config, grid, curves)
