"""The peer-to-peer site function: the only code that reads a node's rows and draws its noise (docs/p2p.md,
"What a node releases"; the protocol: :mod:`fdp_flower.algorithms.protocol`).

A node holds its clipped rows (a_ij, y_ij), j = 1..m_i.  Each round the relay names a public point and the node
releases its **noisy data term** and nothing else:

- every linearized step (zCDP-NFL, DP-NFL, decentralized ADMM, zCDP-grad-NFL, P-ADMM, PR-ADMM with the linearized
  local step): the descent term at the point z the relay names -- the node's own last release xt_i^k, or the
  Metropolis average of its and its neighbours' releases --

      d~_i = -(1/m_i) sum_j grad l(z; a_ij, y_ij) + N(0, sigma^2 I),   Delta = 2 G / m_i,  sigma = z_k Delta,   (3.1')

  (ledger mechanism ``p2p_subgradient``; z_k the round's noise multiplier of the scenario's plan).  Each
  per-record term is bounded by G at *any* point, so one replaced row moves the mean by at most 2G/m_i whatever
  the relay sends; the node's primal x_i = (public affine part) + c_k d~_i is the relay's post-processing
  (:mod:`fdp_flower.algorithms.p2p.protocol`), so no value it sends can scale the noise, shift it or absorb it in
  floating point (the term is bounded by G, the noise is drawn for it alone).  This is the same mechanism as the
  papers' noisy primal x_i + N(0, (c_k sigma)^2 I), its affine image;
- PR-ADMM's **exact** local solve (Newton on a smooth f_i) cannot be split into a data term and a public affine
  part: the node solves eq. (12) itself with the public dual alpha_i and neighbour sum b_i = |V_i| xt_i + sum_j xt_j
  (after the threshold), started at its own release, and releases its noisy solution
  (Delta = V / (m_i eta |V_i|), eq. (4.5); mechanism ``pr_admm_primal``).  |V_i| and eta are the node's own (the
  public graph and scenario), so the relay cannot change the strong convexity the sensitivity rests on.  Its rule
  (:func:`_exact_release`): nothing is released unless

  * the solve converges to ||grad phi(x)|| <= 10^-6 * 2V/m_i, i.e. x is within 10^-6 Delta of the exact minimizer
    (strong convexity 2 eta |V_i|) -- a crafted alpha_i or b_i whose size leaves Newton short of that is refused;
  * max_k |x_k| * 2^-52 <= 10^-6 Delta: the rounding of the solution and of x + noise moves the release by at most
    a millionth of Delta, and the spacing of floats near the release stays far below the noise's sigma >= z_k Delta.

  So the release's sensitivity is at most (1 + 4 * 10^-6) Delta; the ledger records Delta (the exact minimizer's),
  a difference below 10^-5 in the zCDP cost of a release.

Every public value a node is sent is checked first (:func:`check_node_public`: shape, finite, |v| <= 1e100, no
nonzero value below the smallest normal float -- no iterate of a run is that small); a refused request releases
nothing and draws no noise.  The noise of node i in round r comes from the :data:`NoiseSource` it is handed
(``release_rng(seed, i, r)`` of the run seed for simulated data), called only once the noise-free value passed
every check, so every engine draws the same noise.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from fdp_flower.algorithms.p2p.plan import P2PAlgorithm
from fdp_flower.algorithms.p2p.pr_admm import local_solve
from fdp_flower.algorithms.protocol import NoiseSource, PublicValueError, SiteRelease, SiteRequest, check_public
from fdp_flower.privacy.ledger import GaussianRelease

#: The fraction of its sensitivity by which an exact local solution may be off (solver residual, rounding).
SOLVE_ACCURACY = 1e-6
#: The public values of a request: the point (every kind) and, for the exact solve, the dual and neighbour sum.
TERM_PUBLIC = ("point",)
EXACT_PUBLIC = ("point", "dual", "neighbour_sum")


def check_node_public(name: str, value, dim: int) -> np.ndarray:
    """:func:`~fdp_flower.algorithms.protocol.check_public` of a (dim,) value, and refuse a nonzero value below the
    smallest normal float (one-line :class:`PublicValueError`)."""
    arr = check_public(name, value, (dim,))
    tiny = np.finfo(float).tiny
    if np.any((arr != 0) & (np.abs(arr) < tiny)):
        raise PublicValueError(f"{name} has a subnormal value (nonzero, magnitude < {tiny:.3g}), which no "
                               "iterate reaches")
    return arr


@dataclass(frozen=True)
class NodeData:
    """The rows of the nodes a site (or a simulation) holds: ``rows[node] = (features (m_i, K), response (m_i,))``."""

    rows: Mapping[int, tuple[np.ndarray, np.ndarray]]

    @classmethod
    def of_problem(cls, problem, nodes: Sequence[int] | None = None) -> NodeData:
        """Every node of a :class:`~fdp_flower.algorithms.p2p.problems.NetworkProblem` (or ``nodes``)."""
        nodes = range(problem.num_nodes) if nodes is None else nodes
        return cls({int(i): (problem.features[i], problem.responses[i]) for i in nodes})

    def of(self, node: int) -> tuple[np.ndarray, np.ndarray]:
        if node not in self.rows:
            raise ValueError(f"this site does not hold node {node}")
        return self.rows[node]


@dataclass(frozen=True)
class SitePlan:
    """What a node needs to compute and calibrate its releases, all public: the resolved algorithm (its kind, G,
    noise plan, eta, local solver), the objective (loss; with the penalty for the exact solve), every node's degree
    in the public graph and the dimension K."""

    algorithm: P2PAlgorithm
    objective: object
    degrees: tuple[int, ...]
    dim: int

    @property
    def public_names(self) -> tuple[str, ...]:
        return EXACT_PUBLIC if self.algorithm.exact else TERM_PUBLIC

    def calibration(self, round_: int, node: int, m: int) -> tuple[float, float | None]:
        """(Delta, sigma) of ``node``'s release in ``round_`` (sigma None: privacy off)."""
        alg = self.algorithm
        if not 1 <= round_ <= alg.rounds:
            raise ValueError(f"round {round_} is outside 1..{alg.rounds}: the noise was calibrated for "
                             f"{alg.rounds} rounds")
        sensitivity = alg.sensitivity(m, self.degrees[node])
        return sensitivity, (alg.noise.sigma(sensitivity, round_) if alg.noise.private else None)

    def event(self, round_: int, node: int, m: int) -> GaussianRelease | None:
        """The ledger event of ``node``'s release in ``round_`` (None: no noise)."""
        sensitivity, sigma = self.calibration(round_, node, m)
        return None if sigma is None else GaussianRelease(int(node), int(round_), float(sensitivity), float(sigma),
                                                          mechanism=self.algorithm.mechanism)


