"""Typed, frozen scenario configuration (pydantic v2), parsed once per run.

A scenario is nested models, one per concern; variants (data source, basis,
step schedule, algorithm) are discriminated unions on ``kind``.  Unknown fields
are errors (``extra="forbid"``) and validators only raise.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any, Literal, Union

import yaml
from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, ValidationError, model_validator


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def tagged_union(*models: type[BaseModel], default: str | None = None):
    """A union discriminated on ``kind``; a mapping without ``kind`` takes ``default``.

    Every model must declare ``kind: Literal["..."] = "..."``.
    """
    def kind_of(value):
        if isinstance(value, dict):
            return value.get("kind", default)
        return getattr(value, "kind", None)

    members = tuple(Annotated[m, Tag(m.model_fields["kind"].default)] for m in models)
    return Annotated[Union[members], Discriminator(kind_of)]  # type: ignore[valid-type]


# ---------------------------------------------------------------- data sources
class PaperSimulation(_Frozen):
    """The functional design of paper 000, Section 5 (spec section 1)."""

    kind: Literal["paper_simulation"] = Field("paper_simulation", description="variant tag")
    n_samples: int = Field(100_000, ge=2, le=10_000_000, description="total samples n over all clients")
    grid_points: int = Field(100, ge=5, le=10_000, description="equispaced grid points on [0, 1]")


class NodeFiles(_Frozen):
    """Node-local files (deployment): each node reads its own file (see :mod:`fdp_flower.data_files`).

    In a deployment each SuperNode names its file in its node config (``data-path=...``);
    the server never sees the data and learns each m_i from the replies.
    """

    kind: Literal["node_files"] = Field("node_files", description="variant tag")
    grid_start: float = Field(0.0, ge=-1e9, le=1e9, description="first point of the common equispaced grid")
    grid_stop: float = Field(1.0, ge=-1e9, le=1e9, description="last point of the common equispaced grid")
    grid_points: int = Field(100, ge=3, le=10_000, description="number of grid points")
    paths: list[str] | None = Field(
        None, max_length=10_000, description="per-client files for simulation engines (client i reads paths[i]); a node's "
                          "data-path node config takes precedence")
    response_offset: float = Field(
        0.0, ge=-1e12, le=1e12, description="public constant subtracted from every response on the client (the model has no "
                         "intercept)")

    @model_validator(mode="after")
    def _grid(self):
        if not self.grid_stop > self.grid_start:
            raise ValueError("grid_stop must exceed grid_start")
        return self


DataSource = tagged_union(PaperSimulation, NodeFiles, default="paper_simulation")


# ---------------------------------------------------------------- bases
class PooledBasis(_Frozen):
    """FPCA on all curves (non-private; simulation studies only)."""

    kind: Literal["pooled"] = Field("pooled", description="variant tag")
    n_components: int | None = Field(10, ge=1, le=200, description="K; null to choose by explained_variance")
    explained_variance: float | None = Field(None, gt=0, le=1, description="cumulative ratio that fixes K")

    @model_validator(mode="after")
    def _one_of(self):
        if (self.n_components is None) == (self.explained_variance is None):
            raise ValueError("give exactly one of n_components and explained_variance")
        return self


class FixedBasis(_Frozen):
    """A data-independent basis (costs no privacy)."""

    kind: Literal["fixed"] = Field("fixed", description="variant tag")
    family: Literal["cosine", "fourier", "bspline"] = Field("cosine", description="basis family")
    n_components: int = Field(10, ge=1, le=200, description="K")


class FederatedDPBasis(_Frozen):
    """FPCA from noisy covariance summaries of the clients (spec section 2; :mod:`fdp_flower.federated_fpca`)."""

    kind: Literal["federated_dp"] = Field("federated_dp", description="variant tag")
    n_components: int = Field(10, ge=1, le=200, description="K")
    pre_basis: Literal["bspline", "cosine", "fourier"] = Field("bspline", description="fixed pre-basis family")
    pre_basis_size: int = Field(30, ge=4, le=400, description="B: size of the pre-basis")
    clip_cb: float = Field(3.0, gt=0, description="c_b: clip of each curve's pre-basis coefficient vector")
    private: bool = Field(True, description="false: exact summaries (no noise, no DP guarantee)")
    eps: float = Field(1.0, gt=0, description="eps of the one covariance release of each client")
    delta: float = Field(1.0e-6, gt=0, lt=1, description="delta of that release")
    whiten: bool = Field(False, description="scale phi_k by 1/sqrt(lambda_k): unit-variance scores (same span)")

    @model_validator(mode="after")
    def _sizes(self):
        if self.n_components > self.pre_basis_size:
            raise ValueError("n_components cannot exceed pre_basis_size")
        if not math.isfinite(self.eps):
            raise ValueError("eps must be finite (use private: false for no noise)")
        return self


class ProvidedBasis(_Frozen):
    """A basis supplied by the user: an .npz with grid, components (K, G), mean and weights."""

    kind: Literal["provided"] = Field("provided", description="variant tag")
    path: str = Field(min_length=1, description="path of the .npz (absolute or relative to the working directory)")


Basis = tagged_union(PooledBasis, FixedBasis, FederatedDPBasis, ProvidedBasis, default="pooled")


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


# ---------------------------------------------------------------- step sizes
class Theorem2Step(_Frozen):
    kind: Literal["theorem2"] = Field("theorem2", description="variant tag")
    scale: float = Field(60.0, gt=0, le=1e4, description="multiplier of paper 000 Theorem 2's step (1 = the paper's; 60 converges in tens of rounds on the paper design)")
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


# ---------------------------------------------------------------- algorithms
class EstimatorConfig(_Frozen):
    """The model a run releases at the end: a function of the global iterates w^1..w^L only
    (post-processing, no privacy cost); see :meth:`fdp_flower.fdp_admm.FDPADMMState.estimate`."""

    kind: Literal["last", "average", "tail_average"] = Field(
        "last", description="last: w^L; average: (1/L) sum_l w^l; tail_average: the mean of the last "
                            "max(1, ceil(tail_fraction L)) iterates")
    tail_fraction: float = Field(0.5, gt=0, le=1, description="tail_average: fraction of the rounds averaged")


class FDPADMMConfig(_Frozen):
    """FDP-ADMM (privacy on) / F-ADMM (privacy off), paper 000."""

    kind: Literal["fdp_admm"] = Field("fdp_admm", description="variant tag")
    rho: float = Field(0.1, gt=0, description="ADMM penalty rho")
    rounds: int = Field(30, ge=1, le=100_000, description="L: number of rounds")
    step: StepConfig = Field(Theorem2Step(), description="step size schedule eta_i^l")
    estimator: EstimatorConfig = Field(EstimatorConfig(), description="the released model (post-processing)")


Algorithm = tagged_union(FDPADMMConfig, default="fdp_admm")


# ---------------------------------------------------------------- privacy
class ConstantSchedule(_Frozen):
    """The same noise multiplier sigma / Delta every round."""

    kind: Literal["constant"] = Field("constant", description="variant tag")


class GeometricSchedule(_Frozen):
    """rho_l = rho_1 ratio^(l-1): the per-round zCDP grows, the noise variance shrinks (spec section 3)."""

    kind: Literal["geometric"] = Field("geometric", description="variant tag")
    ratio: float = Field(1.05, ge=1, le=10, description="ratio rho_{l+1} / rho_l (>= 1)")


class PeriodicSchedule(_Frozen):
    """sigma_l^2 = sigma_1^2 decay^floor((l-1)/period) (paper 004, eq. (14))."""

    kind: Literal["periodic"] = Field("periodic", description="variant tag")
    decay: float = Field(0.925, gt=0, le=1, description="R_P: factor on sigma^2 every `period` rounds")
    period: int = Field(1, ge=1, le=100_000, description="K_p: rounds per decay step")


class IterationSchedule(_Frozen):
    """rho_1 in round 1, rho_{k+1} = rate k (k+1) rho_1 (paper 004, eq. (15) in its rho form)."""

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
                              "generator seeded by the operating system's entropy (for real deployments)")
    report_clipped_rows: bool = Field(
        False, description="clients send their count of clipped rows (a data-dependent count outside the "
                           "DP guarantee; always sent when privacy is off)")

    @model_validator(mode="after")
    def _finite_eps(self):
        if self.enabled and not math.isfinite(self.eps):
            raise ValueError("eps must be finite when privacy is enabled (use enabled: false for eps = infinity)")
        if self.mode == "per_round" and self.schedule.kind != "constant":
            raise ValueError(f"schedule {self.schedule.kind!r} needs mode: total (per_round applies the "
                             "paper's rule, the same eps every round)")
        return self


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


#: Defaults of ``algorithm`` (FDP-ADMM) in total-budget mode, for the fields a scenario leaves unset
#: (issue 9; chosen on the public simulation design with tuning seeds disjoint from the evaluation
#: seeds, see docs/choosing_a_budget.md).  Per-round mode and privacy off keep the field defaults.
TOTAL_BUDGET_DEFAULTS: dict[str, Any] = {
    "rounds": 80,
    "step": {"kind": "constant", "eta0": 3.0},
    "estimator": {"kind": "tail_average", "tail_fraction": 0.5},
}


class Scenario(_Frozen):
    """A complete run description.

    With ``privacy.mode: total`` (and privacy enabled) the FDP-ADMM fields ``rounds``, ``step``
    and ``estimator`` that the scenario does not set take :data:`TOTAL_BUDGET_DEFAULTS`
    instead of their field defaults (a budget for the whole run favours a constant step, a
    moderate number of rounds and a tail average); values given explicitly are never changed.
    """

    name: str = Field("scenario", min_length=1, max_length=200, description="name used for result files")
    seed: int = Field(0, ge=0, le=2**63 - 1, description="seeds data and noise")
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
        unset = {k: v for k, v in TOTAL_BUDGET_DEFAULTS.items() if k not in algorithm}
        return {**data, "algorithm": {**algorithm, **unset}} if unset else data

    @model_validator(mode="after")
    def _consistent(self):
        if isinstance(self.data, NodeFiles) and isinstance(self.basis, PooledBasis):
            raise ValueError(
                "basis kind 'pooled' needs every client's curves in one place, which a deployment with "
                "node-local files (data kind 'node_files') never has; use 'fixed', 'provided' or 'federated_dp'")
        if isinstance(self.data, NodeFiles) and self.data.paths is not None \
                and len(self.data.paths) != self.federation.num_clients:
            raise ValueError(f"data.paths names {len(self.data.paths)} files for "
                             f"federation.num_clients = {self.federation.num_clients}")
        if self.model.clip_shape == "ellipsoid":
            if isinstance(self.basis, FixedBasis):
                raise ValueError("model.clip_shape 'ellipsoid' scales by the score variances of an FPCA basis; "
                                 "a fixed basis has none (use basis kind 'pooled' or 'federated_dp')")
            if isinstance(getattr(self.algorithm, "step", None), Theorem2Step):
                raise ValueError("model.clip_shape 'ellipsoid' needs a constant, inv_sqrt or inv step "
                                 "(Theorem 2's step assumes the sphere ||a|| <= c1)")
        if isinstance(self.data, PaperSimulation) and self.data.n_samples < self.federation.num_clients:
            raise ValueError(
                f"federation.num_clients ({self.federation.num_clients}) exceeds data.n_samples "
                f"({self.data.n_samples}): every client needs at least one sample")
        return self


class ScenarioError(ValueError):
    """A scenario file or override that does not validate; the message is one line."""

    def __init__(self, message: str = "") -> None:
        # library messages (YAML marks, echoed input) may hold newlines: keep the error one line
        super().__init__(" ".join(str(message).split()))


def _format_error(source: str, exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"] if not (isinstance(p, str) and p in _UNION_TAGS))
        parts.append(f"{loc or '<root>'}: {err['msg']}")
    return f"{source}: " + "; ".join(parts)


_UNION_TAGS = {"paper_simulation", "node_files", "pooled", "fixed", "federated_dp", "provided", "theorem2",
               "constant", "inv_sqrt", "inv", "fdp_admm",
               "geometric", "periodic", "iteration"}


def validate_mapping(model: type[BaseModel], data: Any, source: str):
    """``model.model_validate(data)``; any problem is one :class:`ScenarioError` line naming the fields."""
    if not isinstance(data, dict):
        raise ScenarioError(f"{source}: a scenario must be a mapping, got {type(data).__name__}")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ScenarioError(_format_error(source, exc)) from None


def parse_scenario(data: dict[str, Any], source: str = "<scenario>") -> Scenario:
    """Validate a mapping; raises :class:`ScenarioError` with a one-line message."""
    return validate_mapping(Scenario, data, source)


def _set_path(data: dict, dotted: str, value: Any) -> None:
    keys = dotted.split(".")
    node = data
    for key in keys[:-1]:
        child = node.get(key)
        if child is None:
            child = node[key] = {}
        if not isinstance(child, dict):
            raise ScenarioError(f"--set {dotted}: {key!r} is not a section")
        node = child
    node[keys[-1]] = value


def apply_overrides(data: dict[str, Any], overrides: list[str] | dict[str, Any]) -> dict[str, Any]:
    """Return a copy of ``data`` with ``a.b=value`` overrides applied (values parsed as YAML)."""
    import copy

    data = copy.deepcopy(data)
    items = overrides.items() if isinstance(overrides, dict) else [_split_override(o) for o in overrides]
    for key, value in items:
        _set_path(data, key, value)
    return data


def _split_override(text: str) -> tuple[str, Any]:
    if "=" not in text:
        raise ScenarioError(f"override {text!r} must look like section.field=value")
    key, raw = text.split("=", 1)
    try:
        value = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError:
        value = raw
    return key.strip(), value


def read_yaml_file(path: str | Path, what: str = "scenario") -> dict[str, Any]:
    """The mapping in a YAML file; a missing file or invalid YAML is a one-line :class:`ScenarioError`."""
    path = Path(path)
    if not path.is_file():
        raise ScenarioError(f"{path}: {what} file not found")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise ScenarioError(f"{path}:{where} invalid YAML ({getattr(exc, 'problem', exc)})") from None
    return data


def load_scenario(path: str | Path, overrides: list[str] | dict[str, Any] | None = None) -> Scenario:
    """Read a YAML scenario file, apply overrides, validate.  Errors are one line naming file and field."""
    data = read_yaml_file(path)
    if overrides:
        data = apply_overrides(data, overrides)
    return parse_scenario(data, str(path))


def scenario_to_yaml(scenario: Scenario) -> str:
    """The fully resolved scenario (defaults filled in) as YAML."""
    return yaml.safe_dump(scenario.model_dump(mode="json"), sort_keys=False)


def resolve_scenario_path(path: str | Path, search_dirs: list[Path] | None = None) -> Path:
    """An absolute path, or the first of cwd / ``search_dirs`` holding ``path``."""
    path = Path(path)
    if path.is_absolute():
        return path
    for base in [Path.cwd(), *(search_dirs or [])]:
        if (base / path).is_file():
            return base / path
    return path


def parse_override_string(text: str) -> list[str]:
    """``"a.b=1; c.d=x"`` -> ``["a.b=1", "c.d=x"]`` (the Flower run-config form of --set)."""
    return [part.strip() for part in text.split(";") if part.strip()]


def scenario_from_run_config(run_config: dict[str, Any]) -> Scenario:
    """The scenario named by a Flower run config (keys ``scenario`` and ``overrides``)."""
    if "scenario" not in run_config:
        raise ScenarioError("run config: missing key 'scenario' (path to a scenario YAML file)")
    app_dir = Path(__file__).resolve().parents[1]
    path = resolve_scenario_path(str(run_config["scenario"]), [app_dir])
    return load_scenario(path, parse_override_string(str(run_config.get("overrides", ""))))
