"""Typed configuration of DP-ADMM / DP-AccADMM runs (Xu et al. 2020; docs/algorithms.md, section 5), pydantic v2.

All models are frozen with ``extra="forbid"`` (:class:`fdp_flower.config.base._Frozen`); the variants are
unions tagged by ``kind`` (:func:`fdp_flower.config.base.tagged_union`; a section without ``kind`` takes
the first):

* algorithms: :class:`DPADMMConfig` (``kind="dp_admm"``), :class:`DPAccADMMConfig`
  (``kind="dp_acc_admm"``);
* constraint matrix A: :class:`GraphGuidedConstraint` (``"graph_guided"``), :class:`LassoConstraint`
  (``"lasso"``), :class:`UserConstraint` (``"user"``);
* data sources (one class each in :mod:`fdp_flower.data.sources`): :class:`AdultA9AData` (``"adult_a9a"``),
  :class:`BreastCancerData` (``"breast_cancer"``), :class:`ArraysData` (``"arrays"``);
* the penalty lam ||A x||_1: ``model.penalty`` (:class:`GeneralizedLassoPenalty`, kind ``l1`` and the
  weight ``lam``, the name every family uses) applied to A x, A from ``model.constraint``;
* :class:`GradientADMMScenario`, a complete run description for these algorithms, used by the
  YAML files ``scenarios/dp_admm_*.yaml`` (:func:`load_gradient_admm_scenario`).

Renamed fields fail in one line naming the new one (:data:`RENAMED`, e.g. ``model.lam: renamed to
model.penalty.lam``).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator

from fdp_flower.algorithms.gradient_admm.nonprivate import ROUND_CAP as NONPRIVATE_ROUND_CAP
from fdp_flower.config.base import (
    ResultName,
    _Frozen,
    read_yaml_file,
    refuse_renamed,
    tagged_union,
    validate_mapping,
)
from fdp_flower.config.sections import (
    AdultFilesSection,
    FederationConfig,
    LossConfig,
    OutputConfig,
    TabularNodeFiles,
)

#: old dotted field -> its new name (the scenario refuses the old one in one line)
RENAMED = {"model.lam": "model.penalty.lam"}


# ---------------------------------------------------------------- data sources
class AdultA9AData(AdultFilesSection):
    """UCI Adult, one-hot encoded like LIBSVM a9a (123 features), labels in {-1, +1}; the files' ``path`` is
    the shared :class:`fdp_flower.config.sections.AdultFilesSection`."""

    kind: Literal["adult_a9a"] = "adult_a9a"
    normalise: bool = Field(True, description="divide rows by sqrt(14) (public) before clipping to c1")
    train_subsample: int | None = Field(None, ge=10, le=1_000_000,
                                        description="use only this many training rows (null: all 32,561)")


class BreastCancerData(_Frozen):
    """scikit-learn's breast-cancer data (569 x 30), standardized, random train/test split."""

    kind: Literal["breast_cancer"] = "breast_cancer"
    test_fraction: float = Field(0.3, gt=0, lt=1, description="share of rows held out for test accuracy")


class ArraysData(_Frozen):
    """Tabular rows a caller holds in memory (:func:`fdp_flower.fit_gradient`): one ``.npz`` per client
    with arrays ``features`` (m_i, K) and ``response`` (m_i,); client i reads ``paths[i]``.  The scenario
    names the files and their SHA-256 digests, never the values."""

    kind: Literal["arrays"] = "arrays"
    paths: list[str] = Field(..., min_length=1, max_length=10_000, description="one .npz per client")
    digests: list[str] | None = Field(None, max_length=10_000, description="SHA-256 (hex) of each file; null: "
                                      "not checked")
    test_path: str | None = Field(None, min_length=1, description="an .npz of held-out rows for test accuracy")
    intercept: bool = Field(False, description="prepend the public column c0 = intercept_share c1 to every row "
                            "(features clipped to the room left, G unchanged; outside A x)")
    intercept_share: float = Field(0.5, gt=0, lt=1, description="c0 / c1 of the intercept column")

    @model_validator(mode="after")
    def _digests(self):
        if self.digests is not None and len(self.digests) != len(self.paths):
            raise ValueError(f"digests has {len(self.digests)} entries for {len(self.paths)} paths")
        return self


class InMemoryRowsData(_Frozen):
    """Tabular rows a caller holds in memory (:func:`fdp_flower.fit_gradient`), passed to the in-process engine as
    arrays: nothing is written to disk.  The scenario names only their SHA-256 digest
    (:func:`fdp_flower.data.tabular.rows_digest`), so it runs in the process that holds them (Flower runs read
    one file per client: data kind ``arrays``)."""

    kind: Literal["in_memory"] = "in_memory"
    digest: str = Field(min_length=1, max_length=100, description="SHA-256 of the clients' features and responses")
    intercept: bool = Field(False, description="prepend the public column c0 = intercept_share c1 to every row "
                            "(features clipped to the room left, G unchanged; outside A x)")
    intercept_share: float = Field(0.5, gt=0, lt=1, description="c0 / c1 of the intercept column")
    test_path: None = Field(None, description="no held-out rows")


