"""The Python API: fit the project's algorithms on data a caller holds in memory.

- :func:`fit`: FDP-ADMM (F-ADMM with ``eps=None``) for functional quantile regression, on
  numpy arrays, an ``skfda.FDataGrid`` or a pandas DataFrame in the node-file layout;
- :func:`fit_p2p`: the peer-to-peer family (zCDP-NFL, DP-NFL, zCDP-grad-NFL, PR-ADMM,
  decentralized ADMM) on tabular arrays;
- :func:`fit_gradient`: DP-ADMM / DP-AccADMM (gradient perturbation) on tabular arrays;
- :func:`load_results`: the same fitted model from a results directory.

Each fit builds a typed scenario, exactly as a scenario file would, and runs the project's
in-process engine for that family, so the API has no update rule of its own.  The caller's
rows are split over the simulated clients (``client_ids``, or ``n_clients`` seeded even
parts) and written as one ``.npz`` per client into a private temporary directory (or
``data_dir``); the scenario names those files and their SHA-256 digests, never the values.
The reference of every parameter: docs/api.md.
"""
from __future__ import annotations

import math
import sys
import tempfile
import warnings
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from fdp_flower.config.base import ScenarioError
from fdp_flower.functional.validation import DataValidationError, fdata_values, is_fdatabasis
from fdp_flower.outputs.model_files import load_model as load  # noqa: E402  (model.save's counterpart)
from fdp_flower.outputs.models import (
    FunctionalModel,
    PrivacyReport,
    TabularModel,
    gradient_intercept_scale,
    history_frame,
    load_results,
    p2p_intercept_scale,
)
from fdp_flower.privacy.accountant import BudgetExceeded, PrivacyAccountant  # noqa: E402,F401  (re-exported)

__all__ = ["fit", "fit_gradient", "fit_p2p", "load", "load_results", "FunctionalModel", "TabularModel",
           "PrivacyReport", "ResponseUnitsWarning"]

#: fixed (data-independent) bases accepted by name
FIXED_BASES = ("cosine", "bspline", "fourier")
PRIVACY_MODES = ("total", "per_round")
#: the federated DP-FPCA's default pre-basis size (basis.pre_basis_size); a coarser grid gets one function per point
PRE_BASIS_SIZE = 30


class InputError(ValueError):
    """Input the API cannot use; the message is one line naming the argument."""


class ResponseUnitsWarning(UserWarning):
    """A private :func:`fit` by the ADMM rule without its level calibration and with nothing declared about the
    response (no bounds, offset or scale): it runs in the response's own units, and its quantile levels are off for
    a response far from 0 or with a spread far from 1 (the level calibration places the level; the Newton rule
    finds the location and scale privately)."""


# ---------------------------------------------------------------- inputs
def _is_fdatagrid(obj) -> bool:
    return hasattr(obj, "data_matrix") and hasattr(obj, "grid_points") and hasattr(obj, "dim_domain")


def _is_dataframe(obj) -> bool:
    pd = sys.modules.get("pandas")
    return pd is not None and isinstance(obj, pd.DataFrame)


def _grid_column(label) -> float | None:
    """The grid point of a DataFrame column: ``t=<value>`` (the node-file layout) or a number."""
    text = str(label)
    if text.startswith("t="):
        text = text[2:]
    try:
        return float(text)
    except ValueError:
        return None


def _finite(name: str, values: np.ndarray) -> np.ndarray:
    bad = ~np.isfinite(values)
    if bad.any():
        first = int(np.argwhere(bad)[0][0])
        raise InputError(f"{name} contains {int(bad.sum())} NaN or infinite value(s) (first in row {first})")
    return values


def _as_float(name: str, values) -> np.ndarray:
    if np.iscomplexobj(values):
        raise InputError(f"{name}: complex values are not accepted (give the real curves)")
    try:
        return np.asarray(values, dtype=float)
    except (TypeError, ValueError):
        raise InputError(f"{name}: expected numbers, got values of type {type(values).__name__}") from None


def curve_inputs(curves, y=None, *, grid=None, response: str = "response", client_column: str | None = None):
    """(curves (n, G), y (n,), grid (G,), client labels (n,) or None) from any accepted input.

    ``curves``: an (n, G) array (``grid`` optional: default G equispaced points on [0, 1]), an
    ``skfda.FDataGrid`` of n scalar curves on an interval (its grid), or a pandas DataFrame with
    one column per grid point (named ``t=<point>`` as in node files, or numeric), the response
    column ``response`` (unless ``y`` is given) and optionally a column of client labels.
    """
    labels = None
    if _is_fdatagrid(curves):
        if curves.dim_domain != 1 or curves.dim_codomain != 1:
            raise InputError(f"curves: an FDataGrid of scalar curves on an interval is needed (domain dimension "
                             f"{curves.dim_domain}, codomain dimension {curves.dim_codomain})")
        own = np.asarray(curves.grid_points[0], dtype=float)
        if grid is not None and not (np.shape(grid) == own.shape and np.allclose(grid, own, rtol=1e-9, atol=0)):
            raise InputError("grid: differs from the FDataGrid's grid_points (leave grid out)")
        values, grid = np.asarray(curves.data_matrix[..., 0], dtype=float), own
    elif is_fdatabasis(curves):  # a basis expansion: evaluated exactly on `grid` (default: 100 points)
        if grid is not None:
            grid = _as_float("grid", grid)
            if grid.ndim != 1 or grid.size < 3 or not np.all(np.isfinite(grid)) or np.any(np.diff(grid) <= 0):
                raise InputError("grid: needs >= 3 finite, strictly increasing points")
        try:
            values, grid = fdata_values(curves, grid, "curves")
        except DataValidationError as exc:
            raise InputError(str(exc)) from None
    elif _is_dataframe(curves):
        frame = curves
        columns = list(frame.columns)
        if client_column is not None:
            if client_column not in columns:
                raise InputError(f"client_column: no column {client_column!r} in the DataFrame")
            labels = frame[client_column].to_numpy()
        if y is None:
            if response not in columns:
                raise InputError(f"y: no response column {response!r} in the DataFrame (name it with response=...)")
            y = frame[response].to_numpy()
        skip = {response, client_column}
        grid_cols = [c for c in columns if c not in skip]
        points = [_grid_column(c) for c in grid_cols]
        bad = [c for c, t in zip(grid_cols, points) if t is None]
        if bad:
            raise InputError(f"curves: column {bad[0]!r} is neither the response, the client column nor a grid "
                             "point ('t=<number>' or a number)")
        if grid is not None:
            raise InputError("grid: a DataFrame carries its grid in its column names (leave grid out)")
        values, grid = _as_float("curves", frame[grid_cols].to_numpy()), np.array(points)
        order = np.argsort(grid)
        values, grid = values[:, order], grid[order]
    else:
        values = _as_float("curves", curves)
        if values.ndim != 2:
            raise InputError(f"curves: expected an (n, G) array, an FDataGrid or a DataFrame, got shape {values.shape}")
        grid = np.linspace(0.0, 1.0, values.shape[1]) if grid is None else _as_float("grid", grid)
    grid = np.asarray(grid, dtype=float)
    if grid.ndim != 1 or grid.size < 3 or not np.all(np.isfinite(grid)) or np.any(np.diff(grid) <= 0):
        raise InputError("grid: needs >= 3 finite, strictly increasing points")
    if values.shape[1] != grid.size:
        raise InputError(f"curves have {values.shape[1]} points per curve but the grid has {grid.size}")
    if values.shape[0] < 1:
        raise InputError("curves: no rows")
    if y is None:
        raise InputError("y: the responses are missing")
    y = _as_float("y", y)
    if y.shape != (values.shape[0],):
        raise InputError(f"y: expected {values.shape[0]} responses (one per curve), got shape {np.shape(y)}")
    return _finite("curves", values), _finite("y", y), grid, labels


