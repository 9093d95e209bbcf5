"""DP-ADMM and DP-AccADMM by gradient perturbation (Xu et al. 2020; docs/algorithms.md, section 5), federated form.

Problem (Xu et al. 2020, eq. (2) and (11)): min_x f(x) + g(y) s.t. A x + B y = c with
B = -I, c = 0, g(y) = lam ||y||_1, so that the problem is the generalized lasso

    min_x  F(x) = f(x) + lam ||A x||_1,      f(x) = sum_i (m_i / n) f_i(x),

f_i(x) = (1/m_i) sum_j l(x; a_ij, y_ij) the mean loss of client i.  A = [W; I] is
the graph-guided fused lasso, A = I the lasso, any other A is user-given.

Iteration t (Xu et al. 2020, Algorithm 2 and 3; docs/algorithms.md, section 5):

* y_t = argmin_y g(y) + (rho/2) ||A xh_{t-1} - y + uh_{t-1}||^2 = S_{lam/rho}(A xh_{t-1} + uh_{t-1})
  (eq. (3), soft-thresholding for B = -I);
* client i releases grad_i = grad f_i(xh_{t-1}) + N(0, s_i^2 I) (gradient perturbation; its site
  function, :mod:`fdp_flower.algorithms.gradient_admm.site`), the server forms grad = sum_i (m_i / n) grad_i;
* x_t = xh_{t-1} - (eta/gam) (grad + rho A^T (A xh_{t-1} - y_t + uh_{t-1})) (closed form of eq. (7),
  with G = gam I - eta rho A^T A and gam >= eta rho ||A^T A||_2 + 1 so that G >= I);
* u_t = uh_{t-1} + A x_t - y_t (eq. (5));
* DP-ADMM: xh_t = x_t, uh_t = u_t.  DP-AccADMM (Algorithm 3, steps 5-7):
  theta_{t+1} = (1 + sqrt(1 + 4 theta_t^2)) / 2, xh_t = x_t + ((theta_t - 1)/theta_{t+1}) (x_t - x_{t-1}),
  uh_t likewise.

Noise (Theorem 1, eq. (8)): sigma^2 = Delta^2 alpha T / (2 eps mu) with alpha = ln(1/delta)/((1 - mu) eps) + 1.
The paper's Delta = c/n would be the add/remove sensitivity of a *sum* divided by a fixed n; the
released mean divides by the record count, so adding or removing a record also changes the
denominator and the sensitivity is 2c/m under both relations (:func:`gradient_sensitivity`).  In the
federated (local-DP) form every client calibrates with its own m_i.

All functions are pure numpy and draw no noise: the only code that draws it is the site function
(:mod:`fdp_flower.algorithms.gradient_admm.site`); the server's side of a round is
:mod:`fdp_flower.algorithms.gradient_admm.protocol`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from fdp_flower.privacy import GaussianRelease, PrivacyLedger

Neighbouring = Literal["replace_one", "add_remove"]
MECHANISM = "gaussian_gradient"


# ---------------------------------------------------------------- primitives
def soft_threshold(v: np.ndarray, threshold: float) -> np.ndarray:
    """S_k(v) = sign(v) max(|v| - k, 0), the prox of k ||.||_1 (Donoho 1995; Xu et al. (2020) ref. [44])."""
    if threshold < 0:
        raise ValueError(f"threshold must be >= 0, got {threshold}")
    return np.sign(v) * np.maximum(np.abs(v) - threshold, 0.0)


def y_update(matrix: np.ndarray, x_hat: np.ndarray, u_hat: np.ndarray, *, lam: float, rho: float) -> np.ndarray:
    """y_t = S_{lam/rho}(A xh_{t-1} + uh_{t-1}) (docs/algorithms.md, eq. (5.2);
    Xu et al. 2020, eq. (3) with g = lam ||.||_1, B = -I, c = 0)."""
    if not rho > 0:
        raise ValueError(f"rho must be > 0, got {rho}")
    return soft_threshold(matrix @ x_hat + u_hat, lam / rho)


def spectral_norm_gram(matrix: np.ndarray) -> float:
    """||A^T A||_2 = largest singular value of A, squared."""
    matrix = np.asarray(matrix, dtype=float)
    if matrix.size == 0:
        return 0.0
    return float(np.linalg.norm(matrix, 2) ** 2)


def min_gamma(*, eta: float, rho: float, gram_norm: float) -> float:
    """gam_min = eta rho ||A^T A||_2 + 1, the smallest gam with G = gam I - eta rho A^T A >= I
    (Xu et al. 2020, below eq. (7))."""
    return eta * rho * gram_norm + 1.0


def check_gamma(gamma: float, *, eta: float, rho: float, gram_norm: float) -> float:
    """Return ``gamma`` if gam >= eta rho ||A^T A|| + 1, else raise ``ValueError``.

    The paper's experiments use gam = 1, which violates the condition of its own
    analysis whenever rho > 0; we refuse it (docs/algorithms.md, section 5).
    """
    need = min_gamma(eta=eta, rho=rho, gram_norm=gram_norm)
    if not gamma >= need * (1 - 1e-12):
        raise ValueError(
            f"gamma = {gamma:g} violates gamma >= eta rho ||A^T A|| + 1 = {need:g} "
            f"(eta = {eta:g}, rho = {rho:g}, ||A^T A|| = {gram_norm:g})")
    return gamma


def x_update(matrix: np.ndarray, x_hat: np.ndarray, gradient: np.ndarray, y: np.ndarray, u_hat: np.ndarray, *,
             rho: float, eta: float, gamma: float) -> np.ndarray:
    """x_t = xh_{t-1} - (eta/gam) [grad + rho A^T (A xh_{t-1} - y_t + uh_{t-1})]
    (docs/algorithms.md, eq. (5.4);
    Xu et al. 2020, closed form of eq. (7), B = -I, c = 0); ``gradient`` is the noisy aggregate."""
    residual = matrix @ x_hat - y + u_hat
    return x_hat - (eta / gamma) * (gradient + rho * (matrix.T @ residual))


def dual_update(matrix: np.ndarray, u_hat: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """u_t = uh_{t-1} + A x_t - y_t (docs/algorithms.md, eq. (5.5); Xu et al. 2020, eq. (5), scaled dual)."""
    return u_hat + matrix @ x - y


def next_theta(theta: float) -> float:
    """theta_{t+1} = (1 + sqrt(1 + 4 theta_t^2)) / 2 (Xu et al. 2020, Algorithm 3 step 5; theta_1 = 1)."""
    return 0.5 * (1.0 + math.sqrt(1.0 + 4.0 * theta * theta))


def extrapolate(current: np.ndarray, previous: np.ndarray, theta: float, theta_next: float) -> np.ndarray:
    """xh_t = x_t + ((theta_t - 1)/theta_{t+1}) (x_t - x_{t-1}) (Xu et al. 2020, eq. (10), Alg. 3 steps 6-7)."""
    return current + ((theta - 1.0) / theta_next) * (current - previous)


def aggregate_gradients(gradients: np.ndarray, counts) -> np.ndarray:
    """grad = sum_i (m_i / n) grad_i, n = sum_i m_i; ``gradients`` (M, d), ``counts`` (M,)."""
    counts = np.asarray(counts, dtype=float)
    if gradients.shape[0] != counts.shape[0] or np.any(counts <= 0):
        raise ValueError("give one positive sample count per client gradient")
    return (counts / counts.sum()) @ np.asarray(gradients, dtype=float)


# ---------------------------------------------------------------- privacy (Theorem 1)
def gradient_sensitivity(gradient_bound: float, m, neighbouring: Neighbouring = "add_remove"):
    """l2-sensitivity of the mean gradient q(D) = (1/|D|) sum_{d in D} grad l(x; d), ||grad l|| <= c,
    at the site's m = |D|.  It is 2c/m under both relations (derivation below, one equation each).

    replace-one (|D'| = m):  q(D') - q(D) = (g' - g) / m, so ||.|| <= 2c/m.
    add/remove, D = D' + {d} (|D'| = m - 1):  q(D) - q(D') = (g_d - q(D')) / m, so ||.|| <= 2c/m;
    D' = D + {d} (|D'| = m + 1):  q(D') - q(D) = (g_d - q(D)) / (m + 1), so ||.|| <= 2c/(m + 1).
    The worst neighbour is the removal: 2c/m, attained by g_d = c e and every other g = -c e.
    The paper's Delta(q) = c/n (proof of Theorem 1) holds only for a sum over a fixed public n and
    is not used.  ``m`` may be an array (one per client); sigma is a function of the public m_i.
    """
    if not gradient_bound > 0:
        raise ValueError(f"gradient bound c must be > 0, got {gradient_bound}")
    if neighbouring not in ("add_remove", "replace_one"):
        raise ValueError(f"neighbouring must be 'add_remove' or 'replace_one', got {neighbouring!r}")
    m = np.asarray(m, dtype=float)
    if np.any(m < 1):
        raise ValueError("sample counts must be >= 1")
    return 2.0 * gradient_bound / m


def paper_sensitivity(gradient_bound: float, m):
    """The paper's Delta(q) = c/n (Xu et al. 2020, proof of Theorem 1): half of :func:`gradient_sensitivity`,
    not a valid bound for the released mean; used only to print the paper's own figure."""
    return 0.5 * gradient_sensitivity(gradient_bound, m)


def theorem1_alpha(eps: float, delta: float, mu: float) -> float:
    """alpha = ln(1/delta) / ((1 - mu) eps) + 1 (Xu et al. 2020, eq. (13))."""
    _check_budget(eps, delta, mu)
    return math.log(1.0 / delta) / ((1.0 - mu) * eps) + 1.0


def theorem1_sigma(sensitivity, *, rounds: int, eps: float, delta: float, mu: float = 0.5):
    """sigma with sigma^2 = Delta^2 alpha T / (2 eps mu) (docs/algorithms.md, eq. (5.7);
    Xu et al. 2020, Theorem 1, eq. (8)).

    With the paper's Delta = c/n this is the printed c^2 alpha T / (2 n^2 eps mu); the project
    passes the valid 2c/m (:func:`gradient_sensitivity`), i.e. twice the printed sigma.
    The T releases then compose to (alpha, mu eps)-RDP, i.e. (eps, delta)-DP by
    Lemma 1, under the neighbouring relation that ``sensitivity`` was computed for.
    """
    if rounds < 1:
        raise ValueError(f"rounds T must be >= 1, got {rounds}")
    alpha = theorem1_alpha(eps, delta, mu)
    return np.asarray(sensitivity, dtype=float) * math.sqrt(alpha * rounds / (2.0 * eps * mu))


@dataclass(frozen=True)
class GradientPrivacy:
    """Theorem 1 of Xu et al. (2020): a total (eps, delta) over a run's T releases per client, the split
    mu and the neighbouring relation the guarantee is stated for."""

    eps: float
    delta: float
    mu: float = 0.5
    neighbouring: Neighbouring = "add_remove"

    @property
    def alpha(self) -> float:
        return theorem1_alpha(self.eps, self.delta, self.mu)

    def calibration(self, gradient_bound: float, m, rounds: int):
        """(Delta_i, sigma_i) of a client of size ``m`` (or an array of sizes) in a run of ``rounds`` releases:
        Delta_i = 2c/m_i (:func:`gradient_sensitivity`) and Theorem 1's sigma_i (:func:`theorem1_sigma`)."""
        sensitivity = gradient_sensitivity(gradient_bound, m, self.neighbouring)
        return sensitivity, theorem1_sigma(sensitivity, rounds=rounds, eps=self.eps, delta=self.delta, mu=self.mu)


def _check_budget(eps: float, delta: float, mu: float) -> None:
    if not (eps > 0 and math.isfinite(eps)):
        raise ValueError(f"eps must be finite and > 0, got {eps}")
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta}")
    if not 0 < mu < 1:
        raise ValueError(f"mu must be in (0, 1), got {mu}")


