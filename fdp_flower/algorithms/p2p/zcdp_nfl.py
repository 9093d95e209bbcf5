"""zCDP-NFL (Gauthier et al. 2023, Algorithm 1, eqs. (7)-(9); docs/algorithms.md, section 3), one node at a time.

Node i keeps its dual lam_i and its last release xt_i and sees only its
neighbours' releases xt_j, j in N_i.  Step k -> k+1:

    s       = f_i'(xt_i^k)                                     (subgradient, penalty included)
    x_i^{k+1} = (xt_i^k / eta_{k+1} - s - lam_i^k + rho sum_{j in N_i} (xt_i^k + xt_j^k))
                / (1 / eta_{k+1} + 2 rho |N_i|)                 (linearized primal step)
    xt_i^{k+1} = x_i^{k+1} + N(0, sigma_{i,k+1}^2 I)
    lam_i^{k+1} = lam_i^k + rho sum_{j in N_i} (xt_i^{k+1} - xt_j^{k+1})

Without noise this is the non-private (linearized) decentralized ADMM; with the
classic (eps, delta) calibration per step it is the DP-NFL baseline.
"""
from __future__ import annotations

import numpy as np


def nfl_primal_step(*, objective, own_released, neighbour_released, dual, features, response, eta: float,
                    rho: float, anchor=None) -> np.ndarray:
    """x_i^{k+1} of docs/algorithms.md, eq. (3.1) (Gauthier et al. 2023, eq. (7) with the first-order
    approximation (5)).

    ``neighbour_released`` has shape (|N_i|, K), rows in the node's neighbour order.
    ``anchor`` z_i is the point f_i is linearized at (prox term ||x - z_i||^2 / (2 eta) too); None (the
    paper's rule) anchors at the release xt_i^k. Any z_i computed from releases only (e.g. the
    neighbourhood average, ``algorithm.anchor: neighbourhood_average``) keeps Lemma I's sensitivity.
    Anchoring at the node's private iterate x_i^k is NOT differentially private at Lemma I's noise (the
    hidden iterate carries the data from step to step); it exists only so that the privacy audit
    (``fdp-flower audit --variant private_anchor``) can show that it fails.
    """
    neighbour_released = np.asarray(neighbour_released, dtype=float)
    z = own_released if anchor is None else np.asarray(anchor, dtype=float)
    s = objective.local_subgradient(z, features, response)
    degree = neighbour_released.shape[0]
    consensus = degree * own_released + neighbour_released.sum(axis=0)
    return (z / eta - s - dual + rho * consensus) / (1.0 / eta + 2.0 * rho * degree)


def nfl_dual_step(*, dual, own_released, neighbour_released, rho: float) -> np.ndarray:
    """lam_i^{k+1} = lam_i^k + rho sum_{j in N_i} (xt_i^{k+1} - xt_j^{k+1}) (docs/algorithms.md, eq. (3.3);
    Gauthier et al. 2023, eq. (9))."""
    neighbour_released = np.asarray(neighbour_released, dtype=float)
    return dual + rho * (neighbour_released.shape[0] * own_released - neighbour_released.sum(axis=0))


def nfl_sensitivity(*, gradient_bound: float, m: int, eta: float, rho: float, degree: int) -> float:
    """Replace-one l2-sensitivity of x_i^{k+1}: 2 G / (m_i (1/eta_k + 2 rho |N_i|)) (docs/algorithms.md, eq. (3.4);
    Gauthier et al. 2023, Lemma I).

    Only the data term of s depends on the data; replacing one sample moves it by at most 2 G / m_i.
    """
    return 2.0 * gradient_bound / (m * (1.0 / eta + 2.0 * rho * degree))