TabularDataSource = tagged_union(AdultA9AData, BreastCancerData, ArraysData, InMemoryRowsData, TabularNodeFiles,
                                 default="adult_a9a")


# ---------------------------------------------------------------- constraint matrix A
class GraphGuidedConstraint(_Frozen):
    """A = [W; I], W from the sparsity pattern of scikit-learn's GraphicalLasso (graph-guided fused lasso)."""

    kind: Literal["graph_guided"] = "graph_guided"
    alpha: float = Field(0.3, gt=0, le=10, description="GraphicalLasso regularization (larger: fewer edges)")
    max_iter: int = Field(200, ge=1, le=10_000, description="GraphicalLasso iterations")


class LassoConstraint(_Frozen):
    """A = I: the plain lasso."""

    kind: Literal["lasso"] = "lasso"


class UserConstraint(_Frozen):
    """A user-given matrix, a .npy or .csv file with d columns."""

    kind: Literal["user"] = "user"
    path: str = Field(..., min_length=1, description="file holding A (.npy, or .csv with commas)")


ConstraintConfig = tagged_union(GraphGuidedConstraint, LassoConstraint, UserConstraint, default="graph_guided")


class GeneralizedLassoPenalty(_Frozen):
    """The penalty lam ||A x||_1 of the generalized lasso: the l1 norm (``kind: l1``, the one kind) of A x,
    A from ``model.constraint`` (A = I: the plain lasso), weighted by ``lam`` -- the field every family
    names the penalty weight with (``model.penalty.lam``, the run-config key ``lam``)."""

    kind: Literal["l1"] = Field("l1", description="P = ||.||_1 applied to A x (the generalized lasso)")
    lam: float = Field(1.0e-3, ge=0, le=1.0e3, description="lambda: weight of ||A x||_1")


class GeneralizedLassoModel(_Frozen):
    """min_x (1/n) sum_j l(x; a_j, y_j) + lam ||A x||_1."""

    loss: LossConfig = LossConfig(kind="logistic")
    penalty: GeneralizedLassoPenalty = Field(GeneralizedLassoPenalty(), description="lam ||A x||_1")
    constraint: ConstraintConfig = Field(GraphGuidedConstraint(), description="the matrix A of ||A x||_1")
    clip_c1: float = Field(1.0, gt=0, le=1.0e6, description="c1: client-side row-norm clip of the features")


# ---------------------------------------------------------------- algorithms
class _GradientADMMBase(_Frozen):
    rounds: int = Field(200, ge=1, le=1_000_000, description="T: iterations (the noise is calibrated for T); with "
                        f"privacy off the cap of the stop (5.13), default {NONPRIVATE_ROUND_CAP}")
    rho: float = Field(0.3, gt=0, le=1.0e6, description="ADMM penalty rho")
    eta: float = Field(4.0, gt=0, le=1.0e6, description="step size eta (1/L_f = 4/c1^2 for the logistic loss)")
    gamma: float | None = Field(None, gt=0, le=1.0e12, description="proximal weight gam; null: the smallest "
                                "admissible eta rho ||A^T A|| + 1 (smaller values are refused at run time)")
    mu: float = Field(0.5, gt=0, lt=1, description="Theorem 1's split mu of eps between RDP and the conversion")
    neighbouring: Literal["add_remove", "replace_one"] = Field(
        "add_remove", description="relation the guarantee is stated for; the mean gradient's sensitivity is 2c/m "
        "under both, so sigma is the same (twice the paper's, whose c/n is not valid for a mean)")
    nonprivate_step: Literal["proximal_bb", "admm"] = Field(
        "proximal_bb", description="the server's step with privacy off: a proximal Barzilai-Borwein step that "
        "stops when the iterate settles (docs/algorithms.md, eqs. (5.11)-(5.13); rounds is then a cap, default "
        f"{NONPRIVATE_ROUND_CAP}), or the paper's ADMM step as with privacy on; ignored with privacy on")
    init_dual: Literal["zero", "paper"] = Field(
        "zero", description="u_0 = 0, or the paper's -(A^T)^+ grad f(x_0) / rho (non-private runs only)")


class DPADMMConfig(_GradientADMMBase):
    """DP-ADMM (Xu et al. 2020, Algorithm 2), gradient perturbation; ADMM when privacy is off."""

    kind: Literal["dp_admm"] = "dp_admm"


