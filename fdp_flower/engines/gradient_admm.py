"""In-process engine of DP-ADMM / DP-AccADMM (Xu et al. 2020; docs/algorithms.md, section 5) without Flower.

A thin driver of the family's protocol: the server is
:class:`fdp_flower.algorithms.gradient_admm.protocol.GradientADMMServer`, every client's site is
:func:`fdp_flower.algorithms.gradient_admm.site.answer` on its clipped rows, and
:func:`fdp_flower.algorithms.protocol.run_in_process` moves the requests and releases between them.  Every
release's noise comes from :func:`fdp_flower.privacy.mechanisms.run_noise` of the run seed
(``release_rng(seed, client, round)``), so with the same seed it reproduces a Flower run's iterates bit
for bit.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from fdp_flower.algorithms.gradient_admm.plan import GradientADMMProblem, noise_plan, scenario_privacy
from fdp_flower.algorithms.gradient_admm.protocol import GradientADMMServer
from fdp_flower.algorithms.gradient_admm.setup import Evaluator, paper_dual, simulation_setup
from fdp_flower.algorithms.gradient_admm.site import answer
from fdp_flower.algorithms.gradient_admm.update import GradientADMMState, GradientPrivacy
from fdp_flower.algorithms.protocol import run_in_process
from fdp_flower.privacy import PrivacyLedger
from fdp_flower.privacy.mechanisms import run_noise


@dataclass
class GradientADMMResult:
    state: GradientADMMState
    history: list[dict] = field(default_factory=list)
    ledger: PrivacyLedger = field(default_factory=PrivacyLedger)
    gamma: float = math.nan
    sigmas: np.ndarray | None = None
    sensitivities: np.ndarray | None = None
    iterates: list[np.ndarray] = field(default_factory=list)

    def first_round_below(self, key: str, level: float) -> int | None:
        for row in self.history:
            if row.get(key, math.inf) <= level:
                return int(row["round"])
        return None


def run_gradient_admm(problem: GradientADMMProblem, *, rounds: int, rho: float, eta: float,
                      gamma: float | None = None, accelerated: bool = False, restart: bool = False,
                      privacy: GradientPrivacy | None = None, seed: int = 0, init_dual: str = "zero",
                      reference_objective: float | None = None, eval_every: int = 1,
                      keep_iterates: bool = False) -> GradientADMMResult:
    """Run DP-ADMM (``accelerated=False``) or DP-AccADMM on ``problem`` for ``rounds`` iterations.

    Parameters
    ----------
    rounds : int
        T, also the number of releases Theorem 1 calibrates for.
    rho, eta : float
        ADMM penalty and step size.
    gamma : float or None
        Proximal weight; None takes eta rho ||A^T A|| + 1 (default: None).
    accelerated, restart : bool
        DP-AccADMM, and its adaptive restart (default: False, False).
    privacy : GradientPrivacy or None
        None runs the non-private ADMM / AccADMM (default: None).
    seed : int
        Run seed of the per-release noise generators (default: 0).
    init_dual : {"zero", "paper"}
        u_0 = 0, or the paper's u_0 = -(A^T)^+ grad f(x_0) / rho (non-private runs only) (default: "zero").
    reference_objective : float or None
        F(x*) for the gap columns (default: None).
    eval_every : int
        Evaluate metrics every this many rounds (and at the last); the history holds the evaluated
        rounds (default: 1).
    keep_iterates : bool
        Keep x_t of every round in ``iterates`` (default: False).
    """
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    if not (rho > 0 and eta > 0):
        raise ValueError(f"rho and eta must be > 0, got rho={rho}, eta={eta}")
    if init_dual not in ("zero", "paper"):
        raise ValueError(f"init_dual must be 'zero' or 'paper', got {init_dual!r}")
    if init_dual == "paper" and privacy is not None:
        raise ValueError("init_dual='paper' releases grad f(x_0) without noise; use 'zero' when privacy is on")
    plan = problem.site_plan(rounds, privacy)
    server = GradientADMMServer(matrix=problem.matrix, lam=problem.lam, rho=rho, eta=eta, sizes=problem.counts,
                                plan=plan, gamma=gamma, accelerated=accelerated, restart=restart,
                                initial_dual=paper_dual(problem, rho) if init_dual == "paper" else None,
                                evaluator=Evaluator(problem, reference_objective), eval_every=eval_every)
    sens, sig = noise_plan(problem, rounds, privacy)
    result = GradientADMMResult(state=server.state, gamma=server.gamma, sigmas=sig, sensitivities=sens)
    sites, noise = problem.site_data(), run_noise(seed)

    def progress(_round: int, _row: dict) -> None:
        if keep_iterates:
            result.iterates.append(server.state.x.copy())

    run_in_process(server, lambda requests: answer(requests, sites, plan, noise), progress=progress)
    if server.stop_reason not in (None, "completed"):  # every client answers in process: a refusal is an error
        raise RuntimeError(f"the run stopped after round {server.round}: {server.stop_reason}; "
                           f"{'; '.join(f.reason for f in server.failures[:3])}")
    result.state, result.ledger = server.state, server.ledger
    result.history = [row for row in server.history if "objective" in row]  # the evaluated rounds
    return result


def run_scenario(scenario, *, with_reference: bool = True, eval_every: int = 1,
                 keep_iterates: bool = False) -> tuple[GradientADMMResult, GradientADMMProblem, float | None]:
    """Run a scenario in process; returns (result, problem, reference objective or None)."""
    problem, evaluator = simulation_setup(scenario, with_reference=with_reference)
    alg = scenario.algorithm
    res = run_gradient_admm(problem, rounds=alg.rounds, rho=alg.rho, eta=alg.eta, gamma=alg.gamma,
                            accelerated=alg.kind == "dp_acc_admm", restart=getattr(alg, "restart", False),
                            privacy=scenario_privacy(scenario), seed=scenario.seed, init_dual=alg.init_dual,
                            reference_objective=evaluator.reference, eval_every=eval_every,
                            keep_iterates=keep_iterates)
    return res, problem, evaluator.reference
