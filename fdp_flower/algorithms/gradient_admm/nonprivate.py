"""Privacy-off server step of DP-ADMM / DP-AccADMM: a proximal gradient step with the Barzilai-Borwein eta,
and a stop on the server's iterates (docs/algorithms.md, section 5.2, eqs. (5.11)-(5.13); measured in
benchmarks/results/p2p_gradient_estimates.md).

Without noise the linearized ADMM (5.2)-(5.5) with its fixed eta is a gradient method in the units of
1/L_f; on a nearly separable logistic problem (breast cancer, lam = 1e-3, ||x*|| ~ 19) the loss is
almost flat along x*, and ``fit_gradient``'s defaults are still 72% away from x* after 1000 rounds.
With privacy off the server instead takes, from the aggregated gradient g_t = grad f(x_{t-1}) (the sites'
same data term (5.3), without noise),

    x_t = prox_{eta_t lam ||A .||_1}(x_{t-1} - eta_t g_t),
    eta_t = ||x_{t-1} - x_{t-2}||^2 / <x_{t-1} - x_{t-2}, g_t - g_{t-1}>  in [eta, ETA_MAX]          (5.11)

(Barzilai & Borwein 1988; SpaRSA without its line search; eta_1 = eta, and eta_{t-1} when the
curvature seen is not positive).  The prox of a general A has no closed form; the server solves it on its
dual box,

    prox_{eta lam ||A .||_1}(v) = v - eta A^T w*,   w* = argmin_{|w|_inf <= lam} (eta/2) ||A^T w||^2 - w^T A v,   (5.12)

by PROX_ITERATIONS accelerated projected-gradient steps (step 1 / (eta ||A A^T||)), warm-started from the
last round's w.  The run stops after round t >= STOP_FIRST_ROUND when the iterate has moved by at most
tol ||x_t|| since round floor(t/2),

    ||x_t - x_{floor(t/2)}|| <= tol ||x_t||,   tol = 3e-3,                                            (5.13)

or at its cap of ``algorithm.rounds`` (default ROUND_CAP with privacy off; ``stop_reason: cap``).  (5.13)
looks back half the run as the peer-to-peer stop (3.13) does: the BB step is not monotone, and one step's
move says little.  All of it is the server's post-processing of the released gradients; with privacy on
the server runs (5.2)-(5.6) unchanged.
"""
from __future__ import annotations

import math

import numpy as np

#: the cap on eta_t of (5.11) (a floor is the scenario's eta, 1/L_f for the logistic loss on clipped rows)
ETA_MAX = 1.0e6
#: accelerated projected-gradient steps of the prox (5.12) each round (warm-started)
PROX_ITERATIONS = 50
#: the default round cap with privacy off, and the stop's tolerance and first round (5.13)
ROUND_CAP = 2000
STOP_TOLERANCE = 3e-3
STOP_FIRST_ROUND = 20
#: ``algorithm.nonprivate_step`` values: the step of this module, or the paper's (5.2)-(5.6) as with privacy on
STEP_RULES = ("proximal_bb", "admm")


def generalized_lasso_prox(v: np.ndarray, eta: float, matrix: np.ndarray, lam: float, dual: np.ndarray, *,
                           gram_norm: float, iterations: int = PROX_ITERATIONS) -> tuple[np.ndarray, np.ndarray]:
    """(z, w): z = argmin_z (1/(2 eta)) ||z - v||^2 + lam ||A z||_1 = v - eta A^T w by eq. (5.12), w on the
    box |w|_inf <= lam after ``iterations`` accelerated projected-gradient steps from ``dual`` (p,).

    ``gram_norm`` is ||A A^T||_2 = ||A^T A||_2 (:func:`~fdp_flower.algorithms.gradient_admm.update.spectral_norm_gram`).
    For lam = 0 or A = 0 it returns (v, dual) exactly.
    """
    if not eta > 0:
        raise ValueError(f"eta must be > 0, got {eta}")
    if lam == 0 or gram_norm == 0:
        return np.array(v, dtype=float), np.asarray(dual, dtype=float)
    step = 1.0 / (eta * gram_norm)
    av = matrix @ v
    w = np.clip(np.asarray(dual, dtype=float), -lam, lam)
    point, theta = w.copy(), 1.0
    for _ in range(int(iterations)):
        w_next = np.clip(point - step * (eta * (matrix @ (matrix.T @ point)) - av), -lam, lam)
        theta_next = 0.5 * (1.0 + math.sqrt(1.0 + 4.0 * theta * theta))
        point = w_next + ((theta - 1.0) / theta_next) * (w_next - w)
        w, theta = w_next, theta_next
    return v - eta * (matrix.T @ w), w


def converged(path: list[np.ndarray], round_: int, *, tol: float = STOP_TOLERANCE,
              first_round: int = STOP_FIRST_ROUND) -> bool:
    """The stop (5.13) after ``round_``; ``path[k]`` is x_k (path[0] = x_0)."""
    if round_ < first_round:
        return False
    now = np.asarray(path[round_], dtype=float)
    size = float(np.linalg.norm(now))
    if not size > 0:
        return False
    return float(np.linalg.norm(now - np.asarray(path[round_ // 2], dtype=float))) <= tol * size


def stop_reason(round_: int | None) -> str:
    """``converged: ...`` when (5.13) held after ``round_``; ``cap`` (None) when the run reached its cap."""
    if round_ is None:
        return "cap"
    return (f"converged: the iterate moved by <= {STOP_TOLERANCE:g} of its norm since round {round_ // 2}, "
            f"after round {round_}")