def site_plan(algorithm: P2PAlgorithm, objective, graph, dim: int) -> SitePlan:
    """The :class:`SitePlan` of a run (the relay, every node and the audit build the same one)."""
    return SitePlan(algorithm, objective, tuple(int(d) for d in graph.degrees), int(dim))


@dataclass
class NodeEvaluation:
    """The noise-free value behind one release and the local solver's iterations, kept by a simulation for its
    metrics (the in-process engine: the private x_i, evaluation only); never part of a reply."""

    value: np.ndarray
    solver_iterations: int = 0


def descent_term(plan: SitePlan, point: np.ndarray, features, response) -> np.ndarray:
    """The noise-free descent term -(1/m_i) sum_j grad l(point; a_ij, y_ij) (eq. (3.1'))."""
    with np.errstate(all="ignore"):
        term = -plan.objective.loss.mean_subgradient(point, features, response)
    if not np.all(np.isfinite(term)):
        raise ValueError("the descent term is not finite at the point the relay named; nothing released")
    return term


def exact_solution(plan: SitePlan, node: int, public: Mapping[str, np.ndarray], features, response
                   ) -> tuple[np.ndarray, int]:
    """The noise-free exact local solution of eq. (12) and its Newton iterations, or ``ValueError`` (nothing
    released) under the rule of the module docstring."""
    alg = plan.algorithm
    degree = plan.degrees[node]
    m = len(response)
    true_sensitivity = alg.gradient_bound / (m * alg.penalty * degree)  # V / (m eta d), the minimizer's
    accuracy = SOLVE_ACCURACY * 2.0 * alg.gradient_bound / m  # ||grad phi|| <= this: x within 1e-6 Delta of x*
    with np.errstate(all="ignore"):
        x, iters, gn = local_solve(objective=plan.objective, start=public["point"],
                                   neighbour_sum=public["neighbour_sum"], dual=public["dual"], degree=degree,
                                   features=features, response=response, eta=alg.penalty, accuracy=accuracy)
    if not (np.all(np.isfinite(x)) and np.isfinite(gn)) or gn > accuracy:
        raise ValueError(f"the local Newton solve did not reach ||grad|| <= {accuracy:.3g} (got {gn:.3g}) from the "
                         "public values it was sent; nothing released")
    if float(np.max(np.abs(x))) * np.finfo(float).eps > SOLVE_ACCURACY * true_sensitivity:
        raise ValueError(f"the local solution's magnitude {float(np.max(np.abs(x))):.3g} would let floating point "
                         "absorb part of the noise; nothing released")
    return x, iters


