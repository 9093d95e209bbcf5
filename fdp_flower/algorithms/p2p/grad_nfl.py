"""zCDP-grad-NFL: the decentralized subgradient baseline of Gauthier et al. (2023), Sec. 5 (Nedic & Ozdaglar 2009,
with zCDP output perturbation; docs/algorithms.md, eqs. (3.8)-(3.9)).

    x_i^{k+1} = sum_{j in N_i u {i}} W_ij xt_j^k - a_{k+1} f_i'(xt_i^k),   W the Metropolis weights
    xt_i^{k+1} = x_i^{k+1} + N(0, sigma_{i,k+1}^2 I),  Delta_{i,k+1} = 2 G a_{k+1} / m_i.
"""
from __future__ import annotations

import numpy as np


def metropolis_row(degree: int, neighbour_degrees) -> tuple[float, np.ndarray]:
    """(W_ii, W_ij for j in N_i) with W_ij = 1 / (1 + max(d_i, d_j)) and W_ii = 1 - sum_j W_ij."""
    w = 1.0 / (1.0 + np.maximum(degree, np.asarray(neighbour_degrees, dtype=float)))
    return 1.0 - float(w.sum()), w


def grad_nfl_step(*, objective, own_released, neighbour_released, neighbour_degrees, features, response,
                  step: float) -> np.ndarray:
    """x_i^{k+1} = W_ii xt_i^k + sum_j W_ij xt_j^k - a_{k+1} f_i'(xt_i^k)."""
    neighbour_released = np.asarray(neighbour_released, dtype=float)
    w_ii, w_ij = metropolis_row(neighbour_released.shape[0], neighbour_degrees)
    s = objective.local_subgradient(own_released, features, response)
    return w_ii * own_released + w_ij @ neighbour_released - step * s


def grad_nfl_sensitivity(*, gradient_bound: float, m: int, step: float) -> float:
    """2 G a_k / m_i: only the data term a_k f_i' depends on the data."""
    return 2.0 * gradient_bound * step / m
