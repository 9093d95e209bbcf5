"""The FDP-ADMM / F-ADMM scenario schema (Zhou & Xiang 2022): data, basis, model, algorithm, privacy.

Parsed once per run; frozen; unknown fields are errors.
"""
from __future__ import annotations

import math
import warnings
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import Field, model_validator

from fdp_flower.config.base import (
    ResultName,
    _Frozen,
    apply_overrides,
    read_yaml_file,
    tagged_union,
    validate_mapping,
)
from fdp_flower.config.functional import (
    Basis,
    DataSource,
    FixedBasis,
    NodeFiles,
    PaperSimulation,
    PooledBasis,
)
from fdp_flower.config.sections import (
    FaultsConfig,
    FederationConfig,
    ModelConfig,
    OutputConfig,
    PrivacyConfig,
    StepConfig,
    Theorem2Step,
)


# ---------------------------------------------------------------- algorithms
class EstimatorConfig(_Frozen):
    """The model a run releases at the end: a function of the global iterates w^1..w^L only
    (post-processing, no privacy cost); see :meth:`fdp_flower.algorithms.fdp_admm.update.FDPADMMState.estimate`."""

    kind: Literal["last", "average", "tail_average"] = Field(
        "last", description="last: w^L; average: (1/L) sum_l w^l; tail_average: the mean of the last "
                            "max(1, ceil(tail_fraction L)) iterates")
    tail_fraction: float = Field(0.5, gt=0, le=1, description="tail_average: fraction of the rounds averaged")


class RhoRuleConfig(_Frozen):
    """How the server sets the ADMM penalty rho^l of each round (docs/algorithms.md, eq. (1.16)).

    ``residual_balancing`` (Boyd et al. 2011, Sec. 3.4.1; He, Yang & Wang 2000): after round l,
    rho^{l+1} = factor rho^l if ||r^l|| > mu ||s^l||, rho^l / factor if ||s^l|| > mu ||r^l||, else rho^l.
    rho then depends on the residuals of the (noise-free) primals, so it is allowed with privacy off only.
    """

    kind: Literal["fixed", "residual_balancing"] = Field(
        "fixed", description="fixed: rho^l = algorithm.rho every round; residual_balancing: start at algorithm.rho "
                             "and rescale by the residuals (the default with privacy off)")
    mu: float = Field(10.0, gt=1, description="residual_balancing: imbalance ratio that triggers a change")
    factor: float = Field(2.0, gt=1, description="residual_balancing: rho is multiplied or divided by this")


class StoppingConfig(_Frozen):
    """When a run stops before ``algorithm.rounds`` (the cap): docs/algorithms.md, eq. (1.17)
    (Boyd et al. 2011, Sec. 3.3.1).  ``residuals``: after round l if ||r^l|| <= eps_pri and
    ||s^l|| <= eps_dual with eps_pri = sqrt(M K) tol_abs + tol_rel max(||(wt_i)_i||, sqrt(M) ||w||)
    and eps_dual = sqrt(M K) tol_abs + tol_rel ||(g_i)_i||."""

    kind: Literal["cap", "residuals"] = Field(
        "cap", description="cap: always run algorithm.rounds rounds; residuals: stop once both residuals are below "
                           "tolerance (algorithm.rounds is then a cap; the default with privacy off)")
    tol_abs: float = Field(1e-6, ge=0, description="residuals: absolute tolerance per coordinate (eps_abs)")
    tol_rel: float = Field(1e-3, ge=0, description="residuals: relative tolerance (eps_rel)")

    @model_validator(mode="after")
    def _some_tolerance(self):
        if self.kind == "residuals" and self.tol_abs == 0 and self.tol_rel == 0:
            raise ValueError("algorithm.stopping: tol_abs and tol_rel are both 0, the rule could never stop "
                             "(use kind 'cap')")
        return self