def client_partition(n: int, *, n_clients: int | None, client_ids, seed: int,
                     what: str = "client_ids") -> tuple[list[np.ndarray], list]:
    """Row indices of every client and the client labels.

    ``client_ids`` (n labels): one client per distinct label, in sorted label order.  Else
    ``n_clients`` (default 10) near-equal parts of a seeded permutation of the rows (the
    split stream of ``seed``, separate from data and noise).
    """
    from fdp_flower.functional.design import partition_bounds
    from fdp_flower.privacy.mechanisms import SPLIT_STREAM

    if client_ids is not None:
        if n_clients is not None:
            raise InputError("give n_clients or client_ids, not both")
        raw = client_ids.to_numpy() if hasattr(client_ids, "to_numpy") else client_ids
        # a list keeps each label's type (np.asarray would turn [0, "a"] into the strings "0", "a")
        ids = raw if isinstance(raw, np.ndarray) else np.asarray(list(raw), dtype=object)
        if ids.shape != (n,):
            raise InputError(f"{what}: expected {n} labels (one per row), got shape {ids.shape}")
        ids = _homogeneous_labels(ids, what)
        labels, inverse = np.unique(ids, return_inverse=True)
        if labels.size < 1:
            raise InputError(f"{what}: no clients")
        return [np.flatnonzero(inverse == c) for c in range(labels.size)], labels.tolist()
    count = 10 if n_clients is None else n_clients
    if not isinstance(count, (int, np.integer)) or count < 1:
        raise InputError(f"n_clients: expected a positive integer, got {n_clients!r}")
    if count > n:
        raise InputError(f"n_clients ({count}) exceeds the number of rows ({n}): every client needs one")
    order = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(SPLIT_STREAM,))).permutation(n)
    bounds = partition_bounds(n, int(count))
    return [np.sort(order[a:b]) for a, b in zip(bounds[:-1], bounds[1:])], list(range(int(count)))


def _homogeneous_labels(ids: np.ndarray, what: str) -> np.ndarray:
    """Client labels of one kind (numbers or strings) and none missing: a label None or NaN would form a
    client of its own (or fail deep in numpy), and ``0`` next to ``"0"`` would merge two clients."""
    values = [v.item() if isinstance(v, np.generic) else v for v in ids.tolist()]
    missing = [i for i, v in enumerate(values) if v is None or (isinstance(v, float) and math.isnan(v))
               or type(v).__name__ in ("NAType", "NaTType")]
    if missing:
        shown = ", ".join(map(str, missing[:3])) + (", ..." if len(missing) > 3 else "")
        raise InputError(f"{what}: {len(missing)} rows have no client (None or NaN; rows {shown}): give every row "
                         "a client or drop those rows")
    kinds = {"str" if isinstance(v, str) else "number" if isinstance(v, (int, float)) and not isinstance(v, bool)
             else type(v).__name__ for v in values}
    if len(kinds) > 1:
        raise InputError(f"{what}: labels of mixed types ({', '.join(sorted(kinds))}); use one type, e.g. all str")
    return np.asarray(values, dtype=object) if kinds == {"str"} else np.asarray(values)


@contextmanager
def _client_directory(data_dir, needed: bool = True):
    """A directory for the per-client files: ``data_dir`` (created, kept) or a private temporary one
    (mode 0700, removed afterwards); None when nothing is written (``needed`` False and no ``data_dir``)."""
    if data_dir is None and not needed:
        yield None
        return
    if data_dir is not None:
        path = Path(data_dir)
        path.mkdir(parents=True, exist_ok=True)
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="fdp-flower-") as tmp:
        yield Path(tmp)