def theorem1_epsilon(releases, *, delta: float, alpha: float) -> float:
    """eps of the composed releases by RDP at one fixed order alpha and Lemma 1:
    sum_t alpha Delta_t^2 / (2 sigma_t^2) + ln(1/delta)/(alpha - 1) (the paper's closed-form route).

    With Theorem 1's sigma, the same sensitivities and the paper's alpha this returns exactly
    the target eps.
    """
    if not alpha > 1:
        raise ValueError(f"alpha must be > 1, got {alpha}")
    rdp = sum(alpha * r.sensitivity**2 / (2.0 * r.sigma**2) for r in releases)
    return float(rdp + math.log(1.0 / delta) / (alpha - 1.0))


def under_neighbouring(ledger: PrivacyLedger, neighbouring: Neighbouring) -> PrivacyLedger:
    """The same releases re-expressed under another neighbouring relation (a new ledger).

    ``gaussian_gradient`` releases keep their sensitivity (2c/m under both relations,
    :func:`gradient_sensitivity`) and sigma and are relabelled; other releases are copied unchanged.
    """
    return PrivacyLedger([r.under(neighbouring) if r.mechanism == MECHANISM else r for r in ledger.releases])


@dataclass(frozen=True)
class NeighbouringReport:
    """What a client's releases mean under one neighbouring relation."""

    neighbouring: Neighbouring
    client: int
    releases: int
    delta: float
    eps_theorem1: float | None  # fixed-alpha RDP route of the paper (None without alpha)
    eps_rdp: float  # dp_accounting RDP accountant (optimises the order)
    eps_zcdp: float  # zCDP + Bun & Steinke conversion
    eps_pld: float | None


