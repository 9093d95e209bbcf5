"""Privacy-off defaults of the peer-to-peer family: steps in units of the loss's curvature, and a stop on
the released iterates (docs/algorithms.md, eqs. (3.11)-(3.13); measured in
benchmarks/results/p2p_gradient_estimates.md).

Without noise the linearized decentralized ADMM (3.1)-(3.3) is a (sub)gradient method whose step is
min(eta_k, 1 / (2 rho |N_i|)) in the units of x.  On a quantile loss the curvature of sum_i f_i near x*
is about f(q_tau) E[a a^T], so a fixed eta0 / k converges like k^(-eta0 mu) when eta0 mu < 1: on 2000
rows of 8 t(3) features (clip 1) mu ~ 0.03 and the former default eta0 = 10 stalls at 0.24 ||x*|| after
2000 rounds.  The defaults below scale eta and rho by the curvature unit

    u = K / (c1^2 kappa),   kappa = 4 tau (1 - tau) / s_y (quantile), 2 / s_y (absolute),
                                    1 (squared, Huber), 1/4 (logistic)                     (3.11)

(K features, c1 the row clip, s_y the response scale), so a response multiplied by any factor takes the
same number of rounds:

    rho = 1 / u (nonsmooth f_i) or 0.3 / u (smooth f_i),   eta_k = 30 u / k                 (3.12)

and the run stops after round k >= 20 when the network average xbar^k of the releases has moved by at
most tol ||xbar^k|| since round floor(k/2) and every node is within tol ||xbar^k|| of it,

    ||xbar^k - xbar^floor(k/2)|| <= tol ||xbar^k||   and   max_i ||xt_i^k - xbar^k|| <= tol ||xbar^k||,   (3.13)

tol = 3e-3, or at the cap of 1000 rounds (``stop_reason: cap``).  (3.13) looks back half the run, not
one step, because a decreasing step makes the last step small however far x* still is; it reads
only released vectors.  The response scale is that of the caller's rows (non-private: privacy is off).
"""
from __future__ import annotations

import math

import numpy as np

from fdp_flower.core.losses import AbsoluteLoss, LogisticLoss, QuantileLoss, SquaredLoss

#: eta_k = STEP u / k (every f_i) and rho = NONSMOOTH_PENALTY / u for a nonsmooth f_i (eq. (3.12))
STEP = 30.0
NONSMOOTH_PENALTY = 1.0
#: rho = SMOOTH_PENALTY / u for a smooth f_i, with the same eta_k (eq. (3.12)).  A constant eta = 3 u
#: converges faster where u is right (breast cancer: 89 rounds to 1% instead of 199) but diverges on
#: Adult, whose one-hot rows concentrate the curvature in few directions (u overstates 1 / L there by 60x);
#: the decreasing step recovers from its large first steps (Adult: 520 rounds).
SMOOTH_PENALTY = 0.3
#: the cap on the number of rounds and the stopping rule's tolerance and first round (eq. (3.13))
STEP_CAP = 1000
STOP_TOLERANCE = 3e-3
STOP_FIRST_ROUND = 20
#: the algorithms these defaults apply to (linearized decentralized ADMM without noise)
ADMM_KINDS = ("zcdp_nfl", "dp_nfl", "decentralized_admm")


def response_scale(responses) -> float:
    """s_y: the interquartile range of the pooled responses / 1.349 (the sd of a normal); the sd when the
    IQR is 0, and 1 when both are (a constant response)."""
    y = np.concatenate([np.ravel(np.asarray(r, dtype=float)) for r in responses])
    if y.size == 0:
        raise ValueError("responses: no rows")
    q75, q25 = np.percentile(y, [75, 25])
    scale = (q75 - q25) / 1.349
    if not scale > 0:
        scale = float(np.std(y))
    return float(scale) if scale > 0 and math.isfinite(scale) else 1.0


def loss_curvature(loss, response_scale_: float) -> float:
    """kappa of eq. (3.11): the curvature of the loss in the linear predictor, per unit of a.w."""
    if not response_scale_ > 0:
        raise ValueError(f"response_scale must be > 0, got {response_scale_}")
    if isinstance(loss, QuantileLoss):
        return 4.0 * loss.tau * (1.0 - loss.tau) / response_scale_
    if isinstance(loss, AbsoluteLoss):
        return 2.0 / response_scale_
    if isinstance(loss, SquaredLoss):
        return 1.0
    if isinstance(loss, LogisticLoss):
        return 0.25
    raise ValueError(f"no curvature unit for the {getattr(loss, 'name', loss)!r} loss")


def curvature_unit(loss, *, dim: int, c1: float, response_scale_: float) -> float:
    """u = K / (c1^2 kappa) of eq. (3.11): the inverse curvature of sum_i f_i per coordinate, a priori."""
    if dim < 1 or not c1 > 0:
        raise ValueError(f"dim must be >= 1 and c1 > 0, got dim={dim}, c1={c1}")
    return dim / (c1**2 * loss_curvature(loss, response_scale_))


def nonprivate_admm_settings(loss, *, smooth: bool, dim: int, c1: float, response_scale_: float) -> dict:
    """The ``algorithm`` fields (rho, step, rounds) of eq. (3.12) for the ADMM kinds with privacy off."""
    u = curvature_unit(loss, dim=dim, c1=c1, response_scale_=response_scale_)
    penalty = SMOOTH_PENALTY if smooth else NONSMOOTH_PENALTY
    return {"rho": penalty / u, "step": {"kind": "inv", "eta0": STEP * u}, "rounds": STEP_CAP}


def converged(released: np.ndarray, round_: int, *, tol: float = STOP_TOLERANCE,
              first_round: int = STOP_FIRST_ROUND) -> bool:
    """The stopping test (3.13) after ``round_``; ``released`` (>= round_ + 1, N, K) holds xt^0 .. xt^round_."""
    if round_ < first_round:
        return False
    now = np.asarray(released[round_], dtype=float)
    mean_now = now.mean(axis=0)
    mean_half = np.asarray(released[round_ // 2], dtype=float).mean(axis=0)
    size = float(np.linalg.norm(mean_now))
    if not size > 0:
        return False
    moved = float(np.linalg.norm(mean_now - mean_half))
    spread = float(np.max(np.linalg.norm(now - mean_now, axis=1)))
    return moved <= tol * size and spread <= tol * size


def stop_reason(round_: int | None) -> str:
    """``converged: ...`` when (3.13) ended the run after ``round_``; ``cap`` (None) when it never held."""
    if round_ is None:
        return "cap"
    return f"converged: the released average moved by <= {STOP_TOLERANCE:g} of its norm since round {round_ // 2} " \
           f"and every node is within it, after round {round_}"