class FDPADMMConfig(_Frozen):
    """FDP-ADMM (privacy on) / F-ADMM (privacy off), Zhou & Xiang (2022)."""

    kind: Literal["fdp_admm"] = Field("fdp_admm", description="variant tag")
    rho: float = Field(0.1, gt=0, description="ADMM penalty rho")
    rounds: int = Field(30, ge=1, le=100_000, description="L: number of rounds")
    step: StepConfig = Field(Theorem2Step(), description="step size schedule eta_i^l")
    step_units: Literal["absolute", "whitened"] = Field(
        "absolute", description="absolute: eta as given; whitened (ellipsoid clip only): the constant, inv_sqrt or "
                                "inv schedule divided by c1^2 lambda_1 (lambda_1 the basis's largest score variance), "
                                "i.e. a step in the Mahalanobis units of the clip, unchanged when the curves are "
                                "rescaled")
    estimator: EstimatorConfig = Field(EstimatorConfig(), description="the released model (post-processing)")
    rho_rule: RhoRuleConfig = Field(
        RhoRuleConfig(), description="rho^l of each round (privacy off: residual_balancing unless set)")
    stopping: StoppingConfig = Field(
        StoppingConfig(), description="stopping rule (privacy off: residuals unless set; rounds is the cap)")
    rule: Literal["admm", "newton"] = Field(
        "admm", description="the server's rule on the released data terms: admm -- the paper's linearized ADMM "
                            "(rho, step, step_units, estimator, rho_rule, stopping apply); newton -- Newton steps in "
                            "the public metric of the basis's score variances with released residual densities, "
                            "dual averaging, a private location/scale search (inside response_bounds, else in "
                            "asinh(y)) and an intercept calibration (docs/algorithms.md, 'The Newton rule'; rounds "
                            "30 unless set). "
                            "Unset: newton with the quantile loss, privacy off or privacy.mode total, a pooled, "
                            "federated_dp or provided basis with eigenvalues and none of rho, step, step_units, "
                            "estimator, rho_rule, stopping set; else admm")
    response_bounds: tuple[float, float] | None = Field(
        None, min_length=2, max_length=2, description="newton rule: bounds [lo, hi] of the responses (in the units the sites fit, after "
                          "data.response_offset / response_scale) that every site declares; the private "
                          "location/scale search runs inside them (responses outside count as at the bounds). "
                          "Unset: with privacy on the search runs in asinh(y) over |y| <= 1e7")

    level_calibration: bool = Field(
        False, description="admm rule, privacy on: 8 rounds before the ADMM rounds find the response's location and "
                           "scale (a private quartile search in asinh(y)) and the ADMM rounds run in standardized "
                           "units; 13 rounds after them place the fitted quantile's level (a private quartile search "
                           "of the ADMM model's residuals, then 5 rounds of the share of responses below the fitted "
                           "quantile, each moving the intercept by a one-shot Newton step), all inside the same total "
                           "budget (docs/algorithms.md section 1.4). Needs an intercept, the quantile loss, an l1, l2, "
                           "elastic_net or no penalty, privacy.mode total and privacy.trust site; ignored with "
                           "privacy off")

    @model_validator(mode="after")
    def _bounds(self):
        b = self.response_bounds
        if b is not None and not (math.isfinite(b[0]) and math.isfinite(b[1]) and b[1] > b[0]):
            raise ValueError(f"algorithm.response_bounds must be finite with lo < hi, got {list(b)}")
        return self


#: ``algorithm`` fields the Newton rule fills when a scenario leaves them unset (privacy on or off alike)
NEWTON_DEFAULTS: dict[str, Any] = {"rounds": 30, "estimator": {"kind": "last"}}


def _newton_rule(algorithm: Any) -> bool:
    return isinstance(algorithm, dict) and algorithm.get("rule") == "newton"


Algorithm = tagged_union(FDPADMMConfig, default="fdp_admm")


