"""Convex reference for the generalized lasso of DP-ADMM (Xu et al. 2020, eq. (11); docs/algorithms.md, section 5).

Solves  min_x  (1/n) sum_j l(x; a_j, y_j) + lam ||A x||_1  on the pooled data with
Clarabel (an interior-point conic solver):

* logistic loss: t_j >= log(1 + exp(-y_j a_j.x)) as two exponential cones per
  distinct row, exp(-t_j) + exp(-y_j a_j.x - t_j) <= 1;
* quantile / absolute loss: the linear program of the check loss;
* ||A x||_1 by r >= |A x| (2p linear inequalities).

Identical (a, y) rows are merged with their counts as weights (a9a has many),
which leaves the objective unchanged.  :func:`optimality_residual` checks the
subgradient optimality condition 0 in grad f(x) + lam A^T v, v in d||.||_1(A x).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import optimize, sparse

from fdp_flower.core.losses import AbsoluteLoss, LogisticLoss, QuantileLoss


@dataclass(frozen=True)
class GeneralizedLassoSolution:
    x: np.ndarray
    objective: float
    solver: str
    status: str


def _merge_rows(features: np.ndarray, response: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    stacked = np.hstack([features, response[:, None]])
    uniq, counts = np.unique(stacked, axis=0, return_counts=True)
    return uniq[:, :-1], uniq[:, -1], counts / counts.sum()


def _solve(p_mat, q, a_mat, b, cones, tol: float):
    import clarabel

    settings = clarabel.DefaultSettings()
    settings.verbose = False
    settings.tol_gap_abs = settings.tol_gap_rel = tol
    settings.tol_feas = tol
    settings.max_iter = 400
    sol = clarabel.DefaultSolver(p_mat, q, a_mat, b, cones, settings).solve()
    status = str(sol.status).split(".")[-1]
    if status not in ("Solved", "AlmostSolved"):
        raise RuntimeError(f"Clarabel failed on the generalized-lasso reference: {status}")
    return np.asarray(sol.x), status


def solve_generalized_lasso(loss, features: np.ndarray, response: np.ndarray, matrix: np.ndarray, lam: float,
                            *, tol: float = 1e-10) -> GeneralizedLassoSolution:
    """The minimizer of (1/n) sum_j l(x; a_j, y_j) + lam ||A x||_1 (logistic, quantile or absolute loss)."""
    features = np.asarray(features, dtype=float)
    response = np.asarray(response, dtype=float)
    matrix = np.asarray(matrix, dtype=float)
    if lam < 0:
        raise ValueError(f"lam must be >= 0, got {lam}")
    if features.ndim != 2 or len(features) != len(response):
        raise ValueError("features must be (n, d) and response (n,)")
    if matrix.shape[1] != features.shape[1]:
        raise ValueError(f"A has {matrix.shape[1]} columns, features have {features.shape[1]}")
    a, y, w = _merge_rows(features, response)
    n, d = a.shape
    p = matrix.shape[0]
    am = sparse.csc_matrix(matrix)
    ip = sparse.identity(p, format="csc")
    if isinstance(loss, LogisticLoss):
        # v = [x (d), r (p), t (n), u1 (n), u2 (n)]
        nv = d + p + 3 * n
        q = np.concatenate([np.zeros(d), np.full(p, lam), w, np.zeros(2 * n)])
        z = lambda r, c: sparse.csc_matrix((r, c))  # noqa: E731
        abs_rows = sparse.vstack([
            sparse.hstack([am, -ip, z(p, 3 * n)]),
            sparse.hstack([-am, -ip, z(p, 3 * n)]),
        ])
        sum_row = sparse.hstack([z(n, d + p + n), sparse.identity(n), sparse.identity(n)])
        # exponential cones, rows in triplets (s1, s2, s3) per cone
        idx = np.arange(n)
        ya = sparse.csr_matrix(y[:, None] * a)
        rows, cols, vals = [], [], []
        # cone k (first): s = (-t_k, 1, u1_k); cone n + k: s = (-y a.x - t_k, 1, u2_k)
        base1 = 6 * idx
        rows += [base1, base1 + 2]
        cols += [d + p + idx, d + p + n + idx]
        vals += [np.ones(n), -np.ones(n)]
        base2 = 6 * idx + 3
        rows += [base2, base2 + 2]
        cols += [d + p + idx, d + p + 2 * n + idx]
        vals += [np.ones(n), -np.ones(n)]
        coo = ya.tocoo()
        rows.append(6 * coo.row + 3)
        cols.append(coo.col)
        vals.append(coo.data)
        exp_block = sparse.csc_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
                                      shape=(6 * n, nv))
        b_exp = np.zeros(6 * n)
        b_exp[6 * idx + 1] = 1.0
        b_exp[6 * idx + 4] = 1.0
        a_all = sparse.vstack([abs_rows, sum_row, exp_block], format="csc")
        b_all = np.concatenate([np.zeros(2 * p), np.ones(n), b_exp])
        import clarabel

        cones = [clarabel.NonnegativeConeT(2 * p + n)] + [clarabel.ExponentialConeT()] * (2 * n)
        sol, status = _solve(sparse.csc_matrix((nv, nv)), q, a_all, b_all, cones, tol)
        solver = "clarabel-exp-cone"
    elif isinstance(loss, (QuantileLoss, AbsoluteLoss)):
        up, down = (loss.tau, 1.0 - loss.tau) if isinstance(loss, QuantileLoss) else (1.0, 1.0)
        # v = [x (d), r (p), e+ (n), e- (n)], y - a.x = e+ - e-
        nv = d + p + 2 * n
        q = np.concatenate([np.zeros(d), np.full(p, lam), up * w, down * w])
        z = lambda r, c: sparse.csc_matrix((r, c))  # noqa: E731
        eq = sparse.hstack([sparse.csc_matrix(a), z(n, p), sparse.identity(n), -sparse.identity(n)])
        ineq = sparse.vstack([
            sparse.hstack([am, -ip, z(p, 2 * n)]),
            sparse.hstack([-am, -ip, z(p, 2 * n)]),
            sparse.hstack([z(2 * n, d + p), -sparse.identity(2 * n)]),
        ])
        import clarabel

        a_all = sparse.vstack([eq, ineq], format="csc")
        b_all = np.concatenate([y, np.zeros(2 * p + 2 * n)])
        cones = [clarabel.ZeroConeT(n), clarabel.NonnegativeConeT(2 * p + 2 * n)]
        sol, status = _solve(sparse.csc_matrix((nv, nv)), q, a_all, b_all, cones, tol)
        solver = "clarabel-lp"
    else:
        raise ValueError(f"the generalized-lasso reference supports logistic, quantile and absolute losses, "
                         f"not {getattr(loss, 'name', loss)!r}")
    x = sol[:d]
    obj = float(loss.mean(x, features, response)) + lam * float(np.abs(matrix @ x).sum())
    return GeneralizedLassoSolution(x=x, objective=obj, solver=solver, status=status)


def optimality_residual(loss, x: np.ndarray, features: np.ndarray, response: np.ndarray, matrix: np.ndarray,
                        lam: float, *, zero_tol: float = 1e-7) -> float:
    """min over valid v of ||grad f(x) + lam A^T v||_2 with v_k = sign((A x)_k) where |(A x)_k| > zero_tol
    and v_k in [-1, 1] elsewhere (the subgradient optimality condition; 0 at the exact optimum).

    For a smooth loss only (logistic).
    """
    grad = loss.mean_subgradient(x, features, response)
    ax = matrix @ x
    active = np.abs(ax) > zero_tol
    lo = np.where(active, np.sign(ax) - 1e-12, -1.0)
    hi = np.where(active, np.sign(ax) + 1e-12, 1.0)
    if lam == 0:
        return float(np.linalg.norm(grad))
    res = optimize.lsq_linear(lam * matrix.T, -grad, bounds=(lo, hi), tol=1e-12, lsmr_tol="auto")
    return float(np.linalg.norm(lam * matrix.T @ res.x + grad))
