"""Input checks for functional data with one-line errors that name the problem.

Every check raises :class:`DataValidationError` (a ``ValueError``) whose message is
a single line saying what is wrong and where (``name``), e.g.
``client 3 curves: row 7 has 99 grid values, expected 100``.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np


class DataValidationError(ValueError):
    """Bad input data; the message is one line."""


def _finite_array(value, name: str) -> np.ndarray:
    try:
        arr = np.asarray(value, dtype=float)
    except (TypeError, ValueError, OverflowError):
        raise DataValidationError(f"{name}: not a numeric array") from None
    return arr


def check_grid(grid, name: str = "grid") -> np.ndarray:
    """A 1-d, finite, strictly increasing grid of at least 3 points."""
    g = _finite_array(grid, name)
    if g.ndim != 1:
        raise DataValidationError(f"{name}: must be 1-d, got shape {g.shape}")
    if g.size < 3:
        raise DataValidationError(f"{name}: needs at least 3 points, got {g.size}")
    if not np.all(np.isfinite(g)):
        raise DataValidationError(f"{name}: contains NaN or infinite values")
    if np.any(np.diff(g) <= 0):
        raise DataValidationError(f"{name}: must be strictly increasing")
    return g


def check_curves(curves, grid, name: str = "curves") -> np.ndarray:
    """Curves (n, G) on ``grid``: rectangular (not ragged), finite, one value per grid point."""
    grid = check_grid(grid, f"{name} grid")
    if isinstance(curves, (list, tuple)):
        lengths = []
        for row in curves:
            try:
                lengths.append(len(row))
            except TypeError:
                raise DataValidationError(f"{name}: rows must be sequences of numbers") from None
        if len(set(lengths)) > 1:
            bad = next(i for i, n in enumerate(lengths) if n != grid.size)
            raise DataValidationError(f"{name}: ragged rows (lengths {sorted(set(lengths))}); row {bad} has "
                                      f"{lengths[bad]} grid values, expected {grid.size}")
    arr = _finite_array(curves, name)
    if arr.ndim != 2:
        raise DataValidationError(f"{name}: must be 2-d (n_curves, n_grid), got shape {arr.shape}")
    if arr.shape[0] < 1:
        raise DataValidationError(f"{name}: no curves")
    if arr.shape[1] != grid.size:
        raise DataValidationError(f"{name}: {arr.shape[1]} grid values per curve, but the grid has {grid.size}")
    bad = ~np.isfinite(arr)
    if bad.any():
        row, col = np.argwhere(bad)[0]
        raise DataValidationError(f"{name}: NaN or infinite value at curve {row}, grid point {col} "
                                  f"({int(bad.sum())} in all)")
    return arr


def check_response(response, n: int, name: str = "response") -> np.ndarray:
    """A finite response vector of length ``n``."""
    y = _finite_array(response, name)
    if y.ndim != 1:
        raise DataValidationError(f"{name}: must be 1-d, got shape {y.shape}")
    if y.size != n:
        raise DataValidationError(f"{name}: {y.size} values for {n} curves")
    if not np.all(np.isfinite(y)):
        raise DataValidationError(f"{name}: NaN or infinite value at index {int(np.flatnonzero(~np.isfinite(y))[0])}")
    return y


def check_curve_data(curves, response, grid, name: str = "data") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(curves, response, grid) checked together; returns float arrays."""
    g = check_grid(grid, f"{name} grid")
    x = check_curves(curves, g, f"{name} curves")
    y = check_response(response, x.shape[0], f"{name} response")
    return x, y, g


def check_same_grid(grids: Sequence, names: Sequence[str] | None = None, *, rtol: float = 1e-12) -> np.ndarray:
    """All clients observe their curves on one grid (a federation needs a common grid)."""
    if not grids:
        raise DataValidationError("no grids given")
    names = list(names) if names is not None else [f"client {i}" for i in range(len(grids))]
    first = check_grid(grids[0], f"{names[0]} grid")
    for g, nm in zip(grids[1:], names[1:]):
        g = check_grid(g, f"{nm} grid")
        if g.shape != first.shape:
            raise DataValidationError(f"{nm} grid has {g.size} points but {names[0]}'s has {first.size}")
        if not np.allclose(g, first, rtol=rtol, atol=0):
            i = int(np.argmax(np.abs(g - first)))
            raise DataValidationError(f"{nm} grid differs from {names[0]}'s at point {i} ({g[i]!r} vs {first[i]!r})")
    return first