#: Defaults of ``algorithm`` (FDP-ADMM) in total-budget mode with the ellipsoid clip, for the fields a
#: scenario leaves unset (issue 16; scale-free: the step is in the clip's Mahalanobis units; chosen on
#: tuning seeds >= 1000 only, see docs/choosing_a_budget.md).  Per-round mode and privacy off keep the
#: field defaults.
TOTAL_BUDGET_DEFAULTS: dict[str, Any] = {
    "rounds": 120,
    "step": {"kind": "constant", "eta0": 48.0},
    "step_units": "whitened",
    "estimator": {"kind": "tail_average", "tail_fraction": 0.5},
}
#: Defaults of ``algorithm`` (FDP-ADMM) with privacy off (F-ADMM), for the fields a scenario leaves
#: unset: rho by residual balancing from algorithm.rho, and a stop on the primal and dual residuals with
#: ``rounds`` as the cap (Boyd et al. 2011's constants mu = 10, factor 2, eps_rel = 1e-3; not tuned).
NON_PRIVATE_DEFAULTS: dict[str, Any] = {
    "rho_rule": {"kind": "residual_balancing"},
    "stopping": {"kind": "residuals"},
}
#: ... with the sphere clip (a basis without score variances, or ``model.clip_shape``/``clip_c1`` set
#: by the scenario): a step in absolute units (issue 9, tuned on the paper's design).
SPHERE_TOTAL_BUDGET_DEFAULTS: dict[str, Any] = {
    "rounds": 80,
    "step": {"kind": "constant", "eta0": 3.0},
    "estimator": {"kind": "tail_average", "tail_fraction": 0.5},
}
#: The step of a total-budget sphere-clip run with ``algorithm.level_calibration``, whose ADMM rounds run in
#: standardized units (the paper design, n = 20000, M = 10, eps = 1, 2 seeds: MISE 0.089 / 0.068 at 1.0, against
#: 0.118 / 0.090 at 0.5, 0.089 / 0.072 at 1.5 and 0.245 / 0.208 at the raw units' 3.0)
LEVEL_CALIBRATION_SPHERE_STEP: dict[str, Any] = {"kind": "constant", "eta0": 1.0}
#: The clip of total-budget mode when the basis estimates score variances (``pooled``, ``federated_dp``)
#: and the scenario sets neither ``model.clip_shape`` nor ``model.clip_c1``: the ellipsoid
#: sum_k a_k^2 / lambda_k <= 16 (Mahalanobis radius 4, about the 0.9 quantile of chi^2_10, so it
#: binds on roughly one row in ten of Gaussian scores with K = 10), in units of the score SDs.
TOTAL_BUDGET_CLIP: dict[str, Any] = {"clip_shape": "ellipsoid", "clip_c1": 4.0}
#: basis kinds whose scores come with variances lambda_k (the ellipsoid clip's scales)
BASES_WITH_SCORE_VARIANCES = ("pooled", "federated_dp")


def privacy_off_schedule(clip_shape: str, *, step_given: bool = False) -> dict[str, Any]:
    """The FDP-ADMM schedule (``rounds``, ``step``, ``step_units``, ``estimator``) of a run without privacy,
    for the fields a scenario leaves unset: the total-budget schedule of the same clip (the same steps, without
    the noise), with ``rounds`` a cap of the residual stop of :data:`NON_PRIVATE_DEFAULTS`.  The one source of
    the privacy-off defaults of ``fdp-flower run``, the Flower app and :func:`fdp_flower.fit` (``eps=None``);
    ``step_units`` only together with the default step (a step the scenario gives is in its own units)."""
    defaults = TOTAL_BUDGET_DEFAULTS if clip_shape == "ellipsoid" else SPHERE_TOTAL_BUDGET_DEFAULTS
    return {k: v for k, v in defaults.items() if not (step_given and k == "step_units")}


#: FDP-ADMM fields only the ADMM rule reads: a scenario that sets one of them keeps ``rule: admm`` by default
ADMM_ONLY_FIELDS = ("rho", "step", "step_units", "estimator", "rho_rule", "stopping", "level_calibration")


def _section(data: dict[str, Any], name: str) -> Any:
    return data.get(name, {})


def _field(section: Any, name: str, default: Any) -> Any:
    return section.get(name, default) if isinstance(section, dict) else getattr(section, name, default)


def publishes_score_variances(basis: Any) -> bool:
    """Whether a scenario's basis section publishes score variances: ``pooled``, ``federated_dp``, or ``provided``
    with an ``eigenvalues`` array (read from the file's member names only)."""
    kind = _field(basis, "kind", "pooled")
    if kind == "provided":
        return _provided_eigenvalues(_field(basis, "path", None))
    return kind in BASES_WITH_SCORE_VARIANCES


def _provided_eigenvalues(path: Any) -> bool:
    """Whether the provided basis file at ``path`` carries score variances (an ``eigenvalues`` array): the names
    of the .npz's members only, no data; False when it cannot be read (the run then stops at the basis)."""
    if not isinstance(path, str):
        return False
    try:
        with np.load(path, allow_pickle=False) as npz:
            return "eigenvalues" in npz.files
    except (OSError, ValueError, EOFError):
        return False


