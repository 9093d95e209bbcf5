"""One round of one node, shared by the in-process engine and the Flower relay client.

Round r (r = 1..T) at node i, given its state after round r-1 (its release
xt_i^{r-1}, its dual lam_i^{r-2} and link statistics) and its neighbours'
releases xt_j^{r-1}:

1. complete the previous step's dual update with xt^{r-1} (docs/algorithms.md, eq. (3.3) for
   zCDP-NFL, eq. (4.4) for PR-ADMM) and, for PR-ADMM, add ||xt_i^{r-1} - xt_j^{r-1}|| to S_ij;
2. primal step of the algorithm -> x_i^r (P-ADMM: :mod:`fdp_flower.algorithms.p2p.p_admm`, whose dual
   update has zCDP-NFL's form);
3. release xt_i^r = x_i^r + N(0, sigma_{i,r}^2 I) with the generator
   ``release_rng(seed, node, r)``, so every engine draws the same noise.

Round 1 sees xt^0 = 0 everywhere, so step 1 leaves lam^0 = 0 and S = 0.  Only
releases and public graph facts enter the state; the private x_i^r is returned
for evaluation only.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from fdp_flower.algorithms.p2p.budget import NoisePlan
from fdp_flower.algorithms.p2p.grad_nfl import grad_nfl_sensitivity, grad_nfl_step, metropolis_row
from fdp_flower.algorithms.p2p.p_admm import p_admm_primal_step, p_admm_sensitivity
from fdp_flower.algorithms.p2p.pr_admm import (
    exact_primal_step,
    linearized_primal_step,
    pr_dual_step,
    pr_sensitivity,
    threshold_neighbours,
    update_link_statistic,
)
from fdp_flower.algorithms.p2p.zcdp_nfl import nfl_dual_step, nfl_primal_step, nfl_sensitivity
from fdp_flower.core.schedules import StepSchedule
from fdp_flower.privacy.ledger import GaussianRelease
from fdp_flower.privacy.mechanisms import add_gaussian_noise, release_rng

ALGORITHM_KINDS = ("zcdp_nfl", "dp_nfl", "decentralized_admm", "zcdp_grad_nfl", "pr_admm", "p_admm")


@dataclass(frozen=True)
class P2PAlgorithm:
    """A fully resolved peer-to-peer algorithm (pure data; built from the config).

    kind : one of ``ALGORITHM_KINDS``.
    steps : T, the number of rounds.
    penalty : rho of zCDP-NFL / eta of PR-ADMM and P-ADMM (the ADMM penalty; unused by grad-NFL).
    step_schedule : eta_k of the linearized step, a_k of grad-NFL, P-ADMM's constant gamma.
    noise : the per-step calibration (mode "none" for non-private runs).
    gradient_bound : G (V in Ding et al. (2019)).
    threshold : PR-ADMM's U (inf disables it).
    local_solver : PR-ADMM's "exact" (Newton) or "linearized".
    paper_constants : PR-ADMM's Lemma 5 sensitivity V / (eta |V_i|).
    regularizer_floor : P-ADMM's min_k (lam/N) c_k, the exact regularizer's smallest curvature.
    anchor : zCDP-NFL's linearization point: "released" (xt_i^k, Gauthier et al. (2023)) or "neighbourhood_average"
        (sum_{j in N_i u {i}} W_ij xt_j^k, Metropolis weights; not in the paper).  Both are releases, so
        Lemma I's sensitivity holds for either.
    """

    kind: str
    steps: int
    penalty: float
    step_schedule: StepSchedule
    noise: NoisePlan
    gradient_bound: float
    threshold: float = math.inf
    local_solver: str = "exact"
    paper_constants: bool = False
    regularizer_floor: float = 0.0
    anchor: str = "released"

    def __post_init__(self):
        if self.kind not in ALGORITHM_KINDS:
            raise ValueError(f"unknown peer-to-peer algorithm {self.kind!r}; choose one of {', '.join(ALGORITHM_KINDS)}")
        if self.steps < 1:
            raise ValueError(f"steps must be >= 1, got {self.steps}")
        if not self.penalty > 0:
            raise ValueError(f"the ADMM penalty must be > 0, got {self.penalty}")
        if self.local_solver not in ("exact", "linearized"):
            raise ValueError(f"local_solver must be exact or linearized, got {self.local_solver!r}")
        if self.anchor not in ("released", "neighbourhood_average"):
            raise ValueError(f"anchor must be released or neighbourhood_average, got {self.anchor!r}")

    def sensitivity(self, round_: int, m: int, degree: int) -> float:
        """Replace-one l2-sensitivity of node's x_i^round."""
        eta_k = float(self.step_schedule(round_))
        if self.kind == "zcdp_grad_nfl":
            return grad_nfl_sensitivity(gradient_bound=self.gradient_bound, m=m, step=eta_k)
        if self.kind == "p_admm":
            return p_admm_sensitivity(gradient_bound=self.gradient_bound, m=m, gamma=eta_k, eta=self.penalty,
                                      degree=degree, curvature_floor=self.regularizer_floor)
        if self.kind == "pr_admm":
            return pr_sensitivity(gradient_bound=self.gradient_bound, m=m, eta=self.penalty, degree=degree,
                                  paper_constants=self.paper_constants,
                                  step=eta_k if self.local_solver == "linearized" else None)
        return nfl_sensitivity(gradient_bound=self.gradient_bound, m=m, eta=eta_k, rho=self.penalty, degree=degree)

    def release_parameters(self, round_: int, m: int, degree: int) -> tuple[float, float] | None:
        """(sensitivity, sigma) of the node's release in ``round_``; None when not private."""
        if not self.noise.private:
            return None
        sens = self.sensitivity(round_, m, degree)
        return sens, self.noise.sigma(sens, round_)


