"""Fitted models: what :func:`fdp_flower.fit` and its siblings return, and what
:func:`load_results` rebuilds from a results directory.

Both are frozen result dataclasses built from released values only (the global
iterates, the released node estimates, the public basis) and the privacy ledger:
everything in them is post-processing of the run's differentially private
releases, so holding or publishing a model costs no further privacy.

- :class:`FunctionalModel`: FDP-ADMM / F-ADMM, y = intercept + int beta_hat(t) X(t) dt at
  quantile level tau, beta_hat returned as a ``skfda.FDataGrid``;
- :class:`TabularModel`: the peer-to-peer and gradient-perturbation families on tabular
  features, y = intercept + x . coefficients (a linear predictor; labels sign(.) for the
  logistic loss);
- :class:`PrivacyReport`: the worst-off client's total eps by the PLD accountant, with its
  delta, neighbouring relation and budget mode.
"""
from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from fdp_flower.functional import design
from fdp_flower.functional.fpca import FunctionalBasis
from fdp_flower.functional.validation import fdata_values, is_fdatabasis, is_fdatagrid
from fdp_flower.outputs.layout import ResultsDir
from fdp_flower.privacy import GaussianRelease, PrivacyLedger

NEIGHBOURING_TEXT = {"replace_one": "replace-one", "add_remove": "add/remove-one"}


# ---------------------------------------------------------------- privacy
@dataclass(frozen=True)
class PrivacyReport:
    """What a run spent, for the client (or node) that spent the most.

    Attributes
    ----------
    private : False when the run added no noise (no guarantee at all)
    eps : total eps of that client by the PLD accountant (``dp_accounting``), all of its
        releases composed (the basis phase's too); with ``privacy.trust: secure_aggregation`` by the
        RDP accountant of the Skellam shares (the only one that covers them); None when not private
    delta : the delta of ``eps``
    neighbouring : the relation the sensitivities were computed for: "replace_one" (one record
        of one client replaced) or "add_remove" (one record added or removed)
    mode : "total" (``eps_budget`` was for the whole run and the noise was calibrated to meet
        it), "per_round" (``eps_budget`` was each round's, the paper's rule; ``eps`` is what the
        rounds compose to) or None when not private
    eps_budget : the eps that was asked for
    eps_rdp, eps_zcdp, zcdp_rho : the same releases by the RDP accountant and by zCDP
        (both looser upper bounds; zcdp_rho is the composed rho)
    releases : that client's number of noisy releases
    worst_client : its index
    mechanisms : the kinds of release in the ledger (e.g. ``fdp_admm_primal``, ``fpca_covariance``)
    """

    private: bool
    eps: float | None
    delta: float
    neighbouring: str | None
    mode: str | None
    eps_budget: float | None
    eps_rdp: float | None = None
    eps_zcdp: float | None = None
    zcdp_rho: float | None = None
    releases: int = 0
    worst_client: int | None = None
    mechanisms: tuple[str, ...] = ()

    @classmethod
    def from_ledger(cls, ledger: PrivacyLedger, *, delta: float, mode: str | None,
                    eps_budget: float | None) -> PrivacyReport:
        """The report of ``ledger`` at ``delta`` (the worst client by composed zCDP, then its PLD eps)."""
        if not ledger.releases:
            return cls(False, None, delta, None, None, None)
        relations = sorted({r.neighbouring for r in ledger.releases})
        if len(relations) != 1:
            raise ValueError(f"the ledger mixes neighbouring relations {relations}: re-express it under one "
                             "(PrivacyLedger.under_neighbouring) before reporting a total")
        worst = ledger.worst_case(delta, with_pld=True)
        return cls(True, float(worst.headline_eps), float(delta), relations[0], mode, eps_budget,
                   float(worst.eps_rdp), float(worst.eps_zcdp), float(worst.zcdp_rho), int(worst.releases),
                   int(worst.client), tuple(sorted({r.mechanism for r in ledger.releases})))

    def __str__(self) -> str:
        if not self.private:
            return "not private (no noise was added: no differential-privacy guarantee)"
        budget = {"total": f"total budget eps = {self.eps_budget:g}",
                  "per_round": f"eps = {self.eps_budget:g} per round"}.get(self.mode or "", "")
        accountant = "RDP, Skellam secure sums" if "skellam_secure_sum" in self.mechanisms else "PLD"
        trusted = ("; trusted aggregator: NO protection against the server, which saw every site's noise-free term"
                   if "fdp_admm_trusted_aggregator" in self.mechanisms else "")
        return (f"eps = {self.eps:.4g} at delta = {self.delta:g} ({accountant}, worst client {self.worst_client}, "
                f"{self.releases} releases; {NEIGHBOURING_TEXT.get(self.neighbouring, self.neighbouring)} "
                f"neighbours{'; ' + budget if budget else ''}{trusted})")