def answer(requests: Sequence[SiteRequest], data: NodeData, plan: SitePlan, noise: NoiseSource, *,
           evaluation: dict[int, NodeEvaluation] | None = None) -> list[SiteRelease | Exception]:
    """The site's answer to the requests of one round, one entry per request: the node's
    :class:`~fdp_flower.algorithms.protocol.SiteRelease` (its noisy data term, module docstring), or the exception
    that refuses that node alone (a public value the site does not accept, a solve it cannot certify, the site's
    policy through ``noise``); a refused node releases nothing and draws no noise.

    ``request.client`` names the node (None: the site's one node).  ``evaluation`` (a simulation's) receives each
    released node's noise-free value (:class:`NodeEvaluation`); nothing in it leaves the process.
    """
    out: list[SiteRelease | Exception] = []
    for request in requests:
        try:
            out.append(_release(request, data, plan, noise, evaluation))
        except Exception as exc:  # noqa: BLE001 -- the site's refusal of this node: nothing of it is released
            out.append(exc)
    return out


def _release(request: SiteRequest, data: NodeData, plan: SitePlan, noise: NoiseSource,
             evaluation: dict[int, NodeEvaluation] | None) -> SiteRelease:
    node = request.client
    if node is None:
        if len(data.rows) != 1:
            raise ValueError("the request does not name its node and this site holds several")
        node = next(iter(data.rows))
    node = int(node)
    features, response = data.of(node)
    round_ = int(request.round)
    sensitivity, sigma = plan.calibration(round_, node, len(response))
    unknown = sorted(set(request.public) - set(plan.public_names))
    if unknown:
        raise PublicValueError(f"the request carries {', '.join(unknown)}, which a {plan.algorithm.kind} node is "
                               "never sent")
    public = {name: check_node_public(name, request.public.get(name), plan.dim) for name in plan.public_names}
    iterations = 0
    if plan.algorithm.exact:
        value, iterations = exact_solution(plan, node, public, features, response)
    else:
        value = descent_term(plan, public["point"], features, response)
    noise_free, event = value, None
    if sigma is not None:
        event = GaussianRelease(node, round_, float(sensitivity), float(sigma), mechanism=plan.algorithm.mechanism)
        rng = noise([event])  # the site's charge happens here, after every check, right before the draw
        value = value + sigma * rng.standard_normal(plan.dim)
    if evaluation is not None:
        evaluation[node] = NodeEvaluation(noise_free, iterations)
    metrics = {"sensitivity": float(sensitivity), "sigma": 0.0 if sigma is None else float(sigma)}
    return SiteRelease(node, round_, value, len(response), event, metrics)
