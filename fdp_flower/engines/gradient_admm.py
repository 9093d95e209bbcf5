"""In-process engine of DP-ADMM / DP-AccADMM (Xu et al. 2020; docs/algorithms.md, section 5) without Flower.

Every round it calls the same functions the Flower client and strategy call
(:func:`fdp_flower.algorithms.gradient_admm.update.client_release` per client,
:func:`fdp_flower.algorithms.gradient_admm.update.aggregate_gradients` and
:func:`fdp_flower.algorithms.gradient_admm.update.server_step` on the server), and every release's
noise comes from ``release_rng(seed, client, round)``; with the same seed it
reproduces a Flower run's iterates bit for bit.  Clients are looped (their
gradients are one matrix-vector product each), so that the float operations are
exactly those of a Flower client.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

from fdp_flower.algorithms.gradient_admm.update import (
    GradientADMMState,
    Neighbouring,
    accuracy,
    aggregate_gradients,
    check_gamma,
    client_release,
    generalized_lasso_objective,
    gradient_sensitivity,
    make_releases,
    min_gamma,
    paper_initial_dual,
    release_sigma,
    server_step,
    spectral_norm_gram,
    theorem1_alpha,
)
from fdp_flower.core.clipping import clip_rows
from fdp_flower.privacy import PrivacyLedger


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
        """Clip every client's rows to ||a|| <= c1 (clip_rows) and freeze the problem."""
        if len(features) != len(responses) or not features:
            raise ValueError("give one (features, responses) pair per client")
        if lam < 0:
            raise ValueError(f"lam must be >= 0, got {lam}")
        clipped, counts = [], []
        for a in features:
            a2, k = clip_rows(a, c1)
            clipped.append(a2)
            counts.append(k)
        test = None if test_features is None else clip_rows(test_features, c1)[0]
        return cls(loss, np.asarray(matrix, dtype=float), float(lam), tuple(clipped),
                   tuple(np.asarray(r, dtype=float) for r in responses), float(c1), test,
                   None if test_labels is None else np.asarray(test_labels, dtype=float), tuple(counts))

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

    def pooled(self) -> tuple[np.ndarray, np.ndarray]:
        return np.vstack(self.client_features), np.concatenate(self.client_responses)

    def objective(self, x: np.ndarray) -> float:
        a, y = self.pooled()
        return generalized_lasso_objective(self.loss, x, a, y, self.matrix, self.lam)


@dataclass(frozen=True)
class GradientPrivacy:
    """A total (eps, delta) over ``rounds`` releases per client, calibrated by the PLD accountant, or by
    Theorem 1 of Xu et al. (2020) with ``paper_constants`` (:func:`release_sigma`)."""

    eps: float
    delta: float
    mu: float = 0.5
    neighbouring: Neighbouring = "add_remove"
    paper_constants: bool = False

    @property
    def alpha(self) -> float:
        return theorem1_alpha(self.eps, self.delta, self.mu)

    def sigma(self, sensitivity, rounds: int):
        """The noise sd of a release with ``sensitivity`` in a run of ``rounds`` releases."""
        return release_sigma(sensitivity, rounds=rounds, eps=self.eps, delta=self.delta, mu=self.mu,
                             paper_constants=self.paper_constants)


def noise_plan(problem: GradientADMMProblem, rounds: int, privacy: GradientPrivacy | None):
    """(sensitivities, sigmas) per client, or (None, None) when privacy is off."""
    if privacy is None:
        return None, None
    sens = gradient_sensitivity(problem.gradient_bound, problem.counts, privacy.neighbouring)
    return sens, privacy.sigma(sens, rounds)


@dataclass
class GradientADMMResult:
    state: GradientADMMState
    history: list[dict] = field(default_factory=list)
    ledger: PrivacyLedger = field(default_factory=PrivacyLedger)
    gamma: float = math.nan
    sigmas: np.ndarray | None = None
    sensitivities: np.ndarray | None = None
    iterates: list[np.ndarray] = field(default_factory=list)

    def first_round_below(self, key: str, level: float) -> int | None:
        for row in self.history:
            if row.get(key, math.inf) <= level:
                return int(row["round"])
        return None