def history_frame(rows: list[dict[str, Any]]):
    """Per-round metrics as a pandas DataFrame (one row per round)."""
    import pandas as pd

    return pd.DataFrame(rows)


def _scenario_privacy(scenario) -> tuple[float, str | None, float | None]:
    """(delta, mode, eps asked for) of a scenario of any family."""
    p = scenario.privacy
    if not getattr(p, "enabled", True):
        return float(p.delta), None, None
    eps = getattr(p, "eps", None)
    return float(p.delta), getattr(p, "mode", "total"), None if eps is None else float(eps)


# ---------------------------------------------------------------- functional model
def _grid_values(curves, grid: np.ndarray, what: str) -> np.ndarray:
    """(n, G) values of ``curves`` on ``grid``: a 2-d array (or DataFrame) on that grid, an FDataGrid
    (evaluated there by its own interpolation when its grid differs) or an FDataBasis (evaluated there)."""
    if is_fdatagrid(curves) or is_fdatabasis(curves):
        values = fdata_values(curves, grid, what)[0]
        if not np.all(np.isfinite(values)):
            raise ValueError(f"{what}: the curves contain NaN or infinite values")
        return values
    if np.iscomplexobj(curves):
        raise ValueError(f"{what}: complex values are not accepted")
    try:
        values = np.asarray(curves, dtype=float)
    except (TypeError, ValueError):
        raise ValueError(f"{what}: expected numbers on the model's grid, got values of type "
                         f"{type(curves).__name__}") from None
    if values.ndim == 1 and values.shape == grid.shape:
        values = values[None, :]
    if values.ndim != 2 or values.shape[1] != grid.size:
        raise ValueError(f"{what}: expected an array of shape (n, {grid.size}) on the model's grid, an "
                         f"FDataGrid or an FDataBasis, got shape {values.shape}")
    if not np.all(np.isfinite(values)):
        raise ValueError(f"{what}: the curves contain NaN or infinite values")
    return values


