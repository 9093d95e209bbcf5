"""PR-ADMM (Ding et al. 2019, Algorithm 1, eqs. (12)-(15); docs/algorithms.md, section 4), one node at a time.

Node i keeps its dual alpha_i, its last release xt_i and, per neighbour j, the
deviation statistic S_ij = sum_{t <= k} ||xt_i^t - xt_j^t||.  Step k -> k+1:

- threshold (Alg. 1 lines 10-14): if S_ij > U, xt_j^k is replaced by xt_i^k in the primal step;
- primal (eq. (12)): x_i^{k+1} solves
      grad f_i(x) + alpha_i^k + 2 eta |V_i| x = eta (|V_i| xt_i^k + sum_{j in V_i} xt_j^k)
  exactly (damped Newton) when f_i is smooth, and the node releases xt_i^{k+1} = x_i^{k+1} + N(0, sigma_{i,k+1}^2 I)
  (the solve cannot be split: the node runs it on the public alpha_i and neighbour sum,
  :mod:`fdp_flower.algorithms.p2p.site`); for a nonsmooth f_i the linearized step of section 3 with prox step
  eta_k, where the node releases only its noisy descent term and the step is the relay's post-processing;
- dual (eq. (13), Alg. 1 line 24, with the raw releases): alpha_i^{k+1} = alpha_i^k
  + eta (|V_i| xt_i^{k+1} - sum_{j in V_i} xt_j^{k+1}).
"""
from __future__ import annotations

import numpy as np

from fdp_flower.algorithms.p2p.problems import loss_curvature, penalty_curvature


def update_link_statistic(link_stat, own_released, neighbour_released) -> np.ndarray:
    """S_ij += ||xt_i^t - xt_j^t|| for every neighbour j (Alg. 1 line 10)."""
    return np.asarray(link_stat, dtype=float) + np.linalg.norm(
        np.asarray(neighbour_released, dtype=float) - own_released, axis=1)


def threshold_neighbours(own_released, neighbour_released, link_stat, threshold: float) -> tuple[np.ndarray, np.ndarray]:
    """The neighbour values used in the primal step and the mask of cut links (S_ij > U).

    U = inf never cuts.  Returns (values (|V_i|, K), cut (|V_i|,) bool).
    """
    neighbour_released = np.asarray(neighbour_released, dtype=float)
    cut = np.asarray(link_stat, dtype=float) > threshold
    used = np.where(cut[:, None], own_released[None, :], neighbour_released)
    return used, cut


def _conjugate_gradient(apply, rhs, *, tol: float, max_iter: int = 500) -> np.ndarray:
    """Solve H d = rhs for a symmetric positive definite H given as a product (matrix-free).

    The Newton systems here have H between (2 eta d) I and (2 eta d + c1^2/4 + lam/N P'') I, so CG
    converges in a handful of iterations; stops at ||H d - rhs|| <= tol ||rhs||.
    """
    d = np.zeros_like(rhs)
    r = rhs.copy()
    p = r.copy()
    rr = r @ r
    stop = (tol * np.linalg.norm(rhs)) ** 2
    for _ in range(max_iter):
        if rr <= stop:
            break
        hp = apply(p)
        a = rr / (p @ hp)
        d += a * p
        r -= a * hp
        rr_new = r @ r
        p = r + (rr_new / rr) * p
        rr = rr_new
    return d


def local_solve(*, objective, start, neighbour_sum, dual, degree: int, features, response, eta: float,
                tol: float = 1e-10, max_iter: int = 50, accuracy: float | None = None) -> tuple[np.ndarray, int, float]:
    """Solve grad f_i(x) + alpha + 2 eta d x = eta b by damped Newton (eq. (12)), b = ``neighbour_sum`` =
    d xt_i + sum_j xt_j (the neighbour values after the threshold), d = ``degree``.

    The subproblem phi(x) = f_i(x) + <alpha, x> + eta d ||x||^2 - eta <b, x> is strongly convex with modulus
    2 eta d; Newton starts at ``start`` (xt_i^k, public to the node, so every engine starts alike), uses the exact
    Hessian mean_j c_j a_j a_j^T + lam/N P'' + 2 eta d I (applied matrix-free, inexact Newton-CG with forcing term
    min(1, ||grad||) 1e-3, so convergence stays superlinear) and backtracking on ||grad phi||, and stops when
    ||grad phi|| <= tol (1 + ||alpha|| + ||eta b||) (relative, so that large noisy inputs do not ask for more
    digits than float64 has) and, when ``accuracy`` is given, ||grad phi|| <= ``accuracy`` too.  Returns
    (x, Newton iterations, ||grad phi(x)||); the caller decides what an unconverged solve means.
    """
    loss, lam_n = objective.loss, objective.lam / objective.num_clients
    pen_c = penalty_curvature(objective.penalty, features.shape[-1]) * lam_n
    b = eta * np.asarray(neighbour_sum, dtype=float)
    quad = 2.0 * eta * degree
    m = features.shape[0]

    def grad(x):
        return objective.local_subgradient(x, features, response) + dual + quad * x - b

    x = np.array(start, dtype=float)
    tol = tol * (1.0 + np.linalg.norm(dual) + np.linalg.norm(b))
    if accuracy is not None:
        tol = min(tol, accuracy)
    g = grad(x)
    gn = np.linalg.norm(g)
    for it in range(max_iter):
        if gn <= tol:
            return x, it, float(gn)
        c = loss_curvature(loss, x, features, response) / m
        d = _conjugate_gradient(lambda v: features.T @ (c * (features @ v)) + (pen_c + quad) * v, -g,
                                tol=1e-3 * min(1.0, gn))
        t = 1.0
        while True:  # backtrack on the gradient norm (no cancellation in large objective values)
            x_new = x + t * d
            g_new = grad(x_new)
            gn_new = np.linalg.norm(g_new)
            if gn_new <= (1.0 - 1e-4 * t) * gn or t < 1e-6:
                break
            t *= 0.5
        x, g, gn = x_new, g_new, gn_new
    return x, max_iter, float(gn)