class DPAccADMMConfig(_GradientADMMBase):
    """DP-AccADMM (Xu et al. 2020, Algorithm 3): DP-ADMM with Nesterov extrapolation of x and u."""

    kind: Literal["dp_acc_admm"] = "dp_acc_admm"
    restart: bool = Field(False, description="gradient-based adaptive restart of the momentum "
                          "(O'Donoghue & Candes 2015); false is the paper's algorithm")


GradientAlgorithm = tagged_union(DPADMMConfig, DPAccADMMConfig, default="dp_admm")


class GradientPrivacyConfig(_Frozen):
    """One (eps, delta) for the whole run of T rounds, per client (PLD calibration; Theorem 1 with
    ``paper_constants``)."""

    enabled: bool = Field(True, description="false: no noise (ADMM / AccADMM)")
    eps: float = Field(0.5, gt=0, le=1.0e3, description="total eps over the T rounds")
    delta: float = Field(1.0e-3, gt=0, lt=1, description="total delta (the paper: 1e-3)")
    paper_constants: bool = Field(False, description="calibrate sigma by Theorem 1's fixed-order RDP route (the "
                                  "paper's, more noise for the same (eps, delta)); false: by the PLD accountant, "
                                  "so the run spends its budget as the ledger reports it")


#: the one line that refuses a graph-guided A on node files (the scenario, and the server's
#: :func:`fdp_flower.algorithms.gradient_admm.nodes.node_constraint_matrix`)
GRAPH_GUIDED_REFUSAL = ("model.constraint: graph_guided estimates A on the pooled rows, which no process holds on "
                        "node files (data.kind: node_files); use kind lasso (A = I) or kind user with the path of A")


class GradientADMMScenario(_Frozen):
    """A complete DP-(Acc)ADMM run."""

    name: ResultName = Field("dp_admm", min_length=1, max_length=200, description="name used for result files")
    seed: int = Field(0, ge=0, le=2**63 - 1, strict=True, description="seeds the split and the noise")
    data: TabularDataSource = AdultA9AData()
    federation: FederationConfig = FederationConfig()
    model: GeneralizedLassoModel = GeneralizedLassoModel()
    algorithm: GradientAlgorithm = DPADMMConfig()
    privacy: GradientPrivacyConfig = GradientPrivacyConfig()
    output: OutputConfig = OutputConfig()

    @model_validator(mode="before")
    @classmethod
    def _renamed(cls, data: Any) -> Any:
        refuse_renamed(data, RENAMED)
        return _nonprivate_rounds(data)

    @model_validator(mode="after")
    def _consistent(self):
        if self.privacy.enabled and self.algorithm.init_dual == "paper":
            raise ValueError("algorithm.init_dual 'paper' releases grad f(x_0) without noise; "
                             "use 'zero' when privacy is enabled")
        if (not self.privacy.enabled and self.algorithm.init_dual == "paper"
                and self.algorithm.nonprivate_step == "proximal_bb"):
            raise ValueError("algorithm.init_dual 'paper' is the start of the paper's ADMM step; with privacy off set "
                             "algorithm.nonprivate_step: admm to use it")
        if self.model.loss.kind == "squared":
            raise ValueError("model.loss: the generalized-lasso runs support logistic, quantile and absolute")
        if self.data.kind == "node_files" and self.model.constraint.kind == "graph_guided":
            raise ValueError(GRAPH_GUIDED_REFUSAL)
        if self.data.kind == "node_files" and self.algorithm.init_dual == "paper":
            raise ValueError("algorithm.init_dual 'paper' is computed from every site's noise-free gradient at 0, "
                             "which no process holds on node files (data.kind: node_files); use 'zero'")
        if self.data.kind == "arrays" and len(self.data.paths) != self.federation.num_clients:
            raise ValueError(f"data.paths names {len(self.data.paths)} files for federation.num_clients = "
                             f"{self.federation.num_clients}")
        return self


def _nonprivate_rounds(data: Any) -> Any:
    """``algorithm.rounds`` defaults to :data:`NONPRIVATE_ROUND_CAP` (a cap of the stop (5.13)) when privacy is off
    and the proximal step runs, to 200 (T of the calibration) otherwise; a given value is kept."""
    if not isinstance(data, dict):
        return data
    privacy, alg = data.get("privacy"), data.get("algorithm")
    alg = {} if alg is None else alg
    if not (isinstance(privacy, dict) and privacy.get("enabled") is False and isinstance(alg, dict)):
        return data
    if "rounds" in alg or alg.get("nonprivate_step", "proximal_bb") != "proximal_bb":
        return data
    return {**data, "algorithm": {**alg, "rounds": NONPRIVATE_ROUND_CAP}}


def load_gradient_admm_scenario(path: str | Path) -> GradientADMMScenario:
    """Read and validate a YAML scenario; errors are one :class:`ScenarioError` line."""
    return validate_mapping(GradientADMMScenario, read_yaml_file(path), str(path))