def privacy_report(ledger: PrivacyLedger, *, delta: float, alpha: float | None = None,
                   with_pld: bool = False) -> list[NeighbouringReport]:
    """The worst client's spend under add/remove AND replace-one neighbours (equal for
    ``gaussian_gradient`` releases, whose sensitivity is 2c/m under both)."""
    reports = []
    if not ledger.releases:
        return reports
    for relation in ("add_remove", "replace_one"):
        view = under_neighbouring(ledger, relation)
        worst = max(view.clients, key=view.zcdp_rho)
        s = view.summary(worst, delta, with_pld=with_pld)
        eps_t1 = theorem1_epsilon(view.of_client(worst), delta=delta, alpha=alpha) if alpha is not None else None
        reports.append(NeighbouringReport(relation, worst, s.releases, delta, eps_t1, s.eps_rdp, s.eps_zcdp,
                                          s.eps_pld))
    return reports


# ---------------------------------------------------------------- objective, metrics
def generalized_lasso_objective(loss, x: np.ndarray, features: np.ndarray, response: np.ndarray,
                                matrix: np.ndarray, lam: float) -> float:
    """F(x) = (1/n) sum_j l(x; a_j, y_j) + lam ||A x||_1 on the pooled data."""
    return float(loss.mean(x, features, response)) + lam * float(np.abs(matrix @ x).sum())