@dataclass(frozen=True, eq=False)
class FunctionalModel:
    """A fitted functional quantile regression (FDP-ADMM, or F-ADMM without privacy).

    The model is Q_tau(y | X) = intercept + int beta_hat(t) X(t) dt with
    beta_hat(t) = sum_k coefficients_k phi_k(t) over the run's basis phi_k.

    Attributes
    ----------
    w : the released estimate (the scenario's ``algorithm.estimator`` of the global iterates):
        with ``model.intercept`` its first entry is the intercept column's coefficient, then the
        K basis coefficients
    basis : the basis (grid, phi_k, mean curve, quadrature weights)
    scenario : the fully resolved scenario of the run
    privacy : :class:`PrivacyReport` of the run
    ledger : every noisy release (client, round, sensitivity, sigma, relation, mechanism)
    history : per-round metrics (pandas DataFrame)
    stop_reason : "completed", or why the run stopped early
    sample_sizes : the public m_i of every client
    engine : "inprocess" or "flower"
    """

    w: np.ndarray
    basis: FunctionalBasis
    scenario: Any
    privacy: PrivacyReport
    ledger: PrivacyLedger
    history: Any
    stop_reason: str = "completed"
    sample_sizes: tuple[int, ...] = ()
    engine: str = "inprocess"
    #: the inference releases charged after the fit (:class:`fdp_flower.inference.inprocess.InferenceRecord`),
    #: None when the fit made none; :meth:`confidence_band` and the intervals of :meth:`summary` need them
    inference: Any = None

    @property
    def grid(self) -> np.ndarray:
        return self.basis.grid

    @property
    def tau(self) -> float:
        return float(self.scenario.model.loss.tau)

    @property
    def coefficients(self) -> np.ndarray:
        """The K basis coefficients of beta_hat (in the response's units: times ``data.response_scale``)."""
        from fdp_flower.algorithms.fdp_admm.plan import split_coefficients

        return _response_scale(self.scenario) * split_coefficients(self.scenario, self.w)[1]

    @cached_property
    def beta_values(self) -> np.ndarray:
        """beta_hat on the grid, shape (G,)."""
        return self.basis.function(self.coefficients)

    @cached_property
    def beta_hat(self):
        """The coefficient function beta_hat as a one-sample ``skfda.FDataGrid`` on the run's grid."""
        from skfda import FDataGrid

        return FDataGrid(self.beta_values[None, :], grid_points=self.grid)

    @cached_property
    def intercept(self) -> float:
        """alpha in y = alpha + int beta_hat X: the public response offset, plus the fitted intercept
        b = c0 w_0 (0 without ``model.intercept``) times the public response scale, minus
        int beta_hat(t) mean(t) dt of the basis's centring curve."""
        from fdp_flower.algorithms.fdp_admm.plan import split_coefficients

        b = float(split_coefficients(self.scenario, self.w)[0])
        offset = float(getattr(self.scenario.data, "response_offset", 0.0))
        return offset + _response_scale(self.scenario) * b - float((self.beta_values * self.basis.weights)
                                                                   @ self.basis.mean)

    def predict(self, curves) -> np.ndarray:
        """The fitted tau-quantile of y for each curve: intercept + int beta_hat X, shape (n,).

        ``curves``: an (n, G) array on the model's grid, or an ``skfda.FDataGrid`` (evaluated on the
        model's grid by its own interpolation when its grid differs).  The integral uses the same
        quadrature weights as training.
        """
        values = _grid_values(curves, self.grid, "predict")
        return self.intercept + values @ (self.beta_values * self.basis.weights)

    def mise(self, beta) -> float:
        """int (beta_hat - beta)^2 dt over the grid; ``beta``: values (G,) on the grid, a callable of t,
        or a one-sample FDataGrid."""
        if callable(beta) and not hasattr(beta, "data_matrix"):
            values = np.asarray(beta(self.grid), dtype=float).reshape(-1)
        else:
            values = _grid_values(beta, self.grid, "mise")[0]
        if values.shape != self.grid.shape:
            raise ValueError(f"mise: beta must have {self.grid.size} values on the grid, got {values.shape}")
        return float(design.mise(self.beta_values, values, self.grid))

    def with_inference(self, record) -> FunctionalModel:
        """This model with the inference releases of ``record`` (an
        :class:`~fdp_flower.inference.inprocess.InferenceRecord`) charged to its ledger; its privacy report is
        recomputed over all releases, against the total budget the fit and the inference share."""
        from dataclasses import replace

        ledger = PrivacyLedger(list(self.ledger.releases) + list(record.releases))
        if record.releases:
            privacy = PrivacyReport.from_ledger(ledger, delta=self.privacy.delta, mode="total",
                                                eps_budget=record.eps_total)
        else:
            privacy = self.privacy
        return replace(self, ledger=ledger, privacy=privacy, inference=record)

    def confidence_band(self, level: float = 0.95, *, debias: bool = True, draws: int = 20000, seed: int = 0):
        """Pointwise and simultaneous confidence bands for beta(t) on the grid and an interval for the
        intercept (:class:`fdp_flower.inference.bands.ConfidenceBand`), accounting for the sampling error and
        the privacy noise (docs/inference.md).  Needs the inference releases (:attr:`inference`): fit with
        :class:`fdp_flower.FDPQuantileRegressor` or add them with :func:`fdp_flower.infer`.  Post-processing:
        costs no privacy; ``seed`` fixes the simulation of the simultaneous band's critical value."""
        if self.inference is None:
            raise ValueError("confidence_band: this model has no inference releases (fit it with "
                             "fdp_flower.FDPQuantileRegressor, or add them with fdp_flower.infer(model, curves, y, "
                             "eps_total=...))")
        from fdp_flower.inference.bands import InferenceError
        from fdp_flower.inference.fdp_admm import model_band

        if self.inference.sandwich is None:
            raise InferenceError(self.inference.failure)
        return model_band(self, self.inference.sandwich, level=level, debias=debias, draws=draws, seed=seed)

    def summary(self, points=None, level: float = 0.95):
        """A statsmodels-style summary (:class:`fdp_flower.outputs.summary.ModelSummary`, printable): the
        intercept and beta(t) at ``points`` (default: 5 equispaced points of the grid) with standard errors
        (sampling and privacy parts) and ``level`` intervals when the model has inference releases; n, the
        sites, tau, the penalty, eps/delta with the neighbouring relation and the budget split, the basis and
        whether it was private."""
        from fdp_flower.outputs.summary import model_summary

        return model_summary(self, points=points, level=level)

    def save(self, path) -> Path:
        """Write the model to the directory ``path`` (created; :func:`load_model` or ``fdp_flower.load`` reads
        it back): ``scenario.yaml``, ``model.npz`` (the released estimate, the basis, the inference pieces),
        ``ledger.csv``, ``history.csv`` and ``model.json``.  Everything saved is a release or public."""
        from fdp_flower.outputs.model_files import save_model

        return save_model(self, path)

    def __repr__(self) -> str:
        s = self.scenario
        return (f"FunctionalModel(tau={self.tau:g}, K={self.basis.n_components} ({s.basis.kind} basis), "
                f"clients={s.federation.num_clients}, rounds={len(self.history)}, intercept={self.intercept:.4g}, "
                f"privacy: {self.privacy})")

    @classmethod
    def from_run(cls, result) -> FunctionalModel:
        """The model of an in-process or Flower :class:`fdp_flower.outputs.results.RunResult`."""
        sc = result.scenario
        delta, mode, eps = _scenario_privacy(sc)
        return cls(np.asarray(result.state.estimate(sc.algorithm.estimator.kind), dtype=float), result.basis, sc,
                   PrivacyReport.from_ledger(result.ledger, delta=delta, mode=mode, eps_budget=eps),
                   result.ledger, history_frame(result.history), result.stop_reason,
                   tuple(int(m) for m in result.sample_sizes), result.engine)


