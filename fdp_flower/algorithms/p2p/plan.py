"""From a peer-to-peer scenario to the objects a run needs: the graph, every node's data and objective (the
:class:`~fdp_flower.algorithms.p2p.problems.NetworkProblem`) and the resolved algorithm (:class:`P2PAlgorithm`:
its step sizes, its noise plan and how each release is calibrated).  Pure functions of the public scenario, so
the relay, the nodes and the audit build the same ones.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from fdp_flower.algorithms.p2p import budget as _budget
from fdp_flower.algorithms.p2p.budget import NoisePlan
from fdp_flower.core.schedules import StepSchedule

ALGORITHM_KINDS = ("zcdp_nfl", "dp_nfl", "decentralized_admm", "zcdp_grad_nfl", "pr_admm", "p_admm")

#: Ledger mechanism of a node's noisy descent term -(1/m_i) sum_j grad l(point; a_ij, y_ij) + N(0, sigma^2 I)
#: (every linearized step: zCDP-NFL, DP-NFL, decentralized ADMM, grad-NFL, P-ADMM, PR-ADMM linearized): 2G/m_i.
TERM_MECHANISM = "p2p_subgradient"
#: Ledger mechanism of PR-ADMM's exact local solve, released with its noise: V / (m_i eta |V_i|).
EXACT_MECHANISM = "pr_admm_primal"


@dataclass(frozen=True)
class P2PAlgorithm:
    """A fully resolved peer-to-peer algorithm (pure data; built by :func:`build_algorithm`).

    kind : one of ``ALGORITHM_KINDS``.
    rounds : T, the number of rounds.
    penalty : rho of zCDP-NFL / eta of PR-ADMM and P-ADMM (the ADMM penalty; unused by grad-NFL).
    step_schedule : eta_k of the linearized step, a_k of grad-NFL, P-ADMM's constant gamma.
    noise : the per-round calibration (mode "none" for non-private runs).
    gradient_bound : G (V in Ding et al. (2019)).
    threshold : PR-ADMM's U (inf disables it).
    local_solver : PR-ADMM's "exact" (Newton) or "linearized".
    paper_constants : PR-ADMM's Lemma 5 sensitivity V / (eta |V_i|).
    anchor : zCDP-NFL's linearization point: "released" (xt_i^k, Gauthier et al. (2023)) or "neighbourhood_average"
        (sum_{j in N_i u {i}} W_ij xt_j^k, Metropolis weights; not in the paper).  Both are releases, so the node's
        descent term keeps its sensitivity 2G/m_i at either.
    """

    kind: str
    rounds: int
    penalty: float
    step_schedule: StepSchedule
    noise: NoisePlan
    gradient_bound: float
    threshold: float = math.inf
    local_solver: str = "exact"
    paper_constants: bool = False
    anchor: str = "released"

    def __post_init__(self):
        if self.kind not in ALGORITHM_KINDS:
            raise ValueError(f"unknown peer-to-peer algorithm {self.kind!r}; choose one of {', '.join(ALGORITHM_KINDS)}")
        if self.rounds < 1:
            raise ValueError(f"rounds must be >= 1, got {self.rounds}")
        if not self.penalty > 0:
            raise ValueError(f"the ADMM penalty must be > 0, got {self.penalty}")
        if self.local_solver not in ("exact", "linearized"):
            raise ValueError(f"local_solver must be exact or linearized, got {self.local_solver!r}")
        if self.anchor not in ("released", "neighbourhood_average"):
            raise ValueError(f"anchor must be released or neighbourhood_average, got {self.anchor!r}")

    @property
    def exact(self) -> bool:
        """Whether a node releases its exact local solution (PR-ADMM with the Newton solve) rather than its
        descent term."""
        return self.kind == "pr_admm" and self.local_solver == "exact"

    @property
    def mechanism(self) -> str:
        """The ledger mechanism of the node's release (:data:`TERM_MECHANISM` or :data:`EXACT_MECHANISM`)."""
        return EXACT_MECHANISM if self.exact else TERM_MECHANISM

    def sensitivity(self, m: int, degree: int) -> float:
        """Replace-one l2-sensitivity of a node's release (docs/algorithms.md, eq. (3.4)): the descent term's
        2G/m_i (one replaced row moves the clipped mean subgradient by at most 2G/m_i, whatever the point), or the
        exact solve's V / (m_i eta |V_i|) (eq. (4.5); ``paper_constants``: Lemma 5's V / (eta |V_i|))."""
        from fdp_flower.algorithms.p2p.pr_admm import pr_sensitivity

        if self.exact:
            return pr_sensitivity(gradient_bound=self.gradient_bound, m=m, eta=self.penalty, degree=degree,
                                  paper_constants=self.paper_constants)
        return 2.0 * self.gradient_bound / m

    def release_parameters(self, round_: int, m: int, degree: int) -> tuple[float, float] | None:
        """(sensitivity, sigma) of the node's release in ``round_`` (in the release's own units); None when not
        private."""
        if not self.noise.private:
            return None
        sens = self.sensitivity(m, degree)
        return sens, self.noise.sigma(sens, round_)

    def primal_release_parameters(self, round_: int, m: int, degree: int, curvature=0.0):
        """(sensitivity, sigma) in the papers' primal units (the noisy primal x_i + N(0, sigma^2 I) of eqs. (3.2),
        (3.8), (4.3)): the release's times :meth:`primal_scale`; None when not private."""
        params = self.release_parameters(round_, m, degree)
        if params is None:
            return None
        scale = self.primal_scale(round_, degree, curvature)
        return params[0] * scale, params[1] * scale

    def primal_scale(self, round_: int, degree: int, curvature=0.0):
        """The factor c_k by which the node's primal x_i depends on its descent term (x_i = public part + c_k d_i):
        its noise in primal units is c_k sigma.  zCDP-NFL, DP-NFL, decentralized ADMM 1 / (1/eta_k + 2 rho |N_i|),
        PR-ADMM linearized 1 / (1/eta_k + 2 eta |V_i|), P-ADMM 1 / (1/gamma + 2 eta |N_i| + (lam/N) c) (per
        coordinate, ``curvature`` = (lam/N) c), grad-NFL a_k; 1 for the exact solve (the release is the primal)."""
        eta_k = float(self.step_schedule(round_))
        if self.exact:
            return 1.0
        if self.kind == "zcdp_grad_nfl":
            return eta_k
        if self.kind == "p_admm":
            return 1.0 / (1.0 / eta_k + 2.0 * self.penalty * degree + np.asarray(curvature, dtype=float))
        return 1.0 / (1.0 / eta_k + 2.0 * self.penalty * degree)