def accuracy(x: np.ndarray, features: np.ndarray, labels: np.ndarray) -> float:
    """Share of sign(a.x) == y (a.x = 0 counts as +1)."""
    pred = np.where(features @ x >= 0, 1.0, -1.0)
    return float(np.mean(pred == labels))


# ---------------------------------------------------------------- constraint matrices
def graph_guided_matrix(features: np.ndarray, *, alpha: float = 0.1, max_iter: int = 200,
                        threshold: float = 1e-8, include_identity: bool = True) -> np.ndarray:
    """A = [W; I] with W the edge matrix of the graph of a sparse inverse covariance.

    The precision matrix Theta is estimated by scikit-learn's GraphicalLasso on
    the standardized columns (El Ghaoui et al.; Xu et al. (2020) ref. [47]); every edge
    (j, k), j < k, with |Theta_jk| > threshold gives a row e_j - s_jk e_k of W,
    s_jk = sign of the partial correlation -Theta_jk (graph-guided fused lasso,
    Kim et al. 2009).  Constant columns get no edges.  Note: W is a function of
    the data it is estimated on and is *not* privatized (as in the paper).
    """
    from sklearn.covariance import GraphicalLasso

    features = np.asarray(features, dtype=float)
    d = features.shape[1]
    std = features.std(axis=0)
    live = np.nonzero(std > 1e-12)[0]
    z = (features[:, live] - features[:, live].mean(axis=0)) / std[live]
    cov = np.cov(z, rowvar=False) + 1e-6 * np.eye(len(live))
    model = GraphicalLasso(alpha=alpha, max_iter=max_iter, covariance="precomputed", tol=1e-4,
                           enet_tol=1e-4, mode="cd")
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", category=Warning)  # ConvergenceWarning: pattern is enough
        model.fit(cov)
    theta = model.precision_
    rows = []
    for a in range(len(live)):
        for b in range(a + 1, len(live)):
            if abs(theta[a, b]) > threshold:
                row = np.zeros(d)
                row[live[a]] = 1.0
                row[live[b]] = np.sign(theta[a, b])  # e_j - sign(-Theta_jk) e_k
                rows.append(row)
    w = np.array(rows).reshape(-1, d)
    return np.vstack([w, np.eye(d)]) if include_identity else w


def lasso_matrix(dim: int) -> np.ndarray:
    """A = I: the plain lasso."""
    return np.eye(dim)