# ---------------------------------------------------------------- tabular model
@dataclass(frozen=True, eq=False)
class TabularModel:
    """A fitted linear model of the peer-to-peer or gradient-perturbation family.

    y is predicted by intercept + x . coefficients (the tau-quantile for the quantile loss, the
    median for the absolute loss, the mean for the squared loss); for the logistic loss the
    labels are sign(intercept + x . coefficients) in {-1, +1}.

    Attributes
    ----------
    w : the released estimate (with an intercept, its first entry is the intercept column's
        coefficient); peer-to-peer: the mean of the nodes' last released vectors
    node_w : peer-to-peer only: every node's last released vector, shape (N, dim)
    intercept_scale : c0, the value of the intercept column (0 without an intercept)
    scenario, privacy, ledger, history, stop_reason : as in :class:`FunctionalModel`
    """

    w: np.ndarray
    intercept_scale: float
    scenario: Any
    privacy: PrivacyReport
    ledger: PrivacyLedger
    history: Any
    node_w: np.ndarray | None = None
    stop_reason: str = "completed"

    @property
    def algorithm(self) -> str:
        return str(self.scenario.algorithm.kind)

    @property
    def coefficients(self) -> np.ndarray:
        return self.w[1:] if self.intercept_scale else self.w

    @property
    def intercept(self) -> float:
        return float(self.intercept_scale * self.w[0]) if self.intercept_scale else 0.0

    @property
    def node_coefficients(self) -> np.ndarray | None:
        if self.node_w is None:
            return None
        return self.node_w[:, 1:] if self.intercept_scale else self.node_w

    @property
    def loss(self) -> str:
        data, model = self.scenario.data, getattr(self.scenario, "model", None)
        return str(getattr(data, "loss", None) or getattr(getattr(model, "loss", None), "kind", "?"))

    def decision_function(self, features) -> np.ndarray:
        """intercept + x . coefficients for each row of ``features`` (n, K)."""
        x = np.asarray(features, dtype=float)
        if x.ndim == 1:
            x = x[None, :]
        if x.ndim != 2 or x.shape[1] != self.coefficients.size:
            raise ValueError(f"predict: expected features of shape (n, {self.coefficients.size}), got {x.shape}")
        if not np.all(np.isfinite(x)):
            raise ValueError("predict: the features contain NaN or infinite values")
        return self.intercept + x @ self.coefficients

    def predict(self, features) -> np.ndarray:
        """Fitted values (quantile / median / mean), or labels in {-1, +1} for the logistic loss."""
        score = self.decision_function(features)
        return np.where(score >= 0, 1.0, -1.0) if self.loss == "logistic" else score

    def save(self, path) -> Path:
        """Write the model to the directory ``path`` (:func:`load_model` or ``fdp_flower.load`` reads it back)."""
        from fdp_flower.outputs.model_files import save_model

        return save_model(self, path)

    def __repr__(self) -> str:
        return (f"TabularModel({self.algorithm}, loss={self.loss}, K={self.coefficients.size}, "
                f"intercept={self.intercept:.4g}, privacy: {self.privacy})")