def check_run_arguments(*, eps, seed, out) -> None:
    """One-line errors for the arguments every fit reads before its scenario is built: ``eps`` (a number > 0
    or None), ``seed`` (an integer >= 0) and ``out`` (a writable directory, checked before any work)."""
    if eps is not None and (isinstance(eps, bool) or not isinstance(eps, (int, float, np.integer, np.floating))
                            or not math.isfinite(eps) or eps <= 0):
        raise InputError(f"eps: expected a finite number > 0 (or None for no privacy), got {eps!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise InputError(f"seed: expected an integer >= 0, got {seed!r}")
    if out is not None:
        from fdp_flower.outputs.results import OutputError, check_output_dir

        try:
            check_output_dir(out)
        except OutputError as exc:
            raise InputError(f"out: {exc}") from None


#: ``privacy.trust`` values (:mod:`fdp_flower.privacy.trust_modes`).
TRUST_MODES = ("site", "secure_aggregation", "trusted_aggregator")


def _privacy_section(eps, delta: float, privacy: str, noise_source: str, *, trust: str = "site",
                     tolerated: int = 0) -> dict[str, Any]:
    if trust not in TRUST_MODES:
        raise InputError(f"trust: choose one of {', '.join(TRUST_MODES)}, got {trust!r}")
    if eps is None:
        if trust != "site":
            raise InputError(f"trust: {trust!r} needs privacy (eps=None adds no noise)")
        return {"enabled": False, "delta": delta}
    if trust != "site":
        section = _privacy_section(eps, delta, privacy, noise_source)
        return {**section, "trust": trust, **({"tolerated": tolerated} if tolerated else {})}
    if privacy not in PRIVACY_MODES:
        raise InputError(f"privacy: choose one of {', '.join(PRIVACY_MODES)}, got {privacy!r}")
    if not (isinstance(eps, (int, float)) and math.isfinite(eps) and eps > 0):
        raise InputError(f"eps: expected a finite number > 0 (or None for no privacy), got {eps!r}")
    return {"enabled": True, "mode": privacy, "eps": float(eps), "delta": delta, "noise_source": noise_source}


def _progress_printer(progress, rounds: int, keys: Sequence[str]) -> Callable | None:
    if progress is None or progress is False:
        return None
    if callable(progress):
        return progress

    def show(round_: int, row: dict) -> None:
        if round_ % max(1, rounds // 10) == 0 or round_ == rounds:
            shown = ", ".join(f"{k}={row[k]:.4g}" for k in keys if k in row and row[k] == row[k])
            print(f"[{round_:>{len(str(rounds))}}/{rounds}] {shown}", flush=True)

    return show


def _parse(parse, data: dict, what: str):
    try:
        return parse(data, what)
    except ScenarioError as exc:
        raise InputError(str(exc)) from None


# ---------------------------------------------------------------- FDP-ADMM
def _basis_section(basis, n_components: int, eps, basis_eps: float, basis_delta: float | None, directory: Path,
                   grid: np.ndarray) -> dict[str, Any]:
    from fdp_flower.functional.fpca import FunctionalBasis

    if isinstance(basis, FunctionalBasis):
        if basis.grid.shape != grid.shape or not np.allclose(basis.grid, grid, rtol=1e-9, atol=0):
            raise InputError("basis: the FunctionalBasis's grid differs from the curves' grid")
        path = directory / "basis.npz"
        np.savez(path, **basis.to_arrays())
        return {"kind": "provided", "path": str(path)}
    if basis in FIXED_BASES:
        return {"kind": "fixed", "family": basis, "n_components": n_components}
    if basis == "fpca":
        section = {"kind": "federated_dp", "n_components": n_components, "private": eps is not None}
        if len(grid) < PRE_BASIS_SIZE:  # the pre-basis cannot have more functions than the grid has points
            section["pre_basis_size"] = max(len(grid), n_components)
        if eps is not None:
            section.update(eps=basis_eps, **({"delta": basis_delta} if basis_delta is not None else {}))
            if basis_eps is None:
                raise InputError("basis_eps: give the eps of the federated FPCA summary")
        return section
    if basis == "pooled":
        if eps is not None:
            raise InputError("basis 'pooled' computes an FPCA of every curve without noise, so the released beta_hat "
                             "would not be differentially private: use 'fpca' (federated DP-FPCA), a fixed basis "
                             f"({', '.join(FIXED_BASES)}) or eps=None")
        return {"kind": "pooled", "n_components": n_components}
    raise InputError(f"basis: choose one of {', '.join(FIXED_BASES)}, 'fpca', 'pooled' or give a FunctionalBasis, "
                     f"got {basis!r}")


def response_standardization(y: np.ndarray, *, private: bool, offset: float | None = None,
                             scale: float | None = None, bounds=None) -> tuple[float, float]:
    """(offset, scale) of :func:`fit`'s public response standardization (y - offset) / scale.

    ``bounds`` (lo, hi), declared public: (lo + hi) / 2 and (hi - lo) / 4.  Else without privacy the pooled
    median and IQR / 1.349 (the normal sd; the sd, then 1, when the IQR is 0), with privacy 0 and 1: with
    privacy on nothing here reads y.  A given ``offset`` or ``scale`` is kept.  Equivariance: for
    y' = c + s y (s > 0) the median and IQR (and declared bounds c + s (lo, hi)) move with y, so
    (y' - offset') / scale' = (y - offset) / scale up to rounding.
    """
    if bounds is not None:
        if offset is not None or scale is not None:
            raise InputError("give response_bounds or response_offset / response_scale, not both")
        try:
            lo, hi = (float(b) for b in bounds)
        except (TypeError, ValueError):
            raise InputError(f"response_bounds: expected (lo, hi), got {bounds!r}") from None
        if not (math.isfinite(lo) and math.isfinite(hi) and hi > lo):
            raise InputError(f"response_bounds: expected finite lo < hi, got {bounds!r}")
        return (lo + hi) / 2.0, (hi - lo) / 4.0
    if offset is not None and not (isinstance(offset, (int, float)) and math.isfinite(offset)):
        raise InputError(f"response_offset: expected a finite number, got {offset!r}")
    if scale is not None and not (isinstance(scale, (int, float)) and math.isfinite(scale) and scale > 0):
        raise InputError(f"response_scale: expected a finite number > 0, got {scale!r}")
    if private:
        return (0.0 if offset is None else float(offset)), (1.0 if scale is None else float(scale))
    if offset is None:
        offset = float(np.median(y))
    if scale is None:
        q1, q3 = np.quantile(y, [0.25, 0.75])
        scale = float(q3 - q1) / 1.349 if q3 > q1 else float(np.std(y)) or 1.0
    return float(offset), float(scale)


def _say_predicted_cost(scenario, sizes: list[int], basis, progress) -> None:
    """Before training: print the predicted privacy cost (with ``progress``) and warn (UserWarning, one
    line naming the fix) when it exceeds 1 (:mod:`fdp_flower.algorithms.fdp_admm.predicted`)."""
    from fdp_flower.algorithms.fdp_admm.predicted import predicted_cost_lines, predicted_cost_section
    from fdp_flower.functional.fpca import FunctionalBasis

    eigenvalues = basis.eigenvalues if isinstance(basis, FunctionalBasis) else None
    section = predicted_cost_section(scenario, sizes, eigenvalues=eigenvalues)
    if section is None:
        return
    if progress is not None and progress is not False and not callable(progress):
        print(predicted_cost_lines(section)[0], flush=True)
    if section["warning"]:
        warnings.warn(section["warning"], UserWarning, stacklevel=3)


def _plain_numbers(function):
    """Numpy scalars given as keyword arguments (``eps=np.float32(1.0)``, ``rounds=np.int64(50)``) taken as the
    Python numbers they hold, as every check and the scenario schema expect."""
    import functools

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        return function(*args, **{k: v.item() if isinstance(v, np.generic) else v for k, v in kwargs.items()})
    return wrapper


@_plain_numbers
def fit(curves, y=None, *, grid=None, tau: float = 0.5, eps: float | None = 1.0, delta: float = 1e-5,
        privacy: str = "total", n_clients: int | None = None, client_ids=None, penalty: str = "l1",
        lam: float = 0.05, rounds: int | None = None, basis="cosine", n_components: int = 10,
        clip: float = 3.0, clip_shape: str = "sphere", intercept: bool = True, intercept_share: float = 0.5,
        response_offset: float | None = None, response_scale: float | None = None, response_bounds=None,
        rho: float | None = None, step: float | None = None, estimator: str | None = None,
        basis_eps: float | None = None, basis_delta: float | None = None, seed: int = 0,
        noise_source: str = "seeded", trust: str = "site", tolerated: int = 0,
        response: str = "response", client_column: str | None = None, out=None, data_dir=None,
        reference: bool = True, progress=False, name: str = "fit", accountant=None,
        noncrossing: bool = True, rule: str | None = None, level_calibration: bool | None = None) -> FunctionalModel:
    """Fit a differentially private functional quantile regression by FDP-ADMM.

    Q_tau(y | X) = intercept + int beta(t) X(t) dt, with the rows split over simulated clients
    that each release only Gaussian-noised iterates (Zhou & Xiang 2022; docs/api.md).

    Parameters
    ----------
    curves : (n, G) array, skfda.FDataGrid or pandas.DataFrame
        The curves X_j on a common grid (any strictly increasing grid).  A DataFrame has one
        column per grid point (``t=<point>`` or numeric names), the response column and,
        optionally, a client column.
    y : (n,) array or None
        The responses (None: the DataFrame's ``response`` column).
    grid : (G,) array or None
        The grid of an array input (default: G equispaced points on [0, 1]).
    tau : float or sequence of floats
        Quantile level (default: 0.5).  Several levels (e.g. ``[0.1, 0.5, 0.9]``) are fitted on the same sites
        and basis with one budget: every level's fit gets the Gaussian share mu / sqrt(Q) of (eps, delta), so all
        the releases compose (PLD) to (eps, delta); returns a
        :class:`~fdp_flower.outputs.quantiles.QuantileModels` (one model per level, the combined ledger).
    eps, delta : float
        Privacy budget (defaults: 1.0, 1e-5); ``eps=None`` runs F-ADMM without noise.
    privacy : {"total", "per_round"}
        "total" (default): (eps, delta) is for the whole run of every client, and the noise is
        calibrated by the PLD accountant to meet it; "per_round": each round spends (eps, delta)
        (the paper's rule) and the run composes to more (reported in ``model.privacy``).
    n_clients : int or None
        Split the rows into this many simulated clients (seeded; default 10).
    client_ids : (n,) labels or None
        The client of every row instead (one client per distinct label).
    penalty, lam : str, float
        Penalty P ("l1", "l2", "elastic_net", "scad", "mcp", "none") and its weight (defaults: l1, 0.05);
        the intercept is never penalized.
    rounds : int or None
        L (default: the rule's -- 80 for the ADMM rule in total mode, 30 in per_round mode (the paper's setting),
        30 for the Newton rule, which is the default with eps=None and in total mode).
    basis : str or FunctionalBasis
        "cosine" (default), "bspline", "fourier" (fixed: no privacy cost), "fpca" (federated DP-FPCA
        at (basis_eps, basis_delta), charged to every client's ledger; in total mode inside ``eps``, the
        whole run's budget; basis_eps default: eps / 2 in total mode, eps per round), "pooled" (non-private FPCA;
        only with eps=None) or a FunctionalBasis on the curves' grid.
    n_components : int
        K (default: 10).
    clip, clip_shape : float, str
        c1, the bound on every client's feature rows, and its shape (defaults: 3.0, "sphere").
    intercept, intercept_share : bool, float
        Fit an intercept through the public column c0 = intercept_share * clip (defaults: True, 0.5).
    response_offset, response_scale, response_bounds : float, float, (lo, hi) or None
        Public constants: every client fits (y - response_offset) / response_scale and the model is mapped
        back, so the fitted quantiles of c + s y are c + s times those of y.  ``response_bounds``: bounds the
        sites declare for y (public; nothing is clipped): offset = their centre, scale = a quarter of their
        width.  Defaults (None): with ``eps=None`` the pooled median and IQR / 1.349 of y (exact, nothing is
        private); with privacy on, from ``response_bounds`` if given, else 0 and 1.  With privacy on and no
        bounds the Newton rule finds the location and scale itself (a charged private quartile search in
        asinh(y) for |y| up to 1e7, docs/algorithms.md section 1.3); the ADMM rule then fits in the
        response's units unless its location/scale search (``level_calibration``, the default) runs, which also
        places the fitted quantile's level.
    rho, step, estimator : float or None, float or None, str or None
        The ADMM rule's settings (giving one asks for that rule): the ADMM penalty (default: the schema's 0.1);
        a constant step eta (default: 3.0, and 1.0 with the level calibration, whose ADMM rounds run in
        standardized units; Zhou & Xiang's (2022) Theorem 2 step in
        per_round mode); the released estimator "last", "average" or "tail_average" (default:
        tail_average, the mean of the last half of the global iterates; last in per_round mode).
    seed : int
        Seeds the split, the basis phase and the noise (default: 0).
    noise_source : {"seeded", "os_entropy"}
        "os_entropy" draws the noise from the operating system (not reproducible) (default: "seeded").
    trust : {"site", "secure_aggregation", "trusted_aggregator"}
        Whom the releases are private against (docs/privacy.md, "Trust modes"): "site" (default) each
        client noises its own release; "secure_aggregation" each client adds a 1 / (M - t) share of
        Skellam noise and the server learns only the sum (total mode; eps by the RDP accountant);
        "trusted_aggregator" the clients send noise-free terms and the server adds the noise once (NO
        protection against the server).
    tolerated : int
        secure_aggregation: t, the clients that may drop out of a round or collude with the server with
        the guarantee kept (default: 0); a round with more missing shares is refused.
    out : path or None
        Also write a results directory there (readable by :func:`load_results`). Checked before training as
        ``fdp-flower run --out`` is: a file, an unwritable place or a directory holding another run is an
        ``OutputError`` (nothing is overwritten), and the directory is locked while the fit writes it.
    data_dir : path or None
        Write one file per client there and fit from the files (default: None, the arrays are passed to the
        engine in memory and nothing is written).
    accountant : PrivacyAccountant or None
        The data set's budget across fits (:class:`fdp_flower.PrivacyAccountant`): the fit is refused before it
        trains (:class:`~fdp_flower.privacy.accountant.BudgetExceeded`) if its planned releases would take the
        data set's composed eps past the accountant's total, and its releases are charged to it after.
    rule : {"admm", "newton"} or None
        The server's rule on the released data terms (``algorithm.rule``; docs/algorithms.md, "The Newton
        rule"): "admm" the paper's linearized ADMM; "newton" 30 rounds of Newton steps in the public metric of
        the basis's score variances with released residual densities, dual averaging and (with an intercept) a
        calibrated intercept, after a private location/scale search (inside ``response_bounds`` if given, else
        in asinh(y)).  Default None: the scenario schema's choice, the same as ``fdp-flower run`` -- "newton"
        with eps=None or privacy="total" (trust="site"), any basis (a fixed one, or a FunctionalBasis without
        eigenvalues, gets a second-moments round for its metric), unless ``rho``, ``step`` or ``estimator`` is
        given, else "admm".  Private bands (:func:`fdp_flower.infer`) model the ADMM rule: fit with
        rule="admm" to infer.
    level_calibration : bool or None
        The ADMM rule's location/scale search and level calibration (``algorithm.level_calibration``;
        docs/algorithms.md section 1.4), inside the same total budget: 8 rounds before the ADMM rounds find the
        response's location and scale privately (the ADMM rounds then run in standardized units, default step
        1.0), and 13 after them set the intercept from a private quartile search of the ADMM model's residuals
        and five residual-share rounds, so that about tau of the responses fall below the fitted tau-quantile.
        Default None: on for a private ADMM-rule fit with an intercept, privacy="total" and trust="site"; off
        otherwise (privacy off needs none: the response is standardized exactly and the fit is the exact
        estimator).
    noncrossing : bool
        Several levels only: ``predict`` rearranges the fitted quantiles so that they never cross (Chernozhukov,
        Fernandez-Val & Galichon 2010; post-processing, no privacy cost) (default: True).
    reference : bool
        Solve the exact non-private problem on the pooled rows for the history's objective gap
        (default: True).
    progress : bool or callable
        Print a line every tenth of the rounds, or call ``progress(round, metrics)`` each round.

    Returns
    -------
    FunctionalModel
        ``beta_hat`` (FDataGrid), ``intercept``, ``predict(curves)``, ``privacy`` (eps by PLD, delta,
        neighbouring relation, mode), ``ledger``, ``history``, ``scenario``.
    """
    from fdp_flower.algorithms.fdp_admm.config import parse_scenario
    from fdp_flower.algorithms.fdp_admm.plan import data_source
    from fdp_flower.engines.inprocess import run_fdp_admm
    from fdp_flower.functional.design import CurveData
    from fdp_flower.functional.node_files import file_digest, write_node_file
    from fdp_flower.functional.sources import curves_digest
    from fdp_flower.outputs.results import claimed_output, write_results

    if not isinstance(tau, (int, float, np.integer, np.floating)) or isinstance(tau, bool):
        arguments = dict(locals())
        return _fit_quantiles(arguments)
    check_run_arguments(eps=eps, seed=seed, out=out)
    if trust == "secure_aggregation" and eps is not None and isinstance(basis, str) and basis == "fpca":
        raise InputError("basis: 'fpca' with trust='secure_aggregation' is not supported yet: the federated DP-FPCA "
                         "summaries are Gaussian releases each site sends in the clear, outside the secure sums' "
                         f"Skellam plan; use a fixed basis ({', '.join(FIXED_BASES)}) or a FunctionalBasis, or "
                         "trust='site' to keep the private FPCA basis")
    values, response_values, grid, labels = curve_inputs(curves, y, grid=grid, response=response,
                                                         client_column=client_column)
    if labels is not None and client_ids is not None:
        raise InputError("give client_ids or client_column, not both")
    parts, _names = client_partition(len(response_values), n_clients=n_clients,
                                     client_ids=labels if labels is not None else client_ids, seed=seed,
                                     what=f"client column {client_column!r}" if labels is not None else "client_ids")
    clients = [CurveData(values[rows], response_values[rows], grid) for rows in parts]
    offset, scale = response_standardization(response_values, private=eps is not None, offset=response_offset,
                                             scale=response_scale, bounds=response_bounds)
    from fdp_flower.functional.fpca import FunctionalBasis

    with _client_directory(data_dir, needed=isinstance(basis, FunctionalBasis)) as directory:
        source = None
        if data_dir is None:  # the arrays stay in memory: the scenario names their digest only
            source_section = {"kind": "in_memory", "digest": curves_digest(clients), "response_offset": offset,
                              "response_scale": scale}
        else:  # the caller asked for the per-client files
            paths = [write_node_file(directory / f"client-{i}.npz", part) for i, part in enumerate(clients)]
            source_section = {"kind": "client_arrays", "paths": [str(p) for p in paths],
                              "digests": [file_digest(p) for p in paths], "response_offset": offset,
                              "response_scale": scale}
        # the schedule a call leaves unset comes from the scenario schema (privacy off:
        # config.privacy_off_schedule, the same defaults as `fdp-flower run`)
        algorithm: dict[str, Any] = {"kind": "fdp_admm", **({} if rho is None else {"rho": rho})}
        if rule not in (None, "admm", "newton"):
            raise InputError(f"rule: expected 'admm', 'newton' or None, got {rule!r}")
        if rule is not None:
            algorithm["rule"] = rule
        if rule != "admm" and response_bounds is not None:  # in the units the sites fit: (y - offset) / scale
            algorithm["response_bounds"] = [(float(b) - offset) / scale for b in response_bounds]
        if rounds is not None:
            algorithm["rounds"] = rounds
        if step is not None:
            algorithm["step"] = {"kind": "constant", "eta0": step}
        if estimator is not None:
            algorithm["estimator"] = {"kind": estimator}
        data = {
            "name": name, "seed": seed,
            "data": source_section,
            "federation": {"num_clients": len(parts)},
            "basis": _basis_section(basis, n_components, eps,
                                    basis_eps if basis_eps is not None or eps is None
                                    else (eps / 2 if privacy == "total" else eps), basis_delta, directory, grid),
            "model": {"loss": {"kind": "quantile", "tau": tau}, "penalty": {"kind": penalty, "lam": lam},
                      "clip_c1": clip, "clip_shape": clip_shape, "intercept": intercept,
                      "intercept_share": intercept_share},
            "algorithm": algorithm,
            "privacy": _privacy_section(eps, delta, privacy, noise_source, trust=trust, tolerated=tolerated),
            "output": {"dir": str(out) if out is not None else "results", "checkpoint_every": 0},
        }
        if level_calibration is None:  # on where it applies: a private ADMM-rule fit with an intercept
            from fdp_flower.algorithms.fdp_admm.config import default_rule

            level_calibration = eps is not None and privacy == "total" and trust == "site" and intercept \
                and (rule or default_rule(data)) == "admm"
        if level_calibration:
            algorithm["level_calibration"] = True
        scenario = _parse(parse_scenario, data, "fit()")
        label = f"{name}(tau={float(tau):g}, lam={float(lam):g}, eps={'None' if eps is None else format(eps, 'g')})"
        noise_key = None if noise_source == "os_entropy" else ("seeded", int(seed))
        if accountant is not None:
            accountant.check(label, planned_multipliers(scenario), noise_key)
        if data_dir is None:
            source = data_source(scenario, clients)
        _say_predicted_cost(scenario, [len(rows) for rows in parts], basis, progress)
        if eps is not None and scenario.algorithm.rule == "admm" and not scenario.algorithm.level_calibration \
                and (response_offset, response_scale, response_bounds) == (None, None, None):
            warnings.warn("fit: privacy on, the ADMM rule without its level calibration and nothing declared about the "
                          "response, so the fit runs in its own units as if centred at 0 with spread 1 (quantile "
                          "levels are off for a response far from that); give level_calibration=True (the default), "
                          "basis='fpca' or rule='newton' (the Newton rule finds the location and scale privately), "
                          "or response_bounds=(lo, hi), or response_offset and response_scale",
                          ResponseUnitsWarning, stacklevel=3)
        from fdp_flower.algorithms.fdp_admm.plan import planned_rounds

        printer = _progress_printer(progress, planned_rounds(scenario), ("objective", "objective_gap", "eps_pld"))
        with claimed_output(out):  # a file, /proc/x or another run's directory: refused before training
            result = run_fdp_admm(scenario, progress=printer, with_reference=reference, source=source)
            if out is not None:
                write_results(result, out)
        model = FunctionalModel.from_run(result)
        if accountant is not None:
            accountant.charge(label, model.ledger, noise_key)
        return model


def quantile_levels(tau) -> list[float]:
    """The increasing, distinct levels in (0, 1) of a sequence ``tau`` (one ValueError line otherwise)."""
    try:
        levels = [float(t) for t in tau]
    except (TypeError, ValueError):
        raise InputError(f"tau: expected a number in (0, 1) or a sequence of them, got {tau!r}") from None
    if not levels or not all(math.isfinite(t) and 0 < t < 1 for t in levels):
        raise InputError(f"tau: expected levels in (0, 1), got {tau!r}")
    if len(set(levels)) != len(levels):
        raise InputError(f"tau: the levels must be distinct, got {tau!r}")
    return sorted(levels)


def noise_seed(seed: int, level: int) -> int:
    """The seed of the ``level``-th fit of a several-quantile fit: independent noise for every level (the
    seeded noise is a function of the seed, the client and the round)."""
    return int(np.random.SeedSequence([int(seed), int(level)]).generate_state(1, dtype=np.uint32)[0])


def _fit_quantiles(arguments: dict):
    """``fit`` at several levels (see its ``tau``): one split and one basis, the budget split in equal Gaussian
    shares, independent noise per level; the accountant, if any, checks the whole before the first fit."""
    import inspect

    from fdp_flower.outputs.quantiles import quantile_models
    from fdp_flower.privacy.calibration import analytic_gaussian_epsilon, target_mu

    a = {k: arguments[k] for k in inspect.signature(fit).parameters}
    levels = quantile_levels(a["tau"])
    eps, delta = a["eps"], a["delta"]
    check_run_arguments(eps=eps, seed=a["seed"], out=None)
    if a["out"] is not None:
        raise InputError("out: a several-quantile fit has no single results directory; save each model of the "
                         "result (result[tau].save(path))")
    if eps is not None and a["privacy"] != "total":
        raise InputError("privacy: several quantile levels share one total budget: use privacy='total'")
    values, response_values, grid, labels = curve_inputs(a["curves"], a["y"], grid=a["grid"], response=a["response"],
                                                         client_column=a["client_column"])
    if labels is not None and a["client_ids"] is not None:
        raise InputError("give client_ids or client_column, not both")
    parts, _ = client_partition(len(response_values), n_clients=a["n_clients"],
                                client_ids=labels if labels is not None else a["client_ids"], seed=a["seed"])
    sites = np.empty(len(response_values), dtype=int)
    for i, rows in enumerate(parts):
        sites[rows] = i
    mu_total = None if eps is None else target_mu(float(eps), float(delta))
    eps_level = None if eps is None else analytic_gaussian_epsilon(mu_total / math.sqrt(len(levels)), float(delta))
    accountant = a["accountant"]
    label = f"{a['name']}(tau={levels}, lam={float(a['lam']):g}, eps={'None' if eps is None else format(eps, 'g')})"
    if accountant is not None:  # the whole before the first fit: a refusal spends nothing
        accountant.check(label, None if eps is None else [1.0 / mu_total])
    models = []
    for q, level in enumerate(levels):
        kwargs = {k: v for k, v in a.items() if k not in ("curves", "y", "grid", "tau", "eps", "n_clients",
                                                          "client_ids", "client_column", "response", "seed",
                                                          "basis", "noncrossing")}
        basis = a["basis"] if q == 0 or isinstance(a["basis"], str) and a["basis"] in FIXED_BASES \
            else models[0].basis
        models.append(fit(values, response_values, grid=grid, tau=level, eps=eps_level, n_clients=None,
                          client_ids=sites, seed=noise_seed(a["seed"], q), basis=basis, **kwargs))
    return quantile_models(levels, models, delta=float(delta), mode=None if eps is None else "total",
                           eps_budget=None if eps is None else float(eps), noncrossing=a["noncrossing"])


def planned_multipliers(scenario) -> list[float] | None:
    """The noise multipliers every client of an FDP-ADMM scenario will release with, known before it trains
    (the noise plan's z_l of every round, and the federated DP-FPCA summary's when the basis is private); None
    without privacy."""
    from fdp_flower.algorithms.fdp_admm.plan import NoisePlan

    plan = NoisePlan(scenario, 1)
    z = plan.noise_multipliers
    if z is None:
        return None
    return [float(v) for v in z] + ([] if plan.basis_multiplier is None else [float(plan.basis_multiplier)])


# ---------------------------------------------------------------- tabular inputs
def tabular_inputs(features, y) -> tuple[np.ndarray, np.ndarray]:
    """(features (n, K), y (n,)) as finite float arrays (a DataFrame's values are taken as they are)."""
    x = _as_float("X", features.to_numpy() if _is_dataframe(features) else features)
    if x.ndim != 2 or x.shape[0] < 1 or x.shape[1] < 1:
        raise InputError(f"X: expected an (n, K) array, got shape {x.shape}")
    r = _as_float("y", y.to_numpy() if hasattr(y, "to_numpy") else y)
    if r.shape != (x.shape[0],):
        raise InputError(f"y: expected {x.shape[0]} responses (one per row), got shape {r.shape}")
    return _finite("X", x), _finite("y", r)


def _tabular_section(directory: Path | None, x: np.ndarray, y: np.ndarray, parts: list[np.ndarray]):
    """The ``data`` section of the clients' rows and the rows themselves: ``in_memory`` (the scenario names their
    digest; the rows reach the engine as arrays) without a ``data_dir``, else ``arrays`` (one file per client,
    written there, as a Flower run reads them)."""
    from fdp_flower.data.tabular import rows_digest

    rows = [(x[r], y[r]) for r in parts]
    if directory is None:
        return {"kind": "in_memory", "digest": rows_digest(rows)}, rows
    paths, digests = _write_tabular(directory, x, y, parts)
    return {"kind": "arrays", "paths": paths, "digests": digests}, None


def _write_tabular(directory: Path, x: np.ndarray, y: np.ndarray, parts: list[np.ndarray]) -> tuple[list[str], list[str]]:
    from fdp_flower.data.tabular import write_arrays_file
    from fdp_flower.functional.node_files import file_digest

    paths = [write_arrays_file(directory / f"client-{i}.npz", x[rows], y[rows]) for i, rows in enumerate(parts)]
    return [str(p) for p in paths], [file_digest(p) for p in paths]


def _check_labels(loss: str, y: np.ndarray) -> None:
    if loss == "logistic" and not np.all(np.isin(y, (-1.0, 1.0))):
        raise InputError("y: the logistic loss needs labels in {-1, +1}")


# ---------------------------------------------------------------- peer-to-peer
P2P_GRAPHS = ("ring", "complete", "star", "random_regular", "erdos_renyi", "small_world")


def _topology(graph, degree: int | None) -> dict[str, Any]:
    if isinstance(graph, str):
        if graph not in P2P_GRAPHS:
            raise InputError(f"graph: choose one of {', '.join(P2P_GRAPHS)} or give an edge list, got {graph!r}")
        section: dict[str, Any] = {"kind": graph}
        if degree is not None:
            key = {"random_regular": "degree", "erdos_renyi": "average_degree", "small_world": "k"}.get(graph)
            if key is None:
                raise InputError(f"degree: graph {graph!r} has no degree parameter")
            section[key] = degree
        return section
    edges = [tuple(int(v) for v in e) for e in graph]
    return {"kind": "custom", "edges": edges}


@_plain_numbers
def fit_p2p(X, y, *, graph="ring", degree: int | None = None, algorithm: str = "zcdp_nfl", loss: str = "quantile",
            tau: float = 0.5, penalty: str = "none", lam: float = 0.0, eps: float | None = 1.0, delta: float = 1e-5,
            privacy: str = "total", n_nodes: int | None = None, node_ids=None, rounds: int | None = None,
            clip: float = 1.0, residual_bound: float = 1.0, intercept: bool = True, intercept_share: float = 0.5,
            seed: int = 0, out=None, data_dir=None, reference: bool = True, name: str = "fit_p2p",
            **renamed) -> TabularModel:
    """Fit a linear model peer to peer (no server): zCDP-NFL, DP-NFL, zCDP-grad-NFL, PR-ADMM or
    decentralized ADMM (Gauthier et al. 2023 and Ding et al. 2019; docs/api.md).

    Parameters
    ----------
    X, y : (n, K) and (n,) arrays
        Features and responses (labels in {-1, +1} for the logistic loss).
    graph : str or list of (i, j)
        "ring" (default), "complete", "star", "random_regular", "erdos_renyi", "small_world" or an edge list.
    degree : int or None
        The degree of random_regular / small_world graphs, the expected degree of erdos_renyi.
    algorithm : str
        "zcdp_nfl" (default), "dp_nfl", "zcdp_grad_nfl", "pr_admm", "p_admm" (smooth loss and penalty) or
        "decentralized_admm" (needs eps=None).
    loss, tau, residual_bound : str, float, float
        "quantile" (default), "absolute", "logistic" or "squared" (residual clipped at residual_bound).
    penalty, lam : str, float
        Penalty and weight (default: none, 0); the intercept is never penalized.
    eps, delta, privacy : as in :func:`fit` (per_round: each round's zCDP budget is the first round's).
    n_nodes, node_ids : the split of the rows over the graph's nodes (default 10 seeded parts).
    rounds : int or None
        T (default: the algorithm's; with ``eps=None`` and an ADMM kind, the cap of the stopping rule, 1000;
        ``steps`` was its earlier name and is refused with a one-line error).
    clip : float
        c1, the row-norm bound of every node's features (default: 1.0).
    intercept, intercept_share, seed, out, data_dir, reference, name : as in :func:`fit`.

    With ``eps=None`` and an ADMM kind (``zcdp_nfl``, ``dp_nfl``, ``decentralized_admm``) the run has no noise
    and takes the privacy-off defaults (docs/algorithms.md, eqs. (3.11)-(3.13)): rho and the step in units
    of the loss's curvature (from the rows' response scale, so any rescaling of y takes the same steps),
    the response centred at its median with an intercept (the intercept absorbs the shift exactly; the
    returned model, iterates and history are those of y), and a stop when the released average no
    longer moves (``stop_reason``; ``cap`` at ``rounds``).

    Returns
    -------
    TabularModel
        ``coefficients`` and ``intercept`` (mean of the nodes' last released estimates), ``node_coefficients``,
        ``predict(X)``, ``privacy``, ``ledger``, ``history``, ``stop_reason``.
    """
    from fdp_flower.algorithms.p2p.config import parse_p2p_scenario
    from fdp_flower.algorithms.p2p.nonprivate import ADMM_KINDS, converged
    from fdp_flower.algorithms.p2p.plan import build_problem
    from fdp_flower.engines.p2p import run_scenario
    from fdp_flower.outputs.results import claimed_output

    if "steps" in renamed:
        raise InputError("steps: renamed to rounds")
    if renamed:
        raise TypeError(f"fit_p2p() got an unexpected keyword argument {next(iter(renamed))!r}")
    x, r = tabular_inputs(X, y)
    _check_labels(loss, r)
    parts, _ = client_partition(len(r), n_clients=n_nodes, client_ids=node_ids, seed=seed, what="node_ids")
    if len(parts) < 2:
        raise InputError("n_nodes: a peer-to-peer graph needs at least 2 nodes")
    with _client_directory(data_dir, needed=False) as directory:
        alg: dict[str, Any] = {"kind": algorithm}
        stop, location = None, 0.0
        if eps is None and algorithm in ADMM_KINDS:  # privacy off: eqs. (3.11)-(3.13)
            alg.update(_nonprivate_p2p_settings(loss, tau, residual_bound, penalty, lam, clip, intercept, x, r))
            stop = converged
            if intercept and loss != "logistic":  # the unpenalized intercept absorbs a shift of y (exactly)
                location = float(np.median(r))
        data_section, rows = _tabular_section(directory, x, r - location, parts)
        if rounds is not None:
            alg["rounds"] = rounds
        data = {
            "name": name, "seed": seed, "federation": {"num_clients": len(parts)},
            "topology": _topology(graph, degree),
            "data": data_section,
            "model": {"loss": {"kind": loss, "tau": tau, "residual_bound": residual_bound},
                      "penalty": {"kind": penalty, "lam": lam}, "clip_c1": clip, "intercept": intercept,
                      "intercept_share": intercept_share},
            "algorithm": alg,
            "privacy": _privacy_section(eps, delta, privacy, "seeded"),
            "output": {"dir": str(out) if out is not None else "results"},
        }
        scenario = _parse(parse_p2p_scenario, data, "fit_p2p()")
        with claimed_output(out):
            problem = build_problem(scenario, with_reference=reference, rows=rows)
            result = run_scenario(scenario, problem=problem, stop=stop)
            if location:
                _uncentre(result, problem, location, intercept_share * clip)
            history = {k: np.asarray(v) for k, v in result.metrics.items()}
            rows = [{k: float(v[i]) for k, v in history.items()} for i in range(len(history["round"]))]
            if out is not None:
                _write_tabular_results(out, scenario, rows, result.ledger, stop_reason=result.stop_reason, iterates={
                    "released": result.released, "duals": result.duals})
    report = PrivacyReport.from_ledger(result.ledger, delta=scenario.privacy.delta,
                                       mode=scenario.privacy.mode if eps is not None else None, eps_budget=eps)
    node_w = np.asarray(result.released[-1], dtype=float)
    return TabularModel(node_w.mean(axis=0), p2p_intercept_scale(scenario), scenario, report, result.ledger,
                        history_frame(rows), node_w=node_w, stop_reason=result.stop_reason)


def _uncentre(result, problem, location: float, c0: float) -> None:
    """The run on y - location, moved back to y: quantile regression is regression-equivariant, so the
    exact estimator of y is that of y - location with the intercept's coefficient raised by location / c0,
    and the run is the same run started from that intercept.  Shifts every iterate's intercept entry
    and recomputes the history against the exact estimator of y (in place)."""
    import dataclasses

    from fdp_flower.engines.p2p import evaluate

    shift = location / c0
    for arr in (result.primal, result.released):
        arr[..., 0] += shift
    x_star = None if problem.x_star is None else problem.x_star + shift * np.eye(problem.dim)[0]
    original = dataclasses.replace(problem, responses=tuple(y + location for y in problem.responses), x_star=x_star)
    rounds = np.asarray(result.metrics["round"], dtype=int)
    metrics = {"round": rounds}
    for name, xs in (("primal", result.primal[rounds]), ("released", result.released[rounds])):
        for key, val in evaluate(original, xs).items():
            metrics[f"{name}_{key}"] = val
    result.metrics = metrics


def _nonprivate_p2p_settings(loss: str, tau: float, residual_bound: float, penalty: str, lam: float, clip: float,
                             intercept: bool, x: np.ndarray, y: np.ndarray) -> dict[str, Any]:
    """rho, step and cap of eq. (3.12) for the caller's rows (privacy off: the response scale is read
    from them without noise)."""
    from fdp_flower.algorithms.p2p.nonprivate import nonprivate_admm_settings, response_scale
    from fdp_flower.algorithms.p2p.problems import is_smooth
    from fdp_flower.core.losses import make_loss
    from fdp_flower.core.penalties import Penalty

    loss_ = make_loss(loss, tau=tau, residual_bound=residual_bound)
    smooth = is_smooth(loss_, Penalty(penalty)) or lam == 0 and is_smooth(loss_, Penalty("none"))
    return nonprivate_admm_settings(loss_, smooth=smooth, dim=x.shape[1] + int(intercept), c1=clip,
                                    response_scale_=response_scale([y]))


# ---------------------------------------------------------------- gradient perturbation
@_plain_numbers
def fit_gradient(X, y, *, algorithm: str = "dp_admm", loss: str = "logistic", tau: float = 0.5,
                 lam: float = 1e-3, constraint: str = "lasso", eps: float | None = 1.0, delta: float = 1e-5,
                 n_clients: int | None = None, client_ids=None, rounds: int | None = None, rho: float | None = None,
                 eta: float | None = None, clip: float = 1.0, neighbouring: str = "add_remove",
                 intercept: bool = True, intercept_share: float = 0.5, seed: int = 0, out=None, data_dir=None,
                 reference: bool = True, name: str = "fit_gradient") -> TabularModel:
    """Fit a generalized lasso by DP-ADMM or DP-AccADMM with gradient perturbation (Xu et al. 2020; docs/api.md).

    min_x (1/n) sum_j l(x; a_j, y_j) + lam ||A x||_1 with A = I ("lasso") or the graph-guided
    A = [W; I] ("graph_guided", W estimated on the pooled rows, non-private as in the paper).

    Parameters
    ----------
    X, y : (n, K) and (n,) arrays
        Features and responses (labels in {-1, +1} for the logistic loss).
    algorithm : {"dp_admm", "dp_acc_admm"}
    loss, tau : "logistic" (default), "quantile" or "absolute"; the quantile level.
    lam, constraint : weight of ||A x||_1 and the kind of A (defaults: 1e-3, "lasso"); the intercept is
        outside A x.
    eps, delta : the total budget of the run, one calibration for all T rounds by the PLD accountant
        (docs/algorithms.md, eq. (5.10)); eps=None runs plain ADMM / AccADMM.
    neighbouring : "add_remove" (default) or "replace_one": the relation the guarantee is stated for; the mean
        gradient's sensitivity is 2c/m_i under both (the paper's c/m is not a bound), so the noise is the same.
    n_clients, client_ids, rounds, rho, eta, clip, intercept, intercept_share, seed, out, data_dir, reference,
    name : as in :func:`fit` (rounds, rho, eta default to the schema's 200, 0.3, 4.0).  With eps=None the server
        takes the proximal Barzilai-Borwein step and stops when its iterate settles (docs/algorithms.md, section 5.2),
        rounds is then a cap (default 2000) and the model's ``stop_reason`` says ``converged: ...`` or ``cap``.

    Returns
    -------
    TabularModel
    """
    from fdp_flower.algorithms.gradient_admm.config import GradientADMMScenario
    from fdp_flower.config.base import validate_mapping
    from fdp_flower.engines.gradient_admm import run_scenario
    from fdp_flower.outputs.results import claimed_output

    x, r = tabular_inputs(X, y)
    _check_labels(loss, r)
    parts, _ = client_partition(len(r), n_clients=n_clients, client_ids=client_ids, seed=seed)
    with _client_directory(data_dir, needed=False) as directory:
        data_section, rows = _tabular_section(directory, x, r, parts)
        alg: dict[str, Any] = {"kind": algorithm, "neighbouring": neighbouring}
        alg.update({k: v for k, v in (("rounds", rounds), ("rho", rho), ("eta", eta)) if v is not None})
        privacy = ({"enabled": False, "delta": delta} if eps is None
                   else {"enabled": True, "eps": eps, "delta": delta})
        data = {
            "name": name, "seed": seed,
            "data": {**data_section, "intercept": intercept, "intercept_share": intercept_share},
            "federation": {"num_clients": len(parts)},
            "model": {"loss": {"kind": loss, "tau": tau}, "penalty": {"kind": "l1", "lam": lam},
                      "constraint": {"kind": constraint},
                      "clip_c1": clip},
            "algorithm": alg, "privacy": privacy,
            "output": {"dir": str(out) if out is not None else "results"},
        }
        scenario = _parse(lambda d, s: validate_mapping(GradientADMMScenario, d, s), data, "fit_gradient()")
        with claimed_output(out):
            result, _problem, _ref = run_scenario(scenario, with_reference=reference, rows=rows)
            if out is not None:
                _write_tabular_results(out, scenario, result.history, result.ledger, final={"x": result.state.x},
                                       stop_reason=result.stop_reason)
    report = PrivacyReport.from_ledger(result.ledger, delta=delta, mode="total" if eps is not None else None,
                                       eps_budget=eps)
    return TabularModel(np.asarray(result.state.x, dtype=float), gradient_intercept_scale(scenario), scenario,
                        report, result.ledger, history_frame(result.history), stop_reason=result.stop_reason)


def _write_tabular_results(out, scenario, history: list[dict], ledger, *, iterates: dict | None = None,
                           final: dict | None = None, stop_reason: str | None = None) -> Path:
    """The results directory of a peer-to-peer or gradient fit, in the layout of ``fdp-flower run``
    (:func:`fdp_flower.outputs.results.write_run`)."""
    from fdp_flower.outputs.results import tabular_summary, write_run

    summary = tabular_summary(scenario, history, ledger, engine="inprocess", stop_reason=stop_reason)
    return write_run(out, scenario, history=history, ledger=ledger, summary=summary, final=final, iterates=iterates)
