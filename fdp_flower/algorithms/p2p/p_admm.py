"""P-ADMM (Ding, Qin, Xu, Gong, Zhang & Pan, "Differentially private ADMM for distributed medical machine
learning", arXiv:1901.02094, 2019): the smooth-objective comparator of Gauthier et al. (2023)'s ridge figure.

Gauthier et al. (2023) names P-ADMM (its reference [24]) without stating its rule; it says P-ADMM is a networked
ADMM with zCDP for smooth objectives and that zCDP-NFL's edge over it comes from zCDP-NFL's
time-varying step.  Our reading of the published algorithm, one node at a time (step k -> k+1):

- the loss is linearized at the node's own last release xt_i^k with a *constant* proximal weight
  1/gamma (no step schedule; a constant step is what a smooth, L-Lipschitz-gradient loss allows);
  the smooth regularizer (lam/N) P is kept exact, so for P'' = c I (ridge) the minimizer is closed-form:

      x_i^{k+1} = argmin_x <l_i'(xt_i^k), x> + (lam/N) P(x) + <alpha_i^k, x>
                           + eta sum_{j in N_i} ||x - (xt_i^k + xt_j^k)/2||^2 + ||x - xt_i^k||^2 / (2 gamma)
                = (xt_i^k / gamma - l_i'(xt_i^k) - alpha_i^k + eta (|N_i| xt_i^k + sum_j xt_j^k))
                  / (1/gamma + 2 eta |N_i| + (lam/N) c)                       (elementwise in c);

- the node releases its descent term d_i = -l_i'(xt_i^k) + N(0, sigma_{k+1}^2 I) (sensitivity 2G/m_i), the variance
  decaying as sigma_{k+1}^2 = sigma_1^2 R^floor(k / K_p) (dynamic zCDP; the publication's linear-rate decay,
  ``algorithm.decay``), the schedule scaled to the run's total budget like every peer-to-peer kind; the primal
  step above, with d_i in place of -l_i'(xt_i^k), is post-processing and xt_i^{k+1} = x_i^{k+1}: the paper's
  primal-variable perturbation, its noise divided by the step's denominator per coordinate (a uniform
  curvature c, every shipped P-ADMM problem, gives exactly N(0, (sigma / (1/gamma + 2 eta |N_i| + (lam/N) c))^2 I);
  with an unpenalized intercept the penalized coordinates get less noise than the primal form's worst-case
  calibration, at the same privacy);
- dual: alpha_i^{k+1} = alpha_i^k + eta sum_{j in N_i} (xt_i^{k+1} - xt_j^{k+1}) (the same form as
  zCDP-NFL's eq. (9), so the relay carries the same state).

The anchor is the node's *release*, not its noise-free iterate: everything in the step but
l_i'(xt_i^k) is then public (releases, duals built from releases, graph facts), so the replace-one
sensitivity holds at every step given the transcript (the private-anchor reading would let the hidden
iterate accumulate the data's influence across steps, as for zCDP-NFL; docs/p2p.md).
"""
from __future__ import annotations

import numpy as np

from fdp_flower.algorithms.p2p.problems import penalty_curvature


def regularizer_curvature(objective, dim: int) -> np.ndarray:
    """(lam/N) c per coordinate (K,): the exact smooth regularizer's Hessian diagonal (0 where unpenalized)."""
    c = penalty_curvature(objective.penalty, dim)
    return np.broadcast_to(np.asarray(c, dtype=float) * objective.lam / objective.num_clients, (dim,)).copy()


def p_admm_step_from_term(*, objective, own_released, neighbour_released, dual, descent, gamma: float,
                          eta: float) -> np.ndarray:
    """x_i^{k+1} of the module docstring from the node's descent term ``descent`` = -l_i'(xt_i^k) + noise (the
    relay's post-processing; ``neighbour_released`` (|N_i|, K) in the node's neighbour order).

    ``objective`` must have a smooth penalty with constant curvature (none, l2, elastic net with lam1 = 0).
    """
    neighbour_released = np.asarray(neighbour_released, dtype=float)
    own_released = np.asarray(own_released, dtype=float)
    degree = neighbour_released.shape[0]
    curvature = regularizer_curvature(objective, own_released.shape[0])
    consensus = degree * own_released + neighbour_released.sum(axis=0)
    return (own_released / gamma + descent - dual + eta * consensus) / (1.0 / gamma + 2.0 * eta * degree
                                                                         + curvature)


def p_admm_primal_step(*, objective, own_released, neighbour_released, dual, features, response, gamma: float,
                       eta: float) -> np.ndarray:
    """The noise-free x_i^{k+1}: :func:`p_admm_step_from_term` with the descent term of ``features``, ``response``."""
    descent = -objective.loss.mean_subgradient(np.asarray(own_released, dtype=float), features, response)
    return p_admm_step_from_term(objective=objective, own_released=own_released,
                                 neighbour_released=neighbour_released, dual=dual, descent=descent, gamma=gamma,
                                 eta=eta)


def p_admm_sensitivity(*, gradient_bound: float, m: int, gamma: float, eta: float, degree: int,
                       curvature_floor: float = 0.0) -> float:
    """Replace-one l2-sensitivity of x_i^{k+1}: 2 G / (m_i (1/gamma + 2 eta |N_i| + (lam/N) c_min)).

    Only l_i'(xt_i^k) depends on the data and one replaced sample moves it by at most 2 G / m_i; the
    denominator is at least its smallest coordinate (``curvature_floor`` = min_k (lam/N) c_k, 0 when a
    coordinate is unpenalized).
    """
    return 2.0 * gradient_bound / (m * (1.0 / gamma + 2.0 * eta * degree + curvature_floor))