def check_features(features, dim: int | None = None, name: str = "features") -> np.ndarray:
    """A finite (m, K) feature matrix (K = ``dim`` if given)."""
    a = _finite_array(features, name)
    if a.ndim != 2:
        raise DataValidationError(f"{name}: must be 2-d (n_samples, K), got shape {a.shape}")
    if dim is not None and a.shape[1] != dim:
        raise DataValidationError(f"{name}: {a.shape[1]} columns, expected K = {dim}")
    if not np.all(np.isfinite(a)):
        raise DataValidationError(f"{name}: contains NaN or infinite values")
    return a


def check_partition(n_samples: int, num_clients: int) -> None:
    """Every client needs at least one sample."""
    if num_clients < 1:
        raise DataValidationError(f"num_clients must be >= 1, got {num_clients}")
    if n_samples < num_clients:
        raise DataValidationError(f"{num_clients} clients but only {n_samples} samples: every client needs one")


# ---------------------------------------------------------------- scikit-fda objects
#: grid points on which an ``skfda.FDataBasis`` is evaluated when no grid is given
FDATABASIS_GRID_POINTS = 100


def is_fdatagrid(obj) -> bool:
    """An ``skfda.FDataGrid`` (checked by its attributes: scikit-fda need not be imported)."""
    return hasattr(obj, "data_matrix") and hasattr(obj, "grid_points") and hasattr(obj, "dim_domain")


def is_fdatabasis(obj) -> bool:
    """An ``skfda.FDataBasis`` (a basis expansion: coefficients on a basis over a domain)."""
    return (hasattr(obj, "coefficients") and hasattr(obj, "basis") and hasattr(obj, "domain_range")
            and hasattr(obj, "dim_domain") and not hasattr(obj, "data_matrix"))


def fdata_values(curves, grid: np.ndarray | None, name: str) -> tuple[np.ndarray, np.ndarray]:
    """(values (n, G), grid (G,)) of an ``skfda.FDataGrid`` or ``skfda.FDataBasis`` of scalar curves on an
    interval, evaluated on ``grid`` (an FDataGrid by its own interpolation where its grid differs; an
    FDataBasis exactly).  ``grid`` None: the FDataGrid's own grid, or :data:`FDATABASIS_GRID_POINTS`
    equispaced points over the FDataBasis's domain."""
    if curves.dim_domain != 1 or curves.dim_codomain != 1:
        raise DataValidationError(f"{name}: scalar curves on an interval are needed (domain dimension "
                                  f"{curves.dim_domain}, codomain dimension {curves.dim_codomain})")
    lo, hi = (float(v) for v in curves.domain_range[0])
    if grid is None:
        if is_fdatagrid(curves):
            own = np.asarray(curves.grid_points[0], dtype=float)
            return np.asarray(curves.data_matrix[..., 0], dtype=float), own
        grid = np.linspace(lo, hi, FDATABASIS_GRID_POINTS)
    grid = np.asarray(grid, dtype=float)
    if is_fdatagrid(curves):
        own = np.asarray(curves.grid_points[0], dtype=float)
        if own.shape == grid.shape and np.allclose(own, grid, rtol=1e-9, atol=0):
            return np.asarray(curves.data_matrix[..., 0], dtype=float), grid
    if grid[0] < lo - 1e-12 or grid[-1] > hi + 1e-12:
        raise DataValidationError(f"{name}: the curves' domain [{lo:g}, {hi:g}] does not cover the grid "
                                  f"[{grid[0]:g}, {grid[-1]:g}]")
    values = np.asarray(curves(np.clip(grid, lo, hi))[..., 0], dtype=float)
    return values, grid