def exact_primal_step(*, objective, own_released, neighbour_used, dual, features, response, eta: float,
                      tol: float = 1e-10, max_iter: int = 50) -> tuple[np.ndarray, int]:
    """The noise-free solution of eq. (12) with the neighbour values ``neighbour_used`` (|V_i|, K), from the start
    xt_i^k = ``own_released`` (:func:`local_solve`; a RuntimeError when ||grad phi|| stays above 100 tol).  Returns
    (x, Newton iterations)."""
    neighbour_used = np.asarray(neighbour_used, dtype=float)
    degree = neighbour_used.shape[0]
    x, iters, gn = local_solve(objective=objective, start=own_released,
                               neighbour_sum=degree * own_released + neighbour_used.sum(axis=0), dual=dual,
                               degree=degree, features=features, response=response, eta=eta, tol=tol,
                               max_iter=max_iter)
    b = eta * (degree * own_released + neighbour_used.sum(axis=0))
    if iters == max_iter and gn > 100 * tol * (1.0 + np.linalg.norm(dual) + np.linalg.norm(b)):
        raise RuntimeError(f"PR-ADMM local Newton solve did not converge: ||grad|| = {gn:.3e}")
    return x, iters


def linearized_step_from_term(*, objective, own_released, neighbour_used, dual, descent, eta: float,
                              step: float) -> np.ndarray:
    """Nonsmooth f_i: f_i linearized at xt_i^k with prox 1/(2 eta_k) ||x - xt_i^k||^2 (docs/algorithms.md,
    section 3), from the node's descent term d_i = -(1/m_i) sum_j grad l(xt_i^k) + noise (the relay's step):
    x = (xt_i / eta_k - ((lam/N) P'(xt_i) - d_i) - alpha + eta (d xt_i + sum_j xt_j)) / (1/eta_k + 2 eta d)."""
    neighbour_used = np.asarray(neighbour_used, dtype=float)
    degree = neighbour_used.shape[0]
    penalty = (objective.lam / objective.num_clients) * objective.penalty.subgradient(own_released)
    b = eta * (degree * own_released + neighbour_used.sum(axis=0))
    return (own_released / step - (penalty - descent) - dual + b) / (1.0 / step + 2.0 * eta * degree)


def linearized_primal_step(*, objective, own_released, neighbour_used, dual, features, response, eta: float,
                           step: float) -> np.ndarray:
    """The noise-free linearized step: :func:`linearized_step_from_term` with the descent term of the rows."""
    descent = -objective.loss.mean_subgradient(own_released, features, response)
    return linearized_step_from_term(objective=objective, own_released=own_released, neighbour_used=neighbour_used,
                                     dual=dual, descent=descent, eta=eta, step=step)


def pr_dual_step(*, dual, own_released, neighbour_released, eta: float) -> np.ndarray:
    """alpha_i^{k+1} = alpha_i^k + eta (|V_i| xt_i^{k+1} - sum_j xt_j^{k+1}) (eq. (13))."""
    neighbour_released = np.asarray(neighbour_released, dtype=float)
    return dual + eta * (neighbour_released.shape[0] * own_released - neighbour_released.sum(axis=0))


def pr_sensitivity(*, gradient_bound: float, m: int, eta: float, degree: int, paper_constants: bool = False,
                   step: float | None = None) -> float:
    """l2-sensitivity of x_i^{k+1} under replace-one.

    Exact solve: the subproblem is (2 eta |V_i|)-strongly convex and one replaced sample moves
    grad f_i by at most 2 V / m_i, so Delta_i = V / (m_i eta |V_i|) (docs/algorithms.md, eq. (4.5)).  The paper's
    Lemma 5 prints V / (eta |V_i|) (``paper_constants=True``).  Linearized step (``step`` = eta_k):
    2 V / (m_i (1/eta_k + 2 eta |V_i|)) (eq. (4.6)).
    """
    if step is not None:
        return 2.0 * gradient_bound / (m * (1.0 / step + 2.0 * eta * degree))
    if paper_constants:
        return gradient_bound / (eta * degree)
    return gradient_bound / (m * eta * degree)