@dataclass(frozen=True)
class NodeState:
    """What the relay keeps for one node between rounds (all post-processing of releases)."""

    round: int
    released: np.ndarray  # xt_i^round, (K,)
    dual: np.ndarray  # lam_i^{round-1} (alpha for PR-ADMM), (K,)
    link_stat: np.ndarray  # S_ij over t <= round-1, (|N_i|,)

    @classmethod
    def initial(cls, dim: int, degree: int) -> "NodeState":
        """xt^0 = 0, lam^0 = 0, S = 0."""
        return cls(0, np.zeros(dim), np.zeros(dim), np.zeros(degree))

    def to_arrays(self) -> dict[str, np.ndarray]:
        return {"round": np.array([self.round], dtype=float), "released": self.released, "dual": self.dual,
                "link_stat": self.link_stat}

    @classmethod
    def from_arrays(cls, arrays) -> "NodeState":
        return cls(int(np.asarray(arrays["round"]).ravel()[0]), np.asarray(arrays["released"], dtype=float),
                   np.asarray(arrays["dual"], dtype=float), np.asarray(arrays["link_stat"], dtype=float))


@dataclass(frozen=True)
class NodeRoundResult:
    state: NodeState
    primal: np.ndarray  # x_i^r (private; evaluation only)
    sensitivity: float | None
    sigma: float | None
    cut_links: int
    solver_iterations: int


def node_round(*, algorithm: P2PAlgorithm, objective, node: int, seed: int, state: NodeState,
               neighbour_released, neighbour_degrees, features, response,
               noise: Callable[[GaussianRelease], np.random.Generator] | None = None) -> NodeRoundResult:
    """Run round ``state.round + 1`` at ``node`` (see the module docstring).

    ``neighbour_released`` (|N_i|, K) holds xt_j^{state.round} in the node's neighbour order
    and ``neighbour_degrees`` their degrees (public; grad-NFL's Metropolis weights).
    ``noise`` (optional) maps the release's ledger event to its noise generator, called once the
    noise-free step is computed (:meth:`fdp_flower.clients.site.SiteSession.noise_for`); default
    ``release_rng(seed, node, round)``.
    """
    r = state.round + 1
    if r > algorithm.steps:
        raise ValueError(f"node {node} already ran all {algorithm.steps} rounds")
    nb = np.asarray(neighbour_released, dtype=float)
    if nb.ndim != 2 or nb.shape[0] != state.link_stat.shape[0] or nb.shape[1] != state.released.shape[0]:
        raise ValueError(f"node {node}: expected neighbour releases of shape "
                         f"({state.link_stat.shape[0]}, {state.released.shape[0]}), got {nb.shape}")
    own = state.released
    degree = nb.shape[0]
    m = len(response)
    eta_k = float(algorithm.step_schedule(r))
    link_stat, cut, iters = state.link_stat, np.zeros(degree, dtype=bool), 0
    if algorithm.kind == "pr_admm":
        dual = pr_dual_step(dual=state.dual, own_released=own, neighbour_released=nb, eta=algorithm.penalty)
        link_stat = update_link_statistic(state.link_stat, own, nb)
        used, cut = threshold_neighbours(own, nb, link_stat, algorithm.threshold)
        if algorithm.local_solver == "exact":
            x, iters = exact_primal_step(objective=objective, own_released=own, neighbour_used=used, dual=dual,
                                         features=features, response=response, eta=algorithm.penalty)
        else:
            x = linearized_primal_step(objective=objective, own_released=own, neighbour_used=used, dual=dual,
                                       features=features, response=response, eta=algorithm.penalty, step=eta_k)
    elif algorithm.kind == "p_admm":
        dual = nfl_dual_step(dual=state.dual, own_released=own, neighbour_released=nb, rho=algorithm.penalty)
        x = p_admm_primal_step(objective=objective, own_released=own, neighbour_released=nb, dual=dual,
                               features=features, response=response, gamma=eta_k, eta=algorithm.penalty)
    elif algorithm.kind == "zcdp_grad_nfl":
        dual = state.dual
        x = grad_nfl_step(objective=objective, own_released=own, neighbour_released=nb,
                          neighbour_degrees=neighbour_degrees, features=features, response=response, step=eta_k)
    else:
        dual = nfl_dual_step(dual=state.dual, own_released=own, neighbour_released=nb, rho=algorithm.penalty)
        anchor = None
        if algorithm.anchor == "neighbourhood_average":
            w_ii, w_ij = metropolis_row(degree, neighbour_degrees)
            anchor = w_ii * own + w_ij @ nb
        x = nfl_primal_step(objective=objective, own_released=own, neighbour_released=nb, dual=dual,
                            features=features, response=response, eta=eta_k, rho=algorithm.penalty, anchor=anchor)
    params = algorithm.release_parameters(r, m, degree)
    if params is None:
        released, sens, sigma = x, None, None
    else:
        sens, sigma = params
        rng = (release_rng(seed, node, r) if noise is None
               else noise(GaussianRelease(client=node, round=r, sensitivity=sens, sigma=sigma)))
        released = add_gaussian_noise(x, sigma, rng)
    new_state = NodeState(r, released, dual, link_stat)
    return NodeRoundResult(new_state, x, sens, sigma, int(cut.sum()), iters)
