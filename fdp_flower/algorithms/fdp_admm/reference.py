"""Exact centralized reference: penalized quantile / LAD regression on pooled data.

Solves  min_w  sum_i (1/m_i) sum_j rho_tau(y_ij - a_ij.w) + lam P(w)
-- the federated objective sum_i f_i(w) -- exactly:
linear programming with SciPy's HiGHS for P in {l1, none}; a conic (QP) solve
with Clarabel for P in {l2, elastic_net} (docs/algorithms.md, eq. (1.10) and below).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import optimize, sparse

from fdp_flower.core.losses import AbsoluteLoss, QuantileLoss


class ReferenceSolveError(ValueError):
    """The exact reference could not be solved (one line, with a hint when the data's scale is the cause)."""


@dataclass(frozen=True)
class ReferenceSolution:
    w: np.ndarray
    objective: float
    solver: str


def _loss_weights(loss) -> tuple[float, float]:
    """(cost of a positive residual, cost of a negative residual)."""
    if isinstance(loss, QuantileLoss):
        return loss.tau, 1.0 - loss.tau
    if isinstance(loss, AbsoluteLoss):
        return 1.0, 1.0
    raise ValueError(f"the exact reference supports the quantile and absolute losses, not {loss.name!r}")


def pooled_objective(w, features: list[np.ndarray], responses: list[np.ndarray], loss, penalty, lam) -> float:
    """sum_i f_i(w) = sum_i (1/m_i) sum_j l(w; a_ij, y_ij) + lam P(w)."""
    total = sum(float(loss.mean(w, a, y)) for a, y in zip(features, responses))
    return total + lam * float(penalty.value(w))


def solve_reference(features: list[np.ndarray], responses: list[np.ndarray], loss, penalty,
                    lam: float) -> ReferenceSolution:
    """The exact minimizer of sum_i f_i; ``features[i]`` is client i's (m_i, K) clipped scores."""
    if len(features) != len(responses) or not features:
        raise ValueError("give one (features, response) pair per client")
    up, down = _loss_weights(loss)
    a = np.vstack(features)
    y = np.concatenate(responses)
    c = np.concatenate([np.full(len(r), 1.0 / len(r)) for r in responses])
    n, k = a.shape
    free = min(int(getattr(penalty, "unpenalized", 0)), k)  # leading coordinates outside P (an intercept)
    if penalty.kind in ("l1", "none"):
        # Dual LP (K constraints, n box-bounded variables; far faster than the primal):
        #   max_d y.d  s.t. |A_P^T d| <= lam (l1) and A_F^T d = 0 (columns outside P; all of them for none),
        #   d_j in [-c_j down, c_j up]; the primal w is minus the multiplier of the coupling constraints.
        bounds = np.c_[-down * c, up * c]
        pen = k - free if penalty.kind == "l1" else 0
        a_free, a_pen = a[:, : k - pen], a[:, k - pen:]
        res = optimize.linprog(-y, A_ub=np.vstack([a_pen.T, -a_pen.T]) if pen else None,
                               b_ub=np.full(2 * pen, lam) if pen else None,
                               A_eq=a_free.T if k - pen else None, b_eq=np.zeros(k - pen) if k - pen else None,
                               bounds=bounds, method="highs-ds")
        if res.status != 0:
            scale = max(float(np.max(np.abs(y), initial=0.0)), float(np.max(np.abs(a), initial=0.0)))
            hint = (f"; the data reach {scale:.3g} in absolute value: rescale the response (e.g. divide it by its "
                    "standard deviation) or leave the reference out (reference=False)") if scale > 1e12 else ""
            raise ReferenceSolveError(f"HiGHS failed on the exact reference LP ({res.message.split('(')[0].strip()})"
                                      + hint)
        w = np.zeros(k)
        if pen:
            mu = res.ineqlin.marginals
            w[k - pen:] = -(mu[:pen] - mu[pen:])
        if k - pen:
            w[: k - pen] = -res.eqlin.marginals
        solver = "scipy-highs-dual-lp"
    elif penalty.kind in ("l2", "elastic_net"):
        import clarabel

        eye = sparse.identity(n, format="csc")

        if penalty.kind == "l2":  # lam ||w||^2 / 2
            quad, l1 = lam, 0.0
        else:  # lam (lam2 ||w||^2 + lam1 ||w||_1)
            quad, l1 = 2.0 * lam * penalty.lam2, lam * penalty.lam1
        # variables: w (k), t (k) >= |w|, u+ (n), u- (n); the leading ``free`` coordinates are outside P
        in_p = np.r_[np.zeros(free), np.ones(k - free)]
        p = sparse.block_diag([sparse.diags(quad * in_p), sparse.csc_matrix((k + 2 * n, k + 2 * n))], format="csc")
        q = np.concatenate([np.zeros(k), l1 * in_p, up * c, down * c])
        zk = sparse.csc_matrix((n, k))
        eq = sparse.hstack([sparse.csc_matrix(a), zk, eye, -eye], format="csc")
        ik = sparse.identity(k)
        # cone rows s = b - A x >= 0:  t - w >= 0, t + w >= 0, u+ >= 0, u- >= 0
        ineq = sparse.vstack([
            sparse.hstack([ik, -ik, sparse.csc_matrix((k, 2 * n))]),
            sparse.hstack([-ik, -ik, sparse.csc_matrix((k, 2 * n))]),
            sparse.hstack([sparse.csc_matrix((2 * n, 2 * k)), -sparse.identity(2 * n)]),
        ], format="csc")
        a_all = sparse.vstack([eq, ineq], format="csc")
        b_all = np.concatenate([y, np.zeros(2 * k + 2 * n)])
        settings = clarabel.DefaultSettings()
        settings.verbose = False
        settings.tol_gap_abs = settings.tol_gap_rel = 1e-10
        settings.tol_feas = 1e-10
        solver_ = clarabel.DefaultSolver(p, q, a_all, b_all,
                                         [clarabel.ZeroConeT(n), clarabel.NonnegativeConeT(2 * k + 2 * n)],
                                         settings)
        sol = solver_.solve()
        if str(sol.status) not in ("Solved", "SolverStatus.Solved", "AlmostSolved"):
            raise RuntimeError(f"Clarabel failed on the reference QP: {sol.status}")
        w = np.asarray(sol.x[:k])
        solver = "clarabel-qp"
    else:
        raise ValueError(
            f"no exact reference for the nonconvex penalty {penalty.kind!r}; use l1, l2, elastic_net or none")
    objective = pooled_objective(w, features, responses, loss, penalty, lam)
    return ReferenceSolution(w=w, objective=objective, solver=solver)