def resolve_gamma(problem: GradientADMMProblem, *, eta: float, rho: float, gamma: float | None) -> float:
    """gamma, or the smallest admissible eta rho ||A^T A|| + 1 when None; checked either way."""
    gram = spectral_norm_gram(problem.matrix)
    if gamma is None:
        return min_gamma(eta=eta, rho=rho, gram_norm=gram)
    return check_gamma(gamma, eta=eta, rho=rho, gram_norm=gram)


def run_gradient_admm(problem: GradientADMMProblem, *, rounds: int, rho: float, eta: float,
                      gamma: float | None = None, accelerated: bool = False, restart: bool = False,
                      privacy: GradientPrivacy | None = None, seed: int = 0, init_dual: str = "zero",
                      reference_objective: float | None = None, eval_every: int = 1,
                      keep_iterates: bool = False) -> GradientADMMResult:
    """Run DP-ADMM (``accelerated=False``) or DP-AccADMM on ``problem`` for ``rounds`` iterations.

    Parameters
    ----------
    rounds : int
        T, also the number of releases Theorem 1 calibrates for.
    rho, eta : float
        ADMM penalty and step size.
    gamma : float or None
        Proximal weight; None takes eta rho ||A^T A|| + 1 (default: None).
    accelerated, restart : bool
        DP-AccADMM, and its adaptive restart (default: False, False).
    privacy : GradientPrivacy or None
        None runs the non-private ADMM / AccADMM (default: None).
    seed : int
        Run seed of the per-release noise generators (default: 0).
    init_dual : {"zero", "paper"}
        u_0 = 0, or the paper's u_0 = -(A^T)^+ grad f(x_0) / rho (non-private runs only) (default: "zero").
    reference_objective : float or None
        F(x*) for the relative gap column (default: None).
    eval_every : int
        Evaluate metrics every this many rounds (and at the last) (default: 1).
    """
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    if not (rho > 0 and eta > 0):
        raise ValueError(f"rho and eta must be > 0, got rho={rho}, eta={eta}")
    if init_dual not in ("zero", "paper"):
        raise ValueError(f"init_dual must be 'zero' or 'paper', got {init_dual!r}")
    if init_dual == "paper" and privacy is not None:
        raise ValueError("init_dual='paper' releases grad f(x_0) without noise; use 'zero' when privacy is on")
    gam = resolve_gamma(problem, eta=eta, rho=rho, gamma=gamma)
    sens, sig = noise_plan(problem, rounds, privacy)
    matrix = problem.matrix
    u0 = None
    if init_dual == "paper":
        g0 = aggregate_gradients(np.stack([problem.loss.mean_subgradient(np.zeros(problem.dim), a, y)
                                           for a, y in zip(problem.client_features, problem.client_responses)]),
                                 problem.counts)
        u0 = paper_initial_dual(matrix, g0, rho)
    state = GradientADMMState.initial(problem.dim, matrix.shape[0], u0)
    result = GradientADMMResult(state=state, gamma=gam, sigmas=sig, sensitivities=sens)
    pooled_a, pooled_y = problem.pooled()
    elapsed = 0.0
    for t in range(1, rounds + 1):
        t0 = time.perf_counter()
        grads = np.stack([
            client_release(loss=problem.loss, x_hat=state.x_hat, features=a, response=y,
                           sigma=None if sig is None else float(sig[i]), seed=seed, client=i, round_=t)
            for i, (a, y) in enumerate(zip(problem.client_features, problem.client_responses))])
        if sig is not None:  # the noise has been added: now record
            result.ledger.record_many(make_releases(round_=t, sensitivities=sens, sigmas=sig,
                                                    neighbouring=privacy.neighbouring))
        grad = aggregate_gradients(grads, problem.counts)
        state = server_step(state, grad, matrix, lam=problem.lam, rho=rho, eta=eta, gamma=gam,
                            accelerated=accelerated, restart=restart)
        elapsed += time.perf_counter() - t0
        if keep_iterates:
            result.iterates.append(state.x.copy())
        if t % eval_every == 0 or t == rounds:
            obj = generalized_lasso_objective(problem.loss, state.x, pooled_a, pooled_y, matrix, problem.lam)
            row = {"round": t, "time": elapsed, "objective": obj}
            if reference_objective is not None:
                row["gap"] = obj - reference_objective
                row["relative_gap"] = (obj - reference_objective) / abs(reference_objective)
            if problem.test_features is not None:
                row["test_accuracy"] = accuracy(state.x, problem.test_features, problem.test_labels)
            row["train_accuracy"] = accuracy(state.x, pooled_a, pooled_y)
            result.history.append(row)
    result.state = state
    return result


