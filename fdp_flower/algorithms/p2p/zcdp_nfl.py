"""zCDP-NFL (Gauthier et al. 2023, Algorithm 1, eqs. (7)-(9); docs/algorithms.md, section 3), one node at a time.

Node i keeps its dual lam_i and its last release xt_i and sees only its neighbours' releases xt_j,
j in N_i.  Step k -> k+1, with z_i the point the step linearizes at (the release xt_i^k, or the
neighbourhood average of releases):

    d_i       = -(1/m_i) sum_j grad l(z_i; a_ij, y_ij) + N(0, sigma_{i,k+1}^2 I)   (the node's release: its
                                                                                  noisy descent term)
    x_i^{k+1} = (z_i / eta_{k+1} - (lam/N) P'(z_i) + d_i - lam_i^k + rho sum_{j in N_i} (xt_i^k + xt_j^k))
                / (1 / eta_{k+1} + 2 rho |N_i|)                                   (linearized primal step)
    xt_i^{k+1} = x_i^{k+1}                                                        (public: post-processing)
    lam_i^{k+1} = lam_i^k + rho sum_{j in N_i} (xt_i^{k+1} - xt_j^{k+1})

Only d_i touches the data; everything else in the step is public (releases, duals built from releases,
graph facts, the penalty's subgradient at the public z_i), so the primal step is post-processing of d_i
and xt_i^{k+1} is the paper's noisy primal x_i^{k+1} + N(0, (c_k sigma)^2 I), c_k = 1 / (1/eta + 2 rho |N_i|).
Without noise this is the non-private (linearized) decentralized ADMM; with the classic (eps, delta)
calibration per step it is the DP-NFL baseline.
"""
from __future__ import annotations

import numpy as np


def nfl_step(*, objective, own_released, neighbour_released, dual, descent, eta: float, rho: float,
             anchor=None) -> np.ndarray:
    """x_i^{k+1} of docs/algorithms.md, eq. (3.1) from the node's descent term ``descent`` (module docstring):
    the relay's post-processing (Gauthier et al. 2023, eq. (7) with the first-order approximation (5)).

    ``neighbour_released`` has shape (|N_i|, K), rows in the node's neighbour order.  ``anchor`` z_i is the point
    f_i is linearized at (prox term ||x - z_i||^2 / (2 eta) too; ``descent`` must be evaluated there); None (the
    paper's rule) anchors at the release xt_i^k.  Any z_i computed from releases only (e.g. the neighbourhood
    average, ``algorithm.anchor: neighbourhood_average``) keeps the descent term's sensitivity.
    """
    neighbour_released = np.asarray(neighbour_released, dtype=float)
    z = own_released if anchor is None else np.asarray(anchor, dtype=float)
    penalty = (objective.lam / objective.num_clients) * objective.penalty.subgradient(z)
    degree = neighbour_released.shape[0]
    consensus = degree * own_released + neighbour_released.sum(axis=0)
    return (z / eta - (penalty - descent) - dual + rho * consensus) / (1.0 / eta + 2.0 * rho * degree)


def nfl_primal_step(*, objective, own_released, neighbour_released, dual, features, response, eta: float,
                    rho: float, anchor=None) -> np.ndarray:
    """The noise-free x_i^{k+1} of eq. (3.1): :func:`nfl_step` with the descent term of ``features``, ``response``
    at the anchor (the reference the tests and the audit's NOT-DP variant use).

    Anchoring at the node's private iterate x_i^k is NOT differentially private at the calibrated noise (the hidden
    iterate carries the data from step to step); it exists only so that the privacy audit
    (``fdp-flower audit --variant private_anchor``) can show that it fails.
    """
    z = own_released if anchor is None else np.asarray(anchor, dtype=float)
    descent = -objective.loss.mean_subgradient(z, features, response)
    return nfl_step(objective=objective, own_released=own_released, neighbour_released=neighbour_released, dual=dual,
                    descent=descent, eta=eta, rho=rho, anchor=anchor)


def nfl_dual_step(*, dual, own_released, neighbour_released, rho: float) -> np.ndarray:
    """lam_i^{k+1} = lam_i^k + rho sum_{j in N_i} (xt_i^{k+1} - xt_j^{k+1}) (docs/algorithms.md, eq. (3.3);
    Gauthier et al. 2023, eq. (9))."""
    neighbour_released = np.asarray(neighbour_released, dtype=float)
    return dual + rho * (neighbour_released.shape[0] * own_released - neighbour_released.sum(axis=0))


def nfl_sensitivity(*, gradient_bound: float, m: int, eta: float, rho: float, degree: int) -> float:
    """Replace-one l2-sensitivity of x_i^{k+1} in primal units: 2 G / (m_i (1/eta_k + 2 rho |N_i|))
    (docs/algorithms.md, eq. (3.4); Gauthier et al. 2023, Lemma I): the descent term's 2 G / m_i times c_k.

    Only the data term of s depends on the data; replacing one sample moves it by at most 2 G / m_i.
    """
    return 2.0 * gradient_bound / (m * (1.0 / eta + 2.0 * rho * degree))