# ---------------------------------------------------------------- graph
def build_graph(topology, num_nodes: int, seed: int):
    """The :class:`fdp_flower.algorithms.p2p.topology.Graph` of a topology config on ``num_nodes`` nodes; random
    ones use ``graph_rng(seed)``."""
    from fdp_flower.algorithms.p2p import topology as t

    rng = t.graph_rng(seed)
    kind = topology.kind
    if kind == "ring":
        return t.ring(num_nodes)
    if kind == "complete":
        return t.complete(num_nodes)
    if kind == "star":
        return t.star(num_nodes, topology.center)
    if kind == "random_regular":
        return t.random_regular(num_nodes, topology.degree, rng)
    if kind == "erdos_renyi":
        return t.erdos_renyi(num_nodes, topology.edge_probability(num_nodes), rng, max_tries=topology.max_tries)
    if kind == "small_world":
        return t.small_world(num_nodes, topology.k, topology.beta, rng)
    if kind == "paper004_five":
        if num_nodes != 5:
            raise ValueError(f"the paper004_five graph has 5 nodes, not {num_nodes}")
        return t.paper004_five()
    return t.from_edges(num_nodes, topology.edges)


def scenario_graph(scenario):
    """The graph of a :class:`~fdp_flower.algorithms.p2p.config.P2PScenario`."""
    return build_graph(scenario.topology, scenario.federation.num_clients, scenario.seed)


# ---------------------------------------------------------------- problem
def model_objects(model):
    """(loss, penalty, lam) of a ``model`` section (:class:`~fdp_flower.algorithms.p2p.config.P2PModelConfig`):
    the intercept column, when there is one, is left out of the penalty."""
    from fdp_flower.core.losses import make_loss
    from fdp_flower.core.penalties import Penalty

    lc, pc = model.loss, model.penalty
    loss = make_loss(lc.kind, tau=lc.tau, residual_bound=lc.residual_bound)
    penalty = Penalty(pc.kind, lam1=pc.lam1, lam2=pc.lam2, unpenalized=int(model.intercept))
    return loss, penalty, float(pc.lam)


def build_problem(scenario, *, with_reference: bool = True):
    """The :class:`fdp_flower.algorithms.p2p.problems.NetworkProblem` of a scenario: ``federation.num_clients``
    nodes' rows (data stream of the seed) and the objective of its ``model`` section."""
    from fdp_flower.algorithms.p2p import problems as p

    data, model = scenario.data, scenario.model
    num_nodes = scenario.federation.num_clients
    loss, penalty, lam = model_objects(model)
    rng = p.data_rng(scenario.seed)
    c1 = model.clip_c1
    if data.kind == "synthetic_regression":
        return p.synthetic_problem(data.problem, num_nodes=num_nodes, samples_per_node=data.samples_per_node,
                                   dim=data.dim, noise=data.noise, c1=c1, heterogeneity=data.heterogeneity, rng=rng,
                                   loss=loss, penalty=penalty, lam=lam, with_reference=with_reference)
    if data.kind == "arrays":
        if len(data.paths) != num_nodes:
            raise ValueError(f"data.paths names {len(data.paths)} files for a graph of {num_nodes} nodes")
        return p.arrays_problem(data.paths, data.digests, loss=loss, penalty=penalty, lam=lam, c1=c1,
                                intercept=model.intercept, intercept_share=model.intercept_share,
                                with_reference=with_reference)
    if data.kind == "adult_nodes":
        return p.adult_problem(num_nodes=num_nodes, samples_per_node=data.samples_per_node,
                               test_samples=data.test_samples, loss=loss, penalty=penalty, lam=lam, c1=c1, rng=rng,
                               path=data.path, with_reference=with_reference)
    return p.breast_cancer_problem(num_nodes=num_nodes, samples_per_node=data.samples_per_node,
                                   test_samples=data.test_samples, loss=loss, penalty=penalty, lam=lam, c1=c1,
                                   rng=rng, with_reference=with_reference)