def split_clients(features: np.ndarray, labels: np.ndarray, num_clients: int, rng: np.random.Generator):
    """A random partition of the rows into ``num_clients`` near-equal parts (explicit generator)."""
    if not 1 <= num_clients <= len(labels):
        raise ValueError(f"num_clients must be in [1, {len(labels)}], got {num_clients}")
    parts = np.array_split(rng.permutation(len(labels)), num_clients)
    return [features[p] for p in parts], [labels[p] for p in parts]


# ---------------------------------------------------------------- scenarios
@dataclass(frozen=True)
class ScenarioData:
    """Raw (unclipped) client partitions, test set and constraint matrix of a scenario."""

    features: tuple[np.ndarray, ...]
    labels: tuple[np.ndarray, ...]
    test_features: np.ndarray | None
    test_labels: np.ndarray | None
    matrix: np.ndarray


def load_scenario_data(scenario) -> ScenarioData:
    """Load the data source of a :class:`~fdp_flower.algorithms.gradient_admm.config.GradientADMMScenario`, split it
    over the clients (seeded by ``scenario.seed``) and build A.  Deterministic: every engine, and every
    Flower node, gets the same partitions.

    A = [W; I] is estimated on the pooled training rows (non-private, as in Xu et al. (2020)).
    A caller's arrays (``data.kind: arrays``) come already split, one file per client; with
    ``data.intercept`` every row gets the intercept column of
    :func:`fdp_flower.core.clipping.intercept_design` and A a zero column for it (the intercept
    is outside the penalty lam ||A x||_1).
    """
    from fdp_flower.data import adult_a9a, load_breast_cancer_binary, train_test_split_binary
    from fdp_flower.privacy.mechanisms import DATA_STREAM

    data_rng = np.random.default_rng(np.random.SeedSequence(scenario.seed, spawn_key=(DATA_STREAM,)))
    src = scenario.data
    if src.kind == "arrays":
        return _arrays_scenario_data(scenario)
    if src.kind == "adult_a9a":
        # rows are divided by sqrt(14) (public) when normalise is set; clipping to c1 is the client's
        split = adult_a9a(src.path, c1=1e300, normalise=src.normalise)
        x_tr, y_tr = split.x_train, split.y_train
        if src.train_subsample is not None and src.train_subsample < len(y_tr):
            keep = np.sort(data_rng.choice(len(y_tr), size=src.train_subsample, replace=False))
            x_tr, y_tr = x_tr[keep], y_tr[keep]
        x_te, y_te = split.x_test, split.y_test
    elif src.kind == "breast_cancer":
        x, y = load_breast_cancer_binary()
        split = train_test_split_binary(x, y, test_fraction=src.test_fraction, rng=data_rng)
        x_tr, y_tr, x_te, y_te = split.x_train, split.y_train, split.x_test, split.y_test
    else:  # pragma: no cover - the config union forbids it
        raise ValueError(f"unknown data source {src.kind!r}")
    matrix = constraint_matrix(scenario, x_tr)
    fa, fy = split_clients(x_tr, y_tr, scenario.federation.num_clients, data_rng)
    return ScenarioData(tuple(fa), tuple(fy), x_te, y_te, matrix)


def constraint_matrix(scenario, features: np.ndarray) -> np.ndarray:
    """A of ``model.constraint`` for rows ``features`` (n, d) (graph-guided: estimated on them, clipped to c1)."""
    from fdp_flower.algorithms.gradient_admm.update import graph_guided_matrix, lasso_matrix

    con = scenario.model.constraint
    if con.kind == "graph_guided":
        return graph_guided_matrix(clip_rows(features, scenario.model.clip_c1)[0], alpha=con.alpha,
                                   max_iter=con.max_iter)
    if con.kind == "lasso":
        return lasso_matrix(features.shape[1])
    return load_matrix(con.path, features.shape[1])