# ---------------------------------------------------------------- server state
@dataclass(frozen=True)
class GradientADMMState:
    """Server state of DP-(Acc)ADMM after ``round`` iterations (x_0 = 0, u_0 = 0, theta_1 = 1)."""

    round: int
    x: np.ndarray
    y: np.ndarray
    u: np.ndarray
    x_hat: np.ndarray
    u_hat: np.ndarray
    theta: float = 1.0
    restarts: int = 0
    residual: float = math.inf  # restart statistic <xh_{t-1} - x_t, x_t - x_{t-1}> of the last step
    sum_x: np.ndarray | None = field(default=None)

    @classmethod
    def initial(cls, dim: int, rows: int, u0: np.ndarray | None = None) -> "GradientADMMState":
        x = np.zeros(dim)
        u = np.zeros(rows) if u0 is None else np.asarray(u0, dtype=float).copy()
        return cls(0, x, np.zeros(rows), u, x.copy(), u.copy(), 1.0, 0, math.inf, np.zeros(dim))

    @property
    def average_x(self) -> np.ndarray:
        """x~ = (1/T) sum_t x_t (the point of Xu et al. (2020), Theorem 2)."""
        return self.sum_x / max(self.round, 1)

    def to_arrays(self) -> dict[str, np.ndarray]:
        return {"round": np.array(self.round), "x": self.x, "y": self.y, "u": self.u, "x_hat": self.x_hat,
                "u_hat": self.u_hat, "theta": np.array(self.theta), "restarts": np.array(self.restarts),
                "residual": np.array(self.residual), "sum_x": self.sum_x}

    @classmethod
    def from_arrays(cls, arrays) -> "GradientADMMState":
        f = {k: np.asarray(arrays[k], dtype=float) for k in ("x", "y", "u", "x_hat", "u_hat", "sum_x")}
        return cls(int(arrays["round"]), f["x"], f["y"], f["u"], f["x_hat"], f["u_hat"], float(arrays["theta"]),
                   int(arrays["restarts"]), float(arrays["residual"]), f["sum_x"])


def server_y_step(state: GradientADMMState, matrix: np.ndarray, *, lam: float, rho: float) -> np.ndarray:
    """y_t from (xh_{t-1}, uh_{t-1}); the server computes it before (or while) clients compute gradients."""
    return y_update(matrix, state.x_hat, state.u_hat, lam=lam, rho=rho)


def server_step(state: GradientADMMState, gradient: np.ndarray, matrix: np.ndarray, *, lam: float, rho: float,
                eta: float, gamma: float, accelerated: bool, restart: bool = False) -> GradientADMMState:
    """One full server iteration given the aggregated (noisy) gradient at xh_{t-1}.

    y-update (eq. 3), linearized x-update (eq. 7), dual update (eq. 5), and for
    DP-AccADMM the Nesterov extrapolation of x and u (Algorithm 3, steps 5-7).
    ``restart``: the gradient-based adaptive restart of O'Donoghue & Candes (2015):
    if the momentum points against the last step, <xh_{t-1} - x_t, x_t - x_{t-1}> > 0,
    theta resets to 1 and no extrapolation is made this step.  It uses only the
    server's own iterates (post-processing of released values, no privacy cost).
    """
    y = y_update(matrix, state.x_hat, state.u_hat, lam=lam, rho=rho)
    x = x_update(matrix, state.x_hat, gradient, y, state.u_hat, rho=rho, eta=eta, gamma=gamma)
    u = dual_update(matrix, state.u_hat, x, y)
    t = state.round + 1
    sum_x = state.sum_x + x
    if not accelerated:
        return GradientADMMState(t, x, y, u, x, u, 1.0, 0, math.inf, sum_x)
    theta, restarts = state.theta, state.restarts
    residual = float(np.dot(state.x_hat - x, x - state.x))
    if restart and t > 1 and residual > 0:
        return GradientADMMState(t, x, y, u, x.copy(), u.copy(), 1.0, restarts + 1, residual, sum_x)
    theta_next = next_theta(theta)
    x_hat = extrapolate(x, state.x, theta, theta_next)
    u_hat = extrapolate(u, state.u, theta, theta_next)
    return GradientADMMState(t, x, y, u, x_hat, u_hat, theta_next, restarts, residual, sum_x)


def paper_initial_dual(matrix: np.ndarray, gradient: np.ndarray, rho: float) -> np.ndarray:
    """u_0 = -(1/rho) (A^T)^+ grad f(x_0) (Xu et al. 2020, Algorithm 2/3 input).

    A noise-free function of the data: only for non-private runs (docs/algorithms.md, section 5).
    """
    sol, *_ = np.linalg.lstsq(matrix.T, gradient, rcond=None)
    return -sol / rho


def make_releases(*, round_: int, sensitivities, sigmas, neighbouring: Neighbouring) -> list[GaussianRelease]:
    """The ledger events of one round (one per client); record them only after the noise was added."""
    return [GaussianRelease(client=i, round=round_, sensitivity=float(s), sigma=float(g),
                            neighbouring=neighbouring, mechanism=MECHANISM)
            for i, (s, g) in enumerate(zip(np.atleast_1d(sensitivities), np.atleast_1d(sigmas)))]
