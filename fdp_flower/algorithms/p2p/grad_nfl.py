"""zCDP-grad-NFL: the decentralized subgradient baseline of Gauthier et al. (2023), Sec. 5 (Nedic & Ozdaglar 2009,
with zCDP perturbation; docs/algorithms.md, eqs. (3.8)-(3.9)).

    d_i       = -(1/m_i) sum_j grad l(xt_i^k; a_ij, y_ij) + N(0, sigma_{i,k+1}^2 I)   (the node's release)
    x_i^{k+1} = sum_{j in N_i u {i}} W_ij xt_j^k - a_{k+1} ((lam/N) P'(xt_i^k) - d_i),   W the Metropolis weights
    xt_i^{k+1} = x_i^{k+1}  (post-processing of d_i; in primal units the noise is a_{k+1} sigma, Delta = 2 G a_{k+1} / m_i).
"""
from __future__ import annotations

import numpy as np


def metropolis_row(degree: int, neighbour_degrees) -> tuple[float, np.ndarray]:
    """(W_ii, W_ij for j in N_i) with W_ij = 1 / (1 + max(d_i, d_j)) and W_ii = 1 - sum_j W_ij."""
    w = 1.0 / (1.0 + np.maximum(degree, np.asarray(neighbour_degrees, dtype=float)))
    return 1.0 - float(w.sum()), w


def grad_nfl_step_from_term(*, objective, own_released, neighbour_released, neighbour_degrees, descent,
                            step: float) -> np.ndarray:
    """x_i^{k+1} = W_ii xt_i^k + sum_j W_ij xt_j^k - a_{k+1} ((lam/N) P'(xt_i^k) - d_i) (the relay's step)."""
    neighbour_released = np.asarray(neighbour_released, dtype=float)
    w_ii, w_ij = metropolis_row(neighbour_released.shape[0], neighbour_degrees)
    penalty = (objective.lam / objective.num_clients) * objective.penalty.subgradient(own_released)
    return w_ii * own_released + w_ij @ neighbour_released - step * (penalty - descent)


def grad_nfl_step(*, objective, own_released, neighbour_released, neighbour_degrees, features, response,
                  step: float) -> np.ndarray:
    """The noise-free x_i^{k+1} = W_ii xt_i^k + sum_j W_ij xt_j^k - a_{k+1} f_i'(xt_i^k)."""
    descent = -objective.loss.mean_subgradient(own_released, features, response)
    return grad_nfl_step_from_term(objective=objective, own_released=own_released,
                                   neighbour_released=neighbour_released, neighbour_degrees=neighbour_degrees,
                                   descent=descent, step=step)


def grad_nfl_sensitivity(*, gradient_bound: float, m: int, step: float) -> float:
    """2 G a_k / m_i in primal units: only the data term a_k f_i' depends on the data."""
    return 2.0 * gradient_bound * step / m