def default_rule(data: dict[str, Any]) -> str:
    """The rule of an FDP-ADMM scenario that leaves ``algorithm.rule`` unset: ``newton`` when its settings allow the
    Newton rule -- the quantile loss; privacy off, or one total budget with ``privacy.trust: site``; any basis
    (one that publishes score variances -- ``pooled``, ``federated_dp``, or a ``provided`` file with
    ``eigenvalues``, e.g. an FPCA of a public pilot sample; only the names of its members are read -- is the
    public metric; any other gets a second-moments round, noised with privacy: at a total eps = 1 its 30 rounds
    end as close to the exact estimator as the ADMM rule's 101 at 2000 records per site and closer at 500 and
    1000, benchmarks/results/estimates/fit_private_sizes.md); no failure injection; none of
    :data:`ADMM_ONLY_FIELDS` set; enough rounds for its schedule
    (:func:`~fdp_flower.algorithms.fdp_admm.newton.schedule_kinds`) -- else ``admm`` (the paper's rule, and every
    per-round scenario).  Reads the scenario only, never data."""
    from fdp_flower.algorithms.fdp_admm.newton import schedule_kinds

    algorithm, model, privacy = _section(data, "algorithm"), _section(data, "model"), _section(data, "privacy")
    loss = _field(model, "loss", {})
    enabled = _field(privacy, "enabled", True)
    failure_rate = _field(_section(data, "faults"), "failure_rate", 0.0)
    moments = not publishes_score_variances(_section(data, "basis"))
    if _field(loss, "kind", "quantile") != "quantile":
        return "admm"
    if enabled is not False and (_field(privacy, "mode", "per_round") != "total"
                                 or _field(privacy, "trust", "site") != "site"):
        return "admm"
    if any(key in algorithm for key in ADMM_ONLY_FIELDS) or failure_rate not in (0, 0.0, None):
        return "admm"
    rounds = algorithm.get("rounds", NEWTON_DEFAULTS["rounds"])
    try:
        schedule_kinds(int(rounds), intercept=bool(_field(model, "intercept", False)),
                       bounds=algorithm.get("response_bounds") is not None, private=enabled is not False,
                       moments=moments)
    except (TypeError, ValueError):
        return "admm"  # too few rounds (or not a number: the schema's own error follows)
    return "newton"


class ModeMismatchWarning(UserWarning):
    """A setting chosen for one privacy mode kept in the other (:mod:`fdp_flower.algorithms.fdp_admm.mode_rules`)."""


