"""DP-ADMM / DP-AccADMM from a scenario: data source, constraint matrix A, loss, problem and calibration.

The in-process engine, the Flower strategy and client worker and the audit build their data, losses and
noise calibration from these functions (Xu et al. 2020; docs/algorithms.md, section 5), so that the
engines cannot disagree on a partition or a sigma.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fdp_flower.algorithms.gradient_admm.site import SiteData, SitePlan
from fdp_flower.algorithms.gradient_admm.update import (
    GradientPrivacy,
    check_gamma,
    generalized_lasso_objective,
    graph_guided_matrix,
    lasso_matrix,
    min_gamma,
    spectral_norm_gram,
)
from fdp_flower.core.clipping import clip_rows
from fdp_flower.core.losses import make_loss
from fdp_flower.data.sources import tabular_source


# ---------------------------------------------------------------- data
def data_source(scenario):
    """The :mod:`fdp_flower.data.sources` source of the scenario's ``data`` section."""
    return tabular_source(scenario.data, seed=scenario.seed, num_clients=scenario.federation.num_clients,
                          clip_c1=scenario.model.clip_c1)


@dataclass(frozen=True)
class ScenarioData:
    """Raw (unclipped) client partitions, test set and constraint matrix of a scenario."""

    features: tuple[np.ndarray, ...]
    labels: tuple[np.ndarray, ...]
    test_features: np.ndarray | None
    test_labels: np.ndarray | None
    matrix: np.ndarray


def load_scenario_data(scenario) -> ScenarioData:
    """Every client's rows of the scenario's data source (split seeded by ``scenario.seed``) and A.

    A = [W; I] is estimated on the pooled training rows (non-private, as in Xu et al. (2020)); columns
    outside the penalty (a public intercept, ``data.intercept``) get zero columns in A.
    """
    source = data_source(scenario)
    split = source.split
    matrix = constraint_matrix(scenario, source.penalty_rows())
    if source.unpenalized:
        matrix = np.hstack([np.zeros((matrix.shape[0], source.unpenalized)), matrix])
    return ScenarioData(split.features, split.responses, split.test_features, split.test_responses, matrix)


def constraint_matrix(scenario, features: np.ndarray) -> np.ndarray:
    """A of ``model.constraint`` for rows ``features`` (n, d) (graph-guided: estimated on them, clipped to c1)."""
    con = scenario.model.constraint
    if con.kind == "graph_guided":
        return graph_guided_matrix(clip_rows(features, scenario.model.clip_c1)[0], alpha=con.alpha,
                                   max_iter=con.max_iter)
    if con.kind == "lasso":
        return lasso_matrix(features.shape[1])
    return load_matrix(con.path, features.shape[1])


def load_matrix(path: str, dim: int) -> np.ndarray:
    """A user-given constraint matrix from .npy or .csv; it must have ``dim`` columns."""
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"{p}: constraint matrix file not found")
    matrix = np.load(p) if p.suffix == ".npy" else np.loadtxt(p, delimiter=",", ndmin=2)
    matrix = np.atleast_2d(np.asarray(matrix, dtype=float))
    if matrix.shape[1] != dim or not np.all(np.isfinite(matrix)):
        raise ValueError(f"{p}: A must be finite with {dim} columns, got shape {matrix.shape}")
    return matrix