# ---------------------------------------------------------------- algorithm
def _schedule(step) -> StepSchedule:
    return StepSchedule(step.kind, eta0=step.eta0)


def noise_plan(cfg, privacy) -> NoisePlan:
    """The noise plan of an algorithm config and the privacy section (docs/p2p.md, "Privacy"): none, DP-NFL's classic
    rule, or the zCDP schedule (``algorithm.budget`` / ``algorithm.decay``) scaled to the total (eps, delta) by the PLD
    accountant (``paper_constants``: the papers' Bun-Steinke conversion) or from a per-round (eps, delta)."""
    from fdp_flower.algorithms.p2p.config import check_privacy_section

    rounds = cfg.rounds
    check_privacy_section(privacy)
    if not (privacy.enabled and cfg.kind != "decentralized_admm"):
        return NoisePlan()
    total = privacy.mode == "total"
    if cfg.kind == "dp_nfl":
        return (NoisePlan.classic_total(rounds, privacy.eps, privacy.delta) if total
                else NoisePlan.classic_per_step(privacy.eps, privacy.delta))
    if cfg.kind in ("pr_admm", "p_admm"):
        d = cfg.decay
        mult = (_budget.periodic_multipliers(rounds, d.decay, d.period) if d.kind == "periodic"
                else _budget.iteration_multipliers(rounds, d.rate))
    else:
        b = cfg.budget
        mult = (_budget.constant_multipliers(rounds) if b.kind == "constant"
                else _budget.geometric_multipliers(rounds, b.ratio))
    if not total:
        return NoisePlan.zcdp_per_step(mult, privacy.eps, privacy.delta)
    if privacy.paper_constants:  # the papers' Bun-Steinke conversion of the zCDP total
        return NoisePlan.zcdp_total(mult, privacy.eps, privacy.delta)
    return NoisePlan.pld_total(mult, privacy.eps, privacy.delta)  # the tightest: the PLD accountant, as the ledger


def build_algorithm(cfg, privacy, problem) -> P2PAlgorithm:
    """Resolve an algorithm config, the privacy section and the problem's G into a :class:`P2PAlgorithm`."""
    from fdp_flower.algorithms.p2p.problems import is_smooth

    noise = noise_plan(cfg, privacy)
    g = problem.gradient_bound(paper_constants=privacy.paper_constants)
    if cfg.kind == "pr_admm":
        smooth = is_smooth(problem.loss, problem.penalty)
        solver = cfg.local_solver if cfg.local_solver != "auto" else ("exact" if smooth else "linearized")
        if solver == "exact" and not smooth:
            raise ValueError(f"PR-ADMM's exact local solve needs a smooth f_i; the {problem.loss.name} loss with "
                             f"the {problem.penalty.kind} penalty is not (use local_solver: linearized)")
        return P2PAlgorithm(kind="pr_admm", rounds=cfg.rounds, penalty=cfg.eta, step_schedule=_schedule(cfg.step),
                            noise=noise, gradient_bound=g,
                            threshold=math.inf if cfg.threshold is None else cfg.threshold,
                            local_solver=solver, paper_constants=privacy.paper_constants)
    if cfg.kind == "p_admm":
        if not is_smooth(problem.loss, problem.penalty):
            raise ValueError(f"P-ADMM needs a smooth objective; the {problem.loss.name} loss with the "
                             f"{problem.penalty.kind} penalty is not (use zcdp_nfl)")
        return P2PAlgorithm(kind="p_admm", rounds=cfg.rounds, penalty=cfg.eta,
                            step_schedule=StepSchedule("constant", eta0=cfg.gamma), noise=noise, gradient_bound=g)
    return P2PAlgorithm(kind=cfg.kind, rounds=cfg.rounds, penalty=getattr(cfg, "rho", 1.0),
                        step_schedule=_schedule(cfg.step), noise=noise, gradient_bound=g,
                        anchor=getattr(cfg, "anchor", "released"))


def scenario_setup(scenario, *, with_reference: bool = True):
    """(graph, problem, algorithm) of a scenario (the problem's reference x* only ``with_reference``)."""
    graph = scenario_graph(scenario)
    problem = build_problem(scenario, with_reference=with_reference)
    return graph, problem, build_algorithm(scenario.algorithm, scenario.privacy, problem)