# ---------------------------------------------------------------- results directories
def read_ledger_csv(path: str | Path) -> PrivacyLedger:
    """The ledger of a ``ledger.csv`` (:meth:`PrivacyLedger.to_rows`) or ``ledger.json`` file."""
    path = Path(path)
    if path.suffix == ".json":
        rows = json.loads(path.read_text())
    else:
        with open(path, newline="") as fh:
            rows = list(csv.DictReader(fh))
    releases = [GaussianRelease(client=int(r["client"]), round=int(float(r["round"])),
                                sensitivity=float(r["sensitivity"]), sigma=float(r["sigma"]),
                                neighbouring=str(r.get("neighbouring") or "replace_one"),
                                mechanism=str(r.get("mechanism") or "gaussian")) for r in rows]
    return PrivacyLedger(releases)


def _history(out: Path):
    import pandas as pd

    path = ResultsDir.at(out).history_to_read()
    if path is None or path.stat().st_size == 0:
        return pd.DataFrame()
    return pd.DataFrame(json.loads(path.read_text())) if path.suffix == ".json" else pd.read_csv(path)


def _ledger(out: Path) -> PrivacyLedger:
    path = ResultsDir.at(out).ledger_to_read()
    if path is None:
        raise ValueError(f"{out}: no ledger.csv (the record of every release): the run's privacy cannot be reported "
                         "without it")
    return read_ledger_csv(path)


def verify_ledger(out: Path, summary: dict, ledger: PrivacyLedger) -> None:
    """The ledger of a results directory against its ``summary.json``: every client's count of releases (the
    summary's ``privacy.per_client``) and whether the run was private.  A ledger cut (at a line boundary too),
    edited or replaced is a ``ValueError`` of one line -- never a smaller eps or "not private" recomputed from
    what is left.  Without a summary (a run that did not finish) there is nothing to check against."""
    section = summary.get("privacy") if summary else None
    if not isinstance(section, dict):
        return
    counts: dict[int, int] = {}
    for release in ledger.releases:
        counts[int(release.client)] = counts.get(int(release.client), 0) + 1
    recorded = {int(row["client"]): int(row["releases"]) for row in section.get("per_client") or []}
    problem = None
    if bool(section.get("private")) != bool(counts) and "error" not in section:
        problem = (f"the summary says {'private' if section.get('private') else 'not private'}, the ledger holds "
                   f"{sum(counts.values())} releases")
    elif recorded and recorded != counts:
        client = next(c for c in sorted(set(recorded) | set(counts)) if recorded.get(c) != counts.get(c))
        problem = (f"client {client}: {counts.get(client, 0)} releases on record, the summary counts "
                   f"{recorded.get(client, 0)}")
    if problem:
        raise ValueError(f"{out}: ledger.csv does not match summary.json ({problem}); the ledger was cut or "
                         "edited, so the run's eps cannot be verified from it")


def load_results(directory: str | Path):
    """The fitted model of a results directory written by ``fdp-flower run``, ``flwr run`` or
    ``fdp_flower.fit(..., out=...)``: a :class:`FunctionalModel` for FDP-ADMM, a
    :class:`TabularModel` for the peer-to-peer and gradient families.

    Reads ``scenario.yaml`` (the family and every setting), the released estimate
    (``final.npz``, or ``iterates.npz`` for peer-to-peer runs), the basis (``final.npz``),
    ``ledger.csv`` and ``history.csv`` (or their ``.json`` forms) and ``summary.json``; the ledger is checked
    against the summary first (:func:`verify_ledger`: a missing, cut or edited ledger is a ``ValueError``).
    """
    from fdp_flower.algorithms.registry import family, parse_any_scenario, resolve
    from fdp_flower.config.base import read_yaml_file

    out = Path(directory)
    files = ResultsDir.at(out)
    if not out.is_dir():
        raise ValueError(f"{out}: results directory not found")
    if not files.scenario.is_file():
        raise ValueError(f"{out}: no {files.scenario.name} (not a results directory of fdp-flower)")
    scenario = parse_any_scenario(read_yaml_file(files.scenario), str(files.scenario))
    summary = json.loads(files.summary.read_text()) if files.summary.is_file() else {}
    ledger = _ledger(out)
    verify_ledger(out, summary, ledger)
    delta, mode, eps = _scenario_privacy(scenario)
    privacy = PrivacyReport.from_ledger(ledger, delta=delta, mode=mode, eps_budget=eps)
    return resolve(family(scenario.algorithm.kind).read_results)(out, scenario, summary, privacy, ledger)