# ---------------------------------------------------------------- problem
@dataclass(frozen=True)
class GradientADMMProblem:
    """A federated generalized lasso: clients' (clipped) data, the constraint matrix A and lam."""

    loss: object
    matrix: np.ndarray
    lam: float
    client_features: tuple[np.ndarray, ...]
    client_responses: tuple[np.ndarray, ...]
    c1: float
    test_features: np.ndarray | None = None
    test_labels: np.ndarray | None = None
    clipped_rows: tuple[int, ...] = ()

    @classmethod
    def from_clients(cls, *, loss, matrix, lam: float, features, responses, c1: float, test_features=None,
                     test_labels=None) -> "GradientADMMProblem":
        """Clip every client's rows to ||a|| <= c1 (the sites' :meth:`SiteData.clip`) and freeze the problem;
        responses the loss's gradient bound does not hold for (the logistic loss: labels outside {-1, +1})
        are a one-line ``ValueError`` here, before any run (every site refuses them too)."""
        if len(features) != len(responses) or not features:
            raise ValueError("give one (features, responses) pair per client")
        if lam < 0:
            raise ValueError(f"lam must be >= 0, got {lam}")
        for i, y in enumerate(responses):
            try:
                check = getattr(loss, "check_response", None)
                if check is not None:
                    check(y)
            except ValueError as exc:
                raise ValueError(f"client {i}: {exc}") from None
        sites = SiteData.clip(range(len(features)), features, responses, c1)
        test = None if test_features is None else clip_rows(test_features, c1)[0]
        return cls(loss, np.asarray(matrix, dtype=float), float(lam), sites.features, sites.responses, float(c1),
                   test, None if test_labels is None else np.asarray(test_labels, dtype=float), sites.clipped_rows)

    @property
    def num_clients(self) -> int:
        return len(self.client_features)

    @property
    def dim(self) -> int:
        return self.matrix.shape[1]

    @property
    def counts(self) -> np.ndarray:
        return np.array([len(r) for r in self.client_responses])

    @property
    def gradient_bound(self) -> float:
        """c: per-sample gradient bound of the loss for rows with ||a|| <= c1 (docs/algorithms.md, section 0)."""
        return float(self.loss.gradient_bound(self.c1))

    def site_data(self) -> SiteData:
        """Every client's site (its clipped rows), for an in-process run."""
        return SiteData(tuple(range(self.num_clients)), self.client_features, self.client_responses,
                        self.clipped_rows)

    def site_plan(self, rounds: int, privacy: GradientPrivacy | None) -> SitePlan:
        """The sites' public calibration for a run of ``rounds`` releases."""
        return SitePlan(self.loss, self.gradient_bound, self.dim, int(rounds), privacy)

    def pooled(self) -> tuple[np.ndarray, np.ndarray]:
        return np.vstack(self.client_features), np.concatenate(self.client_responses)

    def objective(self, x: np.ndarray) -> float:
        a, y = self.pooled()
        return generalized_lasso_objective(self.loss, x, a, y, self.matrix, self.lam)


def build_loss(scenario):
    lc = scenario.model.loss
    return make_loss(lc.kind, tau=lc.tau, residual_bound=lc.residual_bound)


def build_problem(scenario, data: ScenarioData | None = None) -> GradientADMMProblem:
    """The federated problem of a scenario (clients' rows clipped to c1)."""
    data = load_scenario_data(scenario) if data is None else data
    return GradientADMMProblem.from_clients(loss=build_loss(scenario), matrix=data.matrix,
                                            lam=scenario.model.penalty.lam, features=list(data.features),
                                            responses=list(data.labels), c1=scenario.model.clip_c1,
                                            test_features=data.test_features, test_labels=data.test_labels)


# ---------------------------------------------------------------- calibration and steps
def scenario_privacy(scenario) -> GradientPrivacy | None:
    """Theorem 1's parameters of a scenario (None: privacy off)."""
    p, alg = scenario.privacy, scenario.algorithm
    if not p.enabled:
        return None
    return GradientPrivacy(eps=p.eps, delta=p.delta, mu=alg.mu, neighbouring=alg.neighbouring)


def site_plan(scenario, dim: int) -> SitePlan:
    """A site's public calibration of a scenario whose rows have ``dim`` columns (a site reads K from its own
    rows): its loss, c = G(c1), K, T and Theorem 1's parameters."""
    loss = build_loss(scenario)
    return SitePlan(loss, float(loss.gradient_bound(scenario.model.clip_c1)), int(dim), scenario.algorithm.rounds,
                    scenario_privacy(scenario))


def noise_plan(problem: GradientADMMProblem, rounds: int, privacy: GradientPrivacy | None):
    """(sensitivities, sigmas) per client, or (None, None) when privacy is off."""
    if privacy is None:
        return None, None
    return privacy.calibration(problem.gradient_bound, problem.counts, rounds)


def resolve_gamma(matrix: np.ndarray, *, eta: float, rho: float, gamma: float | None) -> float:
    """gamma, or the smallest admissible eta rho ||A^T A|| + 1 when None; checked either way."""
    gram = spectral_norm_gram(matrix)
    if gamma is None:
        return min_gamma(eta=eta, rho=rho, gram_norm=gram)
    return check_gamma(gamma, eta=eta, rho=rho, gram_norm=gram)