class Scenario(_Frozen):
    """A complete run description.

    With ``privacy.mode: total`` (and privacy enabled) and a basis with score variances, a model
    that sets neither ``clip_shape`` nor ``clip_c1`` takes :data:`TOTAL_BUDGET_CLIP` (the
    ellipsoid); then the FDP-ADMM fields ``rounds``, ``step``, ``step_units`` and ``estimator``
    that the scenario does not set take :data:`TOTAL_BUDGET_DEFAULTS` with the ellipsoid clip and
    :data:`SPHERE_TOTAL_BUDGET_DEFAULTS` with the sphere (a budget for the whole run favours a
    constant step, a moderate number of rounds and a tail average); ``step_units: whitened`` is
    filled only together with the default step.  None of these reads data; values given explicitly
    are never changed.
    """

    name: ResultName = Field("scenario", min_length=1, max_length=200, description="name used for result files")
    seed: int = Field(0, ge=0, le=2**63 - 1, strict=True, description="seeds data and noise")
    data: DataSource = Field(PaperSimulation(), description="where the curves and responses come from")
    federation: FederationConfig = Field(FederationConfig(), description="clients")
    basis: Basis = Field(PooledBasis(), description="functional basis: curves -> K scores")
    model: ModelConfig = Field(ModelConfig(), description="loss, penalty and feature clip")
    algorithm: Algorithm = Field(FDPADMMConfig(), description="training algorithm and its parameters")
    privacy: PrivacyConfig = Field(PrivacyConfig(), description="differential privacy of the releases")
    faults: FaultsConfig = Field(FaultsConfig(), description="client failures and reply checks")
    output: OutputConfig = Field(OutputConfig(), description="results files")

    @model_validator(mode="before")
    @classmethod
    def _mode_mismatches(cls, data: Any) -> Any:
        """Settings of one privacy mode carried into the other (:func:`~fdp_flower.algorithms.fdp_admm.
        mode_rules.mode_mismatches`): refused (one-line error) or warned about (:class:`ModeMismatchWarning`,
        one line naming what to change).  Every path that reads an FDP-ADMM scenario (``fdp-flower run``,
        ``privacy``, ``sweep``, the Flower apps, :func:`fdp_flower.fit`) validates here.  The rules look only
        at what the defaults below never fill (a Theorem 2 step, a sphere clip without ``clip_shape``, the
        last iterate, a per-round run's rounds), so the order of the validators does not matter."""
        from fdp_flower.algorithms.fdp_admm.mode_rules import mode_mismatches

        if isinstance(data, dict) and not _newton_rule(data.get("algorithm")):  # one schedule in both modes
            for mismatch in mode_mismatches(data):
                if mismatch.refuse:
                    raise ValueError(mismatch.message)
                warnings.warn(mismatch.message, ModeMismatchWarning, stacklevel=2)
        return data

    @model_validator(mode="before")
    @classmethod
    def _non_private_defaults(cls, data: Any) -> Any:
        """Privacy off: fill an unset ``algorithm.rho_rule`` / ``algorithm.stopping``, or the ``kind`` of one
        given without it, from :data:`NON_PRIVATE_DEFAULTS`, and the unset schedule fields from
        :func:`privacy_off_schedule` (never overrides a given value)."""
        if not isinstance(data, dict):
            return data
        privacy = data.get("privacy")
        enabled = privacy.enabled if isinstance(privacy, PrivacyConfig) else (
            privacy.get("enabled", True) if isinstance(privacy, dict) else True)
        algorithm = data.get("algorithm", {})
        if enabled is not False or not isinstance(algorithm, dict) or algorithm.get("kind", "fdp_admm") != "fdp_admm":
            return data
        if _newton_rule(algorithm):
            return data
        filled = {}
        for key, default in NON_PRIVATE_DEFAULTS.items():
            given = algorithm.get(key)
            if given is None:
                filled[key] = default
            elif isinstance(given, dict) and "kind" not in given:  # e.g. only stopping.tol_rel set
                filled[key] = {**given, "kind": default["kind"]}
        model = data.get("model", {})
        shape = model.get("clip_shape", "sphere") if isinstance(model, dict) else getattr(model, "clip_shape", "sphere")
        filled.update({k: v for k, v in privacy_off_schedule(shape, step_given="step" in algorithm).items()
                       if k not in algorithm})
        return {**data, "algorithm": {**algorithm, **filled}} if filled else data

    @model_validator(mode="before")
    @classmethod
    def _total_budget_defaults(cls, data: Any) -> Any:
        """Fill the unset FDP-ADMM fields of a total-budget scenario (never overrides a given value)."""
        if not isinstance(data, dict):
            return data
        privacy = data.get("privacy")
        if isinstance(privacy, PrivacyConfig):
            enabled, mode = privacy.enabled, privacy.mode
        elif isinstance(privacy, dict):
            enabled, mode = privacy.get("enabled", True), privacy.get("mode", "per_round")
        else:
            return data
        algorithm = data.get("algorithm", {})
        if enabled is not True or mode != "total" or not isinstance(algorithm, dict) \
                or algorithm.get("kind", "fdp_admm") != "fdp_admm":
            return data
        model = data.get("model", {})
        basis = data.get("basis", {})
        basis_kind = basis.get("kind", "pooled") if isinstance(basis, dict) else getattr(basis, "kind", None)
        if isinstance(model, dict) and "clip_shape" not in model and "clip_c1" not in model \
                and basis_kind in BASES_WITH_SCORE_VARIANCES:
            data = {**data, "model": {**model, **TOTAL_BUDGET_CLIP}}
            model = data["model"]
        if _newton_rule(algorithm):  # the clip above; its schedule is NEWTON_DEFAULTS
            return data
        shape = model.get("clip_shape", "sphere") if isinstance(model, dict) else getattr(model, "clip_shape", None)
        defaults = TOTAL_BUDGET_DEFAULTS if shape == "ellipsoid" else SPHERE_TOTAL_BUDGET_DEFAULTS
        if shape != "ellipsoid" and algorithm.get("level_calibration") is True:
            defaults = {**defaults, "step": LEVEL_CALIBRATION_SPHERE_STEP}
        if "step" in algorithm:  # a step the scenario gives is in the units it says (absolute unless set)
            defaults = {k: v for k, v in defaults.items() if k != "step_units"}
        unset = {k: v for k, v in defaults.items() if k not in algorithm}
        return {**data, "algorithm": {**algorithm, **unset}} if unset else data

    @model_validator(mode="before")
    @classmethod
    def _newton_defaults(cls, data: Any) -> Any:
        """``algorithm.rule: newton``: fill the unset fields of :data:`NEWTON_DEFAULTS` (privacy on or off: the
        rule's one schedule; never overrides a given value)."""
        if not isinstance(data, dict) or not _newton_rule(data.get("algorithm")):
            return data
        algorithm = data["algorithm"]
        unset = {k: v for k, v in NEWTON_DEFAULTS.items() if k not in algorithm}
        return {**data, "algorithm": {**algorithm, **unset}} if unset else data

    @model_validator(mode="before")
    @classmethod
    def _default_rule(cls, data: Any) -> Any:
        """An unset ``algorithm.rule`` (FDP-ADMM): ``newton`` where the scenario allows it
        (:func:`default_rule`), else ``admm``.  Defined last, so it runs before the other "before" validators,
        which then see the rule written out (never overrides a given value)."""
        if not isinstance(data, dict):
            return data
        algorithm = data.get("algorithm", {})
        if not isinstance(algorithm, dict) or algorithm.get("kind", "fdp_admm") != "fdp_admm" or "rule" in algorithm:
            return data
        return {**data, "algorithm": {**algorithm, "rule": default_rule(data)}}

    @model_validator(mode="after")
    def _newton_needs(self):
        """What the Newton rule needs, each refused in one line: a quantile loss, one total budget (its releases
        split one mu^2), the site trust mode, with privacy on a basis without score variances the sphere clip (its
        second-moments release's sensitivity), the last-iterate estimator and no residual stop (the schedule is
        fixed)."""
        a = self.algorithm
        if getattr(a, "rule", "admm") != "newton":
            return self
        p = self.privacy
        if self.model.loss.kind != "quantile":
            raise ValueError("algorithm.rule 'newton' fits the quantile loss only (model.loss.kind 'quantile')")
        if p.enabled and p.mode != "total":
            raise ValueError("algorithm.rule 'newton' splits one total budget over its releases: set privacy.mode "
                             "'total' (or rule 'admm' for a per-round guarantee)")
        if p.enabled and p.trust != "site":
            raise ValueError(f"algorithm.rule 'newton' runs with privacy.trust 'site' only (got {p.trust!r})")
        moments = not publishes_score_variances(self.basis)
        if moments and p.enabled and self.model.clip_shape != "sphere":
            raise ValueError("algorithm.rule 'newton' on a basis without score variances releases the rows' second "
                             "moments, whose sensitivity needs model.clip_shape 'sphere'")
        from fdp_flower.algorithms.fdp_admm.newton import schedule_kinds

        schedule_kinds(a.rounds, intercept=self.model.intercept, bounds=a.response_bounds is not None,
                       private=p.enabled, moments=moments)  # enough fit rounds, or one line naming the rounds needed
        if a.estimator.kind != "last" or a.stopping.kind != "cap" or a.rho_rule.kind != "fixed":
            raise ValueError("algorithm.rule 'newton' releases its own estimate after a fixed schedule: leave "
                             "algorithm.estimator, stopping and rho_rule unset")
        return self

    @model_validator(mode="after")
    def _level_calibration_needs(self):
        """What ``algorithm.level_calibration`` needs, each refused in one line: the ADMM rule (the Newton rule
        calibrates its own intercept), an intercept, the quantile loss, and with privacy on one total budget and the
        site trust mode (its releases split one mu^2 and are the site's own)."""
        a = self.algorithm
        if not getattr(a, "level_calibration", False):
            return self
        if a.rule != "admm":
            raise ValueError("algorithm.level_calibration applies to rule 'admm' (the Newton rule calibrates its "
                             "intercept itself): remove it")
        if not self.model.intercept:
            raise ValueError("algorithm.level_calibration moves the intercept: set model.intercept true")
        if self.model.loss.kind != "quantile":
            raise ValueError("algorithm.level_calibration places a quantile's level: model.loss.kind must be "
                             "'quantile'")
        if self.model.penalty.kind not in ("l1", "l2", "elastic_net", "none"):
            raise ValueError(f"algorithm.level_calibration runs the ADMM rounds in standardized units, where a "
                             f"{self.model.penalty.kind} penalty's thresholds are not the response's: use l1, l2, "
                             "elastic_net or none")
        p = self.privacy
        if p.enabled and p.mode != "total":
            raise ValueError("algorithm.level_calibration splits one total budget: set privacy.mode 'total'")
        if p.enabled and p.trust != "site":
            raise ValueError(f"algorithm.level_calibration runs with privacy.trust 'site' only (got {p.trust!r})")
        return self

    @model_validator(mode="after")
    def _consistent(self):
        if isinstance(self.data, NodeFiles) and isinstance(self.basis, PooledBasis):
            raise ValueError(
                "basis kind 'pooled' needs every client's curves in one place, which a deployment with "
                "node-local files (data kind 'node_files') never has; use 'fixed', 'provided' or 'federated_dp'")
        if getattr(self.data, "paths", None) is not None and len(self.data.paths) != self.federation.num_clients:
            raise ValueError(f"data.paths names {len(self.data.paths)} files for "
                             f"federation.num_clients = {self.federation.num_clients}")
        if self.model.clip_shape == "ellipsoid":
            if isinstance(self.basis, FixedBasis):
                raise ValueError("model.clip_shape 'ellipsoid' scales by the score variances of an FPCA basis; "
                                 "a fixed basis has none (use basis kind 'pooled' or 'federated_dp')")
            if isinstance(getattr(self.algorithm, "step", None), Theorem2Step) \
                    and getattr(self.algorithm, "rule", "admm") != "newton":  # the Newton rule has no step
                raise ValueError("model.clip_shape 'ellipsoid' needs a constant, inv_sqrt or inv step "
                                 "(Theorem 2's step assumes the sphere ||a|| <= c1)")
        elif getattr(self.algorithm, "step_units", "absolute") == "whitened":
            raise ValueError("algorithm.step_units 'whitened' is in the ellipsoid clip's units: set "
                             "model.clip_shape 'ellipsoid' (or step_units 'absolute')")
        if self.privacy.enabled and getattr(self.algorithm, "kind", None) == "fdp_admm":
            if self.algorithm.rho_rule.kind != "fixed":
                raise ValueError("algorithm.rho_rule 'residual_balancing' needs privacy off: rho sets each release's "
                                 "sensitivity and the rule reads noise-free residuals (use kind 'fixed')")
            if self.algorithm.stopping.kind != "cap":
                raise ValueError("algorithm.stopping 'residuals' needs privacy off: with privacy on the noise keeps the "
                                 "residuals from vanishing and the budget is calibrated for all rounds (use kind 'cap')")
        trust = self.privacy.trust
        if trust != "site" and getattr(self.algorithm, "kind", None) != "fdp_admm":
            raise ValueError(f"privacy.trust {trust!r} is implemented for algorithm kind 'fdp_admm' only")
        if trust == "secure_aggregation":
            if self.federation.num_clients < 2:
                raise ValueError("privacy.trust 'secure_aggregation' needs federation.num_clients >= 2")
            if self.privacy.tolerated >= self.federation.num_clients:
                raise ValueError(f"privacy.tolerated ({self.privacy.tolerated}) must be below federation.num_clients "
                                 f"({self.federation.num_clients}): at least one honest share must reach the sum")
            if getattr(self.basis, "kind", None) == "federated_dp" and getattr(self.basis, "private", False):
                raise ValueError("privacy.trust 'secure_aggregation' with a private federated_dp basis is not "
                                 "supported yet (each site sends its DP-FPCA summary in the clear, a Gaussian release "
                                 "outside the secure sums' Skellam plan); use basis kind fixed, provided or pooled, or "
                                 "privacy.trust 'site' to keep the private basis")
        if isinstance(self.data, PaperSimulation) and self.data.n_samples < self.federation.num_clients:
            raise ValueError(
                f"federation.num_clients ({self.federation.num_clients}) exceeds data.n_samples "
                f"({self.data.n_samples}): every client needs at least one sample")
        return self


def parse_scenario(data: dict[str, Any], source: str = "<scenario>") -> Scenario:
    """Validate a mapping; raises :class:`ScenarioError` with a one-line message (settings of one privacy
    mode kept in the other: :meth:`Scenario._mode_mismatches`)."""
    return validate_mapping(Scenario, data, source)


def load_scenario(path: str | Path, overrides: list[str] | dict[str, Any] | None = None) -> Scenario:
    """Read a YAML scenario file, apply overrides, validate.  Errors are one line naming file and field."""
    data = read_yaml_file(path)
    if overrides:
        data = apply_overrides(data, overrides)
    return parse_scenario(data, str(path))