def _arrays_scenario_data(scenario) -> ScenarioData:
    from fdp_flower.core.clipping import intercept_design
    from fdp_flower.data.tabular import read_arrays_file

    src, c1 = scenario.data, scenario.model.clip_c1
    parts = [read_arrays_file(p, None if src.digests is None else src.digests[i]) for i, p in enumerate(src.paths)]
    dims = {a.shape[1] for a, _ in parts}
    if len(dims) != 1:
        raise ValueError(f"data.paths: the clients' files have different numbers of features {sorted(dims)}")
    if scenario.model.loss.kind == "logistic" and not all(np.all(np.isin(y, (-1.0, 1.0))) for _, y in parts):
        raise ValueError("data.paths: the logistic loss needs labels in {-1, +1}")
    test = read_arrays_file(src.test_path) if src.test_path else None
    if not src.intercept:
        matrix = constraint_matrix(scenario, np.vstack([a for a, _ in parts]))
        return ScenarioData(tuple(a for a, _ in parts), tuple(y for _, y in parts),
                            None if test is None else test[0], None if test is None else test[1], matrix)
    room = c1 * float(np.sqrt(1.0 - src.intercept_share ** 2))
    scores = np.vstack([clip_rows(a, room)[0] for a, _ in parts])
    matrix = constraint_matrix(scenario, scores)
    matrix = np.hstack([np.zeros((matrix.shape[0], 1)), matrix])  # the intercept is outside ||A x||_1
    features = tuple(intercept_design(a, c1, src.intercept_share)[0] for a, _ in parts)
    test_x = None if test is None else intercept_design(test[0], c1, src.intercept_share)[0]
    return ScenarioData(features, tuple(y for _, y in parts), test_x, None if test is None else test[1], matrix)


def load_matrix(path: str, dim: int) -> np.ndarray:
    """A user-given constraint matrix from .npy or .csv; it must have ``dim`` columns."""
    from pathlib import Path

    p = Path(path)
    if not p.is_file():
        raise ValueError(f"{p}: constraint matrix file not found")
    matrix = np.load(p) if p.suffix == ".npy" else np.loadtxt(p, delimiter=",", ndmin=2)
    matrix = np.atleast_2d(np.asarray(matrix, dtype=float))
    if matrix.shape[1] != dim or not np.all(np.isfinite(matrix)):
        raise ValueError(f"{p}: A must be finite with {dim} columns, got shape {matrix.shape}")
    return matrix


def build_problem(scenario, data: ScenarioData | None = None) -> GradientADMMProblem:
    """The federated problem of a scenario (clients' rows clipped to c1)."""
    from fdp_flower.core.losses import make_loss

    data = load_scenario_data(scenario) if data is None else data
    lc = scenario.model.loss
    loss = make_loss(lc.kind, tau=lc.tau, residual_bound=lc.residual_bound)
    return GradientADMMProblem.from_clients(loss=loss, matrix=data.matrix, lam=scenario.model.lam,
                                            features=list(data.features), responses=list(data.labels),
                                            c1=scenario.model.clip_c1, test_features=data.test_features,
                                            test_labels=data.test_labels)


def scenario_privacy(scenario) -> GradientPrivacy | None:
    p, alg = scenario.privacy, scenario.algorithm
    if not p.enabled:
        return None
    return GradientPrivacy(eps=p.eps, delta=p.delta, mu=alg.mu, neighbouring=alg.neighbouring,
                           paper_constants=p.paper_constants)


def run_scenario(scenario, *, with_reference: bool = True, eval_every: int = 1,
                 keep_iterates: bool = False) -> tuple[GradientADMMResult, GradientADMMProblem, float | None]:
    """Run a scenario in process; returns (result, problem, reference objective or None)."""
    from fdp_flower.algorithms.gradient_admm.reference import solve_generalized_lasso

    problem = build_problem(scenario)
    ref = None
    if with_reference:
        a, y = problem.pooled()
        ref = solve_generalized_lasso(problem.loss, a, y, problem.matrix, problem.lam).objective
    alg = scenario.algorithm
    res = run_gradient_admm(problem, rounds=alg.rounds, rho=alg.rho, eta=alg.eta, gamma=alg.gamma,
                            accelerated=alg.kind == "dp_acc_admm", restart=getattr(alg, "restart", False),
                            privacy=scenario_privacy(scenario), seed=scenario.seed, init_dual=alg.init_dual,
                            reference_objective=ref, eval_every=eval_every, keep_iterates=keep_iterates)
    return res, problem, ref