def read_p2p_results(out: Path, scenario, summary: dict, privacy: PrivacyReport, ledger: PrivacyLedger):
    """The :class:`TabularModel` of a peer-to-peer results directory (the mean of the released node
    estimates of the last round, ``iterates.npz``)."""
    path = ResultsDir.at(out).iterates
    if not path.is_file():
        raise ValueError(f"{out}: no iterates.npz (the released node estimates of a peer-to-peer run)")
    with np.load(path) as npz:
        node_w = np.asarray(npz["released"][-1], dtype=float)
    return TabularModel(node_w.mean(axis=0), p2p_intercept_scale(scenario), scenario, privacy, ledger,
                        _history(out), node_w=node_w, stop_reason=str(summary.get("stop_reason", "completed")))


def read_protocol_results(out: Path, scenario, summary: dict, privacy: PrivacyReport, ledger: PrivacyLedger):
    """The :class:`TabularModel` of a results directory of the generic drivers (``final.npz``: estimate)."""
    path = ResultsDir.at(out).final
    if not path.is_file():
        raise ValueError(f"{out}: no final.npz (the released estimate of the run)")
    with np.load(path) as npz:
        w = np.asarray(npz["estimate"], dtype=float)
    return TabularModel(w, 0.0, scenario, privacy, ledger, _history(out),
                        stop_reason=str(summary.get("stop_reason", "completed")))


def read_gradient_admm_results(out: Path, scenario, summary: dict, privacy: PrivacyReport, ledger: PrivacyLedger):
    """The :class:`TabularModel` of a DP-ADMM / DP-AccADMM results directory (``final.npz``: x)."""
    with np.load(ResultsDir.at(out).final) as npz:
        x = np.asarray(npz["x"], dtype=float)
    return TabularModel(x, gradient_intercept_scale(scenario), scenario, privacy, ledger, _history(out),
                        stop_reason=str(summary.get("stop_reason", "completed")))


def read_fdp_admm_results(out: Path, scenario, summary: dict, privacy: PrivacyReport,
                          ledger: PrivacyLedger) -> FunctionalModel:
    """The :class:`FunctionalModel` of an FDP-ADMM results directory (``final.npz``: state and basis)."""
    from fdp_flower.algorithms.fdp_admm.update import FDPADMMState

    path = ResultsDir.at(out).final
    if not path.is_file():
        raise ValueError(f"{out}: no final.npz (state and basis of the run)")
    with np.load(path, allow_pickle=False) as npz:
        arrays = {k: npz[k] for k in npz.files}
    basis_arrays = {k[len("basis_"):]: v for k, v in arrays.items() if k.startswith("basis_") and k != "basis_kind"}
    if not basis_arrays:
        raise ValueError(f"{path}: no basis arrays (basis_grid, basis_components, ...)")
    kind = str(arrays["basis_kind"]) if "basis_kind" in arrays else str(scenario.basis.kind)
    basis = FunctionalBasis.from_arrays(basis_arrays, kind=kind)
    state = FDPADMMState.from_arrays({k[len("state_"):]: v for k, v in arrays.items() if k.startswith("state_")})
    w = state.estimate(scenario.algorithm.estimator.kind)
    return FunctionalModel(np.asarray(w, dtype=float), basis, scenario, privacy, ledger, _history(out),
                           str(summary.get("stop_reason", "completed")),
                           tuple(int(m) for m in summary.get("sample_sizes", [])),
                           str(summary.get("engine", "inprocess")))


def p2p_intercept_scale(scenario) -> float:
    """c0 of a peer-to-peer scenario's intercept column (0 without one)."""
    m = scenario.model
    return float(m.intercept_share * m.clip_c1) if m.intercept else 0.0


def gradient_intercept_scale(scenario) -> float:
    """c0 of a gradient-family scenario's intercept column (0 without one)."""
    d = scenario.data
    return float(d.intercept_share * scenario.model.clip_c1) if getattr(d, "intercept", False) else 0.0


def _response_scale(scenario) -> float:
    """The public ``data.response_scale`` the clients divided the responses by (1 when the source has none)."""
    return float(getattr(scenario.data, "response_scale", 1.0))
